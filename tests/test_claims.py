"""Tests of tinyagent.science.claims on per-seed results fabricated here, shaped as the notebooks build
them: every claim measures such a result without a missing key, a result built to satisfy a claim
scores "holds", a claim that fails at k seeds lands where the rule puts k, and the thresholds and
targets a function takes are the ones its claims use."""
import ast
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tinyagent.science import claims as C
from tinyagent.science.book import SECTION_10_7, SECTION_10_7_EXTRA, SECTION_10_8
from tinyagent.science.diagnostics import run_summary
from tinyagent.science.experiments import COMPARISON, SEEDS
from tinyagent.science.report import PASS1_NOISE, category, score_claims

STEPS = 40
N_TASKS = 10


# ----------------------------------------------------------------------------- fabricated runs

def history(steps=STEPS, **logged):
    """Per-step logs with every key a training log carries; a keyword gives one key's values, a
    number (every step) or a sequence (step by step)."""
    logs = []
    for step in range(steps):
        log = {"step": step, "reward": 0.5, "reads": 1.0, "malformed": 0.1, "policy_tokens": 12.5,
               "kl_coef": 0.0, "zero_adv_groups": 0.0, "entropy": 0.4, "kl": 0.1,
               "clip_frac": 0.001, "mismatch_kl": 0.0}
        for key, value in logged.items():
            log[key] = float(value[step]) if np.ndim(value) else float(value)
        logs.append(log)
    return logs


def evaluation(unsolved=0, **scores):
    """An `evaluate` result: pass@1, pass@8, distinct, reads, malformed, per-task passes (of 16)
    and the k3 distance from a reference."""
    out = {"pass@1": 0.7, "pass@8": 0.9, "distinct": 6.0, "distinct_raw": 8.0, "reads": 1.0,
           "malformed": 0.1,
           "passed_per_task": [0] * unsolved + [16] * (N_TASKS - unsolved), "kl_to_ref": 0.2}
    out.update(scores)
    return out


def run(logs=None, scores=None, vs_reference=None):
    """A run as the run cache returns it."""
    scores = evaluation(**(scores or {}))
    return {"history": logs if logs is not None else history(), "eval": scores,
            "eval_vs_reference": evaluation(**vs_reference) if vs_reference else scores,
            "state": {}}


def linear(start, end, steps=STEPS):
    return np.linspace(start, end, steps)


# ----------------------------------------------------------------------------- Section 10.7

# One seed's nine runs, built so that every statement of the chapter holds: the book's numbers
# where it prints them, values on the right side of each test where it does not.
TEXTBOOK = {   # label: (entropy start, end, pass@1, pass@8, distinct, distance, reads, malformed,
               #         tasks never solved, late batch reward)
    "none":            (0.52, 0.12, 0.725, 0.80, 4.3, 0.237, 1.00, 0.04, 2, 0.86),
    "k3+ beta=0.05":   (0.52, 0.15, 0.800, 1.00, 5.0, 0.200, 1.00, 0.05, 0, 0.85),
    "k3+ beta=0.3":    (0.52, 0.284, 0.588, 0.99, 8.3, 0.100, 0.90, 0.05, 0, 0.73),
    "k3+ beta=1.0":    (0.52, 0.54, 0.230, 0.90, 12.0, 0.020, 0.40, 0.05, 0, 0.40),
    "k3 beta=0.3":     (0.52, 0.294, 0.594, 0.95, 9.0, 0.090, 0.80, 0.05, 0, 0.70),
    "reward beta=0.3": (0.52, 0.40, 0.340, 0.95, 10.0, 0.059, 0.48, 0.05, 0, 0.50),
    "entropy 0.03":    (0.52, 0.31, 0.750, 0.85, 6.0, 0.325, 1.00, 0.28, 1, 0.86),
    "entropy 0.1":     (0.52, 5.707, 0.0, 0.0, 16.0, 8.0, 0.00, 6.00, 10, 0.00),
    "temperature 1.3": (0.78, 0.47, 0.700, 0.85, 5.0, 0.517, 1.00, 0.25, 1, 0.80),
}


def nine_runs(**changes):
    """{label: run_summary(run)} for one seed, as 10.7 builds it; `changes` maps a label to
    {summary column: value} overrides applied to the fabricated run."""
    out = {}
    for label, (start, end, p1, p8, distinct, distance, reads, malformed, unsolved,
                late) in TEXTBOOK.items():
        over = changes.get(label, {})
        logs = history(entropy=linear(start, over.get("entropy", end)),
                       reward=over.get("late_reward", late))
        scores = {"pass@1": over.get("pass@1", p1), "pass@8": over.get("pass@8", p8),
                  "distinct": over.get("distinct", distinct),
                  "kl_to_ref": over.get("kl_to_ref", distance),
                  "reads": over.get("reads", reads), "malformed": over.get("malformed", malformed)}
        out[label] = run_summary(run(logs, {"unsolved": over.get("unsolved", unsolved), **scores}))
    return out


def test_the_fabricated_runs_are_the_nine_settings():
    assert list(TEXTBOOK) == list(COMPARISON)


def test_every_claim_of_the_textbook_seed_holds():
    table = score_claims(C.comparison_claims(), [nine_runs() for _ in SEEDS])
    assert (table["category"] == "holds").all(), table.loc[table["category"] != "holds", "claim"]
    assert (table["holds in"] == len(SEEDS)).all()


@pytest.mark.parametrize("failing, expected", [(0, "holds"), (1, "holds"),
                                               (2, "depends on the seed"),
                                               (3, "depends on the seed"),
                                               (4, "does not hold"), (5, "does not hold")])
def test_a_claim_that_fails_at_some_seeds_gets_the_rules_category(failing, expected):
    # k3 ends 0.138 below k3+ in pass@1 at `failing` seeds: beyond the 0.08 noise there
    seeds = [nine_runs(**{"k3 beta=0.3": {"pass@1": 0.45}}) if i < failing else nine_runs()
             for i in range(len(SEEDS))]
    table = score_claims(C.comparison_claims(), seeds)
    assert table.loc["k3_vs_k3plus", "holds in"] == len(SEEDS) - failing
    assert table.loc["k3_vs_k3plus", "category"] == expected == category(len(SEEDS) - failing, 5)
    others = table.drop(index="k3_vs_k3plus")
    assert (others["category"] == "holds").all()           # nothing else reads that number


def test_the_noise_threshold_is_the_one_passed():
    seeds = [nine_runs(**{"k3 beta=0.3": {"pass@1": 0.488}}) for _ in SEEDS]    # |diff| 0.1
    tight = score_claims(C.comparison_claims(), seeds)
    loose = score_claims(C.comparison_claims(noise=0.15), seeds)
    assert tight.loc["k3_vs_k3plus", "category"] == "does not hold"
    assert loose.loc["k3_vs_k3plus", "category"] == "holds"
    assert f"within {PASS1_NOISE}" in tight.loc["k3_vs_k3plus", "claim"]
    assert "within 0.15" in loose.loc["k3_vs_k3plus", "claim"]
    assert tight.loc["k3_vs_k3plus", "median"] == pytest.approx(0.1)


def test_the_blind_ceiling_is_the_one_passed():
    seeds = [nine_runs(**{"k3+ beta=1.0": {"pass@1": 0.35}}) for _ in SEEDS]
    assert score_claims(C.comparison_claims(), seeds).loc["beta1_blind", "category"] == "does not hold"
    moved = score_claims(C.comparison_claims(blind_ceiling=0.3), seeds)
    assert moved.loc["beta1_blind", "category"] == "holds"
    assert moved.loc["beta1_blind", "median"] == pytest.approx(0.05)


def test_orderings_take_the_smallest_step():
    # k3+ entropy 0.15 -> 0.284 -> 0.27: one step down is enough to break "rises with beta"
    results = nine_runs(**{"k3+ beta=1.0": {"entropy": 0.27}})
    by_key = {claim.key: claim for claim in C.comparison_claims()}
    assert by_key["kl_entropy"].measure(results) == pytest.approx(0.27 - 0.284)
    assert not by_key["kl_entropy"].holds(by_key["kl_entropy"].measure(results))


def test_the_reward_claim_looks_at_every_other_setting():
    by_key = {claim.key: claim for claim in C.comparison_claims()}
    gain = by_key["no_reward_gain"]
    assert gain.holds(gain.measure(nine_runs()))
    raised = nine_runs(**{"temperature 1.3": {"late_reward": 0.9}})
    assert gain.measure(raised) == pytest.approx(0.9 - 0.86)
    assert not gain.holds(gain.measure(raised))


def test_the_book_column_is_the_books_own_arithmetic():
    book = {claim.key: claim.book for claim in C.comparison_claims()}
    assert book["collapse"] == pytest.approx(0.12 / SECTION_10_7_EXTRA["entropy_start"])
    assert book["kl005_pass8"] == pytest.approx(1.00 - 0.80)
    assert book["kl03_distinct"] == pytest.approx(8.3 - 4.3)
    assert book["k3_vs_k3plus"] == pytest.approx(abs(0.594 - 0.588))
    assert book["kl_distinct"] is None                      # the book prints one distinct count
    # where the book prints the quantity, its one run passes the claim's own test (all but the
    # claims our agent was built to question have the book's number on the holding side)
    for claim in C.comparison_claims():
        if claim.book is not None and claim.key != "kl005_pass8":
            assert claim.holds(claim.book), claim.key


# ----------------------------------------------------------------------------- Section 10.6

def clip_batch(after_02=0.432, after_028=0.441, after_free=0.477, share_02=0.73, share_028=0.82):
    """One clip-higher batch, with the keys `clip_batches.clip_higher_batch` returns."""
    kinds = {"opening verb": 64, "later verbs": 120, "argument": 180, "other": 170}
    out = {"batch": {"positive-advantage tokens": 150, "of which started < 0.5": 27,
                     "entropy before": 0.483, "P(read) opening": 0.19,
                     "P(2nd spelling) later": 0.10, "advantage of episodes that read": 0.4,
                     "kinds": kinds}}
    for eps, after, share in ((0.2, after_02, share_02), (0.28, after_028, share_028),
                              (math.inf, after_free, math.nan)):
        bounded = eps < math.inf
        out[eps] = {"above 1+eps_high": 30 if bounded else math.nan,
                    "of which started < 0.5": 22 if bounded else math.nan,
                    "share started < 0.5": share, "largest ratio": 8.8,
                    "entropy after": after, "P(read) opening": 0.2,
                    "P(2nd spelling) later": 0.12, "by kind": {k: 0.1 for k in kinds}}
    return out


def test_clip_higher_claims_on_batches_like_ours():
    table = score_claims(C.clip_higher_claims(), [clip_batch() for _ in range(10)])
    assert table["category"].to_dict() == {
        "rare_above_0.2": "holds", "rare_above_0.28": "holds", "rare_overrepresented": "holds",
        "tight_beats_free": "does not hold", "book_ordering": "does not hold",
        "free_keeps_most": "holds"}
    assert table.loc["rare_overrepresented", "median"] == pytest.approx(0.73 - 27 / 150, abs=1e-3)


def test_clip_higher_claims_on_the_books_ordering():
    books_way = [clip_batch(after_02=0.538, after_028=0.52, after_free=0.508) for _ in range(10)]
    table = score_claims(C.clip_higher_claims(), books_way)
    assert table.loc["tight_beats_free", "category"] == "holds"
    assert table.loc["book_ordering", "category"] == "holds"
    assert table.loc["free_keeps_most", "category"] == "does not hold"


def test_entropies_compare_at_the_books_three_decimals():
    tie = clip_batch(after_02=0.4321, after_028=0.4324, after_free=0.4)    # both print as 0.432
    by_key = {claim.key: claim for claim in C.clip_higher_claims()}
    assert C.entropy_after(tie, 0.2) == C.entropy_after(tie, 0.28) == 0.432
    assert by_key["book_ordering"].measure(tie) == 0
    assert by_key["book_ordering"].holds(0)


# ----------------------------------------------------------------------------- Section 10.8

def five_runs(none_entropy=(0.56, 0.37, 0.18), spike=None):
    """{label: run} for one seed, the five settings 10.8 reads, shaped after the book's logs."""
    e0, e10, e20 = none_entropy
    none_entropy = np.interp(range(STEPS), [0, 10, 20, 39], [e0, e10, e20, 0.1])
    flat_late = [0.0] * 10 + [0.25] * 20 + [0.5] * 10
    beta1_kl = np.full(STEPS, 0.02)
    if spike is not None:
        beta1_kl[spike[0]] = spike[1]
    return {
        "none": run(history(entropy=none_entropy, reward=linear(0.3, 0.86), kl=0.3,
                            zero_adv_groups=flat_late), {"reads": 1.0}),
        "k3+ beta=0.05": run(history(kl=0.25, reward=linear(0.3, 0.85))),
        "k3+ beta=0.3": run(history(entropy=0.30, kl=0.1, reward=linear(0.3, 0.73))),
        "k3+ beta=1.0": run(history(entropy=0.5, kl=beta1_kl, reward=0.3), {"reads": 0.4}),
        "entropy 0.03": run(history(entropy=0.30, reward=linear(0.3, 0.86))),
    }


def test_every_design_claim_holds_on_logs_shaped_like_the_books():
    seeds = [five_runs() for _ in SEEDS]
    for claims in (C.entropy_fall_claims(), C.beta_size_claims()):
        table = score_claims(claims, seeds)
        assert (table["category"] == "holds").all(), table.loc[table["category"] != "holds", "claim"]


def test_one_spike_breaks_a_bound_on_the_whole_run():
    for spiked, expected in ((1, "holds"), (2, "depends on the seed")):
        seeds = [five_runs(spike=(17, 0.318)) if i < spiked else five_runs()
                 for i in range(len(SEEDS))]
        table = score_claims(C.beta_size_claims(), seeds)
        assert table.loc["beta1_within_0.03", "category"] == expected
        assert table.loc["beta1_within_0.03", "max"] == pytest.approx(0.318)
    all_spiked = score_claims(C.beta_size_claims(), [five_runs(spike=(5, 0.04)) for _ in SEEDS])
    assert all_spiked.loc["beta1_within_0.03", "category"] == "does not hold"
    assert all_spiked.loc["beta1_within_0.03", "book (one seed)"] == 0.03


def test_a_third_of_the_entropy_in_ten_steps_is_the_chapters_line():
    by_key = {claim.key: claim for claim in C.entropy_fall_claims()}
    early = by_key["early_third"]
    assert early.holds(early.measure(five_runs(none_entropy=(0.48, 0.31, 0.2))))   # 0.646
    assert not early.holds(early.measure(five_runs(none_entropy=(0.48, 0.33, 0.2))))  # 0.688
    assert early.book == pytest.approx(0.37 / 0.56, abs=1e-3)


def test_the_same_reward_band_is_the_one_passed():
    seeds = [five_runs() for _ in SEEDS]
    for r in seeds:                                          # the bonus ends 0.15 below none
        r["entropy 0.03"] = run(history(entropy=0.30, reward=linear(0.3, 0.71)))
    narrow = score_claims(C.entropy_fall_claims(), seeds).loc["bonus_same_reward"]
    wide = score_claims(C.entropy_fall_claims(same_reward=0.2), seeds).loc["bonus_same_reward"]
    assert (narrow["category"], wide["category"]) == ("does not hold", "holds")
    assert "within 0.2 " in wide["claim"]


def test_the_plateau_band_is_a_factor_of_two_around_the_books_level():
    by_key = {claim.key: claim for claim in C.beta_size_claims()}
    near = by_key["beta0.3_near_0.1"]
    plateau = SECTION_10_8["kl_log"]["k3+ beta=0.3"]["plateau"]
    assert near.book == plateau
    assert near.holds(plateau / 2) and near.holds(plateau * 2)
    assert not near.holds(plateau / 2 - 1e-9) and not near.holds(plateau * 2 + 1e-9)


def reset_pair(anchored_kl=0.18, reset_kl=0.029, reset_pass1=0.787):
    """One seed's {"anchored", "reset"} pair, as experiments.reset_runs returns it. The reset arm
    is further from the RL base agent ("eval") while closer to its own reference."""
    anchored = run(history(steps=20, entropy=linear(0.25, 0.2, 20)),
                   {"pass@1": 0.731, "distinct": 6.0, "kl_to_ref": anchored_kl})
    reset = run(history(steps=20, entropy=linear(0.2, 0.135, 20)),
                {"pass@1": reset_pass1, "distinct": 4.6, "kl_to_ref": 0.25},
                vs_reference={"pass@1": reset_pass1, "distinct": 4.6, "kl_to_ref": reset_kl})
    return {"anchored": anchored, "reset": reset}


def test_reset_claims_read_the_reference_in_force():
    table = score_claims(C.reset_claims(), [reset_pair() for _ in SEEDS])
    assert (table["category"] == "holds").all()
    # against the reference in force (eval_vs_reference), not against the RL base agent
    assert table.loc["reset_lowers_kl", "median"] == pytest.approx(0.029 - 0.18)
    assert table.loc["reset_lowers_kl", "book (one seed)"] == pytest.approx(-0.151)
    lower = [reset_pair(reset_pass1=0.7) if i < 3 else reset_pair() for i in range(len(SEEDS))]
    assert score_claims(C.reset_claims(), lower).loc["reset_keeps_pass1", "category"] == \
        "depends on the seed"


# ----------------------------------------------------------------------------- the exercises

def test_long_run_claims_use_the_level_passed():
    seeds = [{"none": run(history(steps=80, entropy=linear(0.47, 0.09, 80)), {"pass@8": 0.9}),
              "k3+": run(history(steps=80), {"pass@8": 0.95})} for _ in range(3)]
    at_008 = score_claims(C.long_run_claims(), seeds)
    at_01 = score_claims(C.long_run_claims(low_entropy=0.1), seeds)
    assert at_008.loc["entropy_reaches_0.08", "category"] == "does not hold"
    assert at_01.loc["entropy_reaches_0.08", "category"] == "holds"
    assert at_008.loc["pass8_below", "category"] == "holds"


def test_each_adaptive_claim_reads_its_own_target():
    targets = (0.03, 0.1, 0.3)
    seed = {0.03: run(scores={"reads": 0.4, "pass@8": 0.95}),          # reads too few
            0.1: run(scores={"reads": 0.9, "pass@8": 0.85}),           # pass@8 below none's
            0.3: run(scores={"reads": 0.9, "pass@8": 0.9}),            # both tests pass
            "none": run(scores={"reads": 1.0, "pass@8": 0.9})}
    claims = C.adaptive_target_claims(targets)
    assert [claim.key for claim in claims] == ["target_0.03", "target_0.1", "target_0.3"]
    assert [claim.measure(seed) for claim in claims] == [0.0, 0.0, 1.0]
    table = score_claims(claims, [seed] * 3)
    assert table["category"].tolist() == ["does not hold", "does not hold", "holds"]


def test_bonus_position_claims():
    seed = {"uniform": run(scores={"malformed": 0.2, "pass@8": 0.9}),
            "after": run(scores={"malformed": 0.1, "pass@8": 0.9})}
    table = score_claims(C.bonus_position_claims(), [seed] * 3)
    assert (table["category"] == "holds").all()
    assert table.loc["fewer_malformed", "median"] == pytest.approx(-0.1)


def test_design_review_claims_on_a_share_row():
    share = pd.Series({"k3 on the batch": 0.5, "|grad pg_loss|": 1.0, "|grad 0.001 k3|": 0.004,
                       "ratio": 0.004, "cosine": 0.2, "groups with identical rewards": 0.4})
    seed = {"none": run(history(entropy=linear(0.47, 0.15)), {"pass@1": 0.75}),
            "beta": run(history(entropy=linear(0.47, 0.2)), {"pass@1": 0.72}),
            "share": share}
    table = score_claims(C.design_review_claims(), [seed] * 3)
    assert (table["category"] == "holds").all()
    assert table.loc["entropy_falls", "median"] == pytest.approx(1 - 0.2 / 0.47, abs=1e-3)
    strict = score_claims(C.design_review_claims(noise=0.02), [seed] * 3)
    assert strict.loc["same_pass1", "category"] == "does not hold"
    assert "beta 0.01" in C.design_review_claims(beta=0.01)[0].text


# ----------------------------------------------------------------------------- Figure 10.3

def figure_runs(**curves):
    """{label: run} for one seed, with the seven curves Figure 10.3 draws shaped as the chapter
    reads them; `curves` maps a label to {"entropy": ..., "reward": ...} replacements."""
    shapes = {"none": (linear(0.52, 0.12), linear(0.3, 0.86)),
              "k3+ beta=0.05": (linear(0.52, 0.15), linear(0.3, 0.85)),
              "k3+ beta=0.3": (linear(0.52, 0.28), linear(0.3, 0.73)),
              "k3+ beta=1.0": (np.full(STEPS, 0.52), np.full(STEPS, 0.3)),
              "k3 beta=0.3": (linear(0.52, 0.29), linear(0.3, 0.72)),
              "reward beta=0.3": (linear(0.52, 0.40), linear(0.3, 0.5)),
              "entropy 0.03": (linear(0.40, 0.31), linear(0.3, 0.86))}
    out = {}
    for label, (entropy, reward) in shapes.items():
        over = curves.get(label, {})
        out[label] = run(history(entropy=over.get("entropy", entropy),
                                 reward=over.get("reward", reward)))
    return out


def test_every_reading_of_the_figure_holds_on_curves_shaped_like_the_books():
    table = score_claims(C.figure_claims(), [figure_runs() for _ in SEEDS])
    assert (table["category"] == "holds").all(), table.loc[table["category"] != "holds", "claim"]


def test_figure_claims_read_window_means_not_single_steps():
    reward = linear(0.3, 0.86)
    reward[25] = 0.0                                     # one bad step moves its window by 1/10
    assert C.window_means(figure_runs(**{"entropy 0.03": {"reward": reward}}), "entropy 0.03",
                          "reward")[1] == pytest.approx(np.mean(linear(0.3, 0.86)[20:30])
                                                        - linear(0.3, 0.86)[25] / 10)
    by_key = {claim.key: claim for claim in C.figure_claims()}
    one_step = figure_runs(**{"entropy 0.03": {"reward": reward}})
    assert by_key["fig_bonus_reward"].holds(by_key["fig_bonus_reward"].measure(one_step))
    lower = figure_runs(**{"entropy 0.03": {"reward": linear(0.3, 0.86) - 0.15}})
    assert not by_key["fig_bonus_reward"].holds(by_key["fig_bonus_reward"].measure(lower))


def test_figure_claims_use_the_bands_passed_and_the_orders_break_on_one_crossing():
    apart = figure_runs(**{"k3 beta=0.3": {"entropy": linear(0.52, 0.45)}})
    strict = score_claims(C.figure_claims(), [apart] * 5).loc["fig_k3_entropy"]
    loose = score_claims(C.figure_claims(near_entropy=0.2), [apart] * 5).loc["fig_k3_entropy"]
    assert (strict["category"], loose["category"]) == ("does not hold", "holds")
    crossed = figure_runs(**{"k3+ beta=0.3": {"entropy": np.full(STEPS, 0.6)}})
    assert score_claims(C.figure_claims(), [crossed] * 5).loc["fig_kl_entropy", "category"] == \
        "does not hold"
    assert C.NEAR_ENTROPY == pytest.approx((0.3 - SECTION_10_7["none"]["entropy"]) / 2)


def test_failing_seeds_names_the_seeds_where_a_claim_fails():
    seeds = [nine_runs(**{"k3 beta=0.3": {"pass@1": 0.45}}) if i in (1, 3) else nine_runs()
             for i in range(len(SEEDS))]
    failed = C.failing_seeds(C.comparison_claims(), seeds, SEEDS)
    assert failed["k3_vs_k3plus"] == "1, 3"
    assert all(v == "" for k, v in failed.items() if k != "k3_vs_k3plus")


def test_scored_with_failures_adds_the_failing_seeds_to_the_claims_table():
    seeds = [nine_runs(**{"k3 beta=0.3": {"pass@1": 0.45}}) if i in (1, 3) else nine_runs()
             for i in range(len(SEEDS))]
    table = C.scored_with_failures(C.comparison_claims(), seeds, SEEDS)
    assert list(table.columns[:-1]) == list(score_claims(C.comparison_claims(), seeds).columns)
    assert table.loc["k3_vs_k3plus", "fails at seeds"] == "1, 3"
    assert table.loc["k3_vs_k3plus", "holds in"] == 3
    assert table.loc["collapse", "fails at seeds"] == ""


def test_pass1_gaps_count_only_beyond_the_noise():
    # the reward KL 0.05 below the lower loss placement: a sign, not a gap beyond 0.08
    seeds = [nine_runs(**{"reward beta=0.3": {"pass@1": 0.538}}) for _ in SEEDS]
    table = score_claims(C.comparison_claims(), seeds)
    assert table.loc["reward_pass1", "category"] == "does not hold"
    assert score_claims(C.comparison_claims(noise=0.04), seeds).loc["reward_pass1",
                                                                      "category"] == "holds"


# ----------------------------------------------------------------------------- every claim

ALL = {
    "figure": (C.figure_claims, figure_runs),
    "clip_higher": (C.clip_higher_claims, lambda: clip_batch()),
    "comparison": (C.comparison_claims, nine_runs),
    "entropy_fall": (C.entropy_fall_claims, five_runs),
    "beta_size": (C.beta_size_claims, five_runs),
    "reset": (C.reset_claims, reset_pair),
}


@pytest.mark.parametrize("name", list(ALL))
def test_every_claim_measures_a_result_shaped_as_the_notebook_builds_it(name):
    make_claims, make_result = ALL[name]
    claims = make_claims()
    keys = [claim.key for claim in claims]
    assert len(keys) == len(set(keys)) and all(claim.text for claim in claims)
    result = make_result()
    for claim in claims:
        value = float(claim.measure(result))
        assert math.isfinite(value), claim.key
        assert claim.holds(value) in (True, False), claim.key
        assert claim.book is None or isinstance(claim.book, (int, float)), claim.key


# ----------------------------------------------------------------------------- bad input

def test_nan_at_every_seed_is_an_error_naming_the_claim_not_a_verdict():
    seeds = [nine_runs(**{"none": {"entropy": math.nan}}) for _ in SEEDS]
    with pytest.raises(ValueError, match=r"claim 'collapse' measured a non-finite value at seed"):
        score_claims(C.comparison_claims(), seeds)
    with pytest.raises(ValueError, match=r"claim 'collapse' measured a non-finite value at seed"):
        C.failing_seeds(C.comparison_claims(), seeds, SEEDS)


def test_nan_at_one_seed_names_that_seed():
    seeds = [nine_runs(**{"none": {"entropy": math.nan}}) if i == 2 else nine_runs()
             for i in range(len(SEEDS))]
    with pytest.raises(ValueError, match=rf"at seed\(s\) {SEEDS[2]} \(nan\)"):
        C.failing_seeds(C.comparison_claims(), seeds, SEEDS)


@pytest.mark.parametrize("n_seeds", [len(SEEDS) - 1, len(SEEDS) + 1])
def test_failing_seeds_needs_one_seed_per_result(n_seeds):
    results = [nine_runs() for _ in SEEDS]
    with pytest.raises(ValueError, match=rf"one seed per result, got {n_seeds} seeds"):
        C.failing_seeds(C.comparison_claims(), results, list(range(n_seeds)))


def test_claims_need_results_for_at_least_one_seed():
    with pytest.raises(ValueError, match="at least one seed"):
        score_claims(C.comparison_claims(), [])


def test_window_means_of_a_run_shorter_than_its_windows_is_an_error():
    short = figure_runs()
    for label in short:
        short[label] = {"history": short[label]["history"][:25]}
    with pytest.raises(ValueError, match=r"'none' logged 'reward' for 25 steps, too few for the "
                                         r"windows \[\(20, 30\), \(30, 40\)\]"):
        C.window_means(short, "none", "reward")
    assert C.window_means(short, "none", "reward", windows=(slice(10, 20),)).shape == (1,)


# ----------------------------------------------------------------------------- the package

CLAIMS_DIR = Path(C.__file__).parent


@pytest.mark.parametrize("path", sorted(CLAIMS_DIR.glob("*.py")), ids=lambda p: p.name)
def test_each_claims_module_is_short_and_so_are_its_functions(path):
    text = path.read_text()
    assert len(text.splitlines()) < 300
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef):
            assert node.end_lineno - node.lineno + 1 <= 60, (path.name, node.name)


def test_every_name_the_notebooks_use_is_importable_from_the_package():
    notebooks = Path(C.__file__).parents[3] / "notebooks"
    used = set()
    for notebook in notebooks.glob("*.ipynb"):
        text = "\n".join("".join(cell["source"])
                         for cell in json.loads(notebook.read_text())["cells"])
        used |= set(re.findall(r"\bC\.([A-Za-z_]\w*)", text))
        for groups in re.findall(r"from tinyagent\.science\.claims import (?:\(([^)]*)\)|([^\n(]+))", text):
            used |= {name.strip() for name in ",".join(groups).split(",") if name.strip()}
    assert {"reset_claims", "scored_with_failures"} <= used      # the scan finds the imports
    assert all(hasattr(C, name) for name in used), sorted(n for n in used
                                                                   if not hasattr(C, n))



@pytest.mark.parametrize("results,label,key,message", [
    ({"none": {"history": [{"reward": 1.0}]}}, "bogus", "reward",
     r"no run 'bogus' in the seed's results; they hold \['none'\]"),
    ({"none": {"history": [{"reward": 1.0}]}}, "none", "bogus",
     r"the run 'none' did not log 'bogus' \(at step 0\); it logged \['reward'\]"),
    ({"none": {"eval": {}}}, "none", "reward", "the run 'none' must be a run"),
    ([{"history": []}], "none", "reward", "no run 'none'")])
def test_a_claim_reads_only_a_run_and_a_quantity_that_were_logged(results, label, key, message):
    from tinyagent.science.claims.figure import series
    with pytest.raises(ValueError, match=message):
        series(results, label, key)
