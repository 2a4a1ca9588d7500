"""Tests of tinyagent.regularize: RegularizedConfig, regularized_loss/update, the reward
placement, the adaptive KL coefficient and train_regularized, including the check that the
faster trainer reproduces the runs recorded before the speed-up."""
import copy
import json
from pathlib import Path

import pytest
import torch

from tinyagent.evaluate import evaluate
from tinyagent.grpo import (RLConfig, compute_advantages, frozen_copy, rl_update, sample_step,
                            train_rl)
from tinyagent.policy import load_rl_base
from tinyagent.regularize import (RegularizedConfig, adaptive_kl_coef, first_choices,
                                  regularized_update, train_regularized)

REFERENCE_RUNS = Path(__file__).parent / "data" / "three_step_reference.json"

SMALL = dict(tasks_per_step=4, group_size=8)


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


def test_reward_placement_shapes_the_reward_and_drops_the_kl_loss():
    policy = load_rl_base()
    reward = dict(kl_kind="k1", kl_placement="reward")
    hist = train_regularized(policy, RegularizedConfig(**SMALL, kl_coef=0.3, **reward),
                             steps=2, progress=False)
    assert "sequence_kl" in hist[0] and hist[0]["sequence_kl"] == pytest.approx(0.0, abs=1e-12)
    assert hist[1]["sequence_kl"] != 0.0
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
        log = regularized_update(p, frozen_copy(base), torch.optim.SGD(p.parameters(), lr=0.1),
                                 batch, zero, cfg, torch.Generator().manual_seed(1))
        moved[where] = (torch.cat([x.flatten() for x in p.parameters()]), log["entropy"])
    assert moved["all"][1] == moved["after_observation"][1]      # the logged entropy: all positions
    assert not torch.allclose(moved["all"][0], moved["after_observation"][0], atol=1e-8)


@pytest.mark.parametrize("name", ["default", "k3_0.3_entropy", "reward_placement"])
def test_three_steps_reproduce_the_runs_recorded_before_the_speed_up(name):
    recorded = json.loads(REFERENCE_RUNS.read_text())["runs"][name]
    policy = load_rl_base()
    history = train_regularized(policy, RegularizedConfig(**recorded["config"]), steps=3,
                                progress=False)
    held_out = evaluate(policy, reference=load_rl_base(), n=4, ks=(1, 4))
    for ours, theirs in zip(history, recorded["history"]):
        for key, value in theirs.items():
            if key == "kl" and name == "reward_placement":
                continue            # then logged k3, now the k1 the placement uses
            assert ours[key] == pytest.approx(value, abs=1e-9, rel=0), (key, ours["step"])
    for key, value in recorded["eval"].items():
        assert held_out[key] == pytest.approx(value, abs=1e-9, rel=0), key
    for key, tensor in policy.state_dict().items():
        assert tensor.sum().item() == pytest.approx(recorded["param_sums"][key], abs=1e-9), key
