"""`make lab`: JupyterLab on working copies of the notebooks, so that exploring never changes what
`make test` compares.

The notebooks in notebooks/ are tracked, and their stored outputs are the contract. JupyterLab
saves whatever it shows (autosave every two minutes, and Ctrl+S): changed metadata, a progress
widget, a half-run cell. So the lab is rooted in lab/ (git-ignored) and holds copies:

- a notebook without a copy is copied;
- a copy the reader has not changed follows its notebook (after a `git pull`, say);
- a copy the reader has changed is kept; if its notebook changed too, the reader's copy is set
  aside as `<name>.mine.ipynb` first and a fresh copy takes its place.

What "changed" means is kept in lab/.copies.json: the SHA-256 of each notebook and of its copy at
the time of copying. Jupyter's file manager refuses any path outside its root, so the server the
lab starts cannot write into notebooks/ at all.
"""
import argparse
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
LAB = ROOT / "lab"
MANIFEST = ".copies.json"


def _sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _free_name(copy):
    """`<stem>.mine.ipynb`, or `<stem>.mine-2.ipynb`, ... : the first name not taken."""
    for n in range(1, 1000):
        aside = copy.with_name(f"{copy.stem}.mine{'' if n == 1 else f'-{n}'}.ipynb")
        if not aside.exists():
            return aside
    raise RuntimeError(f"make lab: {copy.parent} holds 999 set-aside copies of {copy.name}")


def working_copies(source=NOTEBOOKS, lab=LAB):
    """Bring `lab`'s copies of `source`'s notebooks up to date (rules in the module's docstring);
    returns {notebook name: what was done}: "copied", "refreshed", "kept (yours)", "set aside as
    NAME", or "unchanged"."""
    source, lab = Path(source), Path(lab)
    lab.mkdir(parents=True, exist_ok=True)
    manifest_path = lab / MANIFEST
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    done = {}
    for notebook in sorted(source.glob("*.ipynb")):
        copy, name = lab / notebook.name, notebook.name
        tracked, record = _sha256(notebook), manifest.get(name)
        if not copy.exists():
            action = "copied"
        elif (current := _sha256(copy)) == tracked:
            action = "unchanged"
        elif record is not None and tracked == record["source"]:
            action = "kept (yours)"                       # only the copy moved: the reader's work
        elif record is not None and current == record["copy"]:
            action = "refreshed"                          # only the notebook moved
        else:                                             # both moved, or no record of the copy
            aside = _free_name(copy)
            shutil.copyfile(copy, aside)
            action = f"set aside as {aside.name}"
        if action != "kept (yours)":
            if action != "unchanged":
                shutil.copyfile(notebook, copy)
            manifest[name] = {"source": tracked, "copy": tracked}
        done[name] = action
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return done


def jupyter_command(lab=LAB, root_user=None):
    """The command `make lab` runs after the copies: JupyterLab rooted in `lab`. Jupyter refuses to
    start as root (as in many containers) unless told it may."""
    root_user = (os.geteuid() == 0) if root_user is None else root_user
    command = [str(Path(sys.executable).with_name("jupyter")), "lab",
               f"--ServerApp.root_dir={Path(lab).resolve()}"]
    return command + (["--allow-root"] if root_user else [])


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tinyagent.harness.lab",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--copies-only", action="store_true",
                        help="update lab/ and exit without starting JupyterLab")
    args = parser.parse_args(argv)
    done = working_copies()
    by_action = {}
    for name, action in done.items():
        if action not in ("unchanged", "kept (yours)"):
            by_action.setdefault(action, []).append(name.removesuffix(".ipynb"))
    for action, names in by_action.items():
        print(f"make lab: {action}: {', '.join(names)}")
    print(f"make lab: JupyterLab on {LAB.relative_to(ROOT)}/, your working copies (make test "
          f"compares notebooks/, which the lab does not open); open "
          f"10.1_reference_policy.ipynb first", flush=True)
    if args.copies_only:
        return 0
    command = jupyter_command()
    os.execv(command[0], command)


if __name__ == "__main__":
    sys.exit(main())
