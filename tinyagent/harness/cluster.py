"""Runs for readers who outgrow a laptop: the run cache's jobs on a Dask cluster.

Why Dask (distributed) and not Ray: it is pure Python from PyPI (a few MB, no binary runtime), its
`Client.get_executor()` is a `concurrent.futures.Executor`, so `runs.regularized_runs` hands it the
same jobs it hands its local process pool, and a two-worker cluster on loopback starts in seconds,
which lets `make test` check the whole path. The local process pool stays the default.

A remote worker must compute this machine's pinned arithmetic: `import tinyagent` sets the pins in
the worker's environment before torch computes (or start workers with them: `env` below), every run
checks its worker's fingerprint before it trains and refuses on a mismatch, and the results come back
into the local run cache. Each worker must run one task at a time (`--nthreads 1`): torch's thread
count is one per process, and two runs sharing a process would share it.
"""
from contextlib import contextmanager

from ..engine.arithmetic import runnable_pins
from ..checks import positive_int


@contextmanager
def dask_executor(address):
    """An Executor on the Dask scheduler at `address` (e.g. "tcp://10.0.0.5:8786"), after checking
    that every worker runs one task at a time; the connection closes when the block ends."""
    from distributed import Client
    client = Client(address)
    try:
        threads = {w: info["nthreads"] for w, info in client.scheduler_info()["workers"].items()}
        if not threads:
            raise RuntimeError(f"the Dask scheduler at {address} has no workers yet; start some "
                               f"with `dask worker {address} --nthreads 1`")
        several = sorted(w for w, n in threads.items() if n != 1)
        if several:
            raise ValueError(f"Dask workers {several} run several tasks at once; runs need one "
                             f"thread per worker process: start them with "
                             f"`dask worker {address} --nthreads 1`")
        yield client.get_executor()
    finally:
        client.close()


def local_cluster(n_workers=2):
    """A Dask cluster of `n_workers` single-thread worker processes on loopback, started with the
    pins that apply here in their environment: for trying the remote path on one machine (and for
    the tests)."""
    positive_int("n_workers", n_workers)
    from distributed import LocalCluster
    return LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                        host="127.0.0.1", dashboard_address=None, env=runnable_pins())
