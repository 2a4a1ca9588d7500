"""Files written whole or not at all: a checkpoint, a run cache entry or the study's records is
never left half-written by a full disk or a killed process."""
import hashlib
import json
import os
from pathlib import Path

from .checks import file_path


def write_atomically(path, data):
    """Write `data` to a temporary file beside `path`, then rename it over `path`: a killed
    write leaves the old file whole. The temporary file is removed if anything fails. `data` is
    bytes. The temporary name holds a prefix and a hash of the name, so a long name still fits
    the file system's limit."""
    path = file_path("path", path)
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"data must be bytes, got {type(data).__name__}")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"cannot write {path}: {path.parent} is not a directory")
    tag = hashlib.sha256(path.name.encode()).hexdigest()[:8]
    tmp = path.with_name(f".{path.name[:40]}.{tag}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def read_json(path, restore, error=ValueError, sha256=None):
    """A committed JSON file, or `error` naming the file and how to restore it (`restore`, e.g.
    "make agents" or "git checkout of the committed file"): where it cannot be read, or, with
    `sha256`, where its bytes are not those committed (a plan edited after the records it
    judges)."""
    try:
        data = Path(path).read_bytes()
        if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
            raise error(f"{path} is not the committed file (its SHA-256 "
                        f"{hashlib.sha256(data).hexdigest()[:12]}, the committed {sha256[:12]}): "
                        f"a plan is declared before the records it judges, and a changed rule is "
                        f"a new plan file; restore it: {restore}")
        return json.loads(data)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise error(f"{path} cannot be read ({err}); restore it: {restore}") from None
