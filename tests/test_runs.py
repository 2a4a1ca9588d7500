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


def test_workers_must_be_positive():
    with pytest.raises(ValueError, match="positive"):
        runs.regularized_runs([], workers=-1)
