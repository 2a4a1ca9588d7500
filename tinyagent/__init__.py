"""TinyAgent: a tiny coding agent, its one-edit gym, Chapter 9's GRPO and Chapter 10's regularizers."""
from .arithmetic import pin_environment

pin_environment()     # before torch computes anything: see arithmetic.py
from .evaluate import evaluate, pass_at_k
from .grpo import (RLConfig, behavior_stats, compute_advantages, kl_penalty, policy_loss,
                   rl_update, sample_step, train_rl)
from .gym import HELDOUT_TASKS, TRAIN_TASKS, Episode, Task
from .policy import Policy, PolicyConfig, load_policy, load_rl_base, save_policy
from .regularize import (RegularizedConfig, entropy_bonus, kl_estimate, regularized_update,
                         sequence_kl, train_regularized)
from .sampler import rollout, token_logprobs
