"""TinyAgent: a tiny coding agent, its one-edit gym, Chapter 9's GRPO and Chapter 10's regularizers."""
from .arithmetic import pin_environment

pin_environment()     # before torch computes anything: see arithmetic.py

import sys as _sys
from importlib import import_module as _import_module
from pathlib import Path as _Path
from types import ModuleType as _ModuleType

# The package's face is lazy: `import tinyagent.kl` loads only what kl.py imports, and a name
# below is imported from the module that defines it the first time it is asked for.
_EXPORTS = {
    "evaluate": ("evaluate", "pass_at_k"),
    "grpo": ("RLConfig", "behavior_stats", "compute_advantages", "policy_loss", "rl_update",
             "sample_step", "train_rl"),
    "gym": ("HELDOUT_TASKS", "TRAIN_TASKS", "Episode", "Task"),
    "kl": ("entropy_bonus", "kl_estimate", "kl_penalty", "sequence_kl"),
    "policy": ("Policy", "PolicyConfig", "load_policy", "load_rl_base", "save_policy"),
    "regularize": ("RegularizedConfig", "regularized_update", "train_regularized"),
    "sampler": ("rollout", "token_logprobs"),
}
_DEFINED_IN = {name: module for module, names in _EXPORTS.items() for name in names}
_MODULES = tuple(sorted(path.stem for path in _Path(__file__).parent.glob("*.py")
                        if path.stem != "__init__"))
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


class _Face(_ModuleType):
    """Importing the submodule `tinyagent.evaluate` binds it on the package under the name of the
    function it defines; the package's `evaluate` stays the function (as `__all__` says), and the
    module is `sys.modules["tinyagent.evaluate"]`, as `from tinyagent.evaluate import ...` finds."""

    def __setattr__(self, name, value):
        if not (name in _DEFINED_IN and isinstance(value, _ModuleType)):
            super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Face
