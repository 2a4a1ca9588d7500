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

A draw (`Draw`) names its records, its agents file and the plan that judges it: the fresh draw
(`FRESH`, rule v1, study_plan.json) and the third draw (`THIRD`, rule v2, study_plan_v2.json;
computed by draw3.py), whose manifests carry the plan's SHA-256 and whose records stamp the
SHA-256 of the checkpoint each run started from; loading checks both.
"""
import argparse
import gzip
import hashlib
import json
import math
import re
import time
from dataclasses import dataclass
from pathlib import Path


from ..harness.cluster import dask_executor
from .diagnostics import run_summary
from .experiments import COMPARISON, STEPS, seeded
from ..checks import instance, nonempty_list, seed_int
from .. import files
from ..files import write_atomically
from ..harness.fingerprint import EXPECTED
from ..harness.runs import (CODE_VERSION, PACKAGE, params_sha256, regularized_runs,
                            worker_fingerprint)
from .agents import AGENT_RECORDS, AGENTS, PLAN, PLAN_SHA256, build_agents
from ..vocab import VOCAB_SIZE

PILOT_AGENTS = ("rl_base", "agent_1", "agent_2")    # the pilot's agents, under its arithmetic
PILOT_AGENT_RECORDS = PACKAGE / "data" / "pilot_agents.json"    # their regime check
SEEDS = tuple(range(20))
SETTINGS = tuple(COMPARISON)
RECORDS = PACKAGE / "data" / "study_runs.jsonl.gz"   # what `make study` computes now
# The pilot: the first 540 runs (3 agents x 9 settings x seeds 0-19), computed by earlier code under
# an earlier arithmetic (MKL's matrix products, on an Intel Xeon) from the earlier RL base agent.
# Data, labelled by each record's code hash and fingerprint: read, never recomputed.
PILOT = PACKAGE / "data" / "pilot_runs.jsonl.gz"
PILOT_MANIFEST = PACKAGE / "data" / "pilot_manifest.json"   # the pilot's design and a SHA-256 per record
DIGITS = 6          # significant digits kept of each logged number (the tables print 3)
CHECKPOINTS = PACKAGE / "checkpoints"


@dataclass(frozen=True)
class Draw:
    """A draw of the study: where its records and its agents are, the plan that judges it, its
    plan's SHA-256 where its manifest predates carrying one, and whether each record stamps the
    SHA-256 of the checkpoint it started from."""
    name: str
    records: Path
    agent_records: Path
    plan: Path
    plan_sha256: str | None = None
    stamps_start: bool = False
    per_agent: bool = False         # one record file per agent: `records` names it with {agent}


# The fresh draw, judged by rule v1 (study_plan.json); its manifest was written before manifests
# carried the plan's digest, so the digest of the plan it was drawn under is committed here.
FRESH = Draw("fresh draw", RECORDS, AGENT_RECORDS, PLAN, plan_sha256=PLAN_SHA256)
# The third draw, declared by rule v2 (study_plan_v2.json) before any of its agents or records.
# One record file per agent, so that a block of records committed is a file that never changes
# again, not a new copy of one growing file.
THIRD = Draw("third draw", PACKAGE / "data" / "draw3_{agent}.jsonl.gz",
             PACKAGE / "data" / "draw3_agents.json", PACKAGE / "data" / "study_plan_v2.json",
             stamps_start=True, per_agent=True)


def records_path(draw, agent=None):
    """The file that holds `draw`'s records (`agent`'s, for a draw with one file per agent)."""
    if not draw.per_agent:
        return draw.records
    if not isinstance(agent, str) or not agent:
        raise ValueError(f"{draw.name} keeps one record file per agent: name the agent, got "
                         f"{agent!r:.100}")
    return draw.records.with_name(draw.records.name.format(agent=agent))


def file_sha256(path):
    """SHA-256 of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def read_json(path, restore, error=None, sha256=None):
    """A JSON file the science layer reads (`files.read_json`), refused with a StaleStudy (or
    `error`) naming the file and how to restore it."""
    return files.read_json(path, restore, error or StaleStudy, sha256)


def draw_agents(draw):
    """The base agents of `draw` as its agents file records them (empty before any is built)."""
    if draw is FRESH:
        return AGENTS
    if not draw.agent_records.exists():
        return ()
    return tuple(read_json(draw.agent_records, "git checkout of the committed file, or "
                           "`make draw3`")["agents"])


def start_sha256(agent):
    """SHA-256 of the checkpoint a run of `agent` starts from, checked against the digest
    committed beside it (`<agent>.sha256`)."""
    path = CHECKPOINTS / f"{agent}.pt"
    try:
        digest, committed = file_sha256(path), path.with_suffix(".sha256").read_text().strip()
    except OSError as err:
        raise StaleStudy(f"the base agent {agent!r} has no checkpoint to start from ({err})") from None
    if digest != committed:
        raise StaleStudy(f"{path} is not the checkpoint its {path.with_suffix('.sha256').name} "
                         f"names (SHA-256 {digest[:12]} against {committed[:12]})")
    return digest


def _rounded(value):
    if isinstance(value, float):
        return float(f"{value:.{DIGITS}g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def record(setting, agent, seed, run, arithmetic, start=None):
    """One run as plain data: what the claims and figures read, and what identifies its bits:
    the fingerprint it was computed under (`arithmetic`), the steps its history holds and, where
    given, the SHA-256 of the checkpoint it started from (`start`)."""
    out = {"setting": setting, "agent": agent, "seed": seed, "steps": len(run["history"]),
           "code": CODE_VERSION, "arithmetic": arithmetic, "sha256": params_sha256(run["state"]),
           "history": _rounded(run["history"]), "eval": _rounded(run["eval"])}
    if start is not None:
        out["start_sha256"] = start
    return out


def record_digest(r):
    """SHA-256 of a record's content, as the manifest holds it."""
    return hashlib.sha256(json.dumps(r, sort_keys=True).encode()).hexdigest()


def jobs(agent, settings=SETTINGS, seeds=SEEDS):
    """The run-cache jobs of one base agent (its name, a string), in (setting, seed) order:
    `settings` a list of COMPARISON's names, `seeds` a list of integers (a bare string or
    number is refused, not iterated)."""
    if not isinstance(agent, str) or not agent:
        raise TypeError(f"agent must be a base agent's name (a string such as 'rl_base'), got "
                        f"{agent!r:.100}")
    settings, seeds = nonempty_list("settings", settings), nonempty_list("seeds", seeds)
    unknown = [s for s in settings if not isinstance(s, str) or s not in COMPARISON]
    if unknown:
        raise ValueError(f"unknown setting {unknown[0]!r:.100}; allowed: {', '.join(COMPARISON)}")
    seeds = [seed_int("a seed", seed) for seed in seeds]
    return [{"cfg": seeded(COMPARISON[s], seed), "steps": STEPS, "agent": agent}
            for s in settings for seed in seeds]


class StaleStudy(RuntimeError):
    """The committed records cannot be what they claim: unreadable, edited, incomplete, foreign,
    or made under another arithmetic."""


def _read_lines(path, restore="run `make study` to recompute them"):
    try:
        with gzip.open(path, "rt") as f:
            return [json.loads(line) for line in f]
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise StaleStudy(f"the study's records {path} cannot be read ({err}); {restore}") from None


def design(agents=None, draw=None):
    """A draw's cells as its manifest states them (default: the fresh draw)."""
    draw = FRESH if draw is None else draw
    return {"agents": list(draw_agents(draw) if agents is None else agents),
            "settings": list(SETTINGS), "seeds": list(SEEDS), "steps": STEPS, "arithmetic": EXPECTED}


REQUIRED = ("setting", "agent", "seed", "steps", "code", "arithmetic", "sha256", "history", "eval")
# What a record's numbers can be, whatever its manifest says: shares in [0, 1], counts and
# distances never negative (k3 is >= 0 sample by sample), distinct sequences among 16 attempts in
# [1, 16], a policy-token entropy between 0 and log 316.
EVAL_RANGES = {"pass@1": (0, 1), "pass@8": (0, 1), "reads": (0, math.inf),
               "malformed": (0, math.inf), "distinct": (1, 16), "kl_to_ref": (0, math.inf)}
HISTORY_RANGES = {"entropy": (0, math.log(VOCAB_SIZE)), "reward": (0, 1), "reads": (0, math.inf),
                  "malformed": (0, math.inf), "zero_adv_groups": (0, 1), "clip_frac": (0, 1),
                  "kl_to_ref": (0, math.inf)}


def _is_number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _out_of_range(r):
    found = [f"eval {k} {r['eval'][k]} (allowed [{lo}, {hi}])" for k, (lo, hi) in EVAL_RANGES.items()
             if k in r["eval"] and _is_number(r["eval"][k]) and not lo <= r["eval"][k] <= hi]
    found += [f"step {i} {k} {log[k]} (allowed [{lo}, {hi:.4g}])" for i, log in enumerate(r["history"])
              for k, (lo, hi) in HISTORY_RANGES.items()
              if k in log and _is_number(log[k]) and not lo <= log[k] <= hi]
    return found


def _unshaped(r, cell, stamped=False):
    """What is missing from a record's shape (its keys, a mapping and a list), or None."""
    if not isinstance(r, dict):
        return f"{cell}: a record must be a mapping, got {type(r).__name__}"
    missing = [k for k in REQUIRED + (("start_sha256",) if stamped else ()) if k not in r]
    if missing:
        return f"{cell}: no {', '.join(missing)} (a record holds {', '.join(REQUIRED)})"
    if not (isinstance(r["eval"], dict) and isinstance(r["history"], list)
            and all(isinstance(log, dict) for log in r["history"])):
        return f"{cell}: eval must be a mapping and history a list of per-step mappings"
    return None


def _malformed(r, cell, stamped=False):
    """What is wrong with a well-shaped record's numbers whatever its manifest says, or None."""
    numbers = [(f"eval {k}", r["eval"].get(k)) for k in ("pass@1", "pass@8", "reads", "malformed")]
    numbers += [(f"step {i} {k}", log.get(k)) for i, log in enumerate(r["history"])
                for k in ("entropy", "reward", "kl")]
    bad = [f"{name} {x!r:.40}" for name, x in numbers if not _is_number(x)]
    if bad:
        return (f"{cell}: a number is missing, not a number, or not finite: {', '.join(bad[:3])} "
                f"(each must be a finite int or float)")
    for key in ("sha256",) + (("start_sha256",) if stamped else ()):
        if not (isinstance(r[key], str) and len(r[key]) == 64
                and all(c in "0123456789abcdef" for c in r[key])):
            return f"{cell}: its {key} is not a SHA-256 (64 hexadecimal digits): {r[key]!r:.80}"
    if r["steps"] != len(r["history"]):
        return f"{cell}: its history holds {len(r['history'])} steps, it says {r['steps']}"
    if bad := _out_of_range(r):
        return f"{cell}: out of range: " + "; ".join(bad[:3])
    return None


def _cell(r):
    return f"{r.get('agent')}|{r.get('setting')}|{r.get('seed')}" if isinstance(r, dict) else "?"


def _manifest_problems(records, listed, stamped=False):
    """({cell: record} of the records, problems): each record against its manifest's SHA-256 and
    against what any record must be, duplicates, and cells the manifest lists but the file lacks."""
    problems, seen = [], {}
    for r in records:
        cell = _cell(r)
        if cell in seen:
            problems.append(f"{cell}: recorded twice"
                            + ("" if record_digest(seen[cell]) == record_digest(r) else ", differently"))
            continue
        seen[cell] = r
        if listed.get(cell) != record_digest(r):
            problems.append(f"{cell}: content differs from the manifest's SHA-256 (edited, or "
                            "not written by `make study`)")
        elif (bad := _unshaped(r, cell, stamped)) is not None:
            problems.append(bad)
    problems += [f"{cell}: in the manifest but not in the file"
                 for cell in sorted(set(listed) - set(seen))]
    return seen, problems


def _refuse(path, problems):
    if problems:
        raise StaleStudy(f"{path}: " + "; ".join(problems[:8])
                         + (f" (and {len(problems) - 8} more)" if len(problems) > 8 else ""))


def _plan_problems(manifest, draw):
    """The plan file against the digest its records were drawn under (the manifest's, or the
    draw's committed one)."""
    recorded = manifest.get("plan", draw.plan_sha256)
    if recorded is None:
        return [f"the manifest does not say which plan judged it (no plan SHA-256)"]
    try:
        now = file_sha256(draw.plan)
    except OSError as err:
        return [f"the plan {draw.plan} cannot be read ({err}); restore it from git"]
    if now != recorded:
        return [f"the plan {draw.plan} is not the plan these records were drawn under (its "
                f"SHA-256 {now[:12]}, the records' {str(recorded)[:12]}): restore it from git; a "
                f"changed rule is a new plan file, declared before the records it judges"]
    return []


def planned_count(draw):
    """How many base agents `draw`'s plan declares."""
    return len(read_json(draw.plan, "git checkout of the committed plan")["design"]["agents"])


def load_records(path=None, complete=True, draw=None):
    """A draw's records (default: the fresh draw's), checked against each file's manifest (its
    first line: the design, for draws after the fresh one the plan's SHA-256, and a SHA-256 per
    record). Refused, naming which: an unreadable file, a plan edited after its records, a record
    whose content is not its manifest's, a duplicated or conflicting cell, a cell outside the
    design or under another arithmetic, a malformed record or a number out of its range (whatever
    the manifest says), a record that did not start from its agent's committed checkpoint (draws
    that stamp it), a record file of an agent the draw's agents file does not accept, and (with
    `complete`) any design cell or planned agent absent. A draw with one file per agent reads
    every accepted agent's file (one agent's: `load_agent_records`). The code hash each record
    carries is provenance: `make test` recomputes a sample bit for bit."""
    draw = FRESH if draw is None else instance("draw", draw, Draw)
    if path is not None and draw.per_agent:
        raise ValueError(f"the {draw.name} keeps one record file per agent: read one agent's with "
                         f"load_agent_records(draw, agent), or all with load_records(draw=draw)")
    if not draw.per_agent:
        return _load_file(draw.records if path is None else path, complete, draw)
    accepted = list(draw_agents(draw))
    records, problems = [], []
    for agent in accepted:
        if (file := records_path(draw, agent)).exists():
            records += _load_file(file, complete, draw, [agent])
        elif complete:
            problems.append(f"{file.name}: no records of the accepted agent {agent}")
    known = {records_path(draw, a) for a in accepted}
    problems += [f"{file.name}: records of an agent that {draw.agent_records.name} does not "
                 f"accept" for file in sorted(draw.records.parent.glob(
                     draw.records.name.format(agent="*"))) if file not in known]
    if complete and len(accepted) != planned_count(draw):
        problems.append(f"{len(accepted)} base agents built of the {planned_count(draw)} the "
                        f"plan declares")
    _refuse(f"the {draw.name}", problems)
    return records


def _manifest(path, manifest):
    """`manifest` if it has the shape `_write` gives it: a mapping with the design (a mapping)
    and the records (a mapping of cell to SHA-256); otherwise a StaleStudy naming `path`."""
    if not (isinstance(manifest, dict) and isinstance(manifest.get("design"), dict)
            and isinstance(manifest.get("records"), dict)):
        raise StaleStudy(f"{path}: its manifest must be a mapping with a design (a mapping) and "
                         f"records (a mapping of cell to SHA-256), as `make study` writes it; "
                         f"got {str(manifest)[:120]}: restore the file from git")
    return manifest


def _load_file(path, complete, draw, agents=None):
    """One record file of `draw` (see `load_records`); `agents`: the agents it must hold
    (default: the draw's accepted agents)."""
    lines = _read_lines(path)
    if not lines or not isinstance(lines[0], dict) or "manifest" not in lines[0]:
        raise StaleStudy(f"{path} has no manifest line; only `make study` writes it")
    manifest, records = _manifest(path, lines[0]["manifest"]), lines[1:]
    want = manifest["design"]
    seen, problems = _manifest_problems(records, manifest["records"], draw.stamps_start)
    problems = _plan_problems(manifest, draw) + problems
    starts = {}
    for cell, r in seen.items():
        if (manifest["records"].get(cell) != record_digest(r)
                or _unshaped(r, cell, draw.stamps_start)):
            continue                                  # already named above
        if (r["agent"] not in want["agents"] or r["setting"] not in want["settings"]
                or r["seed"] not in want["seeds"]):
            problems.append(f"{cell}: outside the design")
        elif r["arithmetic"] != want["arithmetic"] or r["steps"] != want["steps"]:
            problems.append(f"{cell}: computed under arithmetic {r['arithmetic'][:12]} for "
                            f"{r['steps']} steps, not the design's {want['arithmetic'][:12]} and "
                            f"{want['steps']}")
        elif (bad := _malformed(r, cell, draw.stamps_start)) is not None:
            problems.append(bad)
        elif draw.stamps_start:
            if r["agent"] not in starts:
                try:
                    starts[r["agent"]] = start_sha256(r["agent"])
                except StaleStudy as err:
                    starts[r["agent"]] = None
                    problems.append(str(err))
            if starts[r["agent"]] is not None and r["start_sha256"] != starts[r["agent"]]:
                problems.append(f"{cell}: started from checkpoint {r['start_sha256'][:12]}, not "
                                f"{r['agent']}'s committed one ({starts[r['agent']][:12]})")
    expected = list(draw_agents(draw)) if agents is None else list(agents)
    agents_ok = (want["agents"] == expected if draw is FRESH or complete or agents is not None
                 else set(want["agents"]) <= set(expected))
    if want != design(want["agents"], draw) or not agents_ok:
        problems.append(f"the manifest's design {want} is not this plan's "
                        f"{design(expected, draw)}")
    if complete:
        cells = {f"{a}|{s}|{seed}" for a in want["agents"] for s in want["settings"]
                 for seed in want["seeds"]}
        missing = sorted(cells - set(seen))
        if missing:
            problems.append(f"{len(missing)} design cells have no record, e.g. {missing[:3]}")
        if agents is None and draw is not FRESH and len(expected) != planned_count(draw):
            problems.append(f"{len(expected)} base agents built of the {planned_count(draw)} "
                            f"the plan declares")
    _refuse(path, problems)
    return records


def pilot_design():
    """The pilot's cells, as its manifest states them."""
    return {"agents": list(PILOT_AGENTS), "settings": list(SETTINGS), "seeds": list(SEEDS),
            "steps": STEPS}


def load_pilot(path=PILOT, manifest=PILOT_MANIFEST):
    """The pilot's records, read as data: each carries the code and arithmetic that made it, and
    none is what this code computes (so none is recomputed). Checked against the pilot's own
    manifest (its design and a SHA-256 per record): an edited, duplicated, deleted or added
    record is refused, as is a number out of its range or a record that does not say which
    code and arithmetic made it."""
    records = _read_lines(path, "restore it from git: the pilot is data, never recomputed")
    listed = _manifest(manifest, read_json(manifest, "git checkout of the committed file"))
    seen, problems = _manifest_problems(records, listed["records"])
    problems += [bad for cell, r in seen.items() if listed["records"].get(cell) == record_digest(r)
                 and not _unshaped(r, cell) and (bad := _malformed(r, cell)) is not None]
    if listed["design"] != pilot_design():
        problems.append(f"the pilot manifest's design {listed['design']} is not {pilot_design()}")
    problems += [f"{cell}: outside the pilot's design" for cell, r in seen.items()
                 if isinstance(r, dict) and (r.get("agent") not in PILOT_AGENTS
                                             or r.get("setting") not in SETTINGS
                                             or r.get("seed") not in SEEDS)]
    unlabelled = [cell for cell, r in seen.items()
                  if isinstance(r, dict) and not (r.get("code") and r.get("arithmetic"))]
    if unlabelled:
        problems.append(f"records {unlabelled[:5]} do not say which code and arithmetic made them")
    _refuse(path, problems)
    return records


def write_pilot_manifest(path=PILOT, manifest=PILOT_MANIFEST):
    """The pilot's manifest: its design and a SHA-256 per record, of the records as committed."""
    records = _read_lines(path)
    out = {"design": pilot_design(), "records": {_cell(r): record_digest(r) for r in records}}
    write_atomically(manifest, (json.dumps(out, indent=0, sort_keys=True) + "\n").encode())


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
    every setting: the shape the claims read. A setting outside the study's nine is refused (it
    would leave every seed out, silently)."""
    if not isinstance(records, (list, tuple)):
        raise TypeError(f"records must be a list of the study's records (load_records), got "
                        f"{type(records).__name__}")
    unknown = [s for s in settings if s not in SETTINGS]
    if isinstance(settings, str) or unknown:
        raise ValueError(f"settings must be among the study's: {', '.join(SETTINGS)}; got "
                         f"{[settings] if isinstance(settings, str) else unknown}")
    table = {}
    for r in records:
        if not isinstance(r, dict) or not {"agent", "seed", "setting"} <= r.keys():
            raise ValueError(f"records must be the study's records (load_records), each a mapping "
                             f"with agent, seed and setting; got {str(r)[:100]}")
        table.setdefault(r["agent"], {}).setdefault(r["seed"], {})[r["setting"]] = r
    grouped = {agent: [seeds[s] for s in sorted(seeds) if set(seeds[s]) >= set(settings)]
               for agent, seeds in table.items()}
    return {agent: per_seed for agent, per_seed in grouped.items() if per_seed}


def summaries(records):
    """{agent: one {setting: diagnostics.run_summary} per seed}: what the table's claims read."""
    return {agent: [{label: run_summary(r) for label, r in seed.items()} for seed in seeds]
            for agent, seeds in by_agent(records).items()}


def _write(records, path=None, draw=None, agents=None):
    """The records, in design order, after their manifest line (design, for draws after the
    fresh one the plan's SHA-256, and a SHA-256 per record). `agents`: the agents the file's
    design holds (default: the draw's; one agent for a draw with one file per agent)."""
    draw = FRESH if draw is None else draw
    agents = list(draw_agents(draw) if agents is None else agents)
    path = (records_path(draw, agents[0]) if draw.per_agent else draw.records) if path is None else path
    path.parent.mkdir(parents=True, exist_ok=True)
    order = {a: i for i, a in enumerate(agents)}
    records = sorted(records, key=lambda r: (order[r["agent"]], SETTINGS.index(r["setting"]),
                                             r["seed"]))
    manifest = {"design": design(agents, draw), "records": {_cell(r): record_digest(r)
                                                             for r in records}}
    if draw.plan_sha256 is None:
        manifest["plan"] = file_sha256(draw.plan)
    lines = [{"manifest": manifest}, *records]
    text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in lines)
    write_atomically(path, gzip.compress(text.encode(), mtime=0))   # mtime 0: the same bytes


def load_agent_records(draw, agent, complete=False):
    """One agent's records of a draw that keeps one file per agent (empty before its first
    block), checked as `load_records` checks them."""
    path = records_path(draw, agent)
    return _load_file(path, complete, draw, [agent]) if path.exists() else []


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
    if args.cluster is not None and not re.fullmatch(r"(\w+://)?[^\s/]+:\d+", args.cluster):
        parser.error(f"--cluster must be a Dask scheduler's address, tcp://host:port, got "
                     f"{args.cluster!r}")
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
