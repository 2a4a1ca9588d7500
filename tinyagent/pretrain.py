"""Rebuild the RL base agent from nothing: scripted demonstrations, then supervised fine-tuning.

    python -m tinyagent.pretrain      # writes tinyagent/checkpoints/rl_base.pt and its .sha256

The demonstrator is deliberately mediocre, because RL must have something to discover: it
reads the failing test in about a fifth of episodes, and after reading it edits the named
function only some of the time. It also varies what does not matter (an optional `ls`, the
verb synonyms), which gives the base agent the entropy RL later collapses.
"""
import argparse
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from .gym import N_FUNCTIONS, TRAIN_TASKS, Episode
from .policy import Policy, load_policy, save_policy
from .vocab import ID, PAD, WORDS, encode

CHECKPOINT = Path(__file__).resolve().parent / "checkpoints" / "rl_base.pt"


@dataclass(frozen=True)
class DemoConfig:
    n_demos: int = 20000
    p_ls: float = 0.3        # a harmless `ls` first: entropy that does not change the reward
    p_read: float = 0.22     # read the failing test first (the chapter's base agent: 0.21-0.24)
    p_copy: float = 0.25     # after reading, edit the function the observation names
    p_log: float = 0.5       # when the test points to the log, read it
    seed: int = 0


@dataclass(frozen=True)
class SFTConfig:
    steps: int = 2000
    batch_size: int = 64
    lr: float = 2e-3
    seed: int = 0             # SFT runs in float32 (2x faster); the result is cast to float64


def _bernoulli(p, gen):
    return float(torch.rand((), generator=gen, dtype=torch.float64)) < p


def _choice(options, gen):
    return options[int(torch.randint(len(options), (1,), generator=gen))]


def demonstrate(task, cfg, gen):
    """One scripted episode: (tokens, policy mask) in the sampler's layout."""
    ep = Episode.start(task, gen)
    tokens, mask = list(ep.prompt()), [False] * len(ep.prompt())

    def call(*words):
        body = encode(["<call>", *words, "</call>"])
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

    if _bernoulli(cfg.p_ls, gen):
        call("ls")
    target = None
    if _bernoulli(cfg.p_read, gen):
        obs = call(_choice(("read", "cat"), gen), "tests")
        named = ep.names.index(obs[2])
        if ID["trace"] in obs and _bernoulli(cfg.p_log, gen):
            obs = call(_choice(("read", "cat"), gen), "log")
            named = ep.names.index(obs[2])
        target = choose_function(named)
    else:
        target = choose_function(None)
    call(_choice(("edit", "patch"), gen), WORDS[ep.names[target]])
    call(_choice(("submit", "done"), gen))
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
    """Adam with a cosine learning rate on random minibatches of demonstrations, in float32;
    the policy is returned to float64 for RL."""
    gen = torch.Generator().manual_seed(cfg.seed)
    policy.float()
    opt = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1 + torch.cos(torch.tensor(torch.pi * s / cfg.steps)).item()))
    losses = []
    for step in range(cfg.steps):
        idx = torch.randint(tokens.shape[0], (cfg.batch_size,), generator=gen)
        batch_tokens, batch_mask = tokens[idx], mask[idx]
        T = int(batch_mask.any(0).nonzero().max()) + 1                   # trim trailing padding
        loss = sft_loss(policy, batch_tokens[:, :T], batch_mask[:, :T])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
        if progress and step % 100 == 0:
            print(f"sft step {step:5d}  loss {loss.item():.4f}", flush=True)
    policy.double()
    return losses


def build_rl_base(demo_cfg=DemoConfig(), sft_cfg=SFTConfig(), progress=False):
    """The RL base agent from nothing: a fresh policy trained on fresh demonstrations."""
    tokens, mask = make_demonstrations(demo_cfg)
    policy = Policy(seed=sft_cfg.seed)
    sft(policy, tokens, mask, sft_cfg, progress=progress)
    return policy


def load_rl_base():
    """The shipped RL base agent (the SFT checkpoint RL starts from), checksum-verified."""
    return load_policy(CHECKPOINT)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=CHECKPOINT)
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    policy = build_rl_base(progress=True)
    digest = save_policy(policy, args.out)
    print(f"wrote {args.out} sha256 {digest}")


if __name__ == "__main__":
    main()
