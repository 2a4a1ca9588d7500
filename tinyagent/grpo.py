"""Chapter 9: GRPO on TinyAgent (sampling a step, group advantages, the clipped loss, the
per-token KL penalty, the update and the training loop)."""
import torch

KL_KINDS = ("k1", "k2", "k3")


def _check_logps(logp, ref_logp):
    if logp.shape != ref_logp.shape:
        raise ValueError(f"logp and ref_logp must have the same shape, got {tuple(logp.shape)} "
                         f"and {tuple(ref_logp.shape)}")
    if torch.isnan(logp).any() or torch.isnan(ref_logp).any():
        raise ValueError("logp and ref_logp must not contain NaN log-probabilities")


def kl_penalty(logp, ref_logp, kind):
    """Schulman's per-token estimators of KL(pi || pi_ref) from the sampled tokens' log-probs.

    With l = ref_logp - logp: k1 = -l, k2 = l^2 / 2, k3 = e^l - 1 - l, elementwise.
    """
    if kind not in KL_KINDS:
        raise ValueError(f"unknown KL kind {kind!r}; allowed: {', '.join(KL_KINDS)}")
    _check_logps(logp, ref_logp)
    log_ratio = ref_logp - logp
    if kind == "k1":
        return -log_ratio
    if kind == "k2":
        return 0.5 * log_ratio ** 2
    return torch.expm1(log_ratio) - log_ratio
