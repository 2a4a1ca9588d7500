"""Tests of tinyagent.science.clip_batches: Section 10.6's clip-higher experiment and its tables."""
import math

import pytest
import torch

from tinyagent.grpo import RLConfig, compute_advantages, sample_step
from tinyagent.kl import entropy
from tinyagent.checkpoint import load_rl_base
from tinyagent.sampler import token_logprobs
from tinyagent.science.book import SECTION_10_6
from tinyagent.science.clip_batches import (after_steps, book_layout, book_ordering,
                                            claims_by_batch, entropies, follow,
                                            kind_contributions, kinds_over_batches, reading,
                                            step_by_step)

KINDS = ("opening verb", "later verbs", "argument", "other")


def batch_result(after=(0.432, 0.441, 0.477), by_kind_free=(0.03, 0.02, 0.01, 0.0), read_free=0.4):
    """One result shaped as `clip_higher_batch` returns it."""
    out = {"batch": {"positive-advantage tokens": 150, "of which started < 0.5": 27,
                     "entropy before": 0.483, "P(read) opening": 0.19, "P(2nd spelling) later": 0.10,
                     "advantage of episodes that read": 0.4, "kinds": dict.fromkeys(KINDS, 10)}}
    for eps, a, kind in zip((0.2, 0.28, math.inf), after, ((0.1,) * 4, (0.1,) * 4, by_kind_free)):
        bounded = eps < math.inf
        out[eps] = {"above 1+eps_high": 30 if bounded else math.nan,
                    "of which started < 0.5": 22 if bounded else math.nan,
                    "share started < 0.5": 22 / 30 if bounded else math.nan, "largest ratio": 8.8,
                    "entropy after": a, "P(read) opening": read_free if not bounded else 0.2,
                    "P(2nd spelling) later": 0.12, "by kind": dict(zip(KINDS, kind))}
    return out


def test_book_ordering_compares_at_three_decimals():
    assert book_ordering(batch_result(after=(0.538, 0.52, 0.508)))
    assert not book_ordering(batch_result(after=(0.432, 0.441, 0.477)))
    assert book_ordering(batch_result(after=(0.4321, 0.4324, 0.4)))        # 0.432 twice: a tie


def test_kind_contributions_add_up_to_the_total_and_are_counted_above_zero():
    batches = [batch_result(by_kind_free=(0.13, 0.1, 0.05, 0.1)), batch_result(by_kind_free=(0.2, 0.1, 0.1, 0.1))]
    per_kind = kind_contributions(batches, seeds=range(2))
    assert per_kind.loc[0].tolist() == pytest.approx([0.03, 0.0, -0.05, 0.0, -0.02])
    assert per_kind["total"].tolist() == pytest.approx(per_kind[list(KINDS)].sum(axis=1).tolist())
    table = kinds_over_batches(per_kind)
    assert table[("contribution", "batches above 0")].tolist() == [2, 0, 0, 0]
    assert table.loc["opening verb", ("contribution", "median")] == pytest.approx(0.065, abs=1e-3)


def test_entropy_and_reading_tables_take_the_gap_at_the_books_decimals():
    batches = [batch_result(after=(0.4321, 0.44, 0.4324)), batch_result()]
    assert entropies(batches, seeds=range(2))["book's ordering holds"].tolist() == [False, False]
    gap = reading(batches, seeds=range(2))["entropy gap, unbounded - 0.2"]
    assert gap.iloc[0] == 0.0 and gap.iloc[1] == pytest.approx(0.045)


def test_book_layout_sets_the_books_numbers_beside_ours():
    table = book_layout(batch_result())
    assert table.loc["0.2", ("above 1+eps_high", "book")] == SECTION_10_6["clip_higher_above"][0.2][0]
    assert table.loc["unbounded", ("entropy after", "book")] == SECTION_10_6["entropy_after"]["unbounded"]
    assert math.isnan(table.loc["0.28", ("entropy after", "book")])


def test_claims_by_batch_names_its_columns_for_batches():
    table = claims_by_batch([batch_result() for _ in range(10)])
    assert {"book (one batch)", "ours, batch 0", "of batches"} <= set(table.columns)
    assert table.loc["free_keeps_most", "holds in"] == 10


def test_follow_marks_the_top_tokens_gradient_off_once_past_the_clip():
    ratios = torch.tensor([[1.1, 2.0], [1.3, 2.5], [1.0, 3.0]])      # (steps, P)
    top, columns = follow(ratios)
    assert top == 1
    assert columns["above 1.2"] == [1, 2, 1]
    assert columns["its gradient"] == ["on", "off", "off"]         # 1.0 before step 1, then 2.0, 2.5


def test_step_by_step_takes_the_same_steps_as_after_steps():
    base, cfg = load_rl_base(), RLConfig(tasks_per_step=2)
    batch = sample_step(base, cfg, torch.Generator().manual_seed(4))   # both signs of advantage
    mask = batch.policy_mask
    ratios, step_entropy, p_start = step_by_step(batch, 0.2, steps=3)
    with torch.no_grad():
        old_logp, _ = token_logprobs(base, batch.tokens, cfg.temperature, mask)
    advantages, _ = compute_advantages(batch.rewards, cfg.group_size)
    positive = (advantages[:, None] > 0).expand_as(mask)[mask]
    assert ratios.shape == (3, int(positive.sum())) and int(positive.sum()) > 0
    assert torch.equal(p_start, old_logp[mask][positive].exp())
    logp, dist = after_steps(batch, 0.2, cfg.lr, steps=3)       # one update of 3 epochs
    assert torch.equal(ratios[-1], (logp - old_logp)[mask].exp()[positive])
    assert step_entropy[-1] == entropy(dist).mean().item()
