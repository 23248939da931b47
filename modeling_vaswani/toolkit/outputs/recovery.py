"""What a killed run left, undone: by the next writer (`recover`, which every writer's lock does), or by a reader that
finds the output missing because a run was killed between setting it aside and moving its new one in
(`restore_set_aside`). A `.NAME.old` that no run of ours recorded is a user's, left alone."""

import errno
import os
import stat
from pathlib import Path

from . import journal
from .checks import read_only
from .locks import claim, key, release
from .names import lock_file, previous
from .paths import resolve_output


def recover(path: str | Path, command: str | None = None) -> None:
    """Undoes what a killed writer of `path` left, under its lock (OutputError where another process writes it now)."""
    path = resolve_output(path)
    if claim(path, command):
        release(path)


def restore_set_aside(path: str | Path) -> None:
    """For a reader: an output that is missing because a run was killed between setting it aside (`.NAME.old`) and
    moving its new one in is restored, saying so; where it cannot be, OutputError says what happened and how to
    restore it, or which process is replacing it right now. Touches nothing otherwise (readers call it on every
    open), nor a `.NAME.old` that no run of ours recorded setting aside."""
    path = Path(path)
    if os.path.lexists(path) or not os.path.lexists(aside := previous(path)):  # "." has no name to put aside
        return
    recover(path)
    if not os.path.lexists(path) and _set_aside_here(path, aside):  # no lock to take: a read-only disk
        reason = os.strerror(errno.EROFS if read_only(path.parent) else errno.EACCES)
        raise journal.cannot_restore(path, aside, reason)


def _set_aside_here(path: Path, aside: Path) -> bool:
    """Whether the lock of `path` records `aside` as an output a run of ours set aside (read, not taken)."""
    try:
        descriptor = os.open(lock_file(key(path)), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    with os.fdopen(descriptor, "rb") as handle:
        found = journal.records(handle.read()) if stat.S_ISREG(os.fstat(descriptor).st_mode) else None
    return any(record["kind"] == "old" and journal.made_by(record, aside) for record in found or [])
