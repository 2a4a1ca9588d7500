"""Three statements of Section 10.7 about its runs that the declared plan never scored, scored on
the fresh draw by the plan's rule after the draw existed: labelled so wherever they are shown.

The chapter: the temperature run ends further from the start than every setting but the 0.1 bonus;
k3+ at 0.05 has the best pass@1 of the table; at beta 0.3 the distinct sequences doubled. Each is a
statement about what one seed's runs do, so each is a per-run frequency (the plan's estimand for
such a statement), on {label: run_summary} per seed.
"""
from ..book import SECTION_10_7
from ..report import Claim
from .signs import positive

NOT_FURTHER = ("entropy 0.1", "temperature 1.3")      # the chapter's exception, and the run itself


def _temperature_margin(r):
    # temperature's distance minus the largest distance of the settings it should exceed
    return r["temperature 1.3"]["kl_to_ref"] - max(v["kl_to_ref"] for k, v in r.items()
                                                   if k not in NOT_FURTHER)


def _best_pass1_margin(r):
    # k3+ 0.05's pass@1 minus the best of the other settings (ties count as not best)
    return r["k3+ beta=0.05"]["pass@1"] - max(v["pass@1"] for k, v in r.items()
                                              if k != "k3+ beta=0.05")


# chapter: "doubled (8.3 against 4.3)": read as at least the book's own ratio, 8.3 / 4.3 = 1.93
DOUBLED = SECTION_10_7["k3+ beta=0.3"]["distinct"] / SECTION_10_7["none"]["distinct"]


def _doubled_margin(r):
    # k3+ 0.3's distinct sequences over the unregularized run's, minus the book's ratio
    return r["k3+ beta=0.3"]["distinct"] / r["none"]["distinct"] - DOUBLED


def after_draw_claims():
    """The three statements as claims: measure > 0 is the statement holding at that seed."""
    return [
        Claim("temp_second_furthest", "temperature 1.3: further from the start than every setting "
              "except the 0.1 bonus (margin to the furthest of them)", _temperature_margin, positive),
        Claim("kl005_best_pass1", "k3+ at 0.05: the best pass@1 of the nine (margin to the next)",
              _best_pass1_margin, positive),
        Claim("kl03_distinct_doubled", "k3+ at 0.3: distinct sequences at least 1.93 times "
              "none's, the book's ratio (ratio minus 1.93)", _doubled_margin, lambda v: v >= 0),
    ]
