"""The TinyAgent policy: a ~155k-parameter decoder-only transformer in float32.

Read top-down: config, attention, MLP, block, model, then save/load with a checksum.
The model never imports the gym: it maps token ids to next-token logits, nothing more.
Its matrix products go through `matmul` (the same bits on any CPU) and its GELU is written
from erf, so no library that chooses its code by the CPU computes a run.
"""
import hashlib
import io
import math
import os
import re
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn as nn

from . import kvcache, sequence
from .decode import OneTokenPass
from .checks import path as path_arg, positive_int
from .files import write_atomically
from .gelu import gelu
from .matmul import linear, matmul, scores
from .softmax import softmax
from .vocab import VOCAB_SIZE

DTYPE = torch.float32   # under the pinned arithmetic (arithmetic.py) float32 is as reproducible
                        # as float64 and twice as fast; sampling still draws in float64
RL_BASE_CHECKPOINT = Path(__file__).resolve().parent / "checkpoints" / "rl_base.pt"


@dataclass(frozen=True)
class PolicyConfig:
    vocab_size: int = VOCAB_SIZE   # the gym's 316 words
    block_size: int = 96           # longest episode: 13 prompt tokens + 6 calls with observations
    n_layer: int = 2               # two layers are enough to copy a name from an observation
    n_head: int = 6                # head size 11
    n_embd: int = 66               # sized so the model has the chapter's ~157k parameters

    def __post_init__(self):
        for name, value in asdict(self).items():
            positive_int(name, value)
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be a multiple of n_head ({self.n_head}): "
                             f"the heads split the embedding evenly")


class Linear(nn.Linear):
    """nn.Linear (same parameters, same state_dict) computed through `matmul`."""
    rows = None     # the weight transposed into rows, while `Policy.fixed_weights` holds them

    def forward(self, x):
        return linear(x, self.weight, self.bias, self.rows)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = Linear(cfg.n_embd, cfg.n_embd)

    def forward(self, x, cache=None, pos=0):
        """Causal attention over x (B, T, C). With a `cache`, x holds the tokens at positions
        pos .. pos+T-1, whose keys and values are stored there: either a whole prefix (pos = 0,
        the prompt) or one new token attending to everything cached before it."""
        B, T, C = x.shape
        qkv = self.qkv(x)                                             # (B, T, 3C): [q | k | v]
        direct = cache is not None and kvcache.direct(qkv, cache)    # the C store (kvcache.py)
        if cache is not None:
            if pos > 0 and T > 1:
                raise ValueError("the cache takes a prefix at position 0 or one token at a time")
            if direct:
                kvcache.store(qkv, cache, pos)
                if T == 1:                                  # one token: as below, on the cache
                    return self.proj(kvcache.attend_one_token(qkv, cache, pos + 1))
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for t in qkv.split(C, dim=2))                     # (B, nh, T, hs)
        if cache is not None:
            keys, values = cache                                     # keys stored as kᵀ
            if not direct:
                keys[..., pos:pos + T] = k.transpose(2, 3)
                values[:, :, pos:pos + T] = v
            k, v = keys[..., :pos + T].transpose(2, 3), values[:, :, :pos + T]  # (B, nh, pos+T, hs)
        y = self.attend(q, k, v, causal=T > 1)                        # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)              # (B, T, C)
        return self.proj(y)

    @staticmethod
    def attend(q, k, v, causal):
        """softmax(q kᵀ / √hs) v for q (B, nh, T, hs) and k, v (B, nh, L, hs); `causal` masks the
        future of a prefix (T = L)."""
        att = scores(q, k, causal)                                    # (B, nh, T, L)
        return matmul(softmax(att, causal), v)                        # (B, nh, T, hs)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.fc = Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.proj = Linear(4 * cfg.n_embd, cfg.n_embd)

    def forward(self, x):
        return self.proj(gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = MLP(cfg)

    def forward(self, x, cache=None, pos=0):
        x = x + self.attn(self.ln_1(x), cache, pos)
        return x + self.mlp(self.ln_2(x))


class Policy(nn.Module):
    """Token ids (B, T) to next-token logits (B, T, V). Untied input and output embeddings
    (tied ones learned to copy names much more slowly)."""
    one_token = None    # decode.OneTokenPass, while `fixed_weights` holds the weights' rows
    plan_sequences = True   # whole sequences through sequence.py (False: through the modules,
                            # which tests/test_sequence.py compares it with)

    def __init__(self, cfg=PolicyConfig(), seed=0):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.head = Linear(cfg.n_embd, cfg.vocab_size)
        self.to(DTYPE)
        self._init_weights(torch.Generator().manual_seed(seed))

    def _init_weights(self, gen):
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif "ln" in name:
                nn.init.ones_(p)
            else:
                std = 0.02 / math.sqrt(2 * self.cfg.n_layer) if name.endswith("proj.weight") else 0.02
                with torch.no_grad():
                    # drawn in float64 whatever DTYPE is, so the same seed starts
                    # the same model in either precision
                    p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * std)

    def features(self, idx, cache=None, pos=0, keep=None):
        """The final layer's normalized features (B, T, C) of tokens idx (B, T) at positions
        pos .. pos+T-1 (with a `cache`, see CausalSelfAttention). With `keep`, a bool (B, T),
        only the kept positions' features, (n, C) in row-major order: those of
        `features(idx)[keep]`, which sequence.py computes without the rows nothing reads."""
        B, T = idx.shape
        self._check_positions(pos, T, cache, B)
        if keep is not None and (not isinstance(keep, torch.Tensor) or keep.dtype != torch.bool
                                 or keep.shape != idx.shape):
            raise ValueError(f"keep must be a bool tensor shaped like idx {tuple(idx.shape)}; "
                             f"got {getattr(keep, 'dtype', type(keep).__name__)} "
                             f"{tuple(getattr(keep, 'shape', ()))}")
        # A prompt's pass into a cache goes through the plan too, when nothing is recorded and
        # the cache takes the C store (kvcache.py).
        plan = self.plan_sequences and idx.numel() and (cache is None or (
            pos == 0 and not torch.is_grad_enabled() and kvcache.in_place(cache)))
        weights = self.plain_weights() if plan else None
        if weights is not None:                       # the same kernels without the modules
            return sequence.features(self, idx, weights, keep, cache)
        if keep is not None:
            return self.features(idx, cache, pos)[keep]
        x = self.wte(idx) + self.wpe(torch.arange(pos, pos + T))      # (B, T, C)
        for i, block in enumerate(self.blocks):
            x = block(x, None if cache is None else cache[i], pos)
        return self.ln_f(x)                                          # (B, T, C)

    def forward(self, idx):
        return self.head(self.features(idx))                         # (B, T, V)

    def _check_positions(self, pos, T, cache, B=None):
        """Refuse positions pos .. pos+T-1 past block_size or past the cache's length, and B
        sequences fed to a cache of another batch size."""
        if pos + T > self.cfg.block_size:
            raise ValueError(f"sequence length {pos + T} exceeds block_size {self.cfg.block_size}")
        if cache is not None and pos + T > cache[0][0].shape[-1]:
            raise ValueError(f"sequence length {pos + T} exceeds the cache's "
                             f"{cache[0][0].shape[-1]} positions (new_cache's `length`)")
        if cache is not None and B is not None and B != cache[0][0].shape[0]:
            raise ValueError(f"{B} sequences fed to a cache of {cache[0][0].shape[0]} "
                             f"(new_cache's `batch_size`)")

    def new_cache(self, batch_size, length=None):
        """Preallocated keys and values for incremental decoding of up to `length` positions
        (default block_size): per layer (keys, values) in the parameters' precision, the values
        (B, nh, length, hs) and the keys transposed, (B, nh, hs, length), so that q kᵀ reads them
        by rows, as the matrix kernel wants, with no copy per token. Left uninitialized:
        attention reads only the positions already written."""
        c, hs = self.cfg, self.cfg.n_embd // self.cfg.n_head
        length = c.block_size if length is None else min(positive_int("length", length), c.block_size)
        dtype = self.head.weight.dtype
        return [(torch.empty(batch_size, c.n_head, hs, length, dtype=dtype),
                 torch.empty(batch_size, c.n_head, length, hs, dtype=dtype))
                for _ in range(c.n_layer)]

    def prefill(self, idx, cache):
        """Feed a whole prefix idx (B, T) in one pass, filling the cache; logits (B, V) of the
        token that follows it (only its last position's features are computed past the last
        attention)."""
        last = torch.zeros(idx.shape, dtype=torch.bool)
        last[:, -1] = True
        return self.head(self.features(idx, cache, keep=last))          # (B, V)

    def step(self, tokens, pos, cache, rows=None):
        """Logits (B, V) after feeding one token per sequence (B,) at position `pos`; with `rows`
        (a list of indices), only those sequences' logits, (len(rows), V). Every sequence's keys
        and values are stored either way. While the weights are fixed, without a gradient, the
        pass is `decode.OneTokenPass`: the same kernels without the modules around them."""
        if self.one_token is not None and self.one_token.applies(cache):
            self._check_positions(pos, 1, cache, tokens.shape[0])
            return self.one_token(tokens, pos, cache, rows)
        x = self.features(tokens[:, None], cache, pos)[:, 0]                 # (B, C)
        return self.head(x if rows is None else x[rows])

    @contextmanager
    def fixed_weights(self):
        """For passes that leave the weights alone (a rollout, the passes of one minibatch):
        each linear layer transposes its weight into rows once, not at every product, since the
        kernel reads its second operand by rows. A copy rounds nothing, so the bits are the same;
        the forward products read the copies and the gradients are taken from the weights, so a
        gradient still reaches them. The weights must not change inside."""
        layers = [m for m in self.modules() if isinstance(m, Linear) and m.rows is None]
        for layer in layers:
            layer.rows = layer.weight.detach().t().contiguous()
        plan = self.one_token is None and self.head.weight.dtype == torch.float32
        if plan:
            self.one_token = OneTokenPass(self)
        try:
            yield self
        finally:
            for layer in layers:
                layer.rows = None
            if plan:
                self.one_token = None

    def plain_weights(self):
        """The parameters in the order sequence.py takes them (the two embeddings, each block's
        12, the final layer norm's 2) if that pass computes what the modules do: a float32
        policy whose modules are the kinds this file defines, without hooks. Otherwise None (a
        student's adapter in place of a layer, or a hook, which the pass would skip)."""
        parts = [(self.wte, nn.Embedding), (self.wpe, nn.Embedding)]
        for b in self.blocks:
            parts += [(b, Block), (b.ln_1, nn.LayerNorm), (b.attn, CausalSelfAttention),
                      (b.attn.qkv, Linear), (b.attn.proj, Linear), (b.ln_2, nn.LayerNorm),
                      (b.mlp, MLP), (b.mlp.fc, Linear), (b.mlp.proj, Linear)]
        parts.append((self.ln_f, nn.LayerNorm))
        hooks = torch.nn.modules.module
        if hooks._global_forward_hooks or hooks._global_forward_pre_hooks \
                or hooks._global_backward_hooks or hooks._global_backward_pre_hooks:
            return None                               # hooks every module takes (torch's own)
        weights = []
        for module, kind in parts:
            if type(module) is not kind or module._forward_hooks or module._forward_pre_hooks \
                    or module._backward_hooks or module._backward_pre_hooks:
                return None
            if kind in (nn.LayerNorm, Linear):
                weights += [module.weight, module.bias]
            elif kind is nn.Embedding:
                weights.append(module.weight)
        if any(w is None or w.dtype != torch.float32 for w in weights):
            return None
        return weights

    def num_params(self):
        return sum(p.numel() for p in self.parameters())


def _state_bytes(policy):
    buf = io.BytesIO()
    torch.save({"config": asdict(policy.cfg), "state": policy.state_dict()}, buf)
    return buf.getvalue()


def _checksum_path(path):
    """The checksum file of checkpoint `path`: `x.pt` has `x.sha256`. Only `.pt` paths, so that
    no two checkpoints share a checksum file and no checkpoint can be a checksum file."""
    if path.suffix != ".pt":
        raise ValueError(f"a checkpoint path must end in .pt (its checksum is the .sha256 file "
                         f"beside it, {path.stem}.sha256), got {path}")
    return path.with_suffix(".sha256")


def _recorded_checksum(sums):
    """The SHA-256 recorded in the checksum file `sums`: 64 hex digits in either case, alone as
    save_policy writes it or followed by a file name as `sha256sum` writes it."""
    text = sums.read_bytes().decode("utf-8", errors="replace").strip()
    if not text:
        raise ValueError(f"checksum file {sums} is empty; it must hold the checkpoint's SHA-256 "
                         f"(64 hex digits), as save_policy writes it")
    match = re.fullmatch(r"([0-9a-fA-F]{64})(?:[ \t]+\*?\S.*)?", text)
    if match is None:
        raise ValueError(f"checksum file {sums} does not hold a SHA-256: expected 64 hex digits, "
                         f"optionally followed by the file name as sha256sum writes it, got "
                         f"{text[:80]!r}")
    return match.group(1).lower()


def is_shipped_checkpoint(path):
    """Whether `path`, however spelled (relative, with `..` or `~`, a symlink or a hard link), is
    the shipped RL base checkpoint or its checksum file."""
    path = path_arg("path", path)
    shipped = (RL_BASE_CHECKPOINT, RL_BASE_CHECKPOINT.with_suffix(".sha256"))
    return path.resolve() in shipped or any(
        path.exists() and other.exists() and os.path.samefile(path, other) for other in shipped)


def save_policy(policy, path, replace_shipped=False):
    """Write the checkpoint (`path` ends in .pt) and its `.sha256` file beside it, each written
    atomically, so a killed save never leaves a half-written checkpoint. Returns the SHA-256.
    The shipped checkpoint is refused under any spelling unless `replace_shipped` is True (what
    `python -m tinyagent.harness.rebuild --replace` passes), and so is any checkpoint already
    beside it (the study's agents): a new one may be added there, none overwritten."""
    path = path_arg("path", path)
    sums = _checksum_path(path)
    if not replace_shipped and (is_shipped_checkpoint(path) or is_shipped_checkpoint(sums)):
        raise ValueError(f"{path} is the shipped checkpoint {RL_BASE_CHECKPOINT}; save elsewhere, "
                         f"or rebuild it with `python -m tinyagent.harness.rebuild --replace`")
    beside = path.resolve().parent == RL_BASE_CHECKPOINT.parent.resolve()
    if beside and not is_shipped_checkpoint(path) and (path.exists() or sums.exists()):
        raise ValueError(f"{path} is a committed checkpoint beside the shipped one; committed "
                         f"checkpoints are not overwritten: save elsewhere, or under a new name")
    data = _state_bytes(policy)
    digest = hashlib.sha256(data).hexdigest()
    write_atomically(path, data)      # killed before the next line: the checksums differ, and
    write_atomically(sums, (digest + "\n").encode())    # load_policy refuses the pair
    return digest


def load_policy(path):
    """Load a checkpoint, refusing one whose bytes do not match its recorded checksum or
    whose configuration does not fit this code."""
    path = path_arg("path", path)
    sums = _checksum_path(path)
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}")
    data = path.read_bytes()
    if not sums.exists():
        raise ValueError(f"checkpoint {path} has no checksum file {sums.name}")
    expected = _recorded_checksum(sums)
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        advice = ("rebuild it with `python -m tinyagent.harness.rebuild --replace`"
                  if is_shipped_checkpoint(path) else "save it again, or restore both files from your copy")
        raise ValueError(f"checkpoint {path} is corrupted or was changed after its checksum was "
                         f"written: sha256 {actual[:12]}... does not match the "
                         f"{expected[:12]}... recorded in {sums.name}; {advice}")
    try:
        blob = torch.load(io.BytesIO(data), weights_only=True)
    except Exception:       # torch's message suggests weights_only=False, unsafe on such bytes
        raise ValueError(f"checkpoint {path} is not a checkpoint save_policy wrote: its bytes do "
                         f"not load as plain tensors (its checksum only says they are "
                         f"unchanged)") from None
    try:
        cfg = PolicyConfig(**blob["config"])
        policy = Policy(cfg)
        policy.load_state_dict(blob["state"])
    except (TypeError, RuntimeError, KeyError, ValueError) as err:
        raise ValueError(f"checkpoint {path} does not match this PolicyConfig: {err}") from err
    if cfg.vocab_size != VOCAB_SIZE:
        raise ValueError(f"checkpoint {path} has vocab_size {cfg.vocab_size}, the gym has {VOCAB_SIZE}")
    broken = [name for name, t in policy.state_dict().items()
              if t.is_floating_point() and not torch.isfinite(t).all()]
    if broken:
        raise ValueError(f"checkpoint {path} has non-finite weights (NaN or inf) in {len(broken)} "
                         f"tensors, first {broken[:3]}: it was saved from a diverged run; its "
                         f"checksum only says the file is unchanged")
    return policy


def load_rl_base():
    """The shipped RL base agent (the SFT checkpoint RL starts from), checksum-verified.
    `python -m tinyagent.harness.rebuild --replace` rebuilds it in place."""
    return load_policy(RL_BASE_CHECKPOINT)
