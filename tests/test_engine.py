"""The chain of trust between the model a reader reads (tinyagent/policy.py, plain PyTorch) and the
engine that computes it by default (tinyagent/engine/):

- plain model ~ engine: logits, every parameter's gradient, a GRPO update and an SFT step agree
  within float32 tolerances stated below, on random policies and on the shipped agent's batches
  (the comparison is shown to fail on a planted difference);
- the engine steps aside, saying so in one line, for a policy with a hook or a replaced layer;
- the switch: `TINYAGENT_ENGINE=torch` or `engine.use("torch")` computes with the plain modules
  and `torch.optim.Adam`; without the C extension the package still runs, on torch;
- on a platform other than x86-64 no x86 pin is set.

Engine = engine (the passes against the kernels called one by one, bit for bit) is in
test_sequence_pass.py and test_token_pass.py; the kernels against other CPUs in test_vendor.py.
"""
import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tinyagent import engine
from tinyagent.checkpoint import load_rl_base
from tinyagent.engine import arithmetic
from tinyagent.grpo import RLConfig, compute_advantages, reference_logprobs, rl_update, sample_step
from tinyagent.gym import TRAIN_TASKS
from tinyagent.policy import Policy
from tinyagent.pretrain import SFTConfig, make_demonstrations, sft_loss
from tinyagent.vocab import VOCAB_SIZE

ROOT = Path(__file__).resolve().parents[1]

# How far the engine may be from the plain modules, in float32. The two differ only in the order
# of summation inside products, GELU and softmax (each within a few ulp of the exact value).
# Measured here: logits within 5e-6 of the modules' (the shipped agent's, whose logits reach 20),
# every gradient within 2.3e-6 of its largest element (a GRPO update's included). The tolerances
# sit ten times and more above that, and far below any real difference (GELU's tanh form in
# place of erf moves logits by 1e-3; a wrong mask or a missing bias, by more).
LOGITS = dict(rtol=1e-5, atol=5e-5)
GRADIENTS = 1e-4          # max |g_engine - g_plain| / max |g_plain|, per parameter


@pytest.fixture
def plain():
    """Run the body with the plain modules, then give the process its engine back."""
    engine.use("torch")
    yield
    engine.use(None)


def _idx(B=4, T=24, seed=0):
    return torch.randint(VOCAB_SIZE, (B, T), generator=torch.Generator().manual_seed(seed))


def _policies():
    return [("random", Policy(seed=3)), ("shipped", load_rl_base())]


def _logits_both(policy, idx):
    with torch.no_grad():
        kernels = engine.logits(policy, idx)
        assert engine.in_force() == "kernels"
        plain = policy(idx)
    return kernels, plain


@pytest.mark.parametrize("name, policy", _policies())
def test_the_engine_gives_the_plain_models_logits(name, policy):
    kernels, plain = _logits_both(policy, _idx())
    torch.testing.assert_close(kernels, plain, **LOGITS)
    assert not torch.equal(kernels, plain) or name == "random"    # they are two computations


def test_the_logits_comparison_fails_on_a_planted_difference(monkeypatch):
    """The tolerance is no rubber stamp: the engine with GELU's tanh approximation in place of
    the exact erf is caught, on the shipped agent."""
    from tinyagent.engine import sequence_pass
    policy = load_rl_base()
    exact = sequence_pass.gelu_float32

    def tanh_gelu(x, *args, **kwargs):
        out = exact(x, *args, **kwargs)
        return torch.nn.functional.gelu(x, approximate="tanh") if isinstance(out, torch.Tensor) \
            else out
    monkeypatch.setattr(sequence_pass, "gelu_float32", tanh_gelu)
    kernels, plain = _logits_both(policy, _idx())
    assert (kernels - plain).abs().max() > 1e-4
    with pytest.raises(AssertionError):
        torch.testing.assert_close(kernels, plain, **LOGITS)


def _gradients(policy, idx, targets):
    policy.zero_grad(set_to_none=True)
    logits = engine.logits(policy, idx)
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten()).backward()
    return {n: p.grad.clone() for n, p in policy.named_parameters()}


@pytest.mark.parametrize("name, policy", _policies())
def test_every_parameters_gradient_agrees_with_the_plain_models(name, policy, plain):
    idx, targets = _idx(seed=1), _idx(seed=2)
    engine.use("kernels")
    kernels = _gradients(policy, idx, targets)
    engine.use("torch")
    modules = _gradients(policy, idx, targets)
    for n, g in modules.items():
        scale = g.abs().max().clamp_min(1e-12)
        assert ((kernels[n] - g).abs().max() / scale) < GRADIENTS, n


class Recorder:
    """An optimizer that records each step's gradients and leaves the parameters as they are, so
    that both engines' updates start every minibatch from the same weights."""
    def __init__(self, params):
        self.params, self.grads = list(params), []

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    def step(self):
        self.grads.append([p.grad.clone() for p in self.params])


def _close_gradients(a, b, names):
    for n, x, y in zip(names, a, b):
        assert ((x - y).abs().max() / y.abs().max().clamp_min(1e-12)) < GRADIENTS, n


def _grpo_gradients(which):
    engine.use(which)
    policy, cfg = load_rl_base(), RLConfig(group_size=4, tasks_per_step=2)
    gen = torch.Generator().manual_seed(5)
    batch = sample_step(policy, cfg, gen, TRAIN_TASKS[:8])
    advantages, _ = compute_advantages(batch.rewards, cfg.group_size)
    ref_logp = reference_logprobs(load_rl_base(), batch)
    recorder = Recorder(policy.parameters())
    rl_update(policy, recorder, batch, advantages, ref_logp, cfg, gen)
    return batch, recorder.grads


def test_a_grpo_update_agrees_with_the_plain_models(plain):
    """One whole step: the same episodes sampled (the engine's decoding and the modules' give the
    same tokens here), then the update's gradients, minibatch by minibatch, agree."""
    batch_k, grads_k = _grpo_gradients("kernels")
    batch_t, grads_t = _grpo_gradients("torch")
    assert torch.equal(batch_k.tokens, batch_t.tokens)
    torch.testing.assert_close(batch_k.logp, batch_t.logp, **LOGITS)
    names = [n for n, _ in Policy().named_parameters()]
    assert len(grads_k) == len(grads_t) > 0
    for a, b in zip(grads_k, grads_t):
        _close_gradients(a, b, names)


def test_an_sft_steps_gradient_agrees_with_the_plain_models(plain):
    tokens, mask = make_demonstrations()
    grads = {}
    for which in ("kernels", "torch"):
        engine.use(which)
        policy = Policy(seed=SFTConfig().seed)
        sft_loss(policy, tokens[:64], mask[:64]).backward()
        grads[which] = [p.grad for p in policy.parameters()]
    _close_gradients(grads["kernels"], grads["torch"], [n for n, _ in Policy().named_parameters()])


def test_the_engines_adam_steps_as_torchs(plain):
    """Given the same gradients, the engine's Adam and torch.optim.Adam move the parameters alike
    (the engine's rounds its square root correctly; torch's may differ by an ulp)."""
    steps = {}
    for which in ("kernels", "torch"):
        engine.use(which)
        policy = Policy(seed=3)
        opt = engine.Adam(policy.parameters(), lr=1e-3)
        gen = torch.Generator().manual_seed(0)
        for _ in range(3):
            for p in policy.parameters():
                p.grad = torch.randn(p.shape, generator=gen)
            opt.step()
        steps[which] = [p.detach().clone() for p in policy.parameters()]
    for a, b in zip(steps["kernels"], steps["torch"]):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_the_switch_chooses_the_plain_modules_and_torchs_adam(plain):
    assert engine.in_force() == "torch"
    assert type(engine.Adam(Policy().parameters())) is torch.optim.Adam
    engine.use("kernels")
    assert type(engine.Adam(Policy().parameters())) is not torch.optim.Adam
    with pytest.raises(ValueError, match="allowed: kernels, torch"):
        engine.use("fast")


@pytest.mark.parametrize("engine_name", engine.ENGINES)
@pytest.mark.parametrize("keep, words", [
    (torch.ones(4, 24), ["bool", "float32"]),
    (torch.ones(4, 23, dtype=torch.bool), ["shaped like idx", "(4, 24)", "(4, 23)"]),
    ([[True] * 24] * 4, ["bool tensor", "list"])])
def test_features_refuses_a_bad_keep_before_any_pass(engine_name, keep, words, monkeypatch):
    engine.use(engine_name)
    try:
        policy = Policy(seed=3)
        for block in policy.blocks:
            monkeypatch.setattr(block, "forward", lambda *a: pytest.fail("a pass ran"))
        with pytest.raises(ValueError) as refused:
            engine.features(policy, _idx(), keep)
        assert all(w in str(refused.value) for w in words), refused.value
    finally:
        engine.use(None)


@pytest.mark.parametrize("change", ["hook", "replaced layer"])
def test_a_policy_a_reader_changed_is_computed_by_its_modules_said_once(change, capsys):
    policy = Policy(seed=3)
    called = []
    if change == "hook":
        policy.blocks[0].register_forward_hook(lambda *args: called.append(1))
    else:
        class Doubled(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, x):
                called.append(1)
                return self.inner(x)
        policy.blocks[1].mlp = Doubled(policy.blocks[1].mlp)
    with torch.no_grad():
        torch.testing.assert_close(engine.logits(policy, _idx()), policy(_idx()), rtol=0, atol=0)
        engine.logits(policy, _idx())
    assert called                                       # the reader's code ran
    notices = [line for line in capsys.readouterr().err.splitlines() if "plain modules" in line]
    assert len(notices) <= 1


def _step_in_place(policy):
    adam = engine.Adam(policy.parameters(), lr=1e-2)
    engine.logits(policy, _idx()).square().mean().backward()
    adam.step()


def _edit_under_no_grad(policy):
    with torch.no_grad():
        policy.head.weight.mul_(1.5)


def _new_tensor_in_data(policy):
    policy.blocks[0].attn.qkv.weight.data = policy.blocks[0].attn.qkv.weight.data * 0.5


# Each way a policy's weights change after the kernels computed it once (the seam keeps its form
# and copies the weights' rows again where only their values changed in place)
CHANGES = {"an optimizer's step": _step_in_place, "an edit under no_grad": _edit_under_no_grad,
           "a new tensor in .data": _new_tensor_in_data}


@pytest.mark.parametrize("change", list(CHANGES))
def test_after_the_weights_change_decoding_reads_the_new_weights(change):
    """A rollout's prefill and one-token step after the change give, bit for bit, what they give
    for a copy of the changed policy that the kernels meet for the first time, and not what they
    gave before (tests/test_policy.py follows the whole-sequence pass through the same changes)."""
    policy, token = Policy(seed=4), torch.tensor([1, 2, 3, 4])

    def decode(policy):
        decoder, cache = engine.Decoder(policy), policy.new_cache(4)
        return decoder.prefill(_idx(T=13), cache), decoder.step(token, 13, cache)
    with torch.no_grad():
        before = decode(policy)                           # its one-token pass built
    CHANGES[change](policy)
    with torch.no_grad():
        after, fresh = decode(policy), decode(copy.deepcopy(policy))
    assert all(map(torch.equal, after, fresh)) and not torch.equal(after[1], before[1])


def test_a_policy_turned_to_float64_after_a_pass_is_computed_by_its_modules():
    policy = Policy(seed=4)
    with torch.no_grad():
        engine.logits(policy, _idx())
        policy.double()
        assert torch.equal(engine.logits(policy, _idx()), policy(_idx()))


def _python(code, **env):
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **env}, timeout=600)
    assert done.returncode == 0, done.stderr
    return done


RUN = """
import torch
from tinyagent import engine
from tinyagent.regularize import RegularizedConfig, train_regularized
from tinyagent.checkpoint import load_rl_base
cfg = RegularizedConfig(group_size=4, tasks_per_step=2, kl_coef=0.1)
train_regularized(load_rl_base(), cfg, steps=1, progress=False)
print(engine.in_force(), type(engine.Adam(load_rl_base().parameters())).__module__)
"""


def test_tinyagent_engine_torch_runs_a_training_step_on_plain_pytorch():
    done = _python(RUN, TINYAGENT_ENGINE="torch")
    assert done.stdout.split() == ["torch", "torch.optim.adam"]


@pytest.mark.parametrize("engine_name, loaded", [("kernels", True), ("torch", False)])
def test_the_kernels_passes_are_loaded_where_a_run_starts_and_only_on_their_engine(engine_name,
                                                                                   loaded):
    # A first pass pays no import: `start` loads the passes when the kernels compute.
    code = ("import sys\nfrom tinyagent import engine\nengine.start()\n"
            "print(all(f'tinyagent.engine.{m}' in sys.modules for m in "
            "('kernel_policy', 'sequence_pass', 'token_pass', 'adam', '_kernels')))")
    done = _python(code, TINYAGENT_ENGINE=engine_name)
    assert done.stdout.split() == [str(loaded)]


def test_without_the_c_extension_a_run_starts_on_torch_and_says_so_once():
    hide = ("import sys, importlib.abc\n"
            "class Hide(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'tinyagent.engine._kernels':\n"
            "            raise ImportError('hidden')\n"
            "sys.meta_path.insert(0, Hide())\n")
    done = _python(hide + RUN)
    assert done.stdout.split() == ["torch", "torch.optim.adam"]
    notices = [line for line in done.stderr.splitlines() if "not built" in line]
    assert len(notices) == 1 and "pip install" in notices[0]


def test_without_a_c_compiler_the_install_succeeds_and_a_run_starts_on_torch(tmp_path):
    """setup.py declares the kernels an optional extension: where they do not compile (here the
    compiler is /bin/false) the package is built without them, and a run from that build computes
    on torch. The build says nothing about its folders of data (`pyproject.toml`'s package data)."""
    import shutil
    import zipfile
    tracked = subprocess.run(["git", "ls-files", "pyproject.toml", "setup.py", "README.md",
                              "LICENSE", "tinyagent"], cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout: the sources to build are git's tracked files")
    source = tmp_path / "source"
    for name in tracked.stdout.split():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                            "--no-build-isolation", "--verbose", "--wheel-dir",
                            str(tmp_path / "wheel"), str(source)],
                           capture_output=True, text=True, timeout=600,
                           env={**os.environ, "CC": "/bin/false"})
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    assert "BuildBackendWarning" not in built.stdout + built.stderr
    wheel = zipfile.ZipFile(next((tmp_path / "wheel").glob("tinyagent-*.whl")))
    assert not [name for name in wheel.namelist() if "_kernels" in name]
    assert "tinyagent/engine/c/matmul.c" in wheel.namelist()    # the run cache digests the C
    wheel.extractall(tmp_path / "installed")
    where = "import tinyagent; print(tinyagent.__file__)\n"
    done = subprocess.run([sys.executable, "-c", where + RUN], capture_output=True, text=True,
                          cwd=tmp_path, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(tmp_path / "installed")})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split()
    assert lines[0].startswith(str(tmp_path / "installed")), lines[0]
    assert lines[1:] == ["torch", "torch.optim.adam"]
    assert [line for line in done.stderr.splitlines() if "not built" in line]


@pytest.mark.parametrize("machine", ["aarch64", "arm64", "ppc64le", "riscv64"])
def test_off_x86_no_pin_is_set(machine, monkeypatch):
    """Neither in this process (the engine's start) nor in the run workers it starts."""
    assert arithmetic.runnable_pins(machine=machine) == {}
    monkeypatch.setattr(arithmetic.platform, "machine", lambda: machine)
    for name in arithmetic.PINS:
        monkeypatch.delenv(name, raising=False)
    arithmetic.pin_environment()
    assert not {name for name in arithmetic.PINS if name in os.environ}
    from tinyagent.harness.runs import workers_environment
    with workers_environment():
        assert not {name for name in arithmetic.PINS if name in os.environ}


@pytest.mark.parametrize("machine", ["x86_64", "AMD64"])
def test_on_x86_the_pins_are_set(machine):
    assert set(arithmetic.runnable_pins(machine=machine)) >= {"MKL_CBWR", "ONEDNN_MAX_CPU_ISA"}
