"""The study's runs on a real Dask cluster (two worker processes on loopback): they must come back
bit for bit as the local run workers compute them."""
import platform

import pytest

from tinyagent.engine.arithmetic import PINS
from tinyagent.harness import runs
from tinyagent.science import study
from tinyagent.harness.cluster import dask_executor, local_cluster

distributed = pytest.importorskip("distributed")


def test_a_local_cluster_computes_study_runs_bit_for_bit_as_local_workers(tmp_path, monkeypatch):
    picks = [("rl_base", "k3+ beta=0.3", 7), ("agent_1", "entropy 0.03", 8)]
    jobs = [study.jobs(agent, (setting,), (seed,))[0] for agent, setting, seed in picks]
    monkeypatch.setattr(runs, "CACHE_DIR", tmp_path / "local")   # compute, do not load
    local = runs.regularized_runs(jobs, progress=False)
    monkeypatch.setattr(runs, "CACHE_DIR", tmp_path / "cluster")
    with local_cluster(2) as cluster, dask_executor(cluster.scheduler_address) as executor:
        results = runs.regularized_runs(jobs, executor=executor, progress=False)
    for pick, run, mine in zip(picks, results, local):
        assert study.params_sha256(run["state"]) == study.params_sha256(mine["state"]), pick
    assert len(list((tmp_path / "cluster").glob("*.pt"))) == 2   # back in the local cache


@pytest.mark.parametrize("machine", ["aarch64", "x86_64"])
def test_a_local_clusters_workers_get_the_x86_pins_on_x86_only(monkeypatch, machine):
    started = {}
    monkeypatch.setattr(distributed, "LocalCluster", lambda **settings: started.update(settings))
    monkeypatch.setattr(platform, "machine", lambda: machine)
    local_cluster(2)
    assert (started["env"] == {}) == (machine == "aarch64")
    assert machine == "aarch64" or started["env"]["MKL_CBWR"] == PINS["MKL_CBWR"]


def test_a_cluster_whose_workers_share_a_process_is_refused():
    from distributed import LocalCluster
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster:
        with pytest.raises(ValueError, match="--nthreads 1"):
            with dask_executor(cluster.scheduler_address):
                pass
