"""Finished runs, computed in parallel worker processes and kept in an on-disk cache, so that a
notebook that reuses another's runs loads them instead of training again.

A run is keyed by a hash of its configuration and of the code that produced it (every module
`runs` imports, found by reading their imports, and the base checkpoint's checksum), so editing
the gym or the trainer invalidates old results instead of silently reusing them. Entries are
plain data (lists, dicts, numbers, tensors) loaded with `weights_only=True`, written atomically,
and computed under a per-run file lock, so two notebooks asking for the same run at once compute
it once. An unreadable entry (a full disk, a killed copy) is reported in one line and recomputed.
"""
import ast
import copy
import fcntl
import hashlib
import json
import os
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from multiprocessing import get_context
from pathlib import Path

import torch
from tqdm.auto import tqdm

from .arithmetic import pinned_environment
from .checks import positive_int
from .evaluate import evaluate
from .grpo import frozen_copy
from .policy import load_rl_base
from .regularize import train_regularized

PACKAGE = Path(__file__).resolve().parent
# TINYAGENT_RUNS="" counts as unset: an empty path would put the cache in the current directory.
CACHE_DIR = Path(os.environ.get("TINYAGENT_RUNS") or PACKAGE.parent / ".cache" / "runs")
# Progress bars for interactive use; `make test` and `make notebooks` set TINYAGENT_PROGRESS=0
# so that no bar ends up in the stored outputs.
SHOW_PROGRESS = os.environ.get("TINYAGENT_PROGRESS", "1") != "0"


def imported_modules(name="runs"):
    """The package's modules that `name` imports, directly or not (itself included), read from
    their `from .x import` statements."""
    seen, todo = set(), [name]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        tree = ast.parse((PACKAGE / f"{module}.py").read_text())
        todo += [node.module for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module]
    return sorted(seen)


def source_digest(source):
    """A hash of what Python source does: its parsed tree without docstrings. Comments,
    docstrings and layout do not change it, so editing the book's prose in a module does not
    recompute every cached run; any change to the code does."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()


def _hash_code():
    h = hashlib.sha256()
    for module in imported_modules():
        h.update(source_digest((PACKAGE / f"{module}.py").read_text()).encode())
    h.update((PACKAGE / "checkpoints" / "rl_base.sha256").read_bytes())
    return h.hexdigest()


_CODE_VERSION = _hash_code()


def code_version():
    """Hash of the code runs depend on and of the shipped base checkpoint, as this process
    imported them (so a file edited mid-session cannot relabel old results)."""
    return _CODE_VERSION


def _check_plain(value, where, tensors):
    """Refuse, naming where it is, anything in `value` but dicts, lists, tuples, strings, numbers,
    None and (if `tensors`) tensors: what a key is made of, or what an entry can be read back as
    with `weights_only=True` (a numpy number, say, would be written and then never read)."""
    from collections import OrderedDict        # (state_dict()'s type)
    if type(value) in (str, int, float, bool, type(None)):
        return
    if tensors and isinstance(value, torch.Tensor):
        return
    if type(value) in (list, tuple):
        for i, item in enumerate(value):
            _check_plain(item, f"{where}[{i}]", tensors)
        return
    if type(value) in (dict, OrderedDict):
        for key, item in value.items():
            if type(key) is not str and not (tensors and type(key) is int):
                raise TypeError(f"{where} has the key {key!r}; keys must be strings")
            _check_plain(item, f"{where}[{key!r}]", tensors)
        return
    allowed = "dicts, lists, strings, numbers, None" + (", tensors" if tensors else "")
    raise TypeError(f"{where} is a {type(value).__module__}.{type(value).__qualname__}; allowed: "
                    f"{allowed} (convert numpy numbers with float() or int())")


def run_key(config):
    """The cache key of a run described by `config`: plain data (dicts with string keys, lists,
    strings, numbers, None), so that two configs share a key only if they are equal. A tensor,
    say, is refused rather than keyed by its abbreviated repr."""
    _check_plain(config, "config", tensors=False)
    blob = json.dumps(config, sort_keys=True) + code_version()
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def _load(path, check=None):
    """A cached entry's result, or None (after saying so in one line) if the file is unreadable,
    is not an entry `cached` wrote under this key, or its result fails `check(result)`."""
    try:
        entry = torch.load(path, weights_only=True)
    except Exception as err:                     # truncated, corrupt, or not plain data
        reason = str(err).splitlines()[0][:100] if str(err) else type(err).__name__
    else:
        if not (isinstance(entry, dict) and set(entry) == {"key", "result"}):
            reason = "not a run cache entry"
        elif entry["key"] != path.stem:
            reason = f"the entry of another run, {entry['key']!r}"
        else:
            try:
                ok = check is None or check(entry["result"])
            except Exception:                    # a check that indexes a missing key, say
                ok = False
            if ok:
                return entry["result"]
            reason = "its result has the wrong structure"
    print(f"run cache: {path.name} is unreadable ({reason}); recomputing it")
    return None


def _path(config, cache_dir=None):
    return Path(cache_dir or CACHE_DIR) / f"{run_key(config)}.pt"


def lookup(config, cache_dir=None, check=None):
    """The cached result for `config`, or None if it is missing, unreadable or fails
    `check(result)` (see `_load`). Needs only read access to the cache."""
    path = _path(config, cache_dir)
    return _load(path, check) if path.exists() else None


def _identity(path):
    """What changes when a file is replaced (`os.replace` gives it a new inode), or None."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def cached(config, compute, cache_dir=None, check=None):
    """`compute()`'s result for `config`, loaded from the cache when present, readable and
    accepted by `check(result) -> bool` (if given), else computed and stored. The result must be
    plain data: dicts, lists, numbers, strings, tensors (anything else is refused before it is
    written). Reading needs no write access; computing takes a per-run lock, so two processes
    asking for the same run compute it once."""
    path = _path(config, cache_dir)
    seen = _identity(path)
    if (result := lookup(config, cache_dir, check)) is not None:
        return result
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)         # another process computing this run: wait for it
        if _identity(path) not in (None, seen):  # it wrote the entry while we waited
            if (result := lookup(config, cache_dir, check)) is not None:
                return result
        result = compute()
        _check_plain(result, "the result", tensors=True)
        if check is not None and not check(result):   # else it would be recomputed every time
            raise ValueError(f"compute() returned a result that its check refuses: "
                             f"{result!r:.200}")
        tmp = None
        try:
            with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as f:
                tmp = f.name
                torch.save({"key": path.stem, "result": result}, f)
            os.replace(tmp, path)
        except BaseException:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            raise
    return result


def policy_digest(policy):
    """A short hash of a policy's parameters, to key runs that start from it."""
    h = hashlib.sha256()
    for p in policy.state_dict().values():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def _run_config(cfg, steps=40, start=None, reference=None):
    """What keys a run (`regularized_run`'s arguments): its configuration, length, and the
    parameters it starts from and is anchored to (None: the RL base agent, or the start)."""
    return {"cfg": asdict(cfg), "steps": steps,
            "start": policy_digest(start if start is not None else load_rl_base()),
            "reference": None if reference is None else policy_digest(reference)}


RUN_PARTS = {"history", "eval", "eval_vs_reference", "state", "optimizer", "generator"}


def _compute_run(cfg, steps=40, start=None, reference=None):
    """In a worker: train a copy of `start` (default: the RL base agent) for `steps` steps of
    `train_regularized` under `cfg`, anchored to `reference` (default: the start), then evaluate it
    on the held-out split against the RL base agent and against the reference; cached with its
    optimizer and generator state. A cached shorter run of the same job is continued, not redone
    (the same bits: `train_rl` resumes exactly)."""
    torch.set_num_threads(1)
    base = load_rl_base()
    start = base if start is None else start
    config = _run_config(cfg, steps, start, reference)

    def compute():
        policy = copy.deepcopy(start)
        anchor = frozen_copy(start) if reference is None else reference
        optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
        generator = torch.Generator().manual_seed(cfg.seed)
        history = []
        if (earlier := _shorter_run(config, cfg)) is not None:
            policy.load_state_dict(earlier["state"])
            optimizer.load_state_dict(earlier["optimizer"])
            generator.set_state(earlier["generator"])
            history = earlier["history"]
        history = history + train_regularized(
            policy, cfg, steps=steps - len(history), reference=anchor, progress=False,
            optimizer=optimizer, generator=generator, first_step=len(history))
        vs_base = evaluate(policy, reference=base)
        anchored_at_base = reference is None and start is base
        return {"history": history,
                "eval": vs_base,
                "eval_vs_reference": (vs_base if anchored_at_base
                                      else evaluate(policy, reference=anchor)),
                "state": dict(policy.state_dict()),
                "optimizer": optimizer.state_dict(),
                "generator": generator.get_state()}

    return cached(config, compute, check=is_run)


def _shorter_run(config, cfg):
    """The longest cached run that `config` extends (same job, fewer steps), or None. An adaptive
    beta changes the config as it trains, so those runs always start afresh."""
    if cfg.kl_target is not None:
        return None
    for steps in range(config["steps"] - 1, 0, -1):
        if (run := lookup({**config, "steps": steps}, check=is_run)) is not None:
            return run
    return None


def is_run(result):
    """Whether a cached result has a run's parts (and so can be handed to a notebook)."""
    return isinstance(result, dict) and set(result) == RUN_PARTS


def _run_job(job):
    return _compute_run(**job)


def regularized_runs(jobs, workers=None, progress=SHOW_PROGRESS, desc="runs"):
    """`regularized_run(**job)` for every job (a dict of its arguments), in job order. Cached
    runs are loaded; the others are computed in `workers` worker processes (default: the
    TINYAGENT_WORKERS environment variable, else the number of cores), always started with the
    pinned arithmetic (arithmetic.py) at one torch thread each, and each written to the cache as
    it finishes. So the results depend on nothing but the jobs and the code: not on the number
    of workers, nor on the machine, nor on how the calling process set up torch. A job that
    extends another missing job (the same run, more steps) is computed after it, so that it
    continues it instead of training those steps again."""
    workers = positive_int("workers", int(workers or os.environ.get("TINYAGENT_WORKERS", 0)
                                          or os.cpu_count()))
    configs = [_run_config(**job) for job in jobs]
    results = [lookup(config, check=is_run) for config in configs]
    missing = [i for i, result in enumerate(results) if result is None]
    same_run = [{**config, "steps": None} for config in configs]
    extending = [i for i in missing if any(same_run[i] == same_run[j] and configs[j]["steps"]
                                           < configs[i]["steps"] for j in missing)]
    bar = tqdm(total=len(jobs), initial=len(jobs) - len(missing), desc=desc, disable=not progress)
    for wave in ([i for i in missing if i not in extending], extending):
        if not wave:
            continue
        with pinned_environment(), ProcessPoolExecutor(
                min(workers, len(wave)), mp_context=get_context("spawn")) as pool:
            futures = {i: pool.submit(_run_job, jobs[i]) for i in wave}
            for future in futures.values():
                future.add_done_callback(lambda _: bar.update())
            for i, future in futures.items():
                results[i] = future.result()
    bar.close()
    return results


def regularized_run(cfg, steps=40, start=None, reference=None):
    """One run (see `regularized_runs`): a copy of `start` (default: the RL base agent) trained
    for `steps` steps of `train_regularized` under `cfg` (a RegularizedConfig), anchored to
    `reference` (default: the start), and evaluated on the held-out split against the RL base
    agent and against the reference. Computed in a pinned worker and cached: returns
    {"history", "eval", "eval_vs_reference", "state"}."""
    return regularized_runs([{"cfg": cfg, "steps": steps, "start": start, "reference": reference}],
                            workers=1, progress=False)[0]


def policy_from_state(state):
    """A policy with the parameters of a cached run's `state`."""
    policy = load_rl_base()
    policy.load_state_dict(state)
    return policy
