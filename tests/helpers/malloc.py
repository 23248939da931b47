"""Whether a process keeps the memory it frees (toolkit/runtime.py's setting), seen by its effect: after a setup
program, a 64 MiB block written and freed again and again costs page faults every round without the setting, and
none once malloc's heap has grown to hold it with the setting. Each measurement runs in a fresh process (the setting
is for a whole process), with none of the environment variables that would decide for it."""

import os
import subprocess
import sys

from helpers.training_setup import TESTS

ROUNDS, WARMUP_ROUNDS = 16, 8
BLOCK_PAGES = 2**26 // 4096  # the pages a 64 MiB block touches
KEPT_FAULTS = ROUNDS / 4 * BLOCK_PAGES  # the heap may still grow a few times, never once a round
FRESH_FAULTS = ROUNDS / 2 * BLOCK_PAGES
MEASURE = f"""
import resource, torch
for _ in range({WARMUP_ROUNDS}):  # 64 MiB, written and freed: malloc's heap grows to hold it, then keeps it
    torch.ones(2**24)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range({ROUNDS}):
    block = torch.ones(2**24)
    del block
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def page_faults(setup: str, *arguments, **environment: str) -> tuple[list[str], int]:
    """What the `setup` program (run with `arguments`) printed, and the page faults of the rounds after it."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("MALLOC_")}
    env.pop("VASWANI_KEEP_FREED_MEMORY", None)
    env.update(environment, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")]))
    program = setup + MEASURE
    result = subprocess.run(
        [sys.executable, "-c", program, *map(str, arguments)], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    *printed, faults = result.stdout.split()
    return printed, int(faults)
