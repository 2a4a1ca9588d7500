"""Chapter 9: GRPO on TinyAgent (sampling a step, group advantages, the clipped loss, the
per-token KL penalty, the update and the training loop). The KL estimators and the entropy
come from the leaf module `kl`; their Chapter 9 names stay importable from here."""
import copy
import math
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Callable

import torch
from torch.profiler import record_function
from tqdm.auto import trange

from . import engine
from .engine import Adam
from .checks import (NonFiniteError, finite_nonempty, instance, nonempty_list, positive_int,
                     real_number, require_finite, seed_int, temperature)
from .gym import TRAIN_TASKS
from .kl import KL_KINDS, kl_penalty, masked_mean, mismatch_kl, policy_entropy
from .policy import Policy
from .sampler import rollout, token_logprobs


# The largest learning rate or loss coefficient a config takes: a coefficient times a loss term
# must stay far inside float32's range (3.4e38); at 1e39 one step overflows every parameter.
MAX_COEFFICIENT = 1e6


def check_group_size(value):
    """`value` as an int if it is an integer >= 2: advantages compare the attempts of a group."""
    if positive_int("group_size", value) < 2:
        raise ValueError(f"group_size must be at least 2: advantages compare the attempts of a "
                         f"group, and the std of one reward is NaN (got {value})")
    return int(value)


def coefficient(name, value):
    """`value` as a float if it is a real number in [0, MAX_COEFFICIENT]."""
    return real_number(name, value, lambda v: 0 <= v <= MAX_COEFFICIENT,
                       f"in [0, {MAX_COEFFICIENT:g}] (larger ones overflow the float32 policy)")


@dataclass(frozen=True)
class RLConfig:
    """Chapter 9's default GRPO configuration on TinyAgent.

    tasks_per_step  groups per step (8)
    group_size      attempts at the same task; advantages are relative within a group (8)
    epochs          passes over a step's batch (1)
    minibatches     optimizer steps per epoch (2)
    eps_low         PPO clip: ratio floor 1 - eps_low for negative advantages, in [0, 1) (0.2)
    eps_high        ratio ceiling 1 + eps_high for positive advantages, >= 0; DAPO's
                    clip-higher raises it, `math.inf` removes it (0.2)
    lr              Adam; the book reports ~0.1% of tokens clipped at it, our runs 0.5-0.8% in
                    their first 20 steps; 2e-3 is unstable (1e-3)
    temperature     sampling temperature; log-probs are computed at the same one (1.0)
    kl_coef         beta of a per-token KL loss to the reference; 0 turns it off (0.0)
    kl_kind         which estimator that loss uses, one of KL_KINDS (k3)
    seed            the one generator: task choice, episodes, minibatch order (0)
    """
    tasks_per_step: int = 8
    group_size: int = 8
    epochs: int = 1
    minibatches: int = 2
    eps_low: float = 0.2
    eps_high: float = 0.2
    lr: float = 1e-3
    temperature: float = 1.0
    kl_coef: float = 0.0
    kl_kind: str = "k3"
    seed: int = 0
    allowed_kl_kinds = KL_KINDS  # (a class attribute, not a field)

    def __post_init__(self):
        # Each field is checked and stored in its own type (kl_coef=0 becomes 0.0), so that equal
        # configs compare, print and key the run cache alike. NaN and inf are refused: one step
        # with either turns every parameter NaN while the logged reward still looks healthy.
        set_field = object.__setattr__.__get__(self)
        if self.kl_kind not in self.allowed_kl_kinds:
            raise ValueError(f"unknown kl_kind {self.kl_kind!r}; allowed: "
                             f"{', '.join(self.allowed_kl_kinds)}")
        for name in ("tasks_per_step", "epochs", "minibatches"):
            set_field(name, positive_int(name, getattr(self, name)))
        set_field("group_size", check_group_size(self.group_size))
        set_field("seed", seed_int("seed", self.seed))
        set_field("eps_low", real_number("eps_low", self.eps_low, lambda v: 0 <= v < 1,
                                         "in [0, 1) so the ratio floor 1 - eps_low stays positive"))
        set_field("eps_high", real_number("eps_high", self.eps_high, lambda v: v >= 0,
                                          "non-negative (math.inf removes the ceiling, as DAPO)"))
        for name in ("lr", "kl_coef"):
            set_field(name, coefficient(name, getattr(self, name)))
        set_field("temperature", temperature("temperature", self.temperature))
        if self.episodes_per_step % self.minibatches:
            raise ValueError(f"minibatches ({self.minibatches}) must divide the "
                             f"{self.episodes_per_step} episodes of a step")

    @property
    def episodes_per_step(self):
        return self.tasks_per_step * self.group_size


def sample_step(policy, cfg, gen, tasks=None):
    """One step's batch: `cfg.tasks_per_step` of `tasks` (default: the training tasks),
    `cfg.group_size` attempts each, grouped consecutively."""
    tasks = TRAIN_TASKS if tasks is None else tasks
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
    group_size = check_group_size(group_size)
    if isinstance(rewards, torch.Tensor) and not rewards.is_floating_point():
        rewards = rewards.double()                      # 0/1 rewards as integers are rewards
    finite_nonempty("rewards", rewards)
    if rewards.ndim != 1 or rewards.numel() % group_size:
        raise ValueError(f"rewards must be 1-D with a length divisible by group_size={group_size}, "
                         f"got shape {tuple(rewards.shape)}")
    groups = rewards.view(-1, group_size)                                # (G, group_size)
    std = groups.std(dim=1, keepdim=True)                                # (G, 1)
    identical = std == 0
    adv = torch.where(identical, torch.zeros_like(groups),
                      (groups - groups.mean(1, keepdim=True)) / std)
    return adv.reshape(-1), identical.double().mean().item()


def policy_loss(logp, old_logp, advantages, mask, cfg):
    """PPO's clipped surrogate, token-mean over the policy tokens of a minibatch.
    `advantages` is per episode (B,), broadcast over its tokens. Returns (loss, clip fraction)."""
    if logp.ndim != 2 or old_logp.shape != logp.shape:
        raise ValueError(f"logp and old_logp must be (B, T) of the same shape, got "
                         f"{tuple(logp.shape)} and {tuple(old_logp.shape)}")
    if not isinstance(advantages, torch.Tensor) or advantages.shape != logp.shape[:1]:
        raise ValueError(f"advantages must be a tensor (B,), one per episode (row of logp, "
                         f"B={logp.shape[0]}), got {getattr(advantages, 'shape', advantages)!r}")
    if advantages.isnan().any():
        raise ValueError("advantages must not contain NaN (a group of one reward has NaN std)")
    ratio = torch.exp(logp - old_logp)                                   # (B, T)
    adv = advantages[:, None]                                            # (B, 1)
    clipped = torch.clamp(ratio, 1 - cfg.eps_low, 1 + cfg.eps_high)
    loss = masked_mean(-torch.minimum(ratio * adv, clipped * adv), mask)
    binds = ((adv > 0) & (ratio > 1 + cfg.eps_high)) | ((adv < 0) & (ratio < 1 - cfg.eps_low))
    return loss, masked_mean(binds.double(), mask).item()


def grpo_loss(logp, old_logp, ref_logp, log_dist, advantages, mask, cfg):
    """Chapter 9's loss on one minibatch, pg_loss + kl_coef * kl, and what it logs.
    `log_dist` holds the policy's log-distributions at the policy positions (N, V)."""
    pg_loss, clip_frac = policy_loss(logp, old_logp, advantages, mask, cfg)
    kl = masked_mean(kl_penalty(logp, ref_logp, cfg.kl_kind), mask)
    loss = pg_loss + cfg.kl_coef * kl
    entropy = policy_entropy(log_dist.detach(), mask)
    return loss, {"clip_frac": clip_frac, "entropy": entropy.item(), "kl": kl.item()}


def reference_logprobs(reference, batch):
    """The reference policy's log-probabilities of the batch's policy tokens (B, T), no gradient."""
    with torch.no_grad():
        ref_logp, _ = token_logprobs(reference, batch.tokens, batch.temperature, batch.policy_mask)
    return ref_logp


def rl_update(policy, optimizer, batch, advantages, ref_logp, cfg, gen, loss_fn=grpo_loss):
    """One GRPO update on a batch: `cfg.epochs` passes of `cfg.minibatches` Adam steps on
    `loss_fn` (Chapter 9's `grpo_loss`; Chapter 10 passes its own). pi_old is the sampler's
    log-probabilities (as in prime-rl): the same weights, so no forward pass recomputes them.
    Log-probs are computed only at the policy's tokens, the only ones a loss reads; `ref_logp`
    holds the reference's (`reference_logprobs`). Returns the minibatch statistics averaged, the
    batch's k3 distance to the reference, and the mismatch between the sampler's log-probs and
    the trainer's (on the first minibatch, before any step changes the weights)."""
    tokens, mask, temperature = batch.tokens, batch.policy_mask, cfg.temperature   # (B, T)
    old_logp = batch.logp                                                          # (B, T)
    stats, mismatch = [], None
    for _ in range(cfg.epochs):
        order = torch.randperm(tokens.shape[0], generator=gen)
        for mb in order.chunk(cfg.minibatches):
            logp, log_dist = token_logprobs(policy, tokens[mb], temperature, mask[mb])
            if mismatch is None:
                mismatch = mismatch_kl(logp.detach(), old_logp[mb], mask[mb]).item()
            loss, mb_stats = loss_fn(logp, old_logp[mb], ref_logp[mb], log_dist,
                                     advantages[mb], mask[mb], cfg)
            require_finite("the loss", loss)
            optimizer.zero_grad()
            loss.backward()
            require_finite("the gradient norm", torch.nn.utils.get_total_norm(
                [p.grad for p in policy.parameters() if p.grad is not None]))
            optimizer.step()
            require_finite("the parameters", *policy.parameters())
            stats.append(mb_stats)
    out = {k: sum(s[k] for s in stats) / len(stats) for k in stats[0]}
    out["kl_to_ref"] = masked_mean(kl_penalty(old_logp, ref_logp, "k3"), mask).item()
    out["mismatch_kl"] = mismatch
    return out


def frozen_copy(policy):
    """The reference policy: a copy of `policy` that no optimizer touches."""
    reference = copy.deepcopy(policy)
    reference.requires_grad_(False)
    return reference


@dataclass(frozen=True)
class LoopHooks:
    """The three places where Chapter 10 changes Chapter 9's loop; the defaults are Chapter 9's.

    loss_fn        the minibatch loss `rl_update` minimizes (grpo_loss)
    shape_rewards  (batch, ref_logp, cfg) -> (rewards, log): the rewards changed before the group
                   advantages, e.g. the KL in the reward (None: the task rewards)
    kl_controller  an object whose `update(kl)` returns the next step's kl_coef from the KL this
                   step logged, e.g. an adaptive beta (None: beta stays fixed)
    """
    loss_fn: Callable = grpo_loss
    shape_rewards: Callable | None = None
    kl_controller: object = None


@dataclass
class TrainingState:
    """What a run carries from one call of `train_rl` to the next: Adam's moments, the one random
    generator and the next step's number. Passing the same state to a second call continues the
    run: 40 steps and then 40 more give the bits of 80."""
    optimizer: Adam
    generator: torch.Generator
    step: int = 0

    @classmethod
    def start(cls, policy, cfg):
        """A fresh run's state: Adam at `cfg.lr` on `policy`, the generator seeded with `cfg.seed`."""
        return cls(Adam(policy.parameters(), lr=cfg.lr), torch.Generator().manual_seed(cfg.seed))


def train_rl(policy, cfg=RLConfig(), steps=80, tasks=None, reference=None, hooks=LoopHooks(),
             state=None, progress=True):
    """The GRPO loop, Chapter 9's and (with its `hooks`) Chapter 10's. Trains `policy` in place on
    `tasks` (default: the gym's 200 training tasks, `TRAIN_TASKS`), anchored to `reference`
    (default: a frozen copy of its start), and returns the per-step log: a list of dicts, one per
    step (the README lists their keys). An earlier call's `state` continues its run, the log
    numbered from `state.step`. Sampling and updating are labelled for the profiler.

    Which trainer: this one for Chapter 9's run (an `RLConfig`; the default 80 steps are Chapter
    9's), or to pass your own `LoopHooks`; `train_regularized` for any of Chapter 10's
    regularizers (a `RegularizedConfig`: a KL penalty with any estimator, the KL in the reward, an
    entropy bonus, an adaptive beta), which builds the hooks and calls this loop. With every
    regularizer off the two give the same parameters bit for bit.

    `progress`: True shows a progress bar, False nothing; a function is called with each step's
    log as the step ends (how the harness counts the steps of runs in worker processes)."""
    tasks = TRAIN_TASKS if tasks is None else tasks
    report = progress if callable(progress) else None
    if not isinstance(progress, bool) and report is None:
        raise TypeError(f"progress must be True (a progress bar), False (nothing) or a function "
                        f"called with each step's log, got {progress!r:.100}")
    positive_int("steps", steps)
    instance("policy", policy, Policy)
    cfg, tasks = instance("cfg", cfg, RLConfig), nonempty_list("tasks", tasks)
    hooks = instance("hooks", hooks, LoopHooks)
    if reference is not None:
        instance("reference", reference, Policy)
    if state is not None:
        instance("state", state, TrainingState)
    # Every argument is checked before the first work: a copy of the policy, Adam's moments.
    reference = frozen_copy(policy) if reference is None else reference
    state = TrainingState.start(policy, cfg) if state is None else state
    history = []
    # One torch thread: a run's passes are too small to share between threads (on a busy
    # machine two are many times slower), and the stored runs were computed on one.
    with engine.torch_threads(1):
        for step in trange(state.step, state.step + steps, desc="GRPO",
                           disable=progress is not True):
            with record_function("sampling"):
                batch = sample_step(policy, cfg, state.generator, tasks)
            with record_function("update"), _naming_step(step, cfg):
                log = {"step": step, **behavior_stats(batch), "kl_coef": cfg.kl_coef}
                ref_logp = reference_logprobs(reference, batch)                    # (B, T)
                rewards = batch.rewards                                            # (B,)
                if hooks.shape_rewards is not None:
                    rewards, shaped = hooks.shape_rewards(batch, ref_logp, cfg)
                    log.update(shaped)
                advantages, log["zero_adv_groups"] = compute_advantages(rewards, cfg.group_size)
                log.update(rl_update(policy, state.optimizer, batch, advantages, ref_logp, cfg,
                                     state.generator, hooks.loss_fn))
            if hooks.kl_controller is not None:
                cfg = replace(cfg, kl_coef=hooks.kl_controller.update(log["kl"]))
            history.append(log)
            state.step = step + 1
            if report is not None:
                report(log)
    return history


@contextmanager
def _naming_step(step, cfg):
    """Re-raise a NonFiniteError with the step and the likely cause."""
    try:
        yield
    except NonFiniteError as err:
        raise NonFiniteError(
            f"step {step}: {err}; the run stops here rather than train on it. Likely cause: a "
            f"learning rate or coefficient too large for float32 ({cfg})") from None
