"""README.md's generated part (.ci/readme.py): it is what the script makes of the stored outputs,
it follows them, and a hand edit is caught."""
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("readme", ROOT / ".ci" / "readme.py")
readme = importlib.util.module_from_spec(spec)
spec.loader.exec_module(readme)


def test_the_readmes_generated_part_is_what_the_stored_outputs_give():
    done = subprocess.run([sys.executable, str(ROOT / ".ci" / "readme.py"), "--check"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:]


def test_a_hand_edit_of_the_generated_part_is_caught():
    text = readme.README.read_text(encoding="utf-8")
    part = text.split(readme.BEGIN)[1].split(readme.END)[0]
    number = re.search(r"\d\.\d{3}", part).group()
    edited = text.replace(readme.BEGIN + part, readme.BEGIN + part.replace(number, "0.999", 1))
    assert edited != text
    assert readme.with_generated(edited, readme.generated()) == text


def test_the_part_follows_the_stored_outputs(tmp_path, monkeypatch):
    """Change one stored number of 10.7's table and the README's table changes with it."""
    copies = tmp_path / "notebooks"
    shutil.copytree(readme.NOTEBOOKS, copies)
    path = copies / "10.7_comparing_regularizers.ipynb"
    notebook = json.loads(path.read_text(encoding="utf-8"))
    before = readme.generated()
    medians = readme.medians_10_7()["k3+ beta=1.0"]["pass@1"]
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []):
            plain = output.get("data", {}).get("text/plain")
            if plain and readme.starting("entropy", "pass@1", "pass@8", "kl_to_ref")("".join(plain)):
                output["data"]["text/plain"] = [line.replace(f"  {medians}  ", "  0.111  ", 1)
                                                if line.startswith("k3+ beta=1.0") else line
                                                for line in plain]
    path.write_text(json.dumps(notebook), encoding="utf-8")
    monkeypatch.setattr(readme, "NOTEBOOKS", copies)
    after = readme.generated()
    assert after != before and "| k3+ β=1.0 | 0.444 (0.540) | 0.111 (0.230) |" in after


def test_an_output_the_script_reads_going_missing_names_the_notebook(tmp_path, monkeypatch):
    copies = tmp_path / "notebooks"
    shutil.copytree(readme.NOTEBOOKS, copies)
    path = copies / "10.8_design_problems.ipynb"
    notebook = json.loads(path.read_text(encoding="utf-8"))
    for cell in notebook["cells"]:
        cell["outputs"] = [] if cell["cell_type"] == "code" else cell.get("outputs")
        if cell["outputs"] is None:
            del cell["outputs"]
    path.write_text(json.dumps(notebook), encoding="utf-8")
    monkeypatch.setattr(readme, "NOTEBOOKS", copies)
    try:
        readme.generated()
    except readme.NotShown as err:
        assert "10.8_design_problems.ipynb" in str(err)
    else:
        raise AssertionError("an empty notebook should stop the script")


def test_the_readme_is_short_and_carries_no_commit_hash():
    text = readme.README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    assert not re.findall(r"(?<![\w./-])[0-9a-f]{7,40}(?![\w-])", text)


def test_make_notebooks_rewrites_the_generated_part():
    done = subprocess.run(["make", "-n", "--no-print-directory", "notebooks"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in __import__("os").environ.items()
                               if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "NOTEBOOKS")})
    lines = done.stdout.splitlines()
    executes = next(i for i, line in enumerate(lines) if "nbconvert" in line)
    assert any(".ci/readme.py" in line for line in lines[executes + 1:])


def test_the_readmes_reuse_example_runs(tmp_path):
    """The "Reuse in ten lines" block, run as a reader's script (two steps instead of forty)."""
    text = readme.README.read_text(encoding="utf-8")
    section = text.split("## Reuse in ten lines", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert len(code.strip().splitlines()) <= 10 and "steps=40" in code
    script = tmp_path / "reuse.py"
    script.write_text(code.replace("steps=40", "steps=2"))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    scores = done.stdout.strip().splitlines()[-1]
    assert all(key in scores for key in ("'pass@1'", "'pass@8'", "'kl_to_ref'"))
