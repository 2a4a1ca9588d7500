"""`make doctor` (tinyagent/harness/doctor.py) and the Makefile logic around it: the Python it picks, and
what `make clean` refuses."""
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tinyagent.harness import doctor
from tinyagent.engine.arithmetic import PINS
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
    assert any(line.startswith("engine    kernels (tinyagent/engine/): products on matmul.c") for line in lines)
    assert len(lines) <= 12
    assert seconds < 30, f"make doctor took {seconds:.1f} s"      # ~5 s here, two cores busy


@pytest.mark.x86_64("the x86 pins, whose overrides the doctor names")
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


@pytest.mark.x86_64("the x86 pins, whose overrides the doctor names")
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


@pytest.mark.parametrize("stray", [None, "avx2"])
def test_on_aarch64_the_doctor_names_the_platform_and_lists_no_pin(monkeypatch, stray):
    """Faked here: an aarch64 machine, whose environment the engine gives no pin (they name x86
    code), or where the shell sets one all the same. The pins line lists none as in force, the
    verdict is that the digits differ, and the one reason given is the platform."""
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    for name in set(OVERRIDES) | set(PINS):
        monkeypatch.delenv(name, raising=False)
    if stray:
        monkeypatch.setenv("ATEN_CPU_CAPABILITY", stray)
    lines, reproduces = doctor.report()
    [pins] = [line for line in lines if line.startswith("pins ")]
    assert pins.startswith("pins      none on aarch64") and "x86" in pins
    assert ("ATEN_CPU_CAPABILITY=avx2" in pins.split("set in the environment")[-1]) == bool(stray)
    assert not any(f"{name}={value}" in pins.split("set in the environment")[0]
                   for name, value in PINS.items())
    [why] = [line for line in lines if line.startswith("why ")]
    assert "aarch64" in why and "x86-64" in why
    assert not reproduces and lines[-1] == f"verdict   {doctor.DIFFER}"
    assert "another CPU architecture" not in "\n".join(lines)
    assert doctor.runnable_pins() == {}
    assert not set(PINS) & set(doctor.shell_environ({}))          # a notebook's shell: no pin


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

# What a `make` that runs these tests passes to its children: its command line's variables
# (`make test PYTHON=...` puts PYTHON=... in MAKEFLAGS and in the environment) and its depth.
# The child `make` below is a make of its own, started as a reader starts one.
CALLERS_MAKE = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "MAKE_TERMOUT", "MAKE_TERMERR",
                "PYTHON", "TORCH_INDEX", "VENV", "NOTEBOOKS", "CLUSTER", "STRICT", "INSTRUCTIONS")


def child_env(**settings):
    """This process's environment without what a calling `make` passes down, plus `settings`."""
    env = {name: value for name, value in os.environ.items() if name not in CALLERS_MAKE}
    env.update(settings)
    return env


def make(*args, path=None):
    env = child_env(**({} if path is None else {"PATH": path}))
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
                          cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "refusing to run in" in done.stderr
    assert "rm -rf" not in done.stdout


@pytest.mark.parametrize("setting", [
    "TORCH_INDEX=https://example.invalid/simple numpy==1.0", "TORCH_INDEX=garbage",
    "CLUSTER=tcp://h:1 --workers 0", "CLUSTER=h", "NOTEBOOKS=missing.ipynb",
    "NOTEBOOKS=README.md", "NOTEBOOKS=", "VENV=", "VENV=a;b", "INSTRUCTIONS=yes"])
def test_a_make_variable_of_the_wrong_form_is_refused_before_any_command(setting):
    done = make("-n", "-W", "pyproject.toml", "setup", "study", "notebooks", setting)
    name, _, value = setting.partition("=")
    assert done.returncode != 0 and "refusing" in done.stderr and name in done.stderr
    assert value.split()[0] in done.stderr if value else "empty" in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize("value", ["AVX2 SSE41", "AV'X2", "x'; echo INJECTED >&2; '"])
def test_the_shells_settings_reach_the_doctor_as_they_are(value):
    """Each value is one quoted word: spaces and quotes neither split it nor run anything."""
    env = child_env(ONEDNN_MAX_CPU_ISA=value)
    done = subprocess.run([shutil.which("make"), "--no-print-directory", "-n", "doctor",
                           f"SHELL_ARITHMETIC={value}"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    [line] = [line for line in done.stdout.splitlines() if "tinyagent.harness.doctor" in line]
    words = shlex.split(line)
    assert words[:4] == [".venv/bin/python", "-m", "tinyagent.harness.doctor", "--shell-env"]
    assert f"ONEDNN_MAX_CPU_ISA={value}" in words[4:] and all("=" in word for word in words[4:])


@pytest.mark.parametrize("machine", ["aarch64", "x86_64"])
def test_make_exports_the_x86_pins_on_x86_64_only(tmp_path, machine):
    """On an aarch64 machine (a fake `uname` here) no recipe of make's gets an x86 pin: torch
    there warns about ATEN_CPU_CAPABILITY in every process, and nbval counts the warning."""
    uname = tmp_path / "uname"
    uname.write_text(f"#!/bin/sh\necho {machine}\n")
    uname.chmod(0o755)
    env = {name: value for name, value in child_env(PATH=f"{tmp_path}:{os.environ['PATH']}").items()
           if name not in PINS}
    done = subprocess.run([shutil.which("make"), "--no-print-directory", "--eval",
                           "pins-here: ; @env", "pins-here"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    exported = {line.partition("=")[0] for line in done.stdout.splitlines()} & set(PINS)
    assert exported == (set() if machine == "aarch64" else set(PINS))


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


def fake_setup(tmp_path, answers, *settings):
    """`make setup` for real, with a fake python3.11 whose venv holds a fake pip that logs its
    arguments, and PyTorch's CPU index answering or not (`answers`): (make's result, pip's calls)."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for tool in ("sh", "sed", "grep", "cat", "touch", "mkdir", "env", "chmod"):
        (bin_ / tool).symlink_to(shutil.which(tool))
    log = tmp_path / "pip.log"
    python = bin_ / "python3.11"
    python.write_text(f"""#!/bin/sh
case "$1 $2" in
  "-c "*python_version*) echo 3.11.7;;
  "-c "*urlopen*) exit {0 if answers else 1};;
  "-m venv") mkdir -p "$3/bin"; printf '#!/bin/sh\\necho "$*" >> {log}\\n' > "$3/bin/pip"; chmod +x "$3/bin/pip";;
esac
""")
    python.chmod(0o755)
    done = make("-W", "pyproject.toml", "setup", f"VENV={tmp_path / 'venv'}", *settings,
                path=str(bin_))
    return done, log.read_text().splitlines() if log.exists() else []


def torch_lines(done):
    return [line for line in done.stdout.splitlines() if line.startswith("make setup: torch")]


def test_setup_takes_pytorchs_cpu_index_when_it_answers(tmp_path):
    done, pip = fake_setup(tmp_path, answers=True)
    assert done.returncode == 0, done.stderr
    [line] = torch_lines(done)
    assert "CPU-only index" in line and "https://download.pytorch.org/whl/cpu" in line
    assert pip[1] == "install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0"
    assert pip[2] == "install -e .[dev]"


def test_setup_keeps_pips_own_configuration_when_the_cpu_index_is_out_of_reach(tmp_path):
    done, pip = fake_setup(tmp_path, answers=False)
    assert done.returncode == 0, done.stderr
    [line] = torch_lines(done)
    assert "pip's own configuration" in line and "did not answer" in line
    assert pip == ["install --upgrade pip", "install -e .[dev]"]


@pytest.mark.parametrize("setting, index", [("TORCH_INDEX=cpu", "https://download.pytorch.org/whl/cpu"),
                                            ("TORCH_INDEX=file:///opt/wheels", "file:///opt/wheels"),
                                            ("TORCH_INDEX=pip", None)])
def test_torch_index_decides_without_asking(tmp_path, setting, index):
    done, pip = fake_setup(tmp_path, not index, setting)      # the probe would say the opposite
    assert done.returncode == 0, done.stderr
    [line] = torch_lines(done)
    if index is None:
        assert "pip's own configuration (TORCH_INDEX=pip)" in line
        assert not any("--index-url" in call for call in pip)
    else:
        assert index in line and pip[1] == f"install --index-url {index} torch==2.13.0"


def test_a_callers_make_variables_do_not_reach_the_child_make(fake_path, monkeypatch):
    """`make test PYTHON=/x/python3.10` runs these tests; their child make must not see it."""
    fake_path("python3.11", "3.11.7")
    caller = {"MAKEFLAGS": " -- PYTHON=/nowhere/python3.10", "MAKELEVEL": "1",
              "PYTHON": "/nowhere/python3.10"}
    raw = subprocess.run([shutil.which("make"), "-n", "-W", "pyproject.toml", "setup"], cwd=ROOT,
                         env={**os.environ, **caller, "PATH": fake_path.path},
                         capture_output=True, text=True, timeout=60)
    assert "/nowhere/python3.10" in raw.stdout + raw.stderr        # what the tests used to inherit
    for name, value in caller.items():
        monkeypatch.setenv(name, value)
    done = make("-n", "-W", "pyproject.toml", "setup", path=fake_path.path)
    assert "'python3.11' -m venv .venv" in done.stdout and "/nowhere" not in done.stdout
