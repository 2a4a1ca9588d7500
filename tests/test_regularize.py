"""Tests of tinyagent.regularize: kl_estimate (over Chapter 9's kl_penalty), entropy_bonus,
sequence_kl, regularized_update and train_regularized."""
import copy
import math

import pytest
import torch

from tinyagent.grpo import (KL_KINDS, RLConfig, compute_advantages, frozen_copy, kl_penalty,
                            rl_update, sample_step, train_rl)
from tinyagent.policy import load_rl_base
from tinyagent.regularize import (KL_ESTIMATE_KINDS, RegularizedConfig, entropy_bonus, kl_estimate,
                                  regularized_update, sequence_kl, train_regularized)


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


# --- Section 10.6: entropy_bonus, sequence_kl, regularized_update, train_regularized ---------

SMALL = dict(tasks_per_step=4, group_size=8)


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
    with pytest.raises(ValueError, match="disagree"):
        entropy_bonus(logits, mask[:, :2])


def test_sequence_kl_sums_k1_over_policy_tokens():
    logp = torch.tensor([[0.0, -1.0, -2.0], [0.0, -0.5, -0.1]], dtype=torch.float64)
    ref = torch.tensor([[0.0, -1.5, -1.0], [0.0, -0.5, -3.0]], dtype=torch.float64)
    mask = torch.tensor([[False, True, True], [False, True, False]])
    assert sequence_kl(logp, ref, mask).tolist() == pytest.approx([0.5 - 1.0, 0.0])


def test_regularized_update_equals_rl_update_with_regularizers_off():
    base = load_rl_base()
    cfg = RLConfig(**SMALL)
    a, b = copy.deepcopy(base), copy.deepcopy(base)
    batch = sample_step(base, cfg, torch.Generator().manual_seed(0))
    adv, _ = compute_advantages(batch.rewards, cfg.group_size)
    assert adv.abs().sum() > 0
    for policy, update in ((a, rl_update), (b, regularized_update)):
        update(policy, frozen_copy(base), torch.optim.Adam(policy.parameters(), lr=cfg.lr), batch,
               adv, cfg if update is rl_update else RegularizedConfig(**SMALL),
               torch.Generator().manual_seed(1))
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_three_steps_of_train_regularized_and_train_rl_are_bitwise_equal():
    a, b = load_rl_base(), load_rl_base()
    train_rl(a, RLConfig(**SMALL), steps=3, progress=False)
    train_regularized(b, RegularizedConfig(**SMALL), steps=3, progress=False)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_k3_plus_update_follows_k2_gradient():
    """With zero advantages only the KL term acts: k3+ and k2 must move the policy identically."""
    base, ref = load_rl_base(), load_rl_base()
    with torch.no_grad():
        ref.head.bias += 0.3 * torch.randn(ref.head.bias.shape, dtype=torch.float64,
                                           generator=torch.Generator().manual_seed(0))
    batch = sample_step(base, RLConfig(**SMALL), torch.Generator().manual_seed(0))
    zero = torch.zeros_like(batch.rewards)
    moved = []
    for kind in ("k3+", "k2", "k3"):
        p = copy.deepcopy(base)
        cfg = RegularizedConfig(**SMALL, kl_coef=1.0, kl_kind=kind)
        regularized_update(p, ref, torch.optim.SGD(p.parameters(), lr=0.1), batch, zero, cfg,
                           torch.Generator().manual_seed(1))
        moved.append(torch.cat([x.flatten() for x in p.parameters()]))
    assert torch.allclose(moved[0], moved[1], atol=1e-14, rtol=0)
    assert not torch.allclose(moved[0], moved[2], atol=1e-10, rtol=0)


def test_kl_in_reward_shapes_the_reward_and_drops_the_kl_loss():
    policy = load_rl_base()
    hist = train_regularized(policy, RegularizedConfig(**SMALL, kl_coef=0.3, kl_in_reward=True),
                             steps=2, progress=False)
    assert "sequence_kl" in hist[0] and hist[0]["sequence_kl"] == pytest.approx(0.0, abs=1e-12)
    assert hist[1]["sequence_kl"] != 0.0
    # the reward placement with kl_coef = 0 is the plain run
    a, b = load_rl_base(), load_rl_base()
    train_regularized(a, RegularizedConfig(**SMALL, kl_in_reward=True), steps=2, progress=False)
    train_regularized(b, RegularizedConfig(**SMALL), steps=2, progress=False)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_regularized_config_rejects_bad_values():
    with pytest.raises(ValueError, match="entropy_coef"):
        RegularizedConfig(entropy_coef=-0.1)
    with pytest.raises(ValueError, match="allowed: k1, k2, k3, k1\\+"):
        RegularizedConfig(kl_kind="k4")
    with pytest.raises(ValueError, match="allowed: k1, k2, k3$"):
        RLConfig(kl_kind="k3+")
