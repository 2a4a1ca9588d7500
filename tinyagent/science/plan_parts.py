"""The parts of the study plan's claims (tinyagent/data/study_plan.json): for each claim, the one
number per run that the declared rule (plan.py) decides, and how it decides it."""
from dataclasses import dataclass
from typing import Callable

from .claims import NEAR_ENTROPY, SAME_REWARD, TRACK_REWARD, WINDOWS, series, window_means
from .claims.comparison import LOSSES, NEAR_DISTANCE
from .experiments import COMPARISON
from .report import PASS1_NOISE


@dataclass(frozen=True)
class Part:
    """One number per run and how it is decided: kind "share", "mean" (with `test`) or
    "equivalence" (with `rope`)."""
    name: str
    per_run: Callable
    kind: str
    test: Callable | None = None
    rope: float | None = None


@dataclass(frozen=True)
class ScoredClaim:
    key: str
    estimand: str
    parts: tuple
    source: str          # which results it reads: "summary" ({label: run_summary}) or "run"


def share_part(claim):
    """A per-run frequency: 1 where the claim holds for the run, 0 where not."""
    return Part("", lambda r: float(claim.holds(claim.measure(r))), "share")


def improvement_part(claim):
    """A probability of improvement: 1 where the paired difference favours the claim, 1/2 at a tie."""
    def per_run(r):
        value = claim.measure(r)
        return 0.5 if value == 0 else float(claim.holds(value))
    return Part("", per_run, "share")


def _windows(a, b, key):
    """Per window, `a`'s window mean of `key` minus `b`'s (b may be a number)."""
    def gap(i):
        def per_run(r):
            other = b if isinstance(b, float) else window_means(r, b, key)[i]
            return float(window_means(r, a, key)[i] - other)
        return per_run
    return [(f"steps {w.start}-{w.stop - 1}", gap(i)) for i, w in enumerate(WINDOWS)]


def _diff(a, b, column):
    return lambda r: r[a][column] - r[b][column]


def signed_parts(noise=PASS1_NOISE):
    """The parts of the mean and equivalence claims, as the plan's `why` declares them."""
    below = lambda limit: (lambda v: v < limit)      # noqa: E731
    above = lambda limit: (lambda v: v > limit)      # noqa: E731
    k3, k3p = "k3 beta=0.3", "k3+ beta=0.3"
    kl = ("k3+ beta=0.05", "k3+ beta=0.3", "k3+ beta=1.0")
    others = [s for s in COMPARISON if s != "none"]
    right = ("none", "entropy 0.03", "k3 beta=0.3")

    def windows_ordered(key, sign):
        return [(f"{b} - {a}, {name}", (lambda f: lambda r: sign * f(r))(f))
                for a, b in zip(kl, kl[1:]) for name, f in _windows(b, a, key)]

    return {
        "k3_vs_k3plus": [Part("", _diff(k3, k3p, "pass@1"), "equivalence", rope=noise)],
        "k3_vs_k3plus_entropy": [Part("", _diff(k3, k3p, "entropy"), "equivalence",
                                      rope=NEAR_ENTROPY)],
        "k3_vs_k3plus_distance": [Part("", _diff(k3, k3p, "kl_to_ref"), "equivalence",
                                       rope=NEAR_DISTANCE)],
        "reward_pass1": [Part(f"- {s}", _diff("reward beta=0.3", s, "pass@1"), "mean", below(-noise))
                         for s in LOSSES],
        "reward_distance": [Part(f"- {s}", _diff("reward beta=0.3", s, "kl_to_ref"), "mean",
                                 below(0.0)) for s in LOSSES],
        "no_reward_gain": [Part(s, _diff(s, "none", "late_reward"), "mean", below(0.02))
                           for s in others],
        "fig_kl_entropy": [Part(n, f, "mean", above(0.0)) for n, f in windows_ordered("entropy", +1)],
        "fig_kl_reward": [Part(n, f, "mean", above(0.0)) for n, f in windows_ordered("reward", -1)],
        "fig_bonus_reward": [Part(n, f, "equivalence", rope=TRACK_REWARD)
                             for n, f in _windows("entropy 0.03", "none", "reward")],
        "fig_bonus_entropy": [Part(n, f, "equivalence", rope=NEAR_ENTROPY)
                              for n, f in _windows("entropy 0.03", 0.3, "entropy")[1:]],
        "fig_k3_entropy": [Part(n, f, "equivalence", rope=NEAR_ENTROPY)
                           for n, f in _windows(k3, k3p, "entropy")],
        "fig_k3_reward": [Part(n, f, "equivalence", rope=TRACK_REWARD)
                          for n, f in _windows(k3, k3p, "reward")],
        "fig_reward_entropy": [Part(f"- {o}, {n}", f, "mean", above(0.0)) for o in right
                               for n, f in _windows("reward beta=0.3", o, "entropy")],
        "fig_reward_reward": [Part(f"{o} -, {n}", (lambda f: lambda r: -f(r))(f), "mean", above(0.0))
                              for o in right for n, f in _windows("reward beta=0.3", o, "reward")],
        "bonus_same_reward": [Part("", lambda r: series(r, "entropy 0.03", "reward")[39]
                                   - series(r, "none", "reward")[39], "equivalence",
                                   rope=SAME_REWARD)],
    }
