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
