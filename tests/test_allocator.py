"""keep_freed_memory: after it, memory freed and allocated again costs no page faults; without it, it does.

Each case runs in a fresh process (the setting is for a whole process, and the test process's own may be changed).
"""

import subprocess
import sys

import pytest

ROUNDS = 8
BLOCK_PAGES = 2**26 // 4096  # the pages a 64 MiB block touches
PROGRAM = f"""
import resource, sys, torch
from modeling_vaswani.toolkit.allocator import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "keep" else None
for _ in range(2):  # 64 MiB, written and freed: malloc's heap grows to hold it, then keeps it
    torch.ones(2**24)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range({ROUNDS}):
    block = torch.ones(2**24)
    del block
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def page_faults(mode: str) -> tuple[str, int]:
    output = subprocess.run([sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, check=True).stdout
    applied, faults = output.split()
    return applied, int(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc settings; Linux only")
def test_freed_memory_is_reused_without_page_faults():
    _, default_faults = page_faults("default")
    applied, kept_faults = page_faults("keep")
    assert default_faults > ROUNDS / 2 * BLOCK_PAGES, "glibc by default maps a large block afresh each time"
    assert applied == "True"
    # The heap may grow once or twice more (where a mapping sits just past it, glibc continues it elsewhere; seen in
    # about one run in three here), then the block's pages are reused: without the setting, every round faults.
    assert kept_faults <= 2 * BLOCK_PAGES
