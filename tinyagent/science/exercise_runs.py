"""The TinyAgent runs of Exercises 3, 5, 6 and 7, asked of the run cache in one call, and the
tables the exercises notebook reads from them.

Every comparison pairs two settings at the same seed of the shipped RL base agent (seeds 0-2).
The 40-step `none`, `k3+ beta=0.05` and `entropy 0.03` runs are Section 10.7's (same
configurations, so the same cache entries). A run is keyed (label, steps, seed). Nothing that
trains or evaluates imports this module.
"""
import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..regularize import RegularizedConfig
from ..gym import HELDOUT_TASKS
from ..harness.runs import regularized_runs
from .book import CHAPTER_9
from .claims import (adaptive_target_claims, bonus_position_claims, design_review_claims,
                     long_run_claims)
from .diagnostics import training_mean
from .experiments import COMPARISON, STEPS, seeded
from .plots import PALETTE, REFERENCE_STYLE, use_style
from .report import PASS1_NOISE, paired_differences, score_claims

SEEDS = (0, 1, 2)
LONG = 80                         # Exercise 3's run length
LOW_ENTROPY = CHAPTER_9["entropy_step_80"]   # Exercise 3: Chapter 9's 0.08 nats after 80 steps
TARGETS = (0.03, 0.1, 0.3)        # Exercise 5's target KLs...
START_BETA = 0.3                  # ...each starting from beta = 0.3
AFTER_OBS_COEF = 0.01             # Exercise 6: of 0.01 and CALIBRATION's, the coefficient whose
                                  # entropy at seed 0 is nearest the uniform 0.03 bonus's
CALIBRATION = (0.015, 0.03)       # Exercise 6: more after-observation coefficients, seed 0 only
REVIEW_BETA = 0.001               # Exercise 7: verl's kl_loss_coef, with k3 (low_var_kl)
LATE = STEPS - 10                 # "the last 10 steps" of a 40-step run start here

SETTINGS = {
    **{label: COMPARISON[label] for label in ("none", "k3+ beta=0.05", "entropy 0.03")},
    **{f"target {t}": RegularizedConfig(kl_coef=START_BETA, kl_kind="k3+", kl_target=t)
       for t in TARGETS},
    **{f"after obs {c}": RegularizedConfig(entropy_coef=c, entropy_positions="after_observation")
       for c in (AFTER_OBS_COEF, *CALIBRATION)},
    "k3 beta=0.001": RegularizedConfig(kl_coef=REVIEW_BETA, kl_kind="k3"),
}


def exercise_jobs():
    """{(label, steps, seed): job}: Exercise 3's 80-step runs first (the longest), then every
    setting for 40 steps at each seed, the calibration coefficients at seed 0 only."""
    jobs = {(label, LONG, seed): {"cfg": seeded(COMPARISON[label], seed), "steps": LONG}
            for label in ("none", "k3+ beta=0.05") for seed in SEEDS}
    jobs.update({(label, STEPS, seed): {"cfg": seeded(cfg, seed), "steps": STEPS}
                 for label, cfg in SETTINGS.items() for seed in SEEDS
                 if not (label in {f"after obs {c}" for c in CALIBRATION} and seed != 0)})
    return jobs


def exercise_runs(**kwargs):
    """Every run of the exercises, {(label, steps, seed): run}, from the cache or computed in
    parallel workers the first time (`regularized_runs`, which takes `kwargs`)."""
    jobs = exercise_jobs()
    return dict(zip(jobs, regularized_runs(list(jobs.values()), **kwargs)))


def per_seed(runs, label, steps=STEPS):
    """`label`'s run at each of SEEDS."""
    return [runs[(label, steps, seed)] for seed in SEEDS]


def late_entropy(run):
    """A run's logged policy-token entropy averaged over its last 10 steps."""
    return float(training_mean([run], "entropy", first=LATE)[0])


def claims_table(claims, results_by_seed):
    """`report.score_claims` for claims the book never ran (so without its column): prints each
    claim's full text under its key, then returns the scores without the text."""
    table = score_claims(claims, results_by_seed).drop(columns="book (one seed)")
    width = max(len(key) for key in table.index) + 2
    print("\n".join(f"{key:{width}}{text}" for key, text in table["claim"].items()))
    return table.drop(columns="claim")


def steps_to(history, level):
    """The first step count after which the logged entropy is at or below `level` (NaN: never)."""
    return next((log["step"] + 1 for log in history if log["entropy"] <= level), math.nan)


def long_run_table(runs):
    """Exercise 3, per seed: when the unregularized run's entropy reaches LOW_ENTROPY, both
    settings' entropy after 80 steps, and their held-out pass@8 after 40 and 80 steps."""
    none, kl = per_seed(runs, "none", LONG), per_seed(runs, "k3+ beta=0.05", LONG)
    return pd.DataFrame({
        "none: steps to entropy 0.08": [steps_to(r["history"], LOW_ENTROPY) for r in none],
        "none: entropy at 80": [r["history"][-1]["entropy"] for r in none],
        "k3+ 0.05: entropy at 80": [r["history"][-1]["entropy"] for r in kl],
        "none: pass@8 at 40": [r["eval"]["pass@8"] for r in per_seed(runs, "none")],
        "k3+ 0.05: pass@8 at 40": [r["eval"]["pass@8"] for r in per_seed(runs, "k3+ beta=0.05")],
        "none: pass@8 at 80": [r["eval"]["pass@8"] for r in none],
        "k3+ 0.05: pass@8 at 80": [r["eval"]["pass@8"] for r in kl],
    }, index=pd.Index(SEEDS, name="seed"))


def long_run_difference(long_table):
    """Exercise 3: the paired pass@8 difference after 80 steps (k3+ - none), mean and range,
    beside each setting's spread over seeds, from `long_run_table`."""
    diff = paired_differences(long_table["k3+ 0.05: pass@8 at 80"],
                              long_table["none: pass@8 at 80"])
    spread = {name: long_table[f"{name}: pass@8 at 80"].max()
              - long_table[f"{name}: pass@8 at 80"].min() for name in ("none", "k3+ 0.05")}
    return pd.Series({"paired difference k3+ - none, mean": diff["mean"],
                      "paired difference, min": diff["min"], "paired difference, max": diff["max"],
                      "spread over seeds, none": spread["none"],
                      "spread over seeds, k3+ 0.05": spread["k3+ 0.05"]}, name="pass@8 at 80 steps")


def long_claims(runs):
    """Exercise 3's claims scored on the 80-step runs (`claims_table`)."""
    by_seed = [{"none": runs[("none", LONG, s)], "k3+": runs[("k3+ beta=0.05", LONG, s)]}
               for s in SEEDS]
    return claims_table(long_run_claims(low_entropy=LOW_ENTROPY), by_seed)


def per_task_table(runs):
    """Exercise 3: each held-out task's passes (of 16 attempts) after 80 steps, per setting and
    seed; the log-reading tasks marked."""
    labels = [f"task {i}" + (" (log)" if task.needs_log else "") for i, task in enumerate(HELDOUT_TASKS)]
    return pd.DataFrame({(name, seed): runs[(label, LONG, seed)]["eval"]["passed_per_task"]
                         for name, label in (("none", "none"), ("k3+ 0.05", "k3+ beta=0.05"))
                         for seed in SEEDS}, index=pd.Index(labels, name="held-out task"))


def adaptive_table(runs):
    """Exercise 5: per target (and no regularizer), the medians over seeds of the final beta,
    the logged KL over the last 10 steps, reads and pass@8, the last two also against none's."""
    def medians(label):
        rows = []
        for run, none in zip(per_seed(runs, label), per_seed(runs, "none")):
            ev, base = run["eval"], none["eval"]
            rows.append({"beta at step 40": run["history"][-1]["kl_coef"],
                         "logged KL, last 10 steps": np.mean([log["kl"] for log in run["history"][-10:]]),
                         "reads": ev["reads"], "reads / none's": ev["reads"] / base["reads"],
                         "pass@8": ev["pass@8"], "pass@8 - none's": ev["pass@8"] - base["pass@8"]})
        return pd.DataFrame(rows).median()
    table = pd.DataFrame({label: medians(label)
                          for label in [f"target {t}" for t in TARGETS] + ["none"]}).T
    table.index.name = "median over seeds"
    return table


def adaptive_claims(runs):
    """Exercise 5's claims: at each target, learns to read and keeps pass@8 (`claims_table`)."""
    by_seed = [{**{t: runs[(f"target {t}", STEPS, s)] for t in TARGETS},
                "none": runs[("none", STEPS, s)]} for s in SEEDS]
    return claims_table(adaptive_target_claims(TARGETS), by_seed)


def adaptive_seeds(runs):
    """Exercise 5, seed by seed: each target's reads over none's and pass@8 minus none's."""
    def against_none(t, seed):
        run, none = runs[(f"target {t}", STEPS, seed)]["eval"], runs[("none", STEPS, seed)]["eval"]
        return {"reads / none's": run["reads"] / none["reads"],
                "pass@8 - none's": run["pass@8"] - none["pass@8"]}
    table = pd.concat({f"target {t}": pd.DataFrame([against_none(t, s) for s in SEEDS], index=SEEDS)
                       for t in TARGETS}, axis=1)
    table.index.name = "seed"
    return table


def plot_adaptive(runs):
    """Exercise 5's figure: beta and the logged KL over the steps, per target and seed, with the
    unregularized runs' KL for reference."""
    use_style()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2), sharex=True)
    steps = np.arange(1, STEPS + 1)
    for color, t in zip(PALETTE, TARGETS):
        for i, run in enumerate(per_seed(runs, f"target {t}")):
            label = f"target {t}" if i == 0 else None
            axes[0].plot(steps, [log["kl_coef"] for log in run["history"]], color=color, lw=1, label=label)
            axes[1].plot(steps, [log["kl"] for log in run["history"]], color=color, lw=1, label=label)
        axes[1].axhline(t, color=color, ls="--", lw=0.8)
    for i, run in enumerate(per_seed(runs, "none")):
        style = dict(REFERENCE_STYLE, lw=1, label=REFERENCE_STYLE["label"] if i == 0 else None)
        axes[1].plot(steps, [log["kl"] for log in run["history"]], **style)
    axes[0].set(xlabel="GRPO step", ylabel=r"$\beta$", title=r"$\beta$ (start 0.3), seeds 0-2")
    axes[1].set(xlabel="GRPO step", ylabel="logged KL (k3, per token)", yscale="log",
                title="measured KL; dashed: the targets")
    axes[1].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def controller_drift(runs):
    """Exercise 5, per target over the seeds: the range of beta after 40 steps and of the number
    of steps whose measured KL is above the target, and at how many seeds beta ends above and below
    its start."""
    rows = {}
    for t in TARGETS:
        hist = [run["history"] for run in per_seed(runs, f"target {t}")]
        final = [h[-1]["kl_coef"] for h in hist]
        above = [sum(log["kl"] > t for log in h) for h in hist]
        rows[f"target {t}"] = {"beta at 40, lowest": min(final), "beta at 40, highest": max(final),
                               f"steps of {STEPS} with KL above target, fewest": min(above),
                               f"steps of {STEPS} with KL above target, most": max(above),
                               "seeds ending above the start": sum(b > START_BETA for b in final),
                               "seeds ending below the start": sum(b < START_BETA for b in final)}
    return pd.DataFrame.from_dict(rows, orient="index")


def calibration_table(runs):
    """Exercise 6 at seed 0: the late entropy and malformed calls of each after-observation
    coefficient, and of the uniform bonus of 0.03."""
    coefs = (AFTER_OBS_COEF, *CALIBRATION)
    table = pd.DataFrame({
        "entropy, last 10 steps": [late_entropy(runs[(f"after obs {c}", STEPS, 0)]) for c in coefs],
        "malformed per episode": [runs[(f"after obs {c}", STEPS, 0)]["eval"]["malformed"] for c in coefs],
    }, index=pd.Index(coefs, name="after-observation coefficient (seed 0)"))
    uniform = runs[("entropy 0.03", STEPS, 0)]
    table.loc["uniform 0.03"] = [late_entropy(uniform), uniform["eval"]["malformed"]]
    return table


def matched_table(runs):
    """Exercise 6, per seed: the uniform bonus of 0.03 and the after-observation bonus side by
    side (late entropy, malformed calls, pass@1, pass@8, reads)."""
    def row(run):
        ev = run["eval"]
        return {"entropy, last 10 steps": late_entropy(run), "malformed": ev["malformed"],
                "pass@1": ev["pass@1"], "pass@8": ev["pass@8"], "reads": ev["reads"]}
    table = pd.concat({label: pd.DataFrame([row(r) for r in per_seed(runs, setting)], index=SEEDS)
                       for label, setting in (("uniform 0.03", "entropy 0.03"),
                                              (f"after obs {AFTER_OBS_COEF}", f"after obs {AFTER_OBS_COEF}"))},
                      axis=1)
    table.index.name = "seed"
    return table


def entropy_ratio(matched):
    """Exercise 6, per seed: the after-observation bonus's late entropy over the uniform one's."""
    column = "entropy, last 10 steps"
    return (matched[(f"after obs {AFTER_OBS_COEF}", column)] / matched[("uniform 0.03", column)]
            ).rename("after-observation / uniform entropy")


def bonus_claims(runs):
    """Exercise 6's claims on the matched bonuses (`claims_table`)."""
    by_seed = [{"uniform": runs[("entropy 0.03", STEPS, s)],
                "after": runs[(f"after obs {AFTER_OBS_COEF}", STEPS, s)]} for s in SEEDS]
    return claims_table(bonus_position_claims(), by_seed)


def _review_row(run):
    ev, history = run["eval"], run["history"]
    return {"pass@1": ev["pass@1"], "pass@8": ev["pass@8"], "distinct": ev["distinct"],
            "entropy at 40": history[-1]["entropy"], "KL from start": ev["kl_to_ref"],
            "entropy fall": 1 - history[-1]["entropy"] / history[0]["entropy"]}


def review_table(runs):
    """Exercise 7, per seed: the run at beta = REVIEW_BETA minus the unregularized run."""
    review = {label: pd.DataFrame([_review_row(r) for r in per_seed(runs, label)], index=SEEDS)
              for label in ("k3 beta=0.001", "none")}
    diff = review["k3 beta=0.001"] - review["none"]
    diff.index.name = "seed"
    return diff


def review_claims(runs, shares):
    """Exercise 7's claims, with `shares` (one row per seed holding "ratio", the KL term's
    gradient norm over the policy loss's; `batch_probes.gradient_shares`)."""
    by_seed = [{"none": runs[("none", STEPS, s)], "beta": runs[("k3 beta=0.001", STEPS, s)],
                "share": shares.loc[s]} for s in SEEDS]
    return claims_table(design_review_claims(beta=REVIEW_BETA, noise=PASS1_NOISE), by_seed)


def entropy_falls(runs):
    """Exercise 7, over seeds: the range of the unregularized run's entropy fall in 40 steps, and
    where the run at beta = REVIEW_BETA starts (lowest) and ends (range)."""
    none_fall = [_review_row(r)["entropy fall"] for r in per_seed(runs, "none")]
    beta = per_seed(runs, "k3 beta=0.001")
    ends = [r["history"][-1]["entropy"] for r in beta]
    return pd.Series({"no regularizer: entropy fall, lowest": min(none_fall),
                      "no regularizer: entropy fall, highest": max(none_fall),
                      "beta 0.001: entropy at step 0, lowest": min(r["history"][0]["entropy"] for r in beta),
                      "beta 0.001: entropy at 40, lowest": min(ends),
                      "beta 0.001: entropy at 40, highest": max(ends)}, name="over seeds 0-2")
