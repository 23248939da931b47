"""The lock file beside an output is also the journal of what its holder creates there: its first line names the
holder; each further line records, before it could be left behind, something the holder created beside the output:
{"kind": "partial" or "old", "aside": NAME, "dev": N, "ino": N}; "gone" says that an earlier record's NAME no longer
holds what it recorded (moved away by its writer), so that a folder made there later (a user's backup, given the
freed inode number) is never taken for it. The next holder undoes what a killed one recorded (`undo`), and touches
nothing else."""

import errno
import json
import logging
import os
import re
import shutil
import stat
from pathlib import Path

from .errors import OutputError

logger = logging.getLogger(__name__)

HOLDER = re.compile(r"[^\n]+ \(pid \d+\)")
_KINDS = ("partial", "old", "gone")


def records(content: bytes) -> list[dict] | None:
    """The records in a lock file's `content`; None where it is no lock file of ours (a user's file by that name)."""
    lines = content.decode("utf-8", "replace").splitlines()
    if not lines:
        return []
    if not HOLDER.fullmatch(lines[0]):
        return None
    found = []
    for line in lines[1:]:
        try:
            record = json.loads(line)
        except ValueError:
            return None
        if not (
            isinstance(record, dict)
            and record.get("kind") in _KINDS
            and isinstance(record.get("aside"), str)
            and record["aside"].startswith(".")
            and "/" not in record["aside"]
            and all(isinstance(record.get(field), int) for field in ("dev", "ino"))
        ):
            return None
        found.append(record)
    return found


def records_of(lock: Path, descriptor: int) -> list[dict]:
    """The records of the open lock file `lock`; OutputError where it is no lock file of ours."""
    found = records(os.pread(descriptor, os.fstat(descriptor).st_size, 0))
    if found is None:
        raise foreign_lock(lock, "a file of other content")
    return found


def foreign_lock(lock: Path, what: str) -> OutputError:
    return OutputError(
        f"{lock} is {what}, not a lock file of this package; expected a regular file that only vaswani commands "
        f"write: move or delete {lock}"
    )


def open_lock(lock: Path) -> int | None:
    """The lock file `lock`, opened without following a link (a link there would have its target truncated) and only
    where it is a regular file of its own (a hard link to another file is refused too); None where the folder cannot
    hold one (its write names why)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        descriptor = os.open(lock, flags, 0o666)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise foreign_lock(lock, "a symbolic link") from None
        if error.errno in (errno.EISDIR, errno.ENXIO):  # a folder; a socket
            raise foreign_lock(lock, "a folder" if error.errno == errno.EISDIR else "a socket") from None
        return None
    info = os.fstat(descriptor)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(descriptor)
        raise foreign_lock(lock, "a FIFO or a device" if not stat.S_ISREG(info.st_mode) else "a hard link")
    return descriptor


def append(descriptor: int, kind: str, aside: Path, info: os.stat_result) -> None:
    """Records in the open lock file `descriptor` that its holder made `aside` (the file or folder `info`)."""
    record = {"kind": kind, "aside": aside.name, "dev": info.st_dev, "ino": info.st_ino}
    os.pwrite(descriptor, (json.dumps(record) + "\n").encode(), os.fstat(descriptor).st_size)


def made_by(record: dict, aside: Path) -> bool:
    """Whether `aside` is still the very file or folder `record` names (not a link to it, nor one made since)."""
    try:
        info = os.lstat(aside)
    except OSError:
        return False
    return not stat.S_ISLNK(info.st_mode) and (info.st_dev, info.st_ino) == (record["dev"], record["ino"])


def undo(path: Path, journal: list[dict]) -> None:
    """Undoes what a killed writer of `path` recorded and left: an earlier output it had set aside is restored if the
    new one never took its place, else deleted; its partial outputs are deleted (the run did not finish). Anything
    else under those names is someone else's, and stays."""
    live = []
    for record in journal:
        if record["kind"] == "gone":
            live = [earlier for earlier in live if earlier["aside"] != record["aside"]]
        else:
            live.append(record)
    for record in live:
        aside = path.with_name(record["aside"])
        if not made_by(record, aside):
            continue
        if record["kind"] == "old" and not os.path.lexists(path):
            try:
                aside.rename(path)
            except OSError as error:
                raise cannot_restore(path, aside, error.strerror) from error
            logger.warning("restored %s from %s, where a run killed while replacing it had set it aside", path, aside)
        else:
            _remove(aside)
            if record["kind"] == "partial":
                logger.warning("removed %s, the partial output of an interrupted run", aside)


def cannot_restore(path: Path, aside: Path, reason: str) -> OutputError:
    return OutputError(
        f"{path} is missing: a run killed while replacing it left the earlier one as {aside}, which cannot be "
        f"restored here ({reason}); rename {aside} to {path} to restore it"
    )


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
