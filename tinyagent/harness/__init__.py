"""The harness: the same bits anywhere, each run computed once. The arithmetic's fingerprint, the
run cache keyed by config + code hash + fingerprint, runs in worker processes or on a Dask
cluster, `make doctor`, `make bench`, the contract of where bits are promised, the per-kernel
probe, the rebuild-and-compare of `make pretrain`, and `make lab`'s working copies. It imports
the book's code (the modules of `tinyagent/`), never the science."""
from .. import engine

# Every command here (`python -m tinyagent.harness.doctor`, `make pretrain`, ...) computes under
# the pinned arithmetic, and some of the book's modules compute as they are imported (the gym
# draws its tasks): so the harness starts the engine's arithmetic before any of them loads.
engine.start()
