"""A cap on this process's memory for tests that give a reader an endless device: a reader that gathers it fails with
MemoryError instead of taking the machine's memory (as the readers did before issue 51)."""

import contextlib
import resource


@contextlib.contextmanager
def memory_cap(extra: int = 2 * 2**30):
    """At most `extra` more bytes of data (RLIMIT_DATA) for this process while the block runs."""
    with open("/proc/self/status") as status:
        used = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmData:"))
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    resource.setrlimit(resource.RLIMIT_DATA, (used + extra, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
