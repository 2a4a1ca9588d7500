"""Chapter 10's saved functions: KL estimators as losses, the entropy bonus, and the
regularized GRPO update and loop built on Chapter 9's pieces (which do not change)."""
import torch

from .grpo import KL_KINDS, kl_penalty

KL_ESTIMATE_KINDS = KL_KINDS + tuple(k + "+" for k in KL_KINDS)


def kl_estimate(logp, ref_logp, kind):
    """Per-token KL estimate whose value is `kind`'s estimator.

    'k1', 'k2', 'k3' are Chapter 9's `kl_penalty`. A trailing '+' (for example 'k3+') keeps the
    estimator's value but takes the gradient of k2, the reverse-KL gradient (straight-through:
    g - g.detach() + v.detach()), as verl's `kl_loss_type` "+" variants do.
    Defined in Section 10.3.
    """
    if kind not in KL_ESTIMATE_KINDS:
        raise ValueError(f"unknown KL kind {kind!r}; allowed: {', '.join(KL_ESTIMATE_KINDS)}")
    if not kind.endswith("+"):
        return kl_penalty(logp, ref_logp, kind)
    value = kl_penalty(logp, ref_logp, kind[:-1])
    grad_carrier = kl_penalty(logp, ref_logp, "k2")
    return grad_carrier - grad_carrier.detach() + value.detach()
