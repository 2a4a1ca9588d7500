"""Tests of tinyagent.harness.bench (its numbers are machine-dependent and not asserted): it parses its
command line before running anything, its profile finds both halves of train_rl's steps and counts
their products once, its rates divide the right work by the right time, and it builds a baseline's
C kernels only where they exist."""
import os
import shutil
import time

import pytest
import torch

from tinyagent.engine import matmul
from tinyagent.grpo import RLConfig, train_rl
from tinyagent.harness import bench
from tinyagent.harness.bench import PHASES, build_kernels, kernel_rate, main, step_profile
from tinyagent.harness.cache import ROOT
from tinyagent.checkpoint import load_rl_base


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
    assert set(phases) == {*PHASES, "step", "matmul GFLOP"}
    assert all(value > 0 for value in phases.values())
    assert shares["matrix multiplies"] > 0 and phases["matmul GFLOP"] > 0


def test_the_floor_counts_the_timed_steps_products_once():
    """The GFLOP a step's floor is computed from are those of the timed steps alone, not also of
    the profiled repeat of the same steps: the same count as one step's products counted here."""
    counted, plain = [0], matmul._bmm

    def count(a, b, *args, **epilogue):
        counted[0] += 2 * a.numel() * b.shape[-1]
        return plain(a, b, *args, **epilogue)
    matmul._bmm = count
    try:
        train_rl(load_rl_base(), RLConfig(), steps=1, progress=False)
    finally:
        matmul._bmm = plain
    phases, _ = step_profile(steps=1)
    assert phases["matmul GFLOP"] == counted[0] / 1e9


def test_a_rate_counts_two_flops_per_multiply_add_over_the_best_pass():
    """kernel_rate times three passes of `repeats` products and divides 2 M K N per product by the
    best pass: with a product that takes at least 2 ms, the rate cannot exceed that bound."""
    calls = []

    def slow(a, b):
        calls.append((tuple(a.shape), tuple(b.shape)))
        time.sleep(0.002)
    rate = kernel_rate(slow, shape=(8, 6, 5), repeats=2)
    assert calls == [((1, 8, 6), (1, 6, 5))] * 6
    assert 0 < rate <= 2 * 8 * 6 * 5 / 0.002 / 1e9
    assert kernel_rate(torch.matmul, shape=(8, 6, 5), repeats=2) > 0


def test_a_baseline_without_c_kernels_is_left_alone_and_a_failed_build_is_named(tmp_path):
    """build_kernels compiles only a revision that has tinyagent/matmul.c, and a compiler error
    stops the bench with the tree's name instead of a baseline that imports this code's kernels."""
    build_kernels(tmp_path)                                    # 26560f8's kind: nothing to build
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "tinyagent").mkdir()
    shutil.copy(ROOT / "setup.py", tmp_path)
    (tmp_path / "tinyagent" / "matmul.c").write_text("this is not C\n")
    (tmp_path / "tinyagent" / "gelu.c").write_text("this is not C either\n")
    with pytest.raises(RuntimeError, match="building the C kernels in"):
        build_kernels(tmp_path)


@pytest.mark.parametrize("argv, words", [
    (["--instructions"], "--against"),
    (["--instructions", "--against", "HEAD"], "valgrind"),
])
def test_counting_instructions_is_refused_before_anything_runs(argv, words, capsys, monkeypatch):
    monkeypatch.setattr(bench.shutil, "which", lambda tool: None)
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2 and words in capsys.readouterr().err


def test_instructions_are_counted_from_the_runs_first_step_to_the_end_of_its_evaluation(
        tmp_path, monkeypatch):
    """With stand-ins for valgrind (it runs the program and reports a count) and callgrind_control
    (it logs each switch), the count is read off valgrind's report, and counting is switched on
    once, as the run's training starts, and off once, after its evaluation."""
    log = tmp_path / "switches"
    (tmp_path / "valgrind").write_text(
        '#!/bin/sh\nwhile [ "${1#--}" != "$1" ]; do shift; done\n"$@" || exit $?\n'
        'echo "==1== Collected : 4242" >&2\n')
    (tmp_path / "callgrind_control").write_text(f'#!/bin/sh\necho "$1" >> {log}\n')
    for tool in ("valgrind", "callgrind_control"):
        (tmp_path / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    marks_the_load = ("load = bench.load_rl_base\n"
                      "def marked_load():\n"
                      f"    with open({str(log)!r}, 'a') as f: print('load', file=f)\n"
                      "    return load()\n"
                      "bench.load_rl_base = marked_load\n")
    monkeypatch.setattr(bench, "COUNTED", bench.COUNTED.replace(
        "bench.timed_run(", marks_the_load + "bench.timed_run("))
    assert bench.counted_revisions((None,)) == {None: 4242}
    assert log.read_text().split() == ["load", "--instr=on", "--instr=off"]
