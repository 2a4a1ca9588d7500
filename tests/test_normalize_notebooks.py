""".ci/normalize_notebooks.py, which `make notebooks` runs on every executed notebook: what it
drops and merges, so that executing a notebook again gives the same bytes."""
import json
import subprocess
import sys

from tinyagent.harness.cache import ROOT


def stream(name, *text):
    return {"name": name, "output_type": "stream", "text": list(text)}


def normalized(tmp_path, notebook):
    path = tmp_path / "n.ipynb"
    path.write_text(json.dumps(notebook))
    subprocess.run([sys.executable, str(ROOT / ".ci" / "normalize_notebooks.py"), str(path)],
                   check=True)
    return json.loads(path.read_text())


def test_a_line_cut_from_its_newline_is_stored_as_one_stream_output(tmp_path):
    """Where the kernel flushed decides how a stream is cut into outputs; the text is what counts:
    consecutive pieces of one stream become one output, its text the pieces joined, in lines.
    Pieces of different streams, and outputs between them, stay apart."""
    figure = {"output_type": "display_data", "data": {"text/plain": ["<Figure>"]}, "metadata": {}}
    outputs = [stream("stdout", "900 runs\n", "180 runs"), stream("stdout", "\n"),
               stream("stderr", "a warning\n"), stream("stdout", "after\n"), figure,
               stream("stdout", "last\n")]
    notebook = {"metadata": {"language_info": {"name": "python", "version": "3.11.7"}},
                "nbformat": 4, "nbformat_minor": 5,
                "cells": [{"cell_type": "code", "source": "", "metadata": {},
                           "execution_count": 1, "outputs": outputs}]}
    cell = normalized(tmp_path, notebook)["cells"][0]
    assert cell["outputs"] == [stream("stdout", "900 runs\n", "180 runs\n"),
                               stream("stderr", "a warning\n"), stream("stdout", "after\n"),
                               figure, stream("stdout", "last\n")]


def test_the_machines_python_version_is_dropped(tmp_path):
    notebook = {"metadata": {"language_info": {"name": "python", "version": "3.11.7"}},
                "nbformat": 4, "nbformat_minor": 5, "cells": []}
    assert normalized(tmp_path, notebook)["metadata"] == {"language_info": {"name": "python"}}
