"""`make doctor`: whether this machine's runs will reproduce the stored numbers, in a few lines.

    python -m tinyagent.harness.doctor                  the report (a few seconds: it computes the fingerprint)
    python -m tinyagent.harness.doctor --quiet-if-ok    nothing when the arithmetic matches (`make test`)

It reports the Python, the pinned packages against pyproject.toml's pins, the platform, the pins in
force (none off x86-64: they name x86 code), and whether the arithmetic fingerprint
(fingerprint.py) matches the stored one, and ends with one verdict (off x86-64: the digits will
differ, and the platform is why). The environment it judges is the one a notebook inherits: the
engine puts a pin only where the environment names no value of its own (engine/arithmetic.py), so
a value set in the shell, ONEDNN_MAX_CPU_ISA=SSE41 say, stays in force here as it would in a
Jupyter started from that shell, and is named as the setting that makes the difference.

make exports some pins itself, replacing the shell's values for its own targets; `make doctor`
passes the shell's values with --shell-env, and when they differ from make's the fingerprint is
also computed under the shell's (in a subprocess), since that is what a notebook started without
make computes under.
"""
import argparse
import os
import platform
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from . import fingerprint as fp
from .cache import ROOT
from .. import engine
from ..engine.arithmetic import PINS, cpu_flags, is_x86, mkl_branch, runnable_pins
from .fingerprint import OVERRIDES

STORED_PYTHON = (3, 11)              # the Python the stored outputs were written with (and CI runs)
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")   # the runs and the fingerprint set their own
ALIASES = {"DNNL_MAX_CPU_ISA": "ONEDNN_MAX_CPU_ISA"}          # oneDNN's older name for the same setting
MKL_BRANCHES = {0: "OFF", 1: "BRANCH_OFF", 2: "AUTO", 3: "COMPATIBLE", 4: "SSE2", 6: "SSSE3",
                7: "SSE4_1", 8: "SSE4_2", 9: "AVX", 10: "AVX2", 12: "AVX512", 14: "AVX512_E1"}
BIT_FOR_BIT = "your runs will reproduce the stored numbers bit for bit"
DIFFER = "your runs will differ in the digits; compare by the claims tables"


def pinned_requirements():
    """({name: version}, {name: version}): the runtime and the dev `name==version` pins of
    pyproject.toml (the checkout's, else the installed package's metadata)."""
    pyproject = ROOT / "pyproject.toml"
    if pyproject.exists():
        import tomllib
        project = tomllib.loads(pyproject.read_text())["project"]
        runtime = project["dependencies"]
        dev = [r for extra in project.get("optional-dependencies", {}).values() for r in extra]
    else:
        requires = metadata.requires("tinyagent") or []
        runtime = [r for r in requires if "extra ==" not in r]
        dev = [r.split(";")[0] for r in requires if "extra ==" in r]

    def pins(requirements):
        found = (re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*==\s*([^\s,;]+)\s*", r) for r in requirements)
        return {match[1].lower(): match[2] for match in found if match}
    return pins(runtime), pins(dev)


def installed(name, pinned):
    """(installed version or None, whether it is the pin; a local label like +cpu aside)."""
    try:
        version = metadata.version(name)
    except metadata.PackageNotFoundError:
        return None, False
    return version, version.split("+")[0] == pinned


def package_lines(runtime, dev):
    """(lines, all runtime pins installed): each runtime package's version, and the dev tools
    that differ from their pins."""
    shown, ok = [], True
    for name, pinned in runtime.items():
        version, same = installed(name, pinned)
        ok &= same
        shown.append(f"{name} {version or 'missing'}" + ("" if same else f" (pinned {pinned})"))
    off = [f"{name} {version or 'missing'} (pinned {pinned})"
           for name, pinned in dev.items() for version, same in [installed(name, pinned)] if not same]
    return [f"packages  {', '.join(shown)}",
            f"          dev tools: {', '.join(off) if off else 'as pinned'}"], ok


def cpu_model():
    """The CPU's name from /proc/cpuinfo (Linux), else what platform knows; and whether it has
    AVX-512, where the pins matter most (None: not an x86 CPU that Linux describes)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    model = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    flags = cpu_flags()
    return (model[1].strip() if model else platform.processor() or "unknown CPU",
            None if flags is None else "avx512f" in flags)


def overrides(environ):
    """The variables that can override a pin (fingerprint.OVERRIDES), set in `environ` to something
    other than the pin: {name: (value, pin or None)}. Thread counts are left out: the runs and the
    fingerprint set their own."""
    found = {}
    for name in OVERRIDES:
        if name in THREAD_VARIABLES or name not in environ:
            continue
        pin = PINS.get(ALIASES.get(name, name))
        if environ[name] != pin:
            found[name] = (environ[name], pin)
    return found


def describe(found):
    return ", ".join(f"{name}={value}" + (f" (pin: {pin})" if pin else " (no pin: unset)")
                     for name, (value, pin) in found.items())


def shell_environ(shell_env):
    """The environment a process started from the calling shell (without make) gets, once the
    engine's start has set the pins that apply here and it names no value for."""
    environ = dict(os.environ)
    for name in set(OVERRIDES) | set(PINS):
        environ.pop(name, None)
    environ.update(shell_env)
    for name, value in runnable_pins().items():
        environ.setdefault(name, value)
    return environ


def fingerprint_under(environ):
    """The fingerprint a fresh process computes under `environ`."""
    done = subprocess.run([sys.executable, "-m", "tinyagent.harness.fingerprint"], env=environ,
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"python -m tinyagent.harness.fingerprint failed:\n{done.stderr}")
    return done.stdout.split()[-1]


def _versions():
    """Python, the packages, torch and the platform: (lines, whether the packages are the pins)."""
    import torch
    version = sys.version_info[:2]
    stored = ".".join(map(str, STORED_PYTHON))
    note = ("the version the stored outputs were written with" if version == STORED_PYTHON
            else f"expected to match; the stored outputs were written with {stored}, which CI checks")
    lines = [f"python    {platform.python_version()} ({sys.executable}): {note}"]
    package, packages_pinned = package_lines(*pinned_requirements())
    build = (f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU-only build")
    lines += package
    lines.append(f"torch     {torch.__version__}, {build}, ATen kernels "
                 f"{torch.backends.cpu.get_cpu_capability()}")
    model, avx512 = cpu_model()
    lines.append(f"platform  {platform.system()} {platform.machine()}, {model}"
                 + {True: ", AVX-512", False: ", no AVX-512", None: ""}[avx512])
    lines.append(f"engine    {engine_line()}")
    return lines, packages_pinned


def engine_line():
    """Which engine computes, and for the kernels, the product kernel's path."""
    if engine.in_force() == "torch":
        why = ("TINYAGENT_ENGINE=torch" if engine.requested() == "torch"
               else "the C kernels are not built: `pip install -e .` with a C compiler")
        return f"torch ({why}): the plain modules and torch.optim.Adam, this machine's digits"
    from ..engine.matmul import IMITATE_NO_AVX512, IMITATING_NO_AVX512, use_path
    imitated = (f" ({IMITATE_NO_AVX512} imitates a CPU without AVX-512)"
                if IMITATING_NO_AVX512 else "")
    return (f"kernels (tinyagent/engine/): products on matmul.c's {use_path('fastest')} "
            f"path{imitated}; every path gives the same bits")


def pins_line(in_force, branch):
    """The pins in force, MKL's branch and what overrides a pin; off x86-64, that no pin is set
    (they name x86 code), and which of their variables the environment sets all the same."""
    if is_x86():
        pins = " ".join(f"{name}={os.environ.get(name, '(unset)')}" for name in PINS)
        return (f"pins      {pins}; MKL branch {branch}; "
                + (f"overridden: {describe(in_force)}" if in_force else "none overridden"))
    stray = [f"{name}={os.environ[name]}" for name in OVERRIDES
             if name in os.environ and name not in THREAD_VARIABLES]
    return (f"pins      none on {platform.machine()}: they name x86 code"
            + (f" (set in the environment all the same: {', '.join(stray)})" if stray else "")
            + f"; MKL branch {branch}")


def _arithmetic(in_force):
    """The pins, MKL's branch, the threads and the fingerprint against the stored one: (lines,
    whether it matches)."""
    import torch
    ours = fp.fingerprint()                          # computes: MKL's branch is known after it
    branch = mkl_branch()
    branch = ("unknown (this torch build hides MKL)" if branch is None
              else f"{branch} ({MKL_BRANCHES.get(branch & 0xFFFF, 'unknown')})")
    lines = [pins_line(in_force, branch)]
    threads = " ".join(f"{name}={os.environ[name]}" for name in THREAD_VARIABLES if name in os.environ)
    lines.append(f"threads   {threads or 'OMP_NUM_THREADS unset'}; torch uses "
                 f"{torch.get_num_threads()} here (runs and the fingerprint set their own)")
    stored_print = fp.EXPECTED[:12] if _recorded() else "(none recorded in this checkout yet)"
    matches = fp.matches()
    lines.append(f"arithmetic fingerprint {ours[:12]} " + ("matches the stored one" if matches
                 else f"is not the stored one {stored_print}"))
    return lines, matches


def _recorded():
    """Whether this checkout stores a real fingerprint (not the placeholder of a new one)."""
    return bool(re.fullmatch(r"[0-9a-f]{64}", fp.EXPECTED))


def _shell(shell_env, matches, in_force):
    """What a notebook started from the calling shell without make would compute, where make
    replaced a value that matters: (lines, whether it reproduces, the variables to blame)."""
    shell = shell_environ(shell_env)
    shell_found = overrides(shell)
    if shell_found == in_force:
        return [], True, in_force
    theirs = fingerprint_under(shell)
    shell_matches = theirs == fp.EXPECTED
    line = (f"shell     {describe(shell_found) or 'the pins'} in your shell: make's own "
            f"targets (make lab, make test) replace {'it' if len(shell_found) < 2 else 'them'} "
            f"and {'reproduce' if matches else 'differ'}; a notebook started from this "
            f"shell without make computes fingerprint {theirs[:12]}, which "
            + ("matches" if shell_matches else "does not match"))
    return [line], shell_matches, shell_found if not shell_matches else in_force


def _diagnosis(matches, packages_pinned, cause):
    """Where the bits part and why, for runs that will not reproduce."""
    lines = []
    if not matches:
        part, reaches = fp.first_difference()
        lines.append(f"where     the bits first part in the {part}: {reaches}")
    if not is_x86():
        lines.append(f"why       this is an {platform.machine()} machine: the stored outputs are "
                     f"x86-64's, and no setting changes that (make test compares what does not "
                     f"depend on the digits)")
        return lines
    if engine.in_force() == "torch":
        lines.append("why       the torch engine computes: the stored outputs are the kernels' "
                     "(unset TINYAGENT_ENGINE, or build the C extension)")
        return lines
    if not packages_pinned:
        lines.append("why       the installed packages are not pyproject.toml's pins: make setup")
    if cause:
        settings = " and ".join(f"{name}={value}" for name, (value, _) in cause.items())
        one = len(cause) == 1
        lines.append(f"why       {settings} make{'s' if one else ''} the difference: unset "
                     f"{'it' if one else 'them'} (`unset {' '.join(cause)}`) or set the pin, "
                     f"then start Jupyter again")
    elif _recorded():
        lines.append("why       no known variable overrides a pin: another CPU architecture, "
                     "another torch build, or a library nobody listed")
    else:
        lines.append("why       the stored fingerprint is a placeholder: nothing can match it yet")
    return lines


def report(shell_env=None):
    """(lines, reproduces): the report and whether the runs the verdict speaks of reproduce the
    stored numbers. `shell_env`: the calling shell's values of the arithmetic variables when make
    has replaced some of them (None: this process's environment is the shell's)."""
    lines, packages_pinned = _versions()
    in_force = overrides(os.environ)
    arithmetic, matches = _arithmetic(in_force)
    lines += arithmetic
    reproduces, cause = matches and is_x86(), in_force     # off x86-64 no bits are promised
    if shell_env is not None:
        shell, shell_matches, cause = _shell(shell_env, matches, in_force)
        lines += shell
        reproduces = reproduces and shell_matches
    if not reproduces:
        lines += _diagnosis(matches, packages_pinned, cause)
    lines.append(f"verdict   {BIT_FOR_BIT if reproduces else DIFFER}")
    return lines, reproduces


def parse_shell_env(items):
    """The NAME=value words make passes, one per variable, so a value may hold spaces or quotes."""
    pairs = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise SystemExit(f"--shell-env: {item!r} is not NAME=value")
        pairs[name] = value
    return pairs


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tinyagent.harness.doctor", description=__doc__.split("\n")[0])
    parser.add_argument("--quiet-if-ok", action="store_true",
                        help="print nothing when the runs will reproduce the stored numbers")
    parser.add_argument("--shell-env", nargs="*", metavar="NAME=value",
                        help="the calling shell's values of the arithmetic variables, one word "
                             "each (make passes them, since its exports replace some)")
    args = parser.parse_args(argv)
    shell_env = None if args.shell_env is None else parse_shell_env(args.shell_env)
    lines, reproduces = report(shell_env)
    if not (args.quiet_if_ok and reproduces):
        print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
