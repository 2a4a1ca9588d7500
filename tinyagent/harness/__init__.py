"""The harness: the same bits anywhere, each run computed once. The arithmetic's fingerprint, the
run cache keyed by config + code hash + fingerprint, runs in worker processes or on a Dask
cluster, `make doctor`, `make bench`, the contract of where bits are promised, the per-kernel
probe, the rebuild-and-compare of `make pretrain`, and `make lab`'s working copies. It imports
the book's code (the modules of `tinyagent/`), never the science."""
