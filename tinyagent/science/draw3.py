"""The third draw of the study, declared by rule v2 (tinyagent/data/study_plan_v2.json): new base
agents, each built by SFT from a new seed and checked against the plan's regime bands, and each
accepted agent's nine settings x twenty seeds computed into its own record file (`make draw3`).

    python -m tinyagent.science.draw3               # everything missing: agents, then their runs
    python -m tinyagent.science.draw3 --agents 1    # at most one more agent built, then stop
    python -m tinyagent.science.draw3 --status      # what is built and recorded

One thing at a time, on one core: an agent is built (in one pinned worker process), then its runs
are computed one after another, then the next agent is built. Each agent's file is rewritten
atomically after every block of `BLOCK` seeds (all nine settings), so a draw stopped at any moment
keeps what it finished and a re-run computes only what is missing: the agents file says which
agents are built, the record files which runs are done, and the run cache keeps finished runs.
Every record stamps the SHA-256 of the checkpoint it started from, every file's manifest the
plan's SHA-256; `study.load_records(draw=THIRD)` checks both.
"""
import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

from ..engine.arithmetic import pinned_environment
from ..files import write_atomically
from ..harness.fingerprint import EXPECTED
from ..harness.runs import regularized_runs, worker_fingerprint
from . import agents as agents_module
from .study import (SEEDS, SETTINGS, THIRD, StaleStudy, _write, draw_agents, jobs,
                    load_agent_records, read_json, record, records_path, start_sha256)

BLOCK = 5           # seeds per block: 45 runs, a few minutes on one core, then the file is written
EXISTING = frozenset({"rl_base", *(f"agent_{k}" for k in range(1, 8))})   # the earlier draws' agents


def plan_design(draw=THIRD):
    """The design the plan declares: its planned agents and its regime bands, checked against
    what agents.py checks an agent with."""
    plan = read_json(draw.plan, "git checkout of the committed plan")
    planned = plan["design"]["agents"]
    if not planned or set(planned) & EXISTING:
        raise StaleStudy(f"{draw.plan} must plan new base agents (none of {sorted(EXISTING)}), "
                         f"got {planned}")
    bands = {m: tuple(b) for m, b in plan["design"]["regime_bands"].items()}
    if bands != agents_module.REGIME:
        raise StaleStudy(f"{draw.plan}'s regime bands {bands} are not the ones agents.py checks "
                         f"({agents_module.REGIME})")
    return planned, bands


def _agents_file(draw):
    if not draw.agent_records.exists():
        return {"agents": [], "rejected": [], "checks": {}, "sha256": {}}
    return read_json(draw.agent_records, "git checkout of the committed file")


def build_agents(draw=THIRD, count=None, workers=1):
    """Build `draw`'s base agents in seed order from the plan's first (agent_8, agent_9, ...),
    one at a time, each checked against the plan's regime bands, until the plan's number (or
    `count` more) lie inside every band; an agent outside a band is recorded as rejected and the
    next seed is built. Resumable: a checkpoint already there is checked, not rebuilt, and agents
    already recorded are kept. The agents file is written after each agent, with each accepted
    checkpoint's SHA-256. SFT runs in one pinned worker process (`workers`)."""
    planned, _ = plan_design(draw)
    out = _agents_file(draw)
    target = len(planned) if count is None else min(len(planned), len(out["agents"]) + count)
    seed = int(planned[0].split("_")[1])
    if len(out["agents"]) >= target:
        return out
    with pinned_environment(), ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        while len(out["agents"]) < target:
            name, seed = f"agent_{seed}", seed + 1
            if name in out["agents"] or name in out["rejected"]:
                continue
            start = time.perf_counter()
            check = pool.submit(agents_module.build_agent, name).result()
            out["checks"][name] = check
            if all(v["inside"] for v in check.values()):
                out["agents"].append(name)
                out["sha256"][name] = start_sha256(name)
            else:
                out["rejected"].append(name)
            write_atomically(draw.agent_records, (json.dumps(out, indent=1) + "\n").encode())
            print(f"{draw.name}, {name} ({(time.perf_counter() - start) / 60:.1f} min): "
                  + "  ".join(f"{m} {v['value']:.3f}±{v['se']:.3f}"
                              + ("" if v["inside"] else f" OUTSIDE {v['band']}")
                              for m, v in check.items())
                  + ("" if name in out["agents"] else "  -> rejected, the next seed is built"),
                  flush=True)
    return out


def compute_agent(agent, draw=THIRD, block=BLOCK, workers=1):
    """`agent`'s missing runs of the draw (every setting x seed), a block of `block` seeds at a
    time, its record file rewritten after each block; returns its records."""
    if agent not in draw_agents(draw):
        raise StaleStudy(f"{agent} is not an accepted agent of the {draw.name} "
                         f"({draw.agent_records.name}: {', '.join(draw_agents(draw)) or 'none'})")
    if (arithmetic := worker_fingerprint()) != EXPECTED:
        raise StaleStudy(f"the run workers compute arithmetic {arithmetic[:12]}, not the design's "
                         f"{EXPECTED[:12]}: the draw's records would not be what the notebooks "
                         f"compute (`make doctor` says why)")
    stamp = start_sha256(agent)
    done = {(r["setting"], r["seed"]): r for r in load_agent_records(draw, agent)}
    total = len(SETTINGS) * len(SEEDS)
    for first in range(0, len(SEEDS), block):
        cells = [(s, seed) for seed in SEEDS[first:first + block] for s in SETTINGS
                 if (s, seed) not in done]
        if not cells:
            continue
        start = time.perf_counter()
        runs = regularized_runs([jobs(agent, (s,), (seed,))[0] for s, seed in cells],
                                workers=workers, desc=f"{agent}, seeds {first}-{first + block - 1}")
        for (setting, seed), run in zip(cells, runs):
            done[(setting, seed)] = record(setting, agent, seed, run, arithmetic, stamp)
        _write(list(done.values()), draw=draw, agents=[agent])
        print(f"{draw.name}, {agent}: {len(done)} of {total} runs recorded in "
              f"{records_path(draw, agent).name} ({(time.perf_counter() - start) / len(cells):.1f} "
              f"s a run)", flush=True)
    return list(done.values())


def status(draw=THIRD):
    """One line per planned slot: the accepted agents with their recorded runs, then the
    rejected ones."""
    planned, _ = plan_design(draw)
    out = _agents_file(draw)
    lines = [f"{draw.name}: {len(out['agents'])} of {len(planned)} agents accepted, rejected: "
             f"{', '.join(out['rejected']) or 'none'}"]
    lines += [f"  {agent}: {len(load_agent_records(draw, agent))} of "
              f"{len(SETTINGS) * len(SEEDS)} runs" for agent in out["agents"]]
    return "\n".join(lines)


def run(draw=THIRD, agents=None, workers=1):
    """Everything missing, in order: the runs of every accepted agent, then the next agent and its
    runs, until the plan's agents are built and recorded (or `agents` more were built)."""
    planned, _ = plan_design(draw)
    built = 0
    while True:
        for agent in draw_agents(draw):
            compute_agent(agent, draw, workers=workers)
        if len(draw_agents(draw)) >= len(planned) or (agents is not None and built >= agents):
            break
        build_agents(draw, count=1, workers=workers)
        built += 1
    print(status(draw), flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, metavar="N",
                        help="build at most N more agents (each with its runs), then stop")
    parser.add_argument("--status", action="store_true", help="say what is built and recorded")
    args = parser.parse_args(argv)
    if args.agents is not None and args.agents < 0:
        parser.error(f"--agents must be a number of agents, 0 or more, got {args.agents}")
    if args.status:
        print(status())
        return
    run(agents=args.agents)


if __name__ == "__main__":
    main()
