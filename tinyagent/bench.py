"""`make bench`: how fast TinyAgent trains and samples on this machine (a benchmark, not a test).

Times a 40-step run of Chapter 9's default configuration from the RL base agent plus one
held-out evaluation (10 tasks x 16 attempts), splits a step into sampling and update, and
compares the token rate with this machine's own float64 matrix-multiply rate.
"""
import time

import torch

from .evaluate import evaluate
from .grpo import RLConfig, compute_advantages, frozen_copy, rl_update, sample_step
from .policy import load_rl_base


def matmul_gflops(n=512, repeats=20):
    """Measured float64 GEMM rate (GFLOP/s), the arithmetic ceiling for our float64 model."""
    a = torch.randn(n, n, dtype=torch.float64)
    b = torch.randn(n, n, dtype=torch.float64)
    a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * n ** 3 * repeats / (time.perf_counter() - start) / 1e9


def main(steps=40):
    policy = load_rl_base()
    reference = frozen_copy(policy)
    cfg = RLConfig()
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    gen = torch.Generator().manual_seed(cfg.seed)
    sampling = updating = 0.0
    tokens = 0
    start = time.perf_counter()
    for _ in range(steps):
        t0 = time.perf_counter()
        batch = sample_step(policy, cfg, gen)
        t1 = time.perf_counter()
        advantages, _ = compute_advantages(batch.rewards, cfg.group_size)
        rl_update(policy, reference, optimizer, batch, advantages, cfg, gen)
        t2 = time.perf_counter()
        sampling, updating = sampling + t1 - t0, updating + t2 - t1
        tokens += batch.tokens.numel()
    t_eval = time.perf_counter()
    evaluate(policy, reference=reference)
    t_end = time.perf_counter()
    total = t_end - start
    n_params = policy.num_params()
    # forward + backward of the update (~6 flops/param/token) plus the pi_old, reference and
    # sampling forwards (~2 each)
    flops = tokens * n_params * (6 + 2 + 2 + 2)
    gemm = matmul_gflops()
    print(f"threads                      {torch.get_num_threads()}")
    print(f"40 steps + held-out eval     {total:6.1f} s   (target <= 30 s, aim 15 s)")
    print(f"  per step: sampling         {sampling / steps:6.3f} s")
    print(f"  per step: update           {updating / steps:6.3f} s")
    print(f"  held-out evaluation        {t_end - t_eval:6.2f} s   (160 episodes)")
    print(f"token positions per second    {tokens / (sampling + updating):8.0f}   (sampled, fed and padded)")
    print(f"achieved model GFLOP/s       {flops / (sampling + updating) / 1e9:6.2f}")
    print(f"float64 GEMM GFLOP/s here    {gemm:6.2f}   (model runs at "
          f"{100 * flops / (sampling + updating) / 1e9 / gemm:.0f}% of it)")


if __name__ == "__main__":
    main()
