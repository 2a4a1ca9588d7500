"""Tests marked `recorded_bits` compare bits recorded under the pinned arithmetic: where the stored
outputs promise no bits (tinyagent.harness.contract), they are skipped, saying why; STRICT=1 runs them."""
import os

import pytest

from tinyagent import engine

engine.start()          # the pins, before anything computes (a test module's import may: the gym)

from tinyagent.harness.contract import promised  # noqa: E402


def pytest_configure(config):
    import torch
    torch.set_num_threads(1)          # the pinned arithmetic is one thread's, as in the harness
    config.addinivalue_line("markers", "recorded_bits: compares bits recorded under the pins")


def pytest_collection_modifyitems(config, items):
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
