"""Batched multi-turn rollouts: the policy writes tool calls token by token, the gym answers
with observation tokens, until `submit` or the turn limit.

Every episode's prompt has the same length, so the prompts go through the model in one pass
that fills a preallocated key/value cache. After that, all running episodes advance one
position per step (a policy-sampled token, or an observation token fed in) with a single
one-token forward pass, whose logits are computed only for the episodes that sample next; an
episode that has ended leaves the batch and its cache rows.
Sampling uses its own float64 uniforms and the inverse CDF with an explicit generator (in
float64 even for a lower-precision copy of the policy), one uniform per episode and position
whether or not that position samples, so an episode's draws do not depend on how long the
others run, and results do not depend on torch's multinomial.
"""
from collections import deque
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from . import engine
from .checks import all_finite, instance, positive_int, temperature as check_temperature, token_ids
from .gym import MAX_EPISODE_TOKENS, Episode, Task, call_ended
from .policy import Policy
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


def check_logits(logits, pos):
    """Refuse the policy's next-token logits at `pos` if any is NaN or infinite: sampling from
    them would go on and score nonsense."""
    if not all_finite(logits):
        raise FloatingPointError(f"the policy's logits for position {pos} are not finite (NaN or "
                                 f"inf): its weights are probably non-finite (a coefficient or "
                                 f"learning rate that overflows float32); rollout stopped")


def check_complete(episodes, block_size):
    """Refuse a batch in which `block_size` cut an episode off before it ended: it would score 0
    as if it had failed."""
    cut = [i for i, episode in enumerate(episodes) if not episode.done]
    if cut:
        raise ValueError(f"block_size {block_size} cut off {len(cut)} of {len(episodes)} "
                         f"episodes (first: {cut[:5]}) before submit or the turn limit; the "
                         f"longest episode needs {MAX_EPISODE_TOKENS} positions")


def sample_tokens(logits, uniforms):
    """One token per row by inverse CDF: the first token whose cumulative probability exceeds
    the row's uniform (B, 1). Returns (tokens (B,), log-probs (B, V))."""
    logprobs = F.log_softmax(logits, dim=-1)
    cdf = logprobs.exp().cumsum(-1)
    tokens = torch.searchsorted(cdf, uniforms, right=True).clamp(max=logits.shape[-1] - 1)[:, 0]
    return tokens, logprobs


def draw_uniforms(n, gen):
    """Uniforms (n, 1) in float64 from the explicit generator."""
    return torch.rand(n, 1, generator=gen, dtype=torch.float64)


def rollout(policy, tasks, gen, temperature=1.0):
    """Run one episode per task in `tasks` (repeat a task for a group of attempts)."""
    check_temperature("temperature", temperature)
    instance("policy", policy, Policy)
    instance("gen", gen, torch.Generator)       # None would draw from torch's global generator
    if not isinstance(tasks, (list, tuple)):
        raise TypeError(f"tasks must be a list or tuple of Tasks (repeat a task for a group of "
                        f"attempts), got a {type(tasks).__name__}")
    if not tasks:
        raise ValueError("rollout needs at least one task")
    for task in tasks:
        instance("each task", task, Task)
    episodes = [Episode.start(task, gen) for task in tasks]
    # Inference mode: no autograd bookkeeping for the ~70 small operators of every position; one
    # torch thread, as in training (`train_rl`).
    with torch.inference_mode(), engine.torch_threads(1):
        rows, sampled_at = _decode(engine.Decoder(policy), episodes, gen, temperature)
    check_complete(episodes, policy.cfg.block_size)
    # Packed through numpy, which copies a list into an array row ten times faster than
    # torch.tensor reads nested lists.
    tokens = np.full((len(rows), max(len(row) for row in rows)), PAD, dtype=np.int64)  # (B, T)
    for i, row in enumerate(rows):
        tokens[i, :len(row)] = row
    tokens = torch.from_numpy(tokens)
    policy_mask = torch.zeros(tokens.shape, dtype=torch.bool)
    logp = torch.zeros(tokens.shape, dtype=torch.float64)
    sampled = [pair for pairs in sampled_at for pair in pairs]            # (position, log-prob)
    if sampled:                                           # one write each for the whole batch
        where = (torch.from_numpy(np.repeat(np.arange(len(rows)), [len(p) for p in sampled_at])),
                 torch.tensor([pos for pos, _ in sampled]))               # (row, position)
        policy_mask[where] = True
        logp[where] = torch.tensor([lp for _, lp in sampled], dtype=torch.float64)
    rewards = torch.tensor([ep.reward for ep in episodes], dtype=torch.float64)
    return Rollout(tokens, policy_mask, logp, rewards, episodes, temperature)


def _decode(decoder, episodes, gen, temperature):
    """The episodes played to their end: each one's tokens (a list per episode) and the
    (position, log-prob) of every token the policy sampled."""
    B, max_len = len(episodes), decoder.policy.cfg.block_size
    rows = [ep.prompt() for ep in episodes]               # each episode's tokens so far
    P = len(rows[0])                                      # every prompt has the same length
    queues = [deque() for _ in episodes]                  # observation tokens still to feed
    calls = [[] for _ in episodes]                        # the call being written
    sampled_at = [[] for _ in episodes]                   # (position, log-prob) of policy tokens
    cache = decoder.new_cache(B)
    for _ in range(P - 1):                                # prompt positions: nothing to sample
        draw_uniforms(B, gen)
    logits = decoder.prefill(torch.tensor(rows), cache)                     # (B, V)
    check_logits(logits, P)                           # in the policy's precision: a cheaper sum
    logits = logits.double()
    running = list(range(B))                              # episodes still in the batch
    sampling = running                                    # those whose next token is sampled
    for pos in range(P - 1, max_len - 1):                 # the token at pos + 1
        uniforms = draw_uniforms(B, gen)                  # one per episode, sampled or not
        picks = iter(())                                  # (token, log-prob) per sampling episode
        if sampling:
            sampled, logprobs = sample_tokens(logits / temperature, uniforms[sampling])
            picks = zip(sampled.tolist(), logprobs.gather(1, sampled[:, None])[:, 0].tolist())
        for i in running:
            if queues[i]:
                rows[i].append(queues[i].popleft())
                continue
            tok, lp = next(picks)
            rows[i].append(tok)
            sampled_at[i].append((pos + 1, lp))
            calls[i].append(tok)
            if call_ended(calls[i]):
                queues[i].extend(episodes[i].step(calls[i]))
                calls[i] = []
        keep = [j for j, i in enumerate(running) if not (episodes[i].done and not queues[i])]
        if not keep:
            break
        if len(keep) < len(running):                      # drop finished episodes' cache rows
            running = [running[j] for j in keep]
            cache = decoder.compact(cache, keep, pos + 1)    # positions 0 .. pos are filled
        current = torch.tensor([rows[i][pos + 1] for i in running])
        # Logits only where the policy samples next: an observation token fed in needs none.
        heads = [j for j, i in enumerate(running) if not queues[i]]
        sampling = [running[j] for j in heads]
        logits = decoder.step(current, pos + 1, cache, heads if len(heads) < len(running) else None)
        check_logits(logits, pos + 2)                                          # (len(heads), V)
        logits = logits.double()
    return rows, sampled_at


def token_logprobs(policy, tokens, temperature=1.0, mask=None, group_rows=8):
    """Recompute, with gradients, each token's log-probability given its prefix.

    Returns (logp (B, T), log_dist): logp is 0 at position 0, which has no prediction. Without
    a `mask`, log_dist is the log-distribution over the vocabulary at every position (B, T, V).
    With a `mask` (B, T), only the masked positions are computed (the policy's tokens, the only
    ones a loss reads): logp is 0 elsewhere and log_dist is (N, V), one row per masked position
    in row-major order. The model then runs on groups of `group_rows` episodes of similar
    length, each cut at its last masked token, instead of on a batch padded to the longest.
    """
    check_temperature("temperature", temperature)
    instance("policy", policy, Policy)
    token_ids("tokens", tokens, policy.cfg.vocab_size)
    positive_int("group_rows", group_rows)
    if mask is not None and (not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool):
        raise TypeError(f"mask must be a bool tensor (True at the positions to compute), got "
                        f"{getattr(mask, 'dtype', type(mask).__name__)}")
    if mask is None:
        log_dist = F.log_softmax(engine.logits(policy, tokens[:, :-1]) / temperature, dim=-1)   # (B, T-1, V)
        logp = log_dist.gather(-1, tokens[:, 1:, None])[..., 0]                 # (B, T-1)
        return F.pad(logp, (1, 0)), F.pad(log_dist, (0, 0, 1, 0))
    if mask.shape != tokens.shape or mask[:, 0].any():
        raise ValueError(f"mask must be (B, T) like tokens {tuple(tokens.shape)} and False at "
                         f"position 0, got {tuple(mask.shape)}")
    predicted = mask[:, 1:]                               # (B, T-1): positions that predict one
    slot = torch.full(predicted.shape, -1)                # each one's row in the packed output
    slot[predicted] = torch.arange(int(predicted.sum()))
    ends = predicted.cumsum(1).argmax(1) + 1              # (B,) cut after the last one
    features, slots = [], []
    for rows in ends.argsort(stable=True).split(group_rows):
        width = int(ends[rows].max())
        keep = predicted[rows, :width]                                         # (b, width)
        features.append(engine.features(policy, tokens[rows, :width], keep))      # (n, C)
        slots.append(slot[rows, :width][keep])
    features = torch.cat(features)[torch.cat(slots).argsort()]                 # (N, C)
    log_dist = F.log_softmax(engine.head(policy, features) / temperature, dim=-1)      # (N, V)
    picked = log_dist.gather(-1, tokens[:, 1:][predicted][:, None])[:, 0]      # (N,)
    logp = torch.zeros(tokens.shape, dtype=log_dist.dtype).masked_scatter(mask, picked)  # (B, T)
    return logp, log_dist
