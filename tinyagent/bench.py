"""`make bench`: how fast TinyAgent trains on this machine (a benchmark, not a test).

Times a 40-step run of Chapter 9's default configuration from the RL base agent plus one
held-out evaluation (10 tasks x 16 attempts) at one torch thread and at two, splits a step into
sampling and update, times two such runs side by side in two worker processes (how the notebooks
compute their runs), compares the model's arithmetic rate with this machine's own float64
matrix-multiply rate, and splits a step's operator time by what the operators compute, which
says where the rest of the time goes.
"""
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from multiprocessing import get_context

import torch
from torch.profiler import ProfilerActivity, profile

from .evaluate import evaluate
from .grpo import RLConfig, compute_advantages, frozen_copy, rl_update, sample_step
from .policy import load_rl_base
from .vocab import PAD

STEPS = 40
# Floating-point operations per parameter per token: sampling (2), the pi_old and reference
# forwards (2 + 2), the update's forward and backward (6). Attention's own arithmetic is left
# out (it is small).
FLOPS_PER_PARAM_TOKEN = 2 + 2 + 2 + 6


def matmul_gflops(n=512, repeats=20):
    """Measured float64 GEMM rate (GFLOP/s), the arithmetic ceiling for our float64 model."""
    a = torch.randn(n, n, dtype=torch.float64)
    b = torch.randn(n, n, dtype=torch.float64)
    a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * n ** 3 * repeats / (time.perf_counter() - start) / 1e9


class DefaultRun:
    """Chapter 9's default run from the RL base agent, advanced one step at a time."""

    def __init__(self, seed=0):
        self.policy = load_rl_base()
        self.reference = frozen_copy(self.policy)
        self.cfg = replace(RLConfig(), seed=seed)
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=self.cfg.lr)
        self.gen = torch.Generator().manual_seed(seed)

    def step(self):
        """Sample a batch and update on it; returns (seconds sampling, seconds updating, episode
        tokens (not padding) in the batch)."""
        t0 = time.perf_counter()
        batch = sample_step(self.policy, self.cfg, self.gen)
        t1 = time.perf_counter()
        advantages, _ = compute_advantages(batch.rewards, self.cfg.group_size)
        rl_update(self.policy, self.reference, self.optimizer, batch, advantages, self.cfg, self.gen)
        return t1 - t0, time.perf_counter() - t1, int((batch.tokens != PAD).sum())


def timed_run(threads, seed=0, steps=STEPS):
    """One run + held-out evaluation at `threads` torch threads: wall-clock seconds in total,
    sampling, update and evaluation, and the episode tokens (not padding) it processed."""
    torch.set_num_threads(threads)
    run = DefaultRun(seed)
    out = {"sampling": 0.0, "update": 0.0, "tokens": 0}
    start = time.perf_counter()
    for _ in range(steps):
        for key, value in zip(("sampling", "update", "tokens"), run.step()):
            out[key] += value
    t_eval = time.perf_counter()
    evaluate(run.policy, reference=run.reference)
    out["evaluation"] = time.perf_counter() - t_eval
    out["total"] = time.perf_counter() - start
    return out


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


def step_profile(steps=4):
    """Self CPU time of `steps` one-thread steps (after a warm-up step) by operator group, as
    shares of all operator time, and the operators' share of the wall-clock time (the rest is
    Python between them). The profiler adds overhead of its own, so the shares are approximate."""
    torch.set_num_threads(1)
    run = DefaultRun()
    run.step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            run.step()
        wall = time.perf_counter() - start
    group_of = {name: group for group, names in OPERATOR_GROUPS.items() for name in names}
    seconds = Counter()
    for event in prof.key_averages():
        seconds[group_of.get(event.key, "other operators")] += event.self_cpu_time_total / 1e6
    total = sum(seconds.values())
    return {group: t / total for group, t in seconds.most_common()}, total / wall


def _one_thread_run(seed):
    return timed_run(threads=1, seed=seed)


def side_by_side(seeds=(0, 1)):
    """Wall-clock seconds for one run per seed, each in its own worker process at one thread."""
    start = time.perf_counter()
    with ProcessPoolExecutor(len(seeds), mp_context=get_context("spawn")) as pool:
        list(pool.map(_one_thread_run, seeds))
    return time.perf_counter() - start


def main():
    n_params = load_rl_base().num_params()
    gemm = {}
    print(f"{STEPS}-step run of Chapter 9's default + held-out evaluation (160 episodes)")
    for threads in (1, 2):
        r = timed_run(threads)
        torch.set_num_threads(threads)
        gemm[threads] = matmul_gflops()
        model = r["tokens"] * n_params * FLOPS_PER_PARAM_TOKEN / (r["sampling"] + r["update"]) / 1e9
        print(f"  {threads} thread{'s' if threads > 1 else ' '}  total {r['total']:5.1f} s | per step: "
              f"sampling {r['sampling'] / STEPS:.3f} s, update {r['update'] / STEPS:.3f} s | "
              f"evaluation {r['evaluation']:.2f} s")
        print(f"             model {model:5.1f} GFLOP/s against a float64 GEMM of {gemm[threads]:5.1f} "
              f"GFLOP/s ({model / gemm[threads]:.0%}; {r['tokens'] / STEPS:.0f} episode tokens a step)")
    both = side_by_side()
    print(f"two runs side by side in two worker processes (one thread each): {both:5.1f} s, "
          f"{both / 2:5.1f} s a run")
    shares, in_operators = step_profile()
    print(f"one-thread step, operator time by what it computes ({in_operators:.0%} of the wall "
          f"clock is inside operators):")
    print("  " + " | ".join(f"{group} {share:.0%}" for group, share in shares.items()))


if __name__ == "__main__":
    main()
