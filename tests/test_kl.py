"""Tests of tinyagent.kl, the leaf of the chapter's math: the estimators (Chapter 9's kl_penalty
and the chapter's kl_estimate), entropies, sequence_kl and mismatch_kl."""
import ast
import math
from pathlib import Path

import pytest
import torch

import tinyagent.kl
from tinyagent.kl import (KL_ESTIMATE_KINDS, KL_KINDS, entropy_bonus, entropy, kl_estimate,
                          kl_penalty, mismatch_kl, policy_entropy, sequence_kl)


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


def test_straight_through_kinds_keep_their_estimators_value_exactly():
    logp, ref_logp = torch.tensor([-0.2, -1.5, -3.0]), torch.tensor([-0.9, -0.4, -2.0])
    for kind in KL_KINDS:                              # g - g.detach() + v.detach() is v exactly
        torch.testing.assert_close(kl_estimate(logp, ref_logp, kind + "+"),
                                   kl_penalty(logp, ref_logp, kind), rtol=0, atol=0)


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


F64 = dict(dtype=torch.float64)


def test_kl_penalty_bad_input():
    x = torch.zeros(3, **F64)
    with pytest.raises(ValueError, match="allowed: k1, k2, k3"):
        kl_penalty(x, x, "k4")
    with pytest.raises(ValueError, match="same shape"):
        kl_penalty(x, torch.zeros(4, **F64), "k1")
    with pytest.raises(ValueError, match="NaN"):
        kl_penalty(x, torch.full((3,), float("nan"), **F64), "k3")


def test_entropy_bonus_uniform_logits_give_log_v_and_ignore_masked_positions():
    logits = torch.zeros(2, 3, 316, dtype=torch.float64)
    logits[1, 2] = torch.linspace(-50, 50, 316, dtype=torch.float64)   # far from uniform
    mask = torch.tensor([[True, True, False], [True, False, False]])
    assert entropy_bonus(logits, mask).item() == pytest.approx(math.log(316), abs=1e-12)
    mask[1, 2] = True                      # now a sharp position joins the three uniform ones
    p = torch.softmax(logits[1, 2], -1)
    sharp = -(p * p.log()).sum().item()
    assert sharp < math.log(316) - 1
    assert entropy_bonus(logits, mask).item() == pytest.approx((3 * math.log(316) + sharp) / 4, abs=1e-12)
    with pytest.raises(ValueError, match="fit neither"):
        entropy_bonus(logits, mask[:, :2])


def test_sequence_kl_sums_k1_over_policy_tokens():
    logp = torch.tensor([[0.0, -1.0, -2.0], [0.0, -0.5, -0.1]], dtype=torch.float64)
    ref = torch.tensor([[0.0, -1.5, -1.0], [0.0, -0.5, -3.0]], dtype=torch.float64)
    mask = torch.tensor([[False, True, True], [False, True, False]])
    assert sequence_kl(logp, ref, mask).tolist() == pytest.approx([0.5 - 1.0, 0.0])


def test_entropy_bonus_takes_packed_policy_positions():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 316, generator=g, dtype=torch.float64)
    mask = torch.tensor([[0, 1, 1, 0, 1], [0, 0, 1, 1, 0]], dtype=torch.bool)
    full = entropy_bonus(logits, mask)
    packed = entropy_bonus(logits[mask], mask)                      # (N, V) at the masked positions
    assert packed.item() == pytest.approx(full.item(), abs=1e-14)
    with pytest.raises(ValueError, match="fit neither"):
        policy_entropy(torch.log_softmax(logits[mask][:3], -1), mask)


def test_mismatch_kl_is_zero_for_identical_log_probs_and_positive_otherwise():
    logp, _ = _logps()
    mask = torch.ones_like(logp, dtype=torch.bool)
    assert mismatch_kl(logp, logp.clone(), mask).item() == 0.0
    drifted = logp + 1e-3 * torch.randn(logp.shape, generator=torch.Generator().manual_seed(1),
                                         dtype=torch.float64)
    value = mismatch_kl(drifted, logp, mask).item()
    # k3 of a small log-ratio d is d^2 / 2 to leading order
    assert value > 0 and value == pytest.approx(((drifted - logp) ** 2 / 2).mean().item(), rel=1e-2)


def test_the_leaf_imports_only_torch():
    tree = ast.parse(Path(tinyagent.kl.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported and all(name.split(".")[0] == "torch" for name in imported), imported


def test_masks_of_another_shape_or_type_are_refused():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]], **F64)
    logp, ref_logp = _logps(shape=(2, 2))
    broadcasting = torch.tensor([True, False])             # (2,) broadcasts against (2, 2)
    for call in (lambda m: tinyagent.kl.masked_mean(x, m), lambda m: mismatch_kl(logp, ref_logp, m),
                 lambda m: sequence_kl(logp, ref_logp, m)):
        with pytest.raises(ValueError, match=r"mask must have the shape of \w+ \(2, 2\)"):
            call(broadcasting)
        with pytest.raises(TypeError, match="mask must be a bool tensor"):
            call(torch.ones(2, 2, **F64))                  # a float mask would weight positions
    with pytest.raises(ValueError, match="trainer_logp and sampler_logp must have the same shape"):
        mismatch_kl(logp, ref_logp[:, :1], torch.ones(2, 2, dtype=torch.bool))


def test_a_mask_that_selects_nothing_is_an_error_not_nan():
    x = torch.zeros(2, 3, **F64)
    none = torch.zeros(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="mask selects no position"):
        tinyagent.kl.masked_mean(x, none)
    with pytest.raises(ValueError, match="mask selects no position"):
        policy_entropy(torch.zeros(0, 5, **F64), none)     # packed: no policy position at all
    with pytest.raises(ValueError, match="mask selects no position"):
        mismatch_kl(x, x, none)


def test_values_at_masked_out_positions_do_not_reach_the_result():
    mask = torch.tensor([[True, False, True]])
    for bad in (float("nan"), float("inf")):
        x = torch.tensor([[1.0, bad, 3.0]], **F64, requires_grad=True)
        mean = tinyagent.kl.masked_mean(x, mask)
        mean.backward()
        assert mean.item() == 2.0 and x.grad.tolist() == [[0.5, 0.0, 0.5]]
    logp = torch.tensor([[-1.0, float("inf"), -2.0]], **F64)        # padding holding inf
    ref = torch.tensor([[-1.5, 0.0, -1.0]], **F64)
    assert sequence_kl(logp, ref, mask).tolist() == pytest.approx([0.5 - 1.0])


def test_impossible_tokens_add_nothing_to_the_entropy_or_its_gradient():
    logprobs = torch.tensor([[0.0, -math.inf, -math.inf], [math.log(0.5)] * 2 + [-math.inf]],
                            **F64, requires_grad=True)
    value = entropy_bonus(logprobs, torch.ones(2, dtype=torch.bool))
    value.backward()
    assert value.item() == pytest.approx(math.log(2) / 2) and torch.isfinite(logprobs.grad).all()


@pytest.mark.parametrize("bad", [5.0, math.inf, -math.inf, 1e-9])
@pytest.mark.parametrize("which", ["logp", "ref_logp"])
def test_impossible_log_probabilities_are_refused(bad, which):
    """A log-prob above 0 (a probability above 1) or infinite is not a sampled token's."""
    logp, ref_logp = _logps()
    broken = (logp if which == "logp" else ref_logp).clone()
    broken[0, 0] = bad
    args = (broken, ref_logp) if which == "logp" else (logp, broken)
    mask = torch.ones(logp.shape, dtype=torch.bool)
    for call in (lambda a, b: kl_penalty(a, b, "k3"), lambda a, b: kl_estimate(a, b, "k3+"),
                 lambda a, b: sequence_kl(a, b, mask), lambda a, b: mismatch_kl(b, a, mask)):
        with pytest.raises(ValueError, match=rf"{which} must be finite log-probabilities <= 0"):
            call(*args)


def test_kl_functions_refuse_what_is_not_a_tensor():
    logp, _ = _logps()
    with pytest.raises(TypeError, match="must be tensors"):
        kl_penalty(logp, logp.tolist(), "k1")


def test_the_entropy_of_raw_logits_is_refused():
    logits = torch.randn(4, 10, generator=torch.Generator().manual_seed(0), **F64) * 5
    with pytest.raises(ValueError, match="apply log_softmax first"):
        entropy(logits)
    with pytest.raises(ValueError, match="log-probabilities"):
        entropy(torch.tensor([[math.log(0.5), math.nan]], **F64))
    assert entropy(torch.log_softmax(logits, -1)).min() > 0
    with pytest.raises(TypeError, match="floating-point tensor"):
        entropy(torch.zeros(2, 3, dtype=torch.long))


def test_a_meta_tensor_is_refused_by_name():
    from tinyagent.kl import kl_penalty
    meta = torch.zeros(3, device="meta")
    with pytest.raises(ValueError, match="logp is a meta tensor"):
        kl_penalty(meta, meta, "k3")
