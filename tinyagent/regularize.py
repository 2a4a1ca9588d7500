"""Chapter 10's saved functions: KL estimators as losses, the entropy bonus, and the
regularized GRPO update and loop built on Chapter 9's pieces (which do not change)."""
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from tqdm.auto import trange

from .grpo import (KL_KINDS, RLConfig, behavior_stats, compute_advantages, frozen_copy,
                   kl_penalty, masked_mean, policy_entropy, policy_loss, sample_step)
from .gym import TRAIN_TASKS
from .sampler import token_logprobs

KL_ESTIMATE_KINDS = KL_KINDS + tuple(k + "+" for k in KL_KINDS)


def kl_estimate(logp, ref_logp, kind):
    """Per-token KL estimate whose value is `kind`'s estimator.

    'k1', 'k2', 'k3' are Chapter 9's `kl_penalty`. A trailing '+' (for example 'k3+') keeps the
    estimator's value but takes the gradient of k2, the reverse-KL gradient (straight-through:
    g - g.detach() + v.detach()), as verl's `kl_loss_type` "+" variants do.
    Defined in Section 10.3.
    """
    if kind not in KL_ESTIMATE_KINDS:
        raise ValueError(f"unknown KL kind {kind!r}; allowed: {', '.join(KL_ESTIMATE_KINDS)}")
    if not kind.endswith("+"):
        return kl_penalty(logp, ref_logp, kind)
    value = kl_penalty(logp, ref_logp, kind[:-1])
    grad_carrier = kl_penalty(logp, ref_logp, "k2")
    return grad_carrier - grad_carrier.detach() + value.detach()


def entropy_bonus(logits, mask):
    """Masked mean over policy positions of the full-vocabulary entropy of softmax(logits).
    Exact at each visited prefix (no sampling), since every logit is already computed.
    Defined in Section 10.6."""
    if logits.shape[:-1] != mask.shape:
        raise ValueError(f"logits (B, T, V) and mask (B, T) disagree: {tuple(logits.shape)} "
                         f"and {tuple(mask.shape)}")
    return policy_entropy(F.log_softmax(logits, dim=-1), mask)


def sequence_kl(logp, ref_logp, mask):
    """Per episode, the sum of k1 = log pi - log pi_ref over its policy tokens: the sampled
    estimate of the sequence KL that the reward placement subtracts. Defined in Section 10.6."""
    if mask.shape != logp.shape:
        raise ValueError(f"mask must have the shape of logp {tuple(logp.shape)}, got {tuple(mask.shape)}")
    return (kl_penalty(logp, ref_logp, "k1") * mask).sum(dim=1)


@dataclass(frozen=True)
class RegularizedConfig(RLConfig):
    """Chapter 9's configuration plus the chapter's regularizers (all off by default)."""
    entropy_coef: float = 0.0    # alpha: the loss subtracts alpha * entropy_bonus
    kl_in_reward: bool = False   # put beta * sequence_kl in the reward instead of a KL loss
    allowed_kl_kinds = KL_ESTIMATE_KINDS

    def __post_init__(self):
        super().__post_init__()
        if self.entropy_coef < 0:
            raise ValueError(f"entropy_coef must be non-negative, got {self.entropy_coef}")


def regularized_update(policy, reference, optimizer, batch, advantages, cfg, gen):
    """Chapter 9's `rl_update` with two differences: the loss subtracts
    `cfg.entropy_coef * entropy_bonus`, and the KL term goes through `kl_estimate`, so
    `cfg.kl_kind` may be 'k3+'. The logged entropy is the bonus before each minibatch step.
    Defined in Section 10.6."""
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
            kl = masked_mean(kl_estimate(logp, ref_logp[mb], cfg.kl_kind), mask[mb])
            entropy = entropy_bonus(logprobs, mask[mb])     # log-probs are valid logits
            loss = pg_loss + cfg.kl_coef * kl - cfg.entropy_coef * entropy
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            stats["clip_frac"].append(clip_frac)
            stats["entropy"].append(entropy.item())
            stats["kl"].append(kl.item())
    out = {k: sum(v) / len(v) for k, v in stats.items()}
    out["k3_to_ref"] = masked_mean(kl_penalty(old_logp, ref_logp, "k3"), mask).item()
    return out


def train_regularized(policy, cfg=RegularizedConfig(), steps=40, tasks=TRAIN_TASKS,
                      reference=None, progress=True):
    """Chapter 9's `train_rl` without periodic evaluation, with `regularized_update`, plus the
    reward placement: with `cfg.kl_in_reward`, each episode's reward becomes
    r - kl_coef * sequence_kl (sampler log-probs against the reference, before the advantages)
    and the loss carries no KL term. `reference` defaults to a frozen copy of the start (pass
    another to continue a run anchored elsewhere). Trains in place; returns the per-step log.
    Defined in Section 10.6."""
    reference = frozen_copy(policy) if reference is None else reference
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    gen = torch.Generator().manual_seed(cfg.seed)
    update_cfg = replace(cfg, kl_coef=0.0) if cfg.kl_in_reward else cfg
    history = []
    for step in trange(steps, desc="regularized GRPO", disable=not progress):
        batch = sample_step(policy, cfg, gen, tasks)
        rewards = batch.rewards
        log = {"step": step, **behavior_stats(batch)}
        if cfg.kl_in_reward:
            with torch.no_grad():
                ref_logp, _ = token_logprobs(reference, batch.tokens, cfg.temperature)
            seq_kl = sequence_kl(batch.logp, ref_logp, batch.policy_mask)
            rewards = rewards - cfg.kl_coef * seq_kl
            log["sequence_kl"] = seq_kl.mean().item()
        advantages, log["zero_adv_groups"] = compute_advantages(rewards, cfg.group_size)
        log.update(regularized_update(policy, reference, optimizer, batch, advantages, update_cfg, gen))
        history.append(log)
    return history
