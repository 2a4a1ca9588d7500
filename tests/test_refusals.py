"""Refusals before work (DESIGN.md, "What bad input gets"): the harness's commands refuse a
committed output path or an unknown argument before they compute anything, and the checkpoint
and fingerprint helpers answer every input with a clear error or a sentence, never a traceback
from inside. Each rule is a row of a table, checked by its key words."""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tinyagent.checkpoint import RL_BASE_CHECKPOINT, save_policy
from tinyagent.harness import fingerprint
from tinyagent.policy import Policy

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = RL_BASE_CHECKPOINT.with_name("agent_1.pt")

# (the command's arguments after `python -m`, the key words of its error); each must exit 2
# (argparse's refusal) within a few seconds: the rebuild's SFT alone takes minutes
COMMANDS = {
    "rebuild over a committed checkpoint":
        (["tinyagent.harness.rebuild", "--out", str(COMMITTED.relative_to(ROOT))],
         ["committed", "agent_1.pt", "not overwritten"]),
    "rebuild over the shipped checkpoint without --replace":
        (["tinyagent.harness.rebuild", "--out", str(RL_BASE_CHECKPOINT)],
         ["shipped", "--replace"]),
    "contract with an unknown argument": (["tinyagent.harness.contract", "--bogus"],
                                          ["unrecognized arguments", "--bogus"]),
    "contract with an abbreviation": (["tinyagent.harness.contract", "--summ", "a.ipynb"],
                                      ["unrecognized arguments", "--summ"]),
    "rebuild with an abbreviation": (["tinyagent.harness.rebuild", "--rep"],
                                     ["unrecognized arguments", "--rep"]),
    "contract with a stray word": (["tinyagent.harness.contract", "summary"],
                                   ["unrecognized arguments", "summary"]),
    "contract --summary with an unknown option":
        (["tinyagent.harness.contract", "--summary", "a.ipynb", "--strict"],
         ["unrecognized arguments", "--strict"]),
    "fingerprint with an unknown argument": (["tinyagent.harness.fingerprint", "--part"],
                                             ["unrecognized arguments", "--part"]),
    "fingerprint with a stray word": (["tinyagent.harness.fingerprint", "parts"],
                                      ["unrecognized arguments", "parts"]),
}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_command_refuses_before_it_computes(name):
    argv, words = COMMANDS[name]
    if "rebuild" in name and not COMMITTED.exists():
        pytest.skip(f"no committed checkpoint {COMMITTED.name} in this checkout")
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": path})
    elapsed = time.perf_counter() - start
    assert done.returncode == 2, f"{name}: exit {done.returncode}\n{done.stderr[-2000:]}"
    missing = [w for w in words if w.lower() not in done.stderr.lower()]
    assert not missing, f"{name}: the error lacks {missing}: {done.stderr[-2000:]}"
    assert elapsed < 60, f"{name}: refused only after {elapsed:.0f} s"


def test_the_mismatch_message_says_so_where_the_fingerprint_matches(monkeypatch):
    """A caller may ask before it has checked: where no part differs, one sentence, no
    TypeError."""
    monkeypatch.setattr(fingerprint, "first_difference", lambda: None)
    message = fingerprint.mismatch_message()
    assert all(w in message for w in ("fingerprint", "is the pinned one", "stored outputs"))


def test_off_x86_the_mismatch_message_names_the_platform_not_the_pins(monkeypatch):
    """On an aarch64 machine (faked) the warning a run gives names the platform as the reason,
    and neither offers other causes nor tells the reader to set the x86 pins."""
    monkeypatch.setattr("platform.machine", lambda: "aarch64")
    monkeypatch.setattr(fingerprint, "first_difference", lambda: ("sampling", "the sampler"))
    message = fingerprint.mismatch_message()
    assert "aarch64" in message and "x86-64" in message and "sampling" in message
    assert "ATEN_CPU_CAPABILITY" not in message and "another CPU architecture" not in message


def test_save_policy_refuses_a_policy_without_values(tmp_path):
    """A meta-device policy (no values at all) is refused before anything is written, as
    load_policy would refuse what it wrote."""
    with torch.device("meta"):
        policy = Policy()
    out = tmp_path / "meta.pt"
    with pytest.raises(ValueError) as refused:
        save_policy(policy, out)
    assert all(w in str(refused.value) for w in ("cpu", "meta")), refused.value
    assert not out.exists() and not out.with_suffix(".sha256").exists()
