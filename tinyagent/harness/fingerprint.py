"""The arithmetic checked by what it computes, not by which flags are set.

A list of pins (arithmetic.py) covers the libraries someone thought of. This module runs a short
computation through exactly the kernels a run uses, at a run's shapes: a batch of episodes
sampled by the sampler (prefill, one-token decoding with the key/value cache, float64 inverse-CDF
draws), the training forward of `token_logprobs` on the policy's tokens, its backward, and one Adam
step. The SHA-256 of every byte that computation produces is the fingerprint. Any library that
rounds one product differently, listed or not, changes it.

The computation is hashed by parts (sampling, forward, backward, optimizer step), recorded in
`EXPECTED_PARTS` when the stored outputs were computed (`python -m tinyagent.harness.fingerprint --parts`
prints this process's), so that a mismatch names the first part whose bits differ and the kernels
in it; `EXPECTED`, one hash over the parts, is what the run cache keys by. The harness's entry points
(every run worker, `make pretrain`, `make agents`) and the trained notebooks' setup cells call
`check_arithmetic()` before they compute (`make bench` prints whether it matches); the book's code does not import the harness, so
a reader's own script calls it too. A mismatch warns once per process,
naming the settings that differ from the pins, and the run cache keys every run by the fingerprint
its worker computed under, so a run computed under another arithmetic is never served as ours.
"""
import hashlib
import os
import platform
import warnings

import torch

from .. import engine
from ..engine.arithmetic import PINS, is_x86, torch_threads
from ..gym import TRAIN_TASKS
from ..policy import Policy
from ..sampler import rollout, token_logprobs

# What each part of the computation reaches, so that a mismatch names where the bits part.
PARTS = {
    "sampling": "prefill and one-token decoding (matmul.c, layer norm, softmax, erf), float64 "
                "log-softmax, exp, cumsum, searchsorted and uniform draws",
    "forward": "the training forward of token_logprobs (matmul.c, layer norm, softmax, erf, "
               "log-softmax)",
    "backward": "every parameter's gradient (matmul.c's products of gradients, the backward of "
                "layer norm, softmax, log-softmax, erf and exp, the embeddings' sums)",
    "optimizer": "one Adam step (engine/adam.py: ATen's lerp, addcmul and division, and the "
                 "correctly rounded square root)",
}
# Recorded under the pins (`python -m tinyagent.harness.fingerprint` prints this process's parts).
EXPECTED_PARTS = {
    "sampling": "e6783fdae00bc2bb49360ff1c3adadee29df28fe0e5b82ef8647524a374973ae",
    "forward": "c47cfd8c5b02b44b171f69cd71be8fe616f87ed4c44e379adc3532b5ce42875b",
    "backward": "3725ba0f7e5636fb23f361e8b4180cdad9744f3d4076f5861f3bd2fbc437a845",
    "optimizer": "fc4be97762c0503170e73a1eb9cfe6c6727adbd3680393291a096b8261baeb5f",
}
# Variables that change what a library computes without being one of our pins: named in the
# mismatch message when they are set. (Thread counts are not among them: the fingerprint and
# every run set their own.)
OVERRIDES = ("MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA",
             "DNNL_MAX_CPU_ISA", "ONEDNN_DEFAULT_FPMATH_MODE")

_parts = {}          # the engine in force -> its parts, computed once per process


def _combine(parts):
    return hashlib.sha256("".join(parts[name] for name in PARTS).encode()).hexdigest()


EXPECTED = _combine(EXPECTED_PARTS)


def parts():
    """SHA-256 (hex) of each part of one sampled batch, its log-probabilities, their gradient and
    one Adam step, computed on one torch thread from a policy drawn from seed 0. Once per process
    (well under a second) for each engine it computes with: `engine.use` may change it."""
    which = engine.in_force()
    if which not in _parts:
        engine.start()
        with torch_threads(1), torch.enable_grad():      # callers may sit under no_grad
            _parts[which] = _compute()
    return _parts[which]


def fingerprint():
    """The arithmetic fingerprint: one SHA-256 over the parts' hashes."""
    return _combine(parts())


def _compute():
    digests = {name: hashlib.sha256() for name in PARTS}

    def add(part, *tensors):
        for tensor in tensors:
            digests[part].update(tensor.detach().contiguous().numpy().tobytes())

    policy = Policy(seed=0)
    tasks = [task for task in TRAIN_TASKS[:2] for _ in range(4)]        # 2 groups of 4
    batch = rollout(policy, tasks, torch.Generator().manual_seed(0))
    add("sampling", batch.tokens, batch.logp)
    logp, log_dist = token_logprobs(policy, batch.tokens, mask=batch.policy_mask)
    add("forward", logp, log_dist)
    loss = -(logp.sum() / batch.policy_mask.sum()) + log_dist.exp().mul(log_dist).sum(-1).mean()
    optimizer = engine.Adam(policy.parameters(), lr=1e-3)
    loss.backward()
    add("backward", *(p.grad for p in policy.parameters()))
    optimizer.step()
    add("optimizer", *policy.parameters())
    return {name: digest.hexdigest() for name, digest in digests.items()}


def matches():
    """Whether this process computes the pinned arithmetic's bits."""
    return fingerprint() == EXPECTED


def first_difference():
    """(part, what it computes) of the first part whose bits differ from the stored ones, or None.
    A part computed from a differing one differs too, so only the first says where."""
    ours = parts()
    for name, reaches in PARTS.items():
        if ours[name] != EXPECTED_PARTS[name]:
            return name, reaches
    return None


def mismatch_message():
    """What differs, where, and what to set, in a few lines (where nothing differs, one line
    saying so: a caller may ask before it has checked)."""
    pins = " ".join(f"{name}={value}" for name, value in PINS.items())
    set_here = {name: os.environ[name] for name in OVERRIDES if name in os.environ
                and os.environ[name] != PINS.get(name)}
    named = (", ".join(f"{name}={value}" for name, value in set_here.items())
             or "none of the known variables differs from the pins (another CPU architecture, "
                "another torch build, or a library nobody listed)")
    difference = first_difference()
    if difference is None:
        return (f"this process's arithmetic fingerprint {fingerprint()[:12]} is the pinned one: "
                f"its runs compute the stored outputs' bits")
    part, reaches = difference
    differs = (f"this process's arithmetic fingerprint {fingerprint()[:12]} is not the pinned one "
               f"{EXPECTED[:12]}: its runs will differ in the digits from the stored outputs "
               f"(compare by the claims tables). The bits first part in the {part} ({reaches}). ")
    if not is_x86():
        return differs + (f"Why: this is an {platform.machine()} machine; the stored outputs are "
                          f"x86-64's, and no setting changes that (`make doctor` says more).")
    return (differs + f"Settings that differ from the pins: {named}. "
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


def use_pinned_arithmetic():
    """A notebook's set-up line: the engine's start (its pins and one torch thread, the pinned
    arithmetic being one thread's), then `check_arithmetic()`."""
    engine.start()
    torch.set_num_threads(1)
    return check_arithmetic()


def main(argv=None):
    """Print this process's fingerprint, or with --parts each part's hash. Any other argument is
    refused (exit 2), before anything is computed."""
    import argparse
    import json
    parser = argparse.ArgumentParser(prog="python -m tinyagent.harness.fingerprint",
                                     description="print this process's arithmetic fingerprint",
                                     allow_abbrev=False)       # --part is not --parts
    parser.add_argument("--parts", action="store_true", help="print each part's hash instead")
    args = parser.parse_args(argv)
    print(json.dumps(parts(), indent=1) if args.parts else fingerprint())


if __name__ == "__main__":
    main()
