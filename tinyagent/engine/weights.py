"""A policy's parameters as the kernels read them, and whether the kernels may compute it at all.

The kernels compute `Policy`'s function from its parameters, so they apply only to the model that
tinyagent/policy.py defines: float32, its own module types in their places, no hook (a hook, or a
layer a reader replaced, changes the function, and only the modules run it). Each linear layer's
weight is read by the product kernel as its transpose; `Weights` copies each one into rows once
(a copy rounds nothing, so the bits are those of reading the transposed view) and keeps them
until a parameter changes: an optimizer step, `load_state_dict` or an in-place edit raises the
parameter's version counter, a new tensor in `.data` changes its address, and either makes
`current` false. Where only the versions moved, `refresh` copies the rows again and keeps the
rest (an optimizer's step, twice a GRPO step and at every SFT step); otherwise the seam makes a
new `Weights`, and asks `why_not` again.
"""
from operator import attrgetter, is_, methodcaller

import torch
import torch.nn as nn

from ..policy import MLP, Block, CausalSelfAttention, Policy


_VERSION, _ADDRESS = attrgetter("_version"), methodcaller("data_ptr")


def _layout(policy):
    """(parent's child modules, name, module, kind) for every module the kernels compute: the
    structure they assume, checked by identity at each pass."""
    def child(parent, name, kind):
        return (parent._modules, name, parent._modules.get(name), kind)
    parts = [child(policy, "wte", nn.Embedding), child(policy, "wpe", nn.Embedding),
             child(policy, "blocks", nn.ModuleList)]
    for i, block in enumerate(policy.blocks):
        parts += [child(policy.blocks, str(i), Block), child(block, "ln_1", nn.LayerNorm),
                  child(block, "attn", CausalSelfAttention), child(block, "ln_2", nn.LayerNorm),
                  child(block, "mlp", MLP)]
        if type(block) is Block and type(block.attn) is CausalSelfAttention \
                and type(block.mlp) is MLP:
            parts += [child(block.attn, "qkv", nn.Linear), child(block.attn, "proj", nn.Linear),
                      child(block.mlp, "fc", nn.Linear), child(block.mlp, "proj", nn.Linear)]
    return parts + [child(policy, "ln_f", nn.LayerNorm), child(policy, "head", nn.Linear)]


def _hooked(module):
    return bool(module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
                or module._backward_pre_hooks)


def why_not(policy):
    """Why the kernels cannot compute `policy` (None if they can): a hook or a replaced layer,
    which only the modules honour, or another precision than float32, which they do not handle.
    `type(policy) is Policy` is the caller's to check."""
    if _global_hooks():
        return "a global module hook is registered"
    if _hooked(policy):
        return "the policy has a hook"
    for modules, name, module, kind in _layout(policy):
        if type(module) is not kind:
            return f"its module {name!r} is a {type(module).__name__}, not the {kind.__name__} " \
                   f"of tinyagent/policy.py"
        if _hooked(module):
            return f"its module {name!r} has a hook"
    if len(policy.blocks) != policy.cfg.n_layer:
        return f"it has {len(policy.blocks)} blocks where its config says {policy.cfg.n_layer}"
    if any(p.dtype != torch.float32 for p in policy.parameters()):
        return "its parameters are not float32"
    return None


def _global_hooks():
    hooks = torch.nn.modules.module
    return bool(hooks._global_forward_hooks or hooks._global_forward_pre_hooks
                or hooks._global_backward_hooks or hooks._global_backward_pre_hooks)


class Weights:
    """The parameters of a policy the kernels can compute, in the order the whole-sequence pass
    takes them (the two embeddings, each block's 12, the final layer norm's 2), and each linear
    layer's weight transposed into rows."""

    def __init__(self, policy):
        self.layout = _layout(policy)
        modules = [module for _, _, module, _ in self.layout]
        self.slots = [(m._parameters, name, p) for m in modules
                      for name, p in m._parameters.items()]
        self.stamp = self._stamp()
        # What `current` compares, as flat lists its maps walk in C: each module and parameter
        # where it was found, and every hook dictionary a hook would be added to.
        self.found = [list(column) for column in zip(*[(parent, name, module)
                                                       for parent, name, module, _ in self.layout])]
        self.found_params = [list(column) for column in zip(*self.slots)]
        self.hooks = [d for m in (policy, *modules) for d in (
            m._forward_hooks, m._forward_pre_hooks, m._backward_hooks, m._backward_pre_hooks)]
        self.ordered = [policy.wte.weight, policy.wpe.weight]
        for b in policy.blocks:
            for module in (b.ln_1, b.attn.qkv, b.attn.proj, b.ln_2, b.mlp.fc, b.mlp.proj):
                self.ordered += [module.weight, module.bias]
        self.ordered += [policy.ln_f.weight, policy.ln_f.bias]
        self.linears = [m for m in modules if type(m) is nn.Linear]
        self.rows = self._copy_rows()

    def _copy_rows(self):
        """Each linear layer's weight transposed into rows, as plain tensors whatever mode the
        caller is in."""
        with torch.inference_mode(False):
            return {m: m.weight.detach().t().contiguous() for m in self.linears}

    def _stamp(self):
        """Each parameter's version counter and address: an in-place change (an optimizer's step,
        `load_state_dict`, an edit under `torch.no_grad()`) raises the first, a new tensor in
        `.data` changes the second. (An in-place edit through `.data` changes neither, as it
        escapes autograd's checks: edit parameters under `torch.no_grad()` instead.)"""
        tensors = [p for _, _, p in self.slots]
        return list(map(_VERSION, tensors)) + list(map(_ADDRESS, tensors))

    def _same_structure(self):
        """Whether the policy's structure is still the one the kernels compute: no hook added, no
        module replaced, no parameter swapped."""
        parents, names, modules = self.found
        params, param_names, tensors = self.found_params
        return not (_global_hooks() or any(self.hooks)) \
            and all(map(is_, map(dict.get, parents, names), modules)) \
            and all(map(is_, map(dict.get, params, param_names), tensors))

    def current(self, policy):
        """Whether these rows are still the policy's weights, and its structure is still the one
        the kernels compute."""
        return self._same_structure() and self._stamp() == self.stamp

    def refresh(self):
        """After the parameters' values changed in place and nothing else did (an optimizer's
        step: versions raised, every module, hook and tensor where it was), the rows copied again,
        and True. Otherwise False, nothing changed: a new tensor in `.data` (which may hold
        another precision), a hook or a replaced module takes a new `Weights`."""
        stamp, n = self._stamp(), len(self.slots)
        if stamp[n:] != self.stamp[n:] or not self._same_structure():
            return False
        self.stamp, self.rows = stamp, self._copy_rows()
        return True
