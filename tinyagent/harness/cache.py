"""An on-disk cache of results keyed by plain data, so that a notebook that asks for a result
another notebook computed loads it instead of computing it again.

A key is the SHA-256 of its configuration written as JSON (dicts with string keys, lists,
strings, numbers, None: anything else is refused, so two configurations share a key only if they
are equal). Entries are plain data (lists, dicts, numbers, tensors) loaded with
`weights_only=True`, written atomically, and computed under a per-key file lock, so two processes
asking for the same result at once compute it once. An unreadable entry (a full disk, a killed
copy) is reported in one line and recomputed. What a result depends on besides its configuration
(the code, the arithmetic) the caller puts into the configuration: `code_digest` hashes code.
"""
import ast
import fcntl
import hashlib
import json
import io
from collections import OrderedDict
from pathlib import Path

import torch

from ..checks import directory
from ..files import write_atomically

ROOT = Path(__file__).resolve().parents[2]            # the repository
PACKAGE = ROOT / "tinyagent"          # tinyagent/


def module_path(name):
    """The file of the package's module `name`, dotted below the package ("harness.runs"; the
    package's own face is "__init__")."""
    path = PACKAGE.joinpath(*name.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _is_module(name):
    path = PACKAGE.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _packages(name):
    """The packages Python runs before module `name`: the face, then each folder's __init__."""
    parts = [] if name == "__init__" else name.split(".")[:-1]
    return ["__init__"] + [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _imports(name):
    """The package's modules that module `name`'s import statements name, anywhere in its file:
    relative imports of any level, `from tinyagent.x.y import`, `from tinyagent.x import module`
    (and `from . import module`) and `import tinyagent.x.y`."""
    is_package = name == "__init__" or module_path(name).name == "__init__.py"
    own = [] if name == "__init__" else name.split(".")
    package = own if is_package else own[:-1]
    found = []
    for node in ast.walk(ast.parse(module_path(name).read_text())):
        if isinstance(node, ast.ImportFrom):
            module = (node.module or "").split(".") if node.module else []
            if node.level:
                target = package[:len(package) - (node.level - 1)] + module
            elif module[:1] == ["tinyagent"]:
                target = module[1:]
            else:
                continue
            for alias in node.names:
                if _is_module(".".join([*target, alias.name])):      # from tinyagent.x import y
                    found.append(".".join([*target, alias.name]))
                elif target:
                    found.append(".".join(target))
        elif isinstance(node, ast.Import):
            found += [alias.name.split(".", 1)[1] for alias in node.names
                      if alias.name.startswith("tinyagent.")]
    return [m for m in found if m]


def imported_modules(name):
    """The package's modules that `name` imports, directly or not, at any depth (itself
    included), with the package __init__ files Python runs on the way: what a process that
    imports `name` executes of the package (the face's lazy names aside)."""
    seen, todo = set(), [name]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        todo += _imports(module) + _packages(module)
    return sorted(seen)


def source_digest(source):
    """A hash of what Python source does: its parsed tree without docstrings. Comments,
    docstrings and layout do not change it, so editing the book's prose in a module does not
    recompute every cached run; any change to the code does."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()


# The module that loads the compiled extension tinyagent.engine._kernels: its code is also the C
# that setup.py compiles into it, every .c and .h file of tinyagent/engine/c/.
KERNELS = "engine.kernels"


def c_sources():
    """The engine's C files, the extension's sources and header, in a fixed order."""
    c = PACKAGE / "engine" / "c"
    return sorted([*c.glob("*.c"), *c.glob("*.h")])


def code_digest(name):
    """A hash of the code of module `name` and of every package module it imports, as this process
    reads them now (callers keep the value they computed at import, so a file edited while a
    process runs cannot relabel old results). The C kernels count as the code of `kernels`, byte
    for byte."""
    h = hashlib.sha256()
    for module in imported_modules(name):
        h.update(source_digest(module_path(module).read_text()).encode())
        if module == KERNELS:
            for source in c_sources():
                h.update(hashlib.sha256(source.read_bytes()).hexdigest().encode())
    return h.hexdigest()


def _check_plain(value, where, tensors):
    """Refuse, naming where it is, anything in `value` but dicts, lists, tuples, strings, numbers,
    None and (if `tensors`) tensors: what a key is made of, or what an entry can be read back as
    with `weights_only=True` (a numpy number, say, would be written and then never read)."""
    if type(value) in (str, int, float, bool, type(None)):
        return
    if tensors and isinstance(value, torch.Tensor):
        return
    if type(value) in (list, tuple):
        for i, item in enumerate(value):
            _check_plain(item, f"{where}[{i}]", tensors)
        return
    if type(value) in (dict, OrderedDict):
        for key, item in value.items():
            if type(key) is not str and not (tensors and type(key) is int):
                raise TypeError(f"{where} has the key {key!r}; keys must be strings")
            _check_plain(item, f"{where}[{key!r}]", tensors)
        return
    allowed = "dicts, lists, strings, numbers, None" + (", tensors" if tensors else "")
    raise TypeError(f"{where} is a {type(value).__module__}.{type(value).__qualname__}; allowed: "
                    f"{allowed} (convert numpy numbers with float() or int())")


def key(config):
    """The cache key of `config`: plain data (dicts with string keys, lists, strings, numbers,
    None), so that two configs share a key only if they are equal. A tensor, say, is refused
    rather than keyed by its abbreviated repr."""
    _check_plain(config, "config", tensors=False)
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:20]


MISSING = object()   # what `_load` returns for no usable entry: None is a result like any other


def _load(path, check=None):
    """A cached entry's result, or MISSING (after saying so in one line) if the file is
    unreadable, is not an entry `cached` wrote under this key, or its result fails
    `check(result)`."""
    try:
        entry = torch.load(path, weights_only=True)
    except Exception as err:                     # truncated, corrupt, or not plain data
        reason = str(err).splitlines()[0][:100] if str(err) else type(err).__name__
    else:
        if not (isinstance(entry, dict) and set(entry) == {"key", "result"}):
            reason = "not a run cache entry"
        elif entry["key"] != path.stem:
            reason = f"the entry of another run, {entry['key']!r}"
        else:
            try:
                ok = check is None or check(entry["result"])
            except Exception:                    # a check that indexes a missing key, say
                ok = False
            if ok:
                return entry["result"]
            reason = "its result has the wrong structure"
    print(f"run cache: {path.name} is unreadable ({reason}); recomputing it")
    return MISSING


def _path(config, cache_dir, check):
    """The entry of `config` in `cache_dir`, after refusing what would fail only once the result
    is computed: a cache directory that is a file, an entry that is a directory, a check that
    cannot be called."""
    if check is not None and not callable(check):
        raise TypeError(f"check must be a function of the result returning True or False, or "
                        f"None, got {check!r}")
    where = directory("cache_dir", cache_dir)
    if str(where) == ".":
        raise ValueError(f"cache_dir {str(cache_dir)!r} is the current directory (Path('') reads "
                         f"as '.' too): the run cache fills its directory with entries and locks; "
                         f"name a directory of its own, such as '.cache/runs'")
    path = where / f"{key(config)}.pt"
    if path.is_dir():
        raise IsADirectoryError(f"the run cache entry {path} is a directory; remove it (an "
                                f"entry is a file that `cached` writes)")
    return path


def _find(path, check):
    return _load(path, check) if path.exists() else MISSING


def lookup(config, cache_dir, check=None):
    """The cached result for `config`, or None if it is missing, unreadable or fails
    `check(result)` (see `_load`). Needs only read access to the cache."""
    result = _find(_path(config, cache_dir, check), check)
    return None if result is MISSING else result


def _identity(path):
    """What changes when a file is replaced (`os.replace` gives it a new inode), or None."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def cached(config, compute, cache_dir, check=None):
    """`compute()`'s result for `config`, loaded from the cache when present, readable and
    accepted by `check(result) -> bool` (if given), else computed and stored. The result must be
    plain data: dicts, lists, numbers, strings, tensors (anything else is refused before it is
    written). Reading needs no write access; computing takes a per-run lock, so two processes
    asking for the same run compute it once."""
    if not callable(compute):
        raise TypeError(f"compute must be a function that takes no arguments and returns the "
                        f"result, got {compute!r:.100}")
    path = _path(config, cache_dir, check)
    seen = _identity(path)
    if (result := _find(path, check)) is not MISSING:
        return result
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)         # another process computing this run: wait for it
        if _identity(path) not in (None, seen):  # it wrote the entry while we waited
            if (result := _find(path, check)) is not MISSING:
                return result
        result = compute()
        _check_plain(result, "the result", tensors=True)
        try:                                     # else it would be recomputed every time
            ok = check is None or check(result)
        except Exception as err:
            raise ValueError(f"check raised {err!r} on the result compute() just returned, so it "
                             f"refuses every entry: {result!r:.200}") from err
        if not ok:
            raise ValueError(f"compute() returned a result that its check refuses: "
                             f"{result!r:.200}")
        buffer = io.BytesIO()
        torch.save({"key": path.stem, "result": result}, buffer)
        write_atomically(path, buffer.getvalue())
    return result
