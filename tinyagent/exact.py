"""Exact enumeration for Sections 10.2-10.4: KL estimators and KL losses on distributions small
enough to list every outcome.

A sampled batch gives an estimator's mean, or a loss's direction, only up to noise. Weighting
every outcome by its probability gives the value that ever larger batches converge to, so each
derivation is checked to rounding error (1e-12). The estimators come from `tinyagent.kl`, the
only part of the package this module imports; nothing here re-implements them.

Logits are cast to float64. A single distribution is a 1-D tensor of K logits; the two-token
model of Section 10.4 is a pair (first_logits (V,), second_logits (V, V)), where row y1 of
second_logits holds the second token's logits after first token y1.
"""
import torch

from .kl import KL_KINDS, kl_estimate, kl_penalty

VOCAB = 50      # outcomes of the toy distribution of Sections 10.2 and 10.3


def toy_distribution(seed, vocab=VOCAB):
    """Reference logits and a direction to move them along, (vocab,) each, standard normal in
    float64, drawn in that order from one generator seeded `seed`. Policies ref_logits + s *
    direction (`logits_at_kl`) then form a family indexed by one distance. Defined in Section 10.2.
    """
    gen = torch.Generator().manual_seed(seed)
    ref_logits = torch.randn(vocab, generator=gen, dtype=torch.float64)
    direction = torch.randn(vocab, generator=gen, dtype=torch.float64)
    return ref_logits, direction


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
        raise ValueError(f"{name} must be finite: an infinite logit leaves the KL undefined")
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


def _grad(objective, *leaves):
    """Gradient of the scalar objective(*leaves) with respect to fresh copies of the leaves."""
    leaves = [x.clone().requires_grad_(True) for x in leaves]
    grads = torch.autograd.grad(objective(*leaves), leaves)
    return grads[0] if len(grads) == 1 else grads


# ----------------------------------------------------------------------------- one distribution

def _kl(logits_a, logits_b):
    """KL(softmax(logits_a) || softmax(logits_b)), differentiable in both."""
    log_a, log_b = torch.log_softmax(logits_a, -1), torch.log_softmax(logits_b, -1)
    return (log_a.exp() * (log_a - log_b)).sum()


def reverse_kl(logits, ref_logits):
    """The exact KL(pi || pi_ref) of pi = softmax(logits) from pi_ref = softmax(ref_logits): what
    the estimators estimate, and what a KL penalty means to penalize. Defined in Section 10.2."""
    return _kl(*_check_pair(logits, ref_logits)).item()


def forward_kl(logits, ref_logits):
    """The exact KL(pi_ref || pi), the other direction, whose gradient a k3 loss turns out to
    follow. Defined in Section 10.3."""
    logits, ref_logits = _check_pair(logits, ref_logits)
    return _kl(ref_logits, logits).item()


def estimator_moments(logits, ref_logits):
    """Exact mean and per-sample standard deviation of k1, k2 and k3 under y ~ pi, over all K
    outcomes: the mean says whether an estimator is biased, the spread how many tokens it takes to
    average it. Returns {"true_kl": float, "mean": {kind: float}, "std": {kind: float}}.
    Defined in Section 10.2.
    """
    logits, ref_logits = _check_pair(logits, ref_logits)
    logp, ref_logp = torch.log_softmax(logits, -1), torch.log_softmax(ref_logits, -1)
    p = logp.exp()
    stats = {"true_kl": _kl(logits, ref_logits).item(), "mean": {}, "std": {}}
    for kind in KL_KINDS:
        values = kl_penalty(logp, ref_logp, kind)                      # (K,) one per outcome
        mean = (p * values).sum()
        stats["mean"][kind] = mean.item()
        stats["std"][kind] = (p * (values - mean) ** 2).sum().sqrt().item()
    return stats


def _expected_grad(logits, ref_logits, per_outcome):
    """Gradient in the logits of sum_y sg(pi(y)) * per_outcome(log pi, log pi_ref)[y]: what a
    batch average of the per-outcome term follows, since sampling is not differentiated."""
    logits, ref_logits = _check_pair(logits, ref_logits)
    ref_logp = torch.log_softmax(ref_logits, -1)

    def objective(z):
        logp = torch.log_softmax(z, -1)
        weight = logp.exp().detach()                                  # sampling, not differentiated
        return (weight * per_outcome(logp, ref_logp)).sum()

    return _grad(objective, logits)


def expected_loss_grad(logits, ref_logits, kind):
    """The exact expected gradient, with respect to the logits, of a `kl_estimate` loss.

    Autograd sees the estimator at tokens already drawn and never differentiates the drawing, so
    on average a trainer follows sum_y pi(y) grad k(y) with pi(y) a constant: here each outcome's
    weight is its detached probability. `kind`: any of `kl_estimate`'s, '+' ones included.
    Defined in Section 10.3.
    """
    return _expected_grad(logits, ref_logits,
                          lambda logp, ref_logp: kl_estimate(logp, ref_logp, kind))


def expected_reward_grad(logits, ref_logits):
    """The exact expected gradient of the reward placement for one token (REINFORCE, reward -k1).

    The penalty is a constant that scales grad log pi(y); descending sum_y pi(y) log pi(y) sg(k1)
    lowers the KL. For a single token this is the reverse-KL gradient, the same as the k2 loss's.
    Defined in Section 10.4.
    """
    return _expected_grad(logits, ref_logits,
                          lambda logp, ref_logp: logp * kl_penalty(logp, ref_logp, "k1").detach())


def reverse_kl_grad(logits, ref_logits):
    """Autograd's gradient of the exact KL(pi || pi_ref) in the logits: the direction a "KL
    penalty to the reference" is meant to push along. Defined in Section 10.3."""
    logits, ref_logits = _check_pair(logits, ref_logits)
    return _grad(lambda z: _kl(z, ref_logits), logits)


def forward_kl_grad(logits, ref_logits):
    """Autograd's gradient of the exact KL(pi_ref || pi) in the logits. Defined in Section 10.3."""
    logits, ref_logits = _check_pair(logits, ref_logits)
    return _grad(lambda z: _kl(ref_logits, z), logits)


def rel_error(g, target):
    """||g - target|| / ||target|| over all entries: 0 is exact, 1 is as wrong as a zero vector.
    Defined in Section 10.3."""
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
        raise ValueError("target must be nonzero: a relative error against zero is undefined")
    return ((g.double() - target.double()).norm() / norm).item()


def logits_at_kl(ref_logits, direction, target_kl, iterations=200):
    """Policy logits ref_logits + s * direction, with s >= 0 chosen so KL(pi || pi_ref) = target_kl.

    Along the ray the KL only grows (its derivative in s is s * Var_pi(direction)) and levels
    off at -log pi_ref(argmax direction), so bisection finds s. Returns (logits, s).
    Defined in Section 10.2.
    """
    ref_logits, direction = _check_pair(ref_logits, direction)
    if not isinstance(target_kl, (int, float)) or not target_kl > 0:
        raise ValueError(f"target_kl must be a positive number, got {target_kl!r}")
    if direction.max() == direction.min():
        raise ValueError("direction must not be constant: it would leave the distribution as it is")

    def kl_at(s):
        return _kl(ref_logits + s * direction, ref_logits).item()

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
    """Sum over all (y1, y2) of pi(y1, y2) log(pi(y1, y2) / pi_ref(y1, y2)), differentiable."""
    logp1, logp2 = _two_token_logps(first, second)
    ref1, ref2 = _two_token_logps(ref_first, ref_second)
    seq_logp, seq_ref = logp1[:, None] + logp2, ref1[:, None] + ref2  # (V, V) log pi(y1, y2)
    return (seq_logp.exp() * (seq_logp - seq_ref)).sum()


def two_token_kl(policy, ref):
    """The exact sequence KL(pi || pi_ref) of the two-token model. Defined in Section 10.4."""
    return _two_token_kl(*_check_two_token(policy, ref)).item()


def two_token_kl_grad(policy, ref):
    """Gradient of the exact sequence KL: (d/d first_logits (V,), d/d second_logits (V, V)). Its
    first-token part holds both effects of y1: on its own KL, and on which second-token KL the
    sequence goes on to pay. Defined in Section 10.4."""
    first, second, ref_first, ref_second = _check_two_token(policy, ref)
    return _grad(lambda z1, z2: _two_token_kl(z1, z2, ref_first, ref_second), first, second)


def _expected_two_token_grad(policy, ref, per_sequence):
    """Gradients in both logit tables of sum over (y1, y2) of sg(pi(y1, y2)) times the (V, V)
    term per_sequence(logp1, logp2, ref1, ref2): as for one token, the sampling is detached."""
    first, second, ref_first, ref_second = _check_two_token(policy, ref)
    ref1, ref2 = _two_token_logps(ref_first, ref_second)

    def objective(z1, z2):
        logp1, logp2 = _two_token_logps(z1, z2)
        weight = (logp1[:, None] + logp2).exp().detach()             # (V, V) pi(y1, y2)
        return (weight * per_sequence(logp1, logp2, ref1, ref2)).sum()

    return _grad(objective, first, second)


def two_token_loss_grad(policy, ref, kind):
    """Exact expected gradient of the per-token loss placement with estimator `kind`.

    Every sequence adds `kl_estimate` at its first and at its second token, each term
    differentiating only its own token's log-prob.
    Returns (grad for first_logits, grad for second_logits). Defined in Section 10.4.
    """
    def both_tokens(logp1, logp2, ref1, ref2):
        return kl_estimate(logp1, ref1, kind)[:, None] + kl_estimate(logp2, ref2, kind)

    return _expected_two_token_grad(policy, ref, both_tokens)


def two_token_reward_grad(policy, ref):
    """Exact expected gradient of the reward placement (k1 in the reward, REINFORCE).

    The score of a token, grad log pi, is scaled by a constant: the k1 still to come from that
    token on (both tokens' k1 for y1, the second's alone for y2). So y1 answers for the
    divergence of the second token it leads to. Descending this surrogate lowers the KL.
    Returns (grad for first_logits, grad for second_logits). Defined in Section 10.4.
    """
    def k1_to_go(logp1, logp2, ref1, ref2):
        k1_first = kl_penalty(logp1, ref1, "k1").detach()[:, None]    # (V, 1)
        k1_second = kl_penalty(logp2, ref2, "k1").detach()           # (V, V)
        return logp1[:, None] * (k1_first + k1_second) + logp2 * k1_second

    return _expected_two_token_grad(policy, ref, k1_to_go)
