import pytest
import torch
import torch.nn.functional as F

from tinyagent.engine.softmax import softmax


def _scores(shape, scale, causal, seed=0):
    s = torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * scale
    if causal:
        s = s.masked_fill(torch.ones(shape[-1], shape[-1], dtype=torch.bool).triu(1), float("-inf"))
    return s


@pytest.mark.parametrize("T", [1, 2, 3, 7, 8, 9, 13, 16, 17, 31, 33, 50, 96])
@pytest.mark.parametrize("scale", [1.0, 10.0, 80.0])
def test_causal_rows_have_torchs_bits(T, scale):
    """Scores of every width the policy meets, with exponentials that underflow at the largest
    scale: softmax.c gives torch's bits, for rows of every unmasked length 1 .. T, the masked
    entries it skips included."""
    causal = _scores((3, 6, T, T), scale, True)
    with torch.no_grad():
        assert torch.equal(softmax(causal, causal=True), F.softmax(causal, dim=-1))


def test_the_gradient_is_torchs():
    s = _scores((2, 6, 21, 21), 3.0, True).requires_grad_()
    t = s.detach().clone().requires_grad_()
    g = torch.randn(2, 6, 21, 21, generator=torch.Generator().manual_seed(1))
    y = softmax(s, causal=True)
    y.backward(g)
    F.softmax(t, dim=-1).backward(g)
    assert torch.equal(y.detach(), F.softmax(t.detach(), dim=-1)) and torch.equal(s.grad, t.grad)


def test_other_dtypes_layouts_and_shapes_go_to_torch():
    x64 = _scores((2, 3, 5, 5), 1.0, True).double()
    strided = _scores((2, 3, 8, 8), 1.0, False).transpose(-1, -2)
    with torch.no_grad():
        assert torch.equal(softmax(x64, causal=True), F.softmax(x64, dim=-1))
        assert torch.equal(softmax(strided), F.softmax(strided, dim=-1))
        assert softmax(torch.empty(0, 4)).shape == (0, 4)
        not_square = _scores((2, 3, 4, 6), 1.0, False)
        assert torch.equal(softmax(not_square, causal=True), F.softmax(not_square, dim=-1))
