"""An ATEN_CPU_CAPABILITY the CPU cannot run is refused before torch computes (arithmetic.py).

Told a capability, torch does not check the CPU: under ATEN_CPU_CAPABILITY=avx512 on an AMD EPYC
Zen 3 (AVX2, no AVX-512) `make agents` died of SIGILL with nothing on stderr. These tests give the
check the flags of CPUs this project has met, so they hold on any machine; test_arithmetic.py
shows the refusal in a real process on a CPU without AVX-512.
"""
import pytest

from tinyagent.engine.arithmetic import PINS, check_aten_capability, runnable_pins

ZEN3 = {"sse4_2", "avx", "avx2", "fma", "sha_ni"}                      # AMD EPYC Zen 3
XEON = ZEN3 | {"avx512f", "avx512vl", "avx512bw", "avx512dq", "amx_tile"}   # Intel Xeon
OLD = {"sse4_2", "avx"}                                                # before AVX2


@pytest.mark.parametrize("value", ["default", "avx2", "AVX2", "bogus"])
def test_what_a_cpu_without_avx512_runs_passes(value):
    check_aten_capability({"ATEN_CPU_CAPABILITY": value}, ZEN3)   # "bogus": torch warns, ignores


def test_avx512_on_a_cpu_without_it_is_refused_naming_what_is_allowed():
    with pytest.raises(RuntimeError) as refused:
        check_aten_capability({"ATEN_CPU_CAPABILITY": "avx512"}, ZEN3)
    message = str(refused.value)
    assert "ATEN_CPU_CAPABILITY=avx512" in message and "illegal instruction" in message
    assert "avx512bw, avx512dq, avx512vl" in message                # what the CPU lacks
    assert "Allowed on this CPU: default, avx2 (the pin is avx2)" in message
    check_aten_capability({"ATEN_CPU_CAPABILITY": "avx512"}, XEON)  # where it runs: no error


def test_unset_or_an_unknown_cpu_is_left_to_torch():
    check_aten_capability({}, ZEN3)
    check_aten_capability({"ATEN_CPU_CAPABILITY": "avx512"}, None)    # not x86 Linux: unknown


def test_a_cpu_before_avx2_is_not_given_the_pin_that_would_stop_it():
    with pytest.raises(RuntimeError, match="Allowed on this CPU: default "):
        check_aten_capability({"ATEN_CPU_CAPABILITY": "avx2"}, OLD)
    assert "ATEN_CPU_CAPABILITY" not in runnable_pins(OLD, machine="x86_64")
    assert runnable_pins(ZEN3, machine="x86_64") == runnable_pins(XEON, machine="x86_64") == PINS
