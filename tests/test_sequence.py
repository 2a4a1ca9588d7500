import contextlib

import pytest
import torch

from tinyagent import sequence
from tinyagent.adam import Adam
from tinyagent.grpo import RLConfig, compute_advantages, frozen_copy, reference_logprobs, \
    rl_update, sample_step
from tinyagent.policy import Linear, Policy, load_rl_base


@pytest.fixture
def through(monkeypatch):
    """through(plan): whole sequences through sequence.py (True) or the modules (False)."""
    return lambda plan: monkeypatch.setattr(Policy, "plan_sequences", plan)


def _logits_and_gradients(policy, idx, fixed):
    policy.zero_grad(set_to_none=True)
    if fixed:
        with policy.fixed_weights():
            logits = policy(idx)
    else:
        logits = policy(idx)
    (logits.square().mean() + logits[:, -1].logsumexp(-1).sum()).backward()
    return logits.detach(), [p.grad.clone() for p in policy.parameters()]


@pytest.mark.parametrize("B, T, fixed", [(1, 1, False), (3, 13, True), (8, 50, True),
                                         (8, 50, False), (2, 96, False)])
def test_the_pass_has_the_bits_of_the_modules(through, B, T, fixed):
    """Logits and the gradient of every parameter, bit for bit, whatever the length (one token to
    block_size) and whether the weights' rows are fixed."""
    policy = Policy(seed=4)
    idx = torch.randint(0, policy.cfg.vocab_size, (B, T), generator=torch.Generator().manual_seed(T))
    through(False)
    modules = _logits_and_gradients(policy, idx, fixed)
    through(True)
    assert type(policy.features(idx).grad_fn).__name__ == "_SequencePassBackward"  # the pass ran
    plan = _logits_and_gradients(policy, idx, fixed)
    assert torch.equal(modules[0], plan[0])
    names = [n for n, _ in policy.named_parameters()]
    assert [n for n, a, b in zip(names, modules[1], plan[1]) if not torch.equal(a, b)] == []


def test_an_update_has_the_bits_of_the_modules(through):
    """A GRPO update, whose minibatches sum each parameter's gradient over several passes of 8
    episodes (the order of that sum is autograd's either way): the reference's log-probabilities,
    the statistics and the parameters after both Adam steps are the modules' bit for bit."""
    batch = sample_step(load_rl_base(), RLConfig(), torch.Generator().manual_seed(3))
    advantages, _ = compute_advantages(batch.rewards, RLConfig().group_size)
    results = []
    for plan in (False, True):
        through(plan)
        policy = load_rl_base()
        ref_logp = reference_logprobs(frozen_copy(policy), batch)
        stats = rl_update(policy, Adam(policy.parameters(), lr=1e-3), batch, advantages,
                          ref_logp, RLConfig(), torch.Generator().manual_seed(5))
        results.append((ref_logp, stats, [p.detach().clone() for p in policy.parameters()]))
    (ref_m, stats_m, params_m), (ref_p, stats_p, params_p) = results
    assert torch.equal(ref_m, ref_p) and stats_m == stats_p
    assert all(torch.equal(a, b) for a, b in zip(params_m, params_p))


def test_two_threads_give_the_modules_bits(through):
    """SFT trains on two threads; the pass calls the same operators, so it rounds as they do."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        policy = Policy(seed=2)
        idx = torch.randint(0, policy.cfg.vocab_size, (64, 40),
                            generator=torch.Generator().manual_seed(1))
        through(False)
        modules = _logits_and_gradients(policy, idx, False)
        through(True)
        plan = _logits_and_gradients(policy, idx, False)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(modules[0], plan[0])
    assert all(torch.equal(a, b) for a, b in zip(modules[1], plan[1]))


def _kept_features_and_gradients(policy, idx, keep, fixed):
    policy.zero_grad(set_to_none=True)
    with policy.fixed_weights() if fixed else contextlib.nullcontext():
        features = policy.features(idx, keep=keep)
    with torch.no_grad():                               # the reference's pass: no gradient
        no_grad = policy.features(idx, keep=keep)
    (features.square().sum() + policy.head(features).logsumexp(-1).sum()).backward()
    return features.detach(), no_grad, [p.grad.clone() for p in policy.parameters()]


def _keeps(B, T):
    gen = torch.Generator().manual_seed(B * T)
    yield torch.rand(B, T, generator=gen) < 0.3        # a GRPO batch keeps under a third
    yield torch.ones(B, T, dtype=torch.bool)
    yield torch.zeros(B, T, dtype=torch.bool)           # nothing kept: (0, C), no gradient
    one = torch.zeros(B, T, dtype=torch.bool)
    one[-1, -1] = True
    yield one


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("B, T, fixed", [(1, 1, False), (3, 13, True), (8, 50, True),
                                         (5, 29, False)])
def test_kept_rows_have_the_bits_of_every_row(through, B, T, fixed, threads):
    """`features(idx, keep=keep)` skips the last block's rows that nothing reads, past its
    attention. Its features, without and with a gradient, and every parameter's gradient equal
    those of the modules' whole pass indexed by `keep`, bit for bit, on one and two threads (the
    weight's sums over rows that ATen shares between threads run over every row)."""
    policy = Policy(seed=6)
    idx = torch.randint(0, policy.cfg.vocab_size, (B, T), generator=torch.Generator().manual_seed(T))
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for keep in _keeps(B, T):
            through(False)
            modules = _kept_features_and_gradients(policy, idx, keep, fixed)
            through(True)
            plan = _kept_features_and_gradients(policy, idx, keep, fixed)
            ran = policy.features(idx, keep=keep).grad_fn                  # the pass, not the
            assert type(ran).__name__ == "_SequencePassBackward"           # modules, ran
            assert modules[0].shape == (int(keep.sum()), policy.cfg.n_embd)
            assert torch.equal(modules[0], plan[0]) and torch.equal(modules[1], plan[1])
            assert all(torch.equal(a, b) for a, b in zip(modules[2], plan[2]))
    finally:
        torch.set_num_threads(previous)


def test_kept_rows_skip_the_last_block_past_its_attention(monkeypatch):
    """The saving is real: with a third of the rows kept, the products compute fewer operations,
    by the last block's output projection and MLP on the rows not kept."""
    policy = Policy(seed=7)
    B, T, C = 4, 30, policy.cfg.n_embd
    idx = torch.randint(0, policy.cfg.vocab_size, (B, T), generator=torch.Generator().manual_seed(1))
    keep = torch.arange(T).expand(B, T) % 3 == 0
    flops, plain = [0], sequence.matmul._bmm

    def counted(a, b, *args, **kwargs):
        flops[0] += 2 * a.numel() * b.shape[-1]
        return plain(a, b, *args, **kwargs)
    monkeypatch.setattr(sequence.matmul, "_bmm", counted)
    counts = []
    for kept in (None, keep):
        flops[0] = 0
        with torch.no_grad():
            policy.features(idx, keep=kept)
        counts.append(flops[0])
    skipped = 2 * (B * T - int(keep.sum())) * (C * C + 2 * C * 4 * C)     # proj, fc, mlp.proj
    assert counts[0] - counts[1] == skipped


@pytest.mark.parametrize("keep, allowed", [
    (torch.ones(2, 5), "bool"), (torch.ones(2, 4, dtype=torch.bool), "shaped like"),
    ([[True] * 5] * 2, "bool tensor")])
def test_a_bad_keep_is_refused(keep, allowed):
    policy = Policy(seed=0)
    with pytest.raises(ValueError, match=allowed):
        policy.features(torch.zeros(2, 5, dtype=torch.long), keep=keep)


@pytest.mark.parametrize("B, T", [(1, 1), (3, 13), (64, 13), (5, 40)])
def test_a_prompts_pass_into_the_cache_has_the_bits_of_the_modules(through, monkeypatch, B, T):
    """`prefill` (no gradient, a float32 cache) runs the pass, storing each layer's keys and
    values as `CausalSelfAttention` does, and the last position alone past the last attention:
    its logits and every stored key and value equal the modules', bit for bit, and a one-token
    step after it too."""
    policy = Policy(seed=8)
    idx = torch.randint(0, policy.cfg.vocab_size, (B, T), generator=torch.Generator().manual_seed(B))
    calls, plain = [], sequence._forward
    monkeypatch.setattr(sequence, "_forward", lambda *args: calls.append(1) or plain(*args))
    results = []
    for plan in (False, True):
        through(plan)
        cache = policy.new_cache(B)
        with torch.inference_mode():
            logits = policy.prefill(idx, cache)
            after = policy.step(idx[:, 0], T, cache)
        results.append((logits, after, [t for keys, values in cache       # the filled positions
                                        for t in (keys[..., :T + 1], values[:, :, :T + 1])]))
    assert calls == [1]                                     # the modules, then the pass
    (logits_m, after_m, cache_m), (logits_p, after_p, cache_p) = results
    assert torch.equal(logits_m, logits_p) and torch.equal(after_m, after_p)
    assert all(torch.equal(a, b) for a, b in zip(cache_m, cache_p))


def test_a_cache_of_another_batch_size_is_refused():
    """The C store writes as many rows as it is given: a cache with fewer would be overrun."""
    policy = Policy(seed=0)
    with pytest.raises(ValueError, match="batch_size"):
        policy.prefill(torch.zeros(3, 5, dtype=torch.long), policy.new_cache(2))
    with torch.inference_mode(), policy.fixed_weights(), pytest.raises(ValueError, match="batch_size"):
        policy.step(torch.zeros(3, dtype=torch.long), 0, policy.new_cache(2))


def test_without_a_gradient_the_pass_records_nothing():
    policy = Policy(seed=1)
    idx = torch.randint(0, policy.cfg.vocab_size, (4, 20), generator=torch.Generator().manual_seed(0))
    weights = policy.plain_weights()
    with torch.no_grad():
        assert sequence.features(policy, idx, weights).grad_fn is None
    frozen = frozen_copy(policy)                                  # weights without a gradient
    assert sequence.features(frozen, idx, frozen.plain_weights()).grad_fn is None
    assert sequence.features(policy, idx, weights).grad_fn is not None


def _hooked(policy):
    policy.blocks[1].mlp.fc.register_forward_hook(lambda module, args, out: out * 0)
    return policy


def _adapted(policy):
    class Adapter(Linear):                      # a student's variant of one layer
        def forward(self, x):
            return super().forward(x) + 1.0
    layer = Adapter(policy.cfg.n_embd, 3 * policy.cfg.n_embd)
    layer.load_state_dict(policy.blocks[0].attn.qkv.state_dict())
    policy.blocks[0].attn.qkv = layer
    return policy


def _hooked_globally(policy):
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda module, args, out: out * 0 if isinstance(module, Linear) else out)
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
    """A policy in another precision, a hook on a module, a module of another kind: the pass does
    not apply (`plain_weights` is None), `Policy.features` goes through the modules, and the hook
    or the variant takes effect; the gradient still reaches the weights."""
    policy = Policy(seed=5)
    idx = torch.randint(0, policy.cfg.vocab_size, (2, 9), generator=torch.Generator().manual_seed(2))
    before = policy(idx).detach().double()
    policy = change(policy)
    assert policy.plain_weights() is None
    assert type(policy.features(idx).grad_fn).__name__ != "_SequencePassBackward"
    after = policy(idx)
    after.sum().backward()
    assert policy.head.weight.grad is not None
    if after.dtype == torch.float32:                  # the hook or the adapter changed the logits
        assert not torch.equal(before, after.detach().double())
