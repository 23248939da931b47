"""Before any work: is the output the command's own, writable, with room? The lock is taken here already, so that a
second writer is refused before its work, not after it."""

import errno
import os
import shutil
import stat
from collections.abc import Iterable
from fnmatch import fnmatch
from pathlib import Path

from .errors import OutputError
from .locks import claim, release
from .markers import Output, check_owned, entries
from .names import previous
from .paths import check_not_input, resolve_output, writes_in_place


def check_output_folder(
    path: str | Path, output: Output, need_bytes: int = 0, inputs: Iterable[str | Path | None] = ()
) -> Path:
    """`path` if `output.command` may write its folder there (`check_owned`, after what a killed run set aside is
    restored); refused by name otherwise: where it is or holds one of the command's `inputs` (`check_not_input`), and
    when the disk cannot be written or has less than `need_bytes` free. Its lock is held from here until the folder
    is written (`staged_folder`)."""
    target = resolve_output(path)
    check_not_input(path, inputs, flag=output.flag)
    check_writable(target, need_bytes)
    taken = claim(target, output.command)
    try:
        check_owned(target, output)
        check_room_to_set_aside(target, output)
    except BaseException:
        if taken:
            release(target)
        raise
    return Path(path)


def check_output_file(path: str | Path, need_bytes: int = 0, command: str | None = None) -> Path:
    """`check_writable`, and the file's lock held from here until it is written (`staged_file`)."""
    check_writable(path, need_bytes)
    if not writes_in_place(path):
        claim(path, command)
    return Path(path)


def check_working_folder(path: str | Path, owned: Iterable[str], command: str) -> Path:
    """`path` if `command` may work in it: vaswani-train's output_dir, which is never replaced whole and where the
    Trainer writes what it writes, so names are what there is to go by; anything else refused by name. Its lock is
    held until the process ends (two runs into one output_dir would mix their checkpoints)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputError(f"output folder {path} is a file; expected a new folder or an earlier output of {command}")
    if path.is_dir():
        owned = tuple(owned)
        foreign = [name for name in entries(path) if not any(fnmatch(name, pattern) for pattern in owned)]
        if foreign:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise OutputError(
                f"output folder {path} holds {shown}, which {command} does not write; expected a new or empty "
                f"folder, or an earlier output of {command}"
            )
    check_writable(path)
    claim(path, command)
    return path


def check_writable(path: str | Path, need_bytes: int = 0) -> None:
    """The folder that will hold `path` (or its nearest existing ancestor, where the command creates the rest) must
    be writable and have `need_bytes` free: checked before the work, not found out at its end. A target written in
    place (`writes_in_place`) must be writable itself."""
    path = Path(path)
    if writes_in_place(path) and path.exists():
        if stat.S_ISSOCK(os.stat(path).st_mode):  # open() cannot write one
            raise OutputError(f"{path} is a socket; expected a file, a device or a FIFO to write")
        if not os.access(path, os.W_OK):
            raise OutputError(f"{path} cannot be written: {os.strerror(errno.EACCES)}")
        return
    path = resolve_output(path)
    base = path.parent
    while not base.exists() and base != base.parent:
        base = base.parent
    if not base.is_dir():
        raise OutputError(f"{path} cannot be written: {base} is not a folder")
    if not os.access(base, os.W_OK | os.X_OK):
        reason = os.strerror(errno.EROFS) if read_only(base) else os.strerror(errno.EACCES)
        raise OutputError(f"{path} cannot be written: {base}: {reason}; expected a writable folder")
    free = shutil.disk_usage(base).free
    if need_bytes > free:
        raise OutputError(
            f"{path} needs about {_size(need_bytes)} but {base} has {_size(free)} free; free space or write elsewhere"
        )


def check_room_to_set_aside(path: Path, output: Output) -> None:
    """An existing folder `path` is set aside as `.NAME.old` while its replacement moves in: a `.NAME.old` there
    that no run of ours recorded (a user's backup, a link) is refused by name, never deleted."""
    aside = previous(path)
    if os.path.lexists(path) and os.path.lexists(aside):
        raise OutputError(
            f"{aside} is in the way: {output.command} sets {path} aside under that name while replacing it, and "
            f"no run of it recorded making that one (it may be your copy); move or delete {aside}, or choose "
            f"another {output.flag}"
        )


def read_only(folder: Path) -> bool:
    return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)


def _size(count: int) -> str:
    return f"{count / 1e6:.1f} MB"
