"""Tests of tinyagent.science.diagnostics: exact decision distributions and KLs, the per-token k3
decomposition, and the call-by-call reading of episodes."""
import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from tinyagent import engine
from tinyagent.science.diagnostics import (DECISIONS, ROLES, _copy_rows, call_pattern, decision_kls,
                                   first_call_distribution, heldout_prompts, k3_decomposition,
                                   kl_divergence, logged_path, malformed_calls, run_summary,
                                   split_calls, token_roles)
from tinyagent.evaluation import evaluate, heldout_rollout
from tinyagent.gym import HELDOUT_TASKS, Episode, Task
from tinyagent.policy import Cache, Policy
from tinyagent.checkpoint import load_rl_base
from tinyagent.vocab import ID, WORDS, encode

TASKS = HELDOUT_TASKS[:4]          # small, but with both task types
assert {t.needs_log for t in TASKS} == {True, False}


@pytest.fixture(scope="module")
def base():
    return load_rl_base()


def test_kl_divergence_against_a_hand_computation():
    p = torch.tensor([[0.9, 0.1, 0.0], [0.5, 0.25, 0.25]], dtype=torch.float64)
    q = torch.tensor([[0.5, 0.5, 0.0], [0.25, 0.25, 0.5]], dtype=torch.float64)
    expected = [0.9 * math.log(0.9 / 0.5) + 0.1 * math.log(0.1 / 0.5),    # 0 log 0 counts as 0
                0.5 * math.log(2) + 0.25 * math.log(0.5)]
    assert kl_divergence(p, q).tolist() == pytest.approx(expected, abs=1e-15)
    assert kl_divergence(p, p).tolist() == [0.0, 0.0]
    assert math.isinf(kl_divergence(torch.tensor([[0.5, 0.5]]), torch.tensor([[1.0, 0.0]]))[0])


def _call_probability(policy, episode, body):
    """P(`<call> body </call>` | prompt) by one teacher-forced pass over the whole sequence."""
    prompt = episode.prompt()
    seq = torch.tensor([prompt + [ID["<call>"], *body, ID["</call>"]]])
    logp = F.log_softmax(policy(seq[:, :-1]), -1).gather(-1, seq[:, 1:, None])[0, :, 0]
    return logp[len(prompt) - 1:].sum().exp().item()


def test_first_call_distribution_matches_teacher_forcing_of_every_well_formed_call(base):
    episodes = heldout_prompts(TASKS, attempts=2)
    probs = first_call_distribution(base, episodes)
    assert probs.shape == (len(episodes), len(DECISIONS))
    assert (probs >= 0).all() and probs.sum(1).tolist() == pytest.approx([1.0] * len(episodes))
    for p, episode in enumerate(episodes):
        task, names = episode.task, episode.names
        by_hand = {d: 0.0 for d in DECISIONS}
        for verb in ("read", "cat"):
            for file in ("tests", "log", "src"):
                by_hand[f"read {file}"] += _call_probability(base, episode, encode([verb, file]))
        for verb in ("edit", "patch"):
            for i, name in enumerate(names):
                role = ("edit the bug" if i == task.bug else
                        "edit the decoy" if i == task.decoy else "edit another")
                by_hand[role] += _call_probability(base, episode, [ID[verb], name])
        by_hand["ls"] = _call_probability(base, episode, [ID["ls"]])
        by_hand["submit"] = sum(_call_probability(base, episode, [ID[v]]) for v in ("submit", "done"))
        by_hand["malformed"] = 1.0 - sum(by_hand.values())
        assert probs[p].tolist() == pytest.approx([by_hand[d] for d in DECISIONS], abs=1e-5)  # float32
        if not task.needs_log:
            assert probs[p, DECISIONS.index("edit the decoy")] == 0.0


@pytest.mark.parametrize("engine_name", engine.ENGINES)
def test_rows_copied_for_a_branch_are_a_cache_with_its_fill_that_decodes_as_the_rows_did(
        engine_name):
    """`first_call_distribution` branches its decoding by copying rows of the cache: the copy is
    a Cache of the same config, filled as far as the original, whose next tokens get the logits,
    bit for bit, of the same rows in the original (a batch of the same size: torch's products
    may round another batch size otherwise); a position past its fill is refused."""
    if engine_name == "kernels" and not engine.kernels.available():
        pytest.skip("the engine's C kernels are not built")
    engine.use(engine_name)
    policy = Policy(seed=3)
    decoder = engine.Decoder(policy)
    idx = torch.randint(0, policy.cfg.vocab_size, (3, 7), generator=torch.Generator().manual_seed(3))
    rows = torch.tensor([2, 0, 2])                  # one row twice, as branches copy them
    with torch.no_grad():
        cache = decoder.new_cache(3, 8)
        decoder.prefill(idx[:, :5], cache)
        copied = _copy_rows(cache, rows)
        assert isinstance(copied, Cache) and copied.cfg == policy.cfg and copied.filled == 5
        assert len(copied[0][0]) == len(rows)
        with pytest.raises(ValueError, match="not filled"):
            decoder.step(idx[rows, 6], 6, _copy_rows(cache, rows))
        expected = decoder.step(idx[:, 5], 5, cache)                          # (3, V)
        assert torch.equal(decoder.step(idx[rows, 5], 5, copied), expected[rows])
        again = _copy_rows(copied, torch.tensor([1, 0, 1]))        # rows 0, 2, 0, filled to 6
        assert again.filled == 6
        assert torch.equal(decoder.step(idx[[0, 2, 0], 6], 6, again),
                           decoder.step(idx[:, 6], 6, cache)[[0, 2, 0]])


def test_decision_kls_average_the_per_prompt_kls_in_both_directions(base):
    episodes = heldout_prompts(TASKS, attempts=2)
    ref = first_call_distribution(base, episodes)
    same = decision_kls(ref, ref)
    assert same["reverse_kl"] == pytest.approx(0.0, abs=1e-12)
    assert same["forward_kl"] == pytest.approx(0.0, abs=1e-12)
    assert sum(same[d] for d in DECISIONS) == pytest.approx(1.0)
    probs = first_call_distribution(Policy(seed=0), episodes)
    other = decision_kls(probs, ref)
    assert other["reverse_kl"] == pytest.approx(kl_divergence(probs, ref).mean().item())
    assert other["forward_kl"] == pytest.approx(kl_divergence(ref, probs).mean().item())
    assert other["reverse_kl"] > 0 and other["forward_kl"] > 0
    assert other["reverse_kl"] != pytest.approx(other["forward_kl"])     # KL is not symmetric


def test_k3_decomposition_parts_add_up_to_the_evaluated_distance(base):
    policy = Policy(seed=0)
    batch = heldout_rollout(policy, TASKS, n=4)
    parts = k3_decomposition(batch, base)
    assert set(parts) == {(kind, role) for kind in ("majority", "needs the log") for role in ROLES}
    total = evaluate(policy, TASKS, n=4, ks=(1,), reference=base)["kl_to_ref"]
    # evaluate computes the reference's float32 log-probs in batches of another shape, which round
    # in the last bits (1e-9 relative, measured): agreement to float32 precision, not to float64
    assert sum(part["contribution"] for part in parts.values()) == pytest.approx(total, rel=1e-6)
    assert sum(part["share"] for part in parts.values()) == pytest.approx(1.0)
    for part in parts.values():
        assert part["contribution"] == pytest.approx(part["share"] * part["per_token"], abs=1e-12)


def _row(policy_words):
    """One episode row: a prompt-like non-policy prefix, then policy calls separated by an
    observation; returns tokens (T,) and mask (T,)."""
    tokens, mask = [ID["<bos>"], ID["<task>"]], [False, False]
    for words in policy_words:
        if isinstance(words, str):                  # an observation
            tokens += encode(words)
            mask += [False] * len(words.split())
        else:
            tokens += encode(words)
            mask += [True] * len(words)
    return torch.tensor(tokens), torch.tensor(mask)


def test_split_calls_and_roles_follow_the_call_grammar():
    tokens, mask = _row([["<call>", "read", "tests", "</call>"], "<obs> fail fn001 </obs>",
                         ["<call>", "submit", "submit", "submit"], ["</call>"],
                         "<obs> error malformed </obs>", ["tests", "log", "</call>"]])
    calls = split_calls(tokens, mask)
    assert [[WORDS[t] for t in call] for _, call in calls] == [
        ["<call>", "read", "tests", "</call>"], ["<call>", "submit", "submit", "submit"],
        ["</call>"], ["tests", "log", "</call>"]]
    roles = token_roles(tokens[None], mask[None])[0]
    names = [ROLES[r] if r >= 0 else None for r in roles.tolist()]
    policy_roles = [n for n, m in zip(names, mask.tolist()) if m]
    assert policy_roles == ["other", "verb", "argument", "other",     # <call> read tests </call>
                            "other", "verb", "argument", "other",     # four tokens, cut there
                            "other",                                  # a lone </call>
                            "other", "other", "other"]                # no <call>: no verb
    assert all(n is None for n, m in zip(names, mask.tolist()) if not m)


def test_call_patterns_name_each_function_by_its_role():
    task = Task(kinds=tuple(encode("kind000 kind001 kind002 kind003 kind004")), bug=1, decoy=3)
    episode = Episode(task, tuple(encode("fn000 fn001 fn002 fn003 fn004")))
    assert call_pattern(encode("<call> edit fn001 </call>"), episode) == "<call> edit BUG </call>"
    assert call_pattern(encode("<call> edit fn003 fn002"), episode) == "<call> edit DECOY NAME"
    assert call_pattern(encode("<call> patch fn039 </call>"), episode) == "<call> patch ABSENT </call>"
    assert call_pattern(encode("<call> read kind007 </call>"), episode) == "<call> read KIND </call>"


def test_malformed_calls_count_only_calls_the_gym_rejects():
    task = Task(kinds=tuple(encode("kind000 kind001 kind002 kind003 kind004")), bug=1)
    episode = Episode(task, tuple(encode("fn000 fn001 fn002 fn003 fn004")))
    tokens, mask = _row([["<call>", "edit", "fn039", "</call>"], "<obs> error malformed </obs>",
                         ["<call>", "edit", "fn001", "</call>"], "<obs> edited fn001 </obs>",
                         ["<call>", "edit", "fn039", "</call>"], "<obs> error malformed </obs>",
                         ["<call>", "done", "</call>"]])
    batch = SimpleNamespace(tokens=tokens[None], policy_mask=mask[None], episodes=[episode])
    assert malformed_calls(batch) == {("majority", "<call> edit ABSENT </call>"): 2}


def test_run_summary_reads_the_table_columns_and_the_claims_quantities():
    history = [{"entropy": 0.5 - 0.01 * s, "reward": s / 40} for s in range(40)]
    scored = {"pass@1": 0.7, "pass@8": 0.9, "distinct": 6.5, "distinct_raw": 7.5, "kl_to_ref": 0.3,
              "reads": 1.1,
              "malformed": 0.2, "passed_per_task": [0, 16, 12, 0, 9, 16, 16, 3, 8, 14]}
    row = run_summary({"history": history, "eval": scored})
    assert (row["entropy"], row["entropy_start"]) == (history[-1]["entropy"], 0.5)
    assert row["kl_to_ref"] == 0.3 and row["pass@8"] == 0.9 and row["unsolved"] == 2
    assert (row["distinct"], row["distinct_raw"]) == (6.5, 7.5)
    assert row["late_reward"] == pytest.approx(sum(range(30, 40)) / 40 / 10)


@pytest.mark.parametrize("late_steps", [0, 4, 1.5, 2.0, True, "3", None])
def test_run_summary_refuses_late_steps_outside_the_run(late_steps):
    run = {"history": [{"entropy": 0.5, "reward": 0.1}] * 3,
           "eval": {"pass@1": 0.5, "pass@8": 0.9, "distinct": 2.0, "distinct_raw": 2.0,
                    "kl_to_ref": 0.1, "reads": 0.2,
                    "malformed": 0.1, "passed_per_task": [1, 0]}}
    with pytest.raises(ValueError, match=r"late_steps must be an integer in \[1, 3\]"):
        run_summary(run, late_steps)


def test_decision_kinds_mask_the_packed_policy_positions_by_role():
    from tinyagent.science.diagnostics import decision_kinds
    first, mask_a = _row([["<call>", "read", "tests", "</call>"], "<obs> fail fn001 </obs>",
                          ["<call>", "edit", "fn001", "</call>"]])
    second, mask_b = _row([["tests", "log", "</call>"], "<obs> error malformed </obs>",
                           ["<call>", "ls", "</call>"]])
    width = max(len(first), len(second))
    tokens = torch.stack([F.pad(first, (0, width - len(first))),
                          F.pad(second, (0, width - len(second)))])
    mask = torch.stack([F.pad(mask_a, (0, width - len(mask_a))),
                        F.pad(mask_b, (0, width - len(mask_b)))])
    kinds = decision_kinds(SimpleNamespace(tokens=tokens, policy_mask=mask))
    words = [WORDS[t] for t in tokens[mask].tolist()]
    picked = {kind: [w for w, m in zip(words, m.tolist()) if m] for kind, m in kinds.items()}
    assert picked == {"opening verb": ["read", "ls"], "later verbs": ["edit"],
                      "argument": ["tests", "fn001"],
                      "other": ["<call>", "</call>", "<call>", "</call>",
                                "tests", "log", "</call>", "<call>", "</call>"]}
    assert all(m.shape == (int(mask.sum()),) for m in kinds.values())


def test_first_call_summary_reads_the_decision_kls_of_the_policy_against_the_reference(base):
    from tinyagent.science.diagnostics import BLIND_EDITS, first_call_summary
    episodes = heldout_prompts(TASKS, attempts=2)
    ref = first_call_distribution(base, episodes)
    same = first_call_summary(base, episodes, ref)            # the reference against itself
    assert same["reverse KL"] == pytest.approx(0.0, abs=1e-12)
    assert same["reverse KL"] != 0 or math.isnan(same["forward / reverse"])
    other = Policy(seed=0)
    summary, kls = first_call_summary(other, episodes, ref), decision_kls(
        first_call_distribution(other, episodes), ref)
    assert summary["read tests"] == kls["read tests"]
    assert summary["blind edit"] == pytest.approx(sum(kls[d] for d in BLIND_EDITS))
    assert 0 <= summary["read tests"] + summary["blind edit"] <= 1
    assert summary["forward / reverse"] == pytest.approx(kls["forward_kl"] / kls["reverse_kl"])


def test_training_mean_averages_each_run_from_the_given_step_on():
    from tinyagent.science.diagnostics import training_mean
    runs = [{"history": [{"reward": float(s)} for s in range(40)]},
            {"history": [{"reward": 1.0}] * 10 + [{"reward": 0.0}] * 30}]
    assert training_mean(runs, "reward") == pytest.approx([sum(range(10, 40)) / 30, 0.0])
    assert training_mean(runs, "reward", first=0)[1] == pytest.approx(0.25)


def test_training_paired_names_the_steps_and_pairs_each_seed():
    from tinyagent.science.diagnostics import training_paired
    a = [{"history": [{"reward": 1.0}] * 40}, {"history": [{"reward": 0.0}] * 40}]
    b = [{"history": [{"reward": 0.5}] * 40}] * 2
    (name, row), = training_paired(a, b, ["reward"]).items()
    assert name == "training reward, steps 10-39"
    assert (row["mean"], row["min"], row["max"], row["a_above_b"]) == (0.0, -0.5, 0.5, 1)
    assert list(training_paired(a, b, ["reward"], first=20)) == ["training reward, steps 20-39"]


def test_first_call_summaries_read_each_runs_final_parameters(base):
    from tinyagent.science.diagnostics import first_call_summaries, first_call_summary
    episodes = heldout_prompts(TASKS, attempts=1)
    ref = first_call_distribution(base, episodes)
    other = Policy(seed=0)
    (same, moved) = first_call_summaries([{"state": base.state_dict()},
                                          {"state": other.state_dict()}], episodes, ref)
    assert same["reverse KL"] == pytest.approx(0.0, abs=1e-12)
    assert moved == first_call_summary(other, episodes, ref)


def test_logged_path_reads_each_seeds_log_at_the_steps_asked():
    runs = [{"history": [{"entropy": 10 * seed + step} for step in range(5)]} for seed in range(3)]
    table = logged_path(runs, "entropy", (0, 4), seeds=[7, 8, 9])
    assert table.loc[8, "step 4"] == 14 and table.loc[9, "step 0"] == 20
    assert list(table.columns) == ["step 0", "step 4"] and table.index.name == "seed"
