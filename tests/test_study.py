"""Tests of tinyagent.science.study: its records are plain data, refused when made by other code, and the
committed study holds every run it promises."""
import gzip
import json

import pytest

from tinyagent.science import study
from tinyagent.policy import Policy
from tinyagent.harness.runs import CODE_VERSION


def fake_run(seed=0):
    policy = Policy(seed=seed)
    return {"history": [{"step": 0, "entropy": 0.123456789, "reward": 0.5}],
            "eval": {"pass@1": 0.25, "passed_per_task": [0, 3, 16]},
            "state": dict(policy.state_dict())}


def test_a_record_identifies_the_runs_bits_and_keeps_what_the_claims_read():
    run = fake_run()
    r = study.record("none", "rl_base", 3, run)
    assert r["sha256"] == study.params_sha256(run["state"])
    assert r["sha256"] != study.params_sha256(fake_run(seed=1)["state"])
    assert r["history"][0]["entropy"] == 0.123457 and r["eval"]["passed_per_task"] == [0, 3, 16]
    assert r["code"] == CODE_VERSION and json.loads(json.dumps(r)) == r      # plain data


def test_records_of_other_code_or_a_damaged_file_say_to_run_make_study(tmp_path):
    path = tmp_path / "runs.jsonl.gz"
    other = {**study.record("none", "rl_base", 0, fake_run()), "code": "another version"}
    path.write_bytes(gzip.compress((json.dumps(other) + "\n").encode()))
    with pytest.raises(study.StaleStudy, match="make study"):
        study.load_records(path)
    assert study.load_records(path, check=False) == [other]
    path.write_bytes(b"not gzip")
    with pytest.raises(study.StaleStudy, match="make study"):
        study.load_records(path)


def test_records_group_by_agent_and_seed():
    records = [study.record(s, a, seed, fake_run()) for a in ("x", "y") for s in ("none", "k")
               for seed in (1, 0)]
    grouped = study.by_agent(records, settings=("none", "k"))
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
    from tinyagent.harness.runs import policy_digest
    built = json.loads(study.AGENT_RECORDS.read_text())
    assert len(study.AGENTS) == len(json.loads(study.PLAN.read_text())["design"]["agents"])
    assert all(v["inside"] for agent in study.AGENTS for v in built["checks"][agent].values())
    assert not set(built["rejected"]) & set(study.AGENTS)
    digests = {policy_digest(study.load_agent(agent)) for agent in study.AGENTS}
    assert len(digests) == len(study.AGENTS)                     # built independently


def test_the_declared_plan_names_every_claim_with_an_estimand_the_rule_knows():
    """tinyagent/data/study_plan.json, committed before the fresh draw: every claim of 10.7's table
    and figure and of 10.8's logs has one estimand of the rule's kinds; a rope goes only with an
    equivalence claim; the design's size is its agents x seeds x settings."""
    from tinyagent.science.claims import (beta_size_claims, comparison_claims,
                                          entropy_fall_claims, figure_claims)
    plan = json.loads((study.PACKAGE / "data" / "study_plan.json").read_text())
    claims = comparison_claims() + figure_claims() + entropy_fall_claims() + beta_size_claims()
    assert set(plan["claims"]) == {c.key for c in claims}
    kinds = set(plan["rule"]["estimands"])
    for key, entry in plan["claims"].items():
        assert entry["estimand"] in kinds and entry["why"], key
        assert ("rope" in entry) == (entry["estimand"] == "equivalence of the mean"), key
    design = plan["design"]
    assert len(design["agents"]) >= 5 and len(set(design["agents"])) == len(design["agents"])
    assert design["runs"] == len(design["agents"]) * 20 * len(study.SETTINGS)
