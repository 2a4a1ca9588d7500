"""The GELU kernel computes the bits of the torch expression it replaces, forward and backward."""
import math

import pytest
import torch

from tinyagent.engine.arithmetic import torch_threads
from tinyagent.engine.gelu import gelu, gelu_expression

GEN = torch.Generator().manual_seed(0)


def forward_and_gradient(f, x, grad):
    x = x.detach().requires_grad_()
    y = f(x)
    y.backward(grad)
    return y.detach(), x.grad


@pytest.mark.parametrize("shape", [(1,), (7,), (64, 264), (3, 50, 264)])
@pytest.mark.parametrize("spread", [1e-3, 1.0, 4.0, 40.0])
def test_gelu_is_the_expression_bit_for_bit(shape, spread):
    """Values from far inside erf's linear part to far past its saturation (where exp underflows
    and one path of the gradient vanishes)."""
    x = torch.randn(shape, generator=GEN) * spread
    grad = torch.randn(shape, generator=GEN)
    ours, theirs = forward_and_gradient(gelu, x, grad), forward_and_gradient(gelu_expression, x, grad)
    assert torch.equal(ours[0], theirs[0]) and torch.equal(ours[1], theirs[1])
    with torch.no_grad():
        assert torch.equal(gelu(x), theirs[0])


@pytest.mark.parametrize("threads", [2, 3])
def test_a_long_tensor_shared_between_threads_gets_the_same_bits(threads):
    """Long enough to be split between torch's threads, forward and backward."""
    x, grad = torch.randn(64, 40, 264, generator=GEN), torch.randn(64, 40, 264, generator=GEN)
    with torch_threads(1):
        alone = forward_and_gradient(gelu, x, grad)
    with torch_threads(threads):
        shared = forward_and_gradient(gelu, x, grad)
    assert torch.equal(shared[0], alone[0]) and torch.equal(shared[1], alone[1])


def test_gelu_of_a_strided_input_and_gradient():
    x = torch.randn(40, 66, generator=GEN).t()
    grad = torch.randn(66, 40, generator=GEN)
    ours = forward_and_gradient(gelu, x, grad)
    theirs = forward_and_gradient(gelu_expression, x, grad.t().contiguous().t())
    assert torch.equal(ours[0], theirs[0]) and torch.equal(ours[1], theirs[1])


def test_gelu_of_special_values():
    x = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 1e-40, -1e-40, 3e38, -3e38])
    ours, theirs = gelu(x), gelu_expression(x)
    assert torch.equal(ours.isnan(), theirs.isnan())
    finite = ~theirs.isnan()
    assert torch.equal(ours[finite].view(torch.int32), theirs[finite].view(torch.int32))   # signed zeros too


def test_another_precision_gets_the_expression():
    x = torch.randn(5, 7, generator=GEN, dtype=torch.float64)
    assert gelu(x).dtype == torch.float64 and torch.equal(gelu(x), gelu_expression(x))


@pytest.mark.x86_64("MKL's float32 erf, accurate to these tolerances (a torch without MKL, "
                    "as on ARM, computes erf less accurately)")
def test_gelu_is_x_times_the_normal_cdf():
    x = torch.linspace(-6, 6, 101, dtype=torch.float32)
    exact = x.double() * 0.5 * (1 + torch.erf(x.double() / math.sqrt(2)))
    assert torch.allclose(gelu(x).double(), exact, rtol=1e-6, atol=1e-7)
