"""The engine: how the book's code computes the policy, through this one module.

Each function below computes what its plain counterpart in tinyagent/policy.py computes (the
model is the definition) and chooses, at each call, who computes it:

- the kernels (the default, `TINYAGENT_ENGINE=kernels`): the engine's C kernels and passes, which
  give the same bits on every x86-64 CPU, those of the notebooks' stored outputs, several times
  faster than the modules;
- torch (`TINYAGENT_ENGINE=torch`, or `tinyagent.engine.use("torch")`): the plain modules and
  `torch.optim.Adam`, with the digits of this machine's libraries.

The kernels also step aside, for one call, where they would not compute the model as the modules
do: a policy with a hook or a replaced layer (said once, in one line), another precision than
float32, a pass that records a gradient into a cache. Where the C extension was not built, torch
computes, said once. README.md beside this file maps the engine's pieces.

    logits(policy, idx)                  policy(idx)
    features(policy, idx, keep=None)     policy.features(idx)[keep]
    head(policy, x)                      policy.head(x)
    Decoder(policy)                      policy.new_cache, prefill, step: a rollout's decoding
    Adam(params, lr)                     torch.optim.Adam(params, lr)
    start()                              the pinned arithmetic, once per process
    torch_threads(n)                     the body on n torch threads (a run: 1; SFT: 2)
"""
import os
import sys
import weakref

import torch

from . import guard, kernels
from .arithmetic import PINS, pin_environment, torch_threads  # noqa: F401  (part of the seam)
from .memory import keep_freed_memory

ENGINES = ("kernels", "torch")
VARIABLE = "TINYAGENT_ENGINE"
_chosen = None                           # set by `use`; None: the environment's, else "kernels"
_decided = None                          # the engine in force, once decided
_forms = weakref.WeakKeyDictionary()     # policy -> its KernelPolicy, while current
_told = set()                            # the notices already printed
_started = False


def _notice(text):
    """Print a one-line notice on stderr, once per process."""
    if text not in _told:
        _told.add(text)
        print(f"tinyagent: {text}", file=sys.stderr)


def use(name):
    """Compute with `name`, "kernels" or "torch", from now on in this process (None: as
    TINYAGENT_ENGINE says, its value read again). Returns the engine in force."""
    global _chosen, _decided
    if name is not None and name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; allowed: {', '.join(ENGINES)}")
    _chosen, _decided = name, None
    return in_force()


def requested():
    """The engine asked for: `use`'s, else TINYAGENT_ENGINE's, else "kernels"."""
    if _chosen is not None:
        return _chosen
    value = os.environ.get(VARIABLE, "").strip().lower() or "kernels"
    if value not in ENGINES:
        raise ValueError(f"{VARIABLE}={os.environ[VARIABLE]!r} is not an engine; allowed: "
                         f"{', '.join(ENGINES)} (unset: kernels)")
    return value


def in_force():
    """The engine that computes: the one asked for, except "torch" where the C extension was not
    built. Decided at the first call (and again after `use`)."""
    global _decided
    if _decided is None:
        _decided = requested()
        if _decided == "kernels" and not kernels.available():
            _decided = "torch"
    return _decided


def start():
    """Where a run starts, once per process: on x86-64 the pins of the stored arithmetic
    (arithmetic.py) in the environment, before torch computes with them, freed memory kept for the
    next tensor (memory.py), and the kernels' passes imported where they compute. Called by the
    passes below at their first call, by `load_policy`, `build_rl_base` and the harness's entry
    points; a notebook's set-up line names it. If torch chose its kernels before the pins were in
    place, says so in one line."""
    global _started
    if _started:
        return
    _started = True
    pin_environment()
    keep_freed_memory()
    wanted = os.environ.get("ATEN_CPU_CAPABILITY")
    chosen = torch.backends.cpu.get_cpu_capability()
    if wanted == PINS["ATEN_CPU_CAPABILITY"] and chosen.lower() != wanted:
        _notice(f"torch chose its {chosen} kernels before the engine's pins were set, so the "
                f"digits may differ from the stored outputs: call tinyagent.engine.start() (or "
                f"load a checkpoint) before computing with torch")
    if in_force() == "kernels":
        from . import adam, kernel_policy  # noqa: F401  (their import is no part of a first pass)


def _kernel_form(policy):
    """The policy as the kernels compute it (kernel_policy.KernelPolicy), or None where its
    modules compute it: on the torch engine, and for a policy the kernels do not handle."""
    from ..policy import Policy
    if not isinstance(policy, Policy):
        raise TypeError(f"the engine computes a tinyagent.policy.Policy, got a "
                        f"{type(policy).__name__}")
    start()
    if in_force() != "kernels":
        if requested() == "kernels":
            _notice("the engine's C kernels are not built (tinyagent/engine/_kernels*.so): "
                    "computing with plain PyTorch, whose digits differ from the stored outputs; "
                    "`pip install -e .` with a C compiler builds them")
        return None
    from .kernel_policy import KernelPolicy
    from .weights import why_not
    form = _forms.get(policy)
    if form is not None and (form.current(policy) or form.refresh()):
        return form
    _forms.pop(policy, None)
    reason = why_not(policy) if type(policy) is Policy else f"it is a {type(policy).__name__}"
    if reason is not None:
        if "float32" not in reason:
            _notice(f"the plain modules compute this policy, with other digits than the stored "
                    f"outputs: {reason}")
        return None
    form = _forms[policy] = KernelPolicy(policy)
    return form


def features(policy, idx, keep=None):
    """`policy.features(idx)` (B, T, C); with `keep`, a bool (B, T), only the kept positions'
    features, `policy.features(idx)[keep]` (n, C), which the kernels compute without the rows
    nothing reads."""
    kernels = _kernel_form(policy)
    if kernels is not None:
        return kernels.features(idx, keep)
    if keep is not None:
        keep = guard.position_mask(idx, keep)
    out = policy.features(idx)
    return out if keep is None else out[keep]


def head(policy, x):
    """`policy.head(x)`: the logits (..., V) of features x (..., C)."""
    kernels = _kernel_form(policy)
    return policy.head(x) if kernels is None else kernels.head(x)


def logits(policy, idx):
    """`policy(idx)`: next-token logits (B, T, V) of tokens idx (B, T)."""
    return head(policy, features(policy, idx))


class Decoder:
    """The policy's incremental decoding (a rollout's): `new_cache`, `prefill`, `step` and
    `compact` as `Policy` and its cache compute them. The kernels read the weights as they are
    when the decoder is made, so they must not change while it is in use (a rollout's weights do
    not); they compute each call that records no gradient, into a float32 cache."""

    def __init__(self, policy):
        self.policy, self.kernels = policy, _kernel_form(policy)

    def _computer(self, cache):
        """Who computes a call on `cache`: the kernels, or the policy's modules."""
        if self.kernels is not None and self.kernels.computes(cache):
            return self.kernels
        return self.policy

    def new_cache(self, batch_size, length=None):
        """`policy.new_cache(batch_size, length)`: empty keys and values for `batch_size`
        sequences of up to `length` positions."""
        return self.policy.new_cache(batch_size, length)

    def prefill(self, idx, cache):
        """`policy.prefill(idx, cache)`: a prefix idx (B, T) into the cache from position 0, and
        the logits (B, V) of the token that follows it."""
        guard.cache("Decoder.prefill", cache)
        return self._computer(cache).prefill(idx, cache)

    def step(self, tokens, pos, cache, rows=None):
        """`policy.step(tokens, pos, cache, rows)`: the logits (B, V), or (len(rows), V), after
        feeding one token per sequence at position `pos`; every sequence's keys and values are
        stored."""
        guard.cache("Decoder.step", cache)
        return self._computer(cache).step(tokens, pos, cache, rows)

    def compact(self, cache, keep, length):
        """The cache of the sequences `keep` (increasing indices into its rows) only, as a rollout
        drops the episodes that ended: equal to `[(k[keep], v[keep]) for k, v in cache]` in the
        first `length` positions, the only ones attention reads (the kernels move the kept rows
        up in place). The compacted cache is filled as far as `cache` was, at most `length`."""
        self.policy.check_cache(cache, "Decoder.compact")
        if self.kernels is not None:
            return self.kernels.compact(cache, keep, length)
        from ..policy import Cache
        keep = guard.kept_rows("compact", keep, cache[0][0].shape[0])
        length = guard.position("compact", "length", length, 0, cache[0][0].shape[-1],
                                "the positions filled, at most the cache's")
        return Cache([(k[keep], v[keep]) for k, v in cache], cache.cfg, min(cache.filled, length))


def Adam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8):
    """Adam (Kingma and Ba), without weight decay: the engine's (adam.py, torch.optim.Adam's step
    with the correctly rounded square root, in C), or torch.optim.Adam itself. Either keeps its
    learning rate in `param_groups[0]["lr"]`, which may be changed between steps."""
    start()
    lr, betas, eps = guard.adam_settings(lr, betas, eps)   # torch's would take lr = inf
    if in_force() == "kernels":
        from .adam import Adam as EngineAdam
        return EngineAdam(params, lr=lr, betas=betas, eps=eps)
    return torch.optim.Adam(params, lr=lr, betas=betas, eps=eps)

