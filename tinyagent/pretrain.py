"""Rebuild the RL base agent from nothing: scripted demonstrations, then supervised fine-tuning.

    python -m tinyagent.pretrain             # rebuild into .cache/pretrain/ and compare
    python -m tinyagent.pretrain --replace   # the same, then overwrite the shipped checkpoint

SFT amplifies rounding differences over its 3,500 Adam steps, so it runs under the pinned
arithmetic (arithmetic.py) on a fixed number of torch threads: the rebuild gives the shipped bytes
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
import argparse
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from .arithmetic import torch_threads
from .evaluate import EVAL_SEED, heldout_rollout
from .fingerprint import check_arithmetic
from .gym import HELDOUT_TASKS, N_FUNCTIONS, SPELLINGS, TRAIN_TASKS, Episode
from .kl import entropy
from .policy import (RL_BASE_CHECKPOINT as CHECKPOINT, Policy, is_shipped_checkpoint,
                     load_policy, save_policy)
from .sampler import token_logprobs
from .vocab import ID, PAD, WORDS, encode

SCRATCH = CHECKPOINT.parents[2] / ".cache" / "pretrain" / "rl_base.pt"   # beside the run cache
ATTEMPTS = 64      # per held-out task: 640 episodes, four times the notebooks' evaluations
TOLERANCE = 3.0    # equivalent when every metric differs by at most 3 combined standard errors


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


@dataclass(frozen=True)
class SFTConfig:
    steps: int = 3500
    batch_size: int = 64
    lr: float = 3e-3
    seed: int = 0
    threads: int = 2          # torch's own sums split by thread: the shipped agent was built with 2


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
    logits = policy(tokens[:, :-1])                                        # (B, T-1, V)
    nll = F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], reduction="none")
    target_mask = mask[:, 1:]
    return (nll * target_mask).sum() / target_mask.sum()


def sft(policy, tokens, mask, cfg=SFTConfig(), progress=False):
    """Adam with a cosine learning rate on random minibatches of demonstrations, on `cfg.threads`
    threads (so the bytes do not depend on OMP_NUM_THREADS)."""
    check_arithmetic()
    gen = torch.Generator().manual_seed(cfg.seed)
    opt = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1 + torch.cos(torch.tensor(torch.pi * s / cfg.steps)).item()))
    losses = []
    with torch_threads(cfg.threads):
        for step in range(cfg.steps):
            idx = torch.randint(tokens.shape[0], (cfg.batch_size,), generator=gen)
            batch_tokens, batch_mask = tokens[idx], mask[idx]
            T = int(batch_mask.any(0).nonzero().max()) + 1               # trim trailing padding
            loss = sft_loss(policy, batch_tokens[:, :T], batch_mask[:, :T])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            losses.append(loss.item())
            if progress and step % 100 == 0:
                print(f"sft step {step:5d}  loss {loss.item():.4f}", flush=True)
    return losses


def build_rl_base(demo_cfg=DemoConfig(), sft_cfg=SFTConfig(), progress=False):
    """The RL base agent from nothing: a fresh policy trained on fresh demonstrations."""
    tokens, mask = make_demonstrations(demo_cfg)
    policy = Policy(seed=sft_cfg.seed)
    sft(policy, tokens, mask, sft_cfg, progress=progress)
    return policy


def ratio_estimate(num, den, groups):
    """sum(num) / sum(den) over episodes and its standard error. The tasks are fixed and only
    the attempts at each vary, so the error uses the variance within each of `groups` equal
    blocks of episodes; each episode enters through its residual (num - value * den) / mean(den)
    (the delta method), which for den = 1 is just num - mean."""
    value = num.sum() / den.sum()
    residual = (num - value * den) / den.mean()
    se = (residual.view(groups, -1).var(1).mean() / len(num)).sqrt()
    return value.item(), se.item()


@torch.no_grad()
def held_out_behaviour(policy, attempts=ATTEMPTS, seed=EVAL_SEED):
    """(value, standard error) of pass@1, reads and malformed calls per episode (the attempts
    `evaluate(policy, n=attempts)` makes) and policy-token entropy: the full-vocabulary entropy
    (nats) averaged over the policy's tokens, as in `kl.policy_entropy`."""
    batch = heldout_rollout(policy, n=attempts, seed=seed)
    _, logprobs = token_logprobs(policy, batch.tokens)                    # (B, T, V)
    per_token = entropy(logprobs) * batch.policy_mask                     # (B, T)
    one = torch.ones(len(batch.episodes), dtype=torch.float64)
    per_episode = {
        "pass@1": (batch.rewards, one),
        "reads": (torch.tensor([e.reads for e in batch.episodes], dtype=torch.float64), one),
        "malformed": (torch.tensor([e.malformed for e in batch.episodes], dtype=torch.float64), one),
        "entropy": (per_token.sum(1), batch.policy_mask.sum(1).double()),
    }
    return {name: ratio_estimate(num, den, len(HELDOUT_TASKS))
            for name, (num, den) in per_episode.items()}


def compare(rebuilt, shipped, attempts=ATTEMPTS):
    """Print both agents' held-out behaviour side by side and return the verdict: equivalent when
    every metric differs by at most TOLERANCE combined standard errors, sqrt(se1^2 + se2^2), the
    spread between two independent evaluations of one agent. Both use the same seed, so agents
    with equal weights give equal numbers."""
    a, b = held_out_behaviour(rebuilt, attempts), held_out_behaviour(shipped, attempts)
    print(f"held-out behaviour, {attempts} attempts at each of {len(HELDOUT_TASKS)} tasks "
          f"(± one standard error; allowed: {TOLERANCE:g} combined standard errors)")
    print(f"{'':10} {'rebuilt':>15} {'shipped':>15} {'difference':>11} {'allowed':>8}")
    equivalent = True
    for name in a:
        (va, sa), (vb, sb) = a[name], b[name]
        allowed = TOLERANCE * (sa ** 2 + sb ** 2) ** 0.5
        equivalent &= abs(va - vb) <= allowed
        print(f"{name:10} {va:7.3f} ± {sa:.3f} {vb:7.3f} ± {sb:.3f} {va - vb:+11.3f} {allowed:8.3f}")
    return equivalent


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path,
                        help=f"where to write the rebuilt checkpoint (default {SCRATCH})")
    parser.add_argument("--replace", action="store_true",
                        help=f"overwrite the shipped checkpoint {CHECKPOINT}")
    parser.add_argument("--attempts", type=int, default=ATTEMPTS,
                        help="attempts at each held-out task in the comparison")
    args = parser.parse_args(argv)
    out = (args.out or (CHECKPOINT if args.replace else SCRATCH)).resolve()
    is_shipped = is_shipped_checkpoint(out)      # under any spelling: `..`, a symlink, a hard link
    if args.replace and not is_shipped:
        parser.error(f"--replace writes {CHECKPOINT}; it cannot go with --out {args.out}")
    if is_shipped and not args.replace:
        parser.error(f"--out {args.out} is the shipped checkpoint {CHECKPOINT}; "
                     f"overwriting it takes --replace")
    out = CHECKPOINT if is_shipped else out
    if out.is_dir():
        parser.error(f"--out {args.out} is a directory; give a file path ending in .pt")
    if out.suffix != ".pt":
        parser.error(f"--out must end in .pt (its checksum goes beside it), got {args.out}")
    if args.attempts < 2:
        parser.error(f"--attempts must be at least 2 (for a standard error), got {args.attempts}")

    shipped_bytes = CHECKPOINT.read_bytes() if CHECKPOINT.exists() else None
    try:
        shipped = load_policy(CHECKPOINT)                      # before a --replace overwrites it
    except (FileNotFoundError, ValueError) as err:
        shipped = None
        print(f"no shipped agent to compare with: {err}")

    start = time.perf_counter()
    policy = build_rl_base(progress=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    digest = save_policy(policy, out, replace_shipped=is_shipped)
    print(f"wrote {out} sha256 {digest} in {(time.perf_counter() - start) / 60:.1f} min")
    if shipped is None:
        return
    if out.read_bytes() == shipped_bytes:
        print("bytes: equal to the shipped checkpoint")
    else:
        print("bytes: differ from the shipped checkpoint (another torch build, a platform other "
              "than x86-64, or an arithmetic that is not the pinned one), so the behaviour decides")
    start = time.perf_counter()
    equivalent = compare(policy, shipped, args.attempts)
    print(f"compared in {time.perf_counter() - start:.0f} s")
    if not equivalent:
        raise SystemExit("verdict: NOT equivalent to the shipped agent within sampling error")
    print("verdict: equivalent to the shipped agent within sampling error")


if __name__ == "__main__":
    main()
