"""Tests of tinyagent.exact against Monte-Carlo sampling, finite differences and closed forms."""
import itertools
import math

import pytest
import torch

from tinyagent.exact import (VOCAB, estimator_moments, expected_loss_grad, expected_reward_grad,
                             forward_kl, forward_kl_grad, log_ratio_shape, logits_at_kl, per_sample_grads,
                             rel_error, reverse_kl, reverse_kl_grad, score_corrected,
                             sequence_model_kl, sequence_model_kl_grad, sequence_model_loss_grad,
                             sequence_model_reward_grad, toy_distribution, two_token_kl,
                             two_token_kl_grad, two_token_loss_grad, two_token_reward_grad)
from tinyagent.kl import KL_ESTIMATE_KINDS, kl_estimate, kl_penalty

F64 = torch.float64


def _pair(seed=0, k=6, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    ref = torch.randn(k, generator=g, dtype=F64)
    return ref + scale * torch.randn(k, generator=g, dtype=F64), ref


def _two_token(seed=0, vocab=4):
    g = torch.Generator().manual_seed(seed)
    draw = lambda *shape: torch.randn(*shape, generator=g, dtype=F64)  # noqa: E731
    return (draw(vocab), draw(vocab, vocab)), (draw(vocab), draw(vocab, vocab))


def _three_token(seed=0, vocab=3):
    g = torch.Generator().manual_seed(seed)
    draw = lambda *shape: torch.randn(*shape, generator=g, dtype=F64)  # noqa: E731
    return tuple(tuple(draw(*(vocab,) * (t + 1)) for t in range(3)) for _ in range(2))


def _central_differences(f, x, eps=1e-6):
    grad = torch.zeros_like(x)
    for i in range(x.numel()):
        step = torch.zeros_like(x).view(-1)
        step[i] = eps
        step = step.view_as(x)
        grad.view(-1)[i] = (f(x + step) - f(x - step)) / (2 * eps)
    return grad


# ----------------------------------------------------------------------------- toy distribution

def test_toy_distribution_is_seeded_and_draws_the_reference_first():
    ref, direction = toy_distribution(0)
    assert ref.shape == direction.shape == (VOCAB,) and ref.dtype == direction.dtype == F64
    g = torch.Generator().manual_seed(0)
    assert torch.equal(ref, torch.randn(VOCAB, generator=g, dtype=F64))
    assert torch.equal(direction, torch.randn(VOCAB, generator=g, dtype=F64))
    assert torch.equal(toy_distribution(0)[1], direction)
    assert not torch.equal(toy_distribution(1)[0], ref)
    assert toy_distribution(3, vocab=6)[0].shape == (6,)


# ----------------------------------------------------------------------------- exact KLs

def test_kls_match_a_direct_sum():
    logits, ref = _pair()
    p, q = torch.softmax(logits, -1), torch.softmax(ref, -1)
    assert reverse_kl(logits, ref) == pytest.approx((p * (p / q).log()).sum().item(), abs=1e-14)
    assert forward_kl(logits, ref) == pytest.approx((q * (q / p).log()).sum().item(), abs=1e-14)
    assert reverse_kl(ref, ref) == 0.0


def test_kl_gradients_match_closed_forms_and_finite_differences():
    logits, ref = _pair(seed=3)
    p, q = torch.softmax(logits, -1), torch.softmax(ref, -1)
    kl = reverse_kl(logits, ref)
    # d/dz KL(p||q) = p * (log p - log q - KL);  d/dz KL(q||p) = p - q
    torch.testing.assert_close(reverse_kl_grad(logits, ref), p * ((p / q).log() - kl),
                               rtol=0, atol=1e-14)
    torch.testing.assert_close(forward_kl_grad(logits, ref), p - q, rtol=0, atol=1e-14)
    torch.testing.assert_close(reverse_kl_grad(logits, ref),
                               _central_differences(lambda z: reverse_kl(z, ref), logits),
                               rtol=0, atol=1e-8)
    torch.testing.assert_close(forward_kl_grad(logits, ref),
                               _central_differences(lambda z: forward_kl(z, ref), logits),
                               rtol=0, atol=1e-8)


# ----------------------------------------------------------------------------- estimator moments

def test_moments_are_exact_means_and_unbiased_for_k1_k3():
    logits, ref = _pair(seed=1, k=50, scale=0.7)
    stats = estimator_moments(logits, ref)
    assert stats["true_kl"] == pytest.approx(reverse_kl(logits, ref), abs=1e-15)
    assert stats["mean"]["k1"] == pytest.approx(stats["true_kl"], rel=1e-12)
    assert stats["mean"]["k3"] == pytest.approx(stats["true_kl"], rel=1e-12)
    assert abs(stats["mean"]["k2"] / stats["true_kl"] - 1) > 1e-3    # biased: the check can fail


def test_moments_agree_with_monte_carlo():
    logits, ref = _pair(seed=2, k=50, scale=0.7)
    stats = estimator_moments(logits, ref)
    logp, ref_logp = torch.log_softmax(logits, -1), torch.log_softmax(ref, -1)
    n = 400_000
    y = torch.multinomial(logp.exp(), n, replacement=True,
                          generator=torch.Generator().manual_seed(0))
    for kind in ("k1", "k2", "k3"):
        samples = kl_penalty(logp[y], ref_logp[y], kind)
        std_err = stats["std"][kind] / math.sqrt(n)
        assert abs(samples.mean().item() - stats["mean"][kind]) < 5 * std_err, kind
        assert samples.std().item() == pytest.approx(stats["std"][kind], rel=0.02), kind


def test_small_kl_spreads_follow_the_leading_order():
    # at small distance one k1 sample spreads like sqrt(2 KL), i.e. sqrt(2 / KL) times the KL
    g = torch.Generator().manual_seed(4)
    ref, direction = torch.randn(50, generator=g, dtype=F64), torch.randn(50, generator=g, dtype=F64)
    logits, _ = logits_at_kl(ref, direction, 1e-4)
    stats = estimator_moments(logits, ref)
    assert stats["std"]["k1"] / 1e-4 == pytest.approx(math.sqrt(2 / 1e-4), rel=0.02)
    assert stats["std"]["k3"] < stats["std"]["k1"] / 50



def test_log_ratio_shape_matches_monte_carlo_and_sets_k3_spread_at_small_kl():
    logits, ref = _pair(seed=2, k=50, scale=0.7)
    shape = log_ratio_shape(logits, ref)
    logp, ref_logp = torch.log_softmax(logits, -1), torch.log_softmax(ref, -1)
    assert shape["mean"] == pytest.approx(-reverse_kl(logits, ref), rel=1e-12)   # E[l] = -KL
    y = torch.multinomial(logp.exp(), 400_000, replacement=True,
                          generator=torch.Generator().manual_seed(0))
    sampled = (ref_logp - logp)[y]
    z = (sampled - sampled.mean()) / sampled.std()
    assert sampled.std().item() == pytest.approx(shape["std"], rel=0.01)
    assert (z ** 3).mean().item() == pytest.approx(shape["skewness"], abs=0.03)
    assert (z ** 4).mean().item() == pytest.approx(shape["kurtosis"], rel=0.03)
    # near the reference k3 ~ l^2 / 2, so its spread over the KL is about sqrt(kurtosis - 1)
    g = torch.Generator().manual_seed(4)
    ref, direction = torch.randn(50, generator=g, dtype=F64), torch.randn(50, generator=g, dtype=F64)
    near, _ = logits_at_kl(ref, direction, 1e-4)
    stats = estimator_moments(near, ref)
    assert stats["std"]["k3"] / stats["true_kl"] == pytest.approx(
        math.sqrt(log_ratio_shape(near, ref)["kurtosis"] - 1), rel=0.05)


# ----------------------------------------------------------------------------- loss gradients

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_k2_loss_is_reverse_kl_k3_loss_is_forward_kl_k1_loss_is_zero(seed):
    logits, ref = _pair(seed=seed, k=8, scale=1.5)
    reverse, forward = reverse_kl_grad(logits, ref), forward_kl_grad(logits, ref)
    assert rel_error(expected_loss_grad(logits, ref, "k2"), reverse) < 1e-12
    assert rel_error(expected_loss_grad(logits, ref, "k3"), forward) < 1e-12
    assert expected_loss_grad(logits, ref, "k1").abs().max() < 1e-15
    for kind in ("k1+", "k2+", "k3+"):
        assert rel_error(expected_loss_grad(logits, ref, kind), reverse) < 1e-12, kind
    # far from the reference the two directions differ, so these checks can fail
    assert rel_error(forward, reverse) > 0.05


def test_one_token_reward_placement_equals_reverse_kl_gradient():
    logits, ref = _pair(seed=7, k=8, scale=1.5)
    reward = expected_reward_grad(logits, ref)
    assert rel_error(reward, reverse_kl_grad(logits, ref)) < 1e-12
    assert rel_error(reward, expected_loss_grad(logits, ref, "k2")) < 1e-12
    assert rel_error(reward, forward_kl_grad(logits, ref)) > 0.05


def test_expected_loss_grad_is_what_a_large_sampled_batch_follows():
    logits, ref = _pair(seed=5, k=6, scale=1.0)
    ref_logp = torch.log_softmax(ref, -1)
    y = torch.multinomial(torch.softmax(logits, -1), 400_000, replacement=True,
                          generator=torch.Generator().manual_seed(1))
    for kind in ("k2", "k3"):
        z = logits.clone().requires_grad_(True)
        logp = torch.log_softmax(z, -1)
        # the trainer's loss: the estimator at the sampled tokens, averaged over the batch
        (sampled,) = torch.autograd.grad(kl_estimate(logp[y], ref_logp[y], kind).mean(), z)
        assert rel_error(sampled, expected_loss_grad(logits, ref, kind)) < 0.02, kind


def test_rel_error_values_and_errors():
    target = torch.tensor([3.0, 4.0], dtype=F64)
    assert rel_error(target.clone(), target) == 0.0
    assert rel_error(torch.zeros(2, dtype=F64), target) == 1.0
    assert rel_error(torch.tensor([3.0, 9.0], dtype=F64), target) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="nonzero"):
        rel_error(target, torch.zeros(2, dtype=F64))
    with pytest.raises(ValueError, match="same shape"):
        rel_error(target, torch.ones(3, dtype=F64))
    with pytest.raises(ValueError, match="NaN"):
        rel_error(torch.tensor([float("nan"), 0.0], dtype=F64), target)


# ----------------------------------------------------------------------------- logits_at_kl

def test_logits_at_kl_hits_the_target_and_moves_further_for_larger_kl():
    g = torch.Generator().manual_seed(6)
    ref, direction = torch.randn(50, generator=g, dtype=F64), torch.randn(50, generator=g, dtype=F64)
    previous = 0.0
    for target in (0.001, 0.03, 0.32, 1.08):
        logits, s = logits_at_kl(ref, direction, target)
        assert reverse_kl(logits, ref) == pytest.approx(target, rel=1e-12)
        torch.testing.assert_close(logits, ref + s * direction, rtol=0, atol=0)
        assert s > previous
        previous = s


def test_logits_at_kl_rejects_unreachable_or_meaningless_targets():
    ref = torch.zeros(4, dtype=F64)
    direction = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=F64)
    with pytest.raises(ValueError, match="out of reach"):
        logits_at_kl(ref, direction, 2.0)                  # saturates at log 4 = 1.386
    with pytest.raises(ValueError, match="constant"):
        logits_at_kl(ref, torch.ones(4, dtype=F64), 0.1)
    with pytest.raises(ValueError, match="positive"):
        logits_at_kl(ref, direction, 0.0)
    with pytest.raises(ValueError, match="same shape"):
        logits_at_kl(ref, direction[:3], 0.1)


# ----------------------------------------------------------------------------- two-token model

def test_two_token_kl_matches_a_loop_over_all_sequences():
    policy, ref = _two_token(seed=1)
    p1, p2 = torch.softmax(policy[0], -1), torch.softmax(policy[1], -1)
    q1, q2 = torch.softmax(ref[0], -1), torch.softmax(ref[1], -1)
    total = 0.0
    for a, b in itertools.product(range(4), repeat=2):
        p, q = p1[a] * p2[a, b], q1[a] * q2[a, b]
        total += (p * torch.log(p / q)).item()
    assert two_token_kl(policy, ref) == pytest.approx(total, abs=1e-14)


def test_two_token_kl_grad_matches_finite_differences():
    policy, ref = _two_token(seed=2)
    g1, g2 = two_token_kl_grad(policy, ref)
    fd1 = _central_differences(lambda z: two_token_kl((z, policy[1]), ref), policy[0])
    fd2 = _central_differences(lambda z: two_token_kl((policy[0], z), ref), policy[1])
    torch.testing.assert_close(g1, fd1, rtol=0, atol=1e-8)
    torch.testing.assert_close(g2, fd2, rtol=0, atol=1e-8)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reward_placement_is_the_exact_sequence_kl_gradient(seed):
    policy, ref = _two_token(seed=seed)
    exact = two_token_kl_grad(policy, ref)
    reward = two_token_reward_grad(policy, ref)
    for got, want in zip(reward, exact):
        assert rel_error(got, want) < 1e-12


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_k2_loss_is_exact_on_the_last_token_and_misses_the_future_term_on_the_first(seed):
    policy, ref = _two_token(seed=seed)
    exact1, exact2 = two_token_kl_grad(policy, ref)
    loss1, loss2 = two_token_loss_grad(policy, ref, "k2")
    assert rel_error(loss2, exact2) < 1e-12
    assert rel_error(loss1, exact1) > 1e-3
    # the missing piece: how the first token changes which second-token KL is visited
    second_kls = torch.tensor([reverse_kl(policy[1][a], ref[1][a]) for a in range(4)],
                              dtype=F64)                  # KL of the second token after y1 = a
    z = policy[0].clone().requires_grad_(True)
    (future,) = torch.autograd.grad((torch.softmax(z, -1) * second_kls).sum(), z)
    torch.testing.assert_close(exact1 - loss1, future, rtol=0, atol=1e-14)


def test_other_loss_placements():
    policy, ref = _two_token(seed=3)
    exact = two_token_kl_grad(policy, ref)
    k2 = two_token_loss_grad(policy, ref, "k2")
    for g in two_token_loss_grad(policy, ref, "k1"):
        assert g.abs().max() < 1e-15
    for got, want in zip(two_token_loss_grad(policy, ref, "k3+"), k2):
        assert rel_error(got, want) < 1e-12
    for got, want in zip(two_token_loss_grad(policy, ref, "k3"), exact):
        assert rel_error(got, want) > 1e-3


# ----------------------------------------------------------------------------- Exercise 1

def test_score_corrected_keeps_the_value_and_adds_the_score_term():
    logits, ref = _pair(seed=8)
    logp, ref_logp = torch.log_softmax(logits, -1), torch.log_softmax(ref, -1)
    for kind in ("k1", "k2", "k3"):
        torch.testing.assert_close(score_corrected(logp, ref_logp, kind),
                                   kl_penalty(logp, ref_logp, kind), rtol=0, atol=0)


@pytest.mark.parametrize("seed", [0, 1])
def test_corrected_losses_follow_the_gradient_of_their_exact_mean(seed):
    logits, ref = _pair(seed=seed, k=8, scale=1.5)
    reverse = reverse_kl_grad(logits, ref)
    for kind in ("k1", "k3"):          # unbiased values: the gradient of their mean is the KL's
        assert rel_error(expected_loss_grad(logits, ref, kind, corrected=True), reverse) < 1e-12
    # k2 is biased, so its corrected gradient is that of E[k2], not of the KL
    mean_k2 = lambda z: estimator_moments(z, ref)["mean"]["k2"]  # noqa: E731
    torch.testing.assert_close(expected_loss_grad(logits, ref, "k2", corrected=True),
                               _central_differences(mean_k2, logits), rtol=0, atol=1e-8)
    assert rel_error(expected_loss_grad(logits, ref, "k2", corrected=True), reverse) > 1e-3


def test_per_sample_grads_average_to_the_expected_gradient_and_match_closed_forms():
    logits, ref = _pair(seed=9, k=7, scale=1.2)
    p = torch.softmax(logits, -1)
    ell = torch.log_softmax(ref, -1) - torch.log_softmax(logits, -1)
    score = torch.eye(7, dtype=F64) - p                  # row y: grad of log pi(y) in the logits
    for kind, corrected in (("k1", False), ("k2", False), ("k3", False), ("k3+", False),
                            ("k1", True), ("k3", True)):
        rows = per_sample_grads(logits, ref, kind, corrected)
        assert rows.shape == (7, 7)
        torch.testing.assert_close(p @ rows, expected_loss_grad(logits, ref, kind, corrected),
                                   rtol=0, atol=1e-14)
    torch.testing.assert_close(per_sample_grads(logits, ref, "k2"), -ell[:, None] * score,
                               rtol=0, atol=1e-14)
    torch.testing.assert_close(per_sample_grads(logits, ref, "k1", corrected=True),
                               (1 - ell)[:, None] * score, rtol=0, atol=1e-14)
    # corrected k3 is k3+ sample by sample: (1 - e^l) + (e^l - 1 - l) = -l
    torch.testing.assert_close(per_sample_grads(logits, ref, "k3", corrected=True),
                               per_sample_grads(logits, ref, "k3+"), rtol=0, atol=1e-14)


# ----------------------------------------------------------------------------- Exercise 4

def test_sequence_model_kl_matches_a_loop_and_finite_differences():
    policy, ref = _three_token(seed=1)
    probs = [[torch.softmax(z, -1) for z in model] for model in (policy, ref)]
    total = 0.0
    for a, b, c in itertools.product(range(3), repeat=3):
        p, q = (m[0][a] * m[1][a, b] * m[2][a, b, c] for m in probs)
        total += (p * torch.log(p / q)).item()
    assert sequence_model_kl(policy, ref) == pytest.approx(total, abs=1e-14)
    grads = sequence_model_kl_grad(policy, ref)
    for t in range(3):
        def kl_in_table(z, t=t):
            return sequence_model_kl(policy[:t] + (z,) + policy[t + 1:], ref)
        torch.testing.assert_close(grads[t], _central_differences(kl_in_table, policy[t]),
                                   rtol=0, atol=1e-8)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_three_tokens_exact_placements_and_the_per_token_loss_gap(seed):
    policy, ref = _three_token(seed=seed)
    exact = sequence_model_kl_grad(policy, ref)
    for grads in (sequence_model_reward_grad(policy, ref),
                  sequence_model_loss_grad(policy, ref, "k2", future=True),
                  sequence_model_loss_grad(policy, ref, "k3+", future=True)):
        assert max(rel_error(g, e) for g, e in zip(grads, exact)) < 1e-12
    per_token = sequence_model_loss_grad(policy, ref, "k2")
    assert rel_error(per_token[2], exact[2]) < 1e-12          # the last token has no future
    assert min(rel_error(g, e) for g, e in zip(per_token[:2], exact[:2])) > 1e-3
    # k3's own-token gradient is the forward KL's, so the future term does not make it exact
    k3_future = sequence_model_loss_grad(policy, ref, "k3", future=True)
    assert min(rel_error(g, e) for g, e in zip(k3_future, exact)) > 1e-3


def test_one_and_two_token_sequence_models_are_the_earlier_helpers():
    logits, ref = _pair(seed=4)
    assert sequence_model_kl((logits,), (ref,)) == pytest.approx(reverse_kl(logits, ref), abs=1e-15)
    torch.testing.assert_close(sequence_model_reward_grad((logits,), (ref,))[0],
                               expected_reward_grad(logits, ref), rtol=0, atol=1e-15)


def test_bad_sequence_model_inputs():
    policy, ref = _three_token()
    with pytest.raises(ValueError, match="share the vocabulary and the length"):
        sequence_model_kl(policy, ref[:2])
    with pytest.raises(ValueError, match="tuple of logit tables"):
        sequence_model_kl((), ref)
    with pytest.raises(ValueError, match=r"\(V, V\)"):
        sequence_model_kl((policy[0], policy[1], policy[2][:, :, :2]), ref)


# ----------------------------------------------------------------------------- bad input

def test_bad_single_distribution_inputs():
    logits, ref = _pair()
    with pytest.raises(ValueError, match="same shape"):
        reverse_kl(logits, ref[:-1])
    with pytest.raises(ValueError, match=r"shape \(K,\)"):
        estimator_moments(logits[None], ref[None])
    bad = logits.clone()
    bad[2] = float("nan")
    for fn in (reverse_kl, forward_kl, estimator_moments, reverse_kl_grad, forward_kl_grad,
               expected_reward_grad):
        with pytest.raises(ValueError, match="NaN"):
            fn(bad, ref)
    bad[2] = float("inf")
    with pytest.raises(ValueError, match="finite"):
        reverse_kl(logits, bad)
    with pytest.raises(ValueError, match="floating-point"):
        reverse_kl(torch.arange(6), ref)
    with pytest.raises(ValueError, match="torch.Tensor"):
        reverse_kl([0.0, 1.0], ref)
    with pytest.raises(ValueError, match="at least 2"):
        reverse_kl(logits[:1], ref[:1])
    with pytest.raises(ValueError) as err:
        expected_loss_grad(logits, ref, "k4")
    assert all(kind in str(err.value) for kind in KL_ESTIMATE_KINDS)


def test_bad_two_token_inputs():
    policy, ref = _two_token()
    with pytest.raises(ValueError, match="pair"):
        two_token_kl(policy[0], ref)
    with pytest.raises(ValueError, match=r"\(V, V\)"):
        two_token_kl((policy[0], policy[1][:, :3]), ref)
    with pytest.raises(ValueError, match="share the vocabulary"):
        small = (torch.zeros(3, dtype=F64), torch.zeros(3, 3, dtype=F64))
        two_token_kl(policy, (small[0], small[1]))
    nan = policy[1].clone()
    nan[1, 2] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        two_token_reward_grad((policy[0], nan), ref)
    with pytest.raises(ValueError, match="allowed: k1, k2, k3, k1\\+, k2\\+, k3\\+"):
        two_token_loss_grad(policy, ref, "kl")
