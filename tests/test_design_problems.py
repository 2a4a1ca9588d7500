"""Tests of tinyagent.science.design_problems: Section 10.8's tables, on fabricated runs shaped like
the run cache's (and, for the reference's cost, the book's own arithmetic)."""
import math

import numpy as np
import pytest

from tinyagent.policy import Policy
from tinyagent.checkpoint import load_rl_base
from tinyagent.science import design_problems as D
from tinyagent.science.book import SECTION_10_7, SECTION_10_8
from tinyagent.science.claims import reset_claims
from tinyagent.science.pairs import by_seed

STEPS = 40


def run(entropy=0.4, reward=0.5, kl=0.1, zero_adv=0.0, steps=STEPS, **scores):
    """A run as the cache returns it: per-step logs (a number for every step, or a sequence) and a
    held-out evaluation."""
    def at(value, step):
        return float(value[step]) if np.ndim(value) else float(value)
    history = [{"entropy": at(entropy, s), "reward": at(reward, s), "kl": at(kl, s),
                "zero_adv_groups": at(zero_adv, s)} for s in range(steps)]
    scores = {"pass@1": 0.7, "pass@8": 0.9, "distinct": 6.0, "distinct_raw": 8.0, "reads": 1.0,
              "kl_to_ref": 0.2, **scores}
    return {"history": history, "eval": scores, "eval_vs_reference": dict(scores)}


def runs(seeds=3):
    """Five settings at `seeds` seeds; seed s's unregularized entropy starts at 0.5 + s / 100."""
    out = {label: [run() for _ in range(seeds)] for label in D.LABELS}
    for s in range(seeds):
        out["none"][s] = run(entropy=np.linspace(0.5 + s / 100, 0.2, STEPS), kl=0.3)
    return out


def reset_pair(reset_kl=0.03, anchored_kl=0.18, reset_pass1=0.79):
    anchored = run(steps=20, entropy=0.25, **{"pass@1": 0.73, "kl_to_ref": anchored_kl})
    reset = run(steps=20, entropy=0.2, **{"pass@1": reset_pass1, "kl_to_ref": 0.25, "distinct": 4.0,
                                          "distinct_raw": 6.5})
    reset["eval_vs_reference"]["kl_to_ref"] = reset_kl
    return {"anchored": anchored, "reset": reset}


def test_the_reference_costs_what_the_books_arithmetic_says():
    """The book's three numbers: 12.5% of the training state at every size, about 60 GiB for a
    32B reference, a quarter more compute a step."""
    cost = D.reference_cost()
    assert (cost["reference / training state"] == SECTION_10_8["reference_memory_ratio"]).all()
    assert round(cost.loc["32B", "bf16 reference (GiB)"]) == SECTION_10_8["reference_gib_32b"]
    assert (cost["extra compute"] == SECTION_10_8["reference_compute_extra"]).all()
    assert (cost["with reference"] - cost["step compute without reference"] == 1).all()


def test_model_size_counts_every_parameter_in_its_stored_bytes():
    size = D.model_size(Policy(seed=0))
    assert size["parameters"] == sum(p.numel() for p in Policy(seed=0).parameters())
    assert size["dtypes"] == "float32" and size["bytes"] == 4 * size["parameters"]


def test_history_table_sets_one_seed_beside_the_book_and_summarizes_the_seeds():
    r = runs()
    seed1 = D.history_table(r, seed=1)
    assert seed1.loc[("none", 0), ("entropy", "ours")] == 0.51
    assert seed1.loc[("none", 0), ("entropy", "book")] == SECTION_10_8["history"]["none"][0][0]
    assert math.isnan(seed1.loc[("k3+ beta=0.3", 0), ("entropy", "book")])   # not printed
    over = D.history_table(r)
    assert over.loc[("none", 0), ("entropy", "median")] == 0.51
    assert over.loc[("none", 0), ("entropy", "min")] == 0.5
    assert list(over.index.names) == ["run", "step"]


def test_early_fall_is_the_step_10_share_of_step_0_with_the_books_row_last():
    table = D.early_fall(by_seed(runs()))
    assert list(table.index) == [0, 1, 2, "book"]
    assert table.loc[0, "step 10 / step 0"] == pytest.approx(
        round(table.loc[0, "step 10"] / table.loc[0, "step 0"], 3), abs=1e-3)
    assert table.loc["book", "step 10 / step 0"] == round(0.37 / 0.56, 3)


def test_kl_tables_place_the_books_three_logged_numbers():
    r = runs()
    r["k3+ beta=0.3"][0] = run(kl=np.r_[np.zeros(20), np.full(20, 0.12)])
    log, outcome = D.kl_tables(r, seed=0)
    assert log.loc["k3+ beta=0.05", ("step 20", "book")] == SECTION_10_8["kl_log"]["k3+ beta=0.05"][20]
    assert outcome.loc["k3+ beta=0.3", ("mean, steps 20-39", "ours")] == 0.12
    assert outcome.loc["k3+ beta=0.3", ("mean, steps 20-39", "book")] == 0.1
    assert outcome.loc["k3+ beta=1.0", ("pass@1", "book")] == SECTION_10_7["k3+ beta=1.0"]["pass@1"]
    assert math.isnan(log.loc["none", ("step 20", "book")])
    log, outcome = D.kl_tables(r)
    assert outcome.loc["k3+ beta=0.3", ("max", "max")] == 0.12


def test_weak_penalty_is_the_ratio_of_the_late_means():
    r = runs()
    r["k3+ beta=0.05"] = [run(kl=0.15) for _ in range(3)]
    assert (D.weak_penalty(by_seed(r))["ratio"] == 0.5).all()


def test_a_policy_is_at_no_distance_from_itself_on_a_fresh_batch():
    base = load_rl_base()
    k3 = D.fresh_batch_k3(base, base, 100)          # the sampler's float64 log-probs: ~1e-13 apart
    assert k3.numel() > 0 and k3.abs().max() < 1e-9
    assert D.fresh_batch_k3(Policy(seed=0), base, 100).mean() > 0.01


def test_reset_tables_read_the_reference_in_force_and_count_the_books_direction():
    r, resets = runs(), [reset_pair(), reset_pair(reset_kl=0.2), reset_pair(reset_pass1=0.6)]
    seed0 = D.reset_table(r, resets, seed=0)
    assert seed0.loc["reset +20", ("kl_to_reference", "ours")] == 0.03
    assert seed0.loc["reset +20", ("kl_from_base", "ours")] == 0.25
    assert seed0.loc["reset +20", ("kl_to_reference", "book")] == 0.029
    paired = D.reset_paired(resets)
    direction = "seeds in the book's direction"
    assert paired.loc["kl_to_reference", direction] == 2                  # 0.2 > 0.18 at seed 1
    assert paired.loc["pass@1", direction] == 2                           # 0.6 < 0.73 at seed 2
    assert paired.loc["pass@1", "book"] == round(0.787 - 0.731, 3)
    assert math.isnan(paired.loc["entropy", "book"])                       # no anchored entropy
    assert D.reset_table(r, resets).loc["reset +20", ("kl_to_reference", "max")] == 0.2


def test_spellings_show_both_counts_and_the_books_one():
    table = D.spellings([reset_pair(), reset_pair()])
    assert table.loc[0, ("reset", "spellings apart")] == 6.5
    assert table.loc[0, ("reset", "spellings merged")] == 4.0
    assert table.loc["book", ("anchored", "spellings apart")] == 6.0
    assert math.isnan(table.loc["book", ("anchored", "spellings merged")])


def test_seed_by_seed_names_the_failing_seeds_and_shows_no_minus_zero():
    resets = [reset_pair(), reset_pair(reset_kl=0.2), reset_pair(reset_kl=0.18 - 1e-6)]
    table = D.seed_by_seed([(reset_claims(), resets)], seeds=(0, 1, 2))
    assert table.loc["reset_lowers_kl", "fails at seeds"] == "1"
    assert table.loc["reset_lowers_entropy", "fails at seeds"] == "none"
    value = table.loc["reset_lowers_kl", "seed 2"]              # -1e-6 rounds to 0.0, not -0.0
    assert value == 0.0 and math.copysign(1, value) == 1
