"""Checkpoints of the policy: save and load with a SHA-256 beside each, and the shipped RL base
agent (the SFT checkpoint RL starts from)."""
import hashlib
import io
import os
import re
from dataclasses import asdict
from pathlib import Path

import torch

from . import engine
from .checks import instance, path as path_arg
from .files import write_atomically
from .policy import Policy, PolicyConfig
from .vocab import VOCAB_SIZE

RL_BASE_CHECKPOINT = Path(__file__).resolve().parent / "checkpoints" / "rl_base.pt"


def _state_bytes(policy):
    buf = io.BytesIO()
    torch.save({"config": asdict(policy.cfg), "state": policy.state_dict()}, buf)
    return buf.getvalue()


def _checksum_path(path):
    """The checksum file of checkpoint `path`: `x.pt` has `x.sha256`. Only `.pt` paths, so that
    no two checkpoints share a checksum file and no checkpoint can be a checksum file."""
    if path.suffix != ".pt":
        raise ValueError(f"a checkpoint path must end in .pt (its checksum is the .sha256 file "
                         f"beside it, {path.stem}.sha256), got {path}")
    return path.with_suffix(".sha256")


def _recorded_checksum(sums):
    """The SHA-256 recorded in the checksum file `sums`: 64 hex digits in either case, alone as
    save_policy writes it or followed by a file name as `sha256sum` writes it."""
    text = sums.read_bytes().decode("utf-8", errors="replace").strip()
    if not text:
        raise ValueError(f"checksum file {sums} is empty; it must hold the checkpoint's SHA-256 "
                         f"(64 hex digits), as save_policy writes it")
    match = re.fullmatch(r"([0-9a-fA-F]{64})(?:[ \t]+\*?\S.*)?", text)
    if match is None:
        raise ValueError(f"checksum file {sums} does not hold a SHA-256: expected 64 hex digits, "
                         f"optionally followed by the file name as sha256sum writes it, got "
                         f"{text[:80]!r}")
    return match.group(1).lower()


def is_shipped_checkpoint(path):
    """Whether `path`, however spelled (relative, with `..` or `~`, a symlink or a hard link), is
    the shipped RL base checkpoint or its checksum file."""
    path = path_arg("path", path)
    shipped = (RL_BASE_CHECKPOINT, RL_BASE_CHECKPOINT.with_suffix(".sha256"))
    return path.resolve() in shipped or any(
        path.exists() and other.exists() and os.path.samefile(path, other) for other in shipped)


def check_writable(path, replace_shipped=False):
    """`path` as a Path if `save_policy(..., path, replace_shipped)` may write there: a path ending
    in .pt, in a directory that exists, that is not the shipped checkpoint (under any spelling,
    unless `replace_shipped`) nor a checkpoint already beside it (the study's agents: a new one
    may be added there, none overwritten). Otherwise a ValueError, so that a command can refuse
    before its work."""
    path = path_arg("path", path)
    sums = _checksum_path(path)
    if not path.parent.is_dir():
        raise ValueError(f"cannot write {path}: {path.parent} is not a directory; create it "
                         f"first, or save elsewhere")
    if not replace_shipped and (is_shipped_checkpoint(path) or is_shipped_checkpoint(sums)):
        raise ValueError(f"{path} is the shipped checkpoint {RL_BASE_CHECKPOINT}; save elsewhere, "
                         f"or rebuild it with `python -m tinyagent.harness.rebuild --replace`")
    beside = path.resolve().parent == RL_BASE_CHECKPOINT.parent.resolve()
    if beside and not is_shipped_checkpoint(path) and (path.exists() or sums.exists()):
        raise ValueError(f"{path} is a committed checkpoint beside the shipped one; committed "
                         f"checkpoints are not overwritten: save elsewhere, or under a new name")
    return path


def save_policy(policy, path, replace_shipped=False):
    """Write the checkpoint (`path` ends in .pt) and its `.sha256` file beside it, each written
    atomically, so a killed save never leaves a half-written checkpoint. Returns the SHA-256.
    Where it may not write is `check_writable`'s. A policy whose tensors are not on the CPU (a
    meta-device policy has no values at all) is refused before anything is written, as
    `load_policy` would refuse what it wrote, and so is one in another precision than float32,
    which `load_policy` would round to float32."""
    path = check_writable(path, replace_shipped)
    sums = _checksum_path(path)
    instance("policy", policy, Policy)
    elsewhere = sorted({str(t.device) for t in policy.state_dict().values() if not t.is_cpu})
    if elsewhere:
        raise ValueError(f"save_policy saves a policy on the CPU; this one has tensors on "
                         f"{', '.join(elsewhere)} (a meta tensor has no values): move it with "
                         f"policy.cpu(), or load its weights first")
    if policy.head.weight.dtype != torch.float32:       # load_policy would round it to float32
        raise ValueError(f"save_policy saves a float32 policy (the policy's precision), this one "
                         f"is {policy.head.weight.dtype}: save policy.float(), or keep the copy "
                         f"in memory")
    data = _state_bytes(policy)
    digest = hashlib.sha256(data).hexdigest()
    write_atomically(path, data)      # killed before the next line: the checksums differ, and
    write_atomically(sums, (digest + "\n").encode())    # load_policy refuses the pair
    return digest


def load_policy(path):
    """Load a checkpoint, refusing one whose bytes do not match its recorded checksum or
    whose configuration does not fit this code."""
    path = path_arg("path", path)
    sums = _checksum_path(path)
    engine.start()                    # a run starts from a checkpoint: the pinned arithmetic first
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}")
    data = path.read_bytes()
    if not sums.exists():
        raise ValueError(f"checkpoint {path} has no checksum file {sums.name}")
    expected = _recorded_checksum(sums)
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        advice = ("rebuild it with `python -m tinyagent.harness.rebuild --replace`"
                  if is_shipped_checkpoint(path) else "save it again, or restore both files from your copy")
        raise ValueError(f"checkpoint {path} is corrupted or was changed after its checksum was "
                         f"written: sha256 {actual[:12]}... does not match the "
                         f"{expected[:12]}... recorded in {sums.name}; {advice}")
    try:
        blob = torch.load(io.BytesIO(data), weights_only=True)
    except Exception:       # torch's message suggests weights_only=False, unsafe on such bytes
        raise ValueError(f"checkpoint {path} is not a checkpoint save_policy wrote: its bytes do "
                         f"not load as plain tensors (its checksum only says they are "
                         f"unchanged)") from None
    try:
        cfg = PolicyConfig(**blob["config"])
        policy = Policy(cfg)
        policy.load_state_dict(blob["state"])
    except (TypeError, RuntimeError, KeyError, ValueError) as err:
        raise ValueError(f"checkpoint {path} does not match this PolicyConfig: {err}") from err
    if cfg.vocab_size != VOCAB_SIZE:
        raise ValueError(f"checkpoint {path} has vocab_size {cfg.vocab_size}, the gym has {VOCAB_SIZE}")
    broken = [name for name, t in policy.state_dict().items()
              if t.is_floating_point() and not torch.isfinite(t).all()]
    if broken:
        raise ValueError(f"checkpoint {path} has non-finite weights (NaN or inf) in {len(broken)} "
                         f"tensors, first {broken[:3]}: it was saved from a diverged run; its "
                         f"checksum only says the file is unchanged")
    return policy


def load_rl_base():
    """The shipped RL base agent (the SFT checkpoint RL starts from), checksum-verified.
    `python -m tinyagent.harness.rebuild --replace` rebuilds it in place."""
    return load_policy(RL_BASE_CHECKPOINT)
