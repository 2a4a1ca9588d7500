"""Section 10.7's four readings of Figure 10.3, on the window means of the logged curves."""
from collections.abc import Mapping

import numpy as np

from ..report import Claim, logged
from .comparison import K3PLUS, NEAR_ENTROPY
from .signs import positive

# One result per seed: {label: run} for the nine settings (a run as the run cache returns it, with
# "history", its per-step logs). The chapter reads its figure on the curves, so every claim reads
# the logged series, averaged over 10-step windows from step 10 on (steps 10-19, 20-29, 30-39):
# one step's 64 episodes are too few to compare (ours, as for `late_reward`), and before step 10
# every run is still at the base agent's level.

WINDOWS = (slice(10, 20), slice(20, 30), slice(30, 40))
# ours: "the same batch reward" (10.8), "tracks the unregularized reward curve" and "nearly the
# same path" (10.7, every window's mean batch reward): within 0.1. One step's batch of 64 episodes
# has a mean reward with a standard deviation of about 0.06, a 10-step mean less.
SAME_REWARD = TRACK_REWARD = 0.1
RIGHT_COLUMN = ("none", "entropy 0.03", "k3 beta=0.3")                      # besides the reward KL


def series(results, label, key):
    """One logged quantity of `label`'s run, step by step, on one seed's results."""
    if not isinstance(results, Mapping) or label not in results:
        raise ValueError(f"no run {label!r} in the seed's results; they hold "
                         f"{sorted(results) if isinstance(results, Mapping) else results!r:.200}")
    return logged(results[label], key, f"the run {label!r}")


def window_means(results, label, key, windows=WINDOWS):
    """`label`'s logged `key` averaged over each of `windows` (default: steps 10-19, 20-29, 30-39).
    Defined in Section 10.7."""
    values = np.asarray(series(results, label, key), dtype=float)
    short = [w for w in windows if (w.stop or 0) > len(values) or not len(values[w])]
    if short:
        raise ValueError(f"{label!r} logged {key!r} for {len(values)} steps, too few for the "
                         f"windows {[(w.start, w.stop) for w in short]}: each window must lie in "
                         f"its steps [0, {len(values)}) and hold at least one")
    return np.array([values[w].mean() for w in windows])


def _kl_ordered(key, sign):
    # the smallest window gap between neighbouring k3+ coefficients, signed so that > 0 is the
    # chapter's order (sign +1: rises with beta, -1: falls with beta)
    def measure(r):
        w = {label: window_means(r, label, key) for label in K3PLUS}
        return min(float(np.min(sign * (w[b] - w[a]))) for a, b in zip(K3PLUS, K3PLUS[1:]))
    return measure


def _largest_gap(a, b, key):
    return lambda r: float(np.max(np.abs(window_means(r, a, key) - window_means(r, b, key))))


def _reward_kl_margin(key, sign):
    # the reward KL's smallest window margin over the right column's other runs (sign +1: above
    # all of them, -1: below all of them)
    def measure(r):
        mine = window_means(r, "reward beta=0.3", key)
        return min(float(np.min(sign * (mine - window_means(r, other, key))))
                   for other in RIGHT_COLUMN)
    return measure


def figure_claims(track_reward=TRACK_REWARD, near_entropy=NEAR_ENTROPY):
    """Section 10.7's four readings of Figure 10.3, on {label: run} per seed, each on the window
    means of the logged curves (steps 10-19, 20-29, 30-39). Defined in Section 10.7."""
    return [
        Claim("fig_kl_entropy", "k3+: the entropy curve is higher the larger beta, in every window "
              "(smallest gap)", _kl_ordered("entropy", +1), positive),
        Claim("fig_kl_reward", "k3+: the reward curve is lower the larger beta, in every window "
              "(smallest gap)", _kl_ordered("reward", -1), positive),
        Claim("fig_bonus_reward", f"entropy bonus 0.03: reward within {track_reward} of none's in "
              "every window (largest gap)", _largest_gap("entropy 0.03", "none", "reward"),
              lambda v: v <= track_reward),
        Claim("fig_bonus_entropy", f"entropy bonus 0.03: entropy within {near_entropy} of 0.3 in "
              "every window from step 20 (largest gap)",
              lambda r: float(np.max(np.abs(window_means(r, "entropy 0.03", "entropy",
                                                         WINDOWS[1:]) - 0.3))),
              lambda v: v <= near_entropy),
        Claim("fig_k3_entropy", f"k3 and k3+ at 0.3: entropy within {near_entropy} in every window "
              "(largest gap)", _largest_gap("k3 beta=0.3", "k3+ beta=0.3", "entropy"),
              lambda v: v <= near_entropy),
        Claim("fig_k3_reward", f"k3 and k3+ at 0.3: reward within {track_reward} in every window "
              "(largest gap)", _largest_gap("k3 beta=0.3", "k3+ beta=0.3", "reward"),
              lambda v: v <= track_reward),
        Claim("fig_reward_entropy", "KL in the reward: the highest entropy of the right column "
              "in every window (smallest margin)", _reward_kl_margin("entropy", +1), positive),
        Claim("fig_reward_reward", "KL in the reward: the lowest reward of the right column in "
              "every window (smallest margin)", _reward_kl_margin("reward", -1), positive),
    ]
