"""The pinned arithmetic makes a run's bits independent of the machine (tests of arithmetic.py and
fingerprint.py).

Each check trains in fresh processes that imitate another CPU, one library at a time: the
instruction sets MKL may use (`MKL_ENABLE_INSTRUCTIONS=AVX2`, a CPU without AVX-512), oneDNN's
(`ONEDNN_MAX_CPU_ISA=SSE41`), torch's kernel set (`ATEN_CPU_CAPABILITY=default`) and the thread
count. With every pin in force the parameters after RL steps and after SFT steps are bitwise equal
to the pinned run's, and the fingerprint matches the stored one. Without ATen's pin the imitated CPU
gives other bits and the fingerprint says so (removing it from `PINS` fails this test). So does
MKL's branch, on a CPU where it matters: a run still reaches MKL's vector math, for exp and erf,
whose COMPATIBLE branch computed the same bits on every CPU measured (tests/test_vendor.py; its
square root did not, which is why adam.py takes the correctly rounded one). On an Intel Xeon,
MKL's AUTO branch computes exp and erf otherwise, and the run's bits change; on AMD EPYC (Zen 4,
measured) AUTO computes COMPATIBLE's bits, so there the run must not change either. The test
measures which case this CPU is before it asserts. oneDNN is not reached any more (the products
are matmul.c's, GELU is erf): with its pin left out the bits do not change."""
import os
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import pytest

from tinyagent.engine.arithmetic import ATEN_NEEDS, PINS, cpu_flags, pinned_environment
from tinyagent.harness.fingerprint import EXPECTED, fingerprint

pytestmark = pytest.mark.recorded_bits

# Three steps of a setting whose runs the CPU changed (entropy bonus and a KL loss), and a short
# SFT: every parameter's bytes, hashed, and the process's arithmetic fingerprint.
TRAIN = """
import hashlib
from tinyagent.harness.fingerprint import fingerprint
from tinyagent.policy import Policy
from tinyagent.checkpoint import load_rl_base
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
print(fingerprint(), digest.hexdigest())
"""
# What another CPU would make each library do, imitated on this one.
OTHER_CPU = {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "SSE41",
             "ATEN_CPU_CAPABILITY": "default", "OMP_NUM_THREADS": "2"}
IMITATED = (*PINS, "MKL_ENABLE_INSTRUCTIONS", "OMP_NUM_THREADS")
# Each pin's variable set to what it is without the pin on the imitated CPU (`import tinyagent`
# would put an absent pin back).
UNPINNED = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "AUTO", "ONEDNN_MAX_CPU_ISA": "SSE41"}


def clean_env(env):
    """This process's environment without anything the pins or the imitation set, plus `env`."""
    return {**{k: v for k, v in os.environ.items() if k not in IMITATED}, **env}


def trained(env):
    """(fingerprint, digest) of TRAIN run in a fresh interpreter with `env`."""
    out = subprocess.run([sys.executable, "-c", TRAIN], env=clean_env(env), check=True,
                         capture_output=True, text=True).stdout.split()
    return out[0], out[1]


NOT_REACHED = ("ONEDNN_MAX_CPU_ISA",)       # a library no run computes with
# The library kernels a run reaches through MKL's vector math, on fixed inputs: whether MKL's
# unpinned branch computes other bits for them on this CPU.
VECTOR_MATH = """
import hashlib, torch
x = torch.randn(100_000, generator=torch.Generator().manual_seed(0))
print(hashlib.sha256(torch.exp(x).numpy().tobytes() + torch.erf(x).numpy().tobytes()).hexdigest())
"""


def library_changes(name, env):
    """Whether leaving out pin `name` on the imitated CPU changes what the kernels a run reaches
    through that library compute here (measured for MKL's branch, which on an AMD CPU runs the
    same code either way; ATen's kernel set always changes them)."""
    if name != "MKL_CBWR":
        return True
    digests = [subprocess.run([sys.executable, "-c", VECTOR_MATH], env=clean_env(e), check=True,
                              capture_output=True, text=True).stdout
               for e in (env, {**env, name: PINS[name]})]
    return digests[0] != digests[1]


def test_the_pins_make_runs_bitwise_equal_across_imitated_cpus_and_each_pin_is_needed():
    """Each pin left out changes the run exactly where it changes its library's kernels here."""
    variants = {"pinned": dict(PINS), "pinned, another CPU": {**OTHER_CPU, **PINS}}
    for name in PINS:                                    # another CPU with one pin left out
        variants[f"without {name}"] = {**OTHER_CPU, **PINS, name: UNPINNED[name]}
    with ProcessPoolExecutor(2) as pool:
        results = dict(zip(variants, pool.map(trained, variants.values())))
    assert results["pinned"][0] == results["pinned, another CPU"][0] == EXPECTED
    assert results["pinned"][1] == results["pinned, another CPU"][1]
    for name in PINS:
        fp, digest = results[f"without {name}"]
        if name in NOT_REACHED:
            assert (fp, digest) == results["pinned"], f"{name}: a run reached this library"
        elif not library_changes(name, variants[f"without {name}"]):
            assert (fp, digest) == results["pinned"], (f"{name}: the library computed the pinned "
                                                        f"bits here, yet the run changed")
        else:
            assert digest != results["pinned"][1], f"{name}: the imitated CPU did not change the bits"
            assert fp != EXPECTED, f"{name}: the fingerprint missed a changed arithmetic"


def test_run_workers_start_pinned_whatever_the_parent_set(monkeypatch):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "SSE41")
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    with pinned_environment(), ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        assert pool.submit(fingerprint).result() == EXPECTED
    assert os.environ["ONEDNN_MAX_CPU_ISA"] == "SSE41"       # the caller's environment is back


# The entry points that compute in their own process, as `make` and a notebook call them: each checks
# the arithmetic before any work (the book's code does not import the harness, so it does not).
ENTRY_POINTS = {
    "make pretrain": "import os, tempfile\nfrom tinyagent.harness import rebuild\n"
                     "rebuild.main(['--out', os.path.join(tempfile.mkdtemp(), 'rl_base.pt')])",
    "make agents": "from tinyagent.science import agents\nagents.build_agent('agent_999')",
    "a notebook's setup cell": "from tinyagent.harness.fingerprint import check_arithmetic\n"
                               "check_arithmetic()",
}


@pytest.mark.parametrize("entry, override", [("make pretrain", "ATEN_CPU_CAPABILITY=default"),
                                             ("make agents", "ATEN_CPU_CAPABILITY=avx512"),
                                             ("a notebook's setup cell", "ATEN_CPU_CAPABILITY=default")])
def test_computing_under_another_arithmetic_names_the_setting(entry, override):
    code = "import warnings; warnings.simplefilter('error')\n" + ENTRY_POINTS[entry]
    name, value = override.split("=")
    done = subprocess.run([sys.executable, "-c", code], env=clean_env({**PINS, name: value}),
                          capture_output=True, text=True)
    if not ATEN_NEEDS[value] <= (cpu_flags() or ATEN_NEEDS[value]):
        # a CPU without AVX-512 (AMD Zen 3): torch would die of SIGILL; refused at import instead
        assert done.returncode == 1 and "illegal instruction" in done.stderr, done.stderr
        assert override in done.stderr and "Allowed on this CPU: default, avx2" in done.stderr
        return
    assert done.returncode != 0 and "fingerprint" in done.stderr and override in done.stderr
    assert "first part in the sampling" in done.stderr          # where the bits part
    assert "OMP_NUM_THREADS" not in done.stderr                 # the fingerprint sets its own
    assert "Traceback" in done.stderr and "sft step" not in done.stdout   # before any work


def test_the_check_is_silent_under_the_pins():
    code = ("import warnings; warnings.simplefilter('error')\n"
            + ENTRY_POINTS["a notebook's setup cell"])
    pinned = subprocess.run([sys.executable, "-c", code], env=clean_env(dict(PINS)),
                            capture_output=True, text=True)
    assert pinned.returncode == 0, pinned.stderr
