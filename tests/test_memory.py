"""`import tinyagent` makes freed memory serve the next tensor (memory.py)."""
import resource
import sys

import pytest
import torch

import tinyagent  # noqa: F401  (the import sets malloc's thresholds)
from tinyagent.memory import keep_freed_memory


def page_faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc only")
def test_a_tensor_made_again_after_free_faults_in_no_new_pages():
    assert keep_freed_memory()
    torch.ones(2 << 20).sum()                      # 8 MiB: 2,048 pages, made once
    before = page_faults()
    for _ in range(20):
        torch.ones(2 << 20).sum()                  # freed and made again
    assert page_faults() - before < 200     # unset, about 6,000 here: 2,048 for most of them
