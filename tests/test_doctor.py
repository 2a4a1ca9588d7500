"""`make doctor` (tinyagent/harness/doctor.py) and the Makefile logic around it: the Python it picks, and
what `make clean` refuses."""
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tinyagent.harness import doctor
from tinyagent.arithmetic import PINS
from tinyagent.harness.fingerprint import OVERRIDES

ROOT = Path(__file__).resolve().parent.parent


def run_doctor(*args, **settings):
    """The doctor in a fresh process whose environment names none of the arithmetic variables
    except `settings`, as a shell would; (stdout, seconds)."""
    env = {name: value for name, value in os.environ.items() if name not in set(OVERRIDES) | set(PINS)}
    env.update(settings)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "tinyagent.harness.doctor", *args], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout, time.perf_counter() - start


@pytest.mark.recorded_bits
def test_doctor_says_bit_for_bit_under_the_pins_in_a_few_seconds():
    out, seconds = run_doctor()
    lines = out.splitlines()
    assert lines[-1] == f"verdict   {doctor.BIT_FOR_BIT}"
    assert "none overridden" in out and "matches the stored one" in out
    assert any(line.startswith("products  tinyagent/matmul.c on its ") for line in lines)
    assert len(lines) <= 12
    assert seconds < 30, f"make doctor took {seconds:.1f} s"      # ~5 s here, two cores busy


def test_doctor_names_the_override_a_notebook_would_inherit():
    """As `make test` runs it: silent when the runs reproduce, the report when they do not."""
    out, _ = run_doctor("--quiet-if-ok", ATEN_CPU_CAPABILITY="default")
    assert out.splitlines()[-1] == f"verdict   {doctor.DIFFER}"
    assert "why       ATEN_CPU_CAPABILITY=default makes the difference" in out
    assert "where     the bits first part in the sampling" in out


@pytest.mark.recorded_bits
def test_a_library_no_run_reaches_changes_nothing():
    """oneDNN at another ISA: no run computes with it, so the runs still reproduce."""
    out, _ = run_doctor(ONEDNN_MAX_CPU_ISA="SSE41")
    assert out.splitlines()[-1] == f"verdict   {doctor.BIT_FOR_BIT}"


def test_doctor_sees_the_shell_behind_makes_exports():
    """make exports pins of its own; the shell's value, which a Jupyter started without make
    inherits, still decides the verdict."""
    out, _ = run_doctor("--shell-env", "ATEN_CPU_CAPABILITY=default", "OMP_NUM_THREADS=4",
                        ATEN_CPU_CAPABILITY="avx2", OMP_NUM_THREADS="1")
    assert "shell     ATEN_CPU_CAPABILITY=default (pin: avx2) in your shell" in out
    assert "ATEN_CPU_CAPABILITY=default makes the difference" in out
    assert out.splitlines()[-1] == f"verdict   {doctor.DIFFER}"


@pytest.mark.recorded_bits
def test_quiet_if_ok_is_silent_when_the_runs_reproduce(capsys, monkeypatch):
    for name, value in PINS.items():
        monkeypatch.setenv(name, value)
    for name in set(OVERRIDES) - set(PINS):
        monkeypatch.delenv(name, raising=False)
    doctor.main(["--quiet-if-ok"])
    assert capsys.readouterr().out == ""


def test_overrides_leave_out_thread_counts_and_know_onednns_old_name():
    environ = {**PINS, "OMP_NUM_THREADS": "8", "DNNL_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "AUTO"}
    assert doctor.overrides(environ) == {"MKL_CBWR": ("AUTO", PINS["MKL_CBWR"])}
    assert doctor.overrides(PINS) == {}


def test_pins_are_read_from_pyproject():
    runtime, dev = doctor.pinned_requirements()
    assert runtime["torch"] and runtime["numpy"] and dev["pytest"]
    assert all(doctor.installed(name, pin)[1] for name, pin in runtime.items())


# The Makefile. Nothing here builds anything: make -n prints the recipes, and the interpreters are
# fakes on a PATH of their own.

def make(*args, path=None):
    env = dict(os.environ)
    env.pop("PYTHON", None)
    if path is not None:
        env["PATH"] = path
    return subprocess.run([shutil.which("make"), "--no-print-directory", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("venv", ["..", ".", "/tmp", "./x/../..", "", "a b", "~/v", "x'y"])
def test_clean_refuses_a_venv_outside_the_project(venv):
    done = make("-n", "clean", f"VENV={venv}")
    assert done.returncode != 0 and "refusing" in done.stderr
    assert "rm -rf" not in done.stdout


@pytest.mark.parametrize("spelling", ["{link}", "{link}/", "./{link}//", "{link}/sub"])
def test_clean_never_follows_a_symbolic_link(tmp_path, spelling):
    """A venv that links to a shared environment: rm -rf 'link/' would empty its target."""
    link = ROOT / f"link-{tmp_path.name}"
    (tmp_path / "pyvenv.cfg").write_text("")
    link.symlink_to(tmp_path)
    try:
        done = make("-n", "clean", "VENV=" + spelling.format(link=link.name))
    finally:
        link.unlink()
    assert done.returncode != 0 and "is a symbolic link" in done.stderr
    assert "rm -rf" not in done.stdout


def test_make_runs_only_in_the_project(tmp_path):
    """make -f path/Makefile from elsewhere would clean that directory's .cache."""
    done = subprocess.run([shutil.which("make"), "-n", "-f", str(ROOT / "Makefile"), "clean"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "refusing to run in" in done.stderr
    assert "rm -rf" not in done.stdout


@pytest.mark.parametrize("setting", [
    "TORCH_INDEX=https://example.invalid/simple numpy==1.0", "TORCH_INDEX=garbage",
    "CLUSTER=tcp://h:1 --workers 0", "CLUSTER=h", "NOTEBOOKS=missing.ipynb",
    "NOTEBOOKS=README.md", "NOTEBOOKS=", "VENV=", "VENV=a;b"])
def test_a_make_variable_of_the_wrong_form_is_refused_before_any_command(setting):
    done = make("-n", "-W", "pyproject.toml", "setup", "study", "notebooks", setting)
    name, _, value = setting.partition("=")
    assert done.returncode != 0 and "refusing" in done.stderr and name in done.stderr
    assert value.split()[0] in done.stderr if value else "empty" in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize("value", ["AVX2 SSE41", "AV'X2", "x'; echo INJECTED >&2; '"])
def test_the_shells_settings_reach_the_doctor_as_they_are(value):
    """Each value is one quoted word: spaces and quotes neither split it nor run anything."""
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": value}
    done = subprocess.run([shutil.which("make"), "--no-print-directory", "-n", "doctor",
                           f"SHELL_ARITHMETIC={value}"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    [line] = [line for line in done.stdout.splitlines() if "tinyagent.harness.doctor" in line]
    words = shlex.split(line)
    assert words[:4] == [".venv/bin/python", "-m", "tinyagent.harness.doctor", "--shell-env"]
    assert f"ONEDNN_MAX_CPU_ISA={value}" in words[4:] and all("=" in word for word in words[4:])


def test_clean_removes_the_venv_and_only_what_make_made():
    done = make("-n", "clean")
    assert done.returncode == 0
    assert "rm -rf -- '.venv' .pytest_cache .cache" in done.stdout


@pytest.fixture
def fake_path(tmp_path):
    """A PATH with the tools make's recipes use and no Python but the fakes `add` puts there."""
    for tool in ("sh", "sed", "grep", "cat", "touch", "mkdir", "env"):
        (tmp_path / tool).symlink_to(shutil.which(tool))

    def add(name, version):
        script = tmp_path / name
        script.write_text(f"#!/bin/sh\n[ \"$1\" = -c ] && case \"$2\" in *python_version*) "
                          f"echo {version};; esac\nexit 0\n")
        script.chmod(0o755)
    add.path = str(tmp_path)
    return add


def test_setup_prefers_311_then_the_newest_of_312_and_313(fake_path):
    fake_path("python3.12", "3.12.9")
    fake_path("python3.13", "3.13.2")
    done = make("-n", "-W", "pyproject.toml", "setup", path=fake_path.path)
    assert "'python3.13' -m venv .venv" in done.stdout
    fake_path("python3.11", "3.11.7")
    done = make("-n", "-W", "pyproject.toml", "setup", path=fake_path.path)
    assert "'python3.11' -m venv .venv" in done.stdout


def test_setup_says_in_one_line_what_it_found_and_what_it_needs(fake_path, tmp_path):
    fake_path("python3", "3.10.12")
    done = make("-W", "pyproject.toml", "setup", f"VENV={tmp_path / 'venv'}", path=fake_path.path)
    assert done.returncode != 0
    [line] = [line for line in done.stderr.splitlines() if line.startswith("make setup:")]
    assert "found python3 3.10.12" in line and "needs Python 3.11, 3.12 or 3.13" in line
    assert "PYTHON=" in line
    assert not (tmp_path / "venv").exists()


def test_torch_index_cpu_installs_torch_from_pytorchs_cpu_index():
    done = make("-n", "-W", "pyproject.toml", "setup", "TORCH_INDEX=cpu")
    assert "pip install --index-url 'https://download.pytorch.org/whl/cpu' 'torch==" in done.stdout
    assert "download.pytorch.org" not in make("-n", "-W", "pyproject.toml", "setup").stdout
