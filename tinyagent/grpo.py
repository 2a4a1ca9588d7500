"""Chapter 9: GRPO on TinyAgent (sampling a step, group advantages, the clipped loss, the
per-token KL penalty, the update and the training loop)."""
import copy
from dataclasses import dataclass

import torch
from tqdm.auto import trange

from .gym import TRAIN_TASKS
from .sampler import rollout, token_logprobs

KL_KINDS = ("k1", "k2", "k3")


def _check_logps(logp, ref_logp):
    if logp.shape != ref_logp.shape:
        raise ValueError(f"logp and ref_logp must have the same shape, got {tuple(logp.shape)} "
                         f"and {tuple(ref_logp.shape)}")
    if torch.isnan(logp).any() or torch.isnan(ref_logp).any():
        raise ValueError("logp and ref_logp must not contain NaN log-probabilities")


def kl_penalty(logp, ref_logp, kind):
    """Schulman's per-token estimators of KL(pi || pi_ref) from the sampled tokens' log-probs.

    With l = ref_logp - logp: k1 = -l, k2 = l^2 / 2, k3 = e^l - 1 - l, elementwise.
    """
    if kind not in KL_KINDS:
        raise ValueError(f"unknown KL kind {kind!r}; allowed: {', '.join(KL_KINDS)}")
    _check_logps(logp, ref_logp)
    log_ratio = ref_logp - logp
    if kind == "k1":
        return -log_ratio
    if kind == "k2":
        return 0.5 * log_ratio ** 2
    return torch.expm1(log_ratio) - log_ratio


@dataclass(frozen=True)
class RLConfig:
    """Chapter 9's default GRPO configuration on TinyAgent."""
    tasks_per_step: int = 8      # groups per step
    group_size: int = 8          # attempts at the same task; advantages are relative within a group
    epochs: int = 1              # passes over the batch per step
    minibatches: int = 2         # optimizer steps per epoch
    eps_low: float = 0.2         # PPO clip: ratio floor 1 - eps_low for negative advantages
    eps_high: float = 0.2        # ratio ceiling 1 + eps_high for positive advantages (DAPO raises it)
    lr: float = 1e-3             # Adam; clips ~0.1% of tokens, as Chapter 9 reports; 2e-3 is unstable
    temperature: float = 1.0     # sampling temperature; log-probs are computed at the same one
    kl_coef: float = 0.0         # beta of a per-token KL loss to the reference (0: no KL)
    kl_kind: str = "k3"          # which estimator that loss uses
    seed: int = 0                # the one generator: task choice, episodes, minibatch order
    allowed_kl_kinds = KL_KINDS  # (a class attribute, not a field)

    def __post_init__(self):
        if self.kl_kind not in self.allowed_kl_kinds:
            raise ValueError(f"unknown kl_kind {self.kl_kind!r}; allowed: "
                             f"{', '.join(self.allowed_kl_kinds)}")
        for name in ("tasks_per_step", "group_size", "epochs", "minibatches"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        for name in ("eps_low", "eps_high", "lr", "kl_coef"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be non-negative, got {getattr(self, name)}")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be positive, got {self.temperature}")
        if self.episodes_per_step % self.minibatches:
            raise ValueError(f"minibatches ({self.minibatches}) must divide the "
                             f"{self.episodes_per_step} episodes of a step")

    @property
    def episodes_per_step(self):
        return self.tasks_per_step * self.group_size


def sample_step(policy, cfg, gen, tasks=TRAIN_TASKS):
    """One step's batch: `cfg.tasks_per_step` training tasks, `cfg.group_size` attempts each,
    grouped consecutively."""
    picks = torch.randint(len(tasks), (cfg.tasks_per_step,), generator=gen).tolist()
    return rollout(policy, [tasks[i] for i in picks for _ in range(cfg.group_size)], gen,
                   cfg.temperature)


def behavior_stats(batch):
    """What the agent did: mean reward, reads and malformed calls per episode, policy tokens."""
    eps = batch.episodes
    return {
        "reward": batch.rewards.mean().item(),
        "reads": sum(e.reads for e in eps) / len(eps),
        "malformed": sum(e.malformed for e in eps) / len(eps),
        "policy_tokens": batch.policy_mask.sum().item() / len(eps),
    }


def compute_advantages(rewards, group_size):
    """Group-normalized advantages (r - mean) / std within each group of attempts; exactly zero
    for a group whose rewards are identical. Returns (advantages, share of such groups)."""
    if rewards.ndim != 1 or rewards.numel() % group_size:
        raise ValueError(f"rewards must be 1-D with a length divisible by group_size={group_size}, "
                         f"got shape {tuple(rewards.shape)}")
    groups = rewards.view(-1, group_size)
    std = groups.std(dim=1, keepdim=True)
    flat = std == 0
    adv = torch.where(flat, torch.zeros_like(groups), (groups - groups.mean(1, keepdim=True)) / std)
    return adv.reshape(-1), flat.double().mean().item()


def masked_mean(x, mask):
    return (x * mask).sum() / mask.sum()


def policy_loss(logp, old_logp, advantages, mask, cfg):
    """PPO's clipped surrogate, token-mean over the policy tokens of a minibatch.
    `advantages` is per episode (B,), broadcast over its tokens. Returns (loss, clip fraction)."""
    ratio = torch.exp(logp - old_logp)                                   # (B, T)
    adv = advantages[:, None]
    clipped = torch.clamp(ratio, 1 - cfg.eps_low, 1 + cfg.eps_high)
    loss = masked_mean(-torch.minimum(ratio * adv, clipped * adv), mask)
    binds = ((adv > 0) & (ratio > 1 + cfg.eps_high)) | ((adv < 0) & (ratio < 1 - cfg.eps_low))
    return loss, masked_mean(binds.double(), mask).item()


def policy_entropy(logprobs, mask):
    """Mean full-vocabulary entropy (nats) at the policy positions."""
    return masked_mean(-(logprobs.exp() * logprobs).sum(-1), mask)


def rl_update(policy, reference, optimizer, batch, advantages, cfg, gen):
    """One GRPO update on a batch: pi_old log-probs recomputed here, then `cfg.epochs` passes of
    `cfg.minibatches` Adam steps on loss = pg_loss + kl_coef * kl."""
    tokens, mask, T = batch.tokens, batch.policy_mask, cfg.temperature
    with torch.no_grad():
        old_logp, _ = token_logprobs(policy, tokens, T)
        ref_logp, _ = token_logprobs(reference, tokens, T)
    stats = {"clip_frac": [], "entropy": [], "kl": []}
    for _ in range(cfg.epochs):
        order = torch.randperm(tokens.shape[0], generator=gen)
        for mb in order.chunk(cfg.minibatches):
            logp, logprobs = token_logprobs(policy, tokens[mb], T)
            pg_loss, clip_frac = policy_loss(logp, old_logp[mb], advantages[mb], mask[mb], cfg)
            kl = masked_mean(kl_penalty(logp, ref_logp[mb], cfg.kl_kind), mask[mb])
            loss = pg_loss + cfg.kl_coef * kl
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            stats["clip_frac"].append(clip_frac)
            stats["entropy"].append(policy_entropy(logprobs.detach(), mask[mb]).item())
            stats["kl"].append(kl.item())
    out = {k: sum(v) / len(v) for k, v in stats.items()}
    out["k3_to_ref"] = masked_mean(kl_penalty(old_logp, ref_logp, "k3"), mask).item()
    return out


def frozen_copy(policy):
    """The reference policy: a copy of `policy` that no optimizer touches."""
    reference = copy.deepcopy(policy)
    reference.requires_grad_(False)
    return reference


def train_rl(policy, cfg=RLConfig(), steps=80, tasks=TRAIN_TASKS, evaluate=None, eval_every=20,
             progress=True):
    """Chapter 9's GRPO loop. Trains `policy` in place from a frozen copy of its start (the
    reference) and returns the per-step log (a list of dicts, see the README's logged metrics).
    `evaluate(policy) -> dict`, if given, runs every `eval_every` steps and after the last."""
    reference = frozen_copy(policy)
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    gen = torch.Generator().manual_seed(cfg.seed)
    history = []
    for step in trange(steps, desc="GRPO", disable=not progress):
        batch = sample_step(policy, cfg, gen, tasks)
        advantages, zero_adv = compute_advantages(batch.rewards, cfg.group_size)
        log = {"step": step, **behavior_stats(batch), "zero_adv_groups": zero_adv}
        log.update(rl_update(policy, reference, optimizer, batch, advantages, cfg, gen))
        if evaluate is not None and ((step + 1) % eval_every == 0 or step + 1 == steps):
            log.update({f"eval_{k}": v for k, v in evaluate(policy).items()})
        history.append(log)
    return history
