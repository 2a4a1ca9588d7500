"""adam.py: torch's Adam step with the correctly rounded square root, the same on every CPU."""
import math
from contextlib import contextmanager, nullcontext

import numpy as np
import pytest
import torch

from tinyagent.engine.adam import Adam, exact_sqrt


def _values(dtype, n=20000):
    g = torch.Generator().manual_seed(0)
    scale = 10.0 ** torch.randint(-30, 30, (n,), generator=g)
    x = torch.rand(n, generator=g, dtype=torch.float64) ** 8 * scale
    edge = torch.tensor([0.0, 1.0, 4.0, 2.0, 1e-45 if dtype == torch.float32 else 5e-324, 3.4e38])
    return torch.cat([x, edge]).to(dtype)


def test_exact_sqrt_is_the_correctly_rounded_square_root_in_float32():
    x = _values(torch.float32)
    # The float64 square root is correctly rounded, and rounding it again to float32 is exact for
    # square roots (53 >= 2 * 24 + 2 bits), so this is the correctly rounded float32 root.
    want = x.double().numpy()
    want = np.array([math.sqrt(v) for v in want]).astype(np.float32)
    assert np.array_equal(exact_sqrt(x).numpy(), want)


def test_exact_sqrt_is_the_correctly_rounded_square_root_in_float64():
    x = _values(torch.float64)
    assert np.array_equal(exact_sqrt(x).numpy(), np.array([math.sqrt(v) for v in x.tolist()]))


@contextmanager
def _torch_sqrt_made_exact():
    original = torch.Tensor.sqrt
    torch.Tensor.sqrt = exact_sqrt
    try:
        yield
    finally:
        torch.Tensor.sqrt = original


def _train(make_optimizer, steps=5, patch=False):
    g = torch.Generator().manual_seed(3)
    params = [torch.randn(316, 66, generator=g).requires_grad_(),
              torch.randn(66, generator=g).requires_grad_()]
    opt = make_optimizer(params)
    with _torch_sqrt_made_exact() if patch else nullcontext():
        for _ in range(steps):
            for p in params:
                p.grad = torch.randn(p.shape, generator=g) * 1e-2
            opt.step()
    return [p.detach().clone() for p in params]


def test_adam_is_torchs_single_tensor_step_with_an_exact_square_root():
    """Bit for bit torch.optim.Adam's CPU step once torch's square root is the correct one: the
    only difference between the two is the square root."""
    ours = _train(lambda ps: Adam(ps, lr=3e-3))
    theirs = _train(lambda ps: torch.optim.Adam(ps, lr=3e-3, foreach=False), patch=True)
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)


def test_adam_is_within_rounding_of_torchs():
    ours = _train(lambda ps: Adam(ps, lr=3e-3))
    theirs = _train(lambda ps: torch.optim.Adam(ps, lr=3e-3))
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_adam_resumes_exactly_from_its_state_dict_and_follows_its_learning_rate():
    g = torch.Generator().manual_seed(5)
    grads = [torch.randn(40, generator=g) for _ in range(6)]

    def run(split):
        p = torch.zeros(40, requires_grad=True)
        opt = Adam([p], lr=1e-2)
        for i, grad in enumerate(grads):
            if i == split:
                state = opt.state_dict()
                opt = Adam([p], lr=1.0)
                opt.load_state_dict(state)
            opt.lr = 1e-2 / (1 + i)
            p.grad = grad
            opt.step()
        return p.detach()

    assert torch.equal(run(split=None), run(split=3))
    assert not torch.equal(run(None), torch.zeros(40))


def test_adam_follows_a_learning_rate_as_torchs_scheduler_sets_it():
    """SFT sets `lr` itself each step, where a torch.optim.Adam would follow a LambdaLR."""
    factor = lambda s: 1 / (1 + s)                                  # noqa: E731
    ours = _train(lambda ps: _Scheduled(Adam(ps, lr=3e-3), factor))
    theirs = _train(lambda ps: _Scheduled(torch.optim.Adam(ps, lr=3e-3, foreach=False), factor,
                                          torch_scheduler=True), patch=True)
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))


class _Scheduled:
    """An optimizer whose learning rate is 3e-3 * factor(step), set by hand or by LambdaLR."""

    def __init__(self, opt, factor, torch_scheduler=False):
        self.opt, self.factor, self.t = opt, factor, 0
        self.sched = torch.optim.lr_scheduler.LambdaLR(opt, factor) if torch_scheduler else None

    def step(self):
        if self.sched is None:
            self.opt.param_groups[0]["lr"] = 3e-3 * self.factor(self.t)
        self.opt.step()
        if self.sched is not None:
            self.sched.step()
        self.t += 1


def test_a_state_for_other_parameters_is_refused():
    state = Adam([torch.zeros(3, requires_grad=True)]).state_dict()
    p = torch.zeros(3, requires_grad=True)
    p.grad = torch.ones(3)
    opt = Adam([p])
    opt.step()
    saved = opt.state_dict()
    with pytest.raises(ValueError, match="other parameters"):
        Adam([torch.zeros(4, requires_grad=True)]).load_state_dict(saved)
    Adam([torch.zeros(3, requires_grad=True)]).load_state_dict(state)     # empty: nothing to check


@pytest.mark.parametrize("kwargs", [dict(lr=0), dict(lr=-1e-3), dict(eps=0), dict(betas=(0.9, 1.0)),
                                    dict(betas=(-0.1, 0.999)), dict(betas=(0.9,)),
                                    dict(lr=float("nan")), dict(lr=float("inf")),
                                    dict(eps=float("inf")), dict(eps=float("nan")), dict(lr="1e-3")])
@pytest.mark.parametrize("make", ["engine's Adam", "engine.Adam (kernels)", "engine.Adam (torch)"])
def test_adam_refuses_settings_outside_its_domain(kwargs, make):
    from tinyagent import engine
    params = [torch.zeros(2, requires_grad=True)]
    if make == "engine's Adam":
        def build():
            return Adam(params, **kwargs)
    else:
        def build():
            engine.use("kernels" if "kernels" in make else "torch")
            try:
                return engine.Adam(params, **kwargs)
            finally:
                engine.use(None)
    with pytest.raises(ValueError) as refused:
        build()
    assert all(word in str(refused.value) for word in ("lr > 0", "eps > 0", "finite", "[0, 1)"))


def test_adam_refuses_a_learning_rate_made_infinite_between_steps():
    p = torch.ones(3, requires_grad=True)
    opt = Adam([p], lr=1e-2)
    p.grad = torch.ones(3)
    opt.step()
    opt.param_groups[0]["lr"] = float("inf")
    with pytest.raises(ValueError, match="finite"):
        opt.step()
    assert torch.isfinite(p).all()


@pytest.mark.parametrize("change, words", [
    ("resized", ["size", "state"]),
    ("a gradient of another shape", ["size", "gradient"]),
    ("on meta", ["cpu", "meta"]),
])
def test_adam_refuses_a_parameter_unlike_its_state(change, words):
    """The C step reads the parameter, its gradient and both moments over p.numel() elements:
    all four must be of one size, on the CPU."""
    p = torch.nn.Parameter(torch.ones(4))
    opt = Adam([p])
    p.grad = torch.ones(4)
    opt.step()
    if change == "resized":
        p.data, p.grad = torch.ones(100), torch.ones(100)
    elif change == "a gradient of another shape":
        p.data = torch.ones(100)                           # the gradient is still (4,)
    else:                                                  # a parameter of no memory
        p = torch.nn.Parameter(torch.empty(4, device="meta"))
        p.grad = torch.empty(4, device="meta")
        opt = Adam([p])
    with pytest.raises(ValueError) as refused:
        opt.step()
    assert all(w in str(refused.value) for w in words), refused.value


def test_the_float32_step_in_c_has_the_bits_of_the_torch_operators():
    """adam.c against `torch_step` on the policy's parameters, their shapes' every tail of a
    vector, over steps whose gradients span ten orders of magnitude; a float64 parameter takes
    the torch operators themselves."""
    from tinyagent.engine.adam import torch_step
    from tinyagent.policy import Policy
    g = torch.Generator().manual_seed(11)
    ours = [p.detach().clone() for p in Policy(seed=4).parameters()]
    ours.append(torch.randn(13, generator=g, dtype=torch.float64))
    theirs = [p.clone() for p in ours]
    moments = [(torch.zeros_like(p), torch.zeros_like(p)) for p in theirs]
    opt = Adam(ours, lr=2e-3)
    for t in range(1, 9):
        for p, q in zip(ours, theirs):
            p.grad = q.grad = torch.randn(p.shape, generator=g, dtype=p.dtype) * 10.0 ** (t - 7)
        opt.step()
        for q, (m, v) in zip(theirs, moments):
            torch_step(q, q.grad, m, v, 0.9, 0.999, (1 - 0.999 ** t) ** 0.5, 1e-8,
                       -(2e-3 / (1 - 0.9 ** t)))
        assert all(torch.equal(p, q) for p, q in zip(ours, theirs)), t
    for i, (m, v) in enumerate(moments):
        state = opt.state[i]
        assert torch.equal(state["exp_avg"], m) and torch.equal(state["exp_avg_sq"], v)


def test_a_step_in_c_is_seen_by_autograd_as_an_in_place_change():
    p = torch.ones(8, requires_grad=True)
    y = (p * p).sum()                                      # saves p for its gradient
    p.grad = torch.ones(8)
    Adam([p]).step()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()
