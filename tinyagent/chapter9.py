"""Chapter 9's default GRPO run on TinyAgent, printed as a trajectory:

    python -m tinyagent.chapter9 [--steps 80] [--seed 0]

Every 10 steps: batch reward, policy-token entropy, per-token k3 to the reference, share of
zero-advantage groups, clip fraction, reads and malformed calls per episode; held-out pass@1
and pass@8 (10 tasks x 16 attempts) every 20 steps.
"""
import argparse
from functools import partial

from .evaluate import evaluate
from .grpo import RLConfig, train_rl
from .policy import load_policy, load_rl_base


def main():
    parser = argparse.ArgumentParser(description="Chapter 9's default GRPO run")
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", help="start from this checkpoint, not the shipped base")
    args = parser.parse_args()
    start = (lambda: load_policy(args.checkpoint)) if args.checkpoint else load_rl_base
    policy = start()
    base = evaluate(policy, reference=policy)
    print("RL base agent on held-out tasks: " + ", ".join(
        f"{k} {v:.3f}" for k, v in base.items() if k != "passed_per_task"))
    history = train_rl(policy, RLConfig(seed=args.seed), steps=args.steps,
                       evaluate=partial(evaluate, reference=start()), progress=False)
    cols = ("reward", "entropy", "k3_to_ref", "zero_adv_groups", "clip_frac", "reads",
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
