"""Tests of tinyagent.runs: the cache (keys, atomic writes, locks, plain data only, bad files
recomputed) and runs computed in worker processes."""
from dataclasses import replace

import pytest
import torch

from tinyagent import runs
from tinyagent.experiments import COMPARISON
from tinyagent.policy import Policy
from tinyagent.runs import cached, code_version, imported_modules, policy_digest, run_key


def counting(result):
    calls = []

    def compute():
        calls.append(1)
        return result
    return compute, calls


def test_cache_computes_once_then_loads(tmp_path):
    compute, calls = counting({"value": [1.5, 2.5]})
    first = cached({"beta": 0.3}, compute, tmp_path)
    second = cached({"beta": 0.3}, compute, tmp_path)
    assert first == second == {"value": [1.5, 2.5]} and len(calls) == 1
    cached({"beta": 1.0}, compute, tmp_path)
    assert len(calls) == 2
    assert not list(tmp_path.glob("*.tmp"))          # written atomically, no leftovers


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_a_damaged_entry_is_reported_and_recomputed(tmp_path, capsys, damage):
    compute, calls = counting({"value": torch.arange(3.0)})
    cached({"beta": 0.3}, compute, tmp_path)
    (path,) = tmp_path.glob("*.pt")
    data = path.read_bytes()
    path.write_bytes({"truncate": data[: len(data) // 2], "garbage": b"not a torch file",
                      "empty": b""}[damage])
    again = cached({"beta": 0.3}, compute, tmp_path)
    assert torch.equal(again["value"], torch.arange(3.0)) and len(calls) == 2
    message = capsys.readouterr().out
    assert message.count("\n") == 1 and "unreadable" in message and path.name in message
    assert cached({"beta": 0.3}, compute, tmp_path) and len(calls) == 2   # repaired on disk


class Arbitrary:
    """An object a pickle could smuggle in; the cache must not execute or return it."""


def test_the_cache_does_not_unpickle_arbitrary_objects(tmp_path, capsys):
    compute, calls = counting({"value": 1})
    cached({"k": 1}, compute, tmp_path)
    (path,) = tmp_path.glob("*.pt")
    torch.save({"value": Arbitrary()}, path)
    assert cached({"k": 1}, compute, tmp_path) == {"value": 1} and len(calls) == 2
    assert "unreadable" in capsys.readouterr().out


def test_keys_depend_on_config_and_code(monkeypatch):
    assert run_key({"a": 1, "b": 2}) == run_key({"b": 2, "a": 1})
    assert run_key({"a": 1}) != run_key({"a": 2})
    before = run_key({"a": 1})
    monkeypatch.setattr(runs, "_CODE_VERSION", code_version()[::-1])    # as if a module changed
    assert run_key({"a": 1}) != before


def test_the_code_hash_covers_every_module_runs_imports():
    modules = imported_modules()
    for name in ("gym", "kl", "policy", "regularize", "sampler", "evaluate", "grpo", "vocab"):
        assert name in modules
    for name in ("plots", "book", "report", "pretrain", "experiments"):
        assert name not in modules


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
    done = subprocess.run([sys.executable, "-c", "from tinyagent import runs; print(runs.CACHE_DIR)"],
                          env={**os.environ, "TINYAGENT_RUNS": ""}, cwd=tmp_path,
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == str(runs.PACKAGE.parent / ".cache" / "runs")


def test_a_readable_entry_of_the_wrong_structure_is_recomputed(tmp_path, capsys):
    compute, calls = counting({"value": 1})
    cached({"k": 1}, compute, tmp_path)
    (path,) = tmp_path.glob("*.pt")
    other = tmp_path / f"{run_key({'k': 2})}.pt"
    for entry in ([1, 2, 3], {"value": 1}, "a string"):            # not what `cached` writes
        torch.save(entry, path)
        assert cached({"k": 1}, compute, tmp_path) == {"value": 1}
    wants_eval = lambda result: "eval" in result                   # noqa: E731
    assert cached({"k": 1}, lambda: {"eval": 2}, tmp_path, check=wants_eval) == {"eval": 2}
    with pytest.raises(ValueError, match="its check refuses"):
        cached({"k": 3}, compute, tmp_path, check=wants_eval)
    path.rename(other)                                             # an entry under another key
    assert cached({"k": 2}, compute, tmp_path) == {"value": 1}
    printed = capsys.readouterr().out
    assert len(calls) == 6 and printed.count("unreadable") == 5 and "wrong structure" in printed


def test_a_result_that_could_not_be_read_back_is_refused_before_it_is_written(tmp_path):
    import numpy as np
    compute, calls = counting({"history": [{"reward": np.float64(0.5)}]})
    with pytest.raises(TypeError, match=r"\['history'\]\[0\]\['reward'\] is a numpy.float64"):
        cached({"k": 1}, compute, tmp_path)
    assert not [p for p in tmp_path.iterdir() if p.suffix != ".lock"]


def test_keys_refuse_what_is_not_plain_data_and_equal_configs_share_one():
    from dataclasses import asdict
    from tinyagent.regularize import RegularizedConfig
    for bad in ({"x": torch.zeros(100)}, {"x": object()}, {1: "a"}):
        with pytest.raises(TypeError, match=r"config(\['x'\] is a| has the key)"):
            run_key(bad)
    assert (run_key({"cfg": asdict(RegularizedConfig(kl_coef=0, entropy_coef=0))})
            == run_key({"cfg": asdict(RegularizedConfig(kl_coef=0.0, entropy_coef=0.0))}))


def test_a_failed_save_leaves_no_temporary_file(tmp_path, monkeypatch):
    def disk_full(obj, f):
        f.write(b"half an entry")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(torch, "save", disk_full)
    with pytest.raises(OSError, match="No space"):
        cached({"k": 1}, lambda: {"value": 1}, tmp_path)
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob("*.pt"))


def test_reading_an_entry_takes_no_lock(tmp_path, monkeypatch):
    compute, calls = counting({"value": 1})
    cached({"k": 1}, compute, tmp_path)
    for lock in tmp_path.glob("*.lock"):
        lock.unlink()

    def no_lock(*args):
        raise PermissionError("the cache is read-only")
    monkeypatch.setattr(runs.fcntl, "flock", no_lock)
    assert cached({"k": 1}, compute, tmp_path) == {"value": 1} and len(calls) == 1
    assert not list(tmp_path.glob("*.lock"))


def test_the_code_hash_ignores_docstrings_and_comments_but_not_code():
    source = (runs.PACKAGE / "grpo.py").read_text()
    assert '"""Chapter 9:' in source and "# (B, T)" in source and "1 - cfg.eps_low" in source
    prose = (source.replace('"""Chapter 9:', '"""Chapter Nine:', 1)
             .replace("# (B, T)", "# shape (B, T)")
             .replace('"""PPO\'s clipped', '"""The clipped', 1))
    assert prose != source and runs.source_digest(prose) == runs.source_digest(source)
    code = source.replace("1 - cfg.eps_low", "1 - 0.5 * cfg.eps_low", 1)
    assert runs.source_digest(code) != runs.source_digest(source)
