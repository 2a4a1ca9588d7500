"""Batched multi-turn rollouts: the policy writes tool calls token by token, the gym answers
with observation tokens, until `submit` or the turn limit.

All episodes of a batch advance one position per step (a policy-sampled token, or a prompt or
observation token fed in), sharing one position index and one preallocated key/value cache, so
each step is a single one-token forward pass. Sampling uses its own float64 uniforms and the
inverse CDF with an explicit generator, so results do not depend on torch's multinomial.
"""
from collections import deque
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .gym import END_CALL, MAX_CALL_TOKENS, Episode
from .vocab import PAD


@dataclass
class Rollout:
    """A batch of finished episodes. `tokens` (B, T); `policy_mask` (B, T) marks the tokens the
    policy sampled; `logp` (B, T) their log-probabilities at the sampling temperature (0
    elsewhere); `rewards` (B,); `episodes` the gym records (reads, malformed calls, edits)."""
    tokens: torch.Tensor
    policy_mask: torch.Tensor
    logp: torch.Tensor
    rewards: torch.Tensor
    episodes: list
    temperature: float


def sample_tokens(logits, gen):
    """One token per row by inverse CDF on float64 uniforms; returns (tokens, log-probs (B, V))."""
    logprobs = F.log_softmax(logits, dim=-1)
    u = torch.rand(logits.shape[0], 1, generator=gen, dtype=torch.float64)
    cdf = logprobs.exp().cumsum(-1)
    tokens = torch.searchsorted(cdf, u, right=True).clamp(max=logits.shape[-1] - 1)[:, 0]
    return tokens, logprobs


@torch.no_grad()
def rollout(policy, tasks, gen, temperature=1.0):
    """Run one episode per task in `tasks` (repeat a task for a group of attempts)."""
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    episodes = [Episode.start(task, gen) for task in tasks]
    B, T = len(episodes), policy.cfg.block_size
    queues = [deque(ep.prompt()) for ep in episodes]      # tokens to feed before sampling again
    calls = [[] for _ in episodes]                        # the call being written
    rows = [[q.popleft()] for q in queues]                # each episode's tokens so far
    sampled_at = [[] for _ in episodes]                   # (position, log-prob) of policy tokens
    cache = policy.new_cache(B)
    for pos in range(T - 1):
        if all(ep.done and not q for ep, q in zip(episodes, queues)):
            break
        current = torch.tensor([row[pos] for row in rows])
        logits = policy.step(current, pos, cache) / temperature             # (B, V)
        sampled, logprobs = sample_tokens(logits, gen)
        sampled_logp = logprobs.gather(1, sampled[:, None])[:, 0].tolist()
        for i, (ep, tok) in enumerate(zip(episodes, sampled.tolist())):
            if queues[i]:
                rows[i].append(queues[i].popleft())
            elif ep.done:
                rows[i].append(PAD)
            else:
                rows[i].append(tok)
                sampled_at[i].append((pos + 1, sampled_logp[i]))
                calls[i].append(tok)
                if tok == END_CALL or len(calls[i]) == MAX_CALL_TOKENS:
                    queues[i].extend(ep.step(calls[i]))
                    calls[i] = []
    tokens = torch.tensor(rows)                                              # (B, T')
    policy_mask = torch.zeros(tokens.shape, dtype=torch.bool)
    logp = torch.zeros(tokens.shape, dtype=torch.float64)
    for i, pairs in enumerate(sampled_at):
        if pairs:
            where, values = zip(*pairs)
            policy_mask[i, list(where)] = True
            logp[i, list(where)] = torch.tensor(values, dtype=torch.float64)
    rewards = torch.tensor([ep.reward for ep in episodes], dtype=torch.float64)
    return Rollout(tokens, policy_mask, logp, rewards, episodes, temperature)


def token_logprobs(policy, tokens, temperature=1.0):
    """Recompute, with gradients, the log-probability of every token given its prefix.
    Returns (logp (B, T), log-distributions (B, T, V)); position 0 has no prediction (0)."""
    logprobs = F.log_softmax(policy(tokens[:, :-1]) / temperature, dim=-1)   # (B, T-1, V)
    logp = logprobs.gather(-1, tokens[:, 1:, None])[..., 0]                   # (B, T-1)
    logp = F.pad(logp, (1, 0))
    logprobs = F.pad(logprobs, (0, 0, 1, 0))
    return logp, logprobs
