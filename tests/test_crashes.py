"""No input kills the process: every path from Python into the engine's C kernels refuses, with a
clear Python error, what would make the kernel read or write outside its tensors (DESIGN.md, "What
bad input gets"). Each case of the table runs in a process of its own, so that a check that is
missing shows as the signal that kills it (SIGSEGV, SIGABRT) or as a wrong answer given without
an error, not as a dead test run.

One child process imports torch and tinyagent once, then forks one grandchild per case (a fork
costs milliseconds, an import seconds); the grandchild runs the case's code and exits 0, or 1
with the error's type and message. A case passes when its process exits 1, not by a signal,
with every key word of the case in that error.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent      # the checkout whose tinyagent is tested

# The code each case runs, with `torch`, `policy` (a two-layer float32 Policy), `Cache`, `engine`
# and the engine's modules `matmul`, `gelu`, `softmax`, `kvcache`, `adam` in scope; `meta(*shape)`
# is a float32 meta tensor, `decoder` an `engine.Decoder(policy)`; every case runs without a
# gradient to record (a rollout's decoding). Then the key words its error must contain.
SETUP = """
import torch
from tinyagent import engine
from tinyagent.engine import adam, gelu, kvcache, matmul, softmax
from tinyagent.policy import Cache, Policy, PolicyConfig
policy = Policy()
decoder = engine.Decoder(policy)
def meta(*shape):
    return torch.empty(*shape, device="meta")
def layer(B=2, L=8):
    return policy.new_cache(B, L)[0]
def qkv(B=2, T=1):
    return torch.randn(B, T, 3 * policy.cfg.n_embd)
"""

CASES = {
    # the 16 harmful cases: the process died
    "step at a negative position (fixed weights)":
        ("c = decoder.new_cache(2); decoder.prefill(torch.zeros(2, 3, dtype=torch.long), c)\n"
         "with torch.no_grad(): decoder.step(torch.zeros(2, dtype=torch.long), -1, c)",
         ["pos", ">= 0"]),
    "store past the cache": ("kvcache.store(qkv(), layer(), 8)", ["position", "cache"]),
    "store at a negative position": ("kvcache.store(qkv(), layer(), -1)", ["position", "cache"]),
    "store at 2**32 (wraps in C)": ("kvcache.store(qkv(), layer(), 2**32)", ["position", "cache"]),
    "attend past the cache": ("kvcache.attend_one_token(qkv(), layer(), 9)", ["length", "cache"]),
    "attend a negative length": ("kvcache.attend_one_token(qkv(), layer(), -3)",
                                 ["length", "cache"]),
    "compact past the cache's length":
        ("kvcache.compact(policy.new_cache(3, 8), [0, 2], 100)", ["length", "cache"]),
    "compact a row past the cache": ("kvcache.compact(policy.new_cache(3, 8), [0, 7], 4)",
                                     ["keep", "rows"]),
    "matmul on meta": ("matmul.matmul(meta(2, 3), meta(3, 4))", ["cpu", "meta"]),
    "scores on meta": ("matmul.scores(meta(1, 2, 3, 4), meta(1, 2, 3, 4), True)", ["cpu", "meta"]),
    "linear on meta": ("matmul.linear(meta(2, 3), meta(4, 3), meta(4))", ["cpu", "meta"]),
    "gelu on meta": ("gelu.gelu(meta(5))", ["cpu", "meta"]),
    "causal softmax on meta": ("softmax.softmax(meta(2, 4, 4), causal=True)", ["cpu", "meta"]),
    "Adam on meta": ("p = torch.nn.Parameter(meta(5)); p.grad = meta(5)\n"
                     "adam.Adam([p]).step()", ["cpu", "meta"]),
    "decoding with a meta cache":
        ("c = Cache([(meta(2, 6, 11, 8), meta(2, 6, 8, 11)) for _ in range(2)], policy.cfg)\n"
         "decoder.step(torch.zeros(2, dtype=torch.long), 0, c)", ["cpu", "meta"]),
    "Adam after a parameter is resized":
        ("p = torch.nn.Parameter(torch.ones(4)); opt = adam.Adam([p]); p.grad = torch.ones(4)\n"
         "opt.step(); p.data = torch.ones(10**6); p.grad = torch.ones(10**6); opt.step()",
         ["size", "state"]),
    "gelu_float32 on an expanded tensor": ("gelu.gelu_float32(torch.ones(1).expand(10**7))",
                                           ["contiguous"]),
    # the silent cases on the C path: a wrong answer or memory outside the tensors
    "matmul with K >= 2**31 (wraps in C)":
        ("matmul.matmul(torch.ones(1, 1).expand(1, 2**31), torch.ones(1, 1).expand(2**31, 1))",
         ["2**31"]),
    "gelu_backward with short operands":
        ("x = torch.randn(1000); y, e = gelu.gelu_float32(x)\n"
         "gelu.gelu_backward(torch.ones(10), x, e[:10])", ["shape"]),
    "gelu_backward of float64": ("x = torch.randn(10); y, e = gelu.gelu_float32(x)\n"
                                 "gelu.gelu_backward(torch.ones(10, dtype=torch.float64), x, e)",
                                 ["float32"]),
    "gelu_float32 of float16": ("gelu.gelu_float32(torch.ones(10, dtype=torch.float16))",
                                ["float32"]),
    "matmul_backward with a wrong gradient":
        ("matmul.matmul_backward(torch.ones(2, 5), torch.ones(2, 3), torch.ones(3, 4))",
         ["shape"]),
    "linear_backward with a wrong gradient":
        ("matmul.linear_backward(torch.ones(2, 9), torch.ones(2, 3), torch.ones(4, 3))",
         ["shape"]),
    "scores_backward of float16": ("q = torch.ones(1, 1, 4, 3)\n"
                                   "matmul.scores_backward(torch.ones(1, 1, 4, 4, "
                                   "dtype=torch.float16), q, q, 0.5, True)", ["float32"]),
    "scores_backward with a wrong gradient": ("q = torch.ones(1, 1, 4, 3)\n"
                                              "matmul.scores_backward(torch.ones(1, 1, 9, 9), "
                                              "q, q, 0.5, True)", ["shape"]),
    "linear with rows of another shape":
        ("matmul.linear(torch.ones(2, 3), torch.ones(4, 3), torch.ones(4), torch.ones(3, 2))",
         ["shape"]),
    "store from a transposed qkv": ("kvcache.store(qkv(2, 3).transpose(0, 1), layer(3), 0)",
                                    ["qkv"]),
    "store into a float64 cache":
        ("c = layer(); kvcache.store(qkv(), (c[0].double(), c[1].double()), 0)", ["float32"]),
    "attend over an untransposed cache":
        ("k, v = layer(2, 20); kvcache.attend_one_token(qkv(), (v, v), 1)", ["keys"]),
    "compact with unordered keep": ("kvcache.compact(policy.new_cache(3, 8), [2, 0], 4)",
                                    ["increasing"]),
    "compact with a negative keep": ("kvcache.compact(policy.new_cache(3, 8), [-1], 4)",
                                     ["keep", "rows"]),
    "Adam with lr=inf": ("adam.Adam([torch.nn.Parameter(torch.ones(2))], lr=float('inf'))",
                         ["lr", "finite"]),
    "Adam with eps=inf": ("adam.Adam([torch.nn.Parameter(torch.ones(2))], eps=float('inf'))",
                          ["eps", "finite"]),
    "engine.Adam with lr=inf": ("engine.Adam([torch.nn.Parameter(torch.ones(2))], "
                                "lr=float('inf'))", ["lr", "finite"]),
    # decoding: a cache knows its shape, its config and how far it is filled
    "decoding with another config's cache":
        ("other = Policy(PolicyConfig(n_head=3))\n"
         "decoder.step(torch.zeros(2, dtype=torch.long), 0, other.new_cache(2))",
         ["cache", "config"]),
    "decoding with a missing layer": ("c = decoder.new_cache(2); del c[1]\n"
                                      "decoder.step(torch.zeros(2, dtype=torch.long), 0, c)",
                                      ["cache", "layer"]),
    "decoding with an untransposed hand-built cache":
        ("c = Cache([(torch.zeros(2, 6, 20, 11), torch.zeros(2, 6, 20, 11)) for _ in range(2)],\n"
         "          policy.cfg)\n"
         "decoder.step(torch.zeros(2, dtype=torch.long), 0, c)", ["keys", "transposed"]),
    "decoding past the positions written":
        ("c = decoder.new_cache(2); decoder.step(torch.zeros(2, dtype=torch.long), 5, c)",
         ["position", "filled"]),
    "plain step past the positions written":
        ("c = policy.new_cache(2); policy.step(torch.zeros(2, dtype=torch.long), 5, c)",
         ["position", "filled"]),
    "decoding with a float64 cache":
        ("c = Cache([(k.double(), v.double()) for k, v in decoder.new_cache(2)], policy.cfg)\n"
         "decoder.step(torch.zeros(2, dtype=torch.long), 0, c)", ["float64", "cache"]),
    "new_cache(-1)": ("decoder.new_cache(-1)", ["batch_size", "positive integer"]),
    "new_cache(2.5)": ("decoder.new_cache(2.5)", ["batch_size", "positive integer"]),
    "step with 2-D tokens": ("c = decoder.new_cache(2)\n"
                             "decoder.step(torch.zeros(2, 1, dtype=torch.long), 0, c)",
                             ["tokens", "shape"]),
    "step with an out-of-vocabulary id": ("c = decoder.new_cache(2)\n"
                                          "decoder.step(torch.tensor([0, 400]), 0, c)",
                                          ["token", "vocabulary"]),
    "step with a negative id": ("c = decoder.new_cache(2)\n"
                                "decoder.step(torch.tensor([0, -1]), 0, c)",
                                ["token", "vocabulary"]),
    "step with float tokens": ("c = decoder.new_cache(2)\n"
                               "decoder.step(torch.zeros(2), 0, c)", ["tokens", "int64"]),
    "step with rows out of range": ("c = decoder.new_cache(2)\n"
                                    "decoder.step(torch.zeros(2, dtype=torch.long), 0, c, [0, 2])",
                                    ["rows", "range"]),
    "prefill with an out-of-vocabulary id": ("c = decoder.new_cache(2)\n"
                                             "decoder.prefill(torch.full((2, 3), 316), c)",
                                             ["token", "vocabulary"]),
    "an empty prefill": ("decoder.prefill(torch.zeros(2, 0, dtype=torch.long), "
                         "decoder.new_cache(2))", ["prefix", "empty"]),
    "a compacted cache past its fill":
        ("c = decoder.new_cache(3); decoder.prefill(torch.zeros(3, 4, dtype=torch.long), c)\n"
         "c = decoder.compact(c, [0, 2], 4)\n"
         "decoder.step(torch.zeros(2, dtype=torch.long), 6, c)", ["position", "filled"]),
    # matmul's operands
    "matmul of bool": ("matmul.matmul(torch.ones(2, 2, dtype=torch.bool), "
                       "torch.ones(2, 2, dtype=torch.bool))", ["floating-point", "bool"]),
    "matmul of sparse": ("matmul.matmul(torch.eye(3).to_sparse(), torch.eye(3))",
                         ["dense", "sparse"]),
    "matmul of 0-d": ("matmul.matmul(torch.tensor(1.0), torch.tensor(2.0))", ["dimensions"]),
    "matmul of 1-d": ("matmul.matmul(torch.ones(3), torch.ones(3))", ["dimensions"]),
    "matmul of lists": ("matmul.matmul([[1.0]], [[2.0]])", ["tensors", "list"]),
    # what the entry points also check, beyond the probes
    "matmul of 2**32 products (leading dimensions)":
        ("x = torch.ones(1, 1, 1, 1).expand(2**16, 2**16, 1, 1)\nmatmul.matmul(x, x)",
         ["products", "2**31"]),
    "linear over 2**31 rows":
        ("matmul.linear(torch.ones(1, 3).expand(2**31, 3), torch.ones(4, 3), torch.ones(4))",
         ["rows", "2**31"]),
    "scores of 3-d operands": ("matmul.scores(torch.ones(2, 3, 4), torch.ones(2, 3, 4), True)",
                               ["4 dimensions"]),
    "matmul_backward on meta": ("matmul.matmul_backward(meta(2, 4), meta(2, 3), meta(3, 4))",
                                ["cpu", "meta"]),
    "linear_backward on meta": ("matmul.linear_backward(meta(2, 4), meta(2, 3), meta(4, 3))",
                                ["cpu", "meta"]),
    "scores_backward with a NaN scale": ("q = torch.ones(1, 1, 4, 3)\n"
                                         "matmul.scores_backward(torch.ones(1, 1, 4, 4), q, q, "
                                         "float('nan'), True)", ["scale", "finite"]),
    "gelu_backward with an expanded erf": ("x = torch.randn(10)\n"
                                           "gelu.gelu_backward(x, x, torch.ones(1).expand(10))",
                                           ["e", "contiguous"]),
    "softmax of a list": ("softmax.softmax([1.0, 2.0])", ["tensor", "list"]),
    "store a qkv of another width": ("kvcache.store(torch.randn(2, 1, 10), layer(), 0)",
                                     ["qkv", "shape"]),
    "store a qkv of another batch": ("kvcache.store(qkv(5), layer(), 0)", ["qkv", "shape"]),
    "attend with two tokens": ("kvcache.attend_one_token(qkv(2, 2), layer(), 1)",
                               ["qkv", "shape"]),
    "compact a cache whose layers differ":
        ("kvcache.compact(Cache([layer(3, 8), layer(3, 4)], policy.cfg), [0], 2)",
         ["layer", "shape"]),
    "compact a float keep": ("kvcache.compact(policy.new_cache(3, 8), torch.tensor([0.0]), 2)",
                             ["keep", "increasing"]),
    "decoding a cache of another batch size":
        ("decoder.step(torch.zeros(2, dtype=torch.long), 0, decoder.new_cache(3))",
         ["sequences", "batch_size"]),
    "decoding with no cache": ("decoder.step(torch.zeros(2, dtype=torch.long), 0, None)",
                               ["cache", "layer"]),
    "step with a negative row": ("c = decoder.new_cache(2)\n"
                                 "decoder.step(torch.zeros(2, dtype=torch.long), 0, c, [-1])",
                                 ["rows", "range"]),
    "step with rows as a tuple": ("c = decoder.new_cache(2)\n"
                                  "decoder.step(torch.zeros(2, dtype=torch.long), 0, c, (0, 1))",
                                  ["rows", "list"]),
    "step at a float position": ("c = decoder.new_cache(2)\n"
                                 "decoder.step(torch.zeros(2, dtype=torch.long), 0.0, c)",
                                 ["pos", "int"]),
    "step past block_size": ("c = decoder.new_cache(2)\n"
                             "decoder.step(torch.zeros(2, dtype=torch.long), 96, c)",
                             ["block_size"]),
    "features of an out-of-vocabulary id": ("engine.features(policy, torch.full((1, 3), 999))",
                                            ["idx", "vocabulary"]),
    "logits of float tokens": ("engine.logits(policy, torch.zeros(1, 3))", ["idx", "int64"]),
    "features past block_size": ("engine.features(policy, torch.zeros(1, 97, dtype=torch.long))",
                                 ["block_size"]),
    "head on meta": ("engine.head(policy, meta(2, 66))", ["cpu", "meta"]),
    "Decoder.compact past the cache's length": ("decoder.compact(decoder.new_cache(3, 8), [0], 9)",
                                                ["length", "cache"]),
    "Adam with lr as a string": ("adam.Adam([torch.nn.Parameter(torch.ones(2))], lr='0.1')",
                                 ["lr", "finite"]),
    "Adam with lr made infinite between steps":
        ("p = torch.nn.Parameter(torch.ones(2)); opt = adam.Adam([p]); p.grad = torch.ones(2)\n"
         "opt.param_groups[0]['lr'] = float('inf'); opt.step()", ["lr", "finite"]),
    "Adam with a gradient of another size":
        ("p = torch.nn.Parameter(torch.ones(4)); opt = adam.Adam([p]); p.grad = torch.ones(4)\n"
         "p.data = torch.ones(10**6); opt.step()", ["size", "gradient"]),
    # Adam's saved state: its moments are what the C step writes in place
    "Adam state loaded on meta":
        ("p = torch.nn.Parameter(torch.ones(4)); opt = adam.Adam([p]); p.grad = torch.ones(4)\n"
         "opt.step(); saved = opt.state_dict()\n"
         "saved['state'] = {0: {'step': 1, 'exp_avg': meta(4), 'exp_avg_sq': meta(4)}}\n"
         "opt = adam.Adam([p]); opt.load_state_dict(saved); opt.step()",
         ["exp_avg", "cpu", "meta"]),
    "Adam state loaded in another dtype":
        ("p = torch.nn.Parameter(torch.ones(4)); opt = adam.Adam([p]); p.grad = torch.ones(4)\n"
         "m = torch.zeros(4, dtype=torch.float64)\n"
         "opt.load_state_dict({'lr': 1e-3, 'betas': (0.9, 0.999), 'eps': 1e-8,\n"
         "                     'state': {0: {'step': 1, 'exp_avg': m, 'exp_avg_sq': m}}})",
         ["exp_avg", "float32", "float64"]),
    "Adam state loaded for another parameter":
        ("p = torch.nn.Parameter(torch.ones(4)); opt = adam.Adam([p]); m = torch.zeros(4)\n"
         "opt.load_state_dict({'lr': 1e-3, 'betas': (0.9, 0.999), 'eps': 1e-8,\n"
         "                     'state': {3: {'step': 1, 'exp_avg': m, 'exp_avg_sq': m}}})",
         ["other parameters", "entry 3"]),
    "Adam state_dict of a list":
        ("adam.Adam([torch.nn.Parameter(torch.ones(2))]).load_state_dict([1])",
         ["state_dict", "list"]),
    "Adam of floats": ("adam.Adam([1.0, 2.0])", ["params", "tensors", "float"]),
    "Adam of a number": ("adam.Adam(5)", ["params", "tensors", "int"]),
    # a bias, a mask, a policy: what the entry points name before torch does
    "linear with a bias of another size": ("matmul.linear(torch.ones(2, 3), torch.ones(4, 3), "
                                           "torch.ones(7))", ["bias (out,)", "(7,)"]),
    "linear with rows of another weight": ("matmul.linear(torch.ones(2, 3), torch.randn(4, 3), "
                                           "torch.zeros(4), torch.zeros(3, 4))",
                                           ["rows", "weight.T", "first row"]),
    "causal softmax of unmasked scores": ("softmax.softmax(torch.randn(2, 4, 4), causal=True)",
                                          ["causal", "-inf", "above the diagonal"]),
    "engine.features of a string":
        ("engine.features('policy', torch.zeros(1, 3, dtype=torch.long))", ["Policy", "str"]),
    "a Decoder of None": ("engine.Decoder(None)", ["Policy", "NoneType"]),
    "torch_threads(0)": ("with engine.torch_threads(0):\n    pass", ["n", "positive integer"]),
    "a Cache filled past its length": ("c = decoder.new_cache(2, 8); c.filled = 50\n"
                                       "decoder.step(torch.zeros(2, dtype=torch.long), 7, c)",
                                       ["filled", "[0, 8]", "50"]),
    "a Cache whose layers share one pair": ("c = Cache([layer(2, 8)] * 2, policy.cfg)\n"
                                             "decoder.step(torch.zeros(2, dtype=torch.long), 0, c)",
                                             ["layers", "share", "new_cache"]),
    "a Cache's fill set negative": ("c = decoder.new_cache(2, 8); c.filled = -3\n"
                                    "decoder.step(torch.zeros(2, dtype=torch.long), 0, c)",
                                    ["filled", "[0, 8]", "-3"]),
    # attention and a block called directly with one layer's (keys, values): no fill to check,
    # but their shapes, dtype, device and the positions are
    "attention on an untransposed pair": ("k, v = layer(2, 8)\n"
                                          "policy.blocks[0].attn(torch.randn(2, 1, 66), (v, v), 0)",
                                          ["keys", "transposed"]),
    "attention on a pair of another batch":
        ("policy.blocks[0].attn(torch.randn(3, 1, 66), layer(2, 8), 0)", ["B = 3"]),
    "attention past the pair": ("policy.blocks[0].attn(torch.randn(2, 1, 66), layer(2, 8), 8)",
                                ["pos", "8 positions"]),
    "attention at a negative position":
        ("policy.blocks[0].attn(torch.randn(2, 1, 66), layer(2, 8), -1)", ["pos", ">= 0"]),
    "attention of a prefix after position 0": ("policy.blocks[0].attn(torch.randn(2, 3, 66), "
                                               "layer(2, 8), 2)", ["prefix", "position 0"]),
    "attention on a meta pair": ("policy.blocks[0].attn(torch.randn(2, 1, 66), "
                                 "(meta(2, 6, 11, 8), meta(2, 6, 8, 11)), 0)", ["cpu", "meta"]),
    "attention on a float64 pair": ("k, v = layer(2, 8)\n"
                                    "policy.blocks[0].attn(torch.randn(2, 1, 66), "
                                    "(k.double(), v.double()), 0)", ["float32", "float64"]),
    "attention on a whole Cache": ("policy.blocks[0].attn(torch.randn(2, 1, 66), "
                                   "policy.new_cache(2, 8), 0)", ["pair", "cache[i]"]),
    "attention on three tensors": ("k, v = layer(2, 8)\n"
                                   "policy.blocks[0].attn(torch.randn(2, 1, 66), [k, v, v], 0)",
                                   ["pair", "of 3"]),
    "attention of 2-D features": ("policy.blocks[0].attn(torch.randn(2, 66))", ["x", "(B, T, C)"]),
    "a block on a pair at a negative position":
        ("policy.blocks[0](torch.randn(2, 1, 66), layer(2, 8), -1)", ["pos", ">= 0"]),
    "a block of features of another width": ("policy.blocks[0](torch.randn(2, 3, 65))",
                                             ["x", "C = 66"]),
    # the torch engine (TINYAGENT_ENGINE=torch) refuses as the kernels do
    "torch engine: Adam with eps=nan": ("engine.use('torch')\n"
                                        "engine.Adam([torch.nn.Parameter(torch.ones(2))], "
                                        "eps=float('nan'))", ["eps", "finite"]),
    "torch engine: step past the fill": ("engine.use('torch'); d = engine.Decoder(policy)\n"
                                         "d.step(torch.zeros(2, dtype=torch.long), 3, "
                                         "d.new_cache(2))", ["position", "filled"]),
    "torch engine: compact with a negative keep":
        ("engine.use('torch'); d = engine.Decoder(policy)\n"
         "d.compact(d.new_cache(3), [-1, 0], 4)", ["keep", "rows"]),
}


def _serve(names):
    """In the child: import once, then fork one grandchild per case; print each case's outcome
    (exit status, signal, error) as one JSON line."""
    torch_setup = {}
    exec(SETUP, torch_setup)
    for name in names:
        code, _ = CASES[name]
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:                                         # the grandchild: one case
            os.close(read)
            try:
                with torch_setup["torch"].no_grad():
                    exec(code, dict(torch_setup))
                status, text = 0, ""
            except Exception as err:                         # noqa: BLE001 (reported, not hidden)
                status, text = 1, f"{type(err).__name__}: {err}"
            os.write(write, text.encode())
            os._exit(status)
        os.close(write)
        with os.fdopen(read) as f:
            text = f.read()
        _, wait = os.waitpid(pid, 0)
        print(json.dumps({"name": name, "exit": os.waitstatus_to_exitcode(wait), "error": text}),
              flush=True)


@pytest.fixture(scope="module")
def outcomes():
    """Each case's outcome, from one child process that forks a grandchild per case."""
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    done = subprocess.run([sys.executable, __file__, *CASES], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1",
                                            "PYTHONPATH": path})
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == len(CASES), f"the cases' child process failed:\n{done.stderr[-3000:]}"
    return {line["name"]: line for line in lines}


@pytest.mark.parametrize("name", list(CASES))
def test_refused_with_a_clear_error(outcomes, name):
    outcome, (_, words) = outcomes[name], CASES[name]
    assert outcome["exit"] >= 0, f"{name}: the process was killed by signal {-outcome['exit']}"
    assert outcome["exit"] == 1, f"{name}: no error was raised (a wrong answer, silently)"
    missing = [w for w in words if w.lower() not in outcome["error"].lower()]
    assert not missing, f"{name}: the error lacks {missing}: {outcome['error']}"


if __name__ == "__main__":
    _serve(sys.argv[1:])
