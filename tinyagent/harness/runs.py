"""Training runs of Sections 10.6-10.8, computed in parallel worker processes and kept in the
on-disk cache (cache.py), so that a notebook that reuses another's runs loads them.

A run's cache key holds its configuration, the parameters it starts from and is anchored to, a
hash of the code it runs (every module `runs` imports, and the shipped checkpoint's checksum), and
the arithmetic fingerprint its worker computes under (fingerprint.py). Editing the gym or the
trainer therefore recomputes old results instead of silently reusing them, and a run computed
under another arithmetic is never served as one computed under the pinned one.
"""
import copy
import hashlib
import json
import os
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict
from multiprocessing import get_context

import torch
from tqdm.auto import tqdm

from .. import engine
from ..engine.arithmetic import pinned_environment, torch_threads
from .cache import PACKAGE, cached, code_digest, lookup
from ..checks import env_flag, env_path, env_positive_int, instance, positive_int
from ..evaluation import evaluate
from .fingerprint import check_arithmetic, fingerprint, matches, mismatch_message
from ..grpo import TrainingState, frozen_copy
from ..checkpoint import RL_BASE_CHECKPOINT, load_policy, load_rl_base
from ..regularize import RegularizedConfig, train_regularized

# TINYAGENT_RUNS="" counts as unset: an empty path would put the cache in the current directory.
CACHE_DIR = env_path("TINYAGENT_RUNS", PACKAGE.parent / ".cache" / "runs")
# Progress bars for interactive use; `make test` and `make notebooks` set TINYAGENT_PROGRESS=0
# so that no bar ends up in the stored outputs.
SHOW_PROGRESS = env_flag("TINYAGENT_PROGRESS", True)
# The code runs depend on, as this process imported it, and the shipped agent it evaluates against.
CODE_VERSION = code_digest("harness.runs") + RL_BASE_CHECKPOINT.with_suffix(".sha256").read_text().strip()
SHIPPED_AGENT = "rl_base"


def load_agent(name=SHIPPED_AGENT):
    """A base agent by name: the shipped RL base agent, or a study agent built beside it
    (`tinyagent/checkpoints/<name>.pt`, see study.py)."""
    if name == SHIPPED_AGENT:
        return load_rl_base()
    return load_policy(RL_BASE_CHECKPOINT.with_name(f"{name}.pt"))


_worker_fingerprint = {}     # the engine in force -> the fingerprint its runs are computed under


def worker_fingerprint():
    """The fingerprint runs are computed under: this process's when it is the pinned one (workers
    start from the same environment with the pins forced), else one pinned worker's, asked once
    for each engine (`engine.use` may change it)."""
    which = engine.in_force()
    if which not in _worker_fingerprint:
        if matches():
            _worker_fingerprint[which] = fingerprint()
        else:
            _refuse_unspawnable_main()
            with workers_environment(), ProcessPoolExecutor(1, mp_context=get_context("spawn")) as p:
                _worker_fingerprint[which] = p.submit(fingerprint).result()
    return _worker_fingerprint[which]


@contextmanager
def workers_environment():
    """The pins, and TINYAGENT_ENGINE naming the engine in force here, in os.environ for the body:
    worker processes started there compute as this process does (an `engine.use` choice
    included); the caller's environment comes back afterwards."""
    before = os.environ.get(engine.VARIABLE)
    os.environ[engine.VARIABLE] = engine.in_force()
    try:
        with pinned_environment():
            yield
    finally:
        if before is None:
            os.environ.pop(engine.VARIABLE, None)
        else:
            os.environ[engine.VARIABLE] = before


def params_sha256(state):
    """SHA-256 of a policy's parameters in state_dict order: what a recomputation must match."""
    h = hashlib.sha256()
    for tensor in state.values():
        h.update(tensor.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def policy_digest(policy):
    """A short hash of a policy's parameters, to key runs that start from it."""
    return params_sha256(policy.state_dict())[:16]


def _run_config(cfg, steps=40, start=None, reference=None, agent=SHIPPED_AGENT):
    """What keys a run (`regularized_run`'s arguments): its configuration, length, base agent, the
    parameters it starts from and is anchored to (None: the base agent, or the start), the code
    and the arithmetic it is computed under."""
    cfg, steps = instance("cfg", cfg, RegularizedConfig), positive_int("steps", steps)
    return {"cfg": asdict(cfg), "steps": steps, "agent": agent,
            "start": policy_digest(start if start is not None else load_agent(agent)),
            "reference": None if reference is None else policy_digest(reference),
            "code": CODE_VERSION, "arithmetic": worker_fingerprint()}


RUN_PARTS = {"history", "eval", "eval_vs_reference", "state", "optimizer", "generator"}


def _compute_run(cfg, steps=40, start=None, reference=None, agent=SHIPPED_AGENT, on_step=None):
    """In a worker (or in a process that computes the pinned arithmetic): train a copy of `start`
    (default: the base agent `agent`) for `steps` steps of `train_regularized` under `cfg`,
    anchored to `reference` (default: the start), then evaluate it on the held-out split against
    the base agent and against the reference; cached with its optimizer and generator state. A
    cached shorter run of the same job is continued, not redone (the same bits: `train_rl`
    resumes exactly). `on_step`, if given, is called after each step it trains (progress)."""
    check_arithmetic()
    base = load_agent(agent)
    start = base if start is None else start
    config = _run_config(cfg, steps, start, reference, agent)

    def compute():
        policy = copy.deepcopy(start)
        anchor = frozen_copy(start) if reference is None else reference
        state = TrainingState.start(policy, cfg)
        history = []
        if (earlier := _shorter_run(config, cfg)) is not None:
            policy.load_state_dict(earlier["state"])
            state.optimizer.load_state_dict(earlier["optimizer"])
            state.generator.set_state(earlier["generator"])
            history, state.step = earlier["history"], len(earlier["history"])
        history = history + train_regularized(policy, cfg, steps=steps - len(history),
                                              reference=anchor, state=state,
                                              progress=on_step or False)
        vs_base = evaluate(policy, reference=base)
        anchored_at_base = reference is None and start is base
        return {"history": history,
                "eval": vs_base,
                "eval_vs_reference": (vs_base if anchored_at_base
                                      else evaluate(policy, reference=anchor)),
                "state": dict(policy.state_dict()),
                "optimizer": state.optimizer.state_dict(),
                "generator": state.generator.get_state()}

    with torch_threads(1):                  # the pinned arithmetic is one thread's
        return cached(config, compute, CACHE_DIR, check=is_run)


def _shorter_run(config, cfg):
    """The longest cached run that `config` extends (same job, fewer steps), or None. An adaptive
    beta changes the config as it trains, so those runs always start afresh."""
    if cfg.kl_target is not None:
        return None
    for steps in range(config["steps"] - 1, 0, -1):
        if (run := lookup({**config, "steps": steps}, CACHE_DIR, check=is_run)) is not None:
            return run
    return None


def is_run(result):
    """Whether a cached result has a run's parts (and so can be handed to a notebook)."""
    return isinstance(result, dict) and set(result) == RUN_PARTS


def _run_job(job, required=None, steps_done=None, index=None):
    """A worker's entry: its own fingerprint is the one its runs are keyed by. A worker of another
    machine (`executor`) must compute the `required` one, or it refuses. With a `steps_done` queue
    (progress on, local workers), each trained step puts the job's `index` on it."""
    mine = _worker_fingerprint[engine.in_force()] = fingerprint()
    if required is not None and mine != required:
        raise RuntimeError(f"a remote worker refuses the run: {mismatch_message()}")
    on_step = None if steps_done is None else (lambda log: steps_done.put(index))
    return _compute_run(**job, on_step=on_step)


class _StepBar:
    """A progress bar over the steps of a list of runs: cached runs count as done, and a run in
    flight moves the bar at each step it trains, so the bar (and its ETA) moves within seconds of
    the start rather than at the end of the first run. A run that continues a cached shorter run
    trains fewer steps than it has; its remainder is added when it finishes."""

    def __init__(self, steps, done, desc, progress):
        self.steps, self.counted = steps, [s if d else 0 for s, d in zip(steps, done)]
        self.bar = tqdm(total=sum(steps), initial=sum(self.counted), desc=desc, unit="step",
                        disable=not progress)
        self.enabled, self.lock = progress, threading.Lock()    # two threads report

    def step(self, i):
        with self.lock:
            if self.counted[i] < self.steps[i]:
                self.counted[i] += 1
                self.bar.update(1)

    def finished(self, i):
        with self.lock:
            self.bar.update(self.steps[i] - self.counted[i])
            self.counted[i] = self.steps[i]

    def close(self):
        self.bar.close()


class _Pace:
    """How long the runs about to train will take on this machine: a progress bar's note before
    the first step, from the pace `record` measured last time (seconds a step takes one worker),
    kept beside the run cache. Only a visible bar uses it, so no stored output depends on it."""

    FILE = "pace.json"

    def __init__(self, steps, workers, bar):
        self.steps, self.workers, self.start = steps, workers, time.perf_counter()
        try:
            seconds = float(json.loads((CACHE_DIR / self.FILE).read_text())["seconds_per_step"])
        except (OSError, ValueError, KeyError, TypeError):
            return
        minutes = steps * seconds / workers / 60
        bar.bar.set_postfix_str(f"about {minutes:.0f} min here" if minutes >= 1.5
                                else f"about {60 * minutes:.0f} s here")

    def record(self):
        seconds = (time.perf_counter() - self.start) * self.workers / self.steps
        try:
            CACHE_DIR.mkdir(parents=True, exist_ok=True)
            (CACHE_DIR / self.FILE).write_text(json.dumps({"seconds_per_step": round(seconds, 4)}))
        except OSError:
            pass                            # a note for the next bar, not worth failing a run


@contextmanager
def _step_queue(bar):
    """A queue the worker processes put a job's index on after each step, drained into `bar` by a
    thread of this process; None (and no extra process) when the bar is off."""
    if not bar.enabled:
        yield None
        return
    with get_context("spawn").Manager() as manager:
        queue = manager.Queue()

        def drain():
            while (i := queue.get()) is not None:
                bar.step(i)

        thread = threading.Thread(target=drain, daemon=True)
        thread.start()
        try:
            yield queue
        finally:
            queue.put(None)
            thread.join()


def regularized_runs(jobs, workers=None, progress=SHOW_PROGRESS, desc="runs", executor=None):
    """`regularized_run(**job)` for every job (a dict of its arguments), in job order. Cached
    runs are loaded; the others are computed in `workers` worker processes (default: the
    TINYAGENT_WORKERS environment variable, else the number of cores), always started with the
    pinned arithmetic (arithmetic.py) at one torch thread each, and each written to the cache as
    it finishes. So the results depend on nothing but the jobs and the code: not on the number
    of workers, nor on the machine, nor on how the calling process set up torch. A job that
    extends another missing job (the same run, more steps) is computed after it, so that it
    continues it instead of training those steps again. An `executor` (a concurrent.futures
    Executor whose workers may run on other machines, cluster.py) replaces the local pool: each
    worker must compute this machine's pinned fingerprint, and the results come back into the
    local cache."""
    if workers is None:
        workers = env_positive_int("TINYAGENT_WORKERS") or os.cpu_count()
    workers = positive_int("workers", workers)
    if executor is not None and not callable(getattr(executor, "submit", None)):
        raise TypeError(f"executor must be a concurrent.futures Executor (cluster.py), or None "
                        f"for local workers, got {executor!r:.100}")
    configs = [_run_config(**job) for job in jobs]
    results = [lookup(config, CACHE_DIR, check=is_run) for config in configs]
    missing = [i for i, result in enumerate(results) if result is None]
    same_run = [{**config, "steps": None} for config in configs]
    extending = [i for i in missing if any(same_run[i] == same_run[j] and configs[j]["steps"]
                                           < configs[i]["steps"] for j in missing)]
    bar = _StepBar([config["steps"] for config in configs], [r is not None for r in results],
                   desc, progress)
    pace = _Pace(sum(configs[i]["steps"] for i in missing), min(workers, max(len(missing), 1)),
                 bar) if bar.enabled and missing and executor is None else None
    for wave in ([i for i in missing if i not in extending], extending):
        if wave and min(workers, len(wave)) == 1 and matches():
            for i in wave:                  # this process computes the pinned arithmetic
                results[i] = _compute_run(**jobs[i], on_step=(lambda log, i=i: bar.step(i))
                                          if bar.enabled else None)
                bar.finished(i)
        elif wave and executor is not None:
            futures = {i: executor.submit(_run_job, jobs[i], worker_fingerprint()) for i in wave}
            for i, future in futures.items():
                result = future.result()
                results[i] = cached(configs[i], lambda: result, CACHE_DIR, check=is_run)
                bar.finished(i)
        elif wave:
            _refuse_unspawnable_main()
            with workers_environment(), _step_queue(bar) as steps_done, ProcessPoolExecutor(
                    min(workers, len(wave)), mp_context=get_context("spawn")) as pool:
                futures = {i: pool.submit(_run_job, jobs[i], None, steps_done, i) for i in wave}
                for i, future in futures.items():
                    future.add_done_callback(lambda _, i=i: bar.finished(i))
                try:
                    for i, future in futures.items():
                        results[i] = future.result()
                except BrokenProcessPool as err:
                    raise RuntimeError(_UNSPAWNABLE) from err
    bar.close()
    if pace is not None:
        pace.record()
    return results


_UNSPAWNABLE = (
    "the run workers could not start. They are new Python processes (multiprocessing's 'spawn') "
    "that import your main module again: run your code from a file whose top level is guarded by "
    "`if __name__ == \"__main__\":`, not from standard input, or ask for workers=1 in a process "
    "whose arithmetic is the pinned one (it then trains in-process; `make doctor` tells)")


def _refuse_unspawnable_main():
    """A main module read from standard input cannot be imported by a spawned worker."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path is not None and not os.path.exists(path):
        raise RuntimeError(_UNSPAWNABLE)


def regularized_run(cfg, steps=40, start=None, reference=None, agent=SHIPPED_AGENT):
    """One run (see `regularized_runs`): a copy of `start` (default: the RL base agent) trained
    for `steps` steps of `train_regularized` under `cfg` (a RegularizedConfig), anchored to
    `reference` (default: the start), and evaluated on the held-out split against the RL base
    agent and against the reference. Computed in a pinned worker and cached: returns
    {"history", "eval", "eval_vs_reference", "state"}."""
    job = {"cfg": cfg, "steps": steps, "start": start, "reference": reference, "agent": agent}
    return regularized_runs([job], workers=1, progress=False)[0]


def policy_from_state(state):
    """A policy with the parameters of a cached run's `state`."""
    policy = load_agent()
    policy.load_state_dict(state)
    return policy
