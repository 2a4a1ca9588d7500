"""TinyAgent: a tiny coding agent, its one-edit gym, Chapter 9's GRPO and Chapter 10's regularizers."""
from importlib import import_module as _import_module
from pathlib import Path as _Path

# The package's face is lazy: `import tinyagent.kl` loads only what kl.py imports, and a name
# below is imported from the module that defines it the first time it is asked for. No name
# below is also a module's name, so `tinyagent.X` is always one thing: `tinyagent.evaluate` is
# the function, defined in the module `tinyagent.evaluation`.
_EXPORTS = {
    "checkpoint": ("load_policy", "load_rl_base", "save_policy"),
    "engine": ("Adam",),
    "evaluation": ("evaluate", "heldout_rollout", "pass_at_k"),
    "grpo": ("LoopHooks", "RLConfig", "TrainingState", "behavior_stats", "compute_advantages",
             "policy_loss", "rl_update", "sample_step", "train_rl"),
    "gym": ("HELDOUT_TASKS", "TRAIN_TASKS", "Episode", "Task"),
    "kl": ("entropy_bonus", "kl_estimate", "kl_penalty", "sequence_kl"),
    "policy": ("Policy", "PolicyConfig"),
    "regularize": ("AdaptiveKLController", "RegularizedConfig", "regularized_update",
                   "train_regularized"),
    "sampler": ("rollout", "token_logprobs"),
}
_DEFINED_IN = {name: module for module, names in _EXPORTS.items() for name in names}
_HERE = _Path(__file__).parent
_MODULES = tuple(sorted({path.stem for path in _HERE.glob("*.py") if path.stem != "__init__"}
                        | {path.parent.name for path in _HERE.glob("*/__init__.py")}))
assert not set(_DEFINED_IN) & set(_MODULES), "an exported name must not be a module's name"
__all__ = sorted(_DEFINED_IN)


def __getattr__(name):
    if name in _DEFINED_IN:
        value = getattr(_import_module(f".{_DEFINED_IN[name]}", __name__), name)
        globals()[name] = value                     # the next lookup does not come here
        return value
    if name in _MODULES:                            # `tinyagent.grpo` after `import tinyagent`
        return _import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *__all__, *_MODULES})
