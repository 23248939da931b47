"""The allocator setting (allocator_vaswani.py): after it, memory freed and allocated again costs no page faults;
without it, it does. The model applies it by itself on its first CPU forward pass, unless the environment opts out.

Each case runs in a fresh process (the setting is for a whole process, and the test process's own may be changed).
"""

import os
import subprocess
import sys

import pytest

ROUNDS = 16
WARMUP_ROUNDS = 8
BLOCK_PAGES = 2**26 // 4096  # the pages a 64 MiB block touches
PROGRAM = f"""
import resource, sys, torch
from modeling_vaswani.allocator_vaswani import keep_freed_memory
from tiny_models import padded_batch, tiny_model

applied = None
if sys.argv[1] == "keep":
    applied = keep_freed_memory()
elif sys.argv[1] == "forward":  # as a training step or the Trainer runs the model
    ids, mask = padded_batch([5, 3])
    tiny_model()(input_ids=ids, attention_mask=mask, labels=ids)
elif sys.argv[1] == "generate":
    ids, mask = padded_batch([5, 3])
    tiny_model().generate(input_ids=ids, attention_mask=mask, max_new_tokens=3)
for _ in range({WARMUP_ROUNDS}):  # 64 MiB, written and freed: malloc's heap grows to hold it, then keeps it
    torch.ones(2**24)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range({ROUNDS}):
    block = torch.ones(2**24)
    del block
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""
KEPT_FAULTS = ROUNDS / 4 * BLOCK_PAGES  # the heap may still grow a few times (below), never once a round
FRESH_FAULTS = ROUNDS / 2 * BLOCK_PAGES

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc settings; Linux only")


def page_faults(mode: str, **environment: str) -> tuple[str, int]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("MALLOC_")}
    env.update(environment, PYTHONPATH=os.pathsep.join([os.path.dirname(__file__), env.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    applied, faults = result.stdout.split()
    return applied, int(faults)


def test_freed_memory_is_reused_without_page_faults():
    _, default_faults = page_faults("default")
    applied, kept_faults = page_faults("keep")
    assert default_faults > FRESH_FAULTS, "glibc by default maps a large block afresh each time"
    assert applied == "True"
    # The heap may grow a few times more after the warm-up (where a mapping sits just past it, glibc continues it
    # elsewhere: after 2 warm-up rounds, 4 of 8 rounds faulted in one CI run), then the block's pages are reused:
    # without the setting, every round faults.
    assert kept_faults <= KEPT_FAULTS


@pytest.mark.parametrize("mode", ["forward", "generate"])
def test_the_model_applies_it_by_itself(mode):
    _, faults = page_faults(mode)
    assert faults <= KEPT_FAULTS, f"{faults} page faults after the model's first {mode}: the setting did not apply"


def test_the_environment_opts_out():
    _, faults = page_faults("forward", VASWANI_KEEP_FREED_MEMORY="0")
    assert faults > FRESH_FAULTS


def test_glibcs_own_settings_are_left_alone():
    # Only the trim threshold set by the user: the mmap threshold stays glibc's, so every 64 MiB block is mapped
    # afresh. Had the model applied its setting over the user's, the blocks would come from the heap.
    _, faults = page_faults("forward", MALLOC_TRIM_THRESHOLD_="1000000")
    assert faults > FRESH_FAULTS
