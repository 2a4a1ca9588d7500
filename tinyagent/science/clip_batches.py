"""Section 10.6's clip-higher experiment on ten batches, and its tables.

On each batch drawn from the base agent, 8 full-batch Adam steps against a fixed pi_old at three
values of eps_high (Chapter 9's 0.2, DAPO's 0.28, no upper clip): what ends above the clip, what
the entropy does, and where the entropy sits by kind of decision. One result per batch is the
dict `clip_higher_batch` returns; `claims.clip_higher` scores them. Nothing that trains or
evaluates imports this module.
"""
import math

import pandas as pd
import torch

from ..engine import Adam
from ..grpo import compute_advantages, reference_logprobs, sample_step
from ..kl import entropy
from ..checkpoint import load_rl_base
from ..regularize import RegularizedConfig, regularized_update
from ..sampler import token_logprobs
from ..vocab import ID
from .book import SECTION_10_6
from .claims import clip_higher_claims, entropy_after
from .diagnostics import decision_kinds
from .report import book_vs_ours, over_seeds, score_claims

EPS_HIGHS = (0.2, 0.28, math.inf)                  # Chapter 9, DAPO, no upper clip
LABEL = {0.2: "0.2", 0.28: "0.28", math.inf: "unbounded"}
BATCH_SEEDS = range(10)
STEPS = 8
SECOND_SPELLINGS = torch.tensor([ID["patch"], ID["done"], ID["cat"]])  # of edit, submit, read


def after_steps(batch, eps_high, lr, steps=STEPS):
    """`steps` full-batch steps of the saved update on `batch` at learning rate `lr`, from a fresh
    RL base agent against the fixed pi_old; the log-probs (B, T) and log-distributions (N, V) at
    the policy positions after."""
    policy = load_rl_base()
    run_cfg = RegularizedConfig(epochs=steps, minibatches=1, eps_high=eps_high)
    advantages, _ = compute_advantages(batch.rewards, run_cfg.group_size)
    optimizer = Adam(policy.parameters(), lr=lr)
    regularized_update(policy, optimizer, batch, advantages, reference_logprobs(policy, batch),
                       run_cfg, torch.Generator().manual_seed(run_cfg.seed))
    with torch.no_grad():
        return token_logprobs(policy, batch.tokens, run_cfg.temperature, batch.policy_mask)


def second_spelling(log_dist):
    """Mean probability (over the rows of `log_dist`) of the gym's second spelling of an action."""
    return log_dist[:, SECOND_SPELLINGS].exp().sum(-1).mean().item()


def _what_steps_did(new_logp, new_dist, old_logp, mask, positive, started_low, kinds, eps):
    ratio = (new_logp - old_logp)[mask].exp()
    above = positive & (ratio > 1 + eps)
    bounded = eps < math.inf
    new_entropy = entropy(new_dist)                                      # (N,)
    return {"above 1+eps_high": int(above.sum()) if bounded else math.nan,
            "of which started < 0.5": int((above & started_low).sum()) if bounded else math.nan,
            "share started < 0.5": (above & started_low).sum().item() / max(int(above.sum()), 1)
                                   if bounded else math.nan,
            "largest ratio": ratio[positive].max().item(),
            "entropy after": new_entropy.mean().item(),
            "P(read) opening": new_dist[kinds["opening verb"], ID["read"]].exp().mean().item(),
            "P(2nd spelling) later": second_spelling(new_dist[kinds["later verbs"]]),
            # each kind's share of the mean entropy: sum over its positions / N
            "by kind": {k: new_entropy[m].sum().item() / len(m) for k, m in kinds.items()}}


def clip_higher_batch(base, cfg, seed):
    """The experiment on the batch drawn from `base` with generator `seed`: the batch's own
    numbers under "batch", and per eps_high what 8 steps did."""
    batch = sample_step(base, cfg, torch.Generator().manual_seed(seed))
    mask = batch.policy_mask
    advantages, _ = compute_advantages(batch.rewards, cfg.group_size)
    with torch.no_grad():
        old_logp, old_dist = token_logprobs(base, batch.tokens, cfg.temperature, mask)
    positive = (advantages[:, None] > 0).expand_as(mask)[mask]           # (N,)
    started_low = old_logp[mask].exp() < 0.5                             # (N,)
    kinds = decision_kinds(batch)
    readers = torch.tensor([e.reads > 0 for e in batch.episodes])
    out = {"batch": {"positive-advantage tokens": int(positive.sum()),
                     "of which started < 0.5": int((positive & started_low).sum()),
                     "entropy before": entropy(old_dist).mean().item(),
                     "P(read) opening": old_dist[kinds["opening verb"], ID["read"]].exp().mean().item(),
                     "P(2nd spelling) later": second_spelling(old_dist[kinds["later verbs"]]),
                     "advantage of episodes that read": advantages[readers].mean().item(),
                     "kinds": {k: int(m.sum()) for k, m in kinds.items()}}}
    for eps in EPS_HIGHS:
        new_logp, new_dist = after_steps(batch, eps, cfg.lr)
        out[eps] = _what_steps_did(new_logp, new_dist, old_logp, mask, positive, started_low, kinds, eps)
    return out


# ------------------------------------------------------------------ batch 0 beside the book's batch

COUNT_COLUMNS = ("above 1+eps_high", "of which started < 0.5", "largest ratio", "entropy after")
BATCH_COLUMNS = {"positive-advantage tokens": "positive_advantage_tokens",
                 "of which started < 0.5": "positive_advantage_tokens_below_half",
                 "entropy before": "entropy_before"}


def book_layout(first):
    """The book's one-batch table, ours on batch 0 beside it, rounded as the book prints it."""
    ours = {LABEL[eps]: {c: first[eps][c] for c in COUNT_COLUMNS} for eps in EPS_HIGHS}
    book = {LABEL[eps]: dict(zip(COUNT_COLUMNS[:2], SECTION_10_6["clip_higher_above"].get(eps, ())))
            for eps in EPS_HIGHS}
    for eps, value in SECTION_10_6["entropy_after"].items():
        book[LABEL[math.inf] if eps == "unbounded" else LABEL[eps]]["entropy after"] = value
    return book_vs_ours(ours, book, {"above 1+eps_high": 0, "of which started < 0.5": 0,
                                     "largest ratio": 1, "entropy after": 3}, index_name="eps_high")


def batch_layout(first):
    """Batch 0's own numbers beside the book's batch, rounded as the book prints them."""
    return book_vs_ours({"batch 0": {c: first["batch"][c] for c in BATCH_COLUMNS}},
                        {"batch 0": {c: SECTION_10_6[key] for c, key in BATCH_COLUMNS.items()}},
                        {"positive-advantage tokens": 0, "of which started < 0.5": 0,
                         "entropy before": 3}, index_name="the batch")


def entropy_fall(first):
    """Entropy before minus after the 8 steps, ours on batch 0 beside the book's batch, and their
    ratio. Unrounded."""
    after = SECTION_10_6["entropy_after"]
    fall = pd.DataFrame(
        {"ours, batch 0": [first["batch"]["entropy before"] - first[eps]["entropy after"] for eps in EPS_HIGHS],
         "book (its batch)": [SECTION_10_6["entropy_before"] - after[k] if k in after else math.nan
                              for k in (0.2, 0.28, "unbounded")]},
        index=pd.Index([LABEL[eps] for eps in EPS_HIGHS], name="eps_high"))
    fall["ours / book's"] = fall["ours, batch 0"] / fall["book (its batch)"]
    return fall


def fall_by_learning_rate(batch, first, lr, scales, book_fall):
    """The entropy fall of `batch`'s 8 steps at each eps_high and each multiple of `lr`, with
    the book's fall beside. Unrounded."""
    table = pd.DataFrame(
        {f"ours, lr x {scale}": [first["batch"]["entropy before"]
                                 - entropy(after_steps(batch, eps, scale * lr)[1]).mean().item()
                                 for eps in EPS_HIGHS] for scale in scales},
        index=book_fall.index)
    table["book (its batch)"] = book_fall
    return table


# ------------------------------------------------------------------ one step at a time

def step_by_step(batch, eps_high, beta1=0.9, steps=STEPS):
    """`after_steps` one step at a time (pi_old is the sampler's log-probs, so 8 updates of one
    epoch are the update of 8 epochs): per step, the ratios of the positive-advantage tokens
    (steps, P) and the entropy, and the tokens' starting probabilities (P,). `beta1` is Adam's
    momentum (torch's default 0.9)."""
    policy = load_rl_base()
    ref_logp = reference_logprobs(policy, batch)
    run_cfg = RegularizedConfig(epochs=1, minibatches=1, eps_high=eps_high)
    advantages, _ = compute_advantages(batch.rewards, run_cfg.group_size)
    optimizer = Adam(policy.parameters(), lr=run_cfg.lr, betas=(beta1, 0.999))
    gen = torch.Generator().manual_seed(run_cfg.seed)
    mask = batch.policy_mask
    positive = (advantages[:, None] > 0).expand_as(mask)[mask]                 # (N,)
    with torch.no_grad():
        old_logp, _ = token_logprobs(policy, batch.tokens, run_cfg.temperature, mask)
    ratios, entropies = [], []
    for _ in range(steps):
        regularized_update(policy, optimizer, batch, advantages, ref_logp, run_cfg, gen)
        with torch.no_grad():
            logp, dist = token_logprobs(policy, batch.tokens, run_cfg.temperature, mask)
        ratios.append((logp - old_logp)[mask].exp()[positive])                 # (P,)
        entropies.append(entropy(dist).mean().item())
    return torch.stack(ratios), entropies, old_logp[mask][positive].exp()


def follow(ratios, clip=1.2):
    """Per step: how many ratios are above the clip, the largest, the ratio of the token that
    ends highest, and whether that token's own gradient was on during the step (off once past
    the clip). Returns (that token's index, the columns)."""
    top = int(ratios[-1].argmax())
    before = [1.0] + ratios[:-1, top].tolist()                                # its ratio before each step
    return top, {"above 1.2": (ratios > clip).sum(dim=1).tolist(),
                 "largest": [round(r, 1) for r in ratios.max(dim=1).values.tolist()],
                 "top token": [round(r, 1) for r in ratios[:, top].tolist()],
                 "its gradient": ["off" if r > clip else "on" for r in before]}


def momentum_trajectory(batch):
    """Batch 0's steps at eps_high 0.2, with Adam and with its momentum off, step by step (the
    table), and what the notebook checks and prints beside it: the last step's largest ratio
    with Adam, and each run's top token's starting probability."""
    ratios, step_entropy, p_start = step_by_step(batch, 0.2)
    ratios_flat, _, p_start_flat = step_by_step(batch, 0.2, beta1=0.0)
    top, adam = follow(ratios)
    top_flat, flat = follow(ratios_flat)
    table = pd.concat({"Adam": pd.DataFrame({**adam, "entropy": [round(e, 3) for e in step_entropy]}),
                       "no momentum (beta1 = 0)": pd.DataFrame(flat)}, axis=1)
    table.index = pd.Index(range(1, len(ratios) + 1), name="after step")
    return table, {"largest ratio": ratios[-1].max().item(), "top token started at":
                   (p_start[top].item(), p_start_flat[top_flat].item())}


# ------------------------------------------------------------------ over the ten batches

def book_ordering(b):
    """The book's entropy ordering on one batch (the tighter the clip, the more entropy kept), at
    the book's three decimals."""
    tight, dapo, free = (entropy_after(b, eps) for eps in EPS_HIGHS)
    return tight >= dapo >= free


def entropies(batches, seeds=BATCH_SEEDS):
    """Batch by batch, the entropy before and after each setting, and whether the book's ordering
    holds. Unrounded."""
    return pd.DataFrame(
        [{"entropy before": b["batch"]["entropy before"],
          **{f"after, {LABEL[eps]}": b[eps]["entropy after"] for eps in EPS_HIGHS},
          "book's ordering holds": book_ordering(b)} for b in batches],
        index=pd.Index(seeds, name="batch seed"))


def claims_by_batch(batches):
    """`clip_higher_claims` scored on the batches, with the columns named for batches."""
    return score_claims(clip_higher_claims(), batches).rename(
        columns={"book (one seed)": "book (one batch)", "ours, seed 0": "ours, batch 0",
                 "of seeds": "of batches"})


def kind_contributions(batches, seeds=BATCH_SEEDS):
    """Batch by batch, each kind of decision's contribution to the entropy gap between no upper
    clip and the 0.2 clip (its positions' change over all positions); the kinds add up to the
    "total". Unrounded."""
    per_kind = pd.DataFrame({kind: [b[math.inf]["by kind"][kind] - b[0.2]["by kind"][kind] for b in batches]
                             for kind in batches[0][0.2]["by kind"]},
                            index=pd.Index(seeds, name="batch seed"))
    per_kind["total"] = per_kind.sum(axis=1)
    return per_kind


def kinds_over_batches(per_kind):
    """Per kind of decision, median and range over the batches of its contribution
    (`kind_contributions`), and at how many batches it is above zero."""
    kinds = [k for k in per_kind.columns if k != "total"]
    table = over_seeds({k: [{"contribution": c} for c in per_kind[k]] for k in kinds},
                       {"contribution": 3}, index_name="decision")
    table[("contribution", "batches above 0")] = [int((per_kind[k] > 0).sum()) for k in kinds]
    return table


def reading(batches, seeds=BATCH_SEEDS):
    """Batch by batch, the second spelling's probability at later calls and P(read) at the
    opening call, before the steps and after 0.2 and no upper clip, with the mean advantage of
    the episodes that read and the entropy gap. Unrounded."""
    when = (("before", "batch"), ("0.2", 0.2), ("unbounded", math.inf))
    return pd.DataFrame(
        [{**{f"2nd spelling, {w}": b[key]["P(2nd spelling) later"] for w, key in when},
          **{f"P(read), {w}": b[key]["P(read) opening"] for w, key in when},
          "advantage of readers": b["batch"]["advantage of episodes that read"],
          "entropy gap, unbounded - 0.2": entropy_after(b, math.inf) - entropy_after(b, 0.2)}
         for b in batches],
        index=pd.Index(seeds, name="batch seed"))
