"""Refusals before work (DESIGN.md, "What bad input gets"): the harness's commands refuse a
committed output path or an unknown argument before they compute anything, the checkpoint
and fingerprint helpers answer every input with a clear error or a sentence, never a traceback
from inside, and decoding refuses a cache that does not count how far it is filled before it
writes into it. Each rule is a row of a table, checked by its key words."""
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tinyagent import engine, sampler
from tinyagent.checkpoint import RL_BASE_CHECKPOINT, save_policy
from tinyagent.engine import kvcache
from tinyagent.harness import fingerprint
from tinyagent.gym import TRAIN_TASKS
from tinyagent.policy import Cache, Policy, PolicyConfig
from tinyagent.regularize import AdaptiveKLController
from tinyagent.science import study

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = RL_BASE_CHECKPOINT.with_name("agent_1.pt")

# (the command's arguments after `python -m`, the key words of its error); each must exit 2
# (argparse's refusal) within a few seconds: the rebuild's SFT alone takes minutes
COMMANDS = {
    "rebuild over a committed checkpoint":
        (["tinyagent.harness.rebuild", "--out", str(COMMITTED.relative_to(ROOT))],
         ["committed", "agent_1.pt", "not overwritten"]),
    "rebuild over the shipped checkpoint without --replace":
        (["tinyagent.harness.rebuild", "--out", str(RL_BASE_CHECKPOINT)],
         ["shipped", "--replace"]),
    "contract with an unknown argument": (["tinyagent.harness.contract", "--bogus"],
                                          ["unrecognized arguments", "--bogus"]),
    "contract with an abbreviation": (["tinyagent.harness.contract", "--summ", "a.ipynb"],
                                      ["unrecognized arguments", "--summ"]),
    "rebuild with an abbreviation": (["tinyagent.harness.rebuild", "--rep"],
                                     ["unrecognized arguments", "--rep"]),
    "contract with a stray word": (["tinyagent.harness.contract", "summary"],
                                   ["unrecognized arguments", "summary"]),
    "contract --summary with an unknown option":
        (["tinyagent.harness.contract", "--summary", "a.ipynb", "--strict"],
         ["unrecognized arguments", "--strict"]),
    "fingerprint with an unknown argument": (["tinyagent.harness.fingerprint", "--part"],
                                             ["unrecognized arguments", "--part"]),
    "fingerprint with a stray word": (["tinyagent.harness.fingerprint", "parts"],
                                      ["unrecognized arguments", "parts"]),
    "rebuild into a missing directory": (["tinyagent.harness.rebuild", "--out", "no/such/dir/x.pt"],
                                         ["no/such/dir", "is not a directory"]),
    "the kernel probe with an argument": (["tinyagent.harness.probe", "--bogus"],
                                          ["unrecognized arguments", "--bogus"]),
    "the power analysis with an argument": (["tinyagent.science.replication_v2", "--bogus"],
                                            ["unrecognized arguments", "--bogus"]),
    "the study on a cluster address without a port": (["tinyagent.science.study", "--cluster",
                                                       "nonsense"], ["--cluster", "host:port"]),
}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_command_refuses_before_it_computes(name):
    argv, words = COMMANDS[name]
    if "rebuild" in name and not COMMITTED.exists():
        pytest.skip(f"no committed checkpoint {COMMITTED.name} in this checkout")
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": path})
    elapsed = time.perf_counter() - start
    assert done.returncode == 2, f"{name}: exit {done.returncode}\n{done.stderr[-2000:]}"
    missing = [w for w in words if w.lower() not in done.stderr.lower()]
    assert not missing, f"{name}: the error lacks {missing}: {done.stderr[-2000:]}"
    assert elapsed < 60, f"{name}: refused only after {elapsed:.0f} s"


def test_the_mismatch_message_says_so_where_the_fingerprint_matches(monkeypatch):
    """A caller may ask before it has checked: where no part differs, one sentence, no
    TypeError."""
    monkeypatch.setattr(fingerprint, "first_difference", lambda: None)
    message = fingerprint.mismatch_message()
    assert all(w in message for w in ("fingerprint", "is the pinned one", "stored outputs"))


def test_off_x86_the_mismatch_message_names_the_platform_not_the_pins(monkeypatch):
    """On an aarch64 machine (faked) the warning a run gives names the platform as the reason,
    and neither offers other causes nor tells the reader to set the x86 pins."""
    monkeypatch.setattr("platform.machine", lambda: "aarch64")
    monkeypatch.setattr(fingerprint, "first_difference", lambda: ("sampling", "the sampler"))
    message = fingerprint.mismatch_message()
    assert "aarch64" in message and "x86-64" in message and "sampling" in message
    assert "ATEN_CPU_CAPABILITY" not in message and "another CPU architecture" not in message


def test_save_policy_refuses_a_policy_without_values(tmp_path):
    """A meta-device policy (no values at all) is refused before anything is written, as
    load_policy would refuse what it wrote."""
    with torch.device("meta"):
        policy = Policy()
    out = tmp_path / "meta.pt"
    with pytest.raises(ValueError) as refused:
        save_policy(policy, out)
    assert all(w in str(refused.value) for w in ("cpu", "meta")), refused.value
    assert not out.exists() and not out.with_suffix(".sha256").exists()


# Decoding takes a `Cache` (Policy.new_cache's), which counts how far it is filled, and nothing
# else: a plain list of (keys, values) pairs, even rows copied out of a Cache, would let a token
# attend to positions never written. Each entry point refuses one before it writes anything.
# (the call, with `d` a namespace: policy, decoder (on the engine under test), tokens, prefix, and
# `plain`, a prefilled cache's rows as a list of pairs; the key words of its error)
CACHES = {
    "Decoder.step on a plain list": (lambda d: d.decoder.step(d.tokens, 4, d.plain),
                                     ["Decoder.step", "Cache", "new_cache", "list"]),
    "Decoder.step on a tuple of pairs": (lambda d: d.decoder.step(d.tokens, 4, tuple(d.plain)),
                                         ["Decoder.step", "Cache", "tuple"]),
    "Decoder.prefill into a plain list": (lambda d: d.decoder.prefill(d.prefix, d.plain),
                                          ["Decoder.prefill", "Cache", "list"]),
    "Decoder.compact of a plain list": (lambda d: d.decoder.compact(d.plain, [0], 4),
                                        ["Decoder.compact", "Cache", "list"]),
    "Decoder.step on no cache": (lambda d: d.decoder.step(d.tokens, 4, None),
                                 ["Decoder.step", "Cache", "NoneType"]),
    "Policy.step on a plain list": (lambda d: d.policy.step(d.tokens, 4, d.plain),
                                    ["Cache", "new_cache", "list"]),
    "Policy.prefill into a plain list": (lambda d: d.policy.prefill(d.prefix, d.plain),
                                         ["Cache", "new_cache", "list"]),
    "Policy.features with a plain list": (lambda d: d.policy.features(d.tokens[:, None],
                                                                      d.plain, 4),
                                          ["Cache", "new_cache", "list"]),
    "kvcache.compact of a plain list": (lambda d: kvcache.compact(d.plain, [0], 4),
                                        ["compact", "Cache", "list"]),
}


@pytest.fixture
def decoding():
    policy = Policy(seed=2)
    cache = policy.new_cache(2, 8)
    prefix = torch.tensor([[3, 4, 5, 6], [7, 8, 9, 10]])
    engine.Decoder(policy).prefill(prefix, cache)
    return SimpleNamespace(policy=policy, prefix=prefix, tokens=torch.tensor([11, 12]),
                           plain=[(k.clone(), v.clone()) for k, v in cache])


@pytest.mark.parametrize("engine_name", engine.ENGINES)
@pytest.mark.parametrize("name", list(CACHES))
def test_decoding_refuses_a_cache_that_does_not_count_its_fill(name, engine_name, decoding):
    """Refused with a TypeError naming the Cache, before any key or value is written, on either
    engine, with or without a gradient to record."""
    call, words = CACHES[name]
    if engine_name == "kernels" and not engine.kernels.available():
        pytest.skip("the engine's C kernels are not built")
    engine.use(engine_name)
    decoding.decoder = engine.Decoder(decoding.policy)

    def written():                 # bit for bit: past the fill, empty memory may hold a NaN
        return [t.view(torch.int32).clone() for pair in decoding.plain for t in pair]
    before = written()
    for grad in (False, True):
        with torch.set_grad_enabled(grad), pytest.raises(TypeError) as refused:
            call(decoding)
        missing = [w for w in words if w not in str(refused.value)]
        assert not missing, f"{name}: the error lacks {missing}: {refused.value}"
    assert all(torch.equal(a, b) for a, b in zip(before, written()))


# A Cache says which config it was made for and how far it is filled: (the arguments after the
# layers, the error's type, its key words)
CACHE_FIELDS = {
    "no config": ((None,), TypeError, ["cfg", "PolicyConfig", "NoneType"]),
    "a config as a dict": (({"n_layer": 2},), TypeError, ["cfg", "PolicyConfig", "dict"]),
    "a negative fill": ((PolicyConfig(), -1), ValueError, ["filled", "integer", "-1"]),
    "a fill past block_size": ((PolicyConfig(), 97), ValueError, ["filled", "[0, 96]"]),
    "a fractional fill": ((PolicyConfig(), 2.5), ValueError, ["filled", "integer"]),
    "a fill of True": ((PolicyConfig(), True), ValueError, ["filled", "integer"]),
}


@pytest.mark.parametrize("name", list(CACHE_FIELDS))
def test_a_cache_refuses_a_config_or_fill_it_cannot_have(name):
    args, kind, words = CACHE_FIELDS[name]
    with pytest.raises(kind) as refused:
        Cache(Policy().new_cache(1, 4), *args)
    missing = [w for w in words if w not in str(refused.value)]
    assert not missing, f"{name}: the error lacks {missing}: {refused.value}"


# The public functions a notebook calls, each refusing what it cannot compute with, before any
# work: (the call, the error's type, its key words)
CALLS = {
    "a rollout without a generator": (lambda: sampler.rollout(Policy(), TRAIN_TASKS[:2], None),
                                      TypeError, ["gen", "Generator", "NoneType"]),
    "a rollout with a seed for a generator": (lambda: sampler.rollout(Policy(), TRAIN_TASKS[:2], 0),
                                              TypeError, ["gen", "Generator", "int"]),
    "a rollout of one Task, not a list": (lambda: sampler.rollout(Policy(), TRAIN_TASKS[0],
                                                                  torch.Generator()),
                                          TypeError, ["tasks", "list or tuple", "Task"]),
    "token_logprobs in groups of 0 rows": (lambda: sampler.token_logprobs(
        Policy(), torch.zeros(2, 5, dtype=torch.long), mask=torch.zeros(2, 5, dtype=torch.bool),
        group_rows=0), ValueError, ["group_rows", "positive integer"]),
    "a Policy of a dict": (lambda: Policy({"n_layer": 2}), TypeError, ["cfg", "PolicyConfig"]),
    "a Policy seeded with a string": (lambda: Policy(seed="a"), TypeError, ["seed", "integer"]),
    "save_policy of a string": (lambda: save_policy("policy", "/tmp/x.pt"), TypeError,
                                ["policy", "Policy", "str"]),
    "save_policy of a float64 copy": (lambda: save_policy(Policy().double(), "/tmp/x.pt"),
                                      ValueError, ["float32", "float64", "policy.float()"]),
    "save_policy into a missing directory": (lambda: save_policy(Policy(), "/no/such/dir/x.pt"),
                                             ValueError, ["/no/such/dir", "is not a directory"]),
    "an adaptive KL aiming at a negative target": (lambda: AdaptiveKLController(0.1, -1.0),
                                                   ValueError, ["target > 0", "target=-1.0"]),
    "the records of a draw named by a string": (lambda: study.load_records(draw="third"), TypeError,
                                                ["draw", "Draw", "str"]),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_a_public_function_refuses_before_it_computes(name):
    call, kind, words = CALLS[name]
    with pytest.raises(kind) as refused:
        call()
    missing = [w for w in words if w not in str(refused.value)]
    assert not missing, f"{name}: the error lacks {missing}: {refused.value}"
