"""Keep the memory a process frees, so that training and batched decoding on CPU stop paying for page faults.

torch has no caching allocator on CPU: every tensor comes from malloc and goes back to it. glibc's malloc serves a
large request (above 128 KiB at first) with fresh pages from the kernel and unmaps them when freed, and returns the
free top of its heap to the kernel too; each new page then costs a page fault and a zeroing on first touch. A
training step of the base shapes allocates and frees hundreds of MB (activations, logits, gradients): on the
project's CPU that was 257,000 page faults and 1.1 s of kernel time a step, a third of the step; beam search at
batch 32 spent a tenth of its time the same way.

torch's CPU launcher (`python -m torch.backends.xeon.run_cpu`) cures this by preloading jemalloc or tcmalloc, which
must be installed; glibc's own settings do it wherever glibc is. None of our dependencies sets them, hence this
module. Call it once at the start of a program (our scripts do); the cost is that the process keeps its peak memory.
"""

import ctypes
import sys

# mallopt(3) parameters, from glibc's malloc.h.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
LARGEST = 2**31 - 1  # mallopt takes an int


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
