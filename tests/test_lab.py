"""`make lab` (tinyagent/harness/lab.py): the lab works on copies, and nothing it saves reaches the
tracked notebooks whose stored outputs `make test` compares."""
import hashlib
import json

import pytest

from tinyagent.harness import lab

FIRST = "10.1_reference_policy.ipynb"


def digests(folder):
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.glob("*.ipynb"))}


def notebook(text):
    return json.dumps({"cells": [{"cell_type": "markdown", "metadata": {}, "source": [text]}],
                       "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


def test_the_lab_opens_runs_and_saves_a_copy_and_the_tracked_notebooks_stay_as_they_were(
        tmp_path, monkeypatch):
    """JupyterLab's own file manager, in-process and rooted where `make lab` roots it: open 10.1,
    autosave it untouched, run every cell in a kernel with progress bars on, save it. The copy
    changes; not one byte of notebooks/ does, and a path out of the lab is refused."""
    from jupyter_server.services.contents.filemanager import FileContentsManager
    from nbclient import NotebookClient
    from tornado.web import HTTPError

    before = digests(lab.NOTEBOOKS)
    copies = tmp_path / "lab"
    assert set(lab.working_copies(lab.NOTEBOOKS, copies).values()) == {"copied"}
    root = lab.jupyter_command(copies, root_user=False)[2]
    contents = FileContentsManager(root_dir=root.split("=", 1)[1])

    model = contents.get(FIRST, content=True, type="notebook")
    contents.save({"type": "notebook", "format": "json", "content": model["content"]}, FIRST)
    monkeypatch.setenv("TINYAGENT_PROGRESS", "1")                  # as `make lab` sets it
    executed = NotebookClient(model["content"], timeout=600, kernel_name="python3",
                              resources={"metadata": {"path": str(copies)}}).execute()
    contents.save({"type": "notebook", "format": "json", "content": executed}, FIRST)
    with pytest.raises(HTTPError):
        contents.save({"type": "notebook", "format": "json", "content": executed},
                      f"../{lab.NOTEBOOKS.name}/{FIRST}")

    assert digests(copies)[FIRST] != before[FIRST]                 # the lab saved its copy
    assert digests(lab.NOTEBOOKS) == before                        # and nothing else


def test_a_copy_follows_its_notebook_until_the_reader_changes_it(tmp_path):
    source, copies = tmp_path / "notebooks", tmp_path / "lab"
    source.mkdir()
    (source / "a.ipynb").write_text(notebook("a, first"))
    (source / "b.ipynb").write_text(notebook("b, first"))
    assert lab.working_copies(source, copies) == {"a.ipynb": "copied", "b.ipynb": "copied"}
    assert lab.working_copies(source, copies) == {"a.ipynb": "unchanged", "b.ipynb": "unchanged"}

    (source / "a.ipynb").write_text(notebook("a, pulled"))          # the notebook moves
    (copies / "b.ipynb").write_text(notebook("b, the reader's"))    # the reader edits b
    assert lab.working_copies(source, copies) == {"a.ipynb": "refreshed", "b.ipynb": "kept (yours)"}
    assert (copies / "a.ipynb").read_text() == notebook("a, pulled")
    assert (copies / "b.ipynb").read_text() == notebook("b, the reader's")

    (source / "b.ipynb").write_text(notebook("b, pulled"))          # now both moved
    assert lab.working_copies(source, copies)["b.ipynb"] == "set aside as b.mine.ipynb"
    assert (copies / "b.mine.ipynb").read_text() == notebook("b, the reader's")
    assert (copies / "b.ipynb").read_text() == notebook("b, pulled")

    (copies / "b.ipynb").write_text(notebook("b, edited again"))
    (source / "b.ipynb").write_text(notebook("b, pulled again"))
    assert lab.working_copies(source, copies)["b.ipynb"] == "set aside as b.mine-2.ipynb"
    assert (copies / "b.mine.ipynb").read_text() == notebook("b, the reader's")


def test_a_copy_without_a_record_is_never_overwritten(tmp_path):
    """A lab folder from before the record (or a lost .copies.json): keep the reader's file."""
    source, copies = tmp_path / "notebooks", tmp_path / "lab"
    source.mkdir()
    copies.mkdir()
    (source / "a.ipynb").write_text(notebook("tracked"))
    (copies / "a.ipynb").write_text(notebook("someone's"))
    assert lab.working_copies(source, copies) == {"a.ipynb": "set aside as a.mine.ipynb"}
    assert (copies / "a.mine.ipynb").read_text() == notebook("someone's")


def test_make_lab_starts_jupyter_on_the_copies():
    command = lab.jupyter_command(root_user=True)
    assert command[1] == "lab" and command[2] == f"--ServerApp.root_dir={lab.LAB}"
    assert command[-1] == "--allow-root" and "--allow-root" not in lab.jupyter_command(
        root_user=False)
    assert lab.LAB.parent == lab.NOTEBOOKS.parent and lab.LAB != lab.NOTEBOOKS


def test_the_copies_are_not_tracked():
    import subprocess
    done = subprocess.run(["git", "check-ignore", "-q", f"{lab.LAB.name}/{FIRST}"], cwd=lab.ROOT)
    assert done.returncode == 0, "lab/ must be git-ignored"
