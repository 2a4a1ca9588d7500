"""Drop the per-machine parts of executed notebooks so re-execution gives the same bytes."""
import json
import sys


def coalesced(outputs):
    """Consecutive pieces of one stream as one output: where the kernel cut a printed line
    depends on when it flushed (a line's text and its newline can arrive apart)."""
    merged = []
    for out in outputs:
        last = merged[-1] if merged else {}
        if out.get("output_type") == "stream" and last.get("output_type") == "stream" \
                and last.get("name") == out.get("name"):
            text = "".join(last["text"]) + "".join(out["text"])
            last["text"] = text.splitlines(keepends=True)
        else:
            merged.append(out)
    return merged


for path in sys.argv[1:]:
    with open(path) as f:
        nb = json.load(f)
    nb["metadata"].get("language_info", {}).pop("version", None)
    nb["metadata"].pop("widgets", None)
    for cell in nb["cells"]:
        cell.get("metadata", {}).pop("execution", None)
        if "outputs" in cell:
            cell["outputs"] = coalesced(cell["outputs"])
        for out in cell.get("outputs", []):
            # a progress bar's widget id changes every run; its text/plain stays and is compared
            out.get("data", {}).pop("application/vnd.jupyter.widget-view+json", None)
    with open(path, "w") as f:
        json.dump(nb, f, indent=1, ensure_ascii=False)
        f.write("\n")
