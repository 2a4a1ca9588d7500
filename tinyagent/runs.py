"""An on-disk cache of finished runs, so a notebook that reuses another's runs loads them.

A run is keyed by a hash of its configuration and of the code that produced it (the source of
every module that trains or evaluates, and the base checkpoint), so editing the gym or the
trainer invalidates old results instead of silently reusing them. Files are written atomically:
two notebooks computing the same run at once cannot leave a half-written file.
"""
import copy
import hashlib
import json
import os
import tempfile
from dataclasses import asdict
from pathlib import Path

import torch

from .evaluate import evaluate
from .grpo import frozen_copy
from .policy import load_rl_base
from .regularize import train_regularized

PACKAGE = Path(__file__).resolve().parent
CACHE_DIR = Path(os.environ.get("TINYAGENT_RUNS", PACKAGE.parent / ".cache" / "runs"))
CODE_MODULES = ("vocab", "gym", "policy", "sampler", "grpo", "regularize", "evaluate", "pretrain")


def code_version():
    """Hash of the training and evaluation code and of the shipped base checkpoint, as this
    process imported them (so a file edited mid-session cannot relabel old results)."""
    return _CODE_VERSION


def _hash_code():
    h = hashlib.sha256()
    for name in CODE_MODULES:
        h.update((PACKAGE / f"{name}.py").read_bytes())
    h.update((PACKAGE / "checkpoints" / "rl_base.sha256").read_bytes())
    return h.hexdigest()


_CODE_VERSION = _hash_code()


def run_key(config):
    """The cache key of a run described by a JSON-serializable `config`."""
    blob = json.dumps(config, sort_keys=True, default=str) + code_version()
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def cached(config, compute, cache_dir=None):
    """`compute()`'s result for `config`, loaded from the cache when present, else computed and
    stored. The result must be something `torch.save` can write (dicts, lists, tensors)."""
    cache_dir = Path(cache_dir or CACHE_DIR)
    path = cache_dir / f"{run_key(config)}.pt"
    if path.exists():
        return torch.load(path, weights_only=False)
    result = compute()
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=cache_dir, suffix=".tmp", delete=False) as f:
        torch.save(result, f)
    os.replace(f.name, path)
    return result


def policy_digest(policy):
    """A short hash of a policy's parameters, to key runs that start from it."""
    h = hashlib.sha256()
    for p in policy.state_dict().values():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def regularized_run(cfg, steps=40, start=None, reference=None, progress=True):
    """Train a copy of `start` (default: the RL base agent) for `steps` steps of
    `train_regularized` under `cfg` (a RegularizedConfig), anchored to `reference` (default: the
    start), then evaluate it on the held-out split against the RL base agent and against the
    reference. Cached: returns {"history", "eval", "eval_vs_reference", "state"}."""
    base = load_rl_base()
    start = base if start is None else start
    config = {"cfg": asdict(cfg), "steps": steps, "start": policy_digest(start),
              "reference": None if reference is None else policy_digest(reference)}

    def compute():
        policy = copy.deepcopy(start)
        anchor = frozen_copy(start) if reference is None else reference
        history = train_regularized(policy, cfg, steps=steps, reference=anchor, progress=progress)
        vs_base = evaluate(policy, reference=base)
        anchored_at_base = reference is None and start is base
        return {"history": history,
                "eval": vs_base,
                "eval_vs_reference": vs_base if anchored_at_base else evaluate(policy, reference=anchor),
                "state": policy.state_dict()}

    return cached(config, compute)


def policy_from_state(state):
    """A policy with the parameters of a cached run's `state`."""
    policy = load_rl_base()
    policy.load_state_dict(state)
    return policy
