"""Tests of tinyagent.science.exercises_exact: the exercises' exact tables show what the
derivations say (the corrected losses and k3+ follow the reverse KL, k2's bias takes the
direction's skewness's sign, the future-KL term makes a placement exact), and the helpers compute
what their names say on cases worked by hand."""
import math

import numpy as np
import pandas as pd
import pytest
import torch

from tinyagent.exact import toy_distribution
from tinyagent.science.exercises_exact import (
    bias_grid, correction_errors, fails_from, gradient_noise, k2_bias_table,
    k3_gradient_at, leading_order, placement_errors, sign_check, sign_summary, skewness_for,
    skewness_under, three_token_model)

KLS = (0.001, 0.32)


@pytest.fixture(scope="module")
def toy():
    return toy_distribution(seed=0)


def test_corrected_losses_and_k3plus_follow_the_reverse_kl_and_plain_ones_do_not(toy):
    errors = correction_errors(*toy, KLS)
    assert list(errors.index) == list(KLS)
    assert (errors[["k1 corrected", "k3 corrected", "k3+"]] < 1e-12).all().all()
    assert ((errors["k1"] - 1).abs() < 1e-12).all()             # zero expected gradient
    assert (errors["k3"] > 1e-3).all()


def test_corrected_k3_is_k3plus_sample_by_sample_and_corrected_k1_is_noisier(toy):
    noise = gradient_noise(*toy, KLS)
    assert (noise["largest |k3 corrected - k3+|"] < 1e-12).all()
    assert np.allclose(noise["k3 corrected"], noise["k3+"])
    assert noise.loc[0.001, "k1 corrected"] > 10 * noise.loc[0.001, "k3+"]


def test_skewness_of_a_bernoulli_direction_matches_its_closed_form():
    # uniform reference over 4 outcomes, direction 1 on one of them: a Bernoulli(1/4)
    p = 0.25
    gamma = skewness_under(torch.zeros(4, dtype=torch.float64),
                           torch.tensor([0.0, 0.0, 0.0, 1.0], dtype=torch.float64))
    assert gamma == pytest.approx((1 - 2 * p) / math.sqrt(p * (1 - p)), rel=1e-12)
    symmetric = torch.tensor([-1.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    assert abs(skewness_under(torch.zeros(4, dtype=torch.float64), symmetric)) < 1e-12


def test_skewness_for_inverts_the_leading_order_formula():
    assert skewness_for(leading_order(0.01, -0.3), 0.01) == pytest.approx(-0.3, rel=1e-12)
    assert np.sign(leading_order(0.5, 0.2)) == 1 and np.sign(leading_order(0.5, -0.2)) == -1


def test_k2_bias_is_predicted_at_small_kl_and_the_book_column_is_missing_where_unprinted(toy):
    ref_logits, direction = toy
    table = k2_bias_table(ref_logits, direction, (1e-4, 0.03), book_ratios={1e-4: 1.5})
    exact, third = table.loc[1e-4, "exact"], table.loc[1e-4, "third order"]
    assert abs(third / exact - 1) < 0.1
    assert np.sign(table.loc[1e-4, "leading order"]) == np.sign(exact)
    assert table.loc[1e-4, "book (its own distributions)"] == pytest.approx(0.5)
    assert math.isnan(table.loc[0.03, "book (its own distributions)"])


def test_fails_from_finds_the_first_factor_of_two_miss_or_a_sign_error():
    grid = pd.DataFrame({"exact": [1.0, 1.0, 1.0, 1.0], "good": [1.1, 1.9, 0.6, 1.0],
                         "drifts": [1.0, 1.5, 2.1, 3.0], "flips": [1.0, -0.9, 1.0, 1.0]},
                        index=[0.1, 0.2, 0.3, 0.4])
    assert math.isnan(fails_from(grid, "good"))
    assert fails_from(grid, "drifts") == 0.3
    assert fails_from(grid, "flips") == 0.2


def test_bias_grid_agrees_with_the_table_at_the_same_distance(toy):
    grid = bias_grid(*toy, np.array([0.03]))
    table = k2_bias_table(*toy, (0.03,), book_ratios={})
    assert np.allclose(grid.to_numpy(), table[["exact", "third order", "leading order"]].to_numpy())


def test_sign_check_ranks_the_draws_and_summarizes_the_wrong_signs():
    draws = sign_check(draws=4, kl=0.001)
    assert sorted(draws["|skewness| rank"]) == [1.0, 2.0, 3.0, 4.0]
    assert draws["relative error"].ge(0).all()
    summary = sign_summary(draws)
    assert summary["share of draws with the sign right"] == draws["sign right"].mean()
    assert "its rank among 4 (1 = most symmetric)" in summary.index


def test_three_token_model_is_reproducible_and_shaped_as_three_tables():
    policy, ref = three_token_model(seed=0, vocab=3)
    assert [t.shape for t in policy] == [(3,), (3, 3), (3, 3, 3)]
    again, _ = three_token_model(seed=0, vocab=3)
    assert all(torch.equal(a, b) for a, b in zip(policy, again))
    assert not torch.equal(policy[0], ref[0])


def test_the_future_kl_term_makes_the_k2_loss_exact_and_k3_stays_wrong():
    errors = placement_errors(*three_token_model(seed=1))
    assert (errors.loc[["KL in the reward (k1 to go)", "k2 loss + future-KL term",
                        "k3+ loss + future-KL term"]] < 1e-12).all().all()
    assert errors.loc["k2 loss", "token 3"] < 1e-12                 # nothing comes after it
    assert (errors.loc["k2 loss", ["token 1", "token 2"]] > 1e-3).all()
    assert (errors.loc["k3 loss + future-KL term"] > 1e-3).all()


def test_the_k3_loss_follows_the_forward_kl_gradient(toy):
    errors = k3_gradient_at(*toy, kl=0.1)
    assert errors["error vs forward-KL gradient"] < 1e-10
    assert errors["error vs reverse-KL gradient"] > 1e-3
    assert errors.name == "k3 loss at KL 0.1"
