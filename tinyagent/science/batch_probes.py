"""Measurements on one sampled batch, for Exercises 6 and 7: how much choice the base agent has at
the first policy token after an observation, how large the KL term's gradient is beside the policy
loss's, and how far a sampler's numbers drift from the trainer's (`kl.mismatch_kl`).

Each function samples its own batch from a generator it seeds, so the numbers do not depend on
what ran before. Nothing that trains or evaluates imports this module.
"""
import copy
import math

import pandas as pd
import torch

from ..grpo import compute_advantages, policy_loss, sample_step
from ..gym import TRAIN_TASKS
from ..harness.runs import policy_from_state
from ..kl import kl_estimate, masked_mean, mismatch_kl
from ..regularize import RegularizedConfig, first_choices
from ..sampler import rollout, token_logprobs
from ..vocab import ID
from .exercise_runs import REVIEW_BETA, SEEDS, SETTINGS, STEPS
from .experiments import seeded


def _entropy(log_dist):
    """Each row's entropy, in nats, of log-distributions (N, V)."""
    return -(log_dist.exp() * log_dist).sum(-1)


def first_choice_entropy(policy, seed=0):
    """Exercise 6 on one training batch of `policy` (64 episodes, generator `seed`): the positions
    that follow a non-policy token (the `<call>` opener), how certain the opener is there, and the
    mean entropy there, at the token after `<call>` (`regularize.first_choices`) and overall."""
    batch = sample_step(policy, RegularizedConfig(), torch.Generator().manual_seed(seed))
    mask = batch.policy_mask
    opens = torch.zeros_like(mask)
    opens[:, 1:] = mask[:, 1:] & ~mask[:, :-1]          # a policy token right after a non-policy one
    with torch.no_grad():
        _, dist = token_logprobs(policy, batch.tokens, 1.0, mask)            # (N, V)
    return pd.Series({
        "positions": int(opens.sum()),
        "smallest P(<call>) there": dist[opens[mask]][:, ID["<call>"]].exp().min().item(),
        "mean entropy there (nats)": _entropy(dist[opens[mask]]).mean().item(),
        "mean entropy at the token after <call>": _entropy(dist[first_choices(mask)[mask]]).mean().item(),
        "mean entropy at all policy tokens": _entropy(dist[mask[mask]]).mean().item(),
    }, name="RL base agent, one batch")


def gradient_share(policy, reference, cfg, gen, beta=REVIEW_BETA):
    """On one training batch of `policy` under `cfg` (drawn from `gen`), as on the first minibatch
    of an update: the batch's k3 to `reference`, the gradient norms of the policy loss and of
    beta * k3, their ratio and cosine, and the share of groups with identical rewards."""
    batch = sample_step(policy, cfg, gen)
    advantages, identical = compute_advantages(batch.rewards, cfg.group_size)
    mask = batch.policy_mask
    logp, _ = token_logprobs(policy, batch.tokens, cfg.temperature, mask)
    with torch.no_grad():
        ref_logp, _ = token_logprobs(reference, batch.tokens, cfg.temperature, mask)
    pg_loss, _ = policy_loss(logp, logp.detach(), advantages, mask, cfg)
    kl = masked_mean(kl_estimate(logp, ref_logp, "k3"), mask)
    params = [p for p in policy.parameters() if p.requires_grad]
    g_pg = torch.cat([g.flatten() for g in torch.autograd.grad(pg_loss, params, retain_graph=True)])
    g_kl = torch.cat([g.flatten() for g in torch.autograd.grad(beta * kl, params)])
    return {"k3 on the batch": kl.item(), "|grad pg_loss|": g_pg.norm().item(),
            f"|grad {beta} k3|": g_kl.norm().item(), "ratio": (g_kl.norm() / g_pg.norm()).item(),
            "cosine": torch.nn.functional.cosine_similarity(g_pg, g_kl, dim=0).item(),
            "groups with identical rewards": identical}


def gradient_shares(runs, reference, label="k3 beta=0.001"):
    """Exercise 7, per seed: `gradient_share` for the final policy of `label`'s 40-step run, on
    one batch drawn from generator 1000 + seed, against `reference` (the RL base agent)."""
    rows = [gradient_share(policy_from_state(runs[(label, STEPS, seed)]["state"]), reference,
                           seeded(SETTINGS[label], seed), torch.Generator().manual_seed(1000 + seed),
                           SETTINGS[label].kl_coef)
            for seed in SEEDS]
    return pd.DataFrame(rows, index=pd.Index(SEEDS, name="seed"))


def sampler_mismatch(trainer, dtype, tasks=tuple(t for t in TRAIN_TASKS[:8] for _ in range(8))):
    """`mismatch_kl` on one batch (generator 0) sampled by a `dtype` copy of `trainer` and
    recomputed by `trainer`: how far a sampler of that precision drifts from the trainer."""
    sampler = copy.deepcopy(trainer).to(dtype)
    batch = rollout(sampler, list(tasks), torch.Generator().manual_seed(0))
    with torch.no_grad():
        trainer_logp, _ = token_logprobs(trainer, batch.tokens, 1.0, batch.policy_mask)
    return mismatch_kl(trainer_logp, batch.logp, batch.policy_mask).item()


def mismatch_bounds(runs, trainer):
    """Exercise 7: the largest `mismatch_kl` logged over `runs`, then `sampler_mismatch` for a
    float64, float32 and bfloat16 sampler; each shown as a power-of-ten bound, since rounding noise
    has no meaningful digits."""
    logged = max(log["mismatch_kl"] for run in runs.values() for log in run["history"])
    mismatch = pd.Series({"logged in our runs, largest": logged,
                          **{f"{name} sampler, one batch": sampler_mismatch(trainer, dtype)
                             for name, dtype in (("float64", torch.float64),
                                                 ("float32", torch.float32),
                                                 ("bfloat16", torch.bfloat16))}},
                         name="mismatch_kl")
    return mismatch.map(lambda v: f"< 1e{math.ceil(math.log10(v))}")
