"""Tests of tinyagent.bench: it times the computation the notebooks run, and its profile adds up.
(The benchmark's numbers themselves are machine-dependent and not asserted.)"""
import pytest
import torch

from tinyagent.bench import OPERATOR_GROUPS, DefaultRun, step_profile
from tinyagent.grpo import RLConfig, train_rl
from tinyagent.policy import load_rl_base


def test_the_timed_steps_are_chapter_9s_training_steps():
    run = DefaultRun(seed=3)
    sampling, update, tokens = run.step()
    assert sampling > 0 and update > 0 and tokens > 0
    trained = load_rl_base()
    train_rl(trained, RLConfig(seed=3), steps=1, progress=False)
    for ours, theirs in zip(run.policy.parameters(), trained.parameters()):
        assert torch.equal(ours, theirs)


def test_the_step_profile_splits_all_operator_time():
    shares, in_operators = step_profile(steps=1)
    assert sum(shares.values()) == pytest.approx(1.0)
    assert set(shares) <= set(OPERATOR_GROUPS) | {"other operators"}
    assert shares["matrix multiplies"] > 0 and 0 < in_operators <= 1
