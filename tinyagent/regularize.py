"""Chapter 10's trainer: Chapter 9's GRPO with the chapter's regularizers.

The estimators and the entropy bonus live in the leaf module `kl`; this module adds the
configuration, the regularized loss (Chapter 9's loss with its KL term generalized and an entropy
bonus), the KL in the reward, and an adaptive KL coefficient. The update itself is Chapter 9's
`rl_update`, which does not change: Chapter 10 hands it another loss.
"""
from dataclasses import dataclass, replace

import torch
from tqdm.auto import trange

from .grpo import (RLConfig, behavior_stats, compute_advantages, frozen_copy, policy_loss,
                   rl_update, sample_step)
from .gym import TRAIN_TASKS
from .kl import (KL_ESTIMATE_KINDS, entropy_bonus, kl_estimate, masked_mean,
                 sequence_kl)
from .sampler import token_logprobs

KL_PLACEMENTS = ("loss", "reward")
ENTROPY_POSITIONS = ("all", "after_observation")


@dataclass(frozen=True)
class RegularizedConfig(RLConfig):
    """Chapter 9's configuration plus the chapter's regularizers, all off by default.
    Defined in Section 10.6.

    kl_coef            beta, in either placement (inherited from RLConfig)
    kl_kind            the loss placement's estimator: k1, k2, k3, or k1+, k2+, k3+, which keep
                       the estimator's value with k2's (the reverse-KL) gradient (Section 10.3)
    kl_placement       "loss": the loss adds beta * the mean per-token estimate;
                       "reward": each episode's reward loses beta * its sequence KL, a sum of
                       k1 over its tokens (Section 10.4), so kl_kind must be "k1" ("loss")
    entropy_coef       alpha: the loss subtracts alpha * entropy_bonus (0.0)
    entropy_positions  where the bonus applies: "all" policy tokens, or "after_observation",
                       the first choice after the prompt or a tool's answer: the token after the
                       `<call>` opener, which the grammar fixes ("all")
    kl_target          None keeps beta fixed; a target KL makes beta adaptive, starting at
                       kl_coef and following `adaptive_kl_coef` each step (Exercise 5) (None)
    """
    kl_placement: str = "loss"
    entropy_coef: float = 0.0
    entropy_positions: str = "all"
    kl_target: float | None = None
    allowed_kl_kinds = KL_ESTIMATE_KINDS

    def __post_init__(self):
        super().__post_init__()
        if self.kl_placement not in KL_PLACEMENTS:
            raise ValueError(f"unknown kl_placement {self.kl_placement!r}; allowed: "
                             f"{', '.join(KL_PLACEMENTS)}")
        if self.kl_placement == "reward" and self.kl_kind != "k1":
            raise ValueError(f"the reward placement subtracts the sampled sequence KL, a sum of k1; "
                             f"set kl_kind='k1' (got {self.kl_kind!r})")
        if not self.entropy_coef >= 0:                       # also refuses NaN
            raise ValueError(f"entropy_coef must be non-negative, got {self.entropy_coef}")
        if self.entropy_positions not in ENTROPY_POSITIONS:
            raise ValueError(f"unknown entropy_positions {self.entropy_positions!r}; allowed: "
                             f"{', '.join(ENTROPY_POSITIONS)}")
        if self.kl_target is not None and not (self.kl_target > 0 and self.kl_coef > 0):
            raise ValueError(f"an adaptive KL coefficient needs kl_target > 0 and a starting "
                             f"kl_coef > 0, got kl_target={self.kl_target}, kl_coef={self.kl_coef}")


def first_choices(mask):
    """The policy positions (B, T) that open a decision after the prompt or an observation: the
    second policy token of each call that follows a non-policy token. Defined in Exercise 6."""
    chosen = torch.zeros_like(mask)
    chosen[:, 2:] = mask[:, 2:] & mask[:, 1:-1] & ~mask[:, :-2]
    return chosen


def regularized_loss(logp, old_logp, ref_logp, log_dist, advantages, mask, cfg):
    """Chapter 9's `grpo_loss` with the chapter's changes, marked below: the KL term goes through
    `kl_estimate` (so kl_kind may be 'k3+') and counts only in the loss placement, and the loss
    subtracts entropy_coef * entropy_bonus. Logs the entropy at every policy position.
    Defined in Section 10.6."""
    pg_loss, clip_frac = policy_loss(logp, old_logp, advantages, mask, cfg)
    kl = masked_mean(kl_estimate(logp, ref_logp, cfg.kl_kind), mask)     # Chapter 10: any estimator
    entropy = entropy_bonus(log_dist, mask)                 # Chapter 10: log-probs are valid logits
    bonus = entropy
    if cfg.entropy_positions == "after_observation":       # Chapter 10, Exercise 6
        chosen = first_choices(mask)
        bonus = entropy_bonus(log_dist[chosen[mask]], chosen)
    beta = cfg.kl_coef if cfg.kl_placement == "loss" else 0.0
    loss = pg_loss + beta * kl - cfg.entropy_coef * bonus    # Chapter 10: minus the bonus
    return loss, {"clip_frac": clip_frac, "entropy": entropy.item(), "kl": kl.item()}


def regularized_update(policy, reference, optimizer, batch, advantages, cfg, gen):
    """Chapter 9's `rl_update` on `regularized_loss`. Defined in Section 10.6."""
    return rl_update(policy, reference, optimizer, batch, advantages, cfg, gen,
                     loss_fn=regularized_loss)


def adaptive_kl_coef(beta, kl, target, horizon=10):
    """One step of verl's AdaptiveKLController: beta * (1 + clip(kl / target - 1, ±0.2) / horizon).
    Beta grows while the measured KL is above the target and shrinks while it is below.
    Defined in Exercise 5."""
    if not (beta > 0 and target > 0 and horizon > 0) or kl != kl:
        raise ValueError(f"need beta > 0, target > 0, horizon > 0 and a measured kl, got "
                         f"beta={beta}, target={target}, horizon={horizon}, kl={kl}")
    error = min(max(kl / target - 1, -0.2), 0.2)
    return beta * (1 + error / horizon)


def train_regularized(policy, cfg=RegularizedConfig(), steps=40, tasks=TRAIN_TASKS,
                      reference=None, progress=True):
    """Chapter 9's `train_rl` loop (without periodic evaluation) on `regularized_update`, plus
    the reward placement: with kl_placement "reward", each episode's reward becomes
    r - kl_coef * sequence_kl (sampler log-probs against the reference) before the advantages.
    `reference` defaults to a frozen copy of the start (pass another to continue a run anchored
    elsewhere). With `cfg.kl_target`, beta adapts after every step and is logged as `kl_coef`.
    Trains in place; returns the per-step log. Defined in Section 10.6."""
    reference = frozen_copy(policy) if reference is None else reference
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    gen = torch.Generator().manual_seed(cfg.seed)
    history = []
    for step in trange(steps, desc="regularized GRPO", disable=not progress):
        batch = sample_step(policy, cfg, gen, tasks)
        rewards = batch.rewards                                             # (B,)
        log = {"step": step, **behavior_stats(batch), "kl_coef": cfg.kl_coef}
        if cfg.kl_placement == "reward":
            with torch.no_grad():
                ref_logp, _ = token_logprobs(reference, batch.tokens, cfg.temperature,
                                             batch.policy_mask)             # (B, T)
            seq_kl = sequence_kl(batch.logp, ref_logp, batch.policy_mask)   # (B,)
            rewards = rewards - cfg.kl_coef * seq_kl
            log["sequence_kl"] = seq_kl.mean().item()
        advantages, log["zero_adv_groups"] = compute_advantages(rewards, cfg.group_size)
        log.update(regularized_update(policy, reference, optimizer, batch, advantages, cfg, gen))
        if cfg.kl_target is not None:                                      # Exercise 5
            cfg = replace(cfg, kl_coef=adaptive_kl_coef(cfg.kl_coef, log["kl"], cfg.kl_target))
        history.append(log)
    return history
