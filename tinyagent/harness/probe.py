"""The kernels a run reaches, each hashed on fixed inputs at the shapes a run uses.

Two machines that print the same hash for a kernel compute it bit for bit alike; where they differ,
the family names the kernel. The families and inputs are those of the team's `opprobe` tool (the
same random stream, so the keys of the library kernels a run still reaches, layer norm, softmax,
exp, float32 log, sums and the float64 draws, compare with its files), with the products, GELU,
attention and Adam computed as a run computes them (matmul.c, erf, adam.py): `matmul_*`,
`gelu_erf_*`, `attention_*`, `adam_exact_sqrt`. opprobe's torch Adam and float64 log are left out:
they round differently on Intel and AMD (MKL's square root and logarithm), and no run reaches them.
tests/data/arith/ holds the hashes measured on each CPU the project has met, and
tests/test_vendor.py compares this machine's with all of them.

    python -m tinyagent.harness.probe > tests/data/arith/NAME.json     # record this machine's
"""
import argparse
import hashlib
import json
import os
import platform
import sys

import torch
import torch.nn.functional as F

from ..engine.adam import Adam
from ..engine import start
from ..engine.arithmetic import PINS, torch_threads
from ..engine.gelu import gelu
from ..engine.matmul import linear, matmul, scores
from ..engine.softmax import softmax

TOKEN_COUNTS = (1, 8, 13, 32, 64, 96, 104, 128, 200, 256, 270, 300, 384, 512, 640, 768, 1024,
                2048, 3072)
# The families of library kernels a run still reaches (the rest of opprobe's are not reached).
LIBRARY_FAMILIES = ("layernorm_fwd", "layernorm_bwd", "log_softmax_fwd", "log_softmax_bwd",
                    "softmax_fwd", "exp_f32", "log_f32", "exp_f64", "sum_f32",
                    "cumsum_f64", "rand_f64", "randn_f64", "searchsorted_f64")


def _hash(*ts):
    """16 hex digits of the SHA-256 of the tensors' bytes."""
    m = hashlib.sha256()
    for t in ts:
        m.update(t.detach().contiguous().numpy().tobytes())
    return m.hexdigest()[:16]


C, H, HS, V = 66, 6, 11, 316       # the policy's width, heads, head size and the probes' vocabulary


def _linear_cases(rnd, out):
    """The five layer shapes' products, forward and backward, at every token count."""
    for N in TOKEN_COUNTS:
        for cin, cout in ((C, 3 * C), (C, C), (C, 4 * C), (4 * C, C), (C, V)):
            x, w, b = rnd(N, cin), rnd(cout, cin, scale=0.05), rnd(cout, scale=0.01)
            y = linear(x, w, b)
            gx, gw, gb = torch.autograd.grad(y, (x, w, b), rnd(N, cout))
            tag = f"N={N} {cin}->{cout}"
            out[f"matmul_fwd {tag}"] = _hash(y)
            out[f"matmul_bwd_input {tag}"] = _hash(gx)
            out[f"matmul_bwd_weight {tag}"] = _hash(gw)
            out[f"matmul_bwd_bias {tag}"] = _hash(gb)


def _pointwise_cases(rnd, out):
    """GELU, layer norm, (log-)softmax, exp, log, sums and cumsum at five token counts."""
    for N in (8, 96, 270, 768, 3072):
        x = rnd(N, 4 * C)
        y = gelu(x)
        gx, = torch.autograd.grad(y, x, rnd(N, 4 * C))
        out[f"gelu_erf_fwd N={N}"], out[f"gelu_erf_bwd N={N}"] = _hash(y), _hash(gx)
        x, w, b = rnd(N, C), rnd(C, scale=0.1) + 1, rnd(C, scale=0.1)
        y = F.layer_norm(x, (C,), w, b)
        gx, gw, gb = torch.autograd.grad(y, (x, w, b), rnd(N, C))
        out[f"layernorm_fwd N={N}"], out[f"layernorm_bwd N={N}"] = _hash(y), _hash(gx, gw, gb)
        x = rnd(N, V, scale=3)
        y = F.log_softmax(x, -1)
        gx, = torch.autograd.grad(y, x, rnd(N, V))
        out[f"log_softmax_fwd N={N}"], out[f"log_softmax_bwd N={N}"] = _hash(y), _hash(gx)
        out[f"softmax_fwd N={N}"] = _hash(F.softmax(x, -1))
        out[f"exp_f32 N={N}"], out[f"log_f32 N={N}"] = _hash(x.exp()), _hash(x.abs().add(1e-3).log())
        xd = x.detach().double()
        out[f"exp_f64 N={N}"] = _hash(xd.exp())
        out[f"sum_f32 N={N}"] = _hash(x.sum(-1), x.sum(), x.mean())
        out[f"cumsum_f64 N={N}"] = _hash(xd.softmax(-1).cumsum(-1))


def attend(q, k, v, causal):
    """softmax(q kᵀ / √hs) v through the engine's kernels, one by one, for q (B, nh, T, hs) and
    k, v (B, nh, L, hs); `causal` masks the future of a prefix (T = L)."""
    return matmul(softmax(scores(q, k, causal), causal), v)


def _attention_cases(rnd, out):
    """Causal attention forward and backward, and one-token decoding, over batch x length."""
    for B in (8, 32, 64):
        for T in (13, 20, 40, 60, 96):
            q, k, v = rnd(B, H, T, HS), rnd(B, H, T, HS), rnd(B, H, T, HS)
            y = attend(q, k, v, causal=True)
            gq, gk, gv = torch.autograd.grad(y, (q, k, v), rnd(B, H, T, HS))
            out[f"attention_causal_fwd B={B} T={T}"] = _hash(y)
            out[f"attention_causal_bwd B={B} T={T}"] = _hash(gq, gk, gv)
            out[f"attention_decode B={B} T={T}"] = _hash(
                attend(rnd(B, H, 1, HS), k, v, causal=False))


def _adam_and_sampling_cases(rnd, out):
    """Three Adam steps, and the float64 draws and search that sampling uses."""
    ps = [rnd(V, C).detach().requires_grad_(), rnd(4 * C).detach().requires_grad_()]
    opt = Adam(ps, lr=1e-3)
    for _ in range(3):
        for p in ps:
            p.grad = rnd(*p.shape).detach()
        opt.step()
    out["adam_exact_sqrt 3 steps"] = _hash(*ps)
    gg = torch.Generator().manual_seed(7)
    out["rand_f64"] = _hash(torch.rand(1000, generator=gg, dtype=torch.float64))
    out["randn_f64"] = _hash(torch.randn(1000, generator=gg, dtype=torch.float64))
    p = torch.softmax(rnd(64, V, dtype=torch.float64).detach(), -1)
    out["searchsorted_f64"] = _hash(torch.searchsorted(
        p.cumsum(-1), torch.rand(64, 1, generator=gg, dtype=torch.float64)))


def probe():
    """{kernel and shape: 16 hex digits of SHA-256}, on one torch thread. The cases draw their
    inputs in this order from one generator, so their hashes depend on it."""
    out = {}
    g = torch.Generator().manual_seed(1234)

    def rnd(*shape, dtype=torch.float32, scale=1.0):
        x = (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype)
        return x.requires_grad_(dtype.is_floating_point)

    for cases in (_linear_cases, _pointwise_cases, _attention_cases, _adam_and_sampling_cases):
        cases(rnd, out)
    return out


def machine():
    """The CPU, its vendor and ISA, and the versions: what a hash file was measured on."""
    info = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    field = lambda name: next((line.split(":", 1)[1].strip() for line in info.splitlines()  # noqa: E731
                               if line.startswith(name)), "?")
    return {"python": platform.python_version(), "torch": torch.__version__,
            "machine": platform.machine(), "cpu": field("model name"), "vendor": field("vendor_id"),
            "family": field("cpu family"), "model": field("model\t"),
            "avx512f": " avx512f" in info, "amx": " amx_tile" in info,
            "env": {name: os.environ.get(name) for name in PINS}}


def differences(mine, theirs):
    """{family: [shapes]} of the keys both files hold whose hashes differ."""
    out = {}
    for key, value in mine.items():
        if key in theirs and theirs[key] != value:
            family, _, shape = key.partition(" ")
            out.setdefault(family, []).append(shape)
    return out


if __name__ == "__main__":
    argparse.ArgumentParser(prog="python -m tinyagent.harness.probe",      # no options: refuses any
                            description=__doc__.splitlines()[0]).parse_args()
    start()
    with torch_threads(1), torch.enable_grad():
        json.dump({"meta": machine(), "ops": probe()}, sys.stdout, indent=1)
    print()
