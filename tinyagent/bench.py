"""`make bench`: how fast TinyAgent trains on this machine (a benchmark, not a test).

Times `train_rl`, the loop every run of the notebooks goes through, for a 40-step run of Chapter
9's default configuration from the RL base agent, plus one held-out evaluation (10 tasks x 16
attempts), on the one torch thread the pinned arithmetic trains on, and two such runs side by
side in two worker processes (how the notebooks compute their runs, one per core). Then a profile of a few one-thread steps splits a step
into sampling and updating, and the operator time by what the operators compute: where the time
goes. The arithmetic is the pinned one (arithmetic.py) unless the environment says otherwise.
"""
import argparse
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

from torch.profiler import ProfilerActivity, profile

from .arithmetic import mkl_branch
from .fingerprint import matches
from .evaluate import evaluate
from .grpo import RLConfig, frozen_copy, train_rl
from .policy import load_rl_base

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
    "matrix multiplies": ("aten::addmm", "aten::mm", "aten::bmm"),
    "attention": ("aten::_scaled_dot_product_flash_attention_for_cpu",
                  "aten::_scaled_dot_product_flash_attention_for_cpu_backward"),
    "GELU": ("aten::gelu", "aten::gelu_backward"),
    "softmax, log-softmax, exp": ("aten::_softmax", "aten::_log_softmax", "aten::exp",
                                  "aten::_log_softmax_backward_data", "aten::_softmax_backward_data"),
    "layer norm": ("aten::native_layer_norm", "aten::native_layer_norm_backward"),
}
PHASES = ("sampling", "update")     # the labels train_rl gives its two halves


def step_profile(steps=4):
    """`steps` steps of `train_rl` under the profiler: seconds per step in each of PHASES, and the
    self CPU time of the operators by group, as shares of all operator time. The profiler adds
    overhead of its own, so the numbers are approximate."""
    policy = load_rl_base()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        train_rl(policy, RLConfig(), steps=steps, progress=False)
    group_of = {name: group for group, names in OPERATOR_GROUPS.items() for name in names}
    seconds, phases = Counter(), {}
    for event in prof.key_averages():
        if event.key in PHASES:
            phases[event.key] = event.cpu_time_total / 1e6 / steps
        elif event.key.startswith("aten::"):
            seconds[group_of.get(event.key, "other operators")] += event.self_cpu_time_total / 1e6
    total = sum(seconds.values())
    return phases, {group: t / total for group, t in seconds.most_common()}


def side_by_side(seeds=(0, 1)):
    """Wall-clock seconds for one run per seed, each in its own worker process at one thread."""
    start = time.perf_counter()
    with ProcessPoolExecutor(len(seeds), mp_context=get_context("spawn")) as pool:
        list(pool.map(timed_run, seeds))
    return time.perf_counter() - start


def main(argv=None):
    argparse.ArgumentParser(description=__doc__.split("\n\n")[1].replace("\n", " ")).parse_args(argv)
    import torch
    print(f"arithmetic: torch kernels {torch.backends.cpu.get_cpu_capability()}, MKL branch "
          f"{mkl_branch()}, fingerprint {'the pinned one' if matches() else 'NOT the pinned one'}; "
          f"policy in {load_rl_base().head.weight.dtype}")
    print(f"{STEPS}-step run of Chapter 9's default + held-out evaluation (160 episodes)")
    r = timed_run()
    print(f"  one run: {r['total']:5.1f} s (training {r['training']:5.1f} s, evaluation "
          f"{r['evaluation']:.2f} s)")
    both = side_by_side()
    print(f"two runs side by side in two worker processes (one thread each): {both:5.1f} s, "
          f"{both / 2:5.1f} s a run")
    phases, shares = step_profile()
    print("a step under the profiler: " + ", ".join(
        f"{phase} {phases.get(phase, 0):.3f} s" for phase in PHASES))
    print("  operator time: " + " | ".join(f"{group} {share:.0%}" for group, share in shares.items()))


if __name__ == "__main__":
    main()
