"""Tests of tinyagent.science.study: its records are plain data, refused when made by other code, and the
committed study holds every run it promises."""
import gzip
import json
import subprocess
import sys

import pytest

from tinyagent import files
from tinyagent.science import study
from tinyagent.policy import Policy
from tinyagent.harness.runs import CODE_VERSION


def fake_run(seed=0, steps=3):
    policy = Policy(seed=seed)
    return {"history": [{"step": i, "entropy": 0.123456789, "reward": 0.5, "kl": 0.01}
                        for i in range(steps)],
            "eval": {"pass@1": 0.25, "pass@8": 0.5, "reads": 0.2, "malformed": 0.1,
                     "passed_per_task": [0, 3, 16]},
            "state": dict(policy.state_dict())}


def test_a_record_identifies_the_runs_bits_and_keeps_what_the_claims_read():
    run = fake_run()
    r = study.record("none", "rl_base", 3, run, "f" * 64)
    assert r["sha256"] == study.params_sha256(run["state"])
    assert r["sha256"] != study.params_sha256(fake_run(seed=1)["state"])
    assert r["history"][0]["entropy"] == 0.123457 and r["eval"]["passed_per_task"] == [0, 3, 16]
    assert r["code"] == CODE_VERSION and json.loads(json.dumps(r)) == r      # plain data
    assert r["arithmetic"] == "f" * 64 and r["steps"] == 3       # the run's, not the design's


@pytest.fixture
def small_design(monkeypatch, tmp_path):
    """A 2 agents x 2 settings x 2 seeds design of 3-step runs, written by study._write."""
    monkeypatch.setattr(study, "AGENTS", ("a", "b"))
    monkeypatch.setattr(study, "SETTINGS", ("none", "k"))
    monkeypatch.setattr(study, "SEEDS", (0, 1))
    monkeypatch.setattr(study, "STEPS", 3)
    records = [study.record(s, a, seed, fake_run(seed), study.EXPECTED)
               for a in ("a", "b") for s in ("none", "k") for seed in (0, 1)]
    path = tmp_path / "runs.jsonl.gz"
    study._write(records, path)
    return path, records


def _lines(path):
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f]


def _rewrite(path, lines):
    path.write_bytes(gzip.compress("".join(json.dumps(x) + "\n" for x in lines).encode()))


def test_the_records_load_back_through_their_manifest(small_design):
    path, records = small_design
    key = lambda r: json.dumps(r, sort_keys=True)      # noqa: E731
    assert sorted(map(key, study.load_records(path))) == sorted(map(key, records))
    first = path.read_bytes()
    study._write(records[::-1], path)
    assert path.read_bytes() == first                   # the same bytes whatever the order


def _edit_number(lines):
    lines[1]["eval"]["pass@1"] = 0.3


def _zero_sha(lines):
    lines[1]["sha256"] = "0" * 64


def _cut_history(lines):
    lines[1]["history"] = lines[1]["history"][:1]


def _duplicate(lines):
    lines.append(dict(lines[1]))


def _conflict(lines):
    lines.append({**lines[1], "seed": lines[1]["seed"], "eval": {**lines[1]["eval"], "pass@1": 1.0}})


def _delete(lines):
    del lines[2]


def _rename_setting(lines):
    lines[1]["setting"] = "bogus"


def _nan(lines):
    lines[1]["eval"]["pass@1"] = float("nan")


def _string(lines):
    lines[1]["history"][0]["reward"] = "0.5"


def _no_design(lines):
    del lines[0]["manifest"]["design"]


def _records_listed_as_a_list(lines):
    lines[0]["manifest"]["records"] = list(lines[0]["manifest"]["records"])


@pytest.mark.parametrize("tamper, says", [
    (_no_design, "its manifest must be a mapping with a design"),
    (_records_listed_as_a_list, "records .a mapping of cell to SHA-256."),
    (_edit_number, "content differs from the manifest"), (_zero_sha, "content differs"),
    (_cut_history, "content differs"), (_duplicate, "recorded twice"),
    (_conflict, "recorded twice, differently"), (_delete, "in the manifest but not in the file"),
    (_rename_setting, "content differs"), (_nan, "content differs"), (_string, "content differs"),
])
def test_a_tampered_record_is_refused_and_named(small_design, tamper, says):
    path, _ = small_design
    lines = _lines(path)
    tamper(lines)
    _rewrite(path, lines)
    with pytest.raises(study.StaleStudy, match=says):
        study.load_records(path)


def test_a_consistent_forgery_is_still_refused_by_what_it_claims(small_design):
    """Even with its manifest recomputed, a record of another arithmetic, another step count, a
    NaN, a cell outside the design, or a design cell absent does not load."""
    path, records = small_design
    cases = {"arithmetic": {**records[0], "arithmetic": "e" * 64},
             "steps": {**records[0], "steps": 2},
             "not finite": {**records[0], "eval": {**records[0]["eval"], "pass@8": float("nan")}},
             "outside the design": {**records[0], "setting": "bogus"}}
    # each with a manifest that matches it, as a forger who reran the manifest would write
    for says, forged in cases.items():
        manifest_ok = [forged, *records[1:]]
        lines = [{"manifest": {"design": study.design(), "records": {
            f"{r['agent']}|{r['setting']}|{r['seed']}": study.record_digest(r)
            for r in manifest_ok}}}, *manifest_ok]
        _rewrite(path, lines)
        with pytest.raises(study.StaleStudy, match=says if says != "steps" else "for 2 steps"):
            study.load_records(path)
    study._write(records[1:], path)
    assert len(study.load_records(path, complete=False)) == len(records) - 1   # resumable
    with pytest.raises(study.StaleStudy, match="1 design cells have no record"):
        study.load_records(path)


def test_a_file_without_a_manifest_or_unreadable_says_to_run_make_study(tmp_path):
    path = tmp_path / "runs.jsonl.gz"
    _rewrite(path, [study.record("none", "a", 0, fake_run(), study.EXPECTED)])
    with pytest.raises(study.StaleStudy, match="no manifest line"):
        study.load_records(path)
    path.write_bytes(b"not gzip")
    with pytest.raises(study.StaleStudy, match="make study"):
        study.load_records(path)
    path.write_bytes(gzip.compress(b""))
    with pytest.raises(study.StaleStudy, match="no manifest line"):
        study.load_records(path)


def test_records_group_by_agent_and_seed():
    records = [study.record(s, a, seed, fake_run(), study.EXPECTED) for a in ("x", "y")
               for s in ("none", "k3 beta=0.3") for seed in (1, 0)]
    grouped = study.by_agent(records, settings=("none", "k3 beta=0.3"))
    assert list(grouped) == ["x", "y"] and len(grouped["x"]) == 2
    assert [per_seed["none"]["seed"] for per_seed in grouped["y"]] == [0, 1]


def test_the_committed_pilot_is_complete_and_every_record_carries_its_identity():
    records = study.load_pilot()
    seeds = {}
    for r in records:
        seeds.setdefault((r["agent"], r["setting"]), set()).add(r["seed"])
    assert set(seeds) == {(a, s) for a in study.PILOT_AGENTS for s in study.SETTINGS}
    assert all(found == set(study.SEEDS) for found in seeds.values())   # every seed, everywhere
    assert len(study.SEEDS) >= 20 and len(records) == len(seeds) * len(study.SEEDS)
    assert all(len(r["sha256"]) == 64 and len(r["history"]) == study.STEPS for r in records)
    assert study.PILOT.stat().st_size < 20e6                     # megabytes, not gigabytes


def test_the_draws_agents_are_the_plans_count_inside_its_bands_and_differ():
    from tinyagent.harness.runs import load_agent, policy_digest
    from tinyagent.science import agents
    if not agents.AGENT_RECORDS.exists():
        pytest.skip(f"the draw's agents are not built yet ({agents.AGENT_RECORDS.name}; make agents)")
    built = json.loads(agents.AGENT_RECORDS.read_text())
    assert len(agents.AGENTS) == len(json.loads(agents.PLAN.read_text())["design"]["agents"])
    assert all(v["inside"] for agent in agents.AGENTS for v in built["checks"][agent].values())
    assert not set(built["rejected"]) & set(agents.AGENTS)
    digests = {policy_digest(load_agent(agent)) for agent in agents.AGENTS}
    assert len(digests) == len(agents.AGENTS)                     # built independently


def test_the_declared_plan_names_every_claim_with_an_estimand_the_rule_knows():
    """tinyagent/data/study_plan.json, committed before the fresh draw: every claim of 10.7's table
    and figure and of 10.8's logs is in it, every claim it scores is one of them, and each has one
    estimand of the rule's kinds; a rope goes only with an
    equivalence claim; the design's size is its agents x seeds x settings."""
    from tinyagent.science.claims import (beta_size_claims, comparison_claims,
                                          entropy_fall_claims, figure_claims)
    plan = json.loads((study.PACKAGE / "data" / "study_plan.json").read_text())
    claims = comparison_claims() + figure_claims() + entropy_fall_claims() + beta_size_claims()
    scored = {k for k, entry in plan["claims"].items() if entry["estimand"] != "not scored"}
    assert scored <= {c.key for c in claims} <= set(plan["claims"])    # the unscored may be gone
    kinds = set(plan["rule"]["estimands"])
    for key, entry in plan["claims"].items():
        assert entry["estimand"] in kinds and entry["why"], key
        assert ("rope" in entry) == (entry["estimand"] == "equivalence of the mean"), key
    design = plan["design"]
    assert len(design["agents"]) >= 5 and len(set(design["agents"])) == len(design["agents"])
    assert design["runs"] == len(design["agents"]) * 20 * len(study.SETTINGS)


# ---------------------------------------------------------------- the plan, the starting checkpoint

@pytest.fixture
def stamped_draw(small_design, tmp_path, draw_files):
    """The small design as a draw that stamps its starting checkpoint and records its plan's
    digest: fake checkpoints a.pt and b.pt with their .sha256, a plan file and an agents file."""
    _, records = small_design
    plan, agents = draw_files(("a", "b"))
    draw = study.Draw("test draw", tmp_path / "draw.jsonl.gz", agents, plan, stamps_start=True)
    stamped = [{**r, "start_sha256": study.start_sha256(r["agent"])} for r in records]
    study._write(stamped, draw=draw)
    return draw, stamped


def test_a_stamped_draw_loads_and_its_manifest_holds_the_plans_digest(stamped_draw):
    draw, records = stamped_draw
    assert len(study.load_records(draw=draw)) == len(records)
    assert _lines(draw.records)[0]["manifest"]["plan"] == study.file_sha256(draw.plan)


def _edit_plan(draw, records):
    draw.plan.write_text(json.dumps({"design": {"agents": ["a", "b"]}, "resamples": 150}))


def _swap_checkpoint(draw, records):
    path = study.CHECKPOINTS / "a.pt"
    path.write_bytes(b"another agent")
    path.with_suffix(".sha256").write_text(study.file_sha256(path))


def _checkpoint_unlike_its_digest(draw, records):
    (study.CHECKPOINTS / "b.pt").write_bytes(b"edited")


def _unstamped(draw, records):
    study._write([{k: v for k, v in r.items() if k != "start_sha256"} for r in records], draw=draw)


def _truncated_agents(draw, records):
    draw.agent_records.write_text('{"agents": ["a", ')


@pytest.mark.parametrize("tamper, words", [
    (_edit_plan, ["plan", "not the plan these records were drawn under", "restore it from git"]),
    (_swap_checkpoint, ["started from checkpoint", "a's committed one"]),
    (_checkpoint_unlike_its_digest, ["b.pt", "is not the checkpoint"]),
    (_unstamped, ["no start_sha256"]),
    (_truncated_agents, ["agents.json", "cannot be read", "restore it"]),
])
def test_a_draw_is_refused_when_its_plan_or_its_starting_checkpoint_changed(stamped_draw, tamper, words):
    draw, records = stamped_draw
    tamper(draw, records)
    with pytest.raises(study.StaleStudy) as info:
        study.load_records(draw=draw)
    assert all(w in str(info.value) for w in words), str(info.value)


def test_the_fresh_draw_is_refused_when_its_plan_changed(small_design, tmp_path):
    path, _ = small_design
    plan = tmp_path / "study_plan.json"
    plan.write_text(study.FRESH.plan.read_text().replace('"resamples": 20000', '"resamples": 150'))
    edited = study.Draw("fresh draw", path, study.FRESH.agent_records, plan,
                        plan_sha256=study.FRESH.plan_sha256)
    with pytest.raises(study.StaleStudy, match="study_plan.json is not the plan"):
        study.load_records(path, draw=edited)
    assert study.file_sha256(study.FRESH.plan) == study.FRESH.plan_sha256   # the committed plan


def _forge(path, records, change):
    """Rewrite the file with `change` applied to its first record and a manifest recomputed to
    match, as a forger would."""
    forged = [change(json.loads(json.dumps(records[0]))), *records[1:]]
    _rewrite(path, [{"manifest": {"design": study.design(), "records": {
        f"{r.get('agent')}|{r.get('setting')}|{r.get('seed')}": study.record_digest(r)
        for r in forged}}}, *forged])


def _set(where, key, value):
    def change(r):
        (r["eval"] if where == "eval" else r["history"][1])[key] = value
        return r
    return change


@pytest.mark.parametrize("change, words", [
    (_set("eval", "pass@1", 7.5), ["out of range", "pass@1 7.5", "[0, 1]"]),
    (_set("eval", "pass@8", -0.1), ["out of range", "pass@8"]),
    (_set("history", "reward", -0.5), ["out of range", "step 1 reward -0.5"]),
    (_set("history", "entropy", 9.0), ["out of range", "entropy 9.0"]),
    (_set("eval", "reads", -1.0), ["out of range", "reads"]),
    (lambda r: {**r, "sha256": r["sha256"][:40]}, ["sha256 is not a SHA-256"]),
    (lambda r: {k: v for k, v in r.items() if k != "eval"}, ["no eval"]),
    (lambda r: {k: v for k, v in r.items() if k != "agent"}, ["no agent"]),
    (_set("eval", "pass@1", "0.5"), ["eval pass@1 '0.5'", "finite int or float"]),
    (_set("history", "kl", float("inf")), ["step 1 kl inf", "not finite"]),
])
def test_a_number_out_of_its_range_is_refused_whatever_the_manifest_says(small_design, change, words):
    path, records = small_design
    _forge(path, records, change)
    with pytest.raises(study.StaleStudy) as info:
        study.load_records(path)
    assert all(w in str(info.value) for w in words), str(info.value)


@pytest.fixture
def pilot_copy(tmp_path):
    path, manifest = tmp_path / "pilot.jsonl.gz", tmp_path / "pilot_manifest.json"
    path.write_bytes(study.PILOT.read_bytes())
    manifest.write_bytes(study.PILOT_MANIFEST.read_bytes())
    return path, manifest


def _pilot_edit(lines):
    lines[3]["eval"]["pass@1"] = 0.5


def _pilot_delete(lines):
    del lines[7]


def _pilot_duplicate(lines):
    lines.append(dict(lines[0]))


def _pilot_out_of_range(lines):
    lines[0]["eval"]["pass@1"] = 7.5


@pytest.mark.parametrize("tamper, words", [
    (_pilot_edit, ["content differs from the manifest"]),
    (_pilot_delete, ["in the manifest but not in the file"]),
    (_pilot_duplicate, ["recorded twice"]),
    (_pilot_out_of_range, ["content differs"]),
])
def test_the_pilot_is_checked_against_its_own_manifest(pilot_copy, tamper, words):
    path, manifest = pilot_copy
    assert len(study.load_pilot(path, manifest)) == 540
    lines = _lines(path)
    tamper(lines)
    _rewrite(path, lines)
    with pytest.raises(study.StaleStudy) as info:
        study.load_pilot(path, manifest)
    assert all(w in str(info.value) for w in words)


def test_a_pilot_number_out_of_range_is_refused_even_with_its_manifest_recomputed(pilot_copy):
    path, manifest = pilot_copy
    lines = _lines(path)
    lines[0]["history"][5]["reward"] = -0.25
    _rewrite(path, lines)
    study.write_pilot_manifest(path, manifest)
    with pytest.raises(study.StaleStudy, match="out of range: step 5 reward -0.25"):
        study.load_pilot(path, manifest)
    manifest.write_text("{ truncated")
    with pytest.raises(study.StaleStudy, match="pilot_manifest.json cannot be read"):
        study.load_pilot(path, manifest)


@pytest.mark.parametrize("records, settings, words", [
    ([], ("no such setting",), ["settings", "none"]),
    ([], "none", ["settings", "among"]),
    ("records", study.SETTINGS, ["records", "list"]),
    ([{"seed": 0, "setting": "none"}], study.SETTINGS, ["records", "agent, seed and setting"]),
])
def test_by_agent_refuses_what_would_leave_every_seed_out(records, settings, words):
    with pytest.raises((TypeError, ValueError)) as err:
        study.by_agent(records, settings)
    assert all(w in str(err.value) for w in words)


# The committed files the science layer reads when it is imported, each with the digest its reader
# compares: (the reader's module, the file's attribute, the digest's attribute)
COMMITTED_PLANS = {
    "the fresh draw's plan (agents, study, plan)":
        ("tinyagent.science.agents", "PLAN", "PLAN_SHA256"),
    "rule v2 (plan_v2)": ("tinyagent.science.plan_v2", "PLAN_V2_FILE", "PLAN_V2_SHA256"),
}


# Run in a fresh interpreter: the plan's bytes gain a newline (still the same JSON) only where the
# module named reads them while it is imported, so a reader that stops passing its digest is found
# even where another module's reader would refuse the same file first.
EDITED_PLAN_AT_IMPORT = """
import importlib, importlib.util, pathlib, sys
module = sys.argv[1]
target = importlib.util.find_spec(module).origin
real = pathlib.Path.read_bytes


def read_bytes(self):
    data = real(self)
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_name != "<module>":
        frame = frame.f_back
    edited = self.name.startswith("study_plan") and frame is not None \\
        and frame.f_code.co_filename == target
    return data + b"\\n" if edited else data


pathlib.Path.read_bytes = read_bytes
try:
    importlib.import_module(module)
except Exception as err:
    print(f"refused: {err}")
"""


@pytest.mark.parametrize("module", ["tinyagent.science.agents", "tinyagent.science.plan",
                                    "tinyagent.science.plan_v2"])
def test_every_reader_of_a_plan_at_import_compares_its_digest(module):
    done = subprocess.run([sys.executable, "-c", EDITED_PLAN_AT_IMPORT, module],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused:" in done.stdout and "is not the committed file" in done.stdout, (
        f"{module} imported an edited plan without a word: {done.stdout[-500:]}")


@pytest.mark.parametrize("name", list(COMMITTED_PLANS))
@pytest.mark.parametrize("tamper, words", [
    (lambda text: text.replace('"resamples": ', '"resamples": 1', 1),
     ["is not the committed file", "a changed rule is a new plan file", "restore it"]),
    (lambda text: text[:len(text) // 2], ["is not the committed file", "restore it"]),
])
def test_a_plan_edited_after_its_records_is_refused_where_it_is_read(name, tamper, words, tmp_path):
    """The readers at import compare the committed digest: an edited or truncated copy of the
    plan is refused naming the file (the committed one reads as it is)."""
    import importlib
    module, file, digest = COMMITTED_PLANS[name]
    module = importlib.import_module(module)
    path, sha = getattr(module, file), getattr(module, digest)
    assert files.read_json(path, "git checkout", sha256=sha)["rule"]
    copy = tmp_path / path.name
    copy.write_text(tamper(path.read_text()))
    with pytest.raises(study.StaleStudy) as info:
        study.read_json(copy, "git checkout of the committed plan", sha256=sha)
    assert all(w in str(info.value) for w in words + [path.name]), str(info.value)
