"""The TinyAgent experiments of Sections 10.7 and 10.8, defined once, so that every notebook
asks the run cache for the same runs (and finds the ones another notebook computed)."""
from dataclasses import replace

from ..regularize import RegularizedConfig
from ..checkpoint import load_rl_base
from ..harness.runs import policy_from_state, regularized_runs

STEPS = 40                  # the chapter's runs are 40 steps long
SEEDS = (0, 1, 2, 3, 4)     # every claim is scored on five seeds; seed 0 is the book's layout

# Section 10.7's nine settings, in the book's order; everything not named is Chapter 9's default.
COMPARISON = {
    "none": RegularizedConfig(),
    "k3+ beta=0.05": RegularizedConfig(kl_coef=0.05, kl_kind="k3+"),
    "k3+ beta=0.3": RegularizedConfig(kl_coef=0.3, kl_kind="k3+"),
    "k3+ beta=1.0": RegularizedConfig(kl_coef=1.0, kl_kind="k3+"),
    "k3 beta=0.3": RegularizedConfig(kl_coef=0.3, kl_kind="k3"),
    "reward beta=0.3": RegularizedConfig(kl_coef=0.3, kl_kind="k1", kl_placement="reward"),
    "entropy 0.03": RegularizedConfig(entropy_coef=0.03),
    "entropy 0.1": RegularizedConfig(entropy_coef=0.1),
    "temperature 1.3": RegularizedConfig(temperature=1.3),
}


def seeded(cfg, seed):
    """`cfg` trained from generator seed `seed` (task order, episodes, minibatches)."""
    return replace(cfg, seed=seed)


def comparison_runs(labels=tuple(COMPARISON), seeds=SEEDS, steps=STEPS, **kwargs):
    """{label: [the run at each seed]} for Section 10.7's settings, from the cache or computed in
    parallel workers (see `regularized_runs`)."""
    unknown = [label for label in labels if label not in COMPARISON]
    if unknown:
        raise ValueError(f"unknown settings {unknown}; Section 10.7's are {list(COMPARISON)}")
    jobs = [{"cfg": seeded(COMPARISON[label], seed), "steps": steps}
            for label in labels for seed in seeds]
    results = iter(regularized_runs(jobs, **kwargs))
    return {label: [next(results) for _ in seeds] for label in labels}


RESET_FROM = "k3+ beta=0.3"     # Section 10.8 continues this run...
RESET_STEPS = 20                # ...for this many steps, with a fresh optimizer


def reset_runs(seeds=SEEDS, **kwargs):
    """Section 10.8's reference reset, at every seed: the `RESET_FROM` run continued for
    `RESET_STEPS` steps, once still anchored to the RL base agent ("anchored") and once anchored
    to its own start ("reset"). Returns one {"anchored", "reset"} pair of runs per seed."""
    starts = comparison_runs([RESET_FROM], seeds, **kwargs)[RESET_FROM]
    base = load_rl_base()
    jobs = []
    for seed, run in zip(seeds, starts):
        start = policy_from_state(run["state"])
        for reference in (base, None):          # None: a frozen copy of the start
            jobs.append({"cfg": seeded(COMPARISON[RESET_FROM], seed), "steps": RESET_STEPS,
                         "start": start, "reference": reference})
    results = iter(regularized_runs(jobs, **kwargs))
    return [{"anchored": next(results), "reset": next(results)} for _ in seeds]
