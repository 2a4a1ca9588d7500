"""The arithmetic checked by what it computes, not by which flags are set.

A list of pins (arithmetic.py) covers the libraries someone thought of. This module runs a short
computation through exactly the kernels a run uses, at a run's shapes: a batch of episodes
sampled by the sampler (prefill, one-token decoding with the key/value cache, float64 inverse-CDF
draws), the training forward of `token_logprobs` on the policy's tokens, its backward, and one Adam
step. The SHA-256 of every byte that computation produces is the fingerprint. Any library that
rounds one product differently, listed or not, changes it.

`EXPECTED` is the fingerprint of the pinned arithmetic, recorded when the stored outputs were
computed (`python -m tinyagent.fingerprint` prints this process's). Training, evaluation, SFT and
every run worker call `check_arithmetic()` before they compute: a mismatch warns once per process,
naming the settings that differ from the pins, and the run cache keys every run by the fingerprint
its worker computed under, so a run computed under another arithmetic is never served as ours.
"""
import hashlib
import os
import warnings

import torch

from .arithmetic import PINS, torch_threads
from .gym import TRAIN_TASKS
from .policy import Policy
from .sampler import rollout, token_logprobs

EXPECTED = "3b0c3b77321323d1c8ef7407df9db1a4f8b1a0970ad5925f2ad26535024c0642"   # recorded under the pins; see the module docstring
# Variables that change what a library computes without being one of our pins: named in the
# mismatch message when they are set.
OVERRIDES = ("MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA",
             "DNNL_MAX_CPU_ISA", "ONEDNN_DEFAULT_FPMATH_MODE", "OMP_NUM_THREADS", "MKL_NUM_THREADS")

_fingerprint = None


def fingerprint():
    """SHA-256 (hex) of the bytes of one sampled batch, its log-probabilities, their gradient and
    one Adam step, computed on one torch thread from a policy drawn from seed 0. Once per process
    (well under a second)."""
    global _fingerprint
    if _fingerprint is None:
        with torch_threads(1), torch.enable_grad():      # callers may sit under no_grad
            _fingerprint = _compute()
    return _fingerprint


def _compute():
    h = hashlib.sha256()
    policy = Policy(seed=0)
    tasks = [task for task in TRAIN_TASKS[:2] for _ in range(4)]        # 2 groups of 4
    batch = rollout(policy, tasks, torch.Generator().manual_seed(0))
    logp, log_dist = token_logprobs(policy, batch.tokens, mask=batch.policy_mask)
    loss = -(logp.sum() / batch.policy_mask.sum()) + log_dist.exp().mul(log_dist).sum(-1).mean()
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-3)
    loss.backward()
    for tensor in (batch.tokens, batch.logp, logp.detach(), log_dist.detach()):
        h.update(tensor.contiguous().numpy().tobytes())
    for p in policy.parameters():
        h.update(p.grad.numpy().tobytes())
    optimizer.step()
    for p in policy.parameters():
        h.update(p.detach().numpy().tobytes())
    return h.hexdigest()


def matches():
    """Whether this process computes the pinned arithmetic's bits."""
    return fingerprint() == EXPECTED


def mismatch_message():
    """What differs and what to set, in a few lines."""
    pins = " ".join(f"{name}={value}" for name, value in PINS.items())
    set_here = {name: os.environ[name] for name in OVERRIDES if name in os.environ
                and os.environ[name] != PINS.get(name)}
    named = (", ".join(f"{name}={value}" for name, value in set_here.items())
             or "none of the known variables differs from the pins (another CPU architecture, "
                "another torch build, or a library nobody listed)")
    return (f"this process's arithmetic fingerprint {fingerprint()[:12]} is not the pinned one "
            f"{EXPECTED[:12]}: its runs will differ in the digits from the stored outputs "
            f"(compare by the claims tables). Settings that differ from the pins: {named}. "
            f"To match, start the process with {pins} and nothing else overriding them "
            f"(`make doctor` says what is in force).")


_warned = False


def check_arithmetic():
    """Warn once per process when its arithmetic is not the pinned one (see the module
    docstring); returns whether it is. Runs still compute elsewhere, on another platform, say."""
    global _warned
    if matches():
        return True
    if not _warned:
        _warned = True
        warnings.warn(mismatch_message(), RuntimeWarning, stacklevel=3)
    return False


if __name__ == "__main__":
    print(fingerprint())
