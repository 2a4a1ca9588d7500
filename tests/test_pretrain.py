import torch

from tinyagent.gym import TRAIN_TASKS, Episode
from tinyagent.policy import Policy
from tinyagent.policy import load_rl_base
from tinyagent.pretrain import CHECKPOINT, DemoConfig, SFTConfig, demonstrate, make_demonstrations, sft
from tinyagent.vocab import ID


def test_demonstrations_are_valid_episodes_and_deterministic():
    cfg = DemoConfig(n_demos=200)
    a, b = make_demonstrations(cfg), make_demonstrations(cfg)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    tokens, mask = a
    assert mask.any(1).all()
    # every policy-token run is a well-formed call ending in </call>
    ends = tokens[mask] == ID["</call>"]
    assert ends.sum() >= 2 * len(tokens)


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
        losses = sft(policy, tokens, mask, SFTConfig(steps=5, batch_size=16))
        runs.append((losses, torch.cat([p.flatten() for p in policy.parameters()])))
    assert runs[0][0] == runs[1][0] and torch.equal(runs[0][1], runs[1][1])
    assert runs[0][0][-1] < runs[0][0][0]
    assert policy.head.weight.dtype == torch.float64


def test_shipped_checkpoint_loads_with_its_checksum():
    assert CHECKPOINT.with_suffix(".sha256").exists()
    assert load_rl_base().num_params() == Policy().num_params()
