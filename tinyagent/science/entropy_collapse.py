"""Section 10.6's first two parts, measured: the entropy-change identity at one decision of the
base agent and over a whole batch, the diff of Chapter 9's loss against Chapter 10's, and the
check that `train_regularized` with its regularizers off is `train_rl`.

The notebook calls each of these in one line; the tables it shows are theirs. Nothing that trains
or evaluates imports this module.
"""
import ast
import difflib
import inspect
import math
from dataclasses import dataclass

import pandas as pd
import torch

from ..grpo import RLConfig, compute_advantages, train_rl
from ..kl import entropy
from ..checkpoint import load_rl_base
from ..regularize import RegularizedConfig, train_regularized
from ..sampler import token_logprobs
from ..vocab import ID, WORDS, decode
from .book import SECTION_10_6

# ------------------------------------------------------------------ the identity at one decision


@dataclass
class Decision:
    """One next-token distribution of a batch: its log-probabilities (V,), which are also valid
    logits, and the tokens that stand in for the book's likely and rare ones."""
    logits: torch.Tensor
    likely: int
    rare: int
    episode: int
    position: int
    searched: int
    context: str

    def summary(self, likely_p, rare_p):
        """What was found, in five lines, the book's two probabilities beside ours."""
        pi = self.logits.exp()
        return "\n".join([
            f"searched {self.searched} policy positions; episode {self.episode}, position {self.position}",
            f"context: {self.context} -> ?",
            f"likely token {WORDS[self.likely]!r}: p = {pi[self.likely]:.3f} (book {likely_p})",
            f"rare token   {WORDS[self.rare]!r}: p = {pi[self.rare]:.4f} (book {rare_p})",
            f"entropy of this decision: {entropy(self.logits):.3f} nats"])


def distance_to_book(log_dist, likely_p, rare_p):
    """How far one next-token distribution is from the book's pair: |log(top / likely_p)| plus
    |log(p / rare_p)| for the token p closest to rare_p. Returns (distance, likely, rare)."""
    likely = int(log_dist.argmax())
    rare = int((log_dist - math.log(rare_p)).abs().argmin())
    distance = (abs(log_dist[likely].item() - math.log(likely_p))
                + abs(log_dist[rare].item() - math.log(rare_p)))
    return distance, likely, rare


def book_decision(policy, batch, temperature, likely_p, rare_p):
    """The decision of `batch` closest to the book's pair (`distance_to_book`), searched over
    every policy position: the chapter names the two probabilities, not their distribution."""
    with torch.no_grad():
        _, dists = token_logprobs(policy, batch.tokens, temperature, batch.policy_mask)  # (N, V)
    positions = batch.policy_mask.nonzero().tolist()   # (episode, position) of each row, same order
    scores = [distance_to_book(row, likely_p, rare_p) for row in dists]
    best = min(range(len(scores)), key=lambda k: scores[k][0])
    (episode, pos), (_, likely, rare) = positions[best], scores[best]
    after_task = batch.tokens[episode].tolist().index(ID["</task>"]) + 1    # skip the task prompt
    return Decision(dists[best].clone(), likely, rare, episode, pos, len(positions),
                    decode(batch.tokens[episode, after_task:pos].tolist()))


def logit_entropy(logits):
    """Entropy (nats) of softmax(logits)."""
    return entropy(torch.log_softmax(logits, dim=-1))


def covariance(x, y, p):
    """Cov_{j ~ p}(x_j, y_j), along the last dimension."""
    return (p * x * y).sum(-1) - (p * x).sum(-1) * (p * y).sum(-1)


def identity_cases(decision, eta, likely_p, rare_p):
    """The four policy-gradient steps at one decision (reward or penalize its likely or its rare
    token, by a step `eta`): the entropy change the identity predicts, -Cov(log pi, dz), beside
    the actual one and their relative difference. Unrounded."""
    z = decision.logits
    pi, H = z.exp(), logit_entropy(z)
    rows = []
    for name, token, book_p in (("likely", decision.likely, likely_p), ("rare", decision.rare, rare_p)):
        for verb, advantage in (("reward", 1.0), ("penalize", -1.0)):
            delta_z = eta * advantage * (torch.nn.functional.one_hot(torch.tensor(token), len(pi)) - pi)
            predicted = -covariance(z, delta_z, pi).item()
            actual = (logit_entropy(z + delta_z) - H).item()
            rows.append({"case": f"{verb} {name}", "token": WORDS[token], "A": advantage,
                         "token prob": pi[token].item(), "book: token prob": book_p,
                         "predicted dH": predicted, "actual dH": actual,
                         "relative difference": abs(predicted - actual) / abs(actual)})
    return pd.DataFrame(rows).set_index("case")


BALANCE_ROWS = ("reward likely", "penalize likely", "reward rare", "penalize rare", "zero advantage")


def update_balance(policy, batch, cfg, eta):
    """The identity over a whole batch, in the tabular view (each decision's logits moved on their
    own): every policy position's sampled token a, with its episode's group advantage A, moves
    its logits by eta A (e_a - pi). Per row of the four cases ("likely": a is the position's most
    likely token), the positions, how many of them the step lowers the entropy at, and their
    summed predicted change divided by all positions (the rows add up to the mean change)."""
    mask = batch.policy_mask
    advantages, _ = compute_advantages(batch.rewards, cfg.group_size)
    with torch.no_grad():
        _, z = token_logprobs(policy, batch.tokens, cfg.temperature, mask)      # (N, V)
    pi, sampled = z.exp(), batch.tokens[mask]                                  # (N, V), (N,)
    A = advantages[:, None].expand_as(mask)[mask].to(z.dtype)                  # (N,)
    delta_z = eta * A[:, None] * (torch.nn.functional.one_hot(sampled, z.shape[-1]) - pi)
    predicted = -covariance(z, delta_z, pi)                                    # (N,)
    likely = sampled == z.argmax(-1)
    rows = {"reward likely": (A > 0) & likely, "penalize likely": (A < 0) & likely,
            "reward rare": (A > 0) & ~likely, "penalize rare": (A < 0) & ~likely, "zero advantage": A == 0}
    table = pd.DataFrame({"positions": [int(m.sum()) for m in rows.values()],
                          "lowering H": [int((predicted[m] < 0).sum()) for m in rows.values()],
                          "contribution to mean dH": [predicted[m].sum().item() / len(predicted)
                                                      for m in rows.values()]},
                         index=pd.Index(BALANCE_ROWS, name="case"))
    table.loc["all"] = table.sum()
    return table


# ------------------------------------------------------------------ the saved functions

def body_lines(fn):
    """A function's source lines after its signature and docstring."""
    source = inspect.getsource(fn)
    node = ast.parse(source).body[0]
    first = node.body[1] if ast.get_docstring(node) else node.body[0]
    return source.splitlines()[first.lineno - 1:]


def function_diff(old, new):
    """The unified diff of two functions' bodies, docstrings left out, with the whole body as
    context: what a chapter's new function changes in the old one, line by line."""
    return list(difflib.unified_diff(body_lines(old), body_lines(new), old.__name__,
                                     new.__name__, lineterm="", n=100))


def diff_counts(diff, old_name):
    """A `function_diff`'s shared, removed and added lines, as a sentence."""
    body = [line for line in diff[2:] if not line.startswith("@@")]
    shared, removed, added = (sum(line.startswith(mark) for line in body) for mark in " -+")
    return (f"{old_name}: {shared} of its {shared + removed} lines stay; {removed} are replaced "
            f"by {added} new ones.")


# ------------------------------------------------------------------ one loop: the check

LOOP_SETTINGS = {
    "regularizers off": RegularizedConfig(),
    "entropy bonus 0.01 (loss_fn)": RegularizedConfig(entropy_coef=0.01),
    "KL k3+ 0.05 in the loss (loss_fn)": RegularizedConfig(kl_coef=0.05, kl_kind="k3+"),
    "KL 0.05 in the reward (shape_rewards)": RegularizedConfig(kl_coef=0.05, kl_kind="k1",
                                                                kl_placement="reward"),
    "adaptive KL, target 0.01 (kl_controller)": RegularizedConfig(kl_coef=0.05, kl_kind="k3+", kl_target=0.01)}
LOOP_STEPS = 3


def flat_params(policy):
    """All of a policy's parameters as one vector."""
    return torch.cat([p.detach().flatten() for p in policy.parameters()])


def after_loop_steps(train, cfg, steps=LOOP_STEPS):
    """The parameters after `steps` steps of `train` with `cfg` from a fresh RL base agent."""
    policy = load_rl_base()
    train(policy, cfg, steps=steps, progress=False)
    return flat_params(policy)


def loop_runs(settings=LOOP_SETTINGS):
    """The parameters at the start, after `train_rl`'s steps, and after `train_regularized`'s at
    each setting: what the loop check compares."""
    return {"start": flat_params(load_rl_base()), "train_rl": after_loop_steps(train_rl, RLConfig()),
            "settings": {name: after_loop_steps(train_regularized, c) for name, c in settings.items()}}


def loop_check(runs):
    """Per setting, how far `train_regularized` ends from `train_rl` (the book's 0 beside it where
    the regularizers are off) and how far the steps moved the parameters at all. Unrounded."""
    thetas = runs["settings"]
    return pd.DataFrame(
        {"max |theta - train_rl's theta|": [(t - runs["train_rl"]).abs().max().item() for t in thetas.values()],
         "book: max |difference|": [SECTION_10_6["regularizers_off_max_param_diff"]]
                                   + [math.nan] * (len(thetas) - 1),
         "max |theta - start|": [(t - runs["start"]).abs().max().item() for t in thetas.values()]},
        index=pd.Index(list(thetas), name="train_regularized, 3 steps"))


def adam_bound(runs, updates, lr):
    """Whether the loop table's "max |theta - start|" is Adam's step bound (about lr per update,
    whatever the gradient's size): per setting, the largest move against updates x lr, and how
    many parameters moved above 99% and above half of that bound, of all. Unrounded."""
    bound = updates * lr
    moves = {name: (t - runs["start"]).abs() for name, t in runs["settings"].items()}
    return pd.DataFrame(
        {"max |theta - start|": [m.max().item() for m in moves.values()],
         "updates x lr": [bound] * len(moves),
         "moved > 0.99 of it": [int((m > 0.99 * bound).sum()) for m in moves.values()],
         "moved > 0.5 of it": [int((m > 0.5 * bound).sum()) for m in moves.values()],
         "parameters": [m.numel() for m in moves.values()]},
        index=pd.Index(list(moves), name="train_regularized, 3 steps"))
