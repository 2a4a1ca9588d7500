"""Argument checks shared by the configurations and entry points, so that every bad count is
refused with the same message naming what is allowed, and the stop that both training loops (SFT
and GRPO) make before a non-finite number trains on."""
import math
import numbers


def _is_int(value):
    # a bool is an int to Python, but True as a group size or a seed is a mistake
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def positive_int(name, value):
    """`value` as an int if it is an integer >= 1 (not a bool); otherwise a ValueError naming
    `name`."""
    if not _is_int(value) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def int_in(name, value, low, high):
    """`value` as an int if it is an integer (not a bool) in [low, high]: 1.5 or True as a count
    of attempts is a mistake, not a number to round."""
    if not _is_int(value) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
    return int(value)


def nonempty_list(name, values):
    """`values` (a list, a tuple, a generator: any iterable but a string) as a tuple holding at
    least one item, read once here so that a generator is not found empty after the work."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{name} must be a list or tuple, got {values!r:.100}")
    values = tuple(values)
    if not values:
        raise ValueError(f"{name} must hold at least one item, got none")
    return values


def instance(name, value, kind):
    """`value` if it is a `kind` (a class); otherwise a TypeError naming both, before the first
    attribute it lacks is looked up deep inside."""
    if not isinstance(value, kind):
        raise TypeError(f"{name} must be a {kind.__name__}, got {type(value).__name__} "
                        f"{value!r:.100}")
    return value


def seed_int(name, value):
    """`value` as an int if it is an integer (not a bool) in [0, 2**64), the seeds a torch
    generator takes (it would read -1 as 2**64 - 1: two seeds, one run)."""
    if not _is_int(value):
        raise TypeError(f"{name} must be an integer in [0, 2**64), got {value!r}")
    if not 0 <= value < 2 ** 64:
        raise ValueError(f"{name} must be an integer in [0, 2**64), got {value!r}")
    return int(value)


def real_number(name, value, allowed, what):
    """`value` as a float if it is a real number (not a bool, a string or a tensor) that
    `allowed(value)` accepts; otherwise an error naming `name` and `what` is allowed. NaN is
    always refused: in a config, one step would turn every parameter NaN. -0.0 becomes 0.0: the
    two are equal, so equal configs must key the run cache alike."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise TypeError(f"{name} must be a real number {what}, got {value!r}")
    value = float(value)
    if math.isnan(value) or not allowed(value):
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return value + 0.0


def finite_positive(name, value):
    """`value` as a float if it is a real number in (0, inf)."""
    return real_number(name, value, lambda v: 0 < v < math.inf, "finite and positive")


MIN_TEMPERATURE = 1e-3


def temperature(name, value):
    """`value` as a float if it is a sampling temperature: a real number in [1e-3, inf). Below
    1e-3 sampling is greedy anyway, and logits / temperature overflow to NaN log-probs near
    1e-38 (1e-310 samples one token forever)."""
    return real_number(name, value, lambda v: MIN_TEMPERATURE <= v < math.inf,
                       f"positive and finite, at least {MIN_TEMPERATURE:g} (below it sampling is "
                       f"greedy, and logits / temperature overflow to NaN log-probs near 1e-38)")


def finite_nonempty(name, values):
    """`values` (a tensor, for example one reward per episode) if it holds at least one number
    and every number is finite: one NaN reward would turn every advantage NaN."""
    import torch
    if not isinstance(values, torch.Tensor):
        raise TypeError(f"{name} must be a tensor, got {type(values).__name__}")
    if values.numel() == 0:
        raise ValueError(f"{name} must hold at least one value, got an empty tensor "
                         f"{tuple(values.shape)}")
    bad = ~torch.isfinite(values)
    if bad.any():
        raise ValueError(f"{name} must be finite, got {values[bad][:3].tolist()} at "
                         f"{int(bad.sum())} of {values.numel()} positions")
    return values


def all_finite(*tensors):
    """Whether every number of `tensors` is finite (inf and NaN are not), read off one sum per
    tensor: a float32 tensor summed in float64 cannot overflow (its n values add up to at most
    n x 3.4e38), so its sum is finite exactly when each value is, and one reduction takes a fifth
    of the time of `isfinite().all()` (a run checks its logits at every position and its
    parameters at every update). A tensor of another precision gets `isfinite().all()`."""
    import torch
    for t in tensors:
        t = t.detach()
        if t.dtype in (torch.float32, torch.float16, torch.bfloat16):
            finite = math.isfinite(t.sum(dtype=torch.float64).item())
        else:
            finite = bool(t.isfinite().all())
        if not finite:
            return False
    return True


class NonFiniteError(FloatingPointError):
    """Training produced a non-finite number; the loop that raises it names the step."""


def require_finite(what, *tensors):
    """Stop before a non-finite number trains on: a NonFiniteError saying that `what` became
    non-finite."""
    if not all_finite(*tensors):
        raise NonFiniteError(f"{what} became non-finite (inf or NaN)")


# ------------------------------------------------------------------ environment variables

FLAG_ON, FLAG_OFF = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def env_flag(name, default):
    """The environment variable `name` read as a yes/no switch: 1/true/yes/on or 0/false/no/off
    in any case; unset or empty gives `default`. Anything else is an error naming the variable."""
    import os
    raw = os.environ.get(name, "")
    if not raw:
        return bool(default)
    word = raw.strip().lower()
    if word in FLAG_ON or word in FLAG_OFF:
        return word in FLAG_ON
    raise ValueError(f"environment variable {name}={raw!r} is not a switch; allowed (any case): "
                     f"{'/'.join(FLAG_ON)} or {'/'.join(FLAG_OFF)}")


def env_positive_int(name, default=None):
    """The environment variable `name` as a positive integer; unset or empty gives `default`.
    Anything else (abc, 0, -2, 1.5) is an error naming the variable."""
    import os
    raw = os.environ.get(name, "")
    if not raw:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        value = None
    if value is None or value < 1:
        raise ValueError(f"environment variable {name}={raw!r} must be a positive integer "
                         f"(1, 2, ...), or unset for the default")
    return value


def env_path(name, default):
    """The environment variable `name` as a directory path (`directory`); unset or empty gives
    `default`. A value of only spaces is refused (it would name a directory ' ')."""
    import os
    from pathlib import Path
    raw = os.environ.get(name, "")
    if not raw:
        return Path(default)
    if not raw.strip():
        raise ValueError(f"environment variable {name}={raw!r} is blank; give a path, or unset "
                         f"it for the default {default}")
    return directory(f"environment variable {name}", raw)


# ------------------------------------------------------------------ paths

def path(name, value):
    """`value` (a str or a path) as a Path with `~` expanded: every path the package takes is
    read this one way, so what save_policy("~/x.pt") writes load_policy("~/x.pt") finds, and no
    literal `~` directory appears. An empty or blank path is refused: Path("") is the current
    directory."""
    import os
    from pathlib import Path
    text = value if isinstance(value, str) else os.fspath(value) if isinstance(
        value, os.PathLike) else None
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a path (a str or a pathlib.Path), got {value!r}")
    if not text.strip():
        raise ValueError(f"{name} must be a path, got the empty {text!r} (write '.' for the "
                         f"current directory)")
    return Path(text).expanduser()


def directory(name, value):
    """`value` as a directory path (`path`) that is a directory or does not exist yet, so that
    what goes into it is refused before any work rather than failing on the first write."""
    where = path(name, value)
    if where.exists() and not where.is_dir():
        raise NotADirectoryError(f"{name} {str(where)!r} is a file, not a directory; name a "
                                 f"directory, or one that does not exist yet")
    return where


def file_path(name, value):
    """`value` as the path of a file to write (`path`): one that names a file, not the current
    directory (Path('') reads as '.'), '..' or a root, and is not an existing directory, so
    that a write is refused before it starts rather than failing on its temporary file."""
    where = path(name, value)
    if where.name in ("", ".", ".."):
        raise ValueError(f"{name} must name a file, got {str(value)!r}, which names a directory")
    if where.is_dir():
        raise IsADirectoryError(f"{name} {str(where)!r} is a directory; name a file")
    return where


def token_ids(name, tokens, vocab_size, ndim=2, empty=False):
    """`tokens` if it is an integer tensor of `ndim` dimensions holding at least one id (or none,
    with `empty`), every id in [0, vocab_size): a float tensor, a 1-D episode or an id past the
    vocabulary would fail deep inside the embedding, and a negative id would pick a row from
    its end."""
    import torch
    if not isinstance(tokens, torch.Tensor) or tokens.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{name} must be an integer tensor of token ids (torch.long: int64, or "
                        f"int32), got {getattr(tokens, 'dtype', type(tokens).__name__)}")
    if tokens.ndim != ndim or (tokens.numel() == 0 and not empty):
        raise ValueError(f"{name} must be a {'' if empty else 'non-empty '}{ndim}-D tensor "
                         f"({'(episodes, positions)' if ndim == 2 else '(episodes,)'}), got shape "
                         f"{tuple(tokens.shape)}")
    if not tokens.is_cpu:
        raise ValueError(f"{name} must be on the cpu, got a tensor on {tokens.device.type}")
    if not tokens.numel():
        return tokens
    low, high = torch.aminmax(tokens)         # one pass: a rollout checks every token it feeds
    if low.item() < 0 or high.item() >= vocab_size:
        bad = (tokens < 0) | (tokens >= vocab_size)
        raise ValueError(f"{name} must hold ids in [0, {vocab_size}) (the vocabulary's tokens), got "
                         f"{tokens[bad][:5].tolist()}")
    return tokens


def row_indices(name, rows, n):
    """`rows` if it is None or a list of row indices in [0, n): a negative index would pick a
    row from the end, one past n fail inside, and a tuple index one element, not rows."""
    if rows is None:
        return rows
    # map(type, ...) keeps the check out of Python's loop: a rollout checks its rows every step
    if not isinstance(rows, list) or (rows and (set(map(type, rows)) != {int}
                                                or min(rows) < 0 or max(rows) >= n)):
        raise ValueError(f"{name} must be a list of row indices in the range [0, {n}) (the "
                         f"batch's rows), got {rows!r:.100}")
    return rows


def logits_tensor(name, x, shape_hint, ndim):
    """Return `x` as detached float64 logits after checking type, rank and values."""
    import torch
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of logits {shape_hint}, "
                         f"got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor (float32 or float64), "
                         f"got {x.dtype}")
    if x.dim() != ndim:
        raise ValueError(f"{name} must have shape {shape_hint}, got {tuple(x.shape)}")
    if torch.isnan(x).any():
        raise ValueError(f"{name} must not contain NaN")
    if torch.isinf(x).any():
        raise ValueError(f"{name} must be finite: an infinite logit leaves the KL undefined")
    return x.detach().to(torch.float64)


def logit_pair(logits, ref_logits):
    """Two 1-D logit vectors over the same K >= 2 outcomes, as float64 (exact.py's one distribution)."""
    logits = logits_tensor("logits", logits, "(K,)", 1)
    ref_logits = logits_tensor("ref_logits", ref_logits, "(K,)", 1)
    if logits.shape != ref_logits.shape:
        raise ValueError(f"logits and ref_logits must have the same shape (K,), got "
                         f"{tuple(logits.shape)} and {tuple(ref_logits.shape)}")
    if logits.numel() < 2:
        raise ValueError(f"a distribution needs at least 2 outcomes, got K={logits.numel()}")
    return logits, ref_logits


def logit_tables(policy, ref):
    """Both models, as float64: equally long tuples of logit tables over one vocabulary V >= 2
    (exact.py's sequence models)."""
    checked = []
    for name, model in (("policy", policy), ("ref", ref)):
        if not isinstance(model, (tuple, list)) or not model:
            raise ValueError(f"{name} must be a tuple of logit tables, for two tokens a pair "
                             f"(first (V,), second (V, V)); got {type(model).__name__}")
        tables = [logits_tensor(f"{name}[{t}]", z, f"(V,) * {t + 1}", t + 1)
                  for t, z in enumerate(model)]
        if tables[0].numel() < 2 or any(z.shape != tables[0].shape * z.dim() for z in tables):
            raise ValueError(f"{name}: the tables need shapes (V,), (V, V), ... with V >= 2, got "
                             f"{[tuple(z.shape) for z in tables]}")
        checked.append(tables)
    shapes = [[tuple(z.shape) for z in tables] for tables in checked]
    if shapes[0] != shapes[1]:
        raise ValueError(f"policy and ref must share the vocabulary and the length, got tables "
                         f"{shapes[0]} and {shapes[1]}")
    return checked
