"""Tests of tinyagent.harness.bench (its numbers are machine-dependent and not asserted): it parses its
command line before running anything, and its profile finds both halves of train_rl's steps."""
import pytest

import torch

from tinyagent.harness.bench import PHASES, kernel_rate, main, step_profile


def test_help_prints_usage_without_running_the_benchmark(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0 and "usage" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--steps", "3"])


def test_an_unknown_baseline_is_refused_before_anything_runs(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--against", "no-such-revision"])
    assert done.value.code == 2 and "not a commit" in capsys.readouterr().err
    with pytest.raises(SystemExit) as done:
        main(["--rounds", "0"])
    assert done.value.code == 2 and "positive number of alternations" in capsys.readouterr().err


def test_the_profile_times_sampling_and_updating():
    phases, shares = step_profile(steps=1)
    assert set(phases) == {*PHASES, "matmul GFLOP"} and all(value > 0 for value in phases.values())
    assert shares["matrix multiplies"] > 0 and phases["matmul GFLOP"] > 0


def test_both_floors_rates_time_a_product():
    """The kernel's rate and the pinned sgemm's, on a small product: positive and finite."""
    for multiply in (None, torch.matmul):
        rate = kernel_rate(multiply, shape=(8, 6, 5), repeats=2)
        assert 0 < rate < float("inf")
