"""One writer per output: a lock file beside it, held with flock, which the kernel releases when its process ends (a
killed run blocks nobody), and which names its holder to the writer it refuses. The lock is opened without following
links and only where it is a regular file of ours; taking it undoes what a killed holder recorded in it (`journal`)."""

import atexit
import errno
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from . import journal
from .errors import OutputError
from .names import lock_file
from .paths import resolve_output, same

try:
    import fcntl
except ImportError:  # Windows: outputs are written without locks
    fcntl = None


class HeldLocks:
    """The locks this process holds, by output: each lock file's descriptor and the process that took it (a forked
    child inherits the table, not the locks). What is still held when the process exits is given back then."""

    def __init__(self) -> None:
        self._locks: dict[Path, tuple[int, int]] = {}
        atexit.register(self.give_back_all)

    def __contains__(self, key: Path) -> bool:
        return key in self._locks

    def hold(self, key: Path, descriptor: int) -> None:
        self._locks[key] = (descriptor, os.getpid())

    def descriptor(self, key: Path) -> int | None:
        return self._locks.get(key, (None,))[0]

    def give_back(self, key: Path) -> None:
        descriptor, owner = self._locks.pop(key, (None, None))
        if descriptor is None:
            return
        if owner == os.getpid():  # a forked child's copy is not its parent's lock to remove
            lock_file(key).unlink(missing_ok=True)  # before closing: a process that opened it retries
        os.close(descriptor)

    def give_back_all(self) -> None:
        for key in list(self._locks):
            self.give_back(key)

    def keys(self) -> set[Path]:
        return set(self._locks)


HELD = HeldLocks()


def key(path: str | Path) -> Path:
    """The output `path` as its lock knows it: absolute, through a link."""
    return Path(os.path.abspath(resolve_output(path)))


def _program() -> str:
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return name if name and not name.startswith("-") else "python"


def claim(path: str | Path, command: str | None = None) -> bool:
    """Takes the lock of the output `path` for this process until its write ends (`release`) or the process does,
    first undoing what a killed writer recorded in it (`journal.undo`); OutputError, naming the holder, where another
    process holds it, or naming the lock file where it is not ours. Returns whether it was taken now (not where this
    process held it already, nor where it cannot be: no folder yet, a file system without locks)."""
    output = key(path)
    # The ranks of one distributed job write their outputs together: rank 0 holds the lock for all.
    if fcntl is None or output in HELD or os.environ.get("RANK", "0") != "0" or not output.parent.is_dir():
        return False
    lock = lock_file(output)
    while True:
        descriptor = journal.open_lock(lock)
        if descriptor is None:  # a folder that cannot hold the lock cannot hold the output: its write names why
            return False
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            first = os.pread(descriptor, 200, 0).decode("utf-8", "replace").partition("\n")[0]
            os.close(descriptor)
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                return False  # no locks on this file system
            holder = first if journal.HOLDER.fullmatch(first) else "process"
            raise OutputError(
                f"another {holder} is writing {path}; expected one writer at a time: wait for it to end, or write "
                "elsewhere"
            ) from None
        if same(os.fstat(descriptor), lock) and not os.path.islink(lock):
            break
        os.close(descriptor)  # its last holder removed it while we opened it: lock the file there now
    try:
        journal.undo(output, journal.records_of(lock, descriptor))
    except BaseException:
        os.close(descriptor)  # what it records stays there, for the next try
        raise
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, f"{command or _program()} (pid {os.getpid()})\n".encode(), 0)
    HELD.hold(output, descriptor)
    return True


@contextmanager
def released_on_failure() -> Iterator[None]:
    """Where the block (or the function it decorates) raises, the output locks it took are given back: a library
    call refused after its output's check (`check_output_folder`), in a process that goes on, blocks no later writer
    and leaves no lock file, as a command's exit does. A lock held before the block is kept."""
    before = HELD.keys()
    try:
        yield
    except BaseException:
        for taken in HELD.keys() - before:
            HELD.give_back(taken)
        raise


def release(path: str | Path) -> None:
    """Gives back the lock `claim` took for `path` (nothing where this process holds none)."""
    HELD.give_back(key(path))


@contextmanager
def locked(path: Path, command: str | None) -> Iterator[None]:
    """The lock held while `path` is written; the write is a command's last act on its output, so it also ends the
    lock its check took (`check_output_folder`, `check_output_file`)."""
    claim(path, command)
    try:
        yield
    finally:
        release(path)


def note(path: Path, kind: str, aside: Path, info: os.stat_result) -> None:
    """Records in the lock of the output `path` that this process made `aside` (the file or folder `info`), before a
    kill could leave it there. Nothing where this process holds no lock: no one could undo it for certain."""
    descriptor = HELD.descriptor(key(path))
    if descriptor is not None:
        journal.append(descriptor, kind, aside, info)
