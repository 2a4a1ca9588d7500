"""A claims table with the seeds at which each claim fails beside its count."""
import pandas as pd

from ..report import failing_seeds, score_claims


def scored_with_failures(claims, results_by_seed, seeds):
    """`report.score_claims`'s table plus a last column, "fails at seeds", naming the seeds at
    which each claim does not hold (`report.failing_seeds`): a sentence that reports a k of 5
    names these."""
    claims, results_by_seed = list(claims), list(results_by_seed)
    table = score_claims(claims, results_by_seed)
    table["fails at seeds"] = pd.Series(failing_seeds(claims, results_by_seed, seeds))
    return table
