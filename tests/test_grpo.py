import pytest
import torch

from tinyagent.grpo import (LoopHooks, RLConfig, TrainingState, compute_advantages, frozen_copy,
                            policy_loss, reference_logprobs, rl_update, sample_step, train_rl)
from tinyagent.policy import Policy
from tinyagent.checkpoint import load_rl_base

F64 = dict(dtype=torch.float64)


def test_advantages_zero_on_identical_groups_and_normalized_otherwise():
    rewards = torch.tensor([1, 1, 1, 1, 0, 1, 0, 1, 0, 0, 0, 0], **F64)
    adv, zero_share = compute_advantages(rewards, 4)
    assert (adv[:4] == 0).all() and (adv[8:] == 0).all()
    assert zero_share == pytest.approx(2 / 3)
    assert adv[4:8].mean().abs() < 1e-15 and adv[4:8].std().item() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="divisible by group_size"):
        compute_advantages(rewards, 5)


def test_clip_bounds_on_both_sides():
    cfg = RLConfig(eps_low=0.1, eps_high=0.3)
    old = torch.zeros(1, 4, **F64)
    mask = torch.ones(1, 4, dtype=torch.bool)
    ratios = torch.tensor([[0.5, 0.95, 1.2, 1.6]], **F64)
    logp = torch.log(ratios).requires_grad_(True)
    loss, frac = policy_loss(logp, old, torch.tensor([1.0], **F64), mask, cfg)
    loss.backward()
    # positive advantage: only the ratio above 1 + eps_high = 1.3 loses its gradient
    assert frac == 0.25 and (logp.grad[0, :3] != 0).all() and logp.grad[0, 3] == 0
    logp.grad = None
    loss, frac = policy_loss(logp, old, torch.tensor([-1.0], **F64), mask, cfg)
    loss.backward()
    # negative advantage: only the ratio below 1 - eps_low = 0.9 loses its gradient
    assert frac == 0.25 and logp.grad[0, 0] == 0 and (logp.grad[0, 1:] != 0).all()


@pytest.mark.parametrize("field, value, allowed", [
    ("eps_low", 1.5, r"\[0, 1\)"), ("eps_low", -0.1, r"\[0, 1\)"), ("eps_high", -0.2, "non-negative"),
    ("temperature", 0.0, "positive"), ("lr", float("nan"), r"in \[0, 1e\+06\]"), ("kl_coef", -0.1, r"in \[0, 1e\+06\]"),
    ("kl_coef", 1e39, "overflow the float32 policy"), ("lr", 1e308, "overflow"),
    ("minibatches", 3, "must divide"), ("group_size", 0, "positive integer"),
    ("group_size", 1, "at least 2")])
def test_config_fields_are_refused_outside_their_range(field, value, allowed):
    with pytest.raises(ValueError, match=allowed):
        RLConfig(**{field: value})


def test_train_rl_is_deterministic_and_moves_the_policy():
    cfg = RLConfig(tasks_per_step=4, group_size=8)
    a, b = load_rl_base(), load_rl_base()
    ha = train_rl(a, cfg, steps=2, progress=False)
    hb = train_rl(b, cfg, steps=2, progress=False)
    assert ha == hb
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    start = load_rl_base()
    assert any(not torch.equal(p, r) for p, r in zip(a.parameters(), start.parameters()))
    assert {"reward", "entropy", "kl_to_ref", "zero_adv_groups", "clip_frac", "reads",
            "malformed"} <= set(ha[0])


def test_kl_loss_pulls_toward_the_reference():
    """With only the KL term (all advantages zero) an update must lower the KL it penalizes."""
    cfg = RLConfig(tasks_per_step=2, group_size=4, kl_coef=1.0, kl_kind="k2", lr=1e-2)
    policy, gen = Policy(seed=0), torch.Generator().manual_seed(0)
    reference = Policy(seed=5)
    batch = sample_step(policy, cfg, gen)
    zero = torch.zeros(batch.rewards.shape, **F64)
    ref_logp = reference_logprobs(reference, batch)
    first = rl_update(policy, torch.optim.SGD(policy.parameters(), lr=1e-2), batch, zero, ref_logp,
                      cfg, gen)
    second = rl_update(policy, torch.optim.SGD(policy.parameters(), lr=1e-2), batch, zero, ref_logp,
                       cfg, gen)
    assert second["kl"] < first["kl"]
    assert frozen_copy(policy).head.weight.requires_grad is False


def test_group_sizes_and_counts_must_be_positive_integers():
    with pytest.raises(ValueError, match="group_size must be a positive integer"):
        compute_advantages(torch.zeros(8, dtype=torch.float64), 0)
    with pytest.raises(ValueError, match="group_size must be at least 2"):     # the std of one: NaN
        compute_advantages(torch.zeros(8, dtype=torch.float64), 1)
    with pytest.raises(ValueError, match="epochs must be a positive integer"):
        RLConfig(epochs=2.5)


def test_config_refuses_nan_and_inf_coefficients():
    for field in ("kl_coef", "lr", "eps_low", "eps_high", "temperature"):
        for bad in (float("nan"), float("inf")):
            if field == "eps_high" and bad == float("inf"):
                continue                       # allowed: DAPO removes the ceiling
            with pytest.raises(ValueError, match=f"{field} must be"):
                RLConfig(**{field: bad})
    assert RLConfig(eps_high=float("inf")).eps_high == float("inf")


def test_config_refuses_a_group_of_one():
    with pytest.raises(ValueError, match="group_size must be at least 2.*NaN"):
        RLConfig(group_size=1, minibatches=1)


def test_config_refuses_bools_and_non_integers_as_counts_and_seeds():
    for name, bad in (("group_size", True), ("tasks_per_step", True), ("seed", 1.5),
                      ("seed", "0"), ("seed", True), ("seed", -1)):
        with pytest.raises((TypeError, ValueError), match=f"{name} must be"):
            RLConfig(**{name: bad})


def test_config_refuses_a_temperature_too_small_for_finite_log_probs():
    with pytest.raises(ValueError, match="temperature must be .*at least 0.001"):
        RLConfig(temperature=1e-40)


def test_config_stores_numbers_in_their_fields_types():
    import numpy as np
    from dataclasses import asdict
    assert RLConfig(kl_coef=0, lr=1) == RLConfig(kl_coef=0.0, lr=1.0)
    assert asdict(RLConfig(kl_coef=0)) == asdict(RLConfig())
    assert type(RLConfig(kl_coef=0).kl_coef) is float and type(RLConfig(seed=np.int64(3)).seed) is int


def test_policy_loss_refuses_advantages_that_are_not_one_per_episode():
    cfg, mask = RLConfig(), torch.ones(2, 3, dtype=torch.bool)
    logp = torch.zeros(2, 3, **F64)
    for bad in (torch.zeros(2, 3, **F64), torch.zeros(3, **F64), torch.zeros(1, **F64)):
        with pytest.raises(ValueError, match=r"advantages must be a tensor \(B,\), one per episode"):
            policy_loss(logp, logp, bad, mask, cfg)
    with pytest.raises(ValueError, match="advantages must not contain NaN"):
        policy_loss(logp, logp, torch.tensor([0.0, float("nan")], **F64), mask, cfg)


def test_chapter9_refuses_bad_arguments_before_training(capsys):
    from tinyagent import chapter9
    for argv in (["--steps", "-5"], ["--steps", "0"], ["--group-size", "1"], ["--kl-coef", "inf"],
                 ["--lr", "nan"], ["--kl-kind", "k4"], ["--checkpoint", "missing.bin"]):
        with pytest.raises(SystemExit) as stopped:
            chapter9.parse_args(argv)
        assert stopped.value.code == 2 and "error:" in capsys.readouterr().err, argv


def test_chapter9_exposes_every_config_field():
    from tinyagent import chapter9
    args = chapter9.parse_args(["--steps", "3", "--kl-coef", "0.1", "--eps-high", "inf",
                                "--group-size", "4", "--seed", "7"])
    assert args.steps == 3 and args.cfg == RLConfig(kl_coef=0.1, eps_high=float("inf"),
                                                    group_size=4, seed=7)


def test_training_stops_at_the_first_non_finite_loss_naming_the_step():
    from tinyagent.grpo import NonFiniteError, grpo_loss
    calls = []

    def overflowing(*args):
        loss, stats = grpo_loss(*args)
        calls.append(1)
        return (loss * float("inf") if len(calls) > 2 else loss), stats   # from step 1 on
    policy = load_rl_base()
    with pytest.raises(NonFiniteError, match=r"step 1: the loss became non-finite.*lr="):
        train_rl(policy, RLConfig(tasks_per_step=1, group_size=2), steps=3,
                 hooks=LoopHooks(loss_fn=overflowing), progress=False)
    assert all(p.isfinite().all() for p in policy.parameters())      # no step trained on it


def test_training_stops_when_a_step_makes_the_parameters_non_finite():
    import torch
    from tinyagent.grpo import NonFiniteError
    policy = load_rl_base()

    class Overflowing(torch.optim.Adam):                 # as a huge step would end in float32
        def step(self, closure=None):
            super().step(closure)
            with torch.no_grad():
                policy.head.bias[0] = float("inf")
    with pytest.raises(NonFiniteError, match="step 0: the parameters became non-finite"):
        train_rl(policy, RLConfig(tasks_per_step=1, group_size=2), steps=2, progress=False,
                 state=TrainingState(Overflowing(policy.parameters(), lr=1e-3),
                                     torch.Generator().manual_seed(0)))


def test_a_run_continued_from_its_state_gives_the_bits_of_one_run():
    cfg = RLConfig(tasks_per_step=1, group_size=2)
    whole, halves = load_rl_base(), load_rl_base()
    log = train_rl(whole, cfg, steps=3, progress=False)
    state, reference = TrainingState.start(halves, cfg), frozen_copy(halves)
    parts = [train_rl(halves, cfg, steps=n, reference=reference, state=state, progress=False)
             for n in (2, 1)]
    assert parts[0] + parts[1] == log and state.step == 3 and parts[1][0]["step"] == 2
    assert all(torch.equal(p, q) for p, q in zip(whole.parameters(), halves.parameters()))


@pytest.mark.parametrize("kwargs,error,message", [
    (dict(tasks=[]), ValueError, "tasks must hold at least one item"),
    (dict(cfg={"lr": 1e-3}), TypeError, "cfg must be a RLConfig, got dict"),
    (dict(hooks=print), TypeError, "hooks must be a LoopHooks"),
    (dict(state=(None, None, 0)), TypeError, "state must be a TrainingState"),
    (dict(policy=None), TypeError, "policy must be a Policy, got NoneType"),
    (dict(reference="ref"), TypeError, "reference must be a Policy, got str"),
    (dict(progress="yes"), TypeError, "progress must be True .* False .* or a function")])
def test_train_rl_refuses_a_run_it_cannot_start_before_any_step(kwargs, error, message,
                                                                monkeypatch):
    from tinyagent import grpo
    work = []                          # the reference's copy, Adam's moments: after the checks
    monkeypatch.setattr(grpo, "frozen_copy", lambda policy: work.append("copy"))
    monkeypatch.setattr(grpo.TrainingState, "start", lambda policy, cfg: work.append("state"))
    with pytest.raises(error, match=message):
        train_rl(**{"policy": Policy(seed=0), "cfg": RLConfig(), "steps": 1, **kwargs})
    assert not work, f"{work} made before {message!r} was refused"


def test_integer_rewards_are_rewards():
    from tinyagent.grpo import compute_advantages
    as_int, _ = compute_advantages(torch.tensor([1, 0, 0, 1]), 4)
    as_float, _ = compute_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=torch.float64), 4)
    assert torch.equal(as_int, as_float)


def test_chapter9_evaluates_every_twenty_steps_and_after_the_last(monkeypatch, capsys):
    from tinyagent import chapter9
    seen = []

    def evaluate(policy, reference):
        seen.append(sum(p.sum().item() for p in policy.parameters()))
        return {"pass@1": 0.0, "pass@8": 0.0, "distinct": 1.0, "passed_per_task": [0]}
    monkeypatch.setattr(chapter9, "evaluate", evaluate)
    chapter9.main(["--steps", "21", "--group-size", "2", "--tasks-per-step", "1",
                   "--minibatches", "1"])
    assert len(seen) == 3 and len(set(seen)) == 3       # the base, after step 19, after step 20
    assert capsys.readouterr().out.count("held-out pass@1") == 2
