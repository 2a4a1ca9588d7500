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

from .checks import positive_int
from .evaluate import evaluate
from .grpo import frozen_copy
from .policy import load_rl_base
from .regularize import train_regularized

PACKAGE = Path(__file__).resolve().parent
CACHE_DIR = Path(os.environ.get("TINYAGENT_RUNS", PACKAGE.parent / ".cache" / "runs"))
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


def _hash_code():
    h = hashlib.sha256()
    for module in imported_modules():
        h.update((PACKAGE / f"{module}.py").read_bytes())
    h.update((PACKAGE / "checkpoints" / "rl_base.sha256").read_bytes())
    return h.hexdigest()


_CODE_VERSION = _hash_code()


def code_version():
    """Hash of the code runs depend on and of the shipped base checkpoint, as this process
    imported them (so a file edited mid-session cannot relabel old results)."""
    return _CODE_VERSION


def run_key(config):
    """The cache key of a run described by a JSON-serializable `config`."""
    blob = json.dumps(config, sort_keys=True, default=str) + code_version()
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def _load(path):
    """A cached entry, or None (after saying so in one line) if the file is unreadable."""
    try:
        return torch.load(path, weights_only=True)
    except Exception as err:                     # truncated, corrupt, or not plain data
        reason = str(err).splitlines()[0][:100] if str(err) else type(err).__name__
        print(f"run cache: {path.name} is unreadable ({reason}); recomputing it")
        return None


def _path(config, cache_dir=None):
    return Path(cache_dir or CACHE_DIR) / f"{run_key(config)}.pt"


def lookup(config, cache_dir=None):
    """The cached result for `config`, or None if it is missing or unreadable."""
    path = _path(config, cache_dir)
    return _load(path) if path.exists() else None


def cached(config, compute, cache_dir=None):
    """`compute()`'s result for `config`, loaded from the cache when present and readable, else
    computed and stored. The result must be plain data: dicts, lists, numbers, strings, tensors."""
    path = _path(config, cache_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)         # another process computing this run: wait for it
        if (result := lookup(config, cache_dir)) is not None:
            return result
        result = compute()
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as f:
            torch.save(result, f)
        os.replace(f.name, path)
    return result


def policy_digest(policy):
    """A short hash of a policy's parameters, to key runs that start from it."""
    h = hashlib.sha256()
    for p in policy.state_dict().values():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def _run_config(cfg, steps=40, start=None, reference=None, progress=False):
    """What keys a run (`regularized_run`'s arguments): its configuration, length, and the
    parameters it starts from and is anchored to (None: the RL base agent, or the start)."""
    return {"cfg": asdict(cfg), "steps": steps,
            "start": policy_digest(start if start is not None else load_rl_base()),
            "reference": None if reference is None else policy_digest(reference)}


def regularized_run(cfg, steps=40, start=None, reference=None, progress=False):
    """Train a copy of `start` (default: the RL base agent) for `steps` steps of
    `train_regularized` under `cfg` (a RegularizedConfig), anchored to `reference` (default: the
    start), then evaluate it on the held-out split against the RL base agent and against the
    reference. Computed at one torch thread, so the result does not depend on where it ran.
    Cached: returns {"history", "eval", "eval_vs_reference", "state"}."""
    base = load_rl_base()
    start = base if start is None else start

    def compute():
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            policy = copy.deepcopy(start)
            anchor = frozen_copy(start) if reference is None else reference
            history = train_regularized(policy, cfg, steps=steps, reference=anchor,
                                        progress=progress)
            vs_base = evaluate(policy, reference=base)
            anchored_at_base = reference is None and start is base
            return {"history": history,
                    "eval": vs_base,
                    "eval_vs_reference": (vs_base if anchored_at_base
                                          else evaluate(policy, reference=anchor)),
                    "state": dict(policy.state_dict())}
        finally:
            torch.set_num_threads(threads)

    return cached(_run_config(cfg, steps, start, reference), compute)


def _run_job(job):
    return regularized_run(**job)


def regularized_runs(jobs, workers=None, progress=SHOW_PROGRESS, desc="runs"):
    """`regularized_run(**job)` for every job (a dict of its arguments), in job order. Cached
    runs are loaded; the others are computed in `workers` processes at one torch thread each
    (default: the TINYAGENT_WORKERS environment variable, else the number of cores), each
    written to the cache as it finishes. The results do not depend on the number of workers."""
    workers = positive_int("workers", int(workers or os.environ.get("TINYAGENT_WORKERS", 0)
                                          or os.cpu_count()))
    results = [lookup(_run_config(**job)) for job in jobs]
    missing = [i for i, result in enumerate(results) if result is None]
    bar = tqdm(total=len(jobs), initial=len(jobs) - len(missing), desc=desc, disable=not progress)
    if workers == 1 or len(missing) <= 1:
        for i in missing:
            results[i] = regularized_run(**jobs[i])
            bar.update()
    else:
        with ProcessPoolExecutor(min(workers, len(missing)), mp_context=get_context("spawn")) as pool:
            futures = {i: pool.submit(_run_job, jobs[i]) for i in missing}
            for future in futures.values():
                future.add_done_callback(lambda _: bar.update())
            for i, future in futures.items():
                results[i] = future.result()
    bar.close()
    return results


def policy_from_state(state):
    """A policy with the parameters of a cached run's `state`."""
    policy = load_rl_base()
    policy.load_state_dict(state)
    return policy
