"""Files written whole or not at all: a checkpoint, a run cache entry or the study's records is
never left half-written by a full disk or a killed process."""
import os
from pathlib import Path


def write_atomically(path, data):
    """Write `data` to a temporary file beside `path`, then rename it over `path`: a killed
    write leaves the old file whole. The temporary file is removed if anything fails. `data` is
    bytes."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
