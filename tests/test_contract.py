"""Where the stored outputs promise bits, and the lax path elsewhere (tinyagent/harness/contract.py),
shown by imitating another platform."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tinyagent.harness import contract

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.x86_64("that this machine is one CI runs on (x86-64 Linux with AVX2)")
def test_this_machine_is_promised():
    assert contract.promised() == (True, None)


def test_an_imitated_arm_machine_is_not_promised(monkeypatch):
    monkeypatch.setenv(contract.IMITATE, "arm64")
    ok, why = contract.promised()
    assert not ok and "arm64 is not x86-64 Linux" in why


def run(*args, **env):
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=300)


def test_on_another_platform_the_recorded_bits_tests_skip_saying_why():
    done = run("-m", "pytest", "-q", "-rs", "tests/test_regularize.py", "-k", "bit_for_bit",
               **{contract.IMITATE: "arm64", "STRICT": ""})
    assert done.returncode == 0, done.stdout
    assert "3 skipped" in done.stdout and "skipped: another arithmetic" in done.stdout


@pytest.mark.recorded_bits
def test_strict_compares_the_recorded_bits_on_another_platform_too():
    strict = run("-m", "pytest", "-q", "tests/test_regularize.py", "-k", "bit_for_bit",
                 **{contract.IMITATE: "arm64", "STRICT": "1"})
    assert "3 passed" in strict.stdout                    # STRICT=1 compares them anyway


def test_on_another_platform_the_x86_tests_skip_saying_what_they_assume():
    """Every test marked x86_64 (conftest.py) skips on an imitated aarch64 machine, naming the
    platform and what it assumes of x86-64."""
    args = ("-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-m", "x86_64", "tests")
    here = run(*args, "--collect-only")
    marked = [line for line in here.stdout.splitlines() if "::" in line]
    assert marked, here.stdout + here.stderr
    done = run(*args, **{contract.IMITATE: "aarch64"})
    assert done.returncode == 0, done.stdout[-3000:]
    skips = re.findall(r"^SKIPPED \[(\d+)\] (.*)$", done.stdout, re.M)
    assert f"{len(marked)} skipped" in done.stdout and "passed" not in done.stdout, done.stdout
    assert sum(int(n) for n, _ in skips) == len(marked), done.stdout
    for _, line in skips:
        assert re.search(r"this is an aarch64 machine, not x86-64, and the test assumes \w", line), line


def test_the_lax_run_says_one_line_first_and_counts_the_cells_it_compared():
    done = run("-m", "tinyagent.harness.contract", **{contract.IMITATE: "arm64"})
    assert done.returncode == 1 and len(done.stdout.splitlines()) == 1
    notebooks = sorted(str(p) for p in (ROOT / "notebooks").glob("10*.ipynb"))
    summary = run("-m", "tinyagent.harness.contract", "--summary", *notebooks).stdout
    compared, skipped = (int(w) for w in summary.split()[0:4:3])
    strict = sum(contract.compared_cells(notebooks, lax=False))
    assert compared + skipped == strict and skipped > 0 and compared > 0
    assert "not compared: their digits depend on the arithmetic" in summary
