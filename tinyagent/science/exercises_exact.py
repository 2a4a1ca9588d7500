"""The exercises settled exactly: Exercises 1, 2 and 4 (and the gradient Exercise 7 asks about) on
small distributions whose every outcome `tinyagent.exact` lists, so each number is exact to rounding.

Each function builds one table of the exercises notebook from the toy family of Sections 10.2-10.3
(`exact.toy_distribution`, moved to a chosen KL by `exact.logits_at_kl`). Nothing that trains or
evaluates imports this module.
"""
import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from ..exact import (estimator_moments, expected_loss_grad, forward_kl_grad, logits_at_kl,
                     per_sample_grads, rel_error, reverse_kl_grad, sequence_model_kl_grad,
                     sequence_model_loss_grad, sequence_model_reward_grad, toy_distribution)
from .plots import PALETTE, use_style

# Exercise 1's losses: name -> (estimator, with the score-function term autograd leaves out)
LOSSES = {"k1": ("k1", False), "k1 corrected": ("k1", True), "k3": ("k3", False),
          "k3 corrected": ("k3", True), "k3+": ("k3+", False)}
# Exercise 2: a prediction fails where it is off from the exact bias by more than this factor
FAILS_BEYOND = 2.0


def _at_kls(ref_logits, direction, kls):
    """The toy policy at each true KL, and the index the tables share."""
    return ({kl: logits_at_kl(ref_logits, direction, kl)[0] for kl in kls},
            pd.Index(kls, name="true KL"))


def correction_errors(ref_logits, direction, kls):
    """Exercise 1: each loss's exact expected gradient against the reverse-KL gradient (relative
    error: 0 is exact, 1 is as wrong as a zero vector), one row per true KL."""
    toy, index = _at_kls(ref_logits, direction, kls)
    return pd.DataFrame({name: [rel_error(expected_loss_grad(toy[kl], ref_logits, kind, corrected),
                                          reverse_kl_grad(toy[kl], ref_logits)) for kl in kls]
                         for name, (kind, corrected) in LOSSES.items()}, index=index)


def sample_spread(logits, ref_logits, kind, corrected):
    """The standard deviation of one sample's gradient (root of the summed variances over the
    logits) over the norm of the reverse-KL gradient it estimates: how noisy one sample is."""
    rows = per_sample_grads(logits, ref_logits, kind, corrected)         # (K, K), one per outcome
    p = torch.softmax(logits, -1)
    variance = p @ ((rows - p @ rows) ** 2).sum(1)
    return (variance.sqrt() / reverse_kl_grad(logits, ref_logits).norm()).item()


def largest_gap(logits, ref_logits):
    """The largest difference, over outcomes and logits, between the corrected k3's per-sample
    gradient and k3+'s: zero if they are one estimator written two ways."""
    return (per_sample_grads(logits, ref_logits, "k3", True)
            - per_sample_grads(logits, ref_logits, "k3+")).abs().max().item()


def gradient_noise(ref_logits, direction, kls):
    """Exercise 1: one sample's gradient spread for the two corrected losses and k3+, and the
    largest per-sample gap between corrected k3 and k3+, one row per true KL."""
    toy, index = _at_kls(ref_logits, direction, kls)
    return pd.DataFrame({
        "k1 corrected": [sample_spread(toy[kl], ref_logits, "k1", True) for kl in kls],
        "k3 corrected": [sample_spread(toy[kl], ref_logits, "k3", True) for kl in kls],
        "k3+": [sample_spread(toy[kl], ref_logits, "k3+", False) for kl in kls],
        "largest |k3 corrected - k3+|": [largest_gap(toy[kl], ref_logits) for kl in kls],
    }, index=index)


def skewness_under(ref_logits, direction):
    """The direction's third standardized moment under softmax(ref_logits): the gamma whose sign
    Exercise 2's leading-order formula gives k2's bias."""
    q = torch.softmax(ref_logits, -1)
    centred = direction - q @ direction
    return ((q @ centred ** 3) / (q @ centred ** 2) ** 1.5).item()


def k2_bias(logits, ref_logits):
    """The exact E[k2]/KL - 1, and its third-order prediction -E[l^3] / (6 KL)."""
    moments = estimator_moments(logits, ref_logits)
    logp, ref_logp = torch.log_softmax(logits, -1), torch.log_softmax(ref_logits, -1)
    third = -(logp.exp() @ (ref_logp - logp) ** 3).item() / (6 * moments["true_kl"])
    return moments["mean"]["k2"] / moments["true_kl"] - 1, third


def leading_order(kl, skewness):
    """Exercise 2's leading-order bias of k2, sqrt(2)/3 * gamma * sqrt(KL)."""
    return math.sqrt(2) / 3 * skewness * math.sqrt(kl)


def skewness_for(bias, kl):
    """The direction's skewness the leading-order formula needs to give `bias` at `kl`."""
    return bias / (math.sqrt(2) / 3 * math.sqrt(kl))


def k2_bias_table(ref_logits, direction, kls, book_ratios):
    """Exercise 2: k2's relative bias, exact, third order and leading order, beside the book's
    (`book_ratios`: true KL -> its printed E[k2]/KL; missing where it prints none)."""
    toy, index = _at_kls(ref_logits, direction, kls)
    skewness = skewness_under(ref_logits, direction)
    return pd.DataFrame({
        "exact": [k2_bias(toy[kl], ref_logits)[0] for kl in kls],
        "third order": [k2_bias(toy[kl], ref_logits)[1] for kl in kls],
        "leading order": [leading_order(kl, skewness) for kl in kls],
        "book (its own distributions)": [book_ratios[kl] - 1 if kl in book_ratios else None
                                         for kl in kls],
    }, index=index).astype(float)


def bias_grid(ref_logits, direction, kls):
    """`k2_bias_table`'s three columns (without the book's) on a grid of true KLs."""
    grid = pd.DataFrame([k2_bias(logits_at_kl(ref_logits, direction, float(kl))[0], ref_logits)
                         for kl in kls],
                        columns=["exact", "third order"], index=pd.Index(kls, name="true KL"))
    skewness = skewness_under(ref_logits, direction)
    grid["leading order"] = [leading_order(kl, skewness) for kl in kls]
    return grid


def fails_from(grid, prediction):
    """The first grid distance where `prediction` is off from the exact bias by more than
    FAILS_BEYOND either way, a wrong sign included (NaN: nowhere on the grid)."""
    ratio = grid[prediction] / grid["exact"]
    off = (ratio < 1 / FAILS_BEYOND) | (ratio > FAILS_BEYOND)
    return float(grid.index[off.to_numpy().argmax()]) if off.any() else math.nan


def plot_bias_grid(grid, failure):
    """Exercise 2's figure: each bias over sqrt(KL), with a vertical line where each prediction
    starts to fail (`failure`: prediction -> `fails_from`)."""
    use_style()
    fig, ax = plt.subplots(figsize=(6, 3.2))
    styles = {"exact": dict(color="black", lw=2), "third order": dict(color=PALETTE[0], ls="--"),
              "leading order": dict(color=PALETTE[1], ls=":")}
    kls = grid.index.to_numpy()
    for name, style in styles.items():
        ax.plot(kls, grid[name] / np.sqrt(kls), label=name, **style)
    for name, kl in failure.items():
        ax.axvline(kl, color=styles[name]["color"], lw=0.8, alpha=0.6)
    ax.set(xscale="log", xlabel="true KL", ylabel=r"$k_2$ bias / $\sqrt{KL}$",
           title=r"$k_2$'s bias (E[k2]/KL $-$ 1) over $\sqrt{KL}$, exact and predicted" "\n"
                 "(vertical lines: each prediction off by more than 2x from there on)")
    ax.legend()
    return fig


def sign_check(draws=100, kl=0.001):
    """Exercise 2 over `draws` toy distributions (seeds 0, 1, ...) at `kl`: each direction's
    |skewness| and its rank (1 = the most symmetric), whether the leading-order formula has the
    exact bias's sign, and its relative error."""
    rows = []
    for seed in range(draws):
        ref_logits, direction = toy_distribution(seed)
        skewness = skewness_under(ref_logits, direction)
        exact = k2_bias(logits_at_kl(ref_logits, direction, kl)[0], ref_logits)[0]
        predicted = leading_order(kl, skewness)
        rows.append({"|skewness|": abs(skewness), "sign right": np.sign(exact) == np.sign(predicted),
                     "relative error": abs(predicted / exact - 1)})
    draws = pd.DataFrame(rows)
    draws["|skewness| rank"] = draws["|skewness|"].rank()
    return draws


def sign_summary(draws):
    """`sign_check`'s draws in four numbers: the share with the sign right, the median relative
    error, and the largest |skewness| (and its rank) among the draws with the sign wrong."""
    wrong = draws[~draws["sign right"]]
    return pd.Series({"share of draws with the sign right": draws["sign right"].mean(),
                      "median relative error": draws["relative error"].median(),
                      "largest |skewness| among wrong signs": wrong["|skewness|"].max(),
                      f"its rank among {len(draws)} (1 = most symmetric)":
                          wrong["|skewness| rank"].max()})


def three_token_model(seed, vocab=4):
    """Exercise 4's policy and reference over three-token sequences: per model a tuple of logit
    tables (vocab,), (vocab, vocab), (vocab, vocab, vocab), standard-normal draws from one
    generator seeded `seed`, policy first."""
    gen = torch.Generator().manual_seed(seed)
    shapes = ((vocab,), (vocab, vocab), (vocab, vocab, vocab))
    policy = tuple(torch.randn(*s, generator=gen, dtype=torch.float64) for s in shapes)
    ref = tuple(torch.randn(*s, generator=gen, dtype=torch.float64) for s in shapes)
    return policy, ref


def placement_errors(policy, ref):
    """Exercise 4: each loss placement's exact expected gradient against the sequence KL's,
    table by table (relative error; one column per token)."""
    exact = sequence_model_kl_grad(policy, ref)
    placements = {
        "KL in the reward (k1 to go)": sequence_model_reward_grad(policy, ref),
        "k2 loss": sequence_model_loss_grad(policy, ref, "k2"),
        "k2 loss + future-KL term": sequence_model_loss_grad(policy, ref, "k2", future=True),
        "k3+ loss + future-KL term": sequence_model_loss_grad(policy, ref, "k3+", future=True),
        "k3 loss + future-KL term": sequence_model_loss_grad(policy, ref, "k3", future=True),
    }
    tokens = pd.Index([f"token {t + 1}" for t in range(len(exact))], name="error in")
    return pd.DataFrame({name: [rel_error(g, e) for g, e in zip(grads, exact)]
                         for name, grads in placements.items()}, index=tokens).T


def k3_gradient_at(ref_logits, direction, kl):
    """Exercise 7: which KL's gradient the k3 loss follows at a true KL of `kl` (relative errors
    against the reverse and the forward KL's gradients)."""
    logits = logits_at_kl(ref_logits, direction, kl)[0]
    grad = expected_loss_grad(logits, ref_logits, "k3")
    return pd.Series({"error vs reverse-KL gradient": rel_error(grad, reverse_kl_grad(logits, ref_logits)),
                      "error vs forward-KL gradient": rel_error(grad, forward_kl_grad(logits, ref_logits))},
                     name=f"k3 loss at KL {kl}")
