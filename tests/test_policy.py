import os
from pathlib import Path

import pytest
import torch

from tinyagent.policy import Policy, PolicyConfig
from tinyagent.checkpoint import load_policy, save_policy


def test_parameter_count_is_the_chapters():
    n = Policy().num_params()
    assert abs(n - 157_000) / 157_000 < 0.05, n


def test_float32_and_cached_steps_equal_full_forward():
    policy = Policy()
    idx = torch.randint(0, policy.cfg.vocab_size, (3, 20), generator=torch.Generator().manual_seed(0))
    full = policy(idx)
    assert full.dtype == torch.float32
    cache = policy.new_cache(3)
    steps = torch.stack([policy.step(idx[:, t], t, cache) for t in range(20)], dim=1)
    assert torch.allclose(full, steps, atol=1e-5, rtol=0)          # float32 rounding


def _rows_are_the_transposed_weights(policy, weights):
    linear = [m for m in policy.modules() if isinstance(m, torch.nn.Linear)]
    assert set(weights.rows) == set(linear)
    return all(torch.equal(weights.rows[m], m.weight.detach().t()) and weights.rows[m].is_contiguous()
               for m in linear)


def test_the_engines_weights_are_the_transposed_weights_and_follow_every_change():
    """`engine.weights.Weights` copies each linear layer's weight into rows (its transpose) once
    and keeps them while they are the policy's: they are refreshed (`current` turns false, the
    seam copies them again) after an optimizer step, after `load_state_dict`, after `p.data = ...`
    and after an in-place edit; the engine's logits then follow the new weights."""
    from tinyagent import engine
    from tinyagent.engine.weights import Weights
    policy = Policy(seed=1)
    idx = torch.randint(0, policy.cfg.vocab_size, (4, 30), generator=torch.Generator().manual_seed(1))
    weights = Weights(policy)
    assert _rows_are_the_transposed_weights(policy, weights) and weights.current(policy)
    assert weights.ordered == [p for n, p in policy.named_parameters()
                               if not n.startswith("head.")]          # the pass's 16 + 2 + 2
    assert weights.current(policy)                                    # reading changes nothing

    def changed(change):
        """`current` after `change`, and the seam's rows refreshed: the transposed new weights,
        and the engine's logits equal to those of a fresh copy with the same weights."""
        with torch.no_grad():
            engine.logits(policy, idx)
        held = engine._forms[policy]
        change()
        still = held.current(policy)
        with torch.no_grad():
            after = engine.logits(policy, idx)
        fresh = Policy(seed=1)
        fresh.load_state_dict(policy.state_dict())
        with torch.no_grad():
            expected = engine.logits(fresh, idx)
        if engine.in_force() == "kernels":
            assert _rows_are_the_transposed_weights(policy, engine._forms[policy].weights)
        assert torch.equal(after, expected)
        return still

    opt = engine.Adam(policy.parameters(), lr=1e-2)

    def optimizer_step():
        policy.zero_grad()
        engine.logits(policy, idx).square().mean().backward()
        opt.step()
    assert not changed(optimizer_step)
    assert not changed(lambda: policy.load_state_dict(Policy(seed=2).state_dict()))

    def new_data():
        policy.head.weight.data = policy.head.weight.data * 2
    assert not changed(new_data)

    def in_place():
        with torch.no_grad():
            policy.blocks[1].mlp.fc.weight[0, 0] += 1.0
    assert not changed(in_place)
    with torch.no_grad():
        engine.logits(policy, idx)
    assert engine._forms[policy].current(policy)            # and nothing else invalidates them


def test_a_prefix_decoded_in_inference_mode_first_still_trains():
    """Nothing a rollout leaves behind in inference mode may stop training: autograd cannot save
    an inference tensor (an earlier causal mask, cached per length and made first by a rollout,
    did exactly that)."""
    policy, idx = Policy(seed=2), torch.zeros(2, 7, dtype=torch.long)
    with torch.inference_mode():
        policy.prefill(idx, policy.new_cache(2))
    policy(idx).sum().backward()
    assert policy.wte.weight.grad is not None


def test_a_cache_shorter_than_the_sequence_is_refused():
    policy = Policy()
    cache = policy.new_cache(2, 5)
    with pytest.raises(ValueError, match="the cache's 5 positions"):
        policy.prefill(torch.zeros(2, 6, dtype=torch.long), cache)
    with pytest.raises(ValueError, match="length"):
        policy.new_cache(2, 0)


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


def test_a_checkpoint_path_must_end_in_pt_so_no_two_share_a_checksum(tmp_path):
    for name in ("model.sha256", "twin.bin", "model"):      # model.sha256 would hold its own hash
        with pytest.raises(ValueError, match=r"must end in \.pt"):
            save_policy(Policy(), tmp_path / name)
        with pytest.raises(ValueError, match=r"must end in \.pt"):
            load_policy(tmp_path / name)
    assert not list(tmp_path.iterdir())


def test_a_save_that_fails_midway_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    import builtins
    import io
    save_policy(Policy(seed=1), tmp_path / "p.pt")
    real_open = io.open

    class DiskFull:
        """A file that takes half of what is written to it, then fails."""
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            self.f.write(data[: len(data) // 2])
            raise OSError(28, "No space left on device")

    def failing_open(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        return DiskFull(f) if "w" in mode and str(file).startswith(str(tmp_path)) else f

    monkeypatch.setattr(io, "open", failing_open)
    monkeypatch.setattr(builtins, "open", failing_open)
    with pytest.raises(OSError, match="No space"):
        save_policy(Policy(seed=2), tmp_path / "p.pt")
    monkeypatch.undo()
    loaded = load_policy(tmp_path / "p.pt")                   # the old one, whole
    assert all(torch.equal(a, b) for a, b in zip(loaded.parameters(), Policy(seed=1).parameters()))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.pt", "p.sha256"]   # no leftovers


def test_checksum_files_in_sha256sums_layout_or_upper_case_are_accepted(tmp_path):
    digest = save_policy(Policy(), tmp_path / "p.pt")
    for text in (f"{digest}  p.pt\n", f"{digest} *p.pt\n", digest.upper(), f"  {digest}\n\n"):
        (tmp_path / "p.sha256").write_text(text)
        load_policy(tmp_path / "p.pt")


def test_an_empty_or_malformed_checksum_file_is_not_called_a_corrupted_checkpoint(tmp_path):
    save_policy(Policy(), tmp_path / "p.pt")
    for text, message in (("", "p.sha256 is empty"), ("\n", "p.sha256 is empty"),
                          ("not a hash", "does not hold a SHA-256"),
                          ("abc123  p.pt", "does not hold a SHA-256")):
        (tmp_path / "p.sha256").write_text(text)
        with pytest.raises(ValueError, match=message) as err:
            load_policy(tmp_path / "p.pt")
        assert "corrupted" not in str(err.value)


def test_only_the_shipped_checkpoint_is_sent_to_pretrain_replace(tmp_path, monkeypatch):
    import tinyagent.checkpoint
    for name in ("mine.pt", "rl_base.pt"):
        save_policy(Policy(), tmp_path / name)
        data = bytearray((tmp_path / name).read_bytes())
        data[len(data) // 2] ^= 0xFF
        (tmp_path / name).write_bytes(bytes(data))
    monkeypatch.setattr(tinyagent.checkpoint, "RL_BASE_CHECKPOINT", tmp_path / "rl_base.pt")
    with pytest.raises(ValueError, match="corrupted") as err:
        load_policy(tmp_path / "mine.pt")                 # a user's own file: --replace would
    assert "pretrain" not in str(err.value)               # overwrite the shipped agent instead
    with pytest.raises(ValueError, match="corrupted.*rebuild --replace"):
        load_policy(tmp_path / ".." / tmp_path.name / "rl_base.pt")


def _spellings(shipped):
    """The shipped checkpoint spelled as issue 21 found it overwritten, and other ways."""
    relative = Path(os.path.relpath(shipped))
    return [shipped, str(shipped), shipped.parent / ".." / "checkpoints" / shipped.name, relative,
            shipped.with_suffix(".sha256").with_suffix(".pt")]


def test_save_policy_refuses_the_shipped_checkpoint_under_any_spelling(tmp_path, monkeypatch):
    import tinyagent.checkpoint
    from tinyagent.checkpoint import is_shipped_checkpoint
    shipped = tmp_path / "checkpoints" / "rl_base.pt"
    shipped.parent.mkdir()
    save_policy(Policy(seed=0), shipped)
    before = shipped.read_bytes(), shipped.with_suffix(".sha256").read_bytes()
    monkeypatch.setattr(tinyagent.checkpoint, "RL_BASE_CHECKPOINT", shipped)
    (tmp_path / "link.pt").symlink_to(shipped)
    os.link(shipped, tmp_path / "hard.pt")
    for path in _spellings(shipped) + [tmp_path / "link.pt", tmp_path / "hard.pt"]:
        assert is_shipped_checkpoint(path), path
        with pytest.raises(ValueError, match="is the shipped checkpoint .*rebuild --replace"):
            save_policy(Policy(seed=5), path)
    assert (shipped.read_bytes(), shipped.with_suffix(".sha256").read_bytes()) == before
    assert not is_shipped_checkpoint(tmp_path / "mine.pt")
    save_policy(Policy(seed=5), shipped, replace_shipped=True)    # what rebuild --replace does
    assert shipped.read_bytes() != before[0]


def test_the_real_shipped_checkpoint_is_refused_by_the_spelling_from_the_issue():
    from tinyagent.checkpoint import RL_BASE_CHECKPOINT, is_shipped_checkpoint
    spelled = RL_BASE_CHECKPOINT.parent / ".." / "checkpoints" / "rl_base.pt"
    assert is_shipped_checkpoint(spelled) and is_shipped_checkpoint(RL_BASE_CHECKPOINT)
    with pytest.raises(ValueError, match="is the shipped checkpoint"):
        save_policy(Policy(seed=5), spelled)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_checkpoint_with_non_finite_weights_is_refused_although_its_checksum_matches(
        tmp_path, bad):
    policy = Policy(seed=0)
    with torch.no_grad():
        policy.blocks[0].attn.qkv.weight[0, 0] = bad
    save_policy(policy, tmp_path / "diverged.pt")             # sha256 written for these bytes
    with pytest.raises(ValueError, match=r"non-finite weights .*blocks\.0\.attn\.qkv\.weight"):
        load_policy(tmp_path / "diverged.pt")


def test_write_atomically_writes_bytes_and_leaves_no_temporary_file(tmp_path):
    from tinyagent.files import write_atomically
    write_atomically(tmp_path / "a.bin", b"one")
    write_atomically(str(tmp_path / "a.bin"), b"two")
    assert (tmp_path / "a.bin").read_bytes() == b"two"
    assert [p.name for p in tmp_path.iterdir()] == ["a.bin"]


def test_a_checkpoint_path_is_read_alike_by_save_and_load(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    save_policy(Policy(seed=1), "~/x.pt")
    assert (tmp_path / "x.pt").exists() and isinstance(load_policy("~/x.pt"), Policy)
    for bad in (None, ""):
        with pytest.raises((TypeError, ValueError), match="path must be a path"):
            load_policy(bad)


def test_bytes_that_are_no_checkpoint_are_called_so_without_unsafe_advice(tmp_path):
    import hashlib
    data = os.urandom(500)
    (tmp_path / "x.pt").write_bytes(data)
    (tmp_path / "x.sha256").write_text(hashlib.sha256(data).hexdigest())
    with pytest.raises(ValueError, match="not a checkpoint save_policy wrote") as err:
        load_policy(tmp_path / "x.pt")
    assert "weights_only" not in str(err.value) and err.value.__cause__ is None


def test_write_atomically_takes_a_long_name_and_refuses_a_missing_directory(tmp_path):
    from tinyagent.files import write_atomically
    name = "n" * 250
    write_atomically(tmp_path / name, b"x")
    assert [p.name for p in tmp_path.iterdir()] == [name]
    with pytest.raises(FileNotFoundError, match="missing is not a directory"):
        write_atomically(tmp_path / "missing" / "x.bin", b"x")


def test_save_policy_adds_beside_the_shipped_checkpoint_but_never_overwrites_there(tmp_path, monkeypatch):
    import tinyagent.checkpoint as policy_module
    shipped = tmp_path / "checkpoints" / "rl_base.pt"
    shipped.parent.mkdir()
    monkeypatch.setattr(policy_module, "RL_BASE_CHECKPOINT", shipped)
    save_policy(Policy(seed=1), shipped, replace_shipped=True)
    study_agent = shipped.with_name("agent_1.pt")
    save_policy(Policy(seed=2), study_agent)                   # a new agent may be added
    before = study_agent.read_bytes()
    with pytest.raises(ValueError, match="committed checkpoints are not overwritten"):
        save_policy(Policy(seed=3), study_agent)
    assert study_agent.read_bytes() == before
    save_policy(Policy(seed=3), tmp_path / "elsewhere.pt")      # anywhere else is allowed


# A step through the modules computes each row with torch's products, which give a row the same
# bits whatever the other rows only on MKL's pinned branch (MKL_CBWR: measured, its AUTO branch on
# an AVX-512 CPU does not); the engine's products do so on any CPU (matmul.c).
THROUGH = [pytest.param("the modules", marks=pytest.mark.x86_64(
               "MKL's products under MKL_CBWR's pin, whose bits for a row do not depend on the "
               "other rows of the product")),
           "the engine"]


@pytest.mark.parametrize("through", THROUGH)
def test_step_with_rows_gives_those_rows_logits_and_stores_every_row(through):
    from tinyagent import engine
    policy = Policy(seed=5)
    decoder = policy if through == "the modules" else engine.Decoder(policy)
    prefill, step = decoder.prefill, decoder.step
    idx = torch.randint(0, policy.cfg.vocab_size, (6, 9), generator=torch.Generator().manual_seed(5))
    with torch.inference_mode():
        full, some = policy.new_cache(6, 9), policy.new_cache(6, 9)
        prefill(idx[:, :8], full)
        prefill(idx[:, :8], some)
        everything = step(idx[:, 8], 8, full)
        chosen = step(idx[:, 8], 8, some, [1, 4, 5])
    assert torch.equal(chosen, everything[[1, 4, 5]])
    assert all(torch.equal(a, b) for pa, pb in zip(full, some) for a, b in zip(pa, pb))


@pytest.mark.parametrize("through", THROUGH)
def test_a_cache_counts_its_fill_and_rows_copied_out_of_it_are_a_cache_again(through):
    """new_cache's Cache counts the positions written (prefill, step, compact) and refuses a
    position past them; rows copied out of it, wrapped as a Cache with its config and fill,
    decode as the Cache does, and the same rows as a plain list are refused."""
    from tinyagent import engine
    from tinyagent.policy import Cache
    policy = Policy(seed=7)
    decoder = policy if through == "the modules" else engine.Decoder(policy)
    idx = torch.randint(0, policy.cfg.vocab_size, (3, 6), generator=torch.Generator().manual_seed(7))
    with torch.inference_mode():
        cache = policy.new_cache(3, 8)
        assert isinstance(cache, Cache) and cache.filled == 0 and cache.cfg == policy.cfg
        decoder.prefill(idx[:, :4], cache)
        assert cache.filled == 4
        with pytest.raises(ValueError, match="not filled"):
            decoder.step(idx[:, 5], 5, cache)
        rows = [(k[[0, 2]].clone(), v[[0, 2]].clone()) for k, v in cache]
        copied = Cache(rows, cache.cfg, cache.filled)
        expected = decoder.step(idx[:, 4], 4, cache)
        assert cache.filled == 5
        with pytest.raises(TypeError, match="Cache"):
            decoder.step(idx[[0, 2], 4], 4, rows)
        assert torch.equal(decoder.step(idx[[0, 2], 4], 4, copied), expected[[0, 2]])
        assert copied.filled == 5
        if through == "the engine":
            kept = decoder.compact(cache, [0, 2], 5)
            assert isinstance(kept, Cache) and kept.filled == 5 and len(kept[0][0]) == 2
            decoder.step(idx[[0, 2], 5], 5, kept)
            assert kept.filled == 6
