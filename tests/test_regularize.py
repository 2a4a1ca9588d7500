"""Tests of tinyagent.regularize.kl_estimate (and the Chapter 9 kl_penalty it builds on)."""
import math

import pytest
import torch

from tinyagent.grpo import KL_KINDS, kl_penalty
from tinyagent.regularize import KL_ESTIMATE_KINDS, kl_estimate


def _logps(seed=0, shape=(3, 7)):
    """Log-probabilities of sampled tokens under a policy and a reference, float64."""
    g = torch.Generator().manual_seed(seed)
    logp = torch.log_softmax(torch.randn(shape[0], 11, generator=g, dtype=torch.float64), -1)
    ref_logp = torch.log_softmax(torch.randn(shape[0], 11, generator=g, dtype=torch.float64), -1)
    return logp[:, :shape[1]], ref_logp[:, :shape[1]]


def _grad_of(kind, logp, ref_logp):
    leaf = logp.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(kl_estimate(leaf, ref_logp, kind).sum(), leaf)
    return grad


def test_kinds_are_the_three_estimators_and_their_straight_through_versions():
    assert KL_ESTIMATE_KINDS == ("k1", "k2", "k3", "k1+", "k2+", "k3+")


@pytest.mark.parametrize("kind", KL_KINDS)
def test_values_equal_kl_penalty(kind):
    logp, ref_logp = _logps()
    assert torch.equal(kl_estimate(logp, ref_logp, kind), kl_penalty(logp, ref_logp, kind))


@pytest.mark.parametrize("kind", KL_KINDS)
def test_straight_through_value_is_the_estimator(kind):
    logp, ref_logp = _logps()
    value = kl_estimate(logp.clone().requires_grad_(True), ref_logp, kind + "+")
    torch.testing.assert_close(value.detach(), kl_penalty(logp, ref_logp, kind),
                               rtol=0, atol=1e-15)


@pytest.mark.parametrize("kind", KL_ESTIMATE_KINDS)
def test_plus_kinds_have_k2_gradient_and_plain_kinds_their_own(kind):
    logp, ref_logp = _logps(seed=1)
    k2_grad = _grad_of("k2", logp, ref_logp)
    grad = _grad_of(kind, logp, ref_logp)
    if kind.endswith("+") or kind == "k2":
        torch.testing.assert_close(grad, k2_grad, rtol=0, atol=1e-15)
    else:
        # the plain k1 and k3 gradients differ from k2's, so the check above can fail
        assert (grad - k2_grad).abs().max() > 1e-3


def test_gradient_formulas_per_sample():
    # d/dlogp of k1, k2, k3 with l = ref_logp - logp: 1, -l, 1 - e^l
    logp, ref_logp = _logps(seed=2)
    ell = ref_logp - logp
    torch.testing.assert_close(_grad_of("k1", logp, ref_logp), torch.ones_like(ell))
    torch.testing.assert_close(_grad_of("k2", logp, ref_logp), -ell)
    torch.testing.assert_close(_grad_of("k3", logp, ref_logp), 1 - ell.exp())


@pytest.mark.parametrize("fn", [kl_estimate, kl_penalty])
def test_unknown_kind_lists_the_allowed_kinds(fn):
    logp, ref_logp = _logps()
    with pytest.raises(ValueError) as err:
        fn(logp, ref_logp, "k4")
    allowed = KL_ESTIMATE_KINDS if fn is kl_estimate else KL_KINDS
    for kind in allowed:
        assert kind in str(err.value)
    assert "'k4'" in str(err.value)


@pytest.mark.parametrize("pi, pi_ref, expected", [
    (0.5, 0.2, {"k1": 0.916, "k2": 0.420, "k3": 0.316}),
    (0.3, 0.6, {"k1": -0.693, "k2": 0.240, "k3": 0.307}),
])
def test_reference_page_worked_example(pi, pi_ref, expected):
    logp = torch.tensor([math.log(pi)], dtype=torch.float64)
    ref_logp = torch.tensor([math.log(pi_ref)], dtype=torch.float64)
    for kind, value in expected.items():
        assert round(kl_penalty(logp, ref_logp, kind).item(), 3) == value, kind
        assert round(kl_estimate(logp, ref_logp, kind + "+").item(), 3) == value, kind + "+"


@pytest.mark.parametrize("kind", KL_ESTIMATE_KINDS)
def test_mismatched_shapes_raise(kind):
    logp, ref_logp = _logps()
    with pytest.raises(ValueError, match="same shape"):
        kl_estimate(logp, ref_logp[:, :-1], kind)


@pytest.mark.parametrize("kind", KL_ESTIMATE_KINDS)
@pytest.mark.parametrize("which", ["logp", "ref_logp"])
def test_nan_log_probabilities_raise(kind, which):
    logp, ref_logp = _logps()
    bad = (logp if which == "logp" else ref_logp).clone()
    bad[0, 0] = float("nan")
    args = (bad, ref_logp) if which == "logp" else (logp, bad)
    with pytest.raises(ValueError, match="NaN"):
        kl_estimate(*args, kind)
