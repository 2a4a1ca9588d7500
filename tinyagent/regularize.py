"""Chapter 10's trainer: Chapter 9's GRPO with the chapter's regularizers.

The estimators and the entropy bonus live in the leaf module `kl`; this module adds the
configuration, the regularized loss (Chapter 9's loss with its KL term generalized and an entropy
bonus), the KL in the reward, and an adaptive KL coefficient, handed to Chapter 9's loop as its
`LoopHooks`. The update itself is Chapter 9's
`rl_update`, which does not change: Chapter 10 hands it another loss.
"""
from dataclasses import dataclass

import torch

from .checks import finite_positive, instance
from .grpo import LoopHooks, RLConfig, coefficient, policy_loss, rl_update, train_rl
from .kl import (KL_ESTIMATE_KINDS, entropy_bonus, kl_estimate, masked_mean,
                 sequence_kl)

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
                       kl_coef and following `AdaptiveKLController` each step (Exercise 5) (None)
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
        object.__setattr__(self, "entropy_coef", coefficient("entropy_coef", self.entropy_coef))
        if self.entropy_positions not in ENTROPY_POSITIONS:
            raise ValueError(f"unknown entropy_positions {self.entropy_positions!r}; allowed: "
                             f"{', '.join(ENTROPY_POSITIONS)}")
        if self.kl_target is not None:      # inf would shrink beta whatever the KL
            object.__setattr__(self, "kl_target", finite_positive("kl_target", self.kl_target))
            if not self.kl_coef > 0:
                raise ValueError(f"an adaptive KL coefficient needs kl_target > 0 and a "
                                 f"starting kl_coef > 0, got kl_target={self.kl_target}, "
                                 f"kl_coef={self.kl_coef}")


def first_choices(mask):
    """The policy positions (B, T) that open a decision after the prompt or an observation: the
    second policy token of each call that follows a non-policy token. Defined in Exercise 6."""
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.ndim != 2:
        raise TypeError(f"mask must be a bool tensor (B, T), got "
                        f"{getattr(mask, 'dtype', type(mask).__name__)} of shape "
                        f"{tuple(getattr(mask, 'shape', ()))}")
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
        # no first choice in the minibatch: nothing to reward, so no bonus (not a mean of nothing)
        bonus = entropy_bonus(log_dist[chosen[mask]], chosen) if chosen.any() else 0.0
    beta = cfg.kl_coef if cfg.kl_placement == "loss" else 0.0
    loss = pg_loss + beta * kl - cfg.entropy_coef * bonus    # Chapter 10: minus the bonus
    return loss, {"clip_frac": clip_frac, "entropy": entropy.item(), "kl": kl.item()}


def regularized_update(policy, optimizer, batch, advantages, ref_logp, cfg, gen):
    """Chapter 9's `rl_update` on `regularized_loss`. Defined in Section 10.6."""
    return rl_update(policy, optimizer, batch, advantages, ref_logp, cfg, gen,
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


def kl_in_reward(batch, ref_logp, cfg):
    """The reward placement (Section 10.4): each episode's reward minus kl_coef times its sequence
    KL, the sum of k1 over its tokens (the sampler's log-probs against the reference's). Returns
    (rewards (B,), what it logs)."""
    seq_kl = sequence_kl(batch.logp, ref_logp, batch.policy_mask)           # (B,)
    return batch.rewards - cfg.kl_coef * seq_kl, {"sequence_kl": seq_kl.mean().item()}


class AdaptiveKLController:
    """An adaptive beta, as verl's controller of the same name: `value` starts at `init` and each
    `update(kl)` moves it by `adaptive_kl_coef` toward `target`. Defined in Exercise 5."""

    def __init__(self, init, target, horizon=10):
        adaptive_kl_coef(init, target, target, horizon)     # refuses what update could not step
        self.value, self.target, self.horizon = init, target, horizon

    def update(self, kl):
        self.value = adaptive_kl_coef(self.value, kl, self.target, self.horizon)
        return self.value


def regularized_hooks(cfg):
    """Chapter 10's pieces for Chapter 9's loop under `cfg`: `regularized_loss`, the KL in the
    reward when kl_placement is "reward", and with `cfg.kl_target` an adaptive beta."""
    return LoopHooks(
        loss_fn=regularized_loss,
        shape_rewards=kl_in_reward if cfg.kl_placement == "reward" else None,
        kl_controller=(AdaptiveKLController(cfg.kl_coef, cfg.kl_target)
                       if cfg.kl_target is not None else None))


def train_regularized(policy, cfg=RegularizedConfig(), steps=40, tasks=None, reference=None,
                      state=None, progress=True):
    """Chapter 9's `train_rl` loop with Chapter 10's pieces passed in (`regularized_hooks`): trains
    `policy` in place on `tasks` (default: the gym's 200 training tasks) and returns the per-step
    log, with the adaptive beta logged as `kl_coef`. `reference` defaults to a frozen copy of the
    start (pass another to continue a run anchored elsewhere); an earlier call's `state` continues
    its run, as in `train_rl`. Defined in Section 10.6.

    Which trainer: this one whenever a Chapter 10 regularizer is on (a KL penalty with any
    estimator, `k3+` included, the KL in the reward, an entropy bonus, an adaptive beta); its
    default 40 steps are Section 10.7's runs. `train_rl` is Chapter 9's loop (80 steps by default)
    and takes an `RLConfig`, whose KL penalty knows k1, k2 and k3 only. With every regularizer off
    both give the same parameters bit for bit."""
    cfg = instance("cfg", cfg, RegularizedConfig)
    return train_rl(policy, cfg, steps, tasks, reference, regularized_hooks(cfg), state, progress)
