"""Measurements that explain Section 10.7's results on our runs: why the plain k3 loss regularizes
more than k3+ at the same beta, and where the unregularized run's distance from its start and its
malformed calls come from.

The notebook shows these beside the tables, so that a difference from the book is explained by a
measurement, not a guess. Nothing that trains or evaluates imports this module (its code is not
part of the run cache's key), and every measurement is cheap: one held-out rollout of 160 episodes,
or the 19 well-formed first calls at each of its 160 prompts, per policy.
"""
import math
from collections import Counter

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from .. import engine
from ..checks import int_in
from ..evaluation import ATTEMPTS, EVAL_SEED
from ..gym import (CALL, END_CALL, HELDOUT_TASKS, LOG, LS, SPELLINGS, SRC, TESTS, Episode,
                  call_ended, parse_call)
from ..harness.runs import policy_from_state
from ..kl import kl_penalty
from ..policy import Cache
from ..sampler import token_logprobs
from ..vocab import ID, KIND_IDS, NAME_IDS, WORDS
from .pairs import paired
from .report import logged

# ------------------------------------------------------------------ one run in numbers

def run_summary(run, late_steps=10):
    """One run's numbers: the seven columns of Section 10.7's table (the last step's training
    entropy; held-out pass@1, pass@8, distinct action sequences per task (spellings merged, and
    apart as `distinct_raw`), per-token k3 from the
    RL base agent, reads and malformed calls per episode) and what the chapter's claims also
    read: the first step's entropy, how many held-out tasks were never solved, and the batch
    reward averaged over the last `late_steps` steps (one step's 64 episodes are too few to
    compare training rewards)."""
    history, scored = run["history"], run["eval"]
    late_steps = int_in("late_steps", late_steps, 1, len(history))   # True is not a count
    return {"entropy": history[-1]["entropy"], "pass@1": scored["pass@1"],
            "pass@8": scored["pass@8"], "distinct": scored["distinct"],
            "distinct_raw": scored["distinct_raw"],
            "kl_to_ref": scored["kl_to_ref"], "reads": scored["reads"],
            "malformed": scored["malformed"], "entropy_start": history[0]["entropy"],
            "unsolved": sum(c == 0 for c in scored["passed_per_task"]),
            "late_reward": sum(log["reward"] for log in history[-late_steps:]) / late_steps}


# ------------------------------------------------------------------ the first call's decision

# Every well-formed first call, by what it does. A call is `<call> verb [argument] </call>` (the
# gym's grammar: `gym.SPELLINGS`, `gym.parse_call`); any other sequence of policy tokens up to the
# end of a call does not parse, so "malformed" is what remains.
DECISIONS = ("read tests", "read log", "read src", "edit the bug", "edit the decoy",
             "edit another", "ls", "submit", "malformed")
_NO_ARGUMENT = (WORDS[LS], *SPELLINGS["submit"])
_VERBS = (*SPELLINGS["read"], *SPELLINGS["edit"], *_NO_ARGUMENT)   # every verb's every spelling


def heldout_prompts(tasks=HELDOUT_TASKS, attempts=ATTEMPTS, seed=EVAL_SEED):
    """The held-out episodes' starts, with the anonymous names `evaluate` draws for them (it
    draws every episode's names first, from the same generator)."""
    gen = torch.Generator().manual_seed(seed)
    return [Episode.start(task, gen) for task in tasks for _ in range(attempts)]


def _decision(episode, verb, argument=None):
    """What the well-formed call `<call> verb [argument] </call>` (token ids) does in `episode`,
    as one of DECISIONS, read by the gym's `parse_call`."""
    body = (verb,) if argument is None else (verb, argument)
    action, arg = parse_call((CALL, *body, END_CALL), episode.names)
    if action == "read":
        return f"read {WORDS[arg]}"
    if action == "edit":
        task = episode.task
        return ("edit the bug" if arg == task.bug else
                "edit the decoy" if arg == task.decoy else "edit another")
    return action                                             # "ls" or "submit"


def _copy_rows(cache, rows):
    """The key/value cache of the prefixes at `rows`, one copy per continuation: a `Cache` of
    the same config, filled as far as `cache` is."""
    return Cache([(k[rows], v[rows]) for k, v in cache], cache.cfg, cache.filled)


@torch.no_grad()
def first_call_distribution(policy, episodes):
    """Exact probabilities (P, len(DECISIONS)) of each decision for the first call after each
    episode's prompt, at temperature 1. A well-formed call is `<call> verb [argument] </call>`:
    its probability is the product of its tokens' full-softmax probabilities, computed on the
    tree of the 19 well-formed calls (one pass over the prompt, then one token per branch, with
    the policy's key/value cache); "malformed" is one minus their sum. Grouping calls by what they
    do (`read` and `cat` alike, a name by its role in the task) gives the decision the reward
    sees; its KL is a lower bound on the KL between the two policies' whole first calls."""
    P, L = len(episodes), len(episodes[0].prompt())          # every prompt has the same length
    decoder = engine.Decoder(policy)
    cache = decoder.new_cache(P, L + 3)
    prompts = torch.tensor([e.prompt() for e in episodes])                     # (P, L)
    opened = F.log_softmax(decoder.prefill(prompts, cache), -1)[:, CALL]        # (P,)
    verb_logp = F.log_softmax(decoder.step(torch.full((P,), CALL), L, cache), -1)   # (P, V)
    probs = torch.zeros(P, len(DECISIONS), dtype=torch.float64)
    for verb in _VERBS:
        branch = _copy_rows(cache, torch.arange(P))
        so_far = opened + verb_logp[:, ID[verb]]                                # (P,)
        after_verb = F.log_softmax(decoder.step(torch.full((P,), ID[verb]), L + 1, branch), -1)
        if verb in _NO_ARGUMENT:                                  # `<call> verb </call>`
            probs[:, DECISIONS.index(_decision(episodes[0], ID[verb]))] += (
                so_far + after_verb[:, END_CALL]).exp()
            continue
        arguments = torch.tensor([[TESTS, LOG, SRC]] * P if verb in SPELLINGS["read"] else
                                 [list(e.names) for e in episodes])            # (P, A)
        rows = torch.arange(P).repeat_interleave(arguments.shape[1])           # (P * A,)
        so_far = (so_far[:, None] + after_verb.gather(1, arguments)).reshape(-1)   # (P * A,)
        args = arguments.reshape(-1)                                           # (P * A,)
        closed = F.log_softmax(decoder.step(args, L + 2, _copy_rows(branch, rows)), -1)
        for p, arg, value in zip(rows.tolist(), args.tolist(),
                                 (so_far + closed[:, END_CALL]).exp().tolist()):
            probs[p, DECISIONS.index(_decision(episodes[p], ID[verb], arg))] += value
    probs[:, -1] = (1.0 - probs[:, :-1].sum(1)).clamp(min=0.0)
    return probs


def kl_divergence(p, q):
    """KL(p || q) of each row of two (P, K) probability tables, with 0 log 0 = 0; infinite where
    p puts mass that q does not."""
    return torch.special.xlogy(p, p).sum(-1) - torch.special.xlogy(p, q).sum(-1)


def decision_kls(probs, ref_probs):
    """The first call's decision under a policy and under the reference, given as their
    `first_call_distribution`s on the same prompts: mean probabilities and the mean per-prompt KL
    in both directions. Reverse KL(policy || reference) is what k3+ penalizes; forward
    KL(reference || policy) is the one whose gradient the plain k3 loss follows (Section 10.3),
    and it grows without bound as the policy takes probability away from a decision the
    reference made (Section 10.5)."""
    return {**{d: v for d, v in zip(DECISIONS, probs.mean(0).tolist())},
            "reverse_kl": kl_divergence(probs, ref_probs).mean().item(),
            "forward_kl": kl_divergence(ref_probs, probs).mean().item()}


BLIND_EDITS = ("edit the bug", "edit the decoy", "edit another")   # an edit before any read


def first_call_summary(policy, prompts, ref_probs):
    """`policy`'s first call on `prompts` against the reference's (`ref_probs`, its
    `first_call_distribution` on the same prompts): the shares that read the tests and that edit
    blind, the KL in both directions and their ratio. The k3 loss follows the forward KL and k3+
    the reverse one (Section 10.3), so the two part where a run moves this decision."""
    out = decision_kls(first_call_distribution(policy, prompts), ref_probs)
    return {"read tests": out["read tests"], "blind edit": sum(out[d] for d in BLIND_EDITS),
            "reverse KL": out["reverse_kl"], "forward KL": out["forward_kl"],
            "forward / reverse": (out["forward_kl"] / out["reverse_kl"] if out["reverse_kl"]
                                  else math.nan)}           # the reference itself: no ratio


def training_mean(runs, key, first=10):
    """Each run's logged `key` averaged over its steps from `first` on: one step's 64 episodes
    are too few to compare two settings' training, and before step 10 every run is still near
    the base agent."""
    return [np.mean([log[key] for log in run["history"][first:]]) for run in runs]


def logged_path(runs, key, steps, seeds):
    """One setting's logged `key` at `steps`, a row per seed: when each run moved, where the
    final numbers say only how far."""
    series = [logged(run, key, f"the run at seed {seed}") for run, seed in zip(runs, seeds)]
    return pd.DataFrame([[values[step] for step in steps] for values in series],
                        index=pd.Index(seeds, name="seed"),
                        columns=[f"step {step}" for step in steps])


# ------------------------------------------------------------------ held-out episodes, call by call

def split_calls(tokens, mask):
    """An episode's calls as the sampler cuts them: [(positions, call tokens)], each ending where
    the gym's `call_ended` says (at `</call>` or after MAX_CALL_TOKENS policy tokens). `tokens` and
    `mask` are one row (T,)."""
    calls, positions, call = [], [], []
    for pos in mask.nonzero()[:, 0].tolist():
        positions.append(pos)
        call.append(int(tokens[pos]))
        if call_ended(call):
            calls.append((positions, call))
            positions, call = [], []
    if call:                                      # cut short by the context length
        calls.append((positions, call))
    return calls


ROLES = ("verb", "argument", "other")


def token_roles(tokens, mask):
    """Each policy token's role (B, T) as an index into ROLES, -1 off the policy's tokens: the
    token after a call's `<call>` is the verb, the next one (unless it closes the call) the
    argument; `<call>`, `</call>` and the tokens of calls that do not open with `<call>` are
    "other"."""
    roles = torch.full(tokens.shape, -1)
    for b in range(tokens.shape[0]):
        for positions, call in split_calls(tokens[b], mask[b]):
            for i, pos in enumerate(positions):
                opened = call[0] == CALL
                if opened and i == 1:
                    roles[b, pos] = ROLES.index("verb")
                elif opened and i == 2 and call[i] != END_CALL:
                    roles[b, pos] = ROLES.index("argument")
                else:
                    roles[b, pos] = ROLES.index("other")
    return roles


def decision_kinds(batch):
    """Masks (N,) over `batch`'s N policy positions (row-major: the order of `token_logprobs`'s
    packed log-distributions), by the token's role (`token_roles`): "opening verb" (the verb of
    an episode's first call that opens with `<call>`), "later verbs", "argument" (a file or name
    after a verb) and "other" (`<call>`, `</call>`, the tokens of calls that do not open)."""
    mask = batch.policy_mask
    roles = token_roles(batch.tokens, mask)
    verb = roles == ROLES.index("verb")
    opening = verb & (verb.cumsum(dim=1) == 1)
    return {"opening verb": opening[mask], "later verbs": (verb & ~opening)[mask],
            "argument": (roles == ROLES.index("argument"))[mask],
            "other": (roles == ROLES.index("other"))[mask]}


def k3_decomposition(batch, reference):
    """The per-token k3 distance of `batch`'s sampled tokens from `reference` (the quantity
    `evaluate` reports as kl_to_ref), split by task type (the log-reading minority or the
    majority) and by the token's role in its call. Returns {(task type, role): {"share": share of
    the policy tokens, "per_token": mean k3 there, "contribution": that part's sum divided by all
    policy tokens}}; the contributions add up to the total."""
    ref_logp, _ = token_logprobs(reference, batch.tokens, batch.temperature, batch.policy_mask)
    k3 = kl_penalty(batch.logp, ref_logp, "k3") * batch.policy_mask                 # (B, T)
    roles = token_roles(batch.tokens, batch.policy_mask)
    minority = torch.tensor([e.task.needs_log for e in batch.episodes])[:, None]    # (B, 1)
    total_tokens = int(batch.policy_mask.sum())
    parts = {}
    for kind, rows in (("majority", ~minority), ("needs the log", minority)):
        for r, role in enumerate(ROLES):
            here = (roles == r) & rows
            n = int(here.sum())
            parts[(kind, role)] = {"share": n / total_tokens,
                                   "per_token": k3[here].sum().item() / n if n else 0.0,
                                   "contribution": k3[here].sum().item() / total_tokens}
    return parts


def call_pattern(call, episode):
    """A call as words, with each name replaced by its role in the episode ("BUG", "DECOY",
    "NAME" for another of its functions, "ABSENT" for a name from the pool that is not in this
    task) and each kind word by "KIND", so that calls from different episodes can be counted
    together."""
    words = []
    for tok in call:
        if tok in episode.names:
            i = episode.names.index(tok)
            words.append("BUG" if i == episode.task.bug else
                         "DECOY" if i == episode.task.decoy else "NAME")
        elif tok in NAME_IDS:
            words.append("ABSENT")
        else:
            words.append("KIND" if tok in KIND_IDS else WORDS[tok])
    return " ".join(words)


def malformed_calls(batch):
    """Counter of (task type, pattern) over the batch's calls that `parse_call` rejects."""
    counts = Counter()
    for b, episode in enumerate(batch.episodes):
        kind = "needs the log" if episode.task.needs_log else "majority"
        for _, call in split_calls(batch.tokens[b], batch.policy_mask[b]):
            if parse_call(call, episode.names) is None:
                counts[(kind, call_pattern(call, episode))] += 1
    return counts


def first_call_summaries(runs, prompts, ref_probs):
    """`first_call_summary` of each run's final policy (one run per seed)."""
    return [first_call_summary(policy_from_state(run["state"]), prompts, ref_probs) for run in runs]


def training_paired(runs_a, runs_b, keys, first=10):
    """Setting a minus setting b, paired by seed (`pairs.paired`), on each logged `key` averaged
    over the steps from `first` on (`training_mean`), one row "training key, steps first-last"
    each."""
    last = len(runs_a[0]["history"]) - 1
    return {f"training {key}, steps {first}-{last}": paired(training_mean(runs_a, key, first),
                                                            training_mean(runs_b, key, first))
            for key in keys}
