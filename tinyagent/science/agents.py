"""The fresh draw's base agents: the shipped RL base agent and agent_3, agent_4, ... built the same
way from other seeds (demonstrations and SFT: `pretrain.build_rl_base`), each checked against the
regime bands that the committed plan declared before any was built (`make agents`)."""
import json
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

from ..engine.arithmetic import pinned_environment
from ..files import read_json, write_atomically
from ..harness.fingerprint import check_arithmetic
from ..harness.rebuild import held_out_behaviour
from ..harness.runs import PACKAGE, SHIPPED_AGENT, load_agent
from ..checkpoint import RL_BASE_CHECKPOINT, load_policy, save_policy
from ..pretrain import DemoConfig, SFTConfig, build_rl_base

PLAN = PACKAGE / "data" / "study_plan.json"      # the declared design and rule of the fresh draw
# The digest of that plan as the fresh draw was drawn under it (its manifest was written before
# manifests carried the plan's digest): every reader of the plan compares it.
PLAN_SHA256 = "50c62275b1d198fa9b46de64e6e845a00f519d5d5e920640750f363293f0da32"
RESTORE_PLAN = "git checkout of the committed plan"
AGENT_RECORDS = PACKAGE / "data" / "study_agents.json"     # each built agent's regime check
FIRST_NEW_SEED = 3          # agent_k: demonstrations and SFT at seed k; 1 and 2 were the pilot's
# Declared in the plan before the agents were built (its regime_bands_why says why these bands).
REGIME = {m: tuple(band) for m, band in
          read_json(PLAN, RESTORE_PLAN, sha256=PLAN_SHA256)["design"]["regime_bands"].items()}


def draw_agents():
    """The fresh draw's base agents, as `make agents` built and checked them (empty before)."""
    return tuple(read_json(AGENT_RECORDS, "`make agents`, or git checkout of the committed "
                           "file")["agents"]) if AGENT_RECORDS.exists() else ()


AGENTS = draw_agents()


def check_agent(agent):
    """One agent's held-out behaviour against `REGIME`: {metric: {value, se, band, inside}}."""
    behaviour = held_out_behaviour(load_agent(agent))
    return {m: {"value": behaviour[m][0], "se": behaviour[m][1], "band": list(band),
                "inside": band[0] <= behaviour[m][0] <= band[1]} for m, band in REGIME.items()}


def build_agent(agent):
    """Build agent_k (demonstrations and SFT at seed k) beside the shipped agent, unless a valid
    checkpoint is already there, and check it against the regime."""
    check_arithmetic()
    path = RL_BASE_CHECKPOINT.with_name(f"{agent}.pt")
    try:
        load_policy(path)
    except (FileNotFoundError, ValueError):
        seed = int(agent.split("_")[1])
        save_policy(build_rl_base(DemoConfig(seed=seed), SFTConfig(seed=seed)), path)
    return check_agent(agent)


def build_agents(count=None, workers=1):
    """The draw's base agents: the shipped one and agent_3, agent_4, ... built one at a time by
    default (SFT runs on two threads; two SFT processes on two cores ran six times slower, measured),
    until `count` (the plan's six) lie inside every regime band. An agent outside a band is
    recorded as rejected and the next seed is built instead, as the plan declares. Resumable:
    a valid checkpoint is checked, not rebuilt. Writes AGENT_RECORDS and returns it."""
    count = len(read_json(PLAN, RESTORE_PLAN, sha256=PLAN_SHA256)["design"]["agents"]) \
        if count is None else count
    checks = {SHIPPED_AGENT: check_agent(SHIPPED_AGENT)}
    used = [SHIPPED_AGENT] if all(v["inside"] for v in checks[SHIPPED_AGENT].values()) else []
    seed = FIRST_NEW_SEED
    with pinned_environment(), ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        while len(used) < count:
            names = [f"agent_{seed + i}" for i in range(count - len(used))]
            seed += len(names)
            for name, check in zip(names, pool.map(build_agent, names)):
                checks[name] = check
                if all(v["inside"] for v in check.values()):
                    used.append(name)
                print(f"{name}: " + "  ".join(f"{m} {v['value']:.3f}±{v['se']:.3f}"
                      f"{'' if v['inside'] else ' OUTSIDE ' + str(v['band'])}"
                      for m, v in check.items()), flush=True)
    rejected = [a for a in checks if a not in used]
    out = {"agents": used, "rejected": rejected, "checks": checks}
    write_atomically(AGENT_RECORDS, (json.dumps(out, indent=1) + "\n").encode())
    return out
