"""Chapter 9's default GRPO run on TinyAgent, printed as a trajectory:

    python -m tinyagent.chapter9 [--steps 80] [--seed 0] [--lr 1e-3] [--kl-coef 0] ...

Every field of RLConfig is an option (`--help` lists them with their defaults).

Every 10 steps: batch reward, policy-token entropy, per-token k3 to the reference, share of
zero-advantage groups, clip fraction, reads and malformed calls per episode; held-out pass@1
and pass@8 (10 tasks x 16 attempts) every 20 steps.
"""
import argparse
from dataclasses import fields
from pathlib import Path

from .evaluation import evaluate
from .grpo import RLConfig, TrainingState, frozen_copy, train_rl
from .checkpoint import load_policy, load_rl_base

EVAL_EVERY = 20     # steps between held-out evaluations; continuing a run keeps its bits


def _field_help():
    """Each RLConfig field's line in its docstring, continuation lines joined."""
    helps, name, names = {}, None, {f.name for f in fields(RLConfig)}
    for line in RLConfig.__doc__.splitlines():
        words = line.split(maxsplit=1)
        if words and words[0] in names and line.startswith("    " + words[0]):
            name = words[0]
            helps[name] = words[1] if len(words) > 1 else ""
        elif name and line.strip():
            helps[name] += " " + line.strip()
    return {k: v.replace("%", "%%") for k, v in helps.items()}


def parse_args(argv=None):
    """The run's arguments: --steps, --checkpoint and every RLConfig field, checked here so that
    a bad value stops with a usage error before any training."""
    parser = argparse.ArgumentParser(description="Chapter 9's default GRPO run")
    parser.add_argument("--steps", type=int, default=80, help="training steps, >= 1 (80)")
    parser.add_argument("--checkpoint", help="start from this checkpoint, not the shipped base")
    helps = _field_help()
    for f in fields(RLConfig):
        kind = type(f.default)
        parser.add_argument("--" + f.name.replace("_", "-"), type=kind, default=f.default,
                            choices=RLConfig.allowed_kl_kinds if f.name == "kl_kind" else None,
                            help=helps.get(f.name, f.name))
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    if args.checkpoint and not (args.checkpoint.endswith(".pt")
                                and Path(args.checkpoint).is_file()):
        parser.error(f"--checkpoint must be an existing .pt file (saved by save_policy, with its "
                     f".sha256 beside it), got {args.checkpoint}")
    try:
        args.cfg = RLConfig(**{f.name: getattr(args, f.name) for f in fields(RLConfig)})
    except (TypeError, ValueError) as err:
        parser.error(str(err))
    return args


def main(argv=None):
    args = parse_args(argv)
    policy = load_policy(args.checkpoint) if args.checkpoint else load_rl_base()
    base = evaluate(policy, reference=policy)
    print("RL base agent on held-out tasks: " + ", ".join(
        f"{k} {v:.3f}" for k, v in base.items() if k != "passed_per_task"))
    reference, state, history = frozen_copy(policy), TrainingState.start(policy, args.cfg), []
    while state.step < args.steps:               # evaluated every EVAL_EVERY steps and at the end
        history += train_rl(policy, args.cfg, min(EVAL_EVERY, args.steps - state.step),
                            reference=reference, state=state, progress=False)
        history[-1].update({f"eval_{k}": v for k, v in evaluate(policy, reference=reference).items()})
    cols = ("reward", "entropy", "kl_to_ref", "zero_adv_groups", "clip_frac", "reads",
            "malformed", "policy_tokens")
    print("step " + " ".join(f"{c:>15}" for c in cols))
    for log in history:
        if log["step"] % 10 == 0 or log["step"] == args.steps - 1 or "eval_pass@1" in log:
            print(f"{log['step']:4d} " + " ".join(f"{log[c]:15.4f}" for c in cols))
        if "eval_pass@1" in log:
            print(f"     held-out pass@1 {log['eval_pass@1']:.3f} pass@8 {log['eval_pass@8']:.3f} "
                  f"distinct {log['eval_distinct']:.1f} solved per task {log['eval_passed_per_task']}")


if __name__ == "__main__":
    main()
