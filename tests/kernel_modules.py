"""The policy's modules with each operator computed by the engine's kernels, called one at a time:
the reference that the engine's fused passes (sequence_pass.py, token_pass.py, kvcache.py) are
held to bit for bit. Autograd records every call, so the gradients are autograd's own.

It is tinyagent/policy.py's forward line for line, with `nn.Linear` replaced by the product kernel
(`matmul.linear`), attention's scores, softmax and values by `scores`, `softmax` and `matmul`, and
GELU by `gelu`; the embeddings and layer norms are the modules' own.
"""
import torch

from tinyagent.engine.gelu import gelu
from tinyagent.engine.matmul import linear, matmul, scores
from tinyagent.engine.softmax import softmax


def _linear(layer, x):
    return linear(x, layer.weight, layer.bias)


def _attention(attn, x, cache, pos):
    B, T, C = x.shape
    qkv = _linear(attn.qkv, x)
    q, k, v = (t.view(B, T, attn.n_head, C // attn.n_head).transpose(1, 2)
               for t in qkv.split(C, dim=2))                         # (B, nh, T, hs)
    if cache is not None:
        keys, values = cache
        keys[..., pos:pos + T] = k.transpose(2, 3)
        values[:, :, pos:pos + T] = v
        k, v = keys[..., :pos + T].transpose(2, 3), values[:, :, :pos + T]
    y = matmul(softmax(scores(q, k, T > 1), T > 1), v)               # (B, nh, T, hs)
    return _linear(attn.proj, y.transpose(1, 2).contiguous().view(B, T, C))


def features(policy, idx, cache=None, pos=0):
    """`policy.features(idx, cache, pos)` through the kernels, one call per operator."""
    B, T = idx.shape
    policy.check_positions(pos, T, cache, B)
    x = policy.wte(idx) + policy.wpe(torch.arange(pos, pos + T))
    for i, block in enumerate(policy.blocks):
        x = x + _attention(block.attn, block.ln_1(x), None if cache is None else cache[i], pos)
        x = x + _linear(block.mlp.proj, gelu(_linear(block.mlp.fc, block.ln_2(x))))
    if cache is not None:
        cache.filled = pos + T
    return policy.ln_f(x)


def logits(policy, idx):
    """`policy(idx)` through the kernels."""
    return _linear(policy.head, features(policy, idx))


def head(policy, x):
    return _linear(policy.head, x)


def prefill(policy, idx, cache):
    return _linear(policy.head, features(policy, idx, cache)[:, -1])


def step(policy, tokens, pos, cache, rows=None):
    x = features(policy, tokens[:, None], cache, pos)[:, 0]
    return _linear(policy.head, x if rows is None else x[rows])
