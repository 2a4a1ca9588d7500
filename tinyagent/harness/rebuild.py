"""Rebuild the RL base agent from nothing (pretrain.py) and compare it with the shipped one.

    python -m tinyagent.harness.rebuild             # rebuild into .cache/pretrain/ and compare
    python -m tinyagent.harness.rebuild --replace   # the same, then overwrite the shipped checkpoint

Every rebuild is compared with the shipped agent on the held-out tasks, so that on a platform where
the bits differ the verdict says whether the behaviour does by more than sampling error.
"""
import argparse
import time
from pathlib import Path

import torch

from ..evaluation import EVAL_SEED, heldout_rollout
from .cache import ROOT
from .fingerprint import check_arithmetic
from ..gym import HELDOUT_TASKS
from ..kl import entropy
from ..checkpoint import (RL_BASE_CHECKPOINT as CHECKPOINT, check_writable, is_shipped_checkpoint,
                          load_policy, save_policy)
from ..pretrain import build_rl_base
from ..sampler import token_logprobs

SCRATCH = ROOT / ".cache" / "pretrain" / "rl_base.pt"   # beside the run cache
ATTEMPTS = 64      # per held-out task: 640 episodes, four times the notebooks' evaluations
TOLERANCE = 3.0    # equivalent when every metric differs by at most 3 combined standard errors


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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
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
    if args.out is None and not args.replace:
        SCRATCH.parent.mkdir(parents=True, exist_ok=True)      # the rebuild's own folder
    try:                             # refused now, not by save_policy after the SFT's minutes
        check_writable(out, replace_shipped=is_shipped)
    except ValueError as err:
        parser.error(f"--out {args.out}: {err}")

    check_arithmetic()
    shipped_bytes = CHECKPOINT.read_bytes() if CHECKPOINT.exists() else None
    try:
        shipped = load_policy(CHECKPOINT)                      # before a --replace overwrites it
    except (FileNotFoundError, ValueError) as err:
        shipped = None
        print(f"no shipped agent to compare with: {err}")

    start = time.perf_counter()
    policy = build_rl_base(progress=True)
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
