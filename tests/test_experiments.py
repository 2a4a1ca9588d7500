"""Tests of tinyagent.science.experiments: the settings are the book's nine, in its order, and the seeded
runs are asked of the cache as one batch of jobs."""
from dataclasses import asdict

import pytest

from tinyagent.science import experiments
from tinyagent.science.book import SECTION_10_7
from tinyagent.science.experiments import COMPARISON, SEEDS, comparison_runs, seeded


def test_the_nine_settings_are_the_books_in_its_order():
    assert list(COMPARISON) == list(SECTION_10_7)
    assert len(set(SEEDS)) == 5 and 0 in SEEDS                    # five seeds, the book's among them
    assert all(cfg.seed == 0 for cfg in COMPARISON.values())        # seed 0: the book's layout


def test_seeded_changes_the_seed_and_nothing_else():
    cfg = COMPARISON["k3+ beta=0.3"]
    other = seeded(cfg, 3)
    assert other.seed == 3 and {**asdict(other), "seed": 0} == asdict(cfg)


def test_comparison_runs_asks_for_every_label_and_seed_once(monkeypatch):
    asked = []

    def fake_runs(jobs, **kwargs):
        asked.extend(jobs)
        return [(job["cfg"].kl_coef, job["cfg"].seed, job["steps"]) for job in jobs]

    monkeypatch.setattr(experiments, "regularized_runs", fake_runs)
    runs = comparison_runs(["none", "k3+ beta=1.0"], seeds=(0, 2), steps=80)
    assert runs == {"none": [(0.0, 0, 80), (0.0, 2, 80)], "k3+ beta=1.0": [(1.0, 0, 80), (1.0, 2, 80)]}
    assert len(asked) == 4


def test_unknown_settings_are_refused_with_the_known_ones_named():
    with pytest.raises(ValueError, match="Section 10.7's are .*'none'"):
        comparison_runs(["k4 beta=9"])
