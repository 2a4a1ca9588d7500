"""Adam, with the same arithmetic on every x86-64 CPU.

torch.optim.Adam computes the square root of the second moment with torch.sqrt, which for float32
and float64 tensors calls MKL's vector math. Under the pinned MKL_CBWR=COMPATIBLE that square root
is not the correctly rounded one (on an Intel Xeon, 16% of float32 elements differ from it in the
last bit), and its bits differ between Intel and AMD CPUs: the first optimizer step was where the
two vendors' runs parted. IEEE 754 defines one correct square root, which the CPU's own instruction
computes; numpy's `sqrt` uses it. Everything else here is ATen's elementwise arithmetic, in the
order of torch.optim.Adam's single-tensor step (the one it takes on a CPU), so the two differ only
where torch's square root is not the correctly rounded one. A float32 parameter takes that step in
one pass of C (adam.c), with the bits of the torch operators (`torch_step`, tests/test_adam.py).
"""
import numpy as np
import torch
from torch.autograd.graph import increment_version

from . import guard
from .kernels import load

_lib = load("Adam step")


def exact_sqrt(x):
    """The correctly rounded square root of every element of a float32 or float64 CPU tensor."""
    return torch.from_numpy(np.sqrt(x.detach().contiguous().numpy()))


def torch_step(p, g, m, v, beta1, beta2, bias2, eps, step):
    """Adam's step of one parameter as torch operators, in place: moments m and v from gradient
    g, then p, with the bias corrections sqrt(1 - beta2^t) (`bias2`) and -lr / (1 - beta1^t)
    (`step`). What adam.c computes for float32, bit for bit."""
    m.lerp_(g, 1 - beta1)
    v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
    p.addcdiv_(m, (exact_sqrt(v) / bias2).add_(eps), value=step)


class Adam:
    """Adam (Kingma and Ba), without weight decay or AMSGrad: the optimizer of every run. A plain
    class, not a torch.optim.Optimizer: the step is the same, but constructing an Optimizer
    imports torch._dynamo, about a second at the start of every process that trains. Like
    torch's, it keeps its settings in `param_groups` (one group), whose "lr" may be changed
    between steps (SFT's cosine schedule), within the same bounds: finite and positive."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8):
        lr, betas, eps = guard.adam_settings(lr, betas, eps)
        if isinstance(params, torch.Tensor) or not hasattr(params, "__iter__"):
            raise TypeError(f"Adam: params must be an iterable of tensors (policy.parameters()), "
                            f"got a {type(params).__name__}")
        self.params = list(params)
        if not self.params:
            raise ValueError("Adam got no parameters to optimize")
        if not all(isinstance(p, torch.Tensor) for p in self.params):
            raise TypeError(f"Adam: params must be an iterable of tensors (policy.parameters()), "
                            f"got {', '.join(sorted({type(p).__name__ for p in self.params}))}")
        self.param_groups = [{"params": self.params, "lr": lr, "betas": betas, "eps": eps}]
        self.state = {}                  # parameter index -> its step count and two moments

    def zero_grad(self):
        """Drop every gradient (None, as torch's optimizers do by default)."""
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self):
        """One update of every parameter that has a gradient. Each parameter, its gradient and
        its state are dense CPU tensors of one shape: a parameter resized since its state was
        made (`p.data = bigger`) is refused, as torch's Adam refuses it."""
        group = self.param_groups[0]
        lr, (beta1, beta2), eps = guard.adam_settings(group["lr"], group["betas"], group["eps"])
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            guard.tensor("Adam", f"parameter {i}", p, dtype=None)
            guard.tensor("Adam", f"parameter {i}'s gradient", p.grad, dtype=None)
            state = self.state.get(i)
            if p.grad.shape != p.shape or (state is not None
                                           and not p.shape == state["exp_avg"].shape
                                           == state["exp_avg_sq"].shape):
                raise ValueError(
                    f"Adam: parameter {i} has size {tuple(p.shape)}, its gradient "
                    f"{tuple(p.grad.shape)} and its state "
                    f"{tuple(state['exp_avg'].shape) if state else 'none yet'}: they must be one "
                    f"size (a parameter resized after its first step needs a new Adam)")
            if state is None:
                state = self.state[i] = {"step": 0, "exp_avg": torch.zeros_like(p),
                                         "exp_avg_sq": torch.zeros_like(p)}
            state["step"] += 1
            m, v, g, t = state["exp_avg"], state["exp_avg_sq"], p.grad, state["step"]
            bias2, step = (1 - beta2 ** t) ** 0.5, -(lr / (1 - beta1 ** t))
            if all(x.dtype == torch.float32 and x.is_contiguous() for x in (p, g, m, v)):
                _lib.adam_step(p.numel(), p.data_ptr(), g.data_ptr(), m.data_ptr(), v.data_ptr(),
                               1 - beta1, beta2, 1 - beta2, bias2, eps, step)
                increment_version(p)         # as an in-place operator would: autograd sees it
            else:
                torch_step(p, g, m, v, beta1, beta2, bias2, eps, step)

    def state_dict(self):
        """The settings and every parameter's state (the tensors themselves, not copies)."""
        group = self.param_groups[0]
        return {"lr": group["lr"], "betas": group["betas"], "eps": group["eps"],
                "state": self.state}

    def load_state_dict(self, saved):
        """Continue from `state_dict()`'s output, for the same parameters: copies, so that the
        saved state is left as it was. Each parameter's moments must be dense CPU tensors of its
        own size and dtype, as `step` made them (the step's kernel writes them in place)."""
        if not isinstance(saved, dict) or not {"lr", "betas", "eps", "state"} <= saved.keys() \
                or not isinstance(saved["state"], dict):
            raise TypeError(f"Adam.load_state_dict takes what state_dict() returns, a dict of lr, "
                            f"betas, eps and state (parameter index -> step, exp_avg, "
                            f"exp_avg_sq), got {type(saved).__name__}")
        lr, betas, eps = guard.adam_settings(saved["lr"], saved["betas"], saved["eps"])
        for i, s in saved["state"].items():
            p = self.params[i] if isinstance(i, int) and 0 <= i < len(self.params) else None
            if p is None or not isinstance(s, dict) \
                    or not {"step", "exp_avg", "exp_avg_sq"} <= s.keys():
                raise ValueError(f"the saved Adam state is for other parameters: entry {i!r} is "
                                 f"not the step and moments of one of these {len(self.params)}")
            for name in ("exp_avg", "exp_avg_sq"):
                guard.tensor("Adam.load_state_dict", f"parameter {i}'s {name}", s[name], p.dtype)
                if s[name].shape != p.shape:
                    raise ValueError(f"the saved Adam state is for other parameters: parameter "
                                     f"{i}'s {name} has size {tuple(s[name].shape)}, the "
                                     f"parameter {tuple(p.shape)}")
        self.param_groups[0].update(lr=lr, betas=betas, eps=eps)
        self.state = {i: {"step": s["step"], "exp_avg": s["exp_avg"].clone(),
                          "exp_avg_sq": s["exp_avg_sq"].clone()} for i, s in saved["state"].items()}
