"""`make bench`: how fast TinyAgent trains on this machine (a benchmark, not a test).

    python -m tinyagent.harness.bench                      this code, both engines
    python -m tinyagent.harness.bench --against REV        and REV side by side, the ratio
    python -m tinyagent.harness.bench --against REV --instructions
                                                           and both sides' instructions counted
    python -m tinyagent.harness.bench --write FILE.md      the report also written to FILE.md
    make bench [AGAINST=REV [INSTRUCTIONS=1]]              the same, written to docs/performance.md

Times `train_rl`, the loop every run of the notebooks goes through, for a 40-step run of Chapter
9's default configuration from the RL base agent, plus one held-out evaluation (10 tasks x 16
attempts), on the one torch thread a run trains on, and two such runs side by side in two worker
processes (how the notebooks compute their runs, one per core). Then a profile of a few steps
splits a step into sampling and updating, and the operator time by what the operators compute.
The same steps timed without the profiler (whose cost per operator inflates them) are set against
their floor: their matrix products' floating-point operations at the pinned sgemm's rate (MKL's)
and at the engine's kernel's own, on one of the policy's largest products. Then the same run +
evaluation in fresh processes: with the engine's kernels, with the plain PyTorch modules
(`TINYAGENT_ENGINE=torch`), and, with `--against`, a revision checked out into a scratch git
worktree and timed alternately with this code in one sitting, so that the ratio compares like with
like; with `--instructions`, also the instructions each side executes for a shorter run +
evaluation, counted by valgrind's callgrind, a measure that what else the machine runs does not
change (seconds on a shared host can differ by 15% between identical runs). Last, three steps
from a plain script that knows nothing of the harness (no pins in its environment, no thread
count set) against the same in a pinned process. The arithmetic is the pinned one
(engine/arithmetic.py) unless the environment says otherwise.
"""
import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from .. import engine
from ..engine import matmul
from ..engine.arithmetic import PINS, mkl_branch, runnable_pins
from .cache import ROOT
from .doctor import cpu_model
from .fingerprint import matches
from ..files import write_atomically
from ..evaluation import evaluate
from ..grpo import RLConfig, frozen_copy, train_rl
from ..checkpoint import load_rl_base

STEPS = 40


def timed_run(seed=0, steps=STEPS):
    """One run + held-out evaluation: wall-clock seconds training, evaluating and in total."""
    policy = load_rl_base()
    reference = frozen_copy(policy)
    start = time.perf_counter()
    train_rl(policy, RLConfig(seed=seed), steps=steps, reference=reference, progress=False)
    trained = time.perf_counter()
    evaluate(policy, reference=reference)
    end = time.perf_counter()
    return {"training": trained - start, "evaluation": end - trained, "total": end - start}


# Which aten operators (forward and backward) compute what, for the step profile.
OPERATOR_GROUPS = {
    "matrix multiplies": ("tinyagent::matmul",),
    "GELU (erf)": ("aten::erf",),
    "softmax, log-softmax, exp": ("aten::_softmax", "aten::_log_softmax", "aten::exp",
                                  "aten::_log_softmax_backward_data", "aten::_softmax_backward_data"),
    "layer norm": ("aten::native_layer_norm", "aten::native_layer_norm_backward"),
}
PHASES = ("sampling", "update")     # the labels train_rl gives its two halves


def step_profile(steps=4, repeats=3):
    """`steps` steps of `train_rl` from the RL base agent, as a run takes them: their seconds per
    step ("step", the best of `repeats` passes, since the host's speed drifts) and the
    floating-point operations of their products ("matmul GFLOP", per step). Then the same steps
    under the profiler, whose cost per operator inflates them: seconds per step in each of
    PHASES, and the self CPU time of the operators by group, as shares of all operator time."""
    flops, plain, profiling = [0], matmul._bmm, [False]

    def counted(a, b, *args, **epilogue):    # the kernel is not an aten operator: count, label
        flops[0] += 2 * a.numel() * b.shape[-1]            # 2 M K N per product
        if not profiling[0]:
            return plain(a, b, *args, **epilogue)
        with record_function("tinyagent::matmul"):
            return plain(a, b, *args, **epilogue)
    matmul._bmm = counted
    try:
        best = float("inf")
        for _ in range(repeats):
            flops[0], start = 0, time.perf_counter()
            train_rl(load_rl_base(), RLConfig(), steps=steps, progress=False)
            best = min(best, time.perf_counter() - start)
        phases = {"step": best / steps, "matmul GFLOP": flops[0] / 1e9 / steps}
        profiling[0] = True
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            train_rl(load_rl_base(), RLConfig(), steps=steps, progress=False)
    finally:
        matmul._bmm = plain
    group_of = {name: group for group, names in OPERATOR_GROUPS.items() for name in names}
    seconds = Counter()
    for event in prof.key_averages():
        if event.key in PHASES:
            phases[event.key] = event.cpu_time_total / 1e6 / steps
        elif event.key.startswith(("aten::", "tinyagent::")):
            seconds[group_of.get(event.key, "other operators")] += event.self_cpu_time_total / 1e6
    total = sum(seconds.values())
    return phases, {group: t / total for group, t in seconds.most_common()}


def kernel_rate(multiply=None, shape=(768, 66, 198), repeats=50):
    """GFLOP/s of `multiply` (the policy's matrix kernel by default; `torch.matmul` is the pinned
    sgemm, MKL's) on one of the policy's products (M, K, N), one thread, best of three passes."""
    multiply = multiply or matmul._bmm
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(1, *shape[:2], generator=gen), torch.randn(1, *shape[1:], generator=gen)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(repeats):
            multiply(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * shape[0] * shape[1] * shape[2] * repeats / best / 1e9


SFT_STEPS = 300      # a twelfth of SFT's 3,500 steps: its speed, not its result
TIMED = ("import json, time, torch; torch.set_num_threads(1)\n"
         "from {bench} import timed_run\n"
         "from tinyagent.policy import Policy\n"
         "from tinyagent.pretrain import SFTConfig, make_demonstrations, sft\n"
         "run = timed_run()\n"
         "run['warm'] = timed_run()['total']\n"
         "tokens, mask = make_demonstrations()\n"
         "start = time.perf_counter()\n"
         f"sft(Policy(), tokens, mask, SFTConfig(steps={SFT_STEPS}))\n"
         "run['sft'] = time.perf_counter() - start\n"
         "print(json.dumps(run))")


def _revision_process(tree, engine="kernels"):
    """(environment, bench module) of a fresh pinned process that runs the package in `tree`
    (None: this code) computing with `engine`."""
    env = {**os.environ, **runnable_pins(), "OMP_NUM_THREADS": "1", "TINYAGENT_ENGINE": engine}
    if tree is not None:
        env["PYTHONPATH"] = str(tree)            # ahead of the editable install of this code
    # A revision older than the harness folder kept its bench in tinyagent/bench.py; named
    # explicitly, since the editable install would lend it this code's harness otherwise.
    old = not (Path(tree or ROOT) / "tinyagent" / "harness" / "bench.py").exists()
    return env, "tinyagent.bench" if old else "tinyagent.harness.bench"


def timed_revision(tree, engine="kernels"):
    """One run + evaluation and SFT_STEPS steps of SFT of the package in `tree` (None: this
    code), in a fresh pinned process computing with `engine`: {"total": s, "warm": s, "sft": s,
    ...}, "warm" a second run + evaluation in the same process (the first pays one-time costs,
    such as imports)."""
    env, bench = _revision_process(tree, engine)
    done = subprocess.run([sys.executable, "-c", TIMED.format(bench=bench)], env=env,
                          cwd=tree or ROOT, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"timing the code in {tree or ROOT} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.splitlines()[-1])


COUNTED_STEPS = 3    # under callgrind a step takes about a minute
# timed_run with callgrind's counting switched on where its clock starts (train_rl) and off where
# it stops (after evaluate): the load of the checkpoint and the imports before it are not counted.
COUNTED = ("import os, subprocess, torch; torch.set_num_threads(1)\n"
           "import {bench} as bench\n"
           "def count(state):\n"
           "    subprocess.run(['callgrind_control', '--instr=' + state, str(os.getpid())],\n"
           "                   check=True, capture_output=True)\n"
           "train_rl, evaluate = bench.train_rl, bench.evaluate\n"
           "def counted_train_rl(*args, **kwargs):\n"
           "    count('on')\n"
           "    return train_rl(*args, **kwargs)\n"
           "def counted_evaluate(*args, **kwargs):\n"
           "    out = evaluate(*args, **kwargs)\n"
           "    count('off')\n"
           "    return out\n"
           "bench.train_rl, bench.evaluate = counted_train_rl, counted_evaluate\n"
           f"bench.timed_run(steps={COUNTED_STEPS})\n")
INSTRUMENTS = ("valgrind", "callgrind_control")


def counted_revisions(trees):
    """{tree: instructions} of a COUNTED_STEPS-step run + evaluation of the package in each tree
    (None: this code), as timed_run times it, counted by valgrind's callgrind, all trees at once.
    Unlike seconds, the count does not depend on what else the machine runs: on a shared host,
    where two identical runs can differ by 15%, it still tells 1%."""
    with tempfile.TemporaryDirectory() as scratch:
        running = {}
        for i, tree in enumerate(trees):
            env, bench = _revision_process(tree)
            running[tree] = subprocess.Popen(
                ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                 f"--callgrind-out-file={scratch}/{i}.out", sys.executable, "-c",
                 COUNTED.format(bench=bench)],
                env=env, cwd=tree or ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                text=True)
        counts = {}
        for tree, process in running.items():
            err = process.communicate()[1]
            collected = [line.split()[-1] for line in err.splitlines() if "Collected :" in line]
            if process.returncode or not collected:
                raise RuntimeError(f"counting the code in {tree or ROOT} failed:\n{err[-2000:]}")
            counts[tree] = int(collected[-1])
    return counts


def build_kernels(tree):
    """Compile the C kernels of the revision checked out in `tree` beside its sources (one that
    has them), as `pip install -e .` would, so that its package runs from PYTHONPATH with its own
    kernels and not this code's."""
    if not any((tree / "tinyagent" / where / "matmul.c").exists() for where in (".", "engine/c")):
        return
    done = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tree,
                          capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"building the C kernels in {tree} failed:\n{done.stderr[-2000:]}")


def against(revision, rounds, instructions=False):
    """Seconds of one run + evaluation and of SFT_STEPS SFT steps, this code's and `revision`'s,
    alternated `rounds` times, each side first in every other round (on a shared host the second
    of two runs back to back tends to be faster); each side's best of each. With `instructions`,
    also each side's instructions (counted_revisions) as "counted"."""
    with tempfile.TemporaryDirectory() as scratch:
        tree = Path(scratch) / "baseline"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), revision],
                       check=True, capture_output=True, text=True)
        try:
            build_kernels(tree)
            times = {"this code": [], revision: []}
            for round_ in range(rounds):
                for side in ((None, tree) if round_ % 2 == 0 else (tree, None)):
                    times["this code" if side is None else revision].append(timed_revision(side))
            counts = counted_revisions((None, tree)) if instructions else {}
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                           capture_output=True)
    best = {name: {part: min(t[part] for t in runs) for part in ("total", "warm", "sft")}
            for name, runs in times.items()}
    for name, tree_ in (("this code", None), (revision, tree)):
        if tree_ in counts:
            best[name]["counted"] = counts[tree_]
    return best


def side_by_side(seeds=(0, 1)):
    """Wall-clock seconds for one run per seed, each in its own worker process at one thread."""
    start = time.perf_counter()
    with ProcessPoolExecutor(len(seeds), mp_context=get_context("spawn"),
                             initializer=torch.set_num_threads, initargs=(1,)) as pool:
        list(pool.map(timed_run, seeds))
    return time.perf_counter() - start


PLAIN_STEPS = 3
PLAIN_SCRIPT = ("import time\n"
                "from tinyagent import RLConfig, load_rl_base, train_rl\n"
                "policy = load_rl_base()\n"
                "start = time.perf_counter()\n"
                f"train_rl(policy, RLConfig(), steps={PLAIN_STEPS})\n"
                "print(time.perf_counter() - start)")
# What a plain script's process does not inherit from make: the pins, the thread counts, ours.
NOT_INHERITED = (*PINS, "OMP_NUM_THREADS", "MKL_NUM_THREADS", "TINYAGENT_ENGINE",
                 "TINYAGENT_PROGRESS")


def plain_script(pinned, rounds=3):
    """Seconds of PLAIN_STEPS steps of `train_rl` in a fresh process: a reader's plain script,
    whose environment has none of make's settings (`pinned` False), or a process started with the
    pins and one thread, as make starts the notebooks' (`pinned` True). Best of `rounds`."""
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    if pinned:
        env.update(runnable_pins(), OMP_NUM_THREADS="1")
    times = []
    for _ in range(rounds):
        done = subprocess.run([sys.executable, "-c", PLAIN_SCRIPT], env=env, cwd=ROOT,
                              capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"the plain script failed:\n{done.stderr[-2000:]}")
        times.append(float(done.stdout.split()[-1]))
    return min(times)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[2].replace("\n", " "))
    parser.add_argument("--against", metavar="REV",
                        help="a git revision to time side by side with this code (any hash "
                             "that `git log` lists)")
    parser.add_argument("--rounds", type=int, default=4, metavar="N",
                        help="alternations of this code and the baseline; the best of each is "
                             "compared (default 4)")
    parser.add_argument("--instructions", action="store_true",
                        help="with --against, also count both sides' instructions of a "
                             f"{COUNTED_STEPS}-step run + evaluation under valgrind's callgrind "
                             "(about ten minutes), which other programs on the machine do not "
                             "change")
    parser.add_argument("--write", metavar="FILE.md",
                        help="also write the report to FILE.md (make bench: docs/performance.md)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be a positive number of alternations, got {args.rounds}")
    if args.write is not None and not args.write.endswith(".md"):
        parser.error(f"--write takes a Markdown file's path, ending in .md; got {args.write!r}")
    if args.against is not None:
        known = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet",
                                f"{args.against}^{{commit}}"], capture_output=True, text=True)
        if known.returncode != 0:
            parser.error(f"--against {args.against!r} is not a commit of this repository "
                         f"(any hash that `git log` lists)")
    if args.instructions:
        if args.against is None:
            parser.error("--instructions counts this code against a revision: give --against REV")
        missing = [tool for tool in INSTRUMENTS if shutil.which(tool) is None]
        if missing:
            parser.error(f"--instructions needs valgrind's callgrind ({', '.join(missing)} not "
                         f"found; Debian/Ubuntu: apt install valgrind)")
    lines = []

    def say(line):
        print(line, flush=True)
        lines.append(line)

    torch.set_num_threads(1)             # the pinned arithmetic is one thread's
    say(f"machine: {platform.machine()}, {cpu_model()[0]}; Python {platform.python_version()}, "
        f"torch {torch.__version__}")
    say(f"arithmetic: torch kernels {torch.backends.cpu.get_cpu_capability()}, MKL branch "
        f"{mkl_branch()}, fingerprint {'the pinned one' if matches() else 'NOT the pinned one'}; "
        f"engine {engine.in_force()}")
    say(f"{STEPS}-step run of Chapter 9's default + held-out evaluation (160 episodes)")
    r = timed_run()
    say(f"  one run: {r['total']:5.1f} s (training {r['training']:5.1f} s, evaluation "
        f"{r['evaluation']:.2f} s)")
    both = side_by_side()
    say(f"two runs side by side in two worker processes (one thread each): {both:5.1f} s, "
        f"{both / 2:5.1f} s a run")
    phases, shares = step_profile()
    step = phases["step"]
    say(f"a step: {step:.3f} s (under the profiler " + ", ".join(
        f"{phase} {phases.get(phase, 0):.3f} s" for phase in PHASES) + ")")
    say("  operator time: " + " | ".join(f"{group} {share:.0%}" for group, share in shares.items()))
    for what, multiply in (("the pinned sgemm's (MKL)", torch.matmul), ("the kernel's", None)):
        rate = kernel_rate(multiply)
        floor = phases["matmul GFLOP"] / rate
        say(f"  floor at {what} {rate:.0f} GFLOP/s (768x66x198): {phases['matmul GFLOP']:.2f} "
            f"GFLOP of products a step = {floor:.3f} s; the step is {step / floor:.1f}x it")
    fresh = {name: timed_revision(None, name) for name in ("kernels", "torch")}
    for part, what in (("total", "one run + evaluation in a fresh process"),
                       ("warm", "  the same, second in its process"),
                       ("sft", f"{SFT_STEPS} SFT steps")):
        kernels, plain = fresh["kernels"][part], fresh["torch"][part]
        say(f"{what}: the engine's kernels {kernels:.2f} s, plain PyTorch "
            f"(TINYAGENT_ENGINE=torch) {plain:.2f} s; the kernels take {kernels / plain:.2f} of it")
    if args.against is not None:
        best = against(args.against, args.rounds, args.instructions)
        ours, theirs = best["this code"], best[args.against]
        for part, what in (("total", "one run + evaluation in a fresh process"),
                           ("warm", "  the same, second in its process"),
                           ("sft", f"{SFT_STEPS} SFT steps")):
            say(f"{what}, best of {args.rounds} alternated: this code {ours[part]:.2f} s, "
                f"{args.against} {theirs[part]:.2f} s; ratio {ours[part] / theirs[part]:.3f}")
        if args.instructions:
            say(f"instructions of a {COUNTED_STEPS}-step run + evaluation (callgrind): this code "
                f"{ours['counted'] / 1e6:,.1f} M, {args.against} {theirs['counted'] / 1e6:,.1f} M; "
                f"ratio {ours['counted'] / theirs['counted']:.3f}")
    plain, pinned = plain_script(False), plain_script(True)
    say(f"{PLAIN_STEPS} steps from a plain script: {plain:.2f} s; in a pinned one-thread process "
        f"{pinned:.2f} s; ratio {plain / pinned:.2f}")
    if args.write is not None:
        write_report(Path(args.write), lines)


def write_report(path, lines):
    """The report as a short Markdown page: what it measures, then its lines as printed."""
    text = ("# Performance on one machine\n\n"
            "Written by `make bench` (tinyagent/harness/bench.py, whose docstring says what each line "
            "times); run it on your machine to replace it. A run is Chapter 9's default "
            f"configuration for {STEPS} steps from the RL base agent.\n\n```\n"
            + "\n".join(lines) + "\n```\n")
    write_atomically(path, text.encode())


if __name__ == "__main__":
    main()
