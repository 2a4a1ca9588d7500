import hashlib
import os
import subprocess
import sys

import pytest
import torch

from tinyagent.evaluation import evaluate, heldout_rollout
from tinyagent.grpo import policy_entropy
from tinyagent.gym import N_FUNCTIONS, TRAIN_TASKS, parse_call
from tinyagent.harness import rebuild
from tinyagent.harness.rebuild import CHECKPOINT, compare, held_out_behaviour, main
from tinyagent.policy import Policy
from tinyagent.checkpoint import load_rl_base
from tinyagent.engine import torch_threads
from tinyagent.pretrain import (DemoConfig, SFTConfig, build_rl_base, demonstrate,
                                make_demonstrations, sft)
from tinyagent.sampler import token_logprobs
from tinyagent.vocab import ID

# A short SFT in a fresh process, N times in a row; prints each checkpoint's SHA-256.
SHORT_SFT = """
import sys
from tinyagent.checkpoint import save_policy
from tinyagent.pretrain import DemoConfig, SFTConfig, build_rl_base
for _ in range(int(sys.argv[2])):
    policy = build_rl_base(DemoConfig(n_demos=64), SFTConfig(steps=30, batch_size=16))
    print(save_policy(policy, sys.argv[1]))
"""


def short_sft_digests(omp_threads, runs, path):
    # passive waiting keeps two threads fast on cores shared with other pytest workers
    env = {**os.environ, "OMP_NUM_THREADS": str(omp_threads), "OMP_WAIT_POLICY": "PASSIVE"}
    done = subprocess.run([sys.executable, "-c", SHORT_SFT, str(path), str(runs)], env=env,
                          capture_output=True, text=True, check=True)
    return done.stdout.split()


def test_demonstrations_are_valid_episodes_and_deterministic():
    cfg = DemoConfig(n_demos=200)
    a, b = make_demonstrations(cfg), make_demonstrations(cfg)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    tokens, mask = a
    assert mask.any(1).all()
    # every policy-token run is a call that the gym's parser accepts, and every demo ends in submit
    for row, row_mask in zip(tokens.tolist(), mask.tolist()):
        names = tuple(row[2:2 + 2 * N_FUNCTIONS:2])          # `<bos> <task> name kind ×5 </task>`
        runs = [[]]
        for tok, policy in zip(row, row_mask):
            if policy:
                runs[-1].append(tok)
            elif runs[-1]:
                runs.append([])
        calls = [parse_call(run, names) for run in runs if run]
        assert None not in calls and len(calls) >= 2 and calls[-1] == ("submit", None)


def test_demonstrator_reads_about_a_fifth_of_the_time():
    gen = torch.Generator().manual_seed(0)
    reads = []
    for i in range(3000):
        tokens, mask = demonstrate(TRAIN_TASKS[i % 200], DemoConfig(), gen)
        policy_tokens = {t for t, m in zip(tokens, mask) if m}
        reads.append(ID["read"] in policy_tokens or ID["cat"] in policy_tokens)
    assert abs(sum(reads) / len(reads) - DemoConfig().p_read) < 0.03


def test_a_few_sft_steps_are_deterministic_and_lower_the_loss():
    tokens, mask = make_demonstrations(DemoConfig(n_demos=64))
    runs = []
    for _ in range(2):
        policy = Policy(seed=0)
        losses = sft(policy, tokens, mask, SFTConfig(steps=5, batch_size=16, threads=1))
        runs.append((losses, torch.cat([p.flatten() for p in policy.parameters()])))
    assert runs[0][0] == runs[1][0] and torch.equal(runs[0][1], runs[1][1])
    assert runs[0][0][-1] < runs[0][0][0]
    assert policy.head.weight.dtype == torch.float32


def test_short_sft_gives_the_same_bytes_twice_and_under_one_or_two_threads(tmp_path):
    one = short_sft_digests(1, runs=2, path=tmp_path / "one.pt")
    two = short_sft_digests(2, runs=1, path=tmp_path / "two.pt")
    assert one[0] == one[1] == two[0]


# The parameters after 20 steps of the shipped SFT configuration (full demonstrations, batch 64,
# two threads, the cosine schedule over 20 steps), recorded by a1ecc1a, whose SFT rebuilt the
# shipped checkpoint byte for byte: a change to the products, GELU, Adam or the schedule that
# moves SFT's bits fails here in seconds, not only in the 2-minute `make pretrain`.
SFT_20_STEPS_SHA256 = "c4df8516ae75a3bd6a0e2cf25b983d67009d3ee2077ad72cf2431a94d029c363"


@pytest.mark.recorded_bits
def test_twenty_sft_steps_give_the_recorded_parameters():
    tokens, mask = make_demonstrations()
    policy = Policy(seed=SFTConfig().seed)
    sft(policy, tokens, mask, SFTConfig(steps=20))
    digest = hashlib.sha256(b"".join(t.numpy().tobytes() for t in policy.state_dict().values()))
    assert digest.hexdigest() == SFT_20_STEPS_SHA256


def test_sft_stops_at_the_first_non_finite_loss_naming_the_step():
    from tinyagent.checks import NonFiniteError
    tokens, mask = make_demonstrations(DemoConfig(n_demos=16))
    policy = Policy(seed=0)
    with pytest.raises(NonFiniteError, match=r"SFT step \d+ \(lr 1e\+30\): the loss became"):
        sft(policy, tokens, mask, SFTConfig(steps=5, batch_size=4, lr=1e30, threads=1))


# (the call, the error's type, its key words): each refused before a demonstration or a step
BAD_SFT = {
    "a probability above 1": (lambda: DemoConfig(p_read=1.5), ValueError, ["p_read", "[0, 1]"]),
    "no demonstrations": (lambda: DemoConfig(n_demos=0), ValueError, ["n_demos", "positive"]),
    "a negative seed": (lambda: SFTConfig(seed=-1), ValueError, ["seed", "2**64"]),
    "a NaN learning rate": (lambda: SFTConfig(lr=float("nan")), ValueError, ["lr", "finite"]),
    "no steps": (lambda: SFTConfig(steps=0), ValueError, ["steps", "positive integer"]),
    "a batch of none": (lambda: SFTConfig(batch_size=0), ValueError, ["batch_size", "positive"]),
    "a dict for a config": (lambda: make_demonstrations({"n_demos": 4}), TypeError,
                            ["cfg", "DemoConfig", "dict"]),
    "a string for a policy": (lambda: sft("policy", *_demos()), TypeError, ["policy", "Policy"]),
    "tokens as a list": (lambda: sft(Policy(), _demos()[0].tolist(), _demos()[1]), TypeError,
                         ["tokens", "integer tensor"]),
    "a mask with nothing to learn": (lambda: sft(Policy(), _demos()[0],
                                                 torch.zeros_like(_demos()[1])),
                                     ValueError, ["mask", "True somewhere"]),
    "a mask at position 0": (lambda: sft(Policy(), _demos()[0],
                                         _demos()[1].index_fill(1, torch.tensor([0]), True)),
                             ValueError, ["mask", "position 0"]),
    "a float mask": (lambda: sft(Policy(), _demos()[0], _demos()[1].float()), TypeError,
                     ["mask", "bool", "float32"]),
    "tokens longer than the block": (lambda: sft(Policy(), torch.zeros(2, 300, dtype=torch.long),
                                                 torch.ones(2, 300, dtype=torch.bool)),
                                     ValueError, ["300 positions", "block_size"]),
    "an SFT config of a dict": (lambda: build_rl_base(sft_cfg={"steps": 1}), TypeError,
                                ["sft_cfg", "SFTConfig", "dict"]),
}


def _demos():
    return make_demonstrations(DemoConfig(n_demos=8))


@pytest.mark.parametrize("name", list(BAD_SFT))
def test_sft_refuses_what_it_cannot_learn_from_before_any_step(name, monkeypatch):
    import tinyagent.pretrain as pretrain
    steps = []
    monkeypatch.setattr(pretrain, "sft_loss", lambda *a: steps.append(1))
    call, kind, words = BAD_SFT[name]
    with pytest.raises(kind) as refused:
        call()
    missing = [w for w in words if w not in str(refused.value)]
    assert not missing, f"{name}: the error lacks {missing}: {refused.value}"
    assert not steps, f"{name}: refused only after a step"


def test_sft_gives_the_caller_back_its_thread_count():
    before = torch.get_num_threads()
    with torch_threads(3):
        assert torch.get_num_threads() == 3
        tokens, mask = make_demonstrations(DemoConfig(n_demos=16))
        sft(Policy(seed=0), tokens, mask, SFTConfig(steps=1, batch_size=4, threads=1))
        assert torch.get_num_threads() == 3
    assert torch.get_num_threads() == before


def test_held_out_behaviour_measures_what_evaluate_and_policy_entropy_measure():
    policy = load_rl_base()
    ours = held_out_behaviour(policy, attempts=4)
    theirs = evaluate(policy, n=4, ks=(1,))
    for name in ("pass@1", "reads", "malformed"):
        assert ours[name][0] == pytest.approx(theirs[name])
    batch = heldout_rollout(policy, n=4)
    _, logprobs = token_logprobs(policy, batch.tokens)
    assert ours["entropy"][0] == pytest.approx(policy_entropy(logprobs, batch.policy_mask).item())
    assert all(se > 0 for _, se in ours.values())


def test_compare_calls_an_agent_equivalent_to_itself_and_not_to_an_untrained_one():
    shipped = load_rl_base()
    assert compare(shipped, shipped, attempts=4)
    assert not compare(Policy(seed=0), shipped, attempts=4)


def test_main_writes_beside_the_shipped_checkpoint_and_compares(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(rebuild, "build_rl_base", lambda progress: load_rl_base())   # no SFT
    shipped = CHECKPOINT.read_bytes()
    main(["--out", str(tmp_path / "rl_base.pt"), "--attempts", "2"])
    printed = capsys.readouterr().out
    assert "bytes: equal" in printed and "verdict: equivalent" in printed
    assert CHECKPOINT.read_bytes() == shipped and (tmp_path / "rl_base.sha256").exists()


def test_main_without_out_writes_into_its_own_folder_on_a_fresh_checkout(tmp_path, monkeypatch,
                                                                         capsys):
    monkeypatch.setattr(rebuild, "build_rl_base", lambda progress: load_rl_base())   # no SFT
    monkeypatch.setattr(rebuild, "SCRATCH", tmp_path / ".cache" / "pretrain" / "rl_base.pt")
    main(["--attempts", "2"])
    assert "bytes: equal" in capsys.readouterr().out and rebuild.SCRATCH.exists()


def test_main_says_when_a_rebuild_differs_and_refuses_an_agent_that_behaves_otherwise(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(rebuild, "build_rl_base", lambda progress: Policy(seed=0))   # untrained
    with pytest.raises(SystemExit, match="NOT equivalent"):
        main(["--out", str(tmp_path / "rl_base.pt"), "--attempts", "2"])
    assert "bytes: differ" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--out", "{tmp}"], ["--out", "{tmp}/rl_base.sha256"],
                                  ["--replace", "--out", "{tmp}/rl_base.pt"], ["--attempts", "1"]])
def test_bad_arguments_stop_before_any_training(argv, tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        main([a.format(tmp=tmp_path) for a in argv])
    assert stopped.value.code == 2 and "error:" in capsys.readouterr().err


def test_help_runs_without_a_runtime_warning():
    done = subprocess.run([sys.executable, "-W", "error", "-m", "tinyagent.harness.rebuild",
                           "--help"],
                          capture_output=True, text=True)
    assert done.returncode == 0 and done.stderr == ""


def test_shipped_checkpoint_loads_with_its_checksum():
    assert CHECKPOINT.with_suffix(".sha256").exists()
    assert load_rl_base().num_params() == Policy().num_params()


def test_the_shipped_checkpoint_under_any_spelling_needs_replace(tmp_path, monkeypatch, capsys):
    def no_training(progress):
        raise AssertionError("main started training")
    monkeypatch.setattr(rebuild, "build_rl_base", no_training)
    (tmp_path / "link.pt").symlink_to(CHECKPOINT)
    relative = os.path.relpath(CHECKPOINT.parent / ".." / "checkpoints" / CHECKPOINT.name)
    shipped = CHECKPOINT.read_bytes()
    for out in (relative, str(tmp_path / "link.pt")):
        with pytest.raises(SystemExit) as stopped:
            main(["--out", out])
        assert stopped.value.code == 2 and "takes --replace" in capsys.readouterr().err
    assert CHECKPOINT.read_bytes() == shipped
