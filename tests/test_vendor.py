"""Vendor independence, checked against the hashes measured on other CPUs (tests/data/arith/):
every kernel a run reaches must compute here, on fixed inputs at a run's shapes, the bits it
computed there. On an AMD machine this compares with the Intel files and on an Intel machine with
the AMD ones, so the next machine of either vendor carries the other's numbers. Record a new CPU's
file with `python -m tinyagent.harness.probe > tests/data/arith/VENDOR-MODEL.json`."""
import json
from pathlib import Path

import pytest

from tinyagent.engine.arithmetic import PINS, torch_threads
from tinyagent.harness.probe import LIBRARY_FAMILIES, differences, machine, probe

pytestmark = pytest.mark.recorded_bits
FILES = sorted(p for p in (Path(__file__).parent / "data" / "arith").glob("*.json")
               if "fingerprint-parts" not in p.name)
OWN_FAMILIES = ("matmul_fwd", "matmul_bwd_input", "matmul_bwd_weight", "matmul_bwd_bias",
                "gelu_erf_fwd", "gelu_erf_bwd", "attention_causal_fwd", "attention_causal_bwd",
                "attention_decode", "adam_exact_sqrt")


@pytest.fixture(scope="module")
def here():
    with torch_threads(1):
        return probe()


def test_every_family_a_run_reaches_is_probed(here):
    families = {key.split(" ")[0] for key in here}
    assert families == set(OWN_FAMILIES) | set(LIBRARY_FAMILIES)


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_this_machine_computes_what_the_other_cpus_computed(here, path):
    theirs = json.loads(path.read_text())
    differ = differences(here, theirs["ops"])
    assert not differ, (f"kernels that round differently here ({machine()['cpu']}) and on "
                        f"{theirs['meta']['cpu']} ({theirs['meta']['vendor']}): {differ}")
    library = {key for key in here if key.split(" ")[0] in LIBRARY_FAMILIES}
    assert library <= set(theirs["ops"])       # every library kernel a run reaches was compared


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_every_reference_was_recorded_under_the_pins_and_names_its_cpu(path):
    """A file measured without the pins, or that does not say which CPU made it, proves nothing."""
    meta = json.loads(path.read_text())["meta"]
    assert meta["vendor"] in ("GenuineIntel", "AuthenticAMD") and meta["cpu"]
    assert {name: meta["env"][name] for name in PINS} == PINS

