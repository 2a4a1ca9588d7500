"""Drop the per-machine parts of executed notebooks so re-execution gives the same bytes."""
import json
import sys

for path in sys.argv[1:]:
    with open(path) as f:
        nb = json.load(f)
    nb["metadata"].get("language_info", {}).pop("version", None)
    nb["metadata"].pop("widgets", None)
    for cell in nb["cells"]:
        cell.get("metadata", {}).pop("execution", None)
        for out in cell.get("outputs", []):
            # a progress bar's widget id changes every run; its text/plain stays and is compared
            out.get("data", {}).pop("application/vnd.jupyter.widget-view+json", None)
    with open(path, "w") as f:
        json.dump(nb, f, indent=1, ensure_ascii=False)
        f.write("\n")
