"""The policy's matrix kernel: right to float32 precision, and with bits that depend on the
operands alone (not on how the kernel blocks them, so not on the CPU)."""
import importlib
import math
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from tinyagent.engine import kernels
from tinyagent.engine.arithmetic import torch_threads
from tinyagent.grpo import frozen_copy
from tinyagent.harness.doctor import cpu_model
from tinyagent.harness.runs import params_sha256
from tinyagent.engine.matmul import IMITATE_NO_AVX512, linear, matmul, scores, use_path
from tinyagent.policy import Policy
from tinyagent.checkpoint import load_rl_base
from tinyagent.regularize import RegularizedConfig, train_regularized

GEN = torch.Generator().manual_seed(0)
# shapes that exercise the 6-row x 16-column and 8-row x 32-column blocks, the narrower ones,
# every remainder, and K across the kernel's chunks of 128
SHAPES = [(1, 1, 1), (5, 7, 3), (6, 11, 16), (13, 66, 198), (37, 264, 66), (70, 66, 316),
          (198, 300, 66), (17, 777, 40)]


def sequential_fma(a, b):
    """The kernel's definition, row by row: c = fma(a_ik, b_kj, c) for k in order. A float32
    product is exact in float64 and one float64 addition of two such numbers rounds to float32
    as fma does except in the rare double-rounding case, which these data do not reach."""
    c = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float32)
    for k in range(a.shape[1]):
        c = (a[:, k, None].double() * b[k].double() + c.double()).float()
    return c


@pytest.mark.parametrize("m,k,n", SHAPES)
def test_matmul_is_sequential_fma(m, k, n):
    a, b = torch.randn(m, k, generator=GEN), torch.randn(k, n, generator=GEN)
    assert torch.equal(matmul(a, b), sequential_fma(a, b))


@pytest.mark.parametrize("m,k,n", SHAPES)
def test_bits_do_not_depend_on_blocking(m, k, n):
    """Each row and each column computed alone (other blocks, the scalar path) gives the same
    bits as the whole product."""
    a, b = torch.randn(m, k, generator=GEN), torch.randn(k, n, generator=GEN)
    whole = matmul(a, b)
    assert all(torch.equal(matmul(a[i:i + 1], b)[0], whole[i]) for i in range(m))
    assert all(torch.equal(matmul(a, b[:, j:j + 1].contiguous())[:, 0], whole[:, j])
               for j in range(n))


@pytest.mark.parametrize("path", ["scalar", "avx2", "avx512"])
@pytest.mark.parametrize("k", [41, 600])
@pytest.mark.parametrize("n", [66, 70])
def test_every_path_gives_the_same_bits(path, k, n):
    """The scalar definition, 8-wide and 16-wide vectors: one result (where the build and the CPU
    have the path; elsewhere the kernel says which one it took), for a K inside one of the
    kernel's chunks of k and for one across five. A's rows are adjacent, as in a weight gradient:
    on the AVX-512 path the last 2 of 66 columns go down the columns, the last 6 of 70 across."""
    a = torch.randn(2, 3, k, 66, generator=GEN).transpose(2, 3)         # strided A
    b = torch.randn(2, 3, k, n, generator=GEN)
    fastest = matmul(a, b)
    try:
        taken = use_path(path)
        assert torch.equal(matmul(a, b), fastest), taken
    finally:
        use_path("fastest")



@pytest.mark.parametrize("path", ["avx2", "avx512"])
def test_every_height_of_the_last_rows_is_the_definition(path):
    """A product's last rows, fewer than a block's (1 to 5 of 6 on AVX2, 1 to 7 of 8 on
    AVX-512), are computed at a constant height each: every height gives the definition's bits,
    at attention's widths (11 columns, 40) and at a weight gradient's."""
    try:
        use_path(path)
        for m in range(1, 18):
            for k, n in ((13, 11), (11, 40), (29, 66)):
                a, b = torch.randn(m, k, generator=GEN), torch.randn(k, n, generator=GEN)
                assert torch.equal(matmul(a, b), sequential_fma(a, b)), (m, k, n)
    finally:
        use_path("fastest")


@pytest.mark.parametrize("path", ["scalar", "avx2", "avx512"])
@pytest.mark.parametrize("T,hs", [(70, 11), (37, 300)])
def test_causal_scores_skip_only_the_future(path, T, hs):
    """Causal scores leave uncomputed the blocks wholly above the diagonal, on every path, and
    still give the composed operators' bits (for a head size inside one chunk of k and across
    two): what they skip is what the mask overwrites."""
    q, k = torch.randn(2, 3, T, hs, generator=GEN), torch.randn(2, 3, T, hs, generator=GEN)
    try:
        taken = use_path(path)
        assert torch.equal(scores(q, k, causal=True), composed_scores(q, k, causal=True)), taken
    finally:
        use_path("fastest")

@pytest.mark.parametrize("k,n", [(11, 37), (37, 11), (300, 21)])
def test_one_row_products_of_a_batch_give_each_products_bits(k, n):
    """One-token decoding multiplies a batch of one-row products, one per episode and head, which
    the kernel computes several at a time: on every path, the bits of each product alone and of
    the scalar definition. B is read as decoding reads its cache, rows of a longer buffer."""
    a = torch.randn(5, 6, 1, k, generator=GEN)
    b = torch.randn(5, 6, k, n + 7, generator=GEN)[..., :n]
    alone = torch.stack([torch.stack([matmul(a[i, h], b[i, h]) for h in range(6)]) for i in range(5)])
    try:
        for path in ("scalar", "avx2", "avx512"):
            use_path(path)
            assert torch.equal(matmul(a, b), alone), path
    finally:
        use_path("fastest")


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("a_shape,b_shape", [((700, 66), (66, 264)),            # split by rows
                                             ((264, 2600), (2600, 66)),         # long k, by rows
                                             ((3, 2, 90, 66), (3, 2, 66, 90))])  # by batch entries
def test_bits_do_not_depend_on_the_number_of_threads(a_shape, b_shape, threads):
    """A large product is shared between torch's threads, by runs of rows or by batch entries;
    each element is still one thread's chain, so any number of threads gives one thread's bits,
    with B adjacent or strided (copied into rows per entry)."""
    a, b = torch.randn(*a_shape, generator=GEN), torch.randn(*b_shape, generator=GEN)
    strided = b.transpose(-2, -1).contiguous().transpose(-2, -1)
    with torch_threads(1):
        alone = matmul(a, b)
    with torch_threads(threads):
        assert torch.equal(matmul(a, b), alone)
        assert torch.equal(matmul(a, strided), alone)


@pytest.mark.parametrize("threads", [1, 2])
def test_scores_gradient_shared_between_threads_is_the_composed_operators(threads):
    """Enough (T, T) slices for the gradient's products to be shared between threads by batch
    entries: the bits of product, scale and mask composed, on one thread or two."""
    q, k = torch.randn(64, 6, 30, 11, generator=GEN), torch.randn(64, 6, 30, 11, generator=GEN)
    grad = torch.randn(64, 6, 30, 30, generator=GEN)
    grads = []
    for f in (scores, composed_scores):
        a, b = q.clone().requires_grad_(), k.clone().requires_grad_()
        with torch_threads(threads):
            f(a, b, True).backward(grad)
        grads.append((a.grad, b.grad))
    assert all(torch.equal(x, y) for x, y in zip(*grads))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="OpenMP is built in on Linux")
def test_the_kernels_share_torchs_openmp_runtime():
    """The kernels link libgomp.so.1, the soname of the copy torch ships, so the process holds
    one OpenMP runtime: the kernels' threads are torch's idle workers, not a second pool that
    would compete with them for the cores."""
    from tinyagent.engine import kernels
    kernels.load("matmul")          # the C extension in this process
    with open("/proc/self/maps") as maps:
        runtimes = {line.split()[-1] for line in maps if "libgomp" in line}
    assert len(runtimes) == 1, runtimes


def test_causal_scores_split_by_rows_keep_each_rows_future():
    """One long sequence's scores are split between threads by rows: the mask of each run of
    rows starts at its own row, as the whole product's does."""
    q, k = torch.randn(1, 1, 200, 11, generator=GEN), torch.randn(1, 1, 200, 11, generator=GEN)
    with torch_threads(1):
        alone = scores(q, k, causal=True)
    with torch_threads(2):
        assert torch.equal(scores(q, k, causal=True), alone)
    assert torch.isinf(alone[0, 0]).sum() == 200 * 199 // 2


def test_batched_and_transposed_operands():
    a = torch.randn(2, 3, 9, 11, generator=GEN)
    b = torch.randn(2, 3, 7, 11, generator=GEN).transpose(2, 3)          # a strided view
    out = matmul(a, b)
    assert out.shape == (2, 3, 9, 7)
    assert torch.allclose(out.double(), a.double() @ b.double(), atol=1e-5)
    assert torch.equal(out[1, 2], matmul(a[1, 2], b[1, 2]))
    assert torch.equal(out, matmul(a, b.contiguous()))          # B's rows copied: the same bits


def test_gradients_match_autograd_of_the_float64_product():
    a = torch.randn(4, 5, 12, generator=GEN, requires_grad=True)
    b = torch.randn(4, 12, 7, generator=GEN, requires_grad=True)
    w = torch.randn(4, 5, 7, generator=GEN)
    (matmul(a, b) * w).sum().backward()
    a64, b64 = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    ((a64 @ b64) * w.double()).sum().backward()
    assert torch.allclose(a.grad.double(), a64.grad, atol=1e-5)
    assert torch.allclose(b.grad.double(), b64.grad, atol=1e-5)


def test_linear_is_nn_linear():
    x, w, bias = (torch.randn(3, 8, 66, generator=GEN), torch.randn(198, 66, generator=GEN),
                  torch.randn(198, generator=GEN))
    assert torch.allclose(linear(x, w, bias), F.linear(x, w, bias), atol=1e-5)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(5, 9, 66), (300, 66), (4, 1, 66), (64, 90, 66)])
@pytest.mark.parametrize("transposed", [False, True])
def test_linear_adds_the_bias_with_the_bits_of_plus(shape, threads, transposed):
    """The kernel adds the bias as it stores each product: the bits of the product followed by
    torch's `+`, forward, in all three gradients, and without autograd from a weight transposed
    into rows. On one thread, as RL trains, and two, as SFT does, and for an output gradient
    that arrives transposed, as SFT's cross-entropy sends the head's: the order of the bias's sum
    follows the gradient's strides."""
    with torch_threads(threads):
        _linear_against_plus(shape, transposed)


def _linear_against_plus(shape, transposed):
    x = (torch.randn(shape, generator=GEN) * 3).requires_grad_()
    w = torch.randn(198, 66, generator=GEN, requires_grad=True)
    bias = torch.randn(198, generator=GEN, requires_grad=True)
    grad = torch.randn(*shape[:-1], 198, generator=GEN)
    if transposed and len(shape) == 3:
        grad = torch.randn(shape[0], 198, shape[1], generator=GEN).transpose(1, 2)
    results = []
    for f in (linear, lambda x, w, bias: matmul(x, w.t()) + bias):
        y = f(x, w, bias)
        y.backward(grad)
        results.append([y.detach(), x.grad, w.grad, bias.grad])
        x.grad = w.grad = bias.grad = None
    assert all(torch.equal(a, b) for a, b in zip(*results))
    with torch.no_grad():
        assert torch.equal(linear(x, w, bias), results[1][0])
        assert torch.equal(linear(x, w, bias, rows=w.t().contiguous()), results[1][0])


@pytest.mark.parametrize("bad", ["dtype", "shape"])
def test_bad_operands_are_refused(bad):
    a = torch.randn(3, 4, dtype=torch.float64 if bad == "dtype" else torch.float32)
    b = torch.randn(4 if bad == "dtype" else 5, 2)
    with pytest.raises(TypeError if bad == "dtype" else ValueError, match="matmul"):
        matmul(a, b)


def test_another_precision_gets_torchs_product():
    a, b = torch.randn(3, 4, dtype=torch.float64), torch.randn(4, 2, dtype=torch.float64)
    assert torch.equal(matmul(a, b), a @ b)


def composed_scores(q, k, causal):
    """Attention's scores as three operators: the product, the scale, the masked future."""
    att = matmul(q, k.transpose(2, 3)) * (1.0 / math.sqrt(q.shape[-1]))
    mask = torch.ones(att.shape[-2:], dtype=torch.bool).triu(1)
    return att.masked_fill(mask, float("-inf")) if causal else att


@pytest.mark.parametrize("T,L,causal", [(1, 1, False), (1, 37, False), (13, 13, True),
                                        (50, 50, True), (70, 70, False)])
def test_scores_are_the_composed_operators_bit_for_bit(T, L, causal):
    """The fused scores equal product, scale and mask, forward and in both gradients (through a
    softmax, as attention uses them), for q and k read as attention reads them: views of one
    (B, T, 3C) projection, and a cache's transposed keys."""
    qkv = torch.randn(2, L, 3 * 66, generator=GEN) * 3
    q = qkv[:, L - T:, :66].view(2, T, 6, 11).transpose(1, 2).requires_grad_()
    k = qkv[:, :, 66:132].view(2, L, 6, 11).transpose(1, 2).requires_grad_()
    w = torch.randn(2, 6, T, L, generator=GEN)
    outs, grads = [], []
    for f in (scores, composed_scores):
        att = f(q, k, causal)
        (torch.softmax(att, -1) * w).sum().backward()
        outs.append(att.detach())
        grads.append((q.grad, k.grad))
        q.grad = k.grad = None
    assert torch.equal(outs[0], outs[1])
    assert all(torch.equal(a, b) for a, b in zip(*grads))
    cache = torch.randn(2, 6, 11, 96, generator=GEN)[..., :L]            # kᵀ, as decoding stores it
    with torch.no_grad():
        assert torch.equal(scores(q, cache.transpose(2, 3), False),
                           composed_scores(q, cache.transpose(2, 3), False))
    q64, k64 = q.detach().double(), k.detach().double()
    assert torch.equal(scores(q64, k64, causal), composed_scores(q64, k64, causal))


def test_scores_refuse_a_future_that_is_not_square():
    with pytest.raises(ValueError, match="L = T when causal"):
        scores(torch.zeros(1, 6, 3, 11), torch.zeros(1, 6, 5, 11), causal=True)


def reference_logits(policy, idx):
    """The same transformer written with torch's own float64 kernels (F.linear, F.gelu,
    scaled_dot_product_attention): what the policy must compute, to float32 precision."""
    p = {name: t.double() for name, t in policy.state_dict().items()}
    B, T = idx.shape
    x = p["wte.weight"][idx] + p["wpe.weight"][:T]
    nh, C = policy.cfg.n_head, policy.cfg.n_embd
    for i in range(policy.cfg.n_layer):
        pre = f"blocks.{i}."
        h = F.layer_norm(x, (C,), p[pre + "ln_1.weight"], p[pre + "ln_1.bias"])
        q, k, v = F.linear(h, p[pre + "attn.qkv.weight"], p[pre + "attn.qkv.bias"]).split(C, 2)
        q, k, v = (t.view(B, T, nh, C // nh).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, p[pre + "attn.proj.weight"], p[pre + "attn.proj.bias"])
        h = F.layer_norm(x, (C,), p[pre + "ln_2.weight"], p[pre + "ln_2.bias"])
        h = F.gelu(F.linear(h, p[pre + "mlp.fc.weight"], p[pre + "mlp.fc.bias"]))
        x = x + F.linear(h, p[pre + "mlp.proj.weight"], p[pre + "mlp.proj.bias"])
    x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"])
    return F.linear(x, p["head.weight"], p["head.bias"])


def test_policy_computes_the_transformer():
    policy = Policy(seed=3)
    with torch.no_grad():
        for t in policy.parameters():          # larger than the init, so attention is not flat
            t.add_(torch.randn(t.shape, generator=GEN) * 0.3)
    idx = torch.randint(0, policy.cfg.vocab_size, (3, 20), generator=GEN)
    ours, ref = policy(idx).double(), reference_logits(policy, idx)
    assert (ours - ref).abs().max() < 1e-4 * ref.abs().max()


def test_training_steps_give_the_same_parameters_on_every_path():
    """What the promise 'with or without AVX-512' rests on, end to end: two regularized steps
    from the RL base agent (sampling, the reference, backward, Adam) on each kernel path."""
    digests = {}
    try:
        for path in ("avx512", "avx2", "scalar"):
            taken = use_path(path)
            policy = load_rl_base()
            train_regularized(policy, RegularizedConfig(kl_coef=0.3, kl_kind="k3+", entropy_coef=0.01),
                              steps=2, reference=frozen_copy(policy), progress=False)
            digests[taken] = params_sha256(policy.state_dict())
    finally:
        use_path("fastest")
    assert len(set(digests.values())) == 1, digests


IMITATED = """
import hashlib
import torch
from tinyagent.engine.matmul import matmul, use_path
a = torch.randn(70, 66, generator=torch.Generator().manual_seed(1))
b = torch.randn(66, 198, generator=torch.Generator().manual_seed(2))
print(use_path("fastest"), use_path("avx512"), use_path("avx2"), use_path("fastest"))
print(hashlib.sha256(matmul(a, b).numpy().tobytes()).hexdigest())
"""


def run_imitated(value):
    env = {**os.environ, IMITATE_NO_AVX512: value}
    return subprocess.run([sys.executable, "-c", IMITATED], env=env, capture_output=True, text=True)


@pytest.mark.x86_64("the kernel's AVX2 and AVX-512 paths (x86 code; elsewhere every path is the "
                    "scalar one)")
def test_imitating_a_cpu_without_avx512_caps_every_path_and_keeps_the_bits():
    """TINYAGENT_IMITATE_NO_AVX512=1 makes even a request for AVX-512 compute on AVX2 (what a CPU
    without it takes), and the products keep their bits; 0 leaves this CPU's fastest path."""
    imitated, plain = run_imitated("1"), run_imitated("0")
    assert imitated.returncode == plain.returncode == 0, imitated.stderr + plain.stderr
    paths, products = imitated.stdout.splitlines()
    assert paths == "avx2 avx2 avx2 avx2"
    fastest = "avx512" if cpu_model()[1] else "avx2"      # this CPU's, whatever this test imitates
    assert plain.stdout.splitlines()[0] == f"{fastest} {fastest} avx2 {fastest}"
    assert products == plain.stdout.splitlines()[1]


def test_a_bad_imitation_value_or_path_names_what_is_allowed():
    done = run_imitated("maybe")
    assert done.returncode != 0
    assert "TINYAGENT_IMITATE_NO_AVX512='maybe' is not a switch; allowed" in done.stderr
    with pytest.raises(ValueError, match="unknown path 'sse'; allowed: fastest, scalar, avx2, avx512"):
        use_path("sse")


def test_a_missing_build_names_the_install_step(monkeypatch):
    """Without the compiled module, loading the kernels says what to run, not a bare
    ModuleNotFoundError."""
    def missing(name):
        raise ModuleNotFoundError(f"No module named {name!r}")

    monkeypatch.setattr(importlib, "import_module", missing)
    with pytest.raises(ImportError, match=r"matrix kernel is not built.*pip install -e \."):
        kernels.load("matrix kernel")


def test_the_entry_points_refuse_a_wrong_call():
    """bindings.c reads its arguments itself: a wrong count or a non-number is a TypeError,
    before the kernel touches any memory."""
    lib = kernels.load("matrix kernel")
    with pytest.raises(TypeError, match="bmm takes 19 arguments, got 3"):
        lib.bmm(1, 2, 3)
    with pytest.raises(TypeError):
        lib.bmm(*([1] * 5), "not an address", *([0] * 13))
    with pytest.raises(TypeError, match="gelu_forward takes 4 arguments"):
        lib.gelu_forward(1)
