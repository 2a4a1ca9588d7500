"""The study: Section 10.7's nine settings x twenty seeds x six independently built base agents,
committed as plain data, so that a verdict about a regularizer rests on 120 runs per setting and on
more than one SFT checkpoint, not on the five live seeds of one.

    python -m tinyagent.science.study                       # compute what is missing (resumable), write
                                                    # tinyagent/data/study_runs.jsonl
    python -m tinyagent.science.study --cluster tcp://host:8786    # the same runs on a Dask cluster

The base agents are the shipped RL base agent and five more built the same way from other seeds
(agents.py), each checked against the regime the chapter describes with bands declared in the plan
before they were built (`REGIME`). Every run is the run cache's
(runs.py), so `make study` can be stopped and resumed, and the notebooks' live runs (the shipped
agent, seeds 0-4) are a slice of it: each record carries the SHA-256 of the run's final parameters,
the code hash and the arithmetic fingerprint. The first 540 runs, made before the policy's products
became vendor-independent, are the pilot (`PILOT`, `load_pilot`): data, never recomputed.
"""
import argparse
import gzip
import hashlib
import json
import math
import time


from ..harness.cluster import dask_executor
from .diagnostics import run_summary
from .experiments import COMPARISON, STEPS, seeded
from ..files import write_atomically
from ..harness.fingerprint import EXPECTED
from ..harness.runs import (CODE_VERSION, PACKAGE, params_sha256, regularized_runs,
                            worker_fingerprint)
from .agents import AGENT_RECORDS, AGENTS, build_agents

PILOT_AGENTS = ("rl_base", "agent_1", "agent_2")    # the pilot's agents, under its arithmetic
PILOT_AGENT_RECORDS = PACKAGE / "data" / "pilot_agents.json"    # their regime check
SEEDS = tuple(range(20))
SETTINGS = tuple(COMPARISON)
RECORDS = PACKAGE / "data" / "study_runs.jsonl.gz"   # what `make study` computes now
# The pilot: the first 540 runs (3 agents x 9 settings x seeds 0-19), computed by earlier code under
# an earlier arithmetic (MKL's matrix products, on an Intel Xeon) from the earlier RL base agent.
# Data, labelled by each record's code hash and fingerprint: read, never recomputed.
PILOT = PACKAGE / "data" / "pilot_runs.jsonl.gz"
DIGITS = 6          # significant digits kept of each logged number (the tables print 3)


def _rounded(value):
    if isinstance(value, float):
        return float(f"{value:.{DIGITS}g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def record(setting, agent, seed, run, arithmetic):
    """One run as plain data: what the claims and figures read, and what identifies its bits:
    the fingerprint it was computed under (`arithmetic`) and the steps its history holds."""
    return {"setting": setting, "agent": agent, "seed": seed, "steps": len(run["history"]),
            "code": CODE_VERSION, "arithmetic": arithmetic, "sha256": params_sha256(run["state"]),
            "history": _rounded(run["history"]), "eval": _rounded(run["eval"])}


def record_digest(r):
    """SHA-256 of a record's content, as the manifest holds it."""
    return hashlib.sha256(json.dumps(r, sort_keys=True).encode()).hexdigest()


def jobs(agent, settings=SETTINGS, seeds=SEEDS):
    """The run-cache jobs of one base agent, in (setting, seed) order."""
    return [{"cfg": seeded(COMPARISON[s], seed), "steps": STEPS, "agent": agent}
            for s in settings for seed in seeds]


class StaleStudy(RuntimeError):
    """The committed records cannot be what they claim: unreadable, edited, incomplete, foreign,
    or made under another arithmetic."""


def _read_lines(path):
    try:
        with gzip.open(path, "rt") as f:
            return [json.loads(line) for line in f]
    except (OSError, EOFError, json.JSONDecodeError) as err:
        raise StaleStudy(f"the study's records {path} cannot be read ({err}); run `make study` "
                         f"to recompute them") from None


def design(agents=None):
    """The fresh draw's cells as the manifest states them."""
    return {"agents": list(AGENTS if agents is None else agents), "settings": list(SETTINGS),
            "seeds": list(SEEDS), "steps": STEPS, "arithmetic": EXPECTED}


def _malformed(r, cell):
    numbers = [r["eval"].get(k) for k in ("pass@1", "pass@8", "reads", "malformed")]
    numbers += [log.get(k) for log in r["history"] for k in ("entropy", "reward", "kl")]
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
               for x in numbers):
        return f"{cell}: a number is missing, not a number, or not finite"
    if r["steps"] != len(r["history"]) or len(r["sha256"]) != 64:
        return f"{cell}: its history holds {len(r['history'])} steps, it says {r['steps']}"
    return None


def load_records(path=RECORDS, complete=True):
    """The fresh draw's records, checked against the file's manifest (its first line: the design
    and a SHA-256 per record). Refused, naming which: an unreadable file, a record whose content
    is not its manifest's, a duplicated or conflicting cell, a cell outside the design or under
    another arithmetic, a malformed record, and (with `complete`) any design cell absent. The
    code hash each record carries is provenance: `make test` recomputes a slice bit for bit."""
    lines = _read_lines(path)
    if not lines or "manifest" not in lines[0]:
        raise StaleStudy(f"{path} has no manifest line; only `make study` writes it")
    manifest, records = lines[0]["manifest"], lines[1:]
    want = manifest["design"]
    problems, seen = [], {}
    for r in records:
        cell = f"{r.get('agent')}|{r.get('setting')}|{r.get('seed')}"
        if cell in seen:
            problems.append(f"{cell}: recorded twice"
                            + ("" if record_digest(seen[cell]) == record_digest(r) else ", differently"))
            continue
        seen[cell] = r
        if manifest["records"].get(cell) != record_digest(r):
            problems.append(f"{cell}: content differs from the manifest's SHA-256 (edited, or "
                            "not written by `make study`)")
        elif (r["agent"] not in want["agents"] or r["setting"] not in want["settings"]
              or r["seed"] not in want["seeds"]):
            problems.append(f"{cell}: outside the design")
        elif r["arithmetic"] != want["arithmetic"] or r["steps"] != want["steps"]:
            problems.append(f"{cell}: computed under arithmetic {r['arithmetic'][:12]} for "
                            f"{r['steps']} steps, not the design's {want['arithmetic'][:12]} and "
                            f"{want['steps']}")
        elif (bad := _malformed(r, cell)) is not None:
            problems.append(bad)
    listed_only = set(manifest["records"]) - set(seen)
    problems += [f"{cell}: in the manifest but not in the file" for cell in sorted(listed_only)]
    if want != design(want["agents"]) or want["agents"] != list(AGENTS):
        problems.append(f"the manifest's design {want} is not this plan's {design()}")
    if complete:
        cells = {f"{a}|{s}|{seed}" for a in want["agents"] for s in want["settings"]
                 for seed in want["seeds"]}
        missing = sorted(cells - set(seen))
        if missing:
            problems.append(f"{len(missing)} design cells have no record, e.g. {missing[:3]}")
    if problems:
        raise StaleStudy(f"{path}: " + "; ".join(problems[:8])
                         + (f" (and {len(problems) - 8} more)" if len(problems) > 8 else ""))
    return records


def load_pilot(path=PILOT):
    """The pilot's records, read as data: each carries the code and arithmetic that made it, and
    none is what this code computes (so none is checked against it)."""
    records = _read_lines(path)
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


def summaries(records):
    """{agent: one {setting: diagnostics.run_summary} per seed}: what the table's claims read."""
    return {agent: [{label: run_summary(r) for label, r in seed.items()} for seed in seeds]
            for agent, seeds in by_agent(records).items()}


def _write(records, path=RECORDS):
    """The records, in design order, after their manifest line (design and SHA-256 per record)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    order = {a: i for i, a in enumerate(AGENTS)}
    records = sorted(records, key=lambda r: (order[r["agent"]], SETTINGS.index(r["setting"]),
                                             r["seed"]))
    manifest = {"design": design(), "records": {f"{r['agent']}|{r['setting']}|{r['seed']}":
                                                record_digest(r) for r in records}}
    lines = [{"manifest": manifest}, *records]
    text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in lines)
    write_atomically(path, gzip.compress(text.encode(), mtime=0))   # mtime 0: the same bytes


def compute(agents=AGENTS, executor=None, workers=None, blocks=(SEEDS[:10], SEEDS[10:])):
    """Every missing run, in blocks of ten seeds (seeds 0-9 of every agent and setting, then
    10-19), writing the records after each block of ten runs: a study stopped early keeps what
    it finished, balanced across agents, and the run cache keeps the runs."""
    if (arithmetic := worker_fingerprint()) != EXPECTED:
        raise StaleStudy(f"the run workers compute arithmetic {arithmetic[:12]}, not the design's "
                         f"{EXPECTED[:12]}: the draw's records would not be what the notebooks "
                         f"compute (`make doctor` says why)")
    done = ({(r["agent"], r["setting"], r["seed"]): r for r in load_records(complete=False)}
            if RECORDS.exists() else {})      # a file that fails its checks stops the study
    start, total, before = time.perf_counter(), len(agents) * len(SETTINGS) * len(SEEDS), len(done)
    for block in blocks:
        for agent in agents:
            cells = [(s, seed) for s in SETTINGS for seed in block if (agent, s, seed) not in done]
            if not cells:
                continue
            todo = [jobs(agent, (s,), (seed,))[0] for s, seed in cells]
            runs = regularized_runs(todo, workers=workers, executor=executor,
                                    desc=f"{agent}, seeds {block[0]}-{block[-1]}")
            for (setting, seed), run in zip(cells, runs):
                done[(agent, setting, seed)] = record(setting, agent, seed, run, arithmetic)
            _write(list(done.values()))
            minutes = (time.perf_counter() - start) / 60
            left = minutes / (len(done) - before) * (total - len(done))
            print(f"study: {len(done)} of {total} runs recorded ({minutes:.1f} min, about "
                  f"{left:.0f} min to go)", flush=True)
    return list(done.values())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", action="store_true",
                        help=f"build and check the draw's base agents (writes {AGENT_RECORDS.name})")
    parser.add_argument("--cluster", help="address of a Dask scheduler (tcp://host:port) to run "
                        "on instead of local worker processes")
    parser.add_argument("--workers", type=int, help="local worker processes (default: every core)")
    args = parser.parse_args(argv)
    if args.workers is not None and args.workers < 1:
        parser.error(f"--workers must be a positive number of processes, got {args.workers}")
    if args.agents:
        out = build_agents(workers=args.workers or 1)
        print(f"agents: {', '.join(out['agents'])}; rejected: {', '.join(out['rejected']) or 'none'}")
        return
    if not AGENTS:
        parser.error(f"no base agents recorded in {AGENT_RECORDS}; build them first: make agents")
    if args.cluster:
        with dask_executor(args.cluster) as executor:
            records = compute(executor=executor)
    else:
        records = compute(workers=args.workers)
    print(f"study: {len(records)} runs in {RECORDS}")


if __name__ == "__main__":
    main()
