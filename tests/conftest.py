"""Two markers skip tests, saying why, where what they check cannot hold:

- `recorded_bits`: the test compares bits recorded under the pinned arithmetic, or needs this
  process to compute it. Where the stored outputs promise no bits (tinyagent.harness.contract)
  it is skipped; STRICT=1 runs it anyway.
- `x86_64(what)`: the test assumes an x86-64 machine whose torch has MKL, and `what` says which
  part of one (the matrix kernel's AVX paths, the x86 pins, MKL's erf). Elsewhere it is skipped,
  naming the platform and `what`. TINYAGENT_IMITATE_PLATFORM=aarch64 (say) imitates another
  platform here as it does for the contract.
"""
import json
import os

import pytest

from tinyagent import engine

engine.start()          # the pins, before anything computes (a test module's import may: the gym)

from tinyagent.engine.arithmetic import is_x86  # noqa: E402
from tinyagent.harness.contract import machine, promised  # noqa: E402


def pytest_configure(config):
    import torch
    torch.set_num_threads(1)          # the pinned arithmetic is one thread's, as in the harness
    config.addinivalue_line("markers", "recorded_bits: compares bits recorded under the pins")
    config.addinivalue_line("markers", "x86_64(what): assumes an x86-64 machine whose torch has "
                                       "MKL; `what` says which part of one")


def not_x86_64():
    """Why this is not the machine the `x86_64` tests assume (x86-64, torch with MKL), or None."""
    import torch
    if not is_x86(machine()):
        return f"this is an {machine()} machine, not x86-64"
    if not torch.backends.mkl.is_available():
        return "this torch is built without MKL"
    return None


def pytest_collection_modifyitems(config, items):
    why_not = not_x86_64()
    for item in items:
        marker = item.get_closest_marker("x86_64")
        if marker is None:
            continue
        if len(marker.args) != 1 or not isinstance(marker.args[0], str):
            raise pytest.UsageError(f"{item.nodeid}: x86_64 takes one argument, what the test "
                                    f"assumes of an x86-64 machine")
        if why_not:
            item.add_marker(pytest.mark.skip(reason=f"skipped: {why_not}, and the test assumes "
                                                    f"{marker.args[0]}"))
    ok, why = promised()
    if ok or os.environ.get("STRICT"):
        return
    from tinyagent.harness.fingerprint import fingerprint
    skip = pytest.mark.skip(reason=f"skipped: another arithmetic ({why}; fingerprint "
                                   f"{fingerprint()[:12]})")
    for item in items:
        if "recorded_bits" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def default_engine(monkeypatch):
    """Each unit test starts on the default engine and names any other it wants (test_engine.py
    runs both): TINYAGENT_ENGINE=torch is for the notebooks `make test` runs, in kernels of
    their own, not for the tests of the engine's kernels."""
    monkeypatch.delenv("TINYAGENT_ENGINE", raising=False)
    engine.use(None)
    yield
    engine.use(None)


@pytest.fixture
def kernels_engine():
    """The body on the engine's C kernels, for tests of the kernels themselves (skipped, saying
    why, where the extension is not built)."""
    if not engine.kernels.available():
        pytest.skip("the engine's C kernels are not built")
    engine.use("kernels")
    yield
    engine.use(None)


@pytest.fixture
def draw_files(monkeypatch, tmp_path):
    """A function that writes what a study draw starts from into tmp_path and returns (plan,
    agents), the paths of a plan and an agents file that both name agents a and b. Its argument
    names the agents that get a fake checkpoint and its .sha256 (study.CHECKPOINTS points there)."""
    from tinyagent.science import study

    def write(checkpoint_agents):
        checkpoints = tmp_path / "checkpoints"
        checkpoints.mkdir()
        for agent in checkpoint_agents:
            (checkpoints / f"{agent}.pt").write_bytes(agent.encode() * 100)
            (checkpoints / f"{agent}.sha256").write_text(
                study.file_sha256(checkpoints / f"{agent}.pt"))
        monkeypatch.setattr(study, "CHECKPOINTS", checkpoints)
        plan, agents = tmp_path / "plan.json", tmp_path / "agents.json"
        plan.write_text(json.dumps({"design": {"agents": ["a", "b"]}}))
        agents.write_text(json.dumps({"agents": ["a", "b"]}))
        return plan, agents

    return write
