import pytest
import torch

from tinyagent.policy import Policy, PolicyConfig, load_policy, save_policy


def test_parameter_count_is_the_chapters():
    n = Policy().num_params()
    assert abs(n - 157_000) / 157_000 < 0.05, n


def test_float64_and_cached_steps_equal_full_forward():
    policy = Policy()
    idx = torch.randint(0, policy.cfg.vocab_size, (3, 20), generator=torch.Generator().manual_seed(0))
    full = policy(idx)
    assert full.dtype == torch.float64
    cache = policy.new_cache(3)
    steps = torch.stack([policy.step(idx[:, t], t, cache) for t in range(20)], dim=1)
    assert torch.allclose(full, steps, atol=1e-12, rtol=0)


def test_too_long_sequence_is_refused():
    policy = Policy()
    with pytest.raises(ValueError, match="block_size"):
        policy(torch.zeros(1, policy.cfg.block_size + 1, dtype=torch.long))


def test_checkpoint_round_trip(tmp_path):
    policy = Policy(seed=3)
    save_policy(policy, tmp_path / "p.pt")
    loaded = load_policy(tmp_path / "p.pt")
    for a, b in zip(policy.parameters(), loaded.parameters()):
        assert torch.equal(a, b)


def test_corrupted_checkpoint_is_refused(tmp_path):
    save_policy(Policy(), tmp_path / "p.pt")
    data = bytearray((tmp_path / "p.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "p.pt").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="corrupted"):
        load_policy(tmp_path / "p.pt")


def test_mismatched_checkpoint_is_refused(tmp_path):
    save_policy(Policy(PolicyConfig(n_embd=48)), tmp_path / "p.pt")
    blob = torch.load(tmp_path / "p.pt", weights_only=True)
    blob["config"]["n_embd"] = 66                    # claims a shape its weights do not have
    torch.save(blob, tmp_path / "p.pt")
    import hashlib
    (tmp_path / "p.sha256").write_text(hashlib.sha256((tmp_path / "p.pt").read_bytes()).hexdigest())
    with pytest.raises(ValueError, match="does not match this PolicyConfig"):
        load_policy(tmp_path / "p.pt")


def test_missing_checkpoint():
    with pytest.raises(FileNotFoundError):
        load_policy("/nonexistent/p.pt")


@pytest.mark.parametrize("fields,message", [({"n_embd": 65}, "multiple of n_head"),
                                            ({"n_layer": 0}, "n_layer must be a positive integer"),
                                            ({"n_head": 2.5}, "n_head must be a positive integer")])
def test_bad_policy_configs_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        PolicyConfig(**fields)
