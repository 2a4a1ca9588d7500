"""The chapter's math on per-token log-probabilities: KL estimators, entropies and their masked
means. A leaf module (it imports only torch), so the trainers and the exact-enumeration helpers
share one definition of each.

Shapes: `logp`, `ref_logp` and `mask` are (B, T), one value per token of a batch of episodes;
`logprobs` / `logits` are full distributions over the vocabulary, (..., V).
"""
import torch
import torch.nn.functional as F

KL_KINDS = ("k1", "k2", "k3")
KL_ESTIMATE_KINDS = KL_KINDS + tuple(k + "+" for k in KL_KINDS)


def check_logprobs(name, logp):
    """Refuse values that are not log-probabilities of sampled tokens: NaN, -inf (a token of
    probability 0 was sampled), +inf, or above 0 (a probability above 1, or raw logits).
    The one rule for log-probs; it lives here so that the math leaf imports only torch."""
    if not isinstance(logp, torch.Tensor):
        raise TypeError(f"{name} must be a tensor of log-probabilities, got {type(logp).__name__}")
    if logp.device.type == "meta":
        raise ValueError(f"{name} is a meta tensor (a shape without values): log-probabilities "
                         f"must be computed values")
    values = logp.detach()
    bad = ~(values <= 0) | (values == -torch.inf)          # NaN fails `<= 0`
    if bad.any():
        raise ValueError(f"{name} must be finite log-probabilities <= 0 (no NaN or inf), got "
                         f"{values[bad][:3].tolist()} at {int(bad.sum())} of {values.numel()} "
                         f"positions")


def check_logps(logp, ref_logp, mask=None):
    """Refuse log-probabilities that cannot be compared token by token (with a `mask`, only its
    positions must be log-probabilities: padding elsewhere may hold anything)."""
    if not isinstance(logp, torch.Tensor) or not isinstance(ref_logp, torch.Tensor):
        raise TypeError(f"logp and ref_logp must be tensors, got {type(logp).__name__} and "
                        f"{type(ref_logp).__name__}")
    if logp.shape != ref_logp.shape:
        raise ValueError(f"logp and ref_logp must have the same shape, got {tuple(logp.shape)} "
                         f"and {tuple(ref_logp.shape)}")
    if mask is not None:
        check_mask(mask, logp.shape, of="logp")
        logp, ref_logp = logp[mask], ref_logp[mask]
    check_logprobs("logp", logp)
    check_logprobs("ref_logp", ref_logp)


def kl_penalty(logp, ref_logp, kind):
    """Schulman's per-token estimators of KL(pi || pi_ref) from the sampled tokens' log-probs.

    With l = ref_logp - logp: k1 = -l, k2 = l^2 / 2, k3 = e^l - 1 - l, elementwise.
    Defined in Chapter 9.
    """
    if kind not in KL_KINDS:
        raise ValueError(f"unknown KL kind {kind!r}; allowed: {', '.join(KL_KINDS)}")
    check_logps(logp, ref_logp)
    return _estimator(logp, ref_logp, kind)


def _estimator(logp, ref_logp, kind):
    """`kl_penalty` on log-probs already checked."""
    log_ratio = ref_logp - logp
    if kind == "k1":
        return -log_ratio
    if kind == "k2":
        return 0.5 * log_ratio ** 2
    return torch.expm1(log_ratio) - log_ratio


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


def check_mask(mask, shape, of="x"):
    """Refuse a mask that is not a bool tensor of exactly `shape` (the shape of `of`): one that
    broadcasts would count some positions several times and give a plausible wrong answer."""
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor, got "
                        f"{mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__}")
    if mask.shape != shape:
        raise ValueError(f"mask must have the shape of {of} {tuple(shape)}, "
                         f"got {tuple(mask.shape)}")


def masked_mean(x, mask):
    """Mean of `x` over the positions where `mask` is True (the policy's tokens). `mask` is bool
    with x's shape and selects at least one position (the mean of nothing is not 0, it is
    undefined); values elsewhere, even NaN or inf, do not reach the mean."""
    check_mask(mask, x.shape)
    count = mask.sum()
    if count == 0:
        raise ValueError("mask selects no position: a mean over no tokens is undefined")
    return torch.where(mask, x, torch.zeros((), dtype=x.dtype)).sum() / count


def check_log_distribution(logprobs):
    """Refuse a tensor (..., V) that cannot hold log-distributions: a NaN, +inf or a value
    above 0 (raw logits have them). -inf, probability 0, is allowed; so are rows of zeros, the
    padding `token_logprobs` puts at position 0."""
    if not isinstance(logprobs, torch.Tensor) or not logprobs.is_floating_point():
        raise TypeError(f"logprobs must be a floating-point tensor (..., V), got "
                        f"{getattr(logprobs, 'dtype', type(logprobs).__name__)}")
    values = logprobs.detach()
    bad = ~(values <= 0)                                   # NaN and +inf fail too
    if bad.any():
        raise ValueError(f"logprobs must be log-probabilities (<= 0, no NaN), got "
                         f"{values[bad][:3].tolist()}; for logits, apply log_softmax first")


def entropy(logprobs):
    """Entropy (nats) of each distribution given by its log-probabilities: (..., V) -> (...).
    A token of probability 0 (log-prob -inf) adds 0, not 0 * -inf = NaN, to the value and to
    the gradient. Refuses NaN, +inf and values above 0, such as raw logits (apply log_softmax
    first)."""
    check_log_distribution(logprobs)
    impossible, zero = logprobs == -torch.inf, torch.zeros((), dtype=logprobs.dtype)
    safe = torch.where(impossible, zero, logprobs)
    return -torch.where(impossible, zero, safe.exp() * safe).sum(-1)


def policy_entropy(logprobs, mask):
    """Mean full-vocabulary entropy (nats) at the policy positions. `logprobs` is (B, T, V) at
    every position, or (N, V) at the N masked positions only. Defined in Chapter 9."""
    per_position = entropy(logprobs)
    if per_position.shape == mask.shape:
        return masked_mean(per_position, mask)
    check_mask(mask, mask.shape)
    if per_position.ndim == 1 and per_position.numel() == int(mask.sum()):
        if not per_position.numel():
            raise ValueError("mask selects no position: a mean over no tokens is undefined")
        return per_position.mean()
    raise ValueError(f"log-probabilities {tuple(logprobs.shape)} fit neither the mask "
                     f"{tuple(mask.shape)} (B, T, V) nor its {int(mask.sum())} policy positions (N, V)")


def entropy_bonus(logits, mask):
    """Masked mean over policy positions of the full-vocabulary entropy of softmax(logits).
    Exact at each visited prefix (no sampling), since every logit is already computed. `logits`
    is (B, T, V), or (N, V) at the masked positions only. Defined in Section 10.6."""
    return policy_entropy(F.log_softmax(logits, dim=-1), mask)


def sequence_kl(logp, ref_logp, mask):
    """Per episode, the sum of k1 = log pi - log pi_ref over its policy tokens: the sampled
    estimate of the sequence KL that the reward placement subtracts. Defined in Section 10.4."""
    check_logps(logp, ref_logp, mask)
    k1 = _estimator(logp, ref_logp, "k1")
    return torch.where(mask, k1, torch.zeros((), dtype=k1.dtype)).sum(dim=1)


def mismatch_kl(trainer_logp, sampler_logp, mask):
    """Mean per-token k3 estimate of KL(sampler || trainer) on the sampled tokens, as prime-rl
    logs it: zero when both compute the same numbers, positive when the sampler's numerics (a
    lower precision, another kernel) drift from the trainer's. Defined in the exercises."""
    if trainer_logp.shape != sampler_logp.shape:
        raise ValueError(f"trainer_logp and sampler_logp must have the same shape, got "
                         f"{tuple(trainer_logp.shape)} and {tuple(sampler_logp.shape)}")
    check_mask(mask, trainer_logp.shape, of="trainer_logp")
    check_logps(sampler_logp, trainer_logp, mask)
    return masked_mean(_estimator(sampler_logp, trainer_logp, "k3"), mask)
