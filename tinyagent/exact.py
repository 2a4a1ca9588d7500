"""Exact enumeration for Sections 10.2-10.4 and the exercises: KL estimators and KL losses on
distributions small enough to list every outcome.

A sampled batch gives an estimator's mean, or a loss's direction, only up to noise. Weighting
every outcome by its probability gives the value that ever larger batches converge to, so each
derivation is checked to rounding error (1e-12). The estimators come from `tinyagent.kl`, the
only part of the package this module imports; nothing here re-implements them.

Logits are cast to float64. A single distribution is a 1-D tensor of K logits; a model of
T-token sequences is a tuple of T logit tables (see "sequence models" below). Their arguments are
checked by `checks.logit_pair` and `checks.logit_tables`.
"""
import math

import torch

from .checks import logit_pair, logit_tables
from .kl import KL_KINDS, kl_estimate, kl_penalty

VOCAB = 50      # outcomes of the toy distribution of Sections 10.2 and 10.3


def toy_distribution(seed, vocab=VOCAB):
    """Reference logits and a direction to move them along, (vocab,) each, standard normal in
    float64, drawn in that order from one generator seeded `seed`. Policies ref_logits + s *
    direction (`logits_at_kl`) then form a family indexed by one distance.
    Defined in Section 10.2."""
    gen = torch.Generator().manual_seed(seed)
    ref_logits = torch.randn(vocab, generator=gen, dtype=torch.float64)
    direction = torch.randn(vocab, generator=gen, dtype=torch.float64)
    return ref_logits, direction


def _grad(objective, *leaves):
    """Gradients (a tuple) of the scalar objective(*leaves) with respect to fresh copies of them."""
    leaves = [x.clone().requires_grad_(True) for x in leaves]
    return torch.autograd.grad(objective(*leaves), leaves)


def _token_logps(tables):
    """log pi(y_t | y_<t) for each t, shaped to broadcast over the (V,) * T sequences of a model
    of T-token sequences (a tuple of logit tables, see "sequence models"; T = 1: one token)."""
    return [torch.log_softmax(z, -1).reshape(z.shape + (1,) * (len(tables) - 1 - t))
            for t, z in enumerate(tables)]


def _table_kl(tables, ref_tables):
    """Sum over all sequences of pi(y) log(pi(y) / pi_ref(y)), differentiable in `tables`."""
    seq_logp, seq_ref = sum(_token_logps(tables)), sum(_token_logps(ref_tables))
    return (seq_logp.exp() * (seq_logp - seq_ref)).sum()


# ----------------------------------------------------------------------------- one distribution

def _kl(logits_a, logits_b):
    """KL(softmax(logits_a) || softmax(logits_b)), differentiable in both."""
    return _table_kl((logits_a,), (logits_b,))


def reverse_kl(logits, ref_logits):
    """The exact KL(pi || pi_ref) of pi = softmax(logits) from pi_ref = softmax(ref_logits): what
    the estimators estimate, and what a KL penalty means to penalize. Defined in Section 10.2."""
    return _kl(*logit_pair(logits, ref_logits)).item()


def forward_kl(logits, ref_logits):
    """The exact KL(pi_ref || pi), the other direction, whose gradient a k3 loss turns out to
    follow. Defined in Section 10.3."""
    logits, ref_logits = logit_pair(logits, ref_logits)
    return _kl(ref_logits, logits).item()


def estimator_moments(logits, ref_logits):
    """Exact mean and per-sample standard deviation of k1, k2 and k3 under y ~ pi, over all K
    outcomes: the mean says whether an estimator is biased, the spread how many tokens it takes to
    average it. Returns {"true_kl": float, "mean": {kind: float}, "std": {kind: float}}.
    Defined in Section 10.2."""
    logits, ref_logits = logit_pair(logits, ref_logits)
    logp, ref_logp = torch.log_softmax(logits, -1), torch.log_softmax(ref_logits, -1)
    p = logp.exp()
    stats = {"true_kl": _kl(logits, ref_logits).item(), "mean": {}, "std": {}}
    for kind in KL_KINDS:
        values = kl_penalty(logp, ref_logp, kind)                      # (K,) one per outcome
        mean = (p * values).sum()
        stats["mean"][kind] = mean.item()
        stats["std"][kind] = math.sqrt((p * (values - mean) ** 2).sum().item())
    return stats


def log_ratio_shape(logits, ref_logits):
    """Exact shape of the log-ratio l = log pi_ref(y) - log pi(y) under y ~ pi: its mean, standard
    deviation, skewness (third standardized moment; negative means a long tail of outcomes the
    policy raised above the reference) and kurtosis (fourth standardized moment). At small
    distance k3's spread over the KL is about sqrt(kurtosis - 1). Returns {"mean", "std",
    "skewness", "kurtosis"}, floats. Defined in Section 10.2."""
    logits, ref_logits = logit_pair(logits, ref_logits)
    logp = torch.log_softmax(logits, -1)
    p, log_ratio = logp.exp(), torch.log_softmax(ref_logits, -1) - logp
    mean = (p * log_ratio).sum()
    centred = log_ratio - mean
    variance = (p * centred ** 2).sum()
    return {"mean": mean.item(), "std": variance.sqrt().item(),
            "skewness": ((p * centred ** 3).sum() / variance ** 1.5).item(),
            "kurtosis": ((p * centred ** 4).sum() / variance ** 2).item()}


def _expected(tables, ref_tables, per_sequence):
    """Gradients in every table of sum over sequences of sg(pi(y)) * per_sequence(logps, refs, k1s),
    per-token lists (k1 detached): what a batch average of the per-sequence term follows, since
    sampling is not differentiated. One token is the case T = 1."""
    refs = _token_logps(ref_tables)

    def objective(*zs):
        logps = _token_logps(zs)
        k1 = [kl_penalty(lp, rp, "k1").detach() for lp, rp in zip(logps, refs)]
        return (sum(logps).exp().detach() * per_sequence(logps, refs, k1)).sum()

    return _grad(objective, *tables)


def _expected_grad(logits, ref_logits, per_outcome):
    """Gradient in the logits of sum_y sg(pi(y)) * per_outcome(log pi, log pi_ref, k1)[y]."""
    logits, ref_logits = logit_pair(logits, ref_logits)
    (grad,) = _expected((logits,), (ref_logits,), lambda lp, rp, k: per_outcome(lp[0], rp[0], k[0]))
    return grad


def score_corrected(logp, ref_logp, kind):
    """`kind`'s per-token estimate (k1, k2 or k3) with the score-function term autograd leaves out:
    the value of k, the gradient of k + sg(k) log pi. Defined in Exercise 1."""
    k = kl_penalty(logp, ref_logp, kind)
    return k + k.detach() * (logp - logp.detach())


def expected_loss_grad(logits, ref_logits, kind, corrected=False):
    """The exact expected gradient, with respect to the logits, of a `kl_estimate` loss.

    Autograd sees the estimator at tokens already drawn and never differentiates the drawing, so
    on average a trainer follows sum_y pi(y) grad k(y) with pi(y) a constant: here each outcome's
    weight is its detached probability. `kind`: any of `kl_estimate`'s, '+' ones included;
    `corrected=True` uses `score_corrected` instead (k1, k2, k3). Defined in Section 10.3."""
    term = score_corrected if corrected else kl_estimate
    return _expected_grad(logits, ref_logits, lambda logp, ref_logp, _: term(logp, ref_logp, kind))


def per_sample_grads(logits, ref_logits, kind, corrected=False):
    """(K, K): row y is the gradient in the logits of the loss term at outcome y alone, the
    per-sample gradient a batch averages (pi-weighted: `expected_loss_grad`).
    Defined in Exercise 1."""
    logits, ref_logits = logit_pair(logits, ref_logits)
    ref_logp = torch.log_softmax(ref_logits, -1)
    term = score_corrected if corrected else kl_estimate
    return torch.autograd.functional.jacobian(
        lambda z: term(torch.log_softmax(z, -1), ref_logp, kind), logits)


def expected_reward_grad(logits, ref_logits):
    """The exact expected gradient of the reward placement for one token (REINFORCE, reward -k1).

    The penalty is a constant that scales grad log pi(y); descending sum_y pi(y) log pi(y) sg(k1)
    lowers the KL. For a single token this is the reverse-KL gradient, the same as the k2 loss's.
    Defined in Section 10.4."""
    return _expected_grad(logits, ref_logits, lambda logp, _, k1: logp * k1)


def reverse_kl_grad(logits, ref_logits):
    """Autograd's gradient of the exact KL(pi || pi_ref) in the logits: the direction a "KL
    penalty to the reference" is meant to push along. Defined in Section 10.3."""
    logits, ref_logits = logit_pair(logits, ref_logits)
    return _grad(lambda z: _kl(z, ref_logits), logits)[0]


def forward_kl_grad(logits, ref_logits):
    """Autograd's gradient of the exact KL(pi_ref || pi) in the logits. Defined in Section 10.3."""
    logits, ref_logits = logit_pair(logits, ref_logits)
    return _grad(lambda z: _kl(ref_logits, z), logits)[0]


def rel_error(g, target):
    """||g - target|| / ||target|| over all entries: 0 is exact, 1 is as wrong as a zero vector.
    Defined in Section 10.3."""
    for name, x in (("g", g), ("target", target)):
        if not isinstance(x, torch.Tensor) or torch.isnan(x).any():
            raise ValueError(f"{name} must be a torch.Tensor without NaN, got {x!r}")
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
    Defined in Section 10.2."""
    ref_logits, direction = logit_pair(ref_logits, direction)
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


# ----------------------------------------------------------------------------- sequence models
# A model of T-token sequences is a tuple of T logit tables: table t (from 0), of shape
# (V,) * (t + 1), holds token t + 1's logits after each prefix y_1..y_t. T = 2 is Section 10.4's
# two-token model (first_logits (V,), second_logits (V, V) with row y1).

def sequence_model_kl(policy, ref):
    """The exact sequence KL(pi || pi_ref) of two T-token models.
    Defined in Section 10.4 (`two_token_kl`), for any T in Exercise 4."""
    return _table_kl(*logit_tables(policy, ref)).item()


def sequence_model_kl_grad(policy, ref):
    """Gradient of the exact sequence KL, one tensor per table. A token's part holds both effects
    of its choice: on its own KL, and on which later KLs the sequence goes on to pay.
    Defined in Section 10.4 (`two_token_kl_grad`), for any T in Exercise 4."""
    tables, ref_tables = logit_tables(policy, ref)
    return _grad(lambda *zs: _table_kl(zs, ref_tables), *tables)


def sequence_model_loss_grad(policy, ref, kind, future=False):
    """Exact expected gradient of the per-token loss placement with estimator `kind`: each
    sequence adds `kl_estimate` at every token, which differentiates only that token's log-prob.
    `future=True` adds, per token, a REINFORCE term: its log-prob times the detached k1 of the
    tokens after it; with kind k2 (or k3+) the sum is the exact sequence-KL gradient. One tensor
    per table. Defined in Section 10.4 (`two_token_loss_grad`); `future` in Exercise 4."""
    def per_token(logps, refs, k1):
        loss = sum(kl_estimate(lp, rp, kind) for lp, rp in zip(logps, refs))
        return loss + (sum(lp * sum(k1[t + 1:]) for t, lp in enumerate(logps)) if future else 0)

    return _expected(*logit_tables(policy, ref), per_token)


def sequence_model_reward_grad(policy, ref):
    """Exact expected gradient of the reward placement (k1 in the reward, REINFORCE): each token's
    score scaled by the detached k1 from that token on, its own included, so a token answers for
    the divergence of the tokens it leads to. Descending it lowers the sequence KL. One tensor per
    table. Defined in Section 10.4 (`two_token_reward_grad`), for any T in Exercise 4."""
    return _expected(*logit_tables(policy, ref),
                     lambda logps, refs, k1: sum(lp * sum(k1[t:]) for t, lp in enumerate(logps)))


# Section 10.4's names, for a pair (first_logits (V,), second_logits (V, V)).
two_token_kl, two_token_kl_grad = sequence_model_kl, sequence_model_kl_grad
two_token_loss_grad, two_token_reward_grad = sequence_model_loss_grad, sequence_model_reward_grad
