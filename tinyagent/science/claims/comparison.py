"""Section 10.7's claims about its nine runs (the table), on {label: run_summary} per seed."""
import math

from ..book import SECTION_10_7, SECTION_10_7_EXTRA
from ...gym import BLIND_CEILING
from ..report import PASS1_NOISE, Claim
from ...vocab import VOCAB_SIZE
from .signs import negative, positive

# One result per seed: {label: diagnostics.run_summary(run)} for the nine settings of
# experiments.COMPARISON (keys entropy, pass@1, pass@8, distinct, kl_to_ref, reads, malformed,
# entropy_start, unsolved, late_reward).

K3PLUS = ("k3+ beta=0.05", "k3+ beta=0.3", "k3+ beta=1.0")          # by coefficient
LOSSES = ("k3+ beta=0.3", "k3 beta=0.3")                              # the loss placements at 0.3
SLOWERS = ("k3+ beta=0.3", "k3+ beta=1.0", "k3 beta=0.3", "reward beta=0.3", "entropy 0.03")

# ours: "fell from 0.52 to 0.12" keeps 23%; "collapse" is read as keeping less than half.
COLLAPSE_KEPT = 0.5
# ours: "reading did not take over" at 0.53 reads per episode against the base agent's 0.21-0.24,
# read as fewer than half the reads of the unregularized run (which reads about once an episode).
READS_SHARE = 0.5
# ours: "drove the policy to the uniform distribution" (5.707 of log 316 = 5.756, 99%) read as
# above 95% of the uniform distribution's entropy.
UNIFORM_SHARE = 0.95
# chapter: "six malformed calls per episode" for the 0.1 bonus; "breaks the format" read as at
# least one malformed call per episode.
BROKEN_FORMAT = 1.0
# ours: "near 0.3" and "nearly the same path" for entropy curves (Figure 10.3) and final entropies:
# within half the distance between the chapter's two levels, 0.3 (the slowed runs) and 0.12 (the
# collapsed run), so that a curve counted as near 0.3 is nearer 0.3 than the collapse.
NEAR_ENTROPY = round((0.3 - SECTION_10_7["none"]["entropy"]) / 2, 3)        # 0.09
# ours (fixed before the study's numbers): "held it where it started" (0.54 from 0.52) read as
# ending with at least 90% of the starting entropy.
HELD_KEPT = 0.9
# ours: "nearly the same entropy ... and distance" for the k3 and k3+ losses, read with the
# figure's entropy tolerance (NEAR_ENTROPY, 0.09 nats) and, for the distance, within 0.05 nats of
# k3 per token, a fifth of the book's unregularized distance (0.237).
NEAR_DISTANCE = 0.05


def _rise(results, column):
    # the smallest rise of `column` from one k3+ coefficient to the next (> 0: it rises with beta)
    return min(results[b][column] - results[a][column] for a, b in zip(K3PLUS, K3PLUS[1:]))


def _fall(results, column):
    # the smallest fall of `column` from one k3+ coefficient to the next (> 0: it falls with beta)
    return min(results[a][column] - results[b][column] for a, b in zip(K3PLUS, K3PLUS[1:]))


def _difference(a, b, column):
    # `column` of setting a minus setting b, on one seed's results
    return lambda r: r[a][column] - r[b][column]


def _book(label, column):
    return SECTION_10_7[label][column]


def _book_difference(a, b, column):
    return _book(a, column) - _book(b, column)


def _more_than_none(key, label, column, text):
    # `label` ends with more `column` than the unregularized run (and by how much in the book)
    return Claim(key, text, _difference(label, "none", column), positive,
                 _book_difference(label, "none", column))


def comparison_claims(noise=PASS1_NOISE, blind_ceiling=BLIND_CEILING, vocab_size=VOCAB_SIZE):
    """Section 10.7's claims about its nine runs, on {label: run_summary} per seed.

    `noise`: the chapter's noise of a held-out pass@1 difference (0.08, its "Evidence" paragraph);
    `blind_ceiling`: the pass rate of an edit made without reading (0.2, the gym's one in five);
    `vocab_size`: sets the uniform distribution's entropy, log V. Defined in Section 10.7."""
    return (_collapse_and_kl_claims(noise) + _beta1_and_placement_claims(noise, blind_ceiling)
            + _bonus_and_temperature_claims(vocab_size))


def _collapse_and_kl_claims(noise):
    # no regularizer's collapse, then what the k3+ coefficient changes
    return [
        Claim("collapse", "no regularizer: entropy ends below half its start (ratio end/start)",
              lambda r: r["none"]["entropy"] / r["none"]["entropy_start"],
              lambda v: v < COLLAPSE_KEPT,
              _book("none", "entropy") / SECTION_10_7_EXTRA["entropy_start"]),
        # chapter: two held-out tasks never solved in 16 attempts; "some" = at least one
        Claim("unsolved", "no regularizer: some held-out task is never solved in 16 attempts "
              "(tasks never solved)", lambda r: r["none"]["unsolved"], lambda v: v >= 1, 2),
        Claim("slowed", "k3+ at 0.3 and 1.0, k3 at 0.3, the reward KL and the 0.03 bonus all end "
              "with more entropy than none (smallest difference)",
              lambda r: min(r[s]["entropy"] for s in SLOWERS) - r["none"]["entropy"], positive),
        _more_than_none("kl005_pass8", "k3+ beta=0.05", "pass@8",
                        "k3+ at 0.05: higher pass@8 than none (difference)"),
        _more_than_none("kl03_distinct", "k3+ beta=0.3", "distinct",
                        "k3+ at 0.3: more distinct sequences per task than none (difference)"),
        _more_than_none("kl03_pass8", "k3+ beta=0.3", "pass@8",
                        "k3+ at 0.3: higher pass@8 than none (difference)"),
        Claim("kl_entropy", "k3+: final entropy rises with beta (smallest rise)",
              lambda r: _rise(r, "entropy"), positive, _rise(SECTION_10_7, "entropy")),
        Claim("kl_distinct", "k3+: distinct sequences rise with beta (smallest rise)",
              lambda r: _rise(r, "distinct"), positive),
        # chapter: "bought diversity with pass@1"; each fall must exceed the pass@1 noise
        Claim("kl_pass1", f"k3+: pass@1 falls with beta, by more than {noise} at each step "
              "(smallest fall)", lambda r: _fall(r, "pass@1"), lambda v: v > noise,
              _fall(SECTION_10_7, "pass@1")),
        Claim("kl_distance", "k3+: distance from the start falls with beta (smallest fall)",
              lambda r: _fall(r, "kl_to_ref"), positive),
    ]


def _beta1_and_placement_claims(noise, blind_ceiling):
    # k3+ at 1.0, then the loss placements and the reward placement at 0.3
    return [
        Claim("beta1_reads", "k3+ at 1.0: reading does not take over (reads per episode, "
              "as a share of none's; below one half)",
              lambda r: r["k3+ beta=1.0"]["reads"] / r["none"]["reads"],
              lambda v: v < READS_SHARE),
        # chapter: "close to the blind ceiling of 0.2", read with its own noise level as "within"
        Claim("beta1_blind", f"k3+ at 1.0: pass@1 within {noise} of the blind ceiling "
              f"{blind_ceiling} (distance)",
              lambda r: abs(r["k3+ beta=1.0"]["pass@1"] - blind_ceiling), lambda v: v < noise,
              abs(_book("k3+ beta=1.0", "pass@1") - blind_ceiling)),
        Claim("beta1_held", f"k3+ at 1.0: entropy ends where it started (ratio end/start, at "
              f"least {HELD_KEPT})", lambda r: r["k3+ beta=1.0"]["entropy"]
              / r["k3+ beta=1.0"]["entropy_start"], lambda v: v >= HELD_KEPT,
              _book("k3+ beta=1.0", "entropy") / SECTION_10_7_EXTRA["entropy_start"]),
        Claim("beta1_pass8", "k3+ at 1.0: pass@8 at least none's (difference)",
              _difference("k3+ beta=1.0", "none", "pass@8"), lambda v: v >= 0,
              _book_difference("k3+ beta=1.0", "none", "pass@8")),
        # chapter: "nearly the same" pass@1, and differences under its noise level are noise
        Claim("k3_vs_k3plus", f"k3 and k3+ losses at 0.3: pass@1 within {noise} (|difference|)",
              lambda r: abs(r["k3 beta=0.3"]["pass@1"] - r["k3+ beta=0.3"]["pass@1"]),
              lambda v: v < noise,
              abs(_book("k3 beta=0.3", "pass@1") - _book("k3+ beta=0.3", "pass@1"))),
        Claim("k3_vs_k3plus_entropy", f"k3 and k3+ losses at 0.3: final entropy within "
              f"{NEAR_ENTROPY} (|difference|)",
              lambda r: abs(r["k3 beta=0.3"]["entropy"] - r["k3+ beta=0.3"]["entropy"]),
              lambda v: v < NEAR_ENTROPY,
              abs(_book("k3 beta=0.3", "entropy") - _book("k3+ beta=0.3", "entropy"))),
        Claim("k3_vs_k3plus_distance", f"k3 and k3+ losses at 0.3: distance from the start "
              f"within {NEAR_DISTANCE} (|difference|)",
              lambda r: abs(r["k3 beta=0.3"]["kl_to_ref"] - r["k3+ beta=0.3"]["kl_to_ref"]),
              lambda v: v < NEAR_DISTANCE),
        # chapter: "much stronger than either loss placement"; a pass@1 gap counts only beyond
        # its noise, the same rule as k3_vs_k3plus and kl_pass1
        Claim("reward_pass1", f"KL in the reward at 0.3: pass@1 more than {noise} below both loss "
              "placements (difference to the lower)",
              lambda r: r["reward beta=0.3"]["pass@1"] - min(r[s]["pass@1"] for s in LOSSES),
              lambda v: v < -noise,
              _book("reward beta=0.3", "pass@1") - min(_book(s, "pass@1") for s in LOSSES)),
        Claim("reward_distance", "KL in the reward at 0.3: closer to the start than both loss "
              "placements (difference to the closer)",
              lambda r: (r["reward beta=0.3"]["kl_to_ref"]
                         - min(r[s]["kl_to_ref"] for s in LOSSES)), negative),
    ]


def _bonus_and_temperature_claims(vocab_size):
    # the entropy bonuses and the temperature run, then the training reward of every setting.
    # The temperature run's entropy is not scored: it is measured at T = 1.3, which 10.7 says is
    # not comparable with the others' at T = 1.
    log_v = math.log(vocab_size)
    return [
        Claim("bonus01_uniform", f"entropy bonus 0.1: entropy above {UNIFORM_SHARE:.0%} of "
              f"log {vocab_size} (share of it)",
              lambda r: r["entropy 0.1"]["entropy"] / log_v, lambda v: v > UNIFORM_SHARE,
              _book("entropy 0.1", "entropy") / log_v),
        Claim("bonus01_malformed", "entropy bonus 0.1: at least one malformed call per episode",
              lambda r: r["entropy 0.1"]["malformed"], lambda v: v >= BROKEN_FORMAT,
              _book("entropy 0.1", "malformed")),
        # chapter: "zero pass rate"
        Claim("bonus01_nopass", "entropy bonus 0.1: no held-out pass (pass@8)",
              lambda r: r["entropy 0.1"]["pass@8"], lambda v: v == 0,
              _book("entropy 0.1", "pass@8")),
        _more_than_none("bonus003_entropy", "entropy 0.03", "entropy",
                        "entropy bonus 0.03: more final entropy than none (difference)"),
        # the bonus and the temperature alike: more malformed calls, further from the start
        *(_more_than_none(f"{short}_{what}", label, column,
                          f"{name}: {more} than none (difference)")
          for column, what, more in (("malformed", "malformed", "more malformed calls"),
                                     ("kl_to_ref", "distance", "further from the start"))
          for short, label, name in (("bonus003", "entropy 0.03", "entropy bonus 0.03"),
                                     ("temp", "temperature 1.3", "temperature 1.3"))),
        # ours: one step's 64 episodes are too few, so the last 10 steps' mean batch reward
        Claim("no_reward_gain", "no regularizer beats none's training reward (mean batch reward "
              "of the last 10 steps; the largest gain over none)",
              lambda r: max(v["late_reward"] for k, v in r.items() if k != "none")
              - r["none"]["late_reward"], lambda v: v <= 0),
    ]
