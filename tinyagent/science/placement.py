"""The book's numbers placed among our runs: for each number of a printed table, its percentile
among the study's runs of that setting and whether it lies inside their central share, overall and
within each base agent. A placement, not a verdict (plan.py decides the claims)."""
import math
import numbers

import numpy as np
import pandas as pd


def book_in_distribution(book, ours_by_agent, columns, central=0.90):
    """Each number of the book's table placed among the study's runs of that setting: its
    percentile among all of them, whether it lies inside their central 90%, and inside which
    agents' central 90% it lies. `book` maps setting -> {column: number}; `ours_by_agent` maps
    agent -> setting -> column -> array over seeds."""
    if not 0 < central < 1:
        raise ValueError(f"central must be a share strictly between 0 and 1, got {central!r}")
    if isinstance(columns, str) or not columns:
        raise ValueError(f"columns must be a non-empty list of column names, got {columns!r}")
    if not isinstance(book, dict) or not all(isinstance(p, dict) for p in book.values()):
        raise TypeError(f"book must map each setting to {{column: number}}, got "
                        f"{str(book)[:100]}")
    lo_q, hi_q = (1 - central) / 2, (1 + central) / 2
    rows = []
    for setting, printed in book.items():
        for column in columns:
            if printed.get(column) is None:             # not printed by the book
                continue
            value = printed[column]
            if isinstance(value, bool) or not isinstance(value, numbers.Real) \
                    or not math.isfinite(value):
                raise ValueError(f"the book's {setting!r} {column!r} is {value!r}; a printed number "
                                 f"must be finite, a real number (leave it out, or None, when the "
                                 f"book prints none)")
            per_agent = {a: _runs(a, s, setting, column) for a, s in ours_by_agent.items()}
            if not per_agent:
                raise ValueError("ours_by_agent holds no agent: nothing to place the book among")
            pooled = np.concatenate(list(per_agent.values()))
            lo, hi = np.quantile(pooled, [lo_q, hi_q])
            inside_agents = [a for a, v in per_agent.items()
                             if np.quantile(v, lo_q) <= value <= np.quantile(v, hi_q)]
            rows.append({"setting": setting, "column": column, "book": value,
                         "our median": float(np.median(pooled)),
                         "our 5%": float(lo), "our 95%": float(hi),
                         "percentile": 100.0 * float(np.mean(pooled < value)
                                                     + 0.5 * np.mean(pooled == value)),
                         "inside": bool(lo <= value <= hi),
                         "inside agents": ", ".join(inside_agents) or "none"})
    return pd.DataFrame(rows)


def _runs(agent, by_setting, setting, column):
    """The study's values of `column` in `setting` over one agent's runs, as a float array: a
    setting or column the study lacks, an empty array or a NaN refused, naming which."""
    if setting not in by_setting:
        raise ValueError(f"the book's setting {setting!r} is not among agent {agent!r}'s settings: "
                         f"{', '.join(map(repr, by_setting))}")
    if column not in by_setting[setting]:
        raise ValueError(f"column {column!r} is not among agent {agent!r}'s columns in "
                         f"{setting!r}: {', '.join(map(repr, by_setting[setting]))}")
    values = np.asarray(by_setting[setting][column], float).reshape(-1)
    if not values.size:
        raise ValueError(f"agent {agent!r} has no runs of {setting!r} {column!r} (an empty "
                         f"array): at least one is needed to place the book among")
    if np.isnan(values).any():
        raise ValueError(f"agent {agent!r}'s {setting!r} {column!r} holds NaN: a run's summary "
                         f"must be a number")
    return values


def columns_by_agent(summaries, settings, columns):
    """The study's run summaries ({agent: [{setting: {column: value}} per seed]}) as the form
    `book_in_distribution` reads: agent -> setting -> column -> the values over seeds."""
    return {agent: {label: {col: [s[label][col] for s in per_seed] for col in columns}
                    for label in settings} for agent, per_seed in summaries.items()}


def seed_noise(ours_by_agent, settings, column):
    """How much `column` moves between two seeds of one setting and base agent: per setting, the
    standard deviation over seeds within each agent (pooled: the root of the agents' mean
    variance), and that of a difference between two seeds' runs (sqrt 2 times it), the noise a
    single-run comparison carries. `ours_by_agent` as `columns_by_agent` gives it."""
    rows = {}
    for setting in settings:
        variances = [np.var(_runs(agent, by_setting, setting, column), ddof=1)
                     for agent, by_setting in ours_by_agent.items()]
        sd = math.sqrt(float(np.mean(variances)))
        rows[setting] = {"seed sd": sd, "two-seed difference sd": math.sqrt(2) * sd}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("setting")
