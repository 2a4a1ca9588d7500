"""The engine's whole-sequence pass (engine/sequence_pass.py, reached through `engine.features`,
`engine.logits` and a `Decoder`'s prefill) against the policy's modules with each operator
computed by the same kernels one call at a time (tests/kernel_modules.py), bit for bit: logits,
kept rows, every parameter's gradient, one and two threads, a GRPO update, a prompt into the
cache."""
import pytest
import torch

import kernel_modules
from tinyagent import engine
from tinyagent.checkpoint import load_rl_base
from tinyagent.engine import sequence_pass
from tinyagent.engine.adam import Adam
from tinyagent.engine.weights import Weights, why_not
from tinyagent.grpo import RLConfig, compute_advantages, frozen_copy, reference_logprobs, \
    rl_update, sample_step
from tinyagent.policy import Policy


@pytest.fixture(autouse=True)
def _the_kernels():
    """These are the kernels' bit tests: they compute with the kernels whatever the environment
    says, and give the process back its choice."""
    if not engine.kernels.available():
        pytest.skip("the engine's C kernels are not built")
    engine.use("kernels")
    yield
    engine.use(None)


def _kernel_features(policy, idx, keep=None):
    out = kernel_modules.features(policy, idx)
    return out if keep is None else out[keep]


@pytest.fixture
def through(monkeypatch):
    """through(pass_): the book's code (token_logprobs, rl_update, ...) computes through the
    engine's fused pass ("pass") or through kernel_modules, one kernel call per operator
    ("modules")."""
    fused = {name: getattr(engine, name) for name in ("features", "logits", "head")}
    unfused = {"features": _kernel_features, "logits": kernel_modules.logits,
               "head": kernel_modules.head}

    def choose(pass_):
        for name, function in (fused if pass_ == "pass" else unfused).items():
            monkeypatch.setattr(engine, name, function)
    return choose


def _warm(policy, warm):
    """The seam's weights of `policy` held from an earlier pass (warm) or made by this one."""
    engine._forms.pop(policy, None)
    if warm:
        with torch.no_grad():
            engine.features(policy, torch.zeros(1, 1, dtype=torch.long))
        assert engine._forms[policy].current(policy)


def _logits_and_gradients(policy, idx, logits):
    policy.zero_grad(set_to_none=True)
    out = logits(policy, idx)
    (out.square().mean() + out[:, -1].logsumexp(-1).sum()).backward()
    return out.detach(), [p.grad.clone() for p in policy.parameters()]


@pytest.mark.parametrize("B, T, warm", [(1, 1, False), (3, 13, True), (8, 50, True),
                                        (8, 50, False), (2, 96, False)])
def test_the_pass_has_the_bits_of_the_kernels_called_one_by_one(B, T, warm):
    """Logits and the gradient of every parameter, bit for bit, whatever the length (one token to
    block_size) and whether the weights' rows were made for this pass or held from an earlier."""
    policy = Policy(seed=4)
    idx = torch.randint(0, policy.cfg.vocab_size, (B, T), generator=torch.Generator().manual_seed(T))
    modules = _logits_and_gradients(policy, idx, kernel_modules.logits)
    _warm(policy, warm)
    assert type(engine.features(policy, idx).grad_fn).__name__ == "_SequencePassBackward"  # ran
    fused = _logits_and_gradients(policy, idx, engine.logits)
    assert torch.equal(modules[0], fused[0])
    names = [n for n, _ in policy.named_parameters()]
    assert [n for n, a, b in zip(names, modules[1], fused[1]) if not torch.equal(a, b)] == []


def test_an_update_has_the_bits_of_the_kernels_called_one_by_one(through, monkeypatch):
    """A GRPO update, whose minibatches sum each parameter's gradient over several passes of 8
    episodes (the order of that sum is autograd's either way): the reference's log-probabilities,
    the statistics and the parameters after both Adam steps are those of the unfused kernels bit
    for bit."""
    batch = sample_step(load_rl_base(), RLConfig(), torch.Generator().manual_seed(3))
    advantages, _ = compute_advantages(batch.rewards, RLConfig().group_size)
    calls, plain = [], sequence_pass._SequencePass.apply
    monkeypatch.setattr(sequence_pass._SequencePass, "apply",
                        lambda *args: calls.append(1) or plain(*args))
    results = []
    for pass_ in ("modules", "pass"):
        through(pass_)
        policy = load_rl_base()
        ref_logp = reference_logprobs(frozen_copy(policy), batch)
        stats = rl_update(policy, Adam(policy.parameters(), lr=1e-3), batch, advantages,
                          ref_logp, RLConfig(), torch.Generator().manual_seed(5))
        results.append((ref_logp, stats, [p.detach().clone() for p in policy.parameters()]))
        assert bool(calls) == (pass_ == "pass")               # the fused pass ran, and only then
    (ref_m, stats_m, params_m), (ref_p, stats_p, params_p) = results
    assert torch.equal(ref_m, ref_p) and stats_m == stats_p
    assert all(torch.equal(a, b) for a, b in zip(params_m, params_p))
    assert not all(torch.equal(a, b) for a, b in zip(params_m, load_rl_base().parameters()))


def test_two_threads_give_the_bits_of_the_kernels_called_one_by_one():
    """SFT trains on two threads; the pass calls the same operators, so it rounds as they do."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        policy = Policy(seed=2)
        idx = torch.randint(0, policy.cfg.vocab_size, (64, 40),
                            generator=torch.Generator().manual_seed(1))
        modules = _logits_and_gradients(policy, idx, kernel_modules.logits)
        fused = _logits_and_gradients(policy, idx, engine.logits)
        assert type(engine.features(policy, idx).grad_fn).__name__ == "_SequencePassBackward"
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(modules[0], fused[0])
    assert all(torch.equal(a, b) for a, b in zip(modules[1], fused[1]))


def _kept_features_and_gradients(policy, idx, keep, features, head):
    policy.zero_grad(set_to_none=True)
    out = features(policy, idx, keep)
    with torch.no_grad():                               # the reference's pass: no gradient
        no_grad = features(policy, idx, keep)
    (out.square().sum() + head(policy, out).logsumexp(-1).sum()).backward()
    return out.detach(), no_grad, [p.grad.clone() for p in policy.parameters()]


def _keeps(B, T):
    gen = torch.Generator().manual_seed(B * T)
    yield torch.rand(B, T, generator=gen) < 0.3        # a GRPO batch keeps under a third
    yield torch.ones(B, T, dtype=torch.bool)
    yield torch.zeros(B, T, dtype=torch.bool)           # nothing kept: (0, C), no gradient
    one = torch.zeros(B, T, dtype=torch.bool)
    one[-1, -1] = True
    yield one


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("B, T, warm", [(1, 1, False), (3, 13, True), (8, 50, True),
                                        (5, 29, False)])
def test_kept_rows_have_the_bits_of_every_row(B, T, warm, threads):
    """`engine.features(policy, idx, keep)` skips the last block's rows that nothing reads, past
    its attention. Its features, without and with a gradient, and every parameter's gradient
    equal those of the unfused kernels' whole pass indexed by `keep`, bit for bit, on one and two
    threads (the weight's sums over rows that ATen shares between threads run over every row)."""
    policy = Policy(seed=6)
    idx = torch.randint(0, policy.cfg.vocab_size, (B, T), generator=torch.Generator().manual_seed(T))
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for keep in _keeps(B, T):
            modules = _kept_features_and_gradients(policy, idx, keep, _kernel_features,
                                                   kernel_modules.head)
            _warm(policy, warm)
            fused = _kept_features_and_gradients(policy, idx, keep, engine.features, engine.head)
            ran = engine.features(policy, idx, keep).grad_fn                  # the pass, not
            assert type(ran).__name__ == "_SequencePassBackward"              # the modules, ran
            assert modules[0].shape == (int(keep.sum()), policy.cfg.n_embd)
            assert torch.equal(modules[0], fused[0]) and torch.equal(modules[1], fused[1])
            assert all(torch.equal(a, b) for a, b in zip(modules[2], fused[2]))
    finally:
        torch.set_num_threads(previous)


def test_kept_rows_skip_the_last_block_past_its_attention(monkeypatch):
    """The saving is real: with a third of the rows kept, the products compute fewer operations,
    by the last block's output projection and MLP on the rows not kept."""
    policy = Policy(seed=7)
    B, T, C = 4, 30, policy.cfg.n_embd
    idx = torch.randint(0, policy.cfg.vocab_size, (B, T), generator=torch.Generator().manual_seed(1))
    keep = torch.arange(T).expand(B, T) % 3 == 0
    flops, plain = [0], sequence_pass.matmul._bmm

    def counted(a, b, *args, **kwargs):
        flops[0] += 2 * a.numel() * b.shape[-1]
        return plain(a, b, *args, **kwargs)
    monkeypatch.setattr(sequence_pass.matmul, "_bmm", counted)
    counts = []
    for kept in (None, keep):
        flops[0] = 0
        with torch.no_grad():
            engine.features(policy, idx, kept)
        counts.append(flops[0])
    assert counts[0] > 0                                      # the pass's products were counted
    skipped = 2 * (B * T - int(keep.sum())) * (C * C + 2 * C * 4 * C)     # proj, fc, mlp.proj
    assert counts[0] - counts[1] == skipped


@pytest.mark.parametrize("keep, allowed", [
    (torch.ones(2, 5), "bool"), (torch.ones(2, 4, dtype=torch.bool), "shaped like"),
    ([[True] * 5] * 2, "bool tensor")])
def test_a_bad_keep_is_refused(keep, allowed):
    policy = Policy(seed=0)
    with pytest.raises(ValueError, match=allowed):
        engine.features(policy, torch.zeros(2, 5, dtype=torch.long), keep)


@pytest.mark.parametrize("B, T", [(1, 1), (3, 13), (64, 13), (5, 40)])
def test_a_prompts_pass_into_the_cache_has_the_bits_of_the_kernels_called_one_by_one(
        monkeypatch, B, T):
    """A `Decoder`'s prefill (no gradient, a float32 cache) runs the pass, storing each layer's
    keys and values as `CausalSelfAttention` does, and the last position alone past the last
    attention: its logits and every stored key and value equal the unfused kernels', bit for bit,
    and a one-token step after it too."""
    policy = Policy(seed=8)
    idx = torch.randint(0, policy.cfg.vocab_size, (B, T), generator=torch.Generator().manual_seed(B))
    calls, plain = [], sequence_pass._forward
    monkeypatch.setattr(sequence_pass, "_forward", lambda *args: calls.append(1) or plain(*args))
    results = []
    for decoder in (kernel_modules, None):
        cache = policy.new_cache(B)
        with torch.inference_mode():
            if decoder is None:
                decoder = engine.Decoder(policy)
                prefill, step = decoder.prefill, decoder.step
            else:
                prefill = lambda idx, cache: kernel_modules.prefill(policy, idx, cache)  # noqa
                step = lambda *args: kernel_modules.step(policy, *args)                  # noqa
            logits = prefill(idx, cache)
            after = step(idx[:, 0], T, cache)
        results.append((logits, after, [t for keys, values in cache       # the filled positions
                                        for t in (keys[..., :T + 1], values[:, :, :T + 1])]))
    assert calls == [1]                                     # the unfused kernels, then the pass
    (logits_m, after_m, cache_m), (logits_p, after_p, cache_p) = results
    assert logits_p.shape == (B, policy.cfg.vocab_size)
    assert torch.equal(logits_m, logits_p) and torch.equal(after_m, after_p)
    assert all(torch.equal(a, b) for a, b in zip(cache_m, cache_p))


def test_a_cache_of_another_batch_size_is_refused():
    """The C store writes as many rows as it is given: a cache with fewer would be overrun."""
    policy = Policy(seed=0)
    decoder = engine.Decoder(policy)
    with pytest.raises(ValueError, match="batch_size"):
        decoder.prefill(torch.zeros(3, 5, dtype=torch.long), policy.new_cache(2))
    with torch.inference_mode():
        with pytest.raises(ValueError, match="batch_size"):
            decoder.prefill(torch.zeros(3, 5, dtype=torch.long), policy.new_cache(2))
        with pytest.raises(ValueError, match="batch_size"):
            decoder.step(torch.zeros(3, dtype=torch.long), 0, policy.new_cache(2))


def test_without_a_gradient_the_pass_records_nothing():
    policy = Policy(seed=1)
    idx = torch.randint(0, policy.cfg.vocab_size, (4, 20), generator=torch.Generator().manual_seed(0))
    weights = Weights(policy)
    with torch.no_grad():
        assert sequence_pass.features(policy, idx, weights).grad_fn is None
    frozen = frozen_copy(policy)                                  # weights without a gradient
    assert sequence_pass.features(frozen, idx, Weights(frozen)).grad_fn is None
    assert sequence_pass.features(policy, idx, weights).grad_fn is not None


def _hooked(policy):
    policy.blocks[1].mlp.fc.register_forward_hook(lambda module, args, out: out * 0)
    return policy


def _adapted(policy):
    class Adapter(torch.nn.Linear):             # a student's variant of one layer
        def forward(self, x):
            return super().forward(x) + 1.0
    layer = Adapter(policy.cfg.n_embd, 3 * policy.cfg.n_embd)
    layer.load_state_dict(policy.blocks[0].attn.qkv.state_dict())
    policy.blocks[0].attn.qkv = layer
    return policy


def _hooked_globally(policy):
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda module, args, out: out * 0 if isinstance(module, torch.nn.Linear) else out)
    _HANDLES.append(handle)
    return policy


_HANDLES = []


@pytest.fixture(autouse=True)
def _no_global_hooks_left():
    yield
    while _HANDLES:
        _HANDLES.pop().remove()


@pytest.mark.parametrize("change", [lambda p: p.double(), _hooked, _hooked_globally, _adapted],
                         ids=["float64", "a hook", "a global hook", "another module"])
def test_where_the_pass_would_differ_the_modules_compute(change):
    """A policy in another precision, a hook on a module, a module of another kind, even after
    the kernels computed it once: the pass does not apply (`why_not` names a reason),
    `engine.features` goes through the modules, and the hook or the variant takes effect; the
    gradient still reaches the weights."""
    policy = Policy(seed=5)
    idx = torch.randint(0, policy.cfg.vocab_size, (2, 9), generator=torch.Generator().manual_seed(2))
    before = engine.logits(policy, idx).detach().double()
    assert why_not(policy) is None and engine._forms[policy].current(policy)
    policy = change(policy)
    assert why_not(policy) is not None
    assert type(engine.features(policy, idx).grad_fn).__name__ != "_SequencePassBackward"
    after = engine.logits(policy, idx)
    after.sum().backward()
    assert policy.head.weight.grad is not None
    if after.dtype == torch.float32:                  # the hook or the adapter changed the logits
        assert not torch.equal(before, after.detach().double())
    else:                                             # float64: the modules' own function
        assert torch.equal(after, policy(idx))
