"""Held-out evaluation: pass@1 and pass@k with the unbiased estimator, distinct action
sequences per task, reads and malformed calls per episode, and the per-token k3 distance of
the sampled tokens from a reference policy."""
from math import comb

import torch

from .checks import (instance, int_in, nonempty_list, positive_int, seed_int,
                     temperature as check_temperature)
from .kl import kl_penalty, masked_mean
from .gym import HELDOUT_TASKS, merge_spellings
from .policy import Policy
from .sampler import rollout, token_logprobs

ATTEMPTS, EVAL_SEED = 16, 1234     # every notebook's held-out evaluation: 16 attempts a task


def pass_at_k(n, c, k):
    """Probability that k of n attempts, c of them passing, drawn without replacement, contain a
    pass: 1 - C(n - c, k) / C(n, k)."""
    n = positive_int("n", n)
    c, k = int_in("c", c, 0, n), int_in("k", k, 1, n)
    return 1.0 - comb(n - c, k) / comb(n, k)


def action_sequence(tokens, mask, names):
    """An episode's policy tokens with each name replaced by its function's index, so that
    attempts with different anonymous names compare equal when they act alike."""
    out = []
    for tok, is_policy in zip(tokens.tolist(), mask.tolist()):
        if is_policy:
            out.append(f"f{names.index(tok)}" if tok in names else tok)
    return tuple(out)


def distinct_per_task(batch, n, tokens=None):
    """Mean, over tasks, of the number of distinct action sequences among a task's `n` attempts
    (`batch` holds them grouped by task, as `heldout_rollout` samples them). `tokens` (B, T), if
    given, replaces the batch's tokens, for example with two spellings of a verb merged."""
    n = positive_int("n (attempts per task)", n)
    tasks = [episode.task for episode in batch.episodes]
    if len(tasks) % n or any(len(set(map(id, tasks[j:j + n]))) != 1 for j in range(0, len(tasks), n)):
        raise ValueError(f"distinct_per_task needs the batch grouped by task in groups of n={n} "
                         f"attempts, as heldout_rollout samples them; its {len(tasks)} episodes "
                         f"are not")
    tokens = batch.tokens if tokens is None else tokens
    seqs = [action_sequence(tokens[i], batch.policy_mask[i], episode.names)
            for i, episode in enumerate(batch.episodes)]
    per_task = [set(seqs[j:j + n]) for j in range(0, len(seqs), n)]
    return sum(len(distinct) for distinct in per_task) / len(per_task)


@torch.no_grad()
def heldout_rollout(policy, tasks=None, n=ATTEMPTS, seed=EVAL_SEED, temperature=1.0):
    """`n` attempts at every task of `tasks` (default: the 10 held-out tasks), grouped by task,
    from a generator seeded with `seed`: the episodes `evaluate` scores. Sections 10.7 and 10.8
    and the pretraining check sample these too, so that their measurements describe the
    evaluated episodes themselves."""
    tasks = HELDOUT_TASKS if tasks is None else tasks
    positive_int("n (attempts per task)", n)
    check_temperature("temperature", temperature)
    tasks, seed = nonempty_list("tasks", tasks), seed_int("seed", seed)
    gen = torch.Generator().manual_seed(seed)
    return rollout(policy, [task for task in tasks for _ in range(n)], gen, temperature)


@torch.no_grad()
def evaluate(policy, tasks=None, n=ATTEMPTS, ks=(1, 8), seed=EVAL_SEED, reference=None,
             temperature=1.0):
    """`n` attempts (16) at every task of `tasks` (default: the 10 held-out tasks) at
    `temperature`, sampled from a generator seeded with `seed`, so two policies meet the same
    draws. Returns a dict:

    "pass@k"          for each k in `ks`: the unbiased pass@k, averaged over tasks
    "distinct"        distinct action sequences per task, spellings of one action merged
                      (behaviour), averaged over tasks
    "distinct_raw"    the same with every spelling counted apart
    "reads"           read calls per episode
    "malformed"       malformed tool calls per episode
    "passed_per_task" how many of each task's n attempts passed, tasks in order
    "kl_to_ref"       only with a `reference`: the mean per-token k3 of the sampled policy
                      tokens against it
    """
    tasks = HELDOUT_TASKS if tasks is None else tasks
    n, tasks = positive_int("n (attempts per task)", n), nonempty_list("tasks", tasks)
    ks = tuple(int_in(f"each k of ks (pass@k of the n={n} attempts)", k, 1, n)
               for k in nonempty_list("ks", ks))
    if reference is not None:         # read only after the rollout: refused before it
        instance("reference", reference, Policy)
    batch = heldout_rollout(policy, tasks, n, seed, temperature)
    passed = batch.rewards.view(len(tasks), n).sum(1).long().tolist()
    out = {f"pass@{k}": sum(pass_at_k(n, c, k) for c in passed) / len(tasks) for k in ks}
    out["distinct"] = distinct_per_task(batch, n, merge_spellings(batch.tokens))   # behaviour
    out["distinct_raw"] = distinct_per_task(batch, n)            # each spelling counted apart
    out["reads"] = sum(e.reads for e in batch.episodes) / len(batch.episodes)
    out["malformed"] = sum(e.malformed for e in batch.episodes) / len(batch.episodes)
    out["passed_per_task"] = passed
    if reference is not None:
        ref_logp, _ = token_logprobs(reference, batch.tokens, temperature, batch.policy_mask)
        out["kl_to_ref"] = masked_mean(kl_penalty(batch.logp, ref_logp, "k3"),
                                         batch.policy_mask).item()
    return out
