"""Tests of tinyagent.harness.runs: run keys (config, code, arithmetic) and runs computed in worker
processes or in-process."""
import json
from dataclasses import replace

import pytest
import torch

from tinyagent.harness import runs
from tinyagent.science.experiments import COMPARISON
from tinyagent.policy import Policy
from tinyagent.regularize import RegularizedConfig
from tinyagent.harness.runs import policy_digest


def test_a_run_is_keyed_by_its_code_and_the_arithmetic_it_is_computed_under(monkeypatch):
    cfg = RegularizedConfig()
    before = runs._run_config(cfg, 2)
    assert before["code"] == runs.CODE_VERSION and before["arithmetic"] == runs.worker_fingerprint()
    monkeypatch.setattr(runs, "_worker_fingerprint", {"kernels": "another arithmetic"})
    assert runs._run_config(cfg, 2) != before                   # never served across arithmetics
    monkeypatch.setattr(runs, "CODE_VERSION", "other code")
    assert runs._run_config(cfg, 2)["code"] == "other code"


def test_policy_digest_tells_policies_apart():
    assert policy_digest(Policy(seed=0)) == policy_digest(Policy(seed=0))
    assert policy_digest(Policy(seed=0)) != policy_digest(Policy(seed=1))


def test_one_and_two_workers_give_bitwise_the_same_runs(tmp_path, monkeypatch):
    jobs = [{"cfg": replace(COMPARISON["k3+ beta=0.3"], seed=seed, tasks_per_step=2), "steps": 2}
            for seed in (0, 1)]
    results = {}
    for workers in (1, 2):
        cache = tmp_path / f"workers{workers}"
        monkeypatch.setattr(runs, "CACHE_DIR", cache)
        monkeypatch.setenv("TINYAGENT_RUNS", str(cache))              # for the worker processes
        results[workers] = runs.regularized_runs(jobs, workers=workers, progress=False)
    assert len(list((tmp_path / "workers2").glob("*.pt"))) == 2     # each written by its worker
    for one, two in zip(results[1], results[2]):
        assert one["history"] == two["history"] and one["eval"] == two["eval"]
        assert all(torch.equal(one["state"][k], two["state"][k]) for k in one["state"])
    assert results[1][0]["history"] != results[1][1]["history"]      # the seeds differ


def test_a_longer_run_continues_its_shorter_one_to_the_same_bits(tmp_path, monkeypatch):
    job = {"cfg": replace(COMPARISON["k3+ beta=0.3"], seed=1, tasks_per_step=2)}
    results = {}
    for name, lengths in (("continued", (4, 2)), ("afresh", (4,))):    # longest first, as asked
        cache = tmp_path / name
        monkeypatch.setattr(runs, "CACHE_DIR", cache)
        monkeypatch.setenv("TINYAGENT_RUNS", str(cache))              # for the worker processes
        results[name] = runs.regularized_runs([{**job, "steps": n} for n in lengths],
                                              progress=False)[0]
    continued, afresh = results["continued"], results["afresh"]
    assert [log["step"] for log in continued["history"]] == [0, 1, 2, 3]
    assert continued["history"] == afresh["history"] and continued["eval"] == afresh["eval"]
    assert all(torch.equal(continued["state"][k], afresh["state"][k]) for k in afresh["state"])
    assert torch.equal(continued["generator"], afresh["generator"])


def test_workers_must_be_positive():
    with pytest.raises(ValueError, match="positive"):
        runs.regularized_runs([], workers=-1)


def test_an_empty_TINYAGENT_RUNS_does_not_put_the_cache_in_the_current_directory(tmp_path):
    import os
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c",
                           "from tinyagent.harness import runs; print(runs.CACHE_DIR)"],
                          env={**os.environ, "TINYAGENT_RUNS": ""}, cwd=tmp_path,
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == str(runs.PACKAGE.parent / ".cache" / "runs")



@pytest.mark.recorded_bits
def test_a_run_from_standard_input_completes_in_process(tmp_path):
    """A run trains in-process where this process computes the pinned arithmetic, so only where
    the stored bits are promised: elsewhere it needs a worker process, which a main module read
    from standard input cannot start (refused, as the next test shows)."""
    import os
    import subprocess
    import sys
    code = ("from tinyagent.regularize import RegularizedConfig\n"
            "from tinyagent.harness.runs import regularized_run\n"
            "run = regularized_run(RegularizedConfig(tasks_per_step=2), steps=1)\n"
            "print(len(run['history']))\n")
    done = subprocess.run([sys.executable, "-"], input=code, env={**os.environ,
                          "TINYAGENT_RUNS": str(tmp_path)}, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "1", done.stderr[-2000:]


def test_workers_from_standard_input_are_refused_with_what_to_do(tmp_path):
    import os
    import subprocess
    import sys
    code = ("from tinyagent.science.experiments import comparison_runs\n"
            "comparison_runs(['none', 'entropy 0.1'], seeds=(1,), steps=1, workers=2)\n")
    done = subprocess.run([sys.executable, "-"], input=code, env={**os.environ,
                          "TINYAGENT_RUNS": str(tmp_path)}, capture_output=True, text=True)
    assert done.returncode != 0 and "__main__" in done.stderr and "workers=1" in done.stderr


@pytest.mark.parametrize("call,error,message", [
    (lambda: runs.regularized_run({"kl_coef": 0.3}, steps=1), TypeError,
     "cfg must be a RegularizedConfig, got dict"),
    (lambda: runs.regularized_runs([], workers=0), ValueError, "workers must be a positive"),
    (lambda: runs.regularized_runs([], executor="garbage"), TypeError, "executor must be")])
def test_a_run_that_cannot_start_is_refused_before_any_worker(call, error, message):
    with pytest.raises(error, match=message):
        call()


class RecordingBar:
    """Stands in for tqdm: what the runs' progress bar was told."""
    made = []

    def __init__(self, total, initial=0, disable=False, **kwargs):
        self.total, self.count, self.updates, self.disable = total, initial, [], disable
        RecordingBar.made.append(self)

    def update(self, n=1):
        self.count += n
        self.updates.append(n)

    def close(self):
        pass

    def set_postfix_str(self, text):
        self.postfix = text


@pytest.mark.parametrize("workers", [1, 2])
def test_the_progress_bar_counts_the_steps_of_the_runs_in_flight(tmp_path, monkeypatch, workers):
    """One job cached, two computed (in this process, or in two workers): the bar starts at the
    cached run's steps and moves one step at a time, not one run at a time, up to every step."""
    monkeypatch.setattr(runs, "CACHE_DIR", tmp_path)
    monkeypatch.setenv("TINYAGENT_RUNS", str(tmp_path))
    monkeypatch.setattr(runs, "tqdm", RecordingBar)
    jobs = [{"cfg": replace(COMPARISON["none"], seed=seed, tasks_per_step=2), "steps": 3}
            for seed in (0, 1, 2)]
    runs.regularized_runs(jobs[:1], workers=1, progress=False)
    RecordingBar.made.clear()
    runs.regularized_runs(jobs, workers=workers, progress=True)
    [bar] = RecordingBar.made
    assert bar.total == 9 and bar.count == 9
    assert bar.updates.count(1) >= 5                 # steps, not runs (the last may come at the end)
    assert not any(n > 3 for n in bar.updates)
    assert not hasattr(bar, "postfix")               # no pace measured here yet: no guess


def test_a_bar_says_how_long_its_runs_will_take_from_the_pace_measured_here(tmp_path, monkeypatch):
    monkeypatch.setattr(runs, "CACHE_DIR", tmp_path)
    monkeypatch.setenv("TINYAGENT_RUNS", str(tmp_path))         # for any worker process
    monkeypatch.setattr(runs, "tqdm", RecordingBar)
    jobs = [{"cfg": replace(COMPARISON["none"], seed=seed, tasks_per_step=2), "steps": 3}
            for seed in (0, 1)]
    runs.regularized_runs(jobs[:1], workers=1, progress=True)
    pace = json.loads((tmp_path / runs._Pace.FILE).read_text())["seconds_per_step"]
    assert 0 < pace < 60
    RecordingBar.made.clear()
    runs.regularized_runs(jobs, workers=1, progress=True)
    [bar] = RecordingBar.made
    assert bar.postfix.startswith("about ") and bar.postfix.endswith(" here")
    RecordingBar.made.clear()
    runs.regularized_runs(jobs, workers=1, progress=True)          # all cached: nothing to time
    assert not hasattr(RecordingBar.made[0], "postfix")


def test_a_run_under_the_torch_engine_is_cached_apart_from_the_kernels_run(tmp_path, monkeypatch):
    """`engine.use("torch")` in a process changes the fingerprint its runs are cached under, and
    the workers it starts compute with the torch engine too: never a run of one engine served as
    the other's."""
    from tinyagent import engine
    monkeypatch.setattr(runs, "CACHE_DIR", tmp_path)
    monkeypatch.setenv("TINYAGENT_RUNS", str(tmp_path))         # for any worker process
    job = {"cfg": replace(COMPARISON["none"], seed=0, tasks_per_step=2), "steps": 2}
    kernels = runs.regularized_runs([job], workers=1, progress=False)[0]
    engine.use("torch")
    torch_run = runs.regularized_runs([job], workers=1, progress=False)[0]
    assert runs.params_sha256(kernels["state"]) != runs.params_sha256(torch_run["state"])
    assert len(list(tmp_path.rglob("*"))) >= 2
    engine.use(None)
    again = runs.regularized_runs([job], workers=1, progress=False)[0]
    assert runs.params_sha256(again["state"]) == runs.params_sha256(kernels["state"])
