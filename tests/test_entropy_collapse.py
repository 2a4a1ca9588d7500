"""Tests of tinyagent.science.entropy_collapse: the entropy-change identity at one decision and
over a batch, the function diff, and the loop check's tables."""
import math

import pytest
import torch

from tinyagent.grpo import RLConfig, compute_advantages, sample_step
from tinyagent.checkpoint import load_rl_base
from tinyagent.sampler import token_logprobs
from tinyagent.science.entropy_collapse import (BALANCE_ROWS, Decision, adam_bound, body_lines,
                                                covariance, diff_counts, distance_to_book,
                                                flat_params, function_diff, identity_cases,
                                                logit_entropy, loop_check, update_balance)

LIKELY, RARE = 0.647, 0.0044


def decision_with(probs, likely, rare):
    logits = torch.tensor(probs, dtype=torch.float64).log()
    return Decision(logits, likely, rare, episode=0, position=0, searched=1, context="")


def test_distance_to_book_is_zero_at_the_books_pair_and_finds_its_tokens():
    probs = torch.tensor([0.2, LIKELY, RARE, 1 - 0.2 - LIKELY - RARE], dtype=torch.float64)
    distance, likely, rare = distance_to_book(probs.log(), LIKELY, RARE)
    assert (likely, rare) == (1, 2)
    assert distance == pytest.approx(0.0, abs=1e-12)
    other = torch.tensor([0.5, 0.3, 0.01, 0.19], dtype=torch.float64)
    d_other, _, _ = distance_to_book(other.log(), LIKELY, RARE)
    assert d_other == pytest.approx(abs(math.log(0.5 / LIKELY)) + abs(math.log(0.01 / RARE)))


def test_covariance_against_a_hand_computation():
    p = torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64)
    x, y = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64), torch.tensor([2.0, 0.0, 4.0], dtype=torch.float64)
    ex, ey, exy = 1.75, 2.0, 0.5 * 2 + 0.25 * 12
    assert covariance(x, y, p).item() == pytest.approx(exy - ex * ey)


def test_identity_cases_follow_the_covariance_sign_and_shrink_with_eta():
    decision = decision_with([0.6, 0.3, 0.0956, 0.0044], likely=0, rare=3)
    big, small = identity_cases(decision, 0.01, LIKELY, RARE), identity_cases(decision, 0.001, LIKELY, RARE)
    lowers = set(big.index[big["actual dH"] < 0])
    assert lowers == {"reward likely", "penalize rare"}
    assert ((big["predicted dH"] > 0) == (big["actual dH"] > 0)).all()
    assert (big["relative difference"] < 0.01).all()
    # the neglected terms are second order: a tenth of the step, about a tenth of the error
    assert (small["relative difference"] < 0.2 * big["relative difference"]).all()


@pytest.fixture(scope="module")
def small_batch():
    base = load_rl_base()
    cfg = RLConfig(tasks_per_step=2)
    return base, cfg, sample_step(base, cfg, torch.Generator().manual_seed(4))   # both signs of advantage


def test_update_balance_adds_up_and_predicts_the_tabular_change(small_batch):
    base, cfg, batch = small_batch
    eta = 1e-4
    table = update_balance(base, batch, cfg, eta)
    rows = table.loc[list(BALANCE_ROWS)]
    assert rows["positions"].sum() == table.loc["all", "positions"] == int(batch.policy_mask.sum())
    assert rows["contribution to mean dH"].sum() == pytest.approx(table.loc["all", "contribution to mean dH"])
    assert table.loc["zero advantage", "contribution to mean dH"] == 0
    assert table.loc["reward likely", "positions"] > 0 and table.loc["penalize likely", "positions"] > 0
    # the tabular step itself, position by position: its mean entropy change is what the rows add up to
    mask = batch.policy_mask
    with torch.no_grad():
        _, z = token_logprobs(base, batch.tokens, cfg.temperature, mask)
    z = z.double()
    adv = compute_advantages(batch.rewards, cfg.group_size)[0][:, None].expand_as(mask)[mask]
    dz = eta * adv[:, None] * (torch.nn.functional.one_hot(batch.tokens[mask], z.shape[-1]) - z.exp())
    actual = (logit_entropy(z + dz) - logit_entropy(z)).mean().item()
    assert table.loc["all", "contribution to mean dH"] == pytest.approx(actual, rel=0.01)


def chapter9(x, y):
    """Docstring left out of the diff."""
    a = x + y
    b = a * 2
    return b


def chapter10(x, y):
    a = x + y
    b = a * 3
    c = b - 1
    return c


def test_function_diff_leaves_out_docstrings_and_counts_its_lines():
    assert body_lines(chapter9)[0].strip() == "a = x + y"
    diff = function_diff(chapter9, chapter10)
    assert diff[:2] == ["--- chapter9", "+++ chapter10"]
    assert "-    b = a * 2" in diff and "+    c = b - 1" in diff
    assert diff_counts(diff, "chapter9") == "chapter9: 1 of its 3 lines stay; 2 are replaced by 3 new ones."


def test_flat_params_holds_every_parameter():
    policy = load_rl_base()
    assert flat_params(policy).numel() == sum(p.numel() for p in policy.parameters())


def test_loop_tables_measure_distances_from_train_rl_and_the_start():
    start = torch.zeros(1000)
    moved = start.clone()
    moved[:5] = 0.006                       # five parameters at the bound
    moved[5:400] = 0.004                    # more than half of it
    moved[400:] = 0.001
    runs = {"start": start, "train_rl": moved,
            "settings": {"off": moved.clone(), "on": moved + torch.linspace(0, 0.002, 1000)}}
    table = loop_check(runs)
    assert table["max |theta - train_rl's theta|"].tolist() == pytest.approx([0.0, 0.002])
    assert table["book: max |difference|"].iloc[0] == 0.0 and math.isnan(table["book: max |difference|"].iloc[1])
    bound = adam_bound(runs, updates=6, lr=0.001)
    assert bound.loc["off", "moved > 0.99 of it"] == 5
    assert bound.loc["off", "moved > 0.5 of it"] == 400
    assert bound.loc["off", "parameters"] == 1000
