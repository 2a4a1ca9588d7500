"""environment.yml cannot be built here (no conda channel): check that its pins are pyproject's."""
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_environment_yml_pins_match_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pinned = set(project["dependencies"]) | set(project["optional-dependencies"]["dev"])
    yml = (ROOT / "environment.yml").read_text()
    listed = set(re.findall(r"^\s+- ([A-Za-z0-9_.-]+==[^\s]+)$", yml, re.M))
    assert listed == pinned
    assert re.search(r"^\s+- python=3\.11$", yml, re.M)
    assert re.search(r"^\s+- -e \.$", yml, re.M)
