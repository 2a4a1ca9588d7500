"""Exact enumeration for Sections 10.2-10.4: KL estimators and KL losses on distributions small
enough to list every outcome.

A sampled batch answers "what is the mean of this estimator?" or "what gradient does this loss
push along on average?" only up to noise. Weighting every outcome by its probability gives the
expectation an infinitely large batch would approach, so each derivation of the chapter can be
checked to rounding error (1e-12) instead of to a few standard errors. Estimator values always
come from the package's `kl_penalty` / `kl_estimate`; nothing here re-implements them.

Logits are cast to float64. A single distribution is a 1-D tensor of K logits; the two-token
sequence model of Section 10.4 is a pair (first_logits (V,), second_logits (V, V)), where row
y1 of second_logits holds the second token's logits after first token y1.
"""
import torch

from .grpo import KL_KINDS, kl_penalty
from .regularize import KL_ESTIMATE_KINDS, kl_estimate


# ----------------------------------------------------------------------------- input checks

def _as_logits(name, x, shape_hint, ndim):
    """Return `x` as detached float64 logits after checking type, rank and values."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of logits {shape_hint}, "
                         f"got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor (float32 or float64), "
                         f"got {x.dtype}")
    if x.dim() != ndim:
        raise ValueError(f"{name} must have shape {shape_hint}, got {tuple(x.shape)}")
    if torch.isnan(x).any():
        raise ValueError(f"{name} must not contain NaN")
    if torch.isinf(x).any():
        raise ValueError(f"{name} must be finite (an infinite logit is a zero-probability "
                         f"outcome, for which a KL to or from it is undefined)")
    return x.detach().to(torch.float64)


def _check_pair(logits, ref_logits):
    """Two 1-D logit vectors over the same K >= 2 outcomes."""
    logits = _as_logits("logits", logits, "(K,)", 1)
    ref_logits = _as_logits("ref_logits", ref_logits, "(K,)", 1)
    if logits.shape != ref_logits.shape:
        raise ValueError(f"logits and ref_logits must have the same shape (K,), got "
                         f"{tuple(logits.shape)} and {tuple(ref_logits.shape)}")
    if logits.numel() < 2:
        raise ValueError(f"a distribution needs at least 2 outcomes, got K={logits.numel()}")
    return logits, ref_logits


def _check_kind(kind, allowed):
    if kind not in allowed:
        raise ValueError(f"unknown KL kind {kind!r}; allowed: {', '.join(allowed)}")


def _grad(objective, *leaves):
    """Gradient of the scalar objective(*leaves) with respect to fresh copies of the leaves."""
    leaves = [x.clone().requires_grad_(True) for x in leaves]
    grads = torch.autograd.grad(objective(*leaves), leaves)
    return grads[0] if len(grads) == 1 else grads


# ----------------------------------------------------------------------------- one distribution

def _reverse_kl(logits, ref_logits):
    logp, ref_logp = torch.log_softmax(logits, -1), torch.log_softmax(ref_logits, -1)
    return (logp.exp() * (logp - ref_logp)).sum()


def _forward_kl(logits, ref_logits):
    logp, ref_logp = torch.log_softmax(logits, -1), torch.log_softmax(ref_logits, -1)
    return (ref_logp.exp() * (ref_logp - logp)).sum()


def reverse_kl(logits, ref_logits):
    """The exact KL(pi || pi_ref) of pi = softmax(logits) from pi_ref = softmax(ref_logits).

    The quantity the chapter's estimators estimate and its penalties claim to penalize.
    Defined in Section 10.2.
    """
    return _reverse_kl(*_check_pair(logits, ref_logits)).item()


def forward_kl(logits, ref_logits):
    """The exact KL(pi_ref || pi): the other direction, whose gradient a k3 loss follows.

    Defined in Section 10.3.
    """
    return _forward_kl(*_check_pair(logits, ref_logits)).item()


def estimator_moments(logits, ref_logits):
    """Exact mean and per-sample standard deviation of k1, k2 and k3 under y ~ pi.

    Enumerates all K outcomes, each weighted by pi(y): the mean says whether an estimator is
    biased, the standard deviation how many sampled tokens it takes to average it to a given
    precision. Returns {"true_kl": float, "mean": {kind: float}, "std": {kind: float}}.
    Defined in Section 10.2.
    """
    logits, ref_logits = _check_pair(logits, ref_logits)
    logp, ref_logp = torch.log_softmax(logits, -1), torch.log_softmax(ref_logits, -1)
    p = logp.exp()
    stats = {"true_kl": _reverse_kl(logits, ref_logits).item(), "mean": {}, "std": {}}
    for kind in KL_KINDS:
        values = kl_penalty(logp, ref_logp, kind)                      # (K,) one per outcome
        mean = (p * values).sum()
        stats["mean"][kind] = mean.item()
        stats["std"][kind] = (p * (values - mean) ** 2).sum().sqrt().item()
    return stats


def expected_loss_grad(logits, ref_logits, kind):
    """The exact expected gradient, with respect to the logits, of a `kl_estimate` loss.

    A trainer differentiates the estimator through log pi(y) with the sampled y held fixed, so
    the expectation it follows is sum_y pi(y) * grad k(y) with pi(y) treated as a constant
    weight: here each outcome's weight is its detached probability and autograd runs through
    `kl_estimate`. `kind` is any of `kl_estimate`'s kinds, including the straight-through '+'.
    Defined in Section 10.3.
    """
    logits, ref_logits = _check_pair(logits, ref_logits)
    _check_kind(kind, KL_ESTIMATE_KINDS)
    ref_logp = torch.log_softmax(ref_logits, -1)

    def batch_loss(z):
        logp = torch.log_softmax(z, -1)
        weight = logp.exp().detach()                                  # sampling, not differentiated
        return (weight * kl_estimate(logp, ref_logp, kind)).sum()

    return _grad(batch_loss, logits)


def expected_reward_grad(logits, ref_logits):
    """Exact expected gradient of the reward placement for one token: REINFORCE on reward -k1.

    The penalty enters as a detached number multiplying log pi(y), so the loss whose descent
    lowers the KL is sum_y pi(y) * log pi(y) * sg(k1(y)), each outcome weighted by its detached
    probability. For a single token this equals the reverse-KL gradient (and the k2 loss's).
    Defined in Section 10.4.
    """
    logits, ref_logits = _check_pair(logits, ref_logits)
    ref_logp = torch.log_softmax(ref_logits, -1)

    def surrogate(z):
        logp = torch.log_softmax(z, -1)
        weight = logp.exp().detach()
        return (weight * logp * kl_penalty(logp, ref_logp, "k1").detach()).sum()

    return _grad(surrogate, logits)


def reverse_kl_grad(logits, ref_logits):
    """Gradient of the exact reverse KL(pi || pi_ref) with respect to the logits (autograd).

    The target a "KL penalty to the reference" intends. Defined in Section 10.3.
    """
    logits, ref_logits = _check_pair(logits, ref_logits)
    return _grad(lambda z: _reverse_kl(z, ref_logits), logits)


def forward_kl_grad(logits, ref_logits):
    """Gradient of the exact forward KL(pi_ref || pi) with respect to the logits (autograd).

    Defined in Section 10.3.
    """
    logits, ref_logits = _check_pair(logits, ref_logits)
    return _grad(lambda z: _forward_kl(z, ref_logits), logits)


def rel_error(g, target):
    """||g - target|| / ||target|| over all entries: 0 is exact, 1 is as wrong as zero.

    Defined in Section 10.3.
    """
    for name, x in (("g", g), ("target", target)):
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if torch.isnan(x).any():
            raise ValueError(f"{name} must not contain NaN")
    if g.shape != target.shape:
        raise ValueError(f"g and target must have the same shape, got {tuple(g.shape)} and "
                         f"{tuple(target.shape)}")
    norm = target.double().norm()
    if norm == 0:
        raise ValueError("target must be nonzero: a relative error against a zero vector is "
                         "undefined")
    return ((g.double() - target.double()).norm() / norm).item()


def logits_at_kl(ref_logits, direction, target_kl, iterations=200):
    """Policy logits ref_logits + s * direction, with s >= 0 chosen so KL(pi || pi_ref) = target_kl.

    Moving along one fixed direction gives a family of policies indexed by a single distance.
    Along the ray the KL grows monotonically (its derivative in s is s * Var_pi(direction)) and
    saturates at -log pi_ref(argmax direction), so s is found by bisection.
    Returns (logits, s). Defined in Section 10.2.
    """
    ref_logits, direction = _check_pair(ref_logits, direction)
    if not isinstance(target_kl, (int, float)) or not target_kl > 0:
        raise ValueError(f"target_kl must be a positive number, got {target_kl!r}")
    if direction.max() == direction.min():
        raise ValueError("direction must not be constant: adding a constant to every logit "
                         "leaves the distribution unchanged")

    def kl_at(s):
        return _reverse_kl(ref_logits + s * direction, ref_logits).item()

    lo, hi = 0.0, 1.0
    while kl_at(hi) < target_kl:
        lo, hi = hi, 2.0 * hi
        if hi > 1e6:
            raise ValueError(f"target_kl={target_kl} is out of reach along this direction: the "
                             f"KL saturates at {kl_at(hi):.6g}")
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        lo, hi = (mid, hi) if kl_at(mid) < target_kl else (lo, mid)
    s = 0.5 * (lo + hi)
    return ref_logits + s * direction, s


# ----------------------------------------------------------------------------- two-token model

def _check_two_token(policy, ref):
    """Each model is (first_logits (V,), second_logits (V, V)); both models share V."""
    checked = []
    for name, model in (("policy", policy), ("ref", ref)):
        if not isinstance(model, (tuple, list)) or len(model) != 2:
            raise ValueError(f"{name} must be a pair (first_logits of shape (V,), second_logits "
                             f"of shape (V, V)), got {type(model).__name__}")
        first = _as_logits(f"{name}[0] (first-token logits)", model[0], "(V,)", 1)
        second = _as_logits(f"{name}[1] (second-token logits)", model[1], "(V, V)", 2)
        vocab = first.numel()
        if vocab < 2 or second.shape != (vocab, vocab):
            raise ValueError(f"{name}: first-token logits of shape (V,) with V >= 2 need "
                             f"second-token logits of shape (V, V); got {tuple(first.shape)} "
                             f"and {tuple(second.shape)}")
        checked.append((first, second))
    if checked[0][0].shape != checked[1][0].shape:
        raise ValueError(f"policy and ref must share the vocabulary, got V="
                         f"{checked[0][0].numel()} and V={checked[1][0].numel()}")
    return checked[0] + checked[1]


def _two_token_logps(first, second):
    """log pi(y1) of shape (V,) and log pi(y2 | y1) of shape (V, V), row y1."""
    return torch.log_softmax(first, -1), torch.log_softmax(second, -1)


def _two_token_kl(first, second, ref_first, ref_second):
    logp1, logp2 = _two_token_logps(first, second)
    ref1, ref2 = _two_token_logps(ref_first, ref_second)
    seq_logp = logp1[:, None] + logp2                                 # (V, V) log pi(y1, y2)
    seq_ref = ref1[:, None] + ref2
    return (seq_logp.exp() * (seq_logp - seq_ref)).sum()


def two_token_kl(policy, ref):
    """The exact sequence KL(pi || pi_ref) of the two-token model, over all V * V sequences.

    Defined in Section 10.4.
    """
    return _two_token_kl(*_check_two_token(policy, ref)).item()


def two_token_kl_grad(policy, ref):
    """Gradient of the exact sequence KL: (d/d first_logits (V,), d/d second_logits (V, V)).

    It includes how the first token changes which second-token KL is visited.
    Defined in Section 10.4.
    """
    first, second, ref_first, ref_second = _check_two_token(policy, ref)
    return _grad(lambda z1, z2: _two_token_kl(z1, z2, ref_first, ref_second), first, second)


def two_token_loss_grad(policy, ref, kind):
    """Exact expected gradient of the per-token loss placement with estimator `kind`.

    Each sequence contributes kl_estimate at both of its tokens, weighted by its detached
    probability, so each term sees only its own token's log-probability.
    Returns (grad for first_logits, grad for second_logits). Defined in Section 10.4.
    """
    first, second, ref_first, ref_second = _check_two_token(policy, ref)
    _check_kind(kind, KL_ESTIMATE_KINDS)
    ref1, ref2 = _two_token_logps(ref_first, ref_second)

    def batch_loss(z1, z2):
        logp1, logp2 = _two_token_logps(z1, z2)
        weight = (logp1[:, None] + logp2).exp().detach()             # (V, V) pi(y1, y2)
        per_sequence = kl_estimate(logp1, ref1, kind)[:, None] + kl_estimate(logp2, ref2, kind)
        return (weight * per_sequence).sum()

    return _grad(batch_loss, first, second)


def two_token_reward_grad(policy, ref):
    """Exact expected gradient of the reward placement (k1 in the reward, REINFORCE).

    Each token's log-probability is multiplied by the detached sum of k1 from that token to
    the end of the sequence (its KL-to-go), so the first token is charged for the second
    token's divergence. This is the loss whose descent lowers the KL (the reward is -k1).
    Returns (grad for first_logits, grad for second_logits). Defined in Section 10.4.
    """
    first, second, ref_first, ref_second = _check_two_token(policy, ref)
    ref1, ref2 = _two_token_logps(ref_first, ref_second)

    def surrogate(z1, z2):
        logp1, logp2 = _two_token_logps(z1, z2)
        weight = (logp1[:, None] + logp2).exp().detach()             # (V, V) pi(y1, y2)
        k1_first = kl_penalty(logp1, ref1, "k1").detach()[:, None]    # (V, 1)
        k1_second = kl_penalty(logp2, ref2, "k1").detach()           # (V, V)
        to_go = logp1[:, None] * (k1_first + k1_second) + logp2 * k1_second
        return (weight * to_go).sum()

    return _grad(surrogate, first, second)
