"""The RL base agent from nothing: scripted demonstrations, then supervised fine-tuning.

`make pretrain` (tinyagent/harness/rebuild.py) rebuilds it and compares it with the shipped one.

SFT amplifies rounding differences over its 3,500 Adam steps, so it runs under the pinned
arithmetic (tinyagent/engine/arithmetic.py) on a fixed number of torch threads: the rebuild gives the shipped bytes
on any x86-64 machine, whatever OMP_NUM_THREADS says. Every rebuild is still compared with the
shipped agent on the held-out tasks, so that on a platform where the bits differ the verdict says
whether the behaviour does by more than sampling error.

The demonstrator is deliberately mediocre, because RL must have something to discover: it
reads in about a fifth of episodes, not always the right file, and after reading a name it
edits that function only some of the time; it rarely follows a test's pointer to the log, and
sometimes edits a second function for good measure. These choices carry most of the base
agent's entropy, and RL collapses them. A little of it is in choices that do not matter (an
optional `ls`, a rarer synonym for each verb), which RL barely touches in 40 steps.
"""
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F

from . import engine
from .checks import (finite_positive, instance, positive_int, real_number, require_finite,
                     seed_int, token_ids)
from .gym import N_FUNCTIONS, SPELLINGS, TRAIN_TASKS, Episode
from .policy import Policy
from .vocab import ID, PAD, WORDS, encode


def probability(name, value):
    """`value` as a float if it is a real number in [0, 1]."""
    return real_number(name, value, lambda v: 0 <= v <= 1, "a probability, in [0, 1]")


@dataclass(frozen=True)
class DemoConfig:
    n_demos: int = 20000
    p_read: float = 0.22     # read a file first (the chapter's base agent reads in 0.21-0.24)
    p_tests: float = 0.7     # the file read is the tests (else the log or the source, equally)
    p_copy: float = 0.5      # after reading a name, edit it (else a function at random)
    p_log: float = 0.15      # when the test points to the log, read the log
    p_extra_edit: float = 0.1    # also edit a second function at random (usually breaks a test)
    p_ls: float = 0.1        # a harmless `ls` first
    p_usual_verb: float = 0.9    # read/edit/submit; the rest cat/patch/done: same effect
    seed: int = 0

    def __post_init__(self):
        set_field = object.__setattr__.__get__(self)
        set_field("n_demos", positive_int("n_demos", self.n_demos))
        for field in fields(self):
            if field.name.startswith("p_"):
                set_field(field.name, probability(field.name, getattr(self, field.name)))
        set_field("seed", seed_int("seed", self.seed))


@dataclass(frozen=True)
class SFTConfig:
    steps: int = 3500
    batch_size: int = 64
    lr: float = 3e-3
    seed: int = 0
    threads: int = 2          # torch's own sums split by thread: the shipped agent was built with 2

    def __post_init__(self):
        set_field = object.__setattr__.__get__(self)
        for name in ("steps", "batch_size", "threads"):
            set_field(name, positive_int(name, getattr(self, name)))
        set_field("lr", finite_positive("lr", self.lr))
        set_field("seed", seed_int("seed", self.seed))


READ, EDIT, SUBMIT = (SPELLINGS[action] for action in ("read", "edit", "submit"))   # (usual, other)


def _bernoulli(p, gen):
    return float(torch.rand((), generator=gen, dtype=torch.float64)) < p


def _choice(options, gen):
    return options[int(torch.randint(len(options), (1,), generator=gen))]


def demonstrate(task, cfg, gen):
    """One scripted episode: (tokens, policy mask) in the sampler's layout."""
    ep = Episode.start(task, gen)
    tokens, mask = list(ep.prompt()), [False] * len(ep.prompt())

    def call(verb, *args):
        usual, other = verb
        word = usual if _bernoulli(cfg.p_usual_verb, gen) else other
        body = encode(["<call>", word, *args, "</call>"])
        tokens.extend(body)
        mask.extend([True] * len(body))
        obs = ep.step(body)
        tokens.extend(obs)
        mask.extend([False] * len(obs))
        return obs

    def choose_function(named):
        if named is not None and _bernoulli(cfg.p_copy, gen):
            return named
        return int(torch.randint(N_FUNCTIONS, (1,), generator=gen))

    def named_in(obs):
        return ep.names.index(obs[2]) if obs[1] in (ID["fail"], ID["error"]) else None

    if _bernoulli(cfg.p_ls, gen):
        call(("ls", "ls"))
    named = None
    if _bernoulli(cfg.p_read, gen):
        file = "tests" if _bernoulli(cfg.p_tests, gen) else _choice(("log", "src"), gen)
        obs = call(READ, file)
        named = named_in(obs)
        if ID["trace"] in obs and _bernoulli(cfg.p_log, gen):
            named = named_in(call(READ, "log"))
    call(EDIT, WORDS[ep.names[choose_function(named)]])
    if _bernoulli(cfg.p_extra_edit, gen):
        call(EDIT, WORDS[ep.names[choose_function(None)]])
    call(SUBMIT)
    return tokens, mask


def make_demonstrations(cfg=DemoConfig()):
    """`cfg.n_demos` episodes on the training split, padded into (N, T) tokens and mask."""
    cfg = instance("cfg", cfg, DemoConfig)
    gen = torch.Generator().manual_seed(cfg.seed)
    demos = [demonstrate(TRAIN_TASKS[i % len(TRAIN_TASKS)], cfg, gen) for i in range(cfg.n_demos)]
    T = max(len(t) for t, _ in demos)
    tokens = torch.full((len(demos), T), PAD, dtype=torch.long)
    mask = torch.zeros(len(demos), T, dtype=torch.bool)
    for i, (t, m) in enumerate(demos):
        tokens[i, :len(t)] = torch.tensor(t)
        mask[i, :len(m)] = torch.tensor(m)
    return tokens, mask


def sft_loss(policy, tokens, mask):
    """Mean cross-entropy of the policy tokens given their prefixes."""
    logits = engine.logits(policy, tokens[:, :-1])                                      # (B, T-1, V)
    nll = F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], reduction="none")
    target_mask = mask[:, 1:]
    return (nll * target_mask).sum() / target_mask.sum()


def cosine_factor(step, steps):
    """The learning rate's share at `step` of `steps`: 1 at the start, down to 0 along half a
    cosine (computed in float32, as the SFT that built the shipped checkpoint computed it)."""
    return 0.5 * (1 + torch.cos(torch.tensor(torch.pi * step / steps)).item())


def check_demonstrations(policy, tokens, mask):
    """Refuse demonstrations SFT cannot learn from as given: `tokens` (N, T) must be the policy's
    ids and fit its block, `mask` (N, T) a bool tensor marking in every row at least one token
    after position 0 (the first token is predicted by nothing, so a mark there would be dropped
    without a word, and a row without a mark teaches nothing)."""
    token_ids("tokens", tokens, policy.cfg.vocab_size)
    if tokens.shape[1] - 1 > policy.cfg.block_size:
        raise ValueError(f"tokens of {tokens.shape[1]} positions do not fit the policy's "
                         f"block_size {policy.cfg.block_size} (+1, the last token is only a target)")
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True at the tokens to learn), got "
                        f"{getattr(mask, 'dtype', type(mask).__name__)}")
    if mask.shape != tokens.shape or mask[:, 0].any() or not mask[:, 1:].any(1).all():
        raise ValueError(f"mask must be (N, T) like tokens {tuple(tokens.shape)}, False at "
                         f"position 0 and True somewhere after it in every row, got shape "
                         f"{tuple(mask.shape)}")


def sft(policy, tokens, mask, cfg=SFTConfig(), progress=False):
    """Adam with a cosine learning rate on random minibatches of demonstrations, on `cfg.threads`
    threads (so the bytes do not depend on OMP_NUM_THREADS). Stops with a NonFiniteError at the
    first step whose loss is not finite, rather than train on it."""
    instance("policy", policy, Policy)
    cfg = instance("cfg", cfg, SFTConfig)
    check_demonstrations(policy, tokens, mask)
    gen = torch.Generator().manual_seed(cfg.seed)
    opt = engine.Adam(policy.parameters(), lr=cfg.lr)
    losses = []
    with engine.torch_threads(cfg.threads):
        for step in range(cfg.steps):
            opt.param_groups[0]["lr"] = cfg.lr * cosine_factor(step, cfg.steps)
            idx = torch.randint(tokens.shape[0], (cfg.batch_size,), generator=gen)
            batch_tokens, batch_mask = tokens[idx], mask[idx]
            T = int(batch_mask.any(0).nonzero().max()) + 1               # trim trailing padding
            loss = sft_loss(policy, batch_tokens[:, :T], batch_mask[:, :T])
            require_finite(f"SFT step {step} (lr {cfg.lr:g}): the loss", loss)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            if progress and step % 100 == 0:
                print(f"sft step {step:5d}  loss {loss.item():.4f}", flush=True)
    require_finite("after SFT, the parameters", *policy.parameters())
    return losses


def build_rl_base(demo_cfg=DemoConfig(), sft_cfg=SFTConfig(), progress=False):
    """The RL base agent from nothing: a fresh policy trained on fresh demonstrations."""
    instance("demo_cfg", demo_cfg, DemoConfig)
    instance("sft_cfg", sft_cfg, SFTConfig)
    engine.start()                    # the pinned arithmetic, before torch computes anything
    tokens, mask = make_demonstrations(demo_cfg)
    policy = Policy(seed=sft_cfg.seed)
    sft(policy, tokens, mask, sft_cfg, progress=progress)
    return policy
