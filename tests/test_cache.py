"""Tests of tinyagent.harness.cache: keys, atomic writes, locks, plain data only, bad files
recomputed, and the code hash that keys every run."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tinyagent.harness import cache
from tinyagent.harness.cache import cached, code_digest, imported_modules, key


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


def test_a_readable_entry_of_the_wrong_structure_is_recomputed(tmp_path, capsys):
    compute, calls = counting({"value": 1})
    cached({"k": 1}, compute, tmp_path)
    (path,) = tmp_path.glob("*.pt")
    other = tmp_path / f"{key({'k': 2})}.pt"
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
            key(bad)
    assert (key({"cfg": asdict(RegularizedConfig(kl_coef=0, entropy_coef=0))})
            == key({"cfg": asdict(RegularizedConfig(kl_coef=0.0, entropy_coef=0.0))}))


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
    monkeypatch.setattr(cache.fcntl, "flock", no_lock)
    assert cached({"k": 1}, compute, tmp_path) == {"value": 1} and len(calls) == 1
    assert not list(tmp_path.glob("*.lock"))


def test_the_code_hash_ignores_docstrings_and_comments_but_not_code():
    source = (cache.PACKAGE / "grpo.py").read_text()
    assert '"""Chapter 9:' in source and "# (B, T)" in source and "1 - cfg.eps_low" in source
    prose = (source.replace('"""Chapter 9:', '"""Chapter Nine:', 1)
             .replace("# (B, T)", "# shape (B, T)")
             .replace('"""PPO\'s clipped', '"""The clipped', 1))
    assert prose != source and cache.source_digest(prose) == cache.source_digest(source)
    code = source.replace("1 - cfg.eps_low", "1 - 0.5 * cfg.eps_low", 1)
    assert cache.source_digest(code) != cache.source_digest(source)


def test_keys_depend_on_every_part_of_the_config():
    assert key({"a": 1, "b": 2}) == key({"b": 2, "a": 1})
    assert key({"a": 1}) != key({"a": 2})


def test_the_code_digest_covers_every_module_runs_imports():
    modules = imported_modules("harness.runs")
    for name in ("gym", "kl", "policy", "regularize", "sampler", "evaluation", "grpo", "vocab",
                 "harness.fingerprint", "harness.cache"):
        assert name in modules
    for name in ("science.plots", "science.book", "science.report", "pretrain",
                 "science.experiments", "science.study", "harness.cluster"):
        assert name not in modules
    assert code_digest("harness.runs") != code_digest("kl")


def test_imported_modules_follows_every_form_of_import_at_any_depth(tmp_path, monkeypatch):
    """A package laid out like ours, deeper: relative imports of levels 1-3, `from . import m`,
    `from tinyagent.x.y import`, `from tinyagent.x import module`, `import tinyagent.x.y`, an
    import inside a function; each package's __init__ counts, and a stdlib import does not."""
    files = {
        "__init__.py": "from .leaf import x\n",
        "leaf.py": "import os\nx = 1\n",
        "other.py": "y = 2\n",
        "deep/__init__.py": "",
        "deep/er/__init__.py": "from . import sibling\n",
        "deep/er/sibling.py": "from ...other import y\n",
        "deep/er/entry.py": ("from ..mid import z\n"
                             "from tinyagent.deep.er.absolute import w\n"
                             "import tinyagent.plain\n"
                             "def f():\n    from tinyagent.deep import lazy\n"),
        "deep/mid.py": "from ..leaf import x\nz = 3\n",
        "deep/er/absolute.py": "w = 4\n",
        "plain.py": "",
        "deep/lazy.py": "",
        "unused.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(cache, "PACKAGE", tmp_path)
    assert imported_modules("deep.er.entry") == sorted([
        "__init__", "leaf", "deep", "deep.er", "deep.er.entry", "deep.mid", "deep.er.absolute",
        "plain", "deep.lazy", "deep.er.sibling", "other"])       # the last two: deep/er/__init__'s
    assert imported_modules("deep.er") == sorted(["__init__", "leaf", "deep", "deep.er",
                                                  "deep.er.sibling", "other"])
    before = code_digest("deep.er.entry")
    (tmp_path / "deep" / "lazy.py").write_text("v = 5\n")      # a module three levels away
    assert code_digest("deep.er.entry") != before


def test_the_code_hash_covers_the_c_kernels(tmp_path, monkeypatch):
    """A kernel's C is the code of `engine.kernels`, the module that loads it: a change to any .c
    or .h file of tinyagent/engine/c/ changes the hash of what imports `engine.kernels`, and of
    nothing else."""
    c = tmp_path / "engine" / "c"
    c.mkdir(parents=True)
    for name, text in {"__init__.py": "", "engine/__init__.py": "", "engine/kernels.py": "k = 1\n",
                       "model.py": "from .engine.kernels import k\n",
                       "leaf.py": "", "engine/c/a.c": "int f(void) { return 1; }\n"}.items():
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(cache, "PACKAGE", tmp_path)
    model, leaf = code_digest("model"), code_digest("leaf")
    (c / "a.c").write_text("int f(void) { return 2; }\n")
    assert code_digest("model") != model and code_digest("leaf") == leaf
    model = code_digest("model")
    (c / "b.c").write_text("\n")                                  # a new C file counts too
    assert code_digest("model") != model
    model = code_digest("model")
    (c / "a.h").write_text("int f(void);\n")                      # and a header
    assert code_digest("model") != model


# A run as a notebook asks for it (in-process: this interpreter computes the pinned arithmetic),
# then every package module the process has loaded, by its dotted name below the package.
A_RUN = """
import json, sys
from tinyagent.harness.runs import regularized_runs
from tinyagent.regularize import RegularizedConfig
regularized_runs([{"cfg": RegularizedConfig(tasks_per_step=1, group_size=2, kl_coef=0.1,
                                            entropy_coef=0.01), "steps": 1}],
                 workers=1, progress=False)
print(json.dumps(sorted("__init__" if m == "tinyagent" else m.split(".", 1)[1]
                        for m in sys.modules if m == "tinyagent" or m.startswith("tinyagent."))))
"""


@pytest.mark.recorded_bits
def test_the_code_hash_covers_every_module_a_run_imports(tmp_path):
    env = {**os.environ, "TINYAGENT_RUNS": str(tmp_path), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", A_RUN], env=env, capture_output=True, text=True,
                          cwd=Path(cache.__file__).parents[2], timeout=600)
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout.splitlines()[-1]))
    assert "harness.runs" in loaded and "regularize" in loaded and "engine._kernels" in loaded
    loaded = {cache.KERNELS if m == "engine._kernels" else m for m in loaded}  # the C: kernels' code
    missing = loaded - set(imported_modules("harness.runs"))
    assert not missing, f"a run imports {sorted(missing)}, which the code hash leaves out"


def test_a_result_of_none_is_stored_and_loaded_like_any_other(tmp_path):
    compute, calls = counting(None)
    assert cached({"n": 1}, compute, tmp_path) is None
    assert cached({"n": 1}, compute, tmp_path) is None and len(calls) == 1


def test_equal_configs_share_a_key():
    from dataclasses import asdict

    from tinyagent.regularize import RegularizedConfig
    assert key(asdict(RegularizedConfig(kl_coef=-0.0))) == key(asdict(RegularizedConfig()))


@pytest.mark.parametrize("args", [
    lambda d: ({"n": 1}, {"v": 1}, d),                    # compute not a function
    lambda d: ({"n": 1}, lambda: 1, None),                # no cache directory
    lambda d: ({"n": 1}, lambda: 1, ""),                  # the empty path: the current directory
    lambda d: ({"n": 1}, lambda: 1, Path("")),            # Path("") is "."
    lambda d: ({"n": 1}, lambda: 1, "."),                 # the current directory
    lambda d: ({"n": 1}, lambda: 1, "./"),
    lambda d: ({"n": 1}, lambda: 1, d / "file"),          # a cache directory that is a file
    lambda d: ({"n": 1}, lambda: 1, d, True),             # a check that is not a function
    lambda d: ({"n": 1}, lambda: 1, d / "dir")])          # an entry that is a directory
def test_what_would_fail_after_the_compute_is_refused_before_it(tmp_path, capsys, monkeypatch,
                                                                args):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file").write_text("")
    (tmp_path / "dir" / f"{key({'n': 1})}.pt").mkdir(parents=True)
    config, compute, cache_dir, *check = args(tmp_path)
    calls = []
    run = (lambda: calls.append(1)) if callable(compute) else compute
    with pytest.raises((TypeError, ValueError, OSError),
                       match="compute must|cache_dir|check must|is a directory"):
        cached(config, run, cache_dir, *check)
    assert not calls and "recomputing" not in capsys.readouterr().out
    assert not list(tmp_path.glob("*.pt")) and not list(tmp_path.glob("*.lock"))


def test_a_check_that_raises_on_a_fresh_result_says_so(tmp_path):
    with pytest.raises(ValueError, match="check raised KeyError"):
        cached({"n": 1}, lambda: {"a": 1}, tmp_path, check=lambda r: r["missing"])
    assert not list(tmp_path.glob("*.pt"))
