"""Section 10.6's clip-higher claims, on one result per batch."""
import math

from ..book import SECTION_10_6
from ..report import Claim
from .signs import positive

# One result per batch, as `science.clip_batches.clip_higher_batch` builds it: {"batch": {...},
# 0.2: {...}, 0.28: {...}, math.inf: {...}}, the inner dicts keyed by the columns of its tables.

# ours: "most tokens" read as a majority of the tokens above the clip.
MOST = 0.5


def entropy_after(batch_result, eps_high):
    """A clip-higher batch's policy-token entropy after the 8 steps at `eps_high`, at the book's
    three decimals (the precision at which it states its ordering). Defined in Section 10.6."""
    return round(batch_result[eps_high]["entropy after"], 3)


def clip_higher_claims():
    """Section 10.6's clip-higher claims, on one result per batch. Defined in Section 10.6."""
    above_02, rare_02 = SECTION_10_6["clip_higher_above"][0.2]
    above_028, rare_028 = SECTION_10_6["clip_higher_above"][0.28]
    book_low_share = (SECTION_10_6["positive_advantage_tokens_below_half"]
                      / SECTION_10_6["positive_advantage_tokens"])
    book_after = SECTION_10_6["entropy_after"]

    def share_below_half(eps):
        return lambda b: b[eps]["share started < 0.5"]

    return [
        # chapter: the 0.5 cut is the book's own measurement ("started below probability 0.5")
        Claim("rare_above_0.2", "eps_high 0.2: most tokens above the clip started below 0.5",
              share_below_half(0.2), lambda share: share > MOST, round(rare_02 / above_02, 3)),
        Claim("rare_above_0.28", "eps_high 0.28: most tokens above the clip started below 0.5",
              share_below_half(0.28), lambda share: share > MOST, round(rare_028 / above_028, 3)),
        Claim("rare_overrepresented", "at 0.2, tokens that started below 0.5 are a larger share "
              "above the clip than among all positive-advantage tokens (difference of shares)",
              lambda b: b[0.2]["share started < 0.5"]
              - b["batch"]["of which started < 0.5"] / b["batch"]["positive-advantage tokens"],
              positive, round(rare_02 / above_02 - book_low_share, 3)),
        Claim("tight_beats_free", "the 0.2 clip keeps more entropy than no upper clip "
              "(entropy after, 0.2 minus unbounded)",
              lambda b: entropy_after(b, 0.2) - entropy_after(b, math.inf), positive,
              round(book_after[0.2] - book_after["unbounded"], 3)),
        Claim("book_ordering", "the tighter the clip, the more entropy kept (smallest of the two "
              "gaps 0.2 - 0.28 and 0.28 - unbounded)",
              lambda b: min(entropy_after(b, 0.2) - entropy_after(b, 0.28),
                            entropy_after(b, 0.28) - entropy_after(b, math.inf)),
              lambda gap: gap >= 0),
        Claim("free_keeps_most", "DAPO's direction: no upper clip keeps the most entropy (entropy "
              "after, unbounded minus the larger of 0.2 and 0.28)",
              lambda b: entropy_after(b, math.inf) - max(entropy_after(b, 0.2),
                                                         entropy_after(b, 0.28)),
              positive),
    ]
