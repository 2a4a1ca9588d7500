"""science/draw3.py and the third draw's records: one file per agent, resumable, refused when its
plan or its starting checkpoint changed, and a stratified sample of the committed records
recomputed bit for bit."""
import json

import numpy as np
import pytest

from tinyagent.harness import runs as runs_module
from tinyagent.harness.runs import regularized_runs
from tinyagent.policy import Policy
from tinyagent.science import draw3, study


def fake_run(seed=0, steps=3):
    return {"history": [{"step": i, "entropy": 0.5, "reward": 0.5, "kl": 0.01} for i in range(steps)],
            "eval": {"pass@1": 0.25, "pass@8": 0.5, "reads": 0.2, "malformed": 0.1},
            "state": dict(Policy(seed=seed).state_dict())}


# ---------------------------------------------------------------- a small draw, one file per agent

@pytest.fixture
def small_draw(monkeypatch, tmp_path, draw_files):
    """A draw of agents a and b x 2 settings x 4 seeds of 3-step runs, one file per agent, with
    fake checkpoints, a plan and an agents file, and a fake trainer that counts its runs."""
    monkeypatch.setattr(study, "SETTINGS", ("none", "k"))
    monkeypatch.setattr(study, "SEEDS", (0, 1, 2, 3))
    monkeypatch.setattr(study, "STEPS", 3)
    monkeypatch.setattr(draw3, "SETTINGS", ("none", "k"))
    monkeypatch.setattr(draw3, "SEEDS", (0, 1, 2, 3))
    plan, agents = draw_files(("a", "b", "c"))
    draw = study.Draw("small draw", tmp_path / "draw_{agent}.jsonl.gz", agents, plan,
                      stamps_start=True, per_agent=True)
    trained = []

    def fake_runs(jobs, workers=None, desc=None, **_):
        trained.extend(jobs)
        return [fake_run(job["cfg"].seed) for job in jobs]

    monkeypatch.setattr(draw3, "regularized_runs", fake_runs)
    monkeypatch.setattr(draw3, "worker_fingerprint", lambda: study.EXPECTED)
    monkeypatch.setattr(draw3, "jobs", lambda agent, settings, seeds: [
        {"cfg": type("Cfg", (), {"seed": seeds[0]})(), "agent": agent, "setting": settings[0]}])
    return draw, trained


def test_each_agent_gets_its_own_file_and_a_rerun_computes_only_what_is_missing(small_draw):
    draw, trained = small_draw
    for agent in ("a", "b"):
        draw3.compute_agent(agent, draw, block=2)
    assert len(trained) == 2 * 2 * 4
    records = study.load_records(draw=draw)
    assert len(records) == 16 and {r["agent"] for r in records} == {"a", "b"}
    assert all(r["start_sha256"] == study.start_sha256(r["agent"]) for r in records)
    manifest = study._read_lines(study.records_path(draw, "a"))[0]["manifest"]
    assert manifest["plan"] == study.file_sha256(draw.plan) and manifest["design"]["agents"] == ["a"]
    trained.clear()
    draw3.compute_agent("a", draw, block=2)
    assert trained == []                                        # nothing is computed twice
    kept = [r for r in study.load_agent_records(draw, "b") if r["seed"] != 3]
    study._write(kept, draw=draw, agents=["b"])                 # a draw stopped mid-block
    with pytest.raises(study.StaleStudy, match="2 design cells have no record"):
        study.load_records(draw=draw)
    draw3.compute_agent("b", draw, block=2)
    assert sorted((j["setting"], j["cfg"].seed) for j in trained) == [("k", 3), ("none", 3)]
    assert len(study.load_records(draw=draw)) == 16


def _edit_plan(draw):
    draw.plan.write_text(json.dumps({"design": {"agents": ["a", "b"]}, "margin": 0.5}))


def _stray_file(draw):
    study._write([study.record("none", "c", 0, fake_run(), study.EXPECTED, study.start_sha256("c"))],
                 draw=draw, agents=["c"])


def _lost_file(draw):
    study.records_path(draw, "b").unlink()


def _swapped_checkpoint(draw):
    path = study.CHECKPOINTS / "a.pt"
    path.write_bytes(b"another agent")
    path.with_suffix(".sha256").write_text(study.file_sha256(path))


def _another_agents_file(draw):
    draw.agent_records.write_text(json.dumps({"agents": ["a"]}))


def _file_of_another_agent(draw):
    study.records_path(draw, "a").write_bytes(study.records_path(draw, "b").read_bytes())


@pytest.mark.parametrize("tamper, words", [
    (_edit_plan, ["plan.json", "not the plan these records were drawn under"]),
    (_stray_file, ["draw_c.jsonl.gz", "does not accept"]),
    (_lost_file, ["draw_b.jsonl.gz", "no records", "accepted agent b"]),
    (_swapped_checkpoint, ["started from checkpoint", "a's committed one"]),
    (_another_agents_file, ["1 base agents built of the 2"]),
    (_file_of_another_agent, ["draw_a.jsonl.gz", "design"]),
])
def test_a_per_agent_draw_is_refused_naming_what_changed(small_draw, tamper, words):
    draw, _ = small_draw
    for agent in ("a", "b"):
        draw3.compute_agent(agent, draw, block=4)
    tamper(draw)
    with pytest.raises(study.StaleStudy) as info:
        study.load_records(draw=draw)
    assert all(w in str(info.value) for w in words), str(info.value)


def _plan_with(tmp_path, **design):
    plan = tmp_path / "p.json"
    plan.write_text(json.dumps({"design": {"agents": ["agent_8"], "regime_bands": {
        m: list(b) for m, b in draw3.agents_module.REGIME.items()}, **design}}))
    return study.Draw("d", tmp_path / "d_{agent}.jsonl.gz", tmp_path / "a.json", plan,
                      stamps_start=True, per_agent=True)


@pytest.mark.parametrize("call, words", [
    (lambda t: draw3.plan_design(_plan_with(t, agents=["agent_8", "agent_3"])), ["new base agents", "agent_3"]),
    (lambda t: draw3.plan_design(_plan_with(t, agents=[])), ["new base agents"]),
    (lambda t: draw3.plan_design(_plan_with(t, regime_bands={"reads": [0, 1]})), ["regime bands", "agents.py"]),
    (lambda t: draw3.compute_agent("agent_9", _plan_with(t)), ["agent_9", "not an accepted agent"]),
    (lambda t: study.records_path(_plan_with(t)), ["one record file per agent", "name the agent"]),
    (lambda t: study.load_records(t / "x.jsonl.gz", draw=_plan_with(t)),
     ["one record file per agent", "load_agent_records"]),
    (lambda t: draw3.status(study.Draw("d", t / "x", t / "a.json", t / "missing.json")),
     ["missing.json", "cannot be read", "restore"]),
])
def test_odd_calls_are_refused_naming_what_is_allowed(tmp_path, call, words):
    with pytest.raises((study.StaleStudy, ValueError)) as info:
        call(tmp_path)
    assert all(w in str(info.value) for w in words), str(info.value)


def test_a_negative_number_of_agents_is_refused_before_any_work(capsys):
    with pytest.raises(SystemExit):
        draw3.main(["--agents", "-1"])
    assert "--agents must be a number of agents" in capsys.readouterr().err


# ---------------------------------------------------------------- the committed third draw

def test_the_plan_declares_new_agents_the_powered_size_and_a_why_for_every_goal():
    planned, bands = draw3.plan_design()
    plan = json.loads(study.THIRD.plan.read_text())
    assert not set(planned) & draw3.EXISTING and len(set(planned)) == len(planned)
    assert planned[0] == "agent_8" and len(planned) == 12
    assert plan["design"]["runs"] == len(planned) * len(study.SEEDS) * len(study.SETTINGS)
    assert "TBD" not in json.dumps(plan)
    assert len(plan["replication"]["goal"]["why"]) > 200 and len(plan["design"]["power"]) > 500


def test_the_accepted_agents_are_new_inside_the_bands_and_their_checkpoints_are_committed():
    if not study.THIRD.agent_records.exists():
        pytest.skip(f"no agent of the third draw is built yet ({study.THIRD.agent_records.name}; "
                    f"make draw3)")
    built = json.loads(study.THIRD.agent_records.read_text())
    _, bands = draw3.plan_design()
    assert not set(built["agents"]) & draw3.EXISTING and not set(built["agents"]) & set(built["rejected"])
    for agent in built["agents"]:
        assert all(v["inside"] and bands[m][0] <= v["value"] <= bands[m][1]
                   for m, v in built["checks"][agent].items()), agent
        assert built["sha256"][agent] == study.start_sha256(agent)
    for agent in built["rejected"]:
        assert not all(v["inside"] for v in built["checks"][agent].values()), agent


@pytest.fixture(scope="module")
def third_records():
    records = study.load_records(draw=study.THIRD, complete=False)
    if not records:
        pytest.skip("no record of the third draw is committed yet (make draw3)")
    return records


@pytest.mark.recorded_bits
def test_a_stratified_sample_of_the_third_draw_recomputes_bit_for_bit(third_records, monkeypatch,
                                                                      tmp_path):
    """Two runs: two strata (agent x setting) drawn at random among those recorded, two different
    agents where there are two and two different settings, recomputed in-process without the run
    cache (each about 4 s)."""
    rng = np.random.default_rng(len(third_records))
    strata = sorted({(r["agent"], r["setting"]) for r in third_records})
    picks, used = [], set()
    for i in rng.permutation(len(strata)):
        agent, setting = strata[i]
        if (agent in used and len({a for a, _ in strata}) > 1) or any(s == setting for _, s, _ in picks):
            continue
        seeds = sorted(r["seed"] for r in third_records if (r["agent"], r["setting"]) == (agent, setting))
        picks.append((agent, setting, int(rng.choice(seeds))))
        used.add(agent)
        if len(picks) == 2:
            break
    monkeypatch.setattr(runs_module, "CACHE_DIR", tmp_path)          # recomputed, not loaded
    by_cell = {(r["agent"], r["setting"], r["seed"]): r for r in third_records}
    again = regularized_runs([study.jobs(a, (s,), (seed,))[0] for a, s, seed in picks], workers=1,
                             progress=False)
    for (agent, setting, seed), run in zip(picks, again):
        r = by_cell[(agent, setting, seed)]
        mine = study.record(setting, agent, seed, run, r["arithmetic"], study.start_sha256(agent))
        assert mine["sha256"] == r["sha256"], (agent, setting, seed)
        assert {k: v for k, v in mine.items() if k != "code"} == {
            k: v for k, v in r.items() if k != "code"}          # the code hash is provenance
