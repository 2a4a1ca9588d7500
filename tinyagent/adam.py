"""Adam, with the same arithmetic on every x86-64 CPU.

torch.optim.Adam computes the square root of the second moment with torch.sqrt, which for float32
and float64 tensors calls MKL's vector math. Under the pinned MKL_CBWR=COMPATIBLE that square root
is not the correctly rounded one (on an Intel Xeon, 16% of float32 elements differ from it in the
last bit), and its bits differ between Intel and AMD CPUs: the first optimizer step was where the
two vendors' runs parted. IEEE 754 defines one correct square root, which the CPU's own instruction
computes; numpy's `sqrt` uses it. Everything else here is ATen's elementwise arithmetic, in the
order of torch.optim.Adam's single-tensor step (the one it takes on a CPU), so the two differ only
where torch's square root is not the correctly rounded one.
"""
import numpy as np
import torch


def exact_sqrt(x):
    """The correctly rounded square root of every element of a float32 or float64 CPU tensor."""
    return torch.from_numpy(np.sqrt(x.detach().contiguous().numpy()))


class Adam(torch.optim.Optimizer):
    """Adam (Kingma and Ba), without weight decay or AMSGrad: the optimizer of every run."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8):
        if not (lr > 0 and eps > 0 and all(0 <= b < 1 for b in betas) and len(betas) == 2):
            raise ValueError(f"Adam needs lr > 0, eps > 0 and two betas in [0, 1); got lr={lr}, "
                             f"betas={betas}, eps={eps}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None if closure is None else torch.enable_grad()(closure)()
        for group in self.param_groups:
            lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state.update(step=0, exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
                state["step"] += 1
                m, v, g, t = state["exp_avg"], state["exp_avg_sq"], p.grad, state["step"]
                m.lerp_(g, 1 - beta1)
                v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                denom = (exact_sqrt(v) / (1 - beta2 ** t) ** 0.5).add_(eps)
                p.addcdiv_(m, denom, value=-(lr / (1 - beta1 ** t)))
        return loss
