"""Record tests/data/three_step_reference.json: three steps of `train_regularized` from the RL
base agent in three settings, then a small held-out evaluation, under the pinned arithmetic.
tests/test_regularize.py checks that the code reproduces them bit for bit, on any x86-64 machine.
Re-record (python tests/data/record_three_step_reference.py) only when a change of numbers is
intended, and say why in the commit."""
import json
import subprocess
from pathlib import Path

import torch

from tinyagent.harness.fingerprint import matches
from tinyagent.evaluation import evaluate
from tinyagent.checkpoint import load_rl_base
from tinyagent.regularize import RegularizedConfig, train_regularized

SETTINGS = {"default": {},
            "k3_0.3_entropy": {"kl_coef": 0.3, "entropy_coef": 0.01},
            "reward_placement": {"kl_coef": 0.3, "kl_placement": "reward", "kl_kind": "k1"}}


def record(config):
    """The run's per-step log, its evaluation and each parameter's sum."""
    torch.set_num_threads(1)
    policy = load_rl_base()
    history = train_regularized(policy, RegularizedConfig(**config), steps=3, progress=False)
    held_out = evaluate(policy, reference=load_rl_base(), n=4, ks=(1, 4))
    return {"config": config, "history": history, "eval": held_out,
            "param_sums": {k: v.sum().item() for k, v in policy.state_dict().items()}}


if __name__ == "__main__":
    assert matches(), "record under the pinned arithmetic"
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    out = Path(__file__).with_name("three_step_reference.json")
    out.write_text(json.dumps({"recorded at commit": commit.strip(),
                               "runs": {name: record(c) for name, c in SETTINGS.items()}},
                              indent=1) + "\n")
