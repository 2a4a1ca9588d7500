"""The study: Section 10.7's nine settings x twenty seeds x three independently built base agents,
committed as plain data, so that a verdict about a regularizer rests on 60 runs per setting and on
more than one SFT checkpoint, not on the five live seeds of one.

    python -m tinyagent.science.study                       # compute what is missing (resumable), write
                                                    # tinyagent/data/study_runs.jsonl
    python -m tinyagent.science.study --cluster tcp://host:8786    # the same runs on a Dask cluster

The base agents are the shipped RL base agent and two more built the same way from other seeds
(demonstrations and SFT: `pretrain.build_rl_base`), each checked against the regime the chapter
describes with bands fixed before they were built (`REGIME`). Every run is the run cache's
(runs.py), so `make study` can be stopped and resumed, and the notebooks' live runs (the shipped
agent, seeds 0-4) are a slice of it: each record carries the SHA-256 of the run's final parameters,
the code hash and the arithmetic fingerprint. The first 540 runs, made before the policy's products
became vendor-independent, are the pilot (`PILOT`, `load_pilot`): data, never recomputed.
"""
import argparse
import gzip
import hashlib
import json
import time

from ..harness.cluster import dask_executor
from .experiments import COMPARISON, STEPS, seeded
from ..files import write_atomically
from ..harness.fingerprint import EXPECTED
from ..harness.rebuild import held_out_behaviour
from ..harness.runs import CODE_VERSION, PACKAGE, SHIPPED_AGENT, load_agent, regularized_runs

AGENTS = (SHIPPED_AGENT, "agent_1", "agent_2")     # agent_k: demonstrations and SFT at seed k
SEEDS = tuple(range(20))
SETTINGS = tuple(COMPARISON)
RECORDS = PACKAGE / "data" / "study_runs.jsonl.gz"   # what `make study` computes now
# The pilot: the first 540 runs (3 agents x 9 settings x seeds 0-19), computed by earlier code under
# an earlier arithmetic (MKL's matrix products, on an Intel Xeon) from the earlier RL base agent.
# Data, labelled by each record's code hash and fingerprint: read, never recomputed.
PILOT = PACKAGE / "data" / "pilot_runs.jsonl.gz"
AGENT_RECORDS = PACKAGE / "data" / "study_agents.json"     # each agent's regime check
# Fixed before the two new agents were built: the chapter's base agent reads in 0.21-0.24 of
# episodes with entropy about 0.55 nats; ours must land near it for the study to test the
# chapter's regime (held-out, 640 episodes: `harness.rebuild.held_out_behaviour`).
REGIME = {"reads": (0.15, 0.30), "entropy": (0.40, 0.60), "pass@1": (0.12, 0.32)}
DIGITS = 6          # significant digits kept of each logged number (the tables print 3)


def params_sha256(state):
    """SHA-256 of a run's final parameters, in state_dict order: what a recomputation must match."""
    h = hashlib.sha256()
    for tensor in state.values():
        h.update(tensor.contiguous().numpy().tobytes())
    return h.hexdigest()


def _rounded(value):
    if isinstance(value, float):
        return float(f"{value:.{DIGITS}g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def record(setting, agent, seed, run):
    """One run as plain data: what the claims and figures read, and what identifies its bits."""
    return {"setting": setting, "agent": agent, "seed": seed, "steps": STEPS,
            "code": CODE_VERSION, "arithmetic": EXPECTED, "sha256": params_sha256(run["state"]),
            "history": _rounded(run["history"]), "eval": _rounded(run["eval"])}


def jobs(agent, settings=SETTINGS, seeds=SEEDS):
    """The run-cache jobs of one base agent, in (setting, seed) order."""
    return [{"cfg": seeded(COMPARISON[s], seed), "steps": STEPS, "agent": agent}
            for s in settings for seed in seeds]


class StaleStudy(RuntimeError):
    """The committed records were made by other code or under another arithmetic."""


def load_records(path=RECORDS, check=True):
    """The study's records, one dict per run. With `check`, records made by other code or under
    another arithmetic are refused: their numbers may not be what this code computes."""
    try:
        with gzip.open(path, "rt") as f:
            records = [json.loads(line) for line in f]
    except (OSError, EOFError, json.JSONDecodeError) as err:
        raise StaleStudy(f"the study's records {path} cannot be read ({err}); run `make study` "
                         f"to recompute them") from None
    if check:
        stale = {(r["code"][:12], r["arithmetic"][:12]) for r in records
                 if (r["code"], r["arithmetic"]) != (CODE_VERSION, EXPECTED)}
        if stale:
            raise StaleStudy(f"{path} holds records made by other code or arithmetic {sorted(stale)}"
                             f" (this code: {CODE_VERSION[:12]}, arithmetic {EXPECTED[:12]}); "
                             f"run `make study` to recompute them")
    return records


def load_pilot(path=PILOT):
    """The pilot's records, read as data: each carries the code and arithmetic that made it, and
    none is what this code computes (so none is checked against it)."""
    records = load_records(path, check=False)
    unlabelled = [i for i, r in enumerate(records) if not (r.get("code") and r.get("arithmetic"))]
    if unlabelled:
        raise StaleStudy(f"{path}: records {unlabelled[:5]} do not say which code and arithmetic "
                         f"made them")
    return records


def provenance(records):
    """How many records each (code, arithmetic) pair made, one line each."""
    counts = {}
    for r in records:
        key = (r["code"][:12], r["arithmetic"][:12])
        counts[key] = counts.get(key, 0) + 1
    return "\n".join(f"{n} runs: code {code}, arithmetic {arith}"
                     for (code, arith), n in sorted(counts.items()))


def by_agent(records, settings=SETTINGS):
    """{agent: [one {setting: record} per seed]}, seeds in order, each seed with a record of
    every setting: the shape the claims read."""
    table = {}
    for r in records:
        table.setdefault(r["agent"], {}).setdefault(r["seed"], {})[r["setting"]] = r
    grouped = {agent: [seeds[s] for s in sorted(seeds) if set(seeds[s]) >= set(settings)]
               for agent, seeds in table.items()}
    return {agent: per_seed for agent, per_seed in grouped.items() if per_seed}


def _write(records, path=RECORDS):
    path.parent.mkdir(parents=True, exist_ok=True)
    order = {a: i for i, a in enumerate(AGENTS)}
    records = sorted(records, key=lambda r: (order[r["agent"]], SETTINGS.index(r["setting"]),
                                             r["seed"]))
    text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in records)
    write_atomically(path, gzip.compress(text.encode(), mtime=0))   # mtime 0: the same bytes


def compute(agents=AGENTS, executor=None, workers=None, blocks=(SEEDS[:10], SEEDS[10:])):
    """Every missing run, in blocks of ten seeds (seeds 0-9 of every agent and setting, then
    10-19), writing the records after each block of ten runs: a study stopped early keeps what
    it finished, balanced across agents, and the run cache keeps the runs."""
    try:
        done = {(r["agent"], r["setting"], r["seed"]): r for r in load_records()}
    except StaleStudy:
        done = {}
    start, total, before = time.perf_counter(), len(agents) * len(SETTINGS) * len(SEEDS), len(done)
    for block in blocks:
        for agent in agents:
            for setting in SETTINGS:
                if all((agent, setting, seed) in done for seed in block):
                    continue
                runs = regularized_runs(jobs(agent, (setting,), block), workers=workers,
                                        executor=executor, desc=f"{agent} {setting}")
                for seed, run in zip(block, runs):
                    done[(agent, setting, seed)] = record(setting, agent, seed, run)
                _write(list(done.values()))
                minutes = (time.perf_counter() - start) / 60
                left = minutes / (len(done) - before) * (total - len(done))
                print(f"study: {len(done)} of {total} runs recorded ({minutes:.1f} min, about "
                      f"{left:.0f} min to go)", flush=True)
    return list(done.values())


def regime_check(agents=AGENTS):
    """Each base agent's held-out behaviour against `REGIME`: {agent: {metric: (value, se, ok)}}."""
    out = {}
    for agent in agents:
        behaviour = held_out_behaviour(load_agent(agent))
        out[agent] = {m: (*behaviour[m], lo <= behaviour[m][0] <= hi)
                      for m, (lo, hi) in REGIME.items()}
    return out


def record_agents(agents=AGENTS):
    """Check every base agent against `REGIME` and write the result beside the runs' records."""
    checked = {agent: {m: {"value": v, "se": se, "band": REGIME[m], "inside": ok}
                       for m, (v, se, ok) in metrics.items()}
               for agent, metrics in regime_check(agents).items()}
    write_atomically(AGENT_RECORDS, (json.dumps(checked, indent=1) + "\n").encode())
    return checked


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", help="address of a Dask scheduler (tcp://host:port) to run "
                        "on instead of local worker processes")
    parser.add_argument("--workers", type=int, help="local worker processes (default: every core)")
    args = parser.parse_args(argv)
    for agent, metrics in record_agents().items():
        print(agent, "  ".join(f"{m} {v['value']:.3f}±{v['se']:.3f}"
                               f"{'' if v['inside'] else ' OUTSIDE ' + str(v['band'])}"
                               for m, v in metrics.items()), flush=True)
    if args.cluster:
        with dask_executor(args.cluster) as executor:
            records = compute(executor=executor)
    else:
        records = compute(workers=args.workers)
    print(f"study: {len(records)} runs in {RECORDS}")


if __name__ == "__main__":
    main()
