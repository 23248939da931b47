"""Process settings for CPU training and decoding, applied only where a program asks for them.

The model sets nothing in the process that loads it. A user's own program, the toolkit's commands and its Trainer
call `apply_process_settings()` (or `keep_freed_memory()` directly) at their start; a program that calls nothing keeps
glibc's defaults.

Why keep freed memory: torch has no caching allocator on CPU, every tensor comes from malloc and goes back to it.
glibc's malloc serves a large request (above 128 KiB at first) with fresh pages from the kernel and unmaps them when
freed, and returns the free top of its heap to the kernel too; each new page then costs a page fault and a zeroing on
first touch. A training step of the base shapes allocates and frees hundreds of MB (activations, logits, gradients):
on the project's CPU that was 257,000 page faults and 1.1 s of kernel time a step, a third of the step; beam search at
batch 32 spent a tenth of its time the same way. torch's CPU launcher (`python -m torch.backends.xeon.run_cpu`) cures
this by preloading jemalloc or tcmalloc, which must be installed; glibc's own settings do it wherever glibc is.
The price: the process keeps its peak memory, since what torch frees stays in malloc's heap for reuse instead of going
back to the system.
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


def keep_freed_memory() -> bool:
    """Tells glibc's malloc to serve every request from its heap and never give the heap back to the kernel.

    The same as starting the process with MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_ set to 2^31 - 1, for the
    whole process and for good. Returns whether it applied: False where the C library is not glibc (macOS, Windows,
    musl), where nothing changes. Unconditional: `apply_process_settings()` is the call that honours the environment.
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


def apply_process_settings(environ=None) -> bool:
    """The settings the toolkit's commands and Trainer start with: `keep_freed_memory()`, unless the environment opts
    out (VASWANI_KEEP_FREED_MEMORY=0) or sets glibc's own MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_, which are
    the user's choice and left alone. Returns whether the setting applied; calling it again does no harm."""
    environ = os.environ if environ is None else environ
    if environ.get(OPT_OUT, "1") == "0" or any(name in environ for name in GLIBC_SETTINGS):
        return False
    return keep_freed_memory()


def quiet_deepspeed_on_cpu(environ=None) -> None:
    """Names the CPU as DeepSpeed's accelerator where torch sees no GPU, unless the environment names one: DeepSpeed
    (the deepspeed extra), imported by accelerate whenever a model is saved, otherwise warns "Setting accelerator to
    CPU. If you have GPU or other accelerator, we were unable to detect it" in every command, which no user can act
    on. It chooses the CPU then either way."""
    import torch

    environ = os.environ if environ is None else environ
    if "DS_ACCELERATOR" not in environ and not torch.cuda.is_available():
        environ["DS_ACCELERATOR"] = "cpu"


__all__ = ["apply_process_settings", "keep_freed_memory", "quiet_deepspeed_on_cpu"]
