"""The fresh draw's committed records (study_runs.jsonl.gz) are what this code computes: one run per
base agent, each at another setting, recomputed bit for bit. rl_base's pick is seed 0, one of the
notebooks' live runs, so those are checked as a slice of the draw too."""
import pytest

from tinyagent.harness.runs import regularized_runs
from tinyagent.science import study

pytestmark = pytest.mark.recorded_bits


@pytest.fixture(scope="module")
def records():
    if not study.RECORDS.exists():
        pytest.skip(f"no record of the fresh draw is committed yet ({study.RECORDS.name}; make study)")
    return study.load_records(complete=False)


def test_the_committed_records_load_through_their_manifest(records):
    assert records and {r["agent"] for r in records} <= set(study.AGENTS)
    assert all(r["arithmetic"] == study.EXPECTED and r["steps"] == study.STEPS for r in records)


def test_one_run_per_agent_recomputes_bit_for_bit(records):
    picks = []
    for i, agent in enumerate(study.AGENTS):
        setting = study.SETTINGS[i % len(study.SETTINGS)]
        mine = sorted((r for r in records if r["agent"] == agent and r["setting"] == setting),
                      key=lambda r: r["seed"])
        picks += mine[:1]
    assert picks, "the committed records hold no pickable run"
    runs = regularized_runs([study.jobs(r["agent"], (r["setting"],), (r["seed"],))[0]
                             for r in picks], workers=2)
    for r, run in zip(picks, runs):
        again = study.record(r["setting"], r["agent"], r["seed"], run, r["arithmetic"])
        assert again["sha256"] == r["sha256"], (r["agent"], r["setting"], r["seed"])
        assert {k: v for k, v in again.items() if k != "code"} == {
            k: v for k, v in r.items() if k != "code"}        # the code hash is provenance
