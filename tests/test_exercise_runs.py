"""Tests of tinyagent.science.exercise_runs: the exercises ask the cache for the runs they name
(Section 10.7's own where they share a setting), and each table computes what its columns say on
made-up runs whose answers are known."""
import math

import pandas as pd
import pytest

from tinyagent.science import exercise_runs as ex
from tinyagent.science.claims import long_run_claims
from tinyagent.science.experiments import COMPARISON, seeded


def fake_run(entropies, kls=None, kl_coefs=None, **scores):
    """A run as the cache returns it: per-step logs and a held-out evaluation."""
    kls = kls or [0.1] * len(entropies)
    kl_coefs = kl_coefs or [0.3] * len(entropies)
    history = [{"step": i, "entropy": e, "kl": k, "kl_coef": b, "mismatch_kl": 0.0}
               for i, (e, k, b) in enumerate(zip(entropies, kls, kl_coefs))]
    ev = {"pass@1": 0.5, "pass@8": 0.9, "distinct": 4.0, "kl_to_ref": 0.2, "reads": 1.0,
          "malformed": 0.2, "passed_per_task": [16] * 10, **scores}
    return {"history": history, "eval": ev}


def test_jobs_are_the_exercises_runs_and_reuse_section_10_7s_settings():
    jobs = ex.exercise_jobs()
    assert len(jobs) == 32
    assert sum(steps == ex.LONG for _, steps, _ in jobs) == 6
    for (label, steps, seed), job in jobs.items():
        assert job["steps"] == steps and job["cfg"].seed == seed
        if label in COMPARISON:                       # the same configuration: the same cache entry
            assert job["cfg"] == seeded(COMPARISON[label], seed)
    calibration = [key for key in jobs if key[0] in {f"after obs {c}" for c in ex.CALIBRATION}]
    assert {seed for _, _, seed in calibration} == {0}
    assert list(jobs)[0][1] == ex.LONG                # the longest first


def test_exercise_runs_keys_each_result_by_its_job(monkeypatch):
    monkeypatch.setattr(ex, "regularized_runs",
                        lambda jobs, **kw: [(job["cfg"].seed, job["steps"]) for job in jobs])
    runs = ex.exercise_runs()
    assert all(runs[key] == (key[2], key[1]) for key in runs)


def test_steps_to_counts_steps_until_the_level_and_is_nan_when_never_reached():
    history = fake_run([0.5, 0.3, 0.08, 0.2])["history"]
    assert ex.steps_to(history, 0.3) == 2
    assert ex.steps_to(history, 0.08) == 3
    assert math.isnan(ex.steps_to(history, 0.01))


def test_late_entropy_averages_the_last_ten_of_forty_steps():
    run = fake_run([1.0] * 30 + [0.2] * 5 + [0.4] * 5)
    assert ex.late_entropy(run) == pytest.approx(0.3)


def test_claims_table_prints_each_claims_text_and_drops_text_and_book(capsys):
    by_seed = [{"none": fake_run([0.5, 0.05], **{"pass@8": 0.8}),
                "k3+": fake_run([0.5, 0.2], **{"pass@8": 0.9})}] * 3
    table = ex.claims_table(long_run_claims(low_entropy=0.08), by_seed)
    printed = capsys.readouterr().out
    assert "entropy_reaches_0.08  no regularizer" in printed
    assert "claim" not in table.columns and "book (one seed)" not in table.columns
    assert table.loc["pass8_below", "holds in"] == 3


@pytest.fixture
def runs():
    """Made-up runs for every key the tables read: 'none' ends at entropy 0.2 from 0.5 (a 60%
    fall), the beta 0.001 run at 0.25, and seed s adds s/10 to pass@8 of the beta run."""
    out = {}
    for (label, steps, seed) in ex.exercise_jobs():
        entropies = [0.5] + [0.3] * (steps - 2) + [0.2 if label == "none" else 0.25]
        kls = [0.2] * steps if label.startswith("target") else None
        pass8 = 0.8 + (seed / 10 if label == "k3 beta=0.001" else 0.0)
        out[(label, steps, seed)] = fake_run(entropies, kls, [0.3] * (steps - 1) + [0.4],
                                             **{"pass@8": pass8})
    return out


def test_review_table_is_beta_minus_none_seed_by_seed(runs):
    diff = ex.review_table(runs)
    assert list(diff.index) == list(ex.SEEDS)
    assert diff["pass@8"].tolist() == pytest.approx([s / 10 for s in ex.SEEDS])
    assert diff["entropy at 40"].tolist() == pytest.approx([0.05] * 3)
    assert diff["entropy fall"].tolist() == pytest.approx([0.5 - 0.6] * 3)


def test_entropy_falls_reads_the_fall_and_the_ends(runs):
    falls = ex.entropy_falls(runs)
    assert falls["no regularizer: entropy fall, lowest"] == pytest.approx(0.6)
    assert falls["beta 0.001: entropy at 40, highest"] == pytest.approx(0.25)
    assert falls["beta 0.001: entropy at step 0, lowest"] == pytest.approx(0.5)


def test_controller_drift_counts_steps_above_the_target_and_where_beta_ends(runs):
    drift = ex.controller_drift(runs)               # logged KL 0.2 at every step, beta ends at 0.4
    assert drift.loc["target 0.1", "steps of 40 with KL above target, most"] == 40
    assert drift.loc["target 0.3", "steps of 40 with KL above target, fewest"] == 0
    assert (drift["seeds ending above the start"] == 3).all()
    assert drift["beta at 40, lowest"].tolist() == pytest.approx([0.4] * 3)


def test_adaptive_tables_compare_each_target_with_none_at_the_same_seed(runs):
    seeds = ex.adaptive_seeds(runs)
    assert (seeds.xs("pass@8 - none's", axis=1, level=1) == 0).all().all()
    medians = ex.adaptive_table(runs)
    assert medians.loc["none", "reads / none's"] == 1.0
    assert medians.loc["target 0.1", "logged KL, last 10 steps"] == pytest.approx(0.2)


def test_entropy_ratio_divides_after_observation_by_uniform(runs):
    matched = ex.matched_table(runs)
    ratio = ex.entropy_ratio(matched)
    column = "entropy, last 10 steps"
    assert ratio.tolist() == pytest.approx((matched[("after obs 0.01", column)]
                                            / matched[("uniform 0.03", column)]).tolist())
    calibration = ex.calibration_table(runs)
    assert list(calibration.index) == [0.01, 0.015, 0.03, "uniform 0.03"]


def test_long_run_difference_pairs_by_seed_and_reports_each_spread():
    table = pd.DataFrame({"k3+ 0.05: pass@8 at 80": [0.9, 1.0, 0.95],
                          "none: pass@8 at 80": [0.8, 1.0, 0.7]})
    out = ex.long_run_difference(table)
    assert out["paired difference k3+ - none, mean"] == pytest.approx(0.35 / 3)
    assert out["paired difference, min"] == pytest.approx(0.0)
    assert out["spread over seeds, none"] == pytest.approx(0.3)
    assert out["spread over seeds, k3+ 0.05"] == pytest.approx(0.1)
