"""Tests of tinyagent.regularize: RegularizedConfig, regularized_loss/update, the reward
placement, the adaptive KL coefficient and train_regularized, including the check that three
steps reproduce, bit for bit, the runs recorded under the pinned arithmetic."""
import copy
import json
import sys
from pathlib import Path

import pytest
import torch

from tinyagent.grpo import (RLConfig, compute_advantages, reference_logprobs, rl_update,
                            sample_step)
from tinyagent.checkpoint import load_rl_base
from tinyagent.regularize import (AdaptiveKLController, RegularizedConfig, adaptive_kl_coef,
                                  first_choices,
                                  regularized_update, train_regularized)

REFERENCE_RUNS = Path(__file__).parent / "data" / "three_step_reference.json"
sys.path.insert(0, str(REFERENCE_RUNS.parent))
from record_three_step_reference import record  # noqa: E402

SMALL = dict(tasks_per_step=4, group_size=8)


def test_regularized_update_equals_rl_update_with_regularizers_off():
    base = load_rl_base()
    cfg = RLConfig(**SMALL)
    a, b = copy.deepcopy(base), copy.deepcopy(base)
    batch = sample_step(base, cfg, torch.Generator().manual_seed(0))
    adv, _ = compute_advantages(batch.rewards, cfg.group_size)
    assert adv.abs().sum() > 0
    for policy, update in ((a, rl_update), (b, regularized_update)):
        update(policy, torch.optim.Adam(policy.parameters(), lr=cfg.lr), batch, adv,
               reference_logprobs(base, batch),
               cfg if update is rl_update else RegularizedConfig(**SMALL),
               torch.Generator().manual_seed(1))
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
        regularized_update(p, torch.optim.SGD(p.parameters(), lr=0.1), batch, zero,
                           reference_logprobs(ref, batch), cfg, torch.Generator().manual_seed(1))
        moved.append(torch.cat([x.flatten() for x in p.parameters()]))
    assert torch.allclose(moved[0], moved[1], atol=1e-14, rtol=0)
    assert not torch.allclose(moved[0], moved[2], atol=1e-10, rtol=0)


def test_reward_placement_shapes_the_reward_and_drops_the_kl_loss():
    policy = load_rl_base()
    reward = dict(kl_kind="k1", kl_placement="reward")
    hist = train_regularized(policy, RegularizedConfig(**SMALL, kl_coef=0.3, **reward),
                             steps=2, progress=False)
    # at step 0 the policy is the reference: only the sampler's float32 rounding (its cached
    # one-token passes against the trainer's whole-sequence pass) separates their log-probs
    assert abs(hist[0]["sequence_kl"]) < 1e-4 < abs(hist[1]["sequence_kl"])
    # the reward placement with kl_coef = 0 is the plain run
    a, b = load_rl_base(), load_rl_base()
    train_regularized(a, RegularizedConfig(**SMALL, **reward), steps=2, progress=False)
    train_regularized(b, RegularizedConfig(**SMALL), steps=2, progress=False)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_regularized_config_rejects_bad_values():
    with pytest.raises(ValueError, match="entropy_coef"):
        RegularizedConfig(entropy_coef=-0.1)
    with pytest.raises(ValueError, match="entropy_coef"):
        RegularizedConfig(entropy_coef=float("nan"))
    with pytest.raises(ValueError, match="allowed: k1, k2, k3, k1\\+"):
        RegularizedConfig(kl_kind="k4")
    with pytest.raises(ValueError, match="allowed: k1, k2, k3$"):
        RLConfig(kl_kind="k3+")
    with pytest.raises(ValueError, match="allowed: loss, reward"):
        RegularizedConfig(kl_placement="advantage")
    with pytest.raises(ValueError, match="set kl_kind='k1'"):
        RegularizedConfig(kl_coef=0.3, kl_placement="reward")          # k3 by default
    with pytest.raises(ValueError, match="allowed: all, after_observation"):
        RegularizedConfig(entropy_positions="everywhere")
    with pytest.raises(ValueError, match="kl_target > 0 and a starting kl_coef > 0"):
        RegularizedConfig(kl_target=0.05)                               # beta 0 cannot adapt





def test_adaptive_kl_coef_against_a_hand_computation():
    # kl twice the target: error clipped to +0.2, beta * (1 + 0.2 / 10)
    assert adaptive_kl_coef(0.1, kl=0.2, target=0.1) == pytest.approx(0.1 * 1.02, rel=1e-15)
    # kl 10% above the target: not clipped, beta * (1 + 0.1 / 10)
    assert adaptive_kl_coef(0.1, kl=0.11, target=0.1) == pytest.approx(0.1 * 1.01, rel=1e-12)
    # kl far below: clipped to -0.2
    assert adaptive_kl_coef(0.5, kl=0.0, target=0.1) == pytest.approx(0.5 * 0.98, rel=1e-15)
    with pytest.raises(ValueError, match="target > 0"):
        adaptive_kl_coef(0.1, kl=0.1, target=0.0)


def test_train_regularized_adapts_and_logs_beta():
    policy = load_rl_base()
    cfg = RegularizedConfig(**SMALL, kl_coef=0.1, kl_kind="k3+", kl_target=1e-6)
    hist = train_regularized(policy, cfg, steps=3, progress=False)
    betas = [log["kl_coef"] for log in hist]
    assert betas[0] == 0.1
    for before, after, log in zip(betas, betas[1:], hist):
        assert after == pytest.approx(adaptive_kl_coef(before, log["kl"], 1e-6), rel=1e-15)
    assert betas[2] > betas[1] > betas[0]             # the KL is above a tiny target: beta grows


def test_the_adaptive_controller_follows_adaptive_kl_coef_and_keeps_its_value():
    controller = AdaptiveKLController(0.1, target=0.1)
    assert controller.update(0.2) == adaptive_kl_coef(0.1, 0.2, 0.1) == controller.value
    assert controller.update(0.0) == adaptive_kl_coef(0.1 * 1.02, 0.0, 0.1)


def test_first_choices_are_the_token_after_each_call_opener():
    #            prompt   <call> read tests </call>  obs obs  <call> edit f </call>
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1]], dtype=torch.bool)
    assert first_choices(mask).nonzero()[:, 1].tolist() == [3, 9]


def test_entropy_bonus_after_observations_only_moves_the_policy_differently():
    base = load_rl_base()
    batch = sample_step(base, RLConfig(**SMALL), torch.Generator().manual_seed(0))
    zero = torch.zeros_like(batch.rewards)
    moved = {}
    for where in ("all", "after_observation"):
        p = copy.deepcopy(base)
        cfg = RegularizedConfig(**SMALL, minibatches=1, entropy_coef=0.1, entropy_positions=where)
        log = regularized_update(p, torch.optim.SGD(p.parameters(), lr=0.1), batch, zero,
                                 reference_logprobs(base, batch), cfg,
                                 torch.Generator().manual_seed(1))
        moved[where] = (torch.cat([x.flatten() for x in p.parameters()]), log["entropy"])
    assert moved["all"][1] == moved["after_observation"][1]      # the logged entropy: all positions
    assert not torch.allclose(moved["all"][0], moved["after_observation"][0], atol=1e-8)


@pytest.mark.parametrize("name", ["default", "k3_0.3_entropy", "reward_placement"])
@pytest.mark.recorded_bits
def test_three_steps_reproduce_the_recorded_runs_bit_for_bit(name):
    """Recorded under the pinned arithmetic (tests/data/record_three_step_reference.py): any
    x86-64 machine gives the same bits, so a difference means the arithmetic is not pinned or
    the code changed a number."""
    recorded = json.loads(REFERENCE_RUNS.read_text())["runs"][name]
    assert record(recorded["config"]) == recorded


def test_regularized_config_refuses_non_finite_coefficients():
    for fields in ({"entropy_coef": float("inf")}, {"entropy_coef": float("nan")},
                   {"kl_coef": 0.1, "kl_target": float("inf")},
                   {"kl_coef": 0.1, "kl_target": float("nan")}):
        (name,) = set(fields) - {"kl_coef"}
        with pytest.raises(ValueError, match=f"{name} must be (finite|in \\[0, 1e\\+06\\])"):
            RegularizedConfig(**fields)
    assert RegularizedConfig(entropy_coef=0).entropy_coef == 0.0     # stored as a float


def test_entropy_bonus_with_no_first_choice_in_the_minibatch_is_zero_not_nan():
    from tinyagent.regularize import regularized_loss
    g = torch.Generator().manual_seed(0)
    mask = torch.tensor([[False, True, False, True, False]] * 2)     # one-token calls only
    assert not first_choices(mask).any()
    logp = torch.log_softmax(torch.randn(2, 5, 7, generator=g, dtype=torch.float64), -1)[..., 0]
    log_dist = torch.log_softmax(torch.randn(int(mask.sum()), 316, generator=g,
                                             dtype=torch.float64), -1)
    advantages = torch.tensor([1.0, -1.0], dtype=torch.float64)
    losses = [regularized_loss(logp, logp, logp, log_dist, advantages, mask,
                               RegularizedConfig(entropy_coef=coef, entropy_positions=where))[0]
              for coef, where in ((0.1, "after_observation"), (0.0, "all"))]
    assert torch.isfinite(losses[0]) and losses[0].item() == losses[1].item()


def test_regularized_loss_and_first_choices_refuse_malformed_inputs():
    from tinyagent.regularize import regularized_loss
    mask = torch.tensor([[False, True, True]] * 2)
    logp = torch.zeros(2, 3, dtype=torch.float64)
    log_dist = torch.zeros(4, 316, dtype=torch.float64)
    with pytest.raises(ValueError, match="advantages must be a tensor"):
        regularized_loss(logp, logp, logp, log_dist, torch.zeros(2, 3, dtype=torch.float64), mask,
                         RegularizedConfig())
    for bad in (mask.long(), mask[0]):
        with pytest.raises(TypeError, match=r"mask must be a bool tensor \(B, T\)"):
            first_choices(bad)


def test_train_regularized_needs_a_regularized_config():
    with pytest.raises(TypeError, match="cfg must be a RegularizedConfig, got RLConfig"):
        train_regularized(load_rl_base(), RLConfig(), steps=1)
