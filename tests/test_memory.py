"""A run's start (`tinyagent.engine.start`, engine/memory.py) makes freed memory serve the next
tensor; `import tinyagent` alone changes nothing of the kind."""
import subprocess
import sys

import pytest

# In a fresh interpreter (a long-lived one's heap depends on everything it ran before): how many
# bytes the process gives back to the system when a 24 MiB tensor is freed.
FREE = """
import resource, sys, torch
if sys.argv[1] != "torch only":
    import tinyagent
if sys.argv[1] == "a run's start":
    import tinyagent.engine
    tinyagent.engine.start()
def resident():
    return int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize()
t = torch.ones(6 << 20)
before = resident()
del t
print(before - resident())
"""


def given_back(imports):
    done = subprocess.run([sys.executable, "-c", FREE, imports], capture_output=True, text=True,
                          check=True)
    return int(done.stdout)


LINUX_ONLY = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc only")


@LINUX_ONLY
def test_a_freed_tensor_stays_in_the_heap_for_the_next():
    from tinyagent.engine.memory import keep_freed_memory
    assert keep_freed_memory()
    kept, torch_alone = given_back("a run's start"), given_back("torch only")
    assert kept < 1 << 20, (kept, torch_alone)
    imported = given_back("import tinyagent")       # no side effect on the process's malloc
    assert abs(imported - torch_alone) < 1 << 20, (imported, torch_alone)


@LINUX_ONLY
@pytest.mark.x86_64("torch's allocator handing a freed 24 MiB tensor back to the system (aarch64's "
                    "torch keeps it in the heap by itself)")
def test_without_a_runs_start_the_freed_tensor_is_given_back():
    """What the setting changes: without it, the whole 24 MiB are unmapped when the tensor goes."""
    assert given_back("torch only") > 16 << 20
