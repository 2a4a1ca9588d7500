"""Section 10.8's tables and figures: the design problems read on Section 10.7's runs and on the
reference reset, each built by one function so that the notebook's cell is one call.

`runs` is {label: [the run at each seed]} (`experiments.comparison_runs`), `by_seed` the same runs
one seed at a time (`pairs.by_seed`), `resets` one {"anchored", "reset"} pair per seed
(`experiments.reset_runs`). The book's numbers come from `book.SECTION_10_8` and sit in columns
labelled as the book's. Nothing that trains or evaluates imports this module.
"""
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from ..grpo import RLConfig, sample_step
from ..harness.runs import policy_from_state
from ..kl import kl_penalty
from ..checkpoint import load_rl_base
from ..sampler import token_logprobs
from .book import SECTION_10_7, SECTION_10_8
from .claims import entropy_at, mean_kl, reset_value, series
from .experiments import RESET_FROM, RESET_STEPS, SEEDS, STEPS
from .plots import PALETTE, REFERENCE_STYLE, median_band, use_style
from .report import (book_vs_ours, claim_values, failing_seeds, logged_series, over_seeds,
                     paired_differences)

LABELS = ("none", "k3+ beta=0.05", "k3+ beta=0.3", "k3+ beta=1.0", "entropy 0.03")
STYLES = {"none": REFERENCE_STYLE,
          **{label: dict(color=color, lw=1.4, label=label)
             for color, label in zip(PALETTE, LABELS[1:])}}


def runs_table(runs):
    """How many seeds and steps each setting's runs hold: what the tables below rest on."""
    return pd.DataFrame({"seeds": [len(runs[label]) for label in runs],
                         "steps": [len(runs[label][0]["history"]) for label in runs]},
                        index=pd.Index(list(runs), name="run"))


# ------------------------------------------------------------------ Problem 1: the entropy's fall

HISTORY_STEPS = (0, 10, 20, 39)
HISTORY_RUNS = ("none", "k3+ beta=0.3", "entropy 0.03")
HISTORY_DIGITS = {"entropy": 2, "batch reward": 2, "zero-adv. groups": 2}


def at_step(run, step):
    """The three numbers the book logs at a step: entropy, batch reward, zero-advantage groups."""
    log = run["history"][step]
    return {"entropy": log["entropy"], "batch reward": log["reward"],
            "zero-adv. groups": log["zero_adv_groups"]}


def history_table(runs, seed=None):
    """Problem 1's histories at steps 0, 10, 20 and 39: at `seed` beside the book's one run, or
    (seed None) the median and range over seeds."""
    rows = [(label, step) for label in HISTORY_RUNS for step in HISTORY_STEPS]
    if seed is None:
        table = over_seeds({row: [at_step(run, row[1]) for run in runs[row[0]]] for row in rows},
                           HISTORY_DIGITS, index_name=None)
    else:
        book = {row: dict(zip(("entropy", "batch reward"),
                              SECTION_10_8["history"][row[0]].get(row[1], (None, None))))
                for row in rows}
        table = book_vs_ours({row: at_step(runs[row[0]][seed], row[1]) for row in rows}, book,
                             HISTORY_DIGITS, index_name=None)
    return table.rename_axis(["run", "step"])


def history_figure(runs):
    """Entropy (left) and batch reward (right) over the steps, median and range over seeds."""
    use_style()
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.0))
    for label in HISTORY_RUNS:
        median_band(axes[0], logged_series(runs[label], "entropy"), STYLES[label])
        median_band(axes[1], logged_series(runs[label], "reward"), STYLES[label])
    axes[0].set(xlabel="GRPO step", ylabel="policy-token entropy (nats)")
    axes[1].set(xlabel="GRPO step", ylabel="batch reward")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def early_fall(by_seed):
    """The unregularized entropy at steps 0 and 10 and their ratio, seed by seed, with the book's
    row last: the early_third claim's test, beside the start it is measured from."""
    early = pd.DataFrame({"step 0": [entropy_at(r, "none", 0) for r in by_seed],
                          "step 10": [entropy_at(r, "none", 10) for r in by_seed]},
                         index=pd.Index(SEEDS[:len(by_seed)], name="seed"))
    early["step 10 / step 0"] = early["step 10"] / early["step 0"]
    book = SECTION_10_8["history"]["none"]
    early.loc["book"] = [book[0][0], book[10][0], book[10][0] / book[0][0]]
    return early.round(3)


# ------------------------------------------------------------------ Problem 2: the size of beta

KL_RUNS = ("none", "k3+ beta=0.05", "k3+ beta=0.3", "k3+ beta=1.0")
KL_LOG = ["step 0", "step 10", "step 20", "step 39"]
KL_OUTCOME = ["mean, steps 20-39", "max", "held-out reads", "pass@1"]
KL_DIGITS = {**{column: 3 for column in KL_LOG + KL_OUTCOME}, "held-out reads": 2}


def kl_row(run):
    """A run's logged KL term at four steps, its late mean and maximum, and its held-out reads
    and pass@1: the numbers the book gives about each beta."""
    kl = [log["kl"] for log in run["history"]]
    return {**{f"step {s}": kl[s] for s in (0, 10, 20, 39)},
            "mean, steps 20-39": np.mean(kl[20:]), "max": max(kl),
            "held-out reads": run["eval"]["reads"], "pass@1": run["eval"]["pass@1"]}


def kl_tables(runs, seed=None):
    """Problem 2's logs (steps) and outcomes (late mean, max, reads, pass@1), as two tables: at
    `seed` beside the book's three logged numbers and Section 10.7's table, or (seed None) the
    median and range over seeds."""
    if seed is None:
        table = over_seeds({label: [kl_row(run) for run in runs[label]] for label in KL_RUNS},
                           KL_DIGITS)
    else:
        logs = SECTION_10_8["kl_log"]
        book = {label: {"held-out reads": SECTION_10_7[label]["reads"],
                        "pass@1": SECTION_10_7[label]["pass@1"]} for label in KL_RUNS}
        book["k3+ beta=0.05"]["step 20"] = logs["k3+ beta=0.05"][20]
        book["k3+ beta=0.3"]["mean, steps 20-39"] = logs["k3+ beta=0.3"]["plateau"]
        book["k3+ beta=1.0"]["max"] = logs["k3+ beta=1.0"]["max"]
        table = book_vs_ours({label: kl_row(runs[label][seed]) for label in KL_RUNS}, book,
                             KL_DIGITS)
    return table[KL_LOG], table[KL_OUTCOME]


def kl_figure(runs):
    """The logged KL term of the k3+ runs and the unregularized run, median and range over seeds,
    on a logarithmic axis (the runs differ by an order of magnitude)."""
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    for label in KL_RUNS:
        median_band(ax, logged_series(runs[label], "kl"), STYLES[label])
    ax.set(xlabel="GRPO step", ylabel=r"logged per-token $k_3$ to the start", yscale="log")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


def weak_penalty(by_seed):
    """Seed by seed, the mean logged KL over steps 20-39 without a regularizer and with
    beta = 0.05, and their ratio (the beta0.05_weak claim's measure)."""
    weak = pd.DataFrame({"no regularizer": [mean_kl(r, "none") for r in by_seed],
                         "beta 0.05": [mean_kl(r, "k3+ beta=0.05") for r in by_seed]},
                        index=pd.Index(SEEDS[:len(by_seed)], name="seed"))
    weak["ratio"] = weak["beta 0.05"] / weak["no regularizer"]
    return weak.round(3)


FRESH_BATCHES = range(100, 108)     # generator seeds of the fresh batches


def fresh_batch_k3(policy, reference, seed):
    """Per-token k3 against `reference` of one fresh training-size batch sampled from `policy`."""
    batch = sample_step(policy, RLConfig(), torch.Generator().manual_seed(seed))
    with torch.no_grad():
        ref_logp, _ = token_logprobs(reference, batch.tokens, 1.0, batch.policy_mask)
    return kl_penalty(batch.logp, ref_logp, "k3")[batch.policy_mask]


def fixed_policy_noise(runs, by_seed, label="k3+ beta=1.0"):
    """How much the logged KL moves at a fixed policy: per seed, the log's median, steps above the
    book's bound, maximum and the step that logged it, beside the mean k3 of 8 fresh batches from
    the final policy (median, min, max) and the median share of a batch's total carried by its
    single largest token."""
    base, bound = load_rl_base(), SECTION_10_8["kl_log"]["k3+ beta=1.0"]["max"]
    noise = {}
    for seed, run in zip(SEEDS, runs[label]):
        policy = policy_from_state(run["state"])
        k3 = [fresh_batch_k3(policy, base, g) for g in FRESH_BATCHES]
        means = [k.mean().item() for k in k3]
        log = series(by_seed[seed], label, "kl")
        noise[seed] = {"log: median": np.median(log),
                       "log: steps above 0.03": sum(x > bound for x in log),
                       "log: max": max(log), "log: step of max": int(np.argmax(log)),
                       "fresh: median": np.median(means),
                       "fresh: min": min(means), "fresh: max": max(means),
                       "top token share": np.median([k.max().item() / k.sum().item() for k in k3])}
    return pd.DataFrame.from_dict(noise, orient="index").rename_axis("seed").round(3)


# ------------------------------------------------------------------ Problem 3: the reference's cost

GIB = 2 ** 30
TRAIN_BYTES = 2 + 2 + 4 + 4 + 4     # bf16 weights, bf16 grads, fp32 master, fp32 Adam m and v
REF_BYTES = 2                       # bf16 weights, nothing else
STEP_UNITS = 1 + 1 + 2              # the book's step: a pi_old log-prob pass, a forward, a backward
REF_UNITS = 1                       # the reference's forward pass
SIZES = {"1.5B": 1.5e9, "7B": 7e9, "32B": 32e9, "72B": 72e9}


def reference_cost(sizes=SIZES):
    """Memory (GiB) of the training state and of a frozen bf16 reference, and the compute a
    step's reference pass adds under the book's count, for each model size."""
    memory = pd.DataFrame({
        "training state (GiB)": [n * TRAIN_BYTES / GIB for n in sizes.values()],
        "bf16 reference (GiB)": [n * REF_BYTES / GIB for n in sizes.values()],
    }, index=pd.Index(list(sizes), name="parameters"))
    memory["reference / training state"] = (memory["bf16 reference (GiB)"]
                                             / memory["training state (GiB)"])
    memory["step compute without reference"] = STEP_UNITS
    memory["with reference"] = STEP_UNITS + REF_UNITS
    memory["extra compute"] = REF_UNITS / STEP_UNITS
    return memory.round({"training state (GiB)": 1, "bf16 reference (GiB)": 1,
                         "reference / training state": 3, "extra compute": 2})


def model_size(model):
    """A model's parameter count, bytes as stored, and dtypes ("float32")."""
    params = list(model.parameters())
    return {"parameters": sum(p.numel() for p in params),
            "bytes": sum(p.numel() * p.element_size() for p in params),
            "dtypes": "/".join(sorted({str(p.dtype).removeprefix("torch.") for p in params}))}


# ------------------------------------------------------------------ Problem 4: the reset

RESET_DIGITS = {"kl_to_reference": 3, "entropy": 3, "pass@1": 3, "distinct": 1, "pass@8": 3,
                "kl_from_base": 3}
RESET_ROWS = (f"after {STEPS} steps", f"anchored +{RESET_STEPS}", f"reset +{RESET_STEPS}")


def reset_row(run):
    """The reset's columns for one run: KL to the reference in force, last logged entropy,
    held-out pass@1, distinct sequences, pass@8 and KL from the RL base agent."""
    return {column: reset_value(run, "kl_to_ref" if column == "kl_from_base" else column)
            for column in RESET_DIGITS}


def reset_table(runs, resets, seed=None):
    """The run both arms continue, then the anchored and the reset arm: at `seed` beside the
    book's two arms, or (seed None) the median and range over seeds."""
    def rows(s):
        return dict(zip(RESET_ROWS, map(reset_row, (runs[RESET_FROM][s], resets[s]["anchored"],
                                                    resets[s]["reset"]))))
    if seed is None:
        return over_seeds({row: [rows(s)[row] for s in range(len(resets))] for row in RESET_ROWS},
                          RESET_DIGITS)
    book = dict(zip(RESET_ROWS[1:], (SECTION_10_8["reset"]["anchored"],
                                     SECTION_10_8["reset"]["reset"])))
    return book_vs_ours(rows(seed), book, RESET_DIGITS)


def reset_paired(resets, columns=("kl_to_reference", "entropy", "pass@1", "distinct")):
    """Reset minus anchored, seed by seed, with the mean and range, the book's one-seed
    difference, and at how many seeds the difference goes the book's way (pass@1 up, the others
    down; for the entropy, whose anchored value the book does not print, the way its words give)."""
    paired = {}
    for col in columns:
        diff = paired_differences([reset_row(pair["reset"])[col] for pair in resets],
                                  [reset_row(pair["anchored"])[col] for pair in resets])
        book_a, book_r = SECTION_10_8["reset"]["anchored"][col], SECTION_10_8["reset"]["reset"][col]
        below = diff["seeds"] - diff["a_above_b"] - sum(d == 0 for d in diff["per_seed"])
        paired[col] = {**{f"seed {s}": d for s, d in zip(SEEDS, diff["per_seed"])},
                       "mean": diff["mean"], "min": diff["min"], "max": diff["max"],
                       "book": None if book_a is None or book_r is None else book_r - book_a,
                       "seeds in the book's direction":
                           diff["a_above_b"] if col == "pass@1" else below}
    return pd.DataFrame(paired).T.astype(float).round(3).rename_axis("reset - anchored")


def spellings(resets):
    """Distinct action sequences per task in each arm, with the gym's two spellings of an action
    counted apart and merged, seed by seed, and the book's count (which it does not say)."""
    table = pd.DataFrame(
        {(arm, count): [pair[arm]["eval"][key] for pair in resets]
         for arm in ("anchored", "reset")
         for count, key in (("spellings apart", "distinct_raw"), ("spellings merged", "distinct"))},
        index=pd.Index(SEEDS[:len(resets)], name="seed"))
    book = SECTION_10_8["reset"]
    table.loc["book"] = [book["anchored"]["distinct"], np.nan, book["reset"]["distinct"], np.nan]
    return table.round(1)


def seed_by_seed(groups, seeds=SEEDS, digits=3):
    """Each claim's measured value at every seed and the seeds at which its test fails ("none"
    where it holds at all), for `groups` of (claims, one result per seed). Values are rounded as
    `report.score_claims` rounds the same values, by Python's correctly rounded `round` (+ 0.0:
    no "-0.0"); numpy's round, in `report.rounded_table`, scales by 1000 first and turns
    groups_go_flat's 0.2625 at seed 2 (the double just above it) into 0.262, not 0.263."""
    table = {}
    for claims, results in groups:
        fails = failing_seeds(claims, results, seeds)
        for claim in claims:
            values = [round(v, digits) + 0.0 for v in claim_values(claim, results, seeds)]
            table[claim.key] = {**{f"seed {s}": v for s, v in zip(seeds, values)},
                                "fails at seeds": fails[claim.key] or "none"}
    return pd.DataFrame(table).T
