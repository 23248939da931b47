"""Where a write lands: links followed, devices written in place, never one of the command's inputs."""

import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from .errors import OutputError


def resolve_output(path: str | Path) -> Path:
    """Where writing `path` lands: `path`, or through a symbolic link the path it points to (as `open` follows it).
    The one resolution of an output path, which every check and writer uses: a link that cannot be followed (a loop)
    is one OutputError naming it, whichever check meets it first."""
    path = Path(path)
    try:
        return path.resolve() if path.is_symlink() else path
    except (OSError, RuntimeError) as error:  # a loop: RuntimeError before Python 3.13, ELOOP since
        looped = isinstance(error, RuntimeError) or error.errno == errno.ELOOP
        reason = "its links form a loop" if looped else error.strerror
        raise OutputError(
            f"{path} is a symbolic link that cannot be followed ({reason}); expected a file or folder to write, or a "
            "link to one"
        ) from error


def writes_in_place(path: str | Path) -> bool:
    """Whether `path` is written in place (as `open(path, "w")` writes it) instead of aside and renamed: a device, a
    FIFO or a socket, or a descriptor of this process (/dev/stdout, /dev/fd/N, /proc/self/fd/N), whatever it leads to.
    A rename would replace such a target, for every process where it is a device, or cut its reader off."""
    absolute = os.path.abspath(path)
    if absolute in ("/dev/stdout", "/dev/stderr") or absolute.startswith(("/dev/fd/", "/proc/")):
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def check_not_input(
    path: str | Path, inputs: Iterable[str | Path | None], reads_stdin: bool = False, flag: str = "--output"
) -> None:
    """OutputError where writing the output `path` would destroy what the command reads: it is, by device and inode
    (whatever names it: a link, a hard link, /dev/stdin, /dev/fd/N), one of `inputs` (files or folders; None skipped)
    or, where `reads_stdin`, standard input; or it is a folder, replaced whole, that holds one of `inputs`. Only a
    regular file or a folder can be destroyed so: a device, FIFO or terminal loses nothing that was read from it."""
    try:
        output = os.stat(resolve_output(path))
    except OSError:
        return  # nothing there yet: no input it could be
    if not (stat.S_ISREG(output.st_mode) or stat.S_ISDIR(output.st_mode)):
        return
    kind = "folder" if stat.S_ISDIR(output.st_mode) else "file"
    for source in (Path(source) for source in inputs if source is not None):
        if same(output, source):
            named = "" if source == Path(path) else f" ({source})"
            raise OutputError(
                f"{flag} {path} is also an input{named}; expected another {kind}, since writing it would destroy "
                "that input"
            )
        if kind == "folder" and _inside(output, source):
            raise OutputError(
                f"{flag} {path} holds an input ({source}); expected another folder, since replacing it whole would "
                "delete that input"
            )
    if reads_stdin and same(output, 0):
        raise OutputError(
            f"{flag} {path} is standard input, which the command reads; expected another file, since writing it "
            "would destroy that input"
        )


def _inside(folder: os.stat_result, source: Path) -> bool:
    """Whether `source` is in `folder`, by the real path of a source that exists (a Hub id names no file there)."""
    return source.exists() and any(same(folder, parent) for parent in Path(os.path.realpath(source)).parents)


def same(output: os.stat_result, other: Path | int) -> bool:
    """Whether `other` (a path, or a descriptor of this process) is the file or folder `output`."""
    try:
        info = os.fstat(other) if isinstance(other, int) else os.stat(other)
    except OSError:
        return False
    return (info.st_dev, info.st_ino) == (output.st_dev, output.st_ino)
