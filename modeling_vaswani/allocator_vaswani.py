"""Keep the memory a process frees, so that training and decoding on CPU stop paying for page faults; on by default.

torch has no caching allocator on CPU: every tensor comes from malloc and goes back to it. glibc's malloc serves a
large request (above 128 KiB at first) with fresh pages from the kernel and unmaps them when freed, and returns the
free top of its heap to the kernel too; each new page then costs a page fault and a zeroing on first touch. A
training step of the base shapes allocates and frees hundreds of MB (activations, logits, gradients): on the
project's CPU that was 257,000 page faults and 1.1 s of kernel time a step, a third of the step; beam search at
batch 32 spent a tenth of its time the same way.

torch's CPU launcher (`python -m torch.backends.xeon.run_cpu`) cures this by preloading jemalloc or tcmalloc, which
must be installed; glibc's own settings do it wherever glibc is, and nothing in torch or transformers sets them. So
the model sets them itself, once, on its first forward pass on a CPU (training, generate(), the pipeline, the
Trainer alike). The price: the process keeps its peak memory, since what torch frees stays in malloc's heap for reuse
instead of going back to the system. Opt out with VASWANI_KEEP_FREED_MEMORY=0 in the environment; glibc's own
MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_, when set, are the user's choice and are left alone.

Payload: travels flat beside modeling_vaswani.py as remote code; it imports only the standard library.
"""

import ctypes
import os
import sys

OPT_OUT = "VASWANI_KEEP_FREED_MEMORY"  # "0" leaves glibc's malloc as it is
GLIBC_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")

# mallopt(3) parameters, from glibc's malloc.h.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
LARGEST = 2**31 - 1  # mallopt takes an int

applied_by_default: bool | None = None  # None until the model's first CPU forward pass decides


def keep_freed_memory() -> bool:
    """Tells glibc's malloc to serve every request from its heap and never give the heap back to the kernel.

    The same as starting the process with MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_ set to 2^31 - 1. Returns
    whether it applied: False where the C library is not glibc (macOS, Windows, musl), where nothing changes.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, LARGEST) == 1 and mallopt(M_TRIM_THRESHOLD, LARGEST) == 1


def keep_freed_memory_by_default(device_type: str) -> None:
    """`keep_freed_memory()` the first time the model runs on a CPU, unless the environment opts out or sets glibc's
    own thresholds. Later calls cost one check."""
    global applied_by_default
    if applied_by_default is not None or device_type != "cpu":
        return
    opted_out = os.environ.get(OPT_OUT, "1") == "0" or any(name in os.environ for name in GLIBC_SETTINGS)
    applied_by_default = not opted_out and keep_freed_memory()
