"""The pinned arithmetic makes a run's bits independent of the machine (tests of arithmetic.py).

Each check trains in fresh processes that differ in what the CPU offers: the instruction sets MKL
may use (`MKL_ENABLE_INSTRUCTIONS=SSE4_2` is how MKL treats a CPU on which it will not take its
AVX2 branch, as on other vendors' CPUs), torch's kernel set, and the thread count. Pinned, the
parameters after RL steps and after SFT steps are bitwise equal; unpinned, the same pair differs,
which shows the check can fail."""
import os
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import torch

from tinyagent.arithmetic import PINS, arithmetic_in_force, pinned_environment

# Three steps of a setting whose runs the CPU changed (entropy bonus and a KL loss), and a short
# SFT: every parameter's bytes, hashed, and whether the process computed under the pins.
TRAIN = """
import hashlib
from tinyagent.arithmetic import arithmetic_in_force
from tinyagent.policy import Policy, load_rl_base
from tinyagent.pretrain import DemoConfig, SFTConfig, make_demonstrations, sft
from tinyagent.regularize import RegularizedConfig, train_regularized
rl = load_rl_base()
train_regularized(rl, RegularizedConfig(entropy_coef=0.1, kl_coef=0.05, kl_kind="k3+", seed=1,
                                        tasks_per_step=4), steps=3, progress=False)
sft_policy = Policy(seed=0)
tokens, mask = make_demonstrations(DemoConfig(n_demos=256))
sft(sft_policy, tokens, mask, SFTConfig(steps=10, batch_size=32, threads=1))
digest = hashlib.sha256()
for p in [*rl.parameters(), *sft_policy.parameters()]:
    digest.update(p.detach().numpy().tobytes())
print(arithmetic_in_force()["pinned"], digest.hexdigest())
"""
NATIVE = "avx512" if "AVX512" in torch.backends.cpu.get_cpu_capability() else "avx2"
OTHER_CPU = {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "OMP_NUM_THREADS": "2"}
UNPINNED = {"MKL_CBWR": "AUTO"}


def trained(env):
    """(pinned?, digest) of TRAIN run in a fresh interpreter with `env` added to a clean copy of
    this one's environment."""
    base = {k: v for k, v in os.environ.items()
            if k not in PINS and k not in ("MKL_ENABLE_INSTRUCTIONS", "OMP_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", TRAIN], env={**base, **env}, check=True,
                         capture_output=True, text=True).stdout.split()
    return out[0] == "True", out[1]


def test_pinned_runs_are_bitwise_equal_across_cpus_and_unpinned_ones_differ():
    variants = {
        "pinned": {**PINS},
        "pinned, another CPU": {**PINS, **OTHER_CPU},
        "unpinned": {**UNPINNED, "ATEN_CPU_CAPABILITY": NATIVE},
        "unpinned, another CPU": {**UNPINNED, **OTHER_CPU, "ATEN_CPU_CAPABILITY": "default"},
    }
    with ProcessPoolExecutor(2) as pool:
        results = dict(zip(variants, pool.map(trained, variants.values())))
    assert results["pinned"][0] and results["pinned, another CPU"][0]
    assert not results["unpinned, another CPU"][0]
    assert results["pinned"][1] == results["pinned, another CPU"][1]
    assert results["unpinned"][1] != results["unpinned, another CPU"][1]


def test_run_workers_start_pinned_whatever_the_parent_set(monkeypatch):
    monkeypatch.setenv("MKL_CBWR", "AUTO")
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    with pinned_environment(), ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        assert pool.submit(arithmetic_in_force).result()["pinned"]
    assert os.environ["MKL_CBWR"] == "AUTO"          # the caller's environment is back


def test_training_unpinned_says_so():
    code = ("import warnings; warnings.simplefilter('error')\n"
            "from tinyagent.grpo import RLConfig, train_rl\n"
            "from tinyagent.policy import load_rl_base\n"
            "train_rl(load_rl_base(), RLConfig(tasks_per_step=1, group_size=2), steps=1, progress=False)")
    env = {**os.environ, **UNPINNED}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode != 0 and "without the pinned arithmetic" in done.stderr
