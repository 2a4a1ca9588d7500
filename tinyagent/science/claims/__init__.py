"""The chapter's statements about TinyAgent as `report.Claim`s, defined once, outside the notebooks,
one module per section: `clip_higher` (10.6), `comparison` (10.7's table), `figure` (10.7's Figure
10.3), `design` (10.8's design problems) and `exercises`.

Each function returns the claims one notebook scores with `report.score_claims`, over one result
per seed (or per batch): a claim's `measure` reads one seed's results and returns a number, its
`holds` decides that number for that seed, and `book` is the same quantity in the book's single run
where the chapter prints enough to compute it. What a category turns out to be is a result, shown in
the notebook's table; nothing here asserts one.

Every threshold says whose it is: "chapter" where the chapter states it (and where), "ours" where
the chapter gives only a direction or a word ("close to", "little", "most") and a number had to be
chosen, with the reason. Nothing that trains or evaluates imports this package.
"""
from ..report import failing_seeds
from .clip_higher import MOST, clip_higher_claims, entropy_after
from .comparison import (BROKEN_FORMAT, COLLAPSE_KEPT, K3PLUS, LOSSES, READS_SHARE, SLOWERS,
                         UNIFORM_SHARE, comparison_claims)
from .design import (EARLY_KEPT, LITTLE_CHANGE, NEAR_FACTOR, beta_size_claims, entropy_at,
                     entropy_fall_claims, mean_kl, reset_claims, reset_value)
from .exercises import (HALF, LEARNS_TO_READ, SMALL_SHARE, adaptive_target_claims,
                        bonus_position_claims, design_review_claims, long_run_claims)
from .figure import (NEAR_ENTROPY, RIGHT_COLUMN, SAME_REWARD, TRACK_REWARD, WINDOWS,
                     figure_claims, series, window_means)
from .scored import scored_with_failures

__all__ = [
    "BROKEN_FORMAT", "COLLAPSE_KEPT", "EARLY_KEPT", "HALF", "K3PLUS", "LEARNS_TO_READ",
    "LITTLE_CHANGE", "LOSSES", "MOST", "NEAR_ENTROPY", "NEAR_FACTOR", "READS_SHARE",
    "RIGHT_COLUMN", "SAME_REWARD", "SLOWERS", "SMALL_SHARE", "TRACK_REWARD", "UNIFORM_SHARE",
    "WINDOWS", "adaptive_target_claims", "beta_size_claims", "bonus_position_claims",
    "clip_higher_claims", "comparison_claims", "design_review_claims", "entropy_after",
    "entropy_at", "entropy_fall_claims", "failing_seeds", "figure_claims", "long_run_claims",
    "mean_kl", "reset_claims", "reset_value", "scored_with_failures", "series", "window_means",
]
