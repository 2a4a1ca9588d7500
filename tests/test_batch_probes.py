"""Tests of tinyagent.science.batch_probes on the shipped RL base agent: a KL term against the
policy itself has no gradient, its gradient scales with beta, a sampler of the trainer's own
precision matches it to rounding while a bfloat16 one does not, and the first policy token after
an observation is the near-certain `<call>` opener."""
import copy

import pytest
import torch

from tinyagent.checkpoint import load_rl_base
from tinyagent.regularize import RegularizedConfig
from tinyagent.science.batch_probes import first_choice_entropy, gradient_share, sampler_mismatch



@pytest.fixture(scope="module")
def base():
    return load_rl_base()


def test_the_opener_is_near_certain_and_the_verb_after_it_is_where_the_choice_is(base):
    measured = first_choice_entropy(base, seed=0)
    assert measured["positions"] >= 64                   # every episode opens at least one call
    assert measured["smallest P(<call>) there"] > 0.99
    assert (measured["mean entropy there (nats)"] < measured["mean entropy at all policy tokens"]
            < measured["mean entropy at the token after <call>"])


def test_a_kl_term_against_the_policy_itself_has_no_gradient_and_scales_with_beta(base):
    cfg = RegularizedConfig()
    itself = gradient_share(base, copy.deepcopy(base), cfg, torch.Generator().manual_seed(5))
    assert itself["k3 on the batch"] == 0.0 and itself["|grad 0.001 k3|"] == 0.0
    assert itself["|grad pg_loss|"] > 0

    other = copy.deepcopy(base)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    small = gradient_share(base, other, cfg, torch.Generator().manual_seed(5), beta=0.001)
    large = gradient_share(base, other, cfg, torch.Generator().manual_seed(5), beta=0.002)
    assert small["k3 on the batch"] > 0
    assert large["|grad 0.002 k3|"] == pytest.approx(2 * small["|grad 0.001 k3|"], rel=1e-5)
    assert large["ratio"] == pytest.approx(2 * small["ratio"], rel=1e-5)


def test_a_bfloat16_sampler_drifts_far_more_than_a_float32_one(base):
    float32 = sampler_mismatch(base, torch.float32)
    assert float32 < 1e-9                                 # rounding level
    assert sampler_mismatch(base, torch.bfloat16) > 1e3 * float32
