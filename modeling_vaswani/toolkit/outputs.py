"""Where the toolkit writes: the one atomic writer, and the checks that an output is the command's own.

Every file and folder a command writes (translations, averaged, converted and exported models, tokenizers, plots,
results.json) is written aside under a hidden name in the same folder and renamed into place when complete, so that a
killed run, a full disk or an error leaves the earlier output whole. Written by hand: neither the standard library nor
the libraries we build on have an atomic folder replacement. Each rule has its one home here:

- A folder written whole is known by what it holds, never by its names: MARKER, written into it last, names the
  command that wrote it and its entries. A command replaces a folder only when it is new, empty, or marked as its own
  with nothing beside what the marker names (`check_owned`); an older version's output, which has no marker, only
  where content that version alone wrote tells it exactly (`Output.legacy`).
- An output path is resolved once (`resolve_output`): a symbolic link is followed, its target written, atomically,
  and the link kept; one that cannot be followed is one refusal. A target that is not a regular file (a device, a
  FIFO, a socket, anything under /dev or /proc such as /dev/stdout) is written in place (`writes_in_place`): renaming
  over /dev/null, as root may, would replace the device for every process.
- An output is never one of the command's inputs (`check_not_input`): compared by device and inode, whatever names
  it (a link, a hard link, /dev/stdin, /dev/fd/N), standard input included.
- One writer per output (`claim`): a lock file beside it, held with flock, which the kernel releases when its process
  ends (a killed run blocks nobody), and which names its holder to the writer it refuses.
- What the package creates beside an output (the lock, partial outputs, an earlier output set aside) is its own,
  proven: the lock is opened without following links and only where it is a regular file of ours, and every partial
  output or set-aside is recorded in the lock (by device and inode) before it can be left behind. The next writer, or
  a reader that finds the output missing (`restore_set_aside`), undoes what a killed run recorded (its partial outputs
  deleted, an earlier output it had set aside restored, saying so) and touches nothing else: a `.NAME.old` that no
  run of ours recorded is a user's, left alone, and refused by name where a replacement would need its name.
- What is written takes the permissions that `open` and `mkdir` give under the user's umask, whatever the library
  that wrote it chose.
"""

import atexit
import errno
import hashlib
import json
import logging
import os
import re
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

from ..configuration_vaswani import VaswaniConfig

try:
    import fcntl
except ImportError:  # Windows: outputs are written without locks
    fcntl = None

logger = logging.getLogger(__name__)

MARKER = ".vaswani-output.json"  # hidden: vaswani-push uploads no hidden file

# What save_pretrained of a tokenizer writes (vaswani-train-tokenizer's output folder).
TOKENIZER_OUTPUT = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "*.spm",
    "*.model",
    "chat_template.*",
)
# What a model folder holds as save_pretrained, the Trainer and our commands write it (no README.md: none writes one).
MODEL_OUTPUT = (
    *TOKENIZER_OUTPUT,
    "config.json",
    "generation_config.json",
    "*.safetensors",
    "model.safetensors.index.json",
    "*_vaswani.py",
    "results.json",
    "*.hyp.*",  # vaswani-train's translations of its test split, beside the model that wrote them
)


class OutputError(ValueError):
    """An output that may not or cannot be written: the message names the path and what was expected."""


# ---------------------------------------------------------------------------------------------------------------------
# Whose folder is it: the marker
# ---------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Output:
    """A folder a command writes whole: `command` names it in its marker, its lock and messages; `flag` is how a user
    chooses another folder; `legacy`, where given, recognises the output of a version before markers by content;
    `names`, the patterns of the names it writes, so that a refusal names first what it never writes."""

    command: str
    flag: str
    legacy: Callable[[Path], bool] | None = None
    names: tuple[str, ...] = ()


def older_output(sign: Callable[[Path], bool], names: Iterable[str]) -> Callable[[Path], bool]:
    """An `Output.legacy`: `sign` (content only this package writes) holds, and every entry has a name that the older
    versions wrote there (as their check required)."""
    patterns = tuple(names)
    return lambda folder: (
        sign(folder) and all(any(fnmatch(name, pattern) for pattern in patterns) for name in _entries(folder))
    )


def _vaswani_config(folder: Path) -> bool:
    values = _read_json(folder / "config.json")
    return isinstance(values, dict) and values.get("model_type") == VaswaniConfig.model_type


def _read_json(path: Path):
    """The JSON value in `path` where it is a regular file, opened without following a link; None otherwise: a FIFO
    under a name the package reads would block the read forever, and a link would read someone else's file."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(descriptor, "rb") as handle:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return None
        try:
            return json.loads(handle.read().decode("utf-8"))
        except (OSError, ValueError):
            return None


_OLDER_MODEL = older_output(_vaswani_config, MODEL_OUTPUT)
AVERAGED = Output("vaswani-average", "--output", _OLDER_MODEL, MODEL_OUTPUT)
CONVERTED = Output("vaswani-convert", "output folder", _OLDER_MODEL, MODEL_OUTPUT)
# Anyone's tokenizer.json or PNGs look like ours: an older version's are refused, saying how to proceed.
TRAINED_TOKENIZER = Output("vaswani-train-tokenizer", "--output_dir", names=TOKENIZER_OUTPUT)
ATTENTION_MAPS = Output("vaswani-plot-attention", "--output_dir", names=("*.png",))


def _entries(folder: Path) -> list[str]:
    """The names in `folder` (a folder's with "/"), leaving out the marker and what a killed run of ours left."""
    names = (entry.name + ("/" if entry.is_dir() else "") for entry in folder.iterdir())
    return sorted(name for name in names if name != MARKER and not _leftover(name))


def _leftover(name: str) -> bool:
    """A hidden partial, set-aside or lock file of ours (`staged_file`, `staged_folder`, `claim`, the Trainer)."""
    name = name.rstrip("/")
    return name.startswith(".") and (
        ".partial-" in name or name.endswith((".old", ".lock")) or name.startswith(".tmp-")
    )


def _read_marker(folder: Path) -> dict | None:
    marker = _read_json(folder / MARKER)
    if not isinstance(marker, dict) or not isinstance(marker.get("command"), str):
        return None
    files = marker.get("files")
    return marker if isinstance(files, list) and all(isinstance(name, str) for name in files) else None


def marked_files(folder: str | Path) -> list[str] | None:
    """The entries the folder's marker names as its command's output (vaswani-push uploads them), or None where it has
    no readable marker."""
    marker = _read_marker(Path(folder))
    return None if marker is None else marker["files"]


def _write_marker(folder: Path, command: str, files: Iterable[str]) -> None:
    marker = {"command": command, "files": sorted(files)}
    descriptor, name = tempfile.mkstemp(prefix=_partial_prefix(folder / MARKER), dir=folder)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(marker, indent=2) + "\n")
    os.chmod(name, 0o666 & ~_umask())
    os.replace(name, folder / MARKER)


_written: set[Path] = set()  # the folders this process wrote whole


def _record(folder: Path, names: Iterable[str]) -> None:
    """Files this process adds to a folder it wrote whole (vaswani-train's tokenizer, results and translations beside
    its averaged model) join the folder's marker, so that the folder stays its command's own. Another process's
    files (a user's --output into it) do not: they are the user's."""
    marker = _read_marker(folder) if Path(os.path.abspath(folder)) in _written else None
    if marker is not None:
        _write_marker(folder, marker["command"], {*marker["files"], *names})


def check_owned(path: str | Path, output: Output) -> None:
    """OutputError unless `output.command` may replace the folder `path`: new, empty (but for what a killed run of ours
    left), marked as its own with nothing beside what its marker names, or an older version's output (`legacy`)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputError(
            f"output folder {path} is a file; expected a new folder or an earlier output of {output.command}"
        )
    entries = _entries(path) if path.is_dir() else []
    marker = _read_marker(path) if entries else None
    if not entries or (marker is None and output.legacy is not None and output.legacy(path)):
        return
    own = marker is not None and marker["command"] == output.command
    foreign = sorted(set(entries) - set(marker["files"])) if own else entries
    if not foreign:
        return
    # What the command never writes first: a user's notes.txt is never hidden among "11 more" model files.
    foreign.sort(key=lambda name: any(fnmatch(name, pattern) for pattern in output.names))
    shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
    if marker is not None and not own:
        why = f" (it is an output of {marker['command']})"
    elif marker is None and os.path.lexists(path / MARKER):
        why = f" (its {MARKER} is damaged: no command and list of files can be read from it)"
    elif marker is None and output.legacy is None:
        why = f" (it has no {MARKER}: if an older version of {output.command} wrote it, delete it first)"
    else:
        why = ""
    raise OutputError(
        f"output folder {path} holds {shown}, which {output.command} did not write{why}; expected a new or empty "
        f"folder, or an earlier output of {output.command} (replaced whole): choose another {output.flag}"
    )


# ---------------------------------------------------------------------------------------------------------------------
# Where a write lands: links followed, devices written in place, never an input
# ---------------------------------------------------------------------------------------------------------------------


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
        if _same(output, source):
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
    if reads_stdin and _same(output, 0):
        raise OutputError(
            f"{flag} {path} is standard input, which the command reads; expected another file, since writing it "
            "would destroy that input"
        )


def _inside(folder: os.stat_result, source: Path) -> bool:
    """Whether `source` is in `folder`, by the real path of a source that exists (a Hub id names no file there)."""
    return source.exists() and any(_same(folder, parent) for parent in Path(os.path.realpath(source)).parents)


def _same(output: os.stat_result, other: Path | int) -> bool:
    """Whether `other` (a path, or a descriptor of this process) is the file or folder `output`."""
    try:
        info = os.fstat(other) if isinstance(other, int) else os.stat(other)
    except OSError:
        return False
    return (info.st_dev, info.st_ino) == (output.st_dev, output.st_ino)


# ---------------------------------------------------------------------------------------------------------------------
# What the package creates beside an output: hidden names that fit, a lock that is its own
# ---------------------------------------------------------------------------------------------------------------------

_NAME_MAX = 255  # bytes in one file name (Linux, macOS)


def _beside(path: Path, suffix: str, room: int = 0) -> Path:
    """The hidden `.NAME{suffix}` beside `path`, with `room` bytes left for what mkstemp adds. Where the output's own
    name is too long for that, its start and a digest of the whole name, so that two outputs never share one."""
    name = f".{path.name}{suffix}"
    if len(os.fsencode(name)) + room <= _NAME_MAX:
        return path.with_name(name)
    digest = hashlib.sha256(os.fsencode(path.name)).hexdigest()[:16]
    start, keep = path.name, _NAME_MAX - room - len(os.fsencode(f".~{digest}{suffix}"))
    while len(os.fsencode(start)) > keep:  # cut by characters, never inside one
        start = start[:-1]
    return path.with_name(f".{start}~{digest}{suffix}")


def _partial_prefix(path: Path) -> str:
    return _beside(path, ".partial-", room=8).name  # mkstemp and mkdtemp add 8 characters


def _previous(path: Path) -> Path:
    """Where an existing output waits while the new one takes its place: one fixed name, so the next run finds it."""
    return _beside(path, ".old")


def _lock_file(key: Path) -> Path:
    return _beside(key, ".lock")


# The lock file's first line names its holder; each further line records something its holder created beside the
# output, before it could be left there: {"kind": "partial" or "old", "aside": NAME, "dev": N, "ino": N}; "gone" says
# that an earlier record's NAME no longer holds what it recorded (moved away by its writer), so that a folder made
# there later (a user's backup, given the freed inode number) is never taken for it.
_HOLDER = re.compile(r"[^\n]+ \(pid \d+\)")
_KINDS = ("partial", "old", "gone")


def _journal(content: bytes) -> list[dict] | None:
    """The records in a lock file's `content`; None where it is no lock file of ours (a user's file by that name)."""
    lines = content.decode("utf-8", "replace").splitlines()
    if not lines:
        return []
    if not _HOLDER.fullmatch(lines[0]):
        return None
    records = []
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
        records.append(record)
    return records


def _foreign_lock(lock: Path, what: str) -> OutputError:
    return OutputError(
        f"{lock} is {what}, not a lock file of this package; expected a regular file that only vaswani commands "
        f"write: move or delete {lock}"
    )


def _open_lock(lock: Path) -> int | None:
    """The lock file `lock`, opened without following a link (a link there would have its target truncated) and only
    where it is a regular file of its own (a hard link to another file is refused too); None where the folder cannot
    hold one (its write names why)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        descriptor = os.open(lock, flags, 0o666)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise _foreign_lock(lock, "a symbolic link") from None
        if error.errno in (errno.EISDIR, errno.ENXIO):  # a folder; a socket
            raise _foreign_lock(lock, "a folder" if error.errno == errno.EISDIR else "a socket") from None
        return None
    info = os.fstat(descriptor)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(descriptor)
        raise _foreign_lock(lock, "a FIFO or a device" if not stat.S_ISREG(info.st_mode) else "a hard link")
    return descriptor


# ---------------------------------------------------------------------------------------------------------------------
# One writer per output: the lock
# ---------------------------------------------------------------------------------------------------------------------

_held: dict[Path, tuple[int, int]] = {}  # output -> (descriptor of its lock file, the process that took it)


def _key(path: str | Path) -> Path:
    return Path(os.path.abspath(resolve_output(path)))


def _program() -> str:
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return name if name and not name.startswith("-") else "python"


def claim(path: str | Path, command: str | None = None) -> bool:
    """Takes the lock of the output `path` for this process until its write ends (`release`) or the process does,
    first undoing what a killed writer recorded in it (`_undo`); OutputError, naming the holder, where another process
    holds it, or naming the lock file where it is not ours. Returns whether it was taken now (not where this process
    held it already, nor where it cannot be: no folder yet, a file system without locks)."""
    key = _key(path)
    # The ranks of one distributed job write their outputs together: rank 0 holds the lock for all.
    if fcntl is None or key in _held or os.environ.get("RANK", "0") != "0" or not key.parent.is_dir():
        return False
    lock = _lock_file(key)
    while True:
        descriptor = _open_lock(lock)
        if descriptor is None:  # a folder that cannot hold the lock cannot hold the output: its write names why
            return False
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            first = os.pread(descriptor, 200, 0).decode("utf-8", "replace").partition("\n")[0]
            os.close(descriptor)
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                return False  # no locks on this file system
            holder = first if _HOLDER.fullmatch(first) else "process"
            raise OutputError(
                f"another {holder} is writing {path}; expected one writer at a time: wait for it to end, or write "
                "elsewhere"
            ) from None
        if _same(os.fstat(descriptor), lock) and not os.path.islink(lock):
            break
        os.close(descriptor)  # its last holder removed it while we opened it: lock the file there now
    try:
        _undo(key, _journal_of(lock, descriptor))
    except BaseException:
        os.close(descriptor)  # what it records stays there, for the next try
        raise
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, f"{command or _program()} (pid {os.getpid()})\n".encode(), 0)
    _held[key] = (descriptor, os.getpid())
    return True


def _journal_of(lock: Path, descriptor: int) -> list[dict]:
    records = _journal(os.pread(descriptor, os.fstat(descriptor).st_size, 0))
    if records is None:
        raise _foreign_lock(lock, "a file of other content")
    return records


def release(path: str | Path) -> None:
    """Gives back the lock `claim` took for `path` (nothing where this process holds none)."""
    descriptor, owner = _held.pop(_key(path), (None, None))
    if descriptor is None:
        return
    if owner == os.getpid():  # a forked child's copy is not its parent's lock to remove
        _lock_file(_key(path)).unlink(missing_ok=True)  # before closing: a process that opened it retries
    os.close(descriptor)


atexit.register(lambda: [release(path) for path in list(_held)])


@contextmanager
def _writing(path: Path, command: str | None) -> Iterator[None]:
    """The lock held while `path` is written; the write is a command's last act on its output, so it also ends the
    lock its check took (`check_output_folder`, `check_output_file`)."""
    claim(path, command)
    try:
        yield
    finally:
        release(path)


# ---------------------------------------------------------------------------------------------------------------------
# What a killed run left: recorded before it could be left, undone by the next holder of the lock
# ---------------------------------------------------------------------------------------------------------------------


def _note(path: Path, kind: str, aside: Path, info: os.stat_result) -> None:
    """Records in the lock of the output `path` that this process made `aside` (the file or folder `info`), before a
    kill could leave it there. Nothing where this process holds no lock: no one could undo it for certain."""
    descriptor = _held.get(_key(path), (None,))[0]
    if descriptor is not None:
        record = {"kind": kind, "aside": aside.name, "dev": info.st_dev, "ino": info.st_ino}
        os.pwrite(descriptor, (json.dumps(record) + "\n").encode(), os.fstat(descriptor).st_size)


def _made_by(record: dict, aside: Path) -> bool:
    """Whether `aside` is still the very file or folder `record` names (not a link to it, nor one made since)."""
    try:
        info = os.lstat(aside)
    except OSError:
        return False
    return not stat.S_ISLNK(info.st_mode) and (info.st_dev, info.st_ino) == (record["dev"], record["ino"])


def _undo(path: Path, records: list[dict]) -> None:
    """Undoes what a killed writer of `path` recorded and left: an earlier output it had set aside is restored if the
    new one never took its place, else deleted; its partial outputs are deleted (the run did not finish). Anything
    else under those names is someone else's, and stays."""
    live = []
    for record in records:
        if record["kind"] == "gone":
            live = [earlier for earlier in live if earlier["aside"] != record["aside"]]
        else:
            live.append(record)
    for record in live:
        aside = path.with_name(record["aside"])
        if not _made_by(record, aside):
            continue
        if record["kind"] == "old" and not os.path.lexists(path):
            try:
                aside.rename(path)
            except OSError as error:
                raise _cannot_restore(path, aside, error.strerror) from error
            logger.warning("restored %s from %s, where a run killed while replacing it had set it aside", path, aside)
        else:
            _remove(aside)
            if record["kind"] == "partial":
                logger.warning("removed %s, the partial output of an interrupted run", aside)


def _cannot_restore(path: Path, aside: Path, reason: str) -> OutputError:
    return OutputError(
        f"{path} is missing: a run killed while replacing it left the earlier one as {aside}, which cannot be "
        f"restored here ({reason}); rename {aside} to {path} to restore it"
    )


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
    if os.path.lexists(path) or not os.path.lexists(previous := _previous(path)):  # "." has no name to put aside
        return
    recover(path)
    if not os.path.lexists(path) and _set_aside_here(path, previous):  # no lock to take: a read-only disk
        reason = os.strerror(errno.EROFS if _read_only(path.parent) else errno.EACCES)
        raise _cannot_restore(path, previous, reason)


def _set_aside_here(path: Path, previous: Path) -> bool:
    """Whether the lock of `path` records `previous` as an output a run of ours set aside (read, not taken)."""
    try:
        descriptor = os.open(_lock_file(_key(path)), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    with os.fdopen(descriptor, "rb") as handle:
        records = _journal(handle.read()) if stat.S_ISREG(os.fstat(descriptor).st_mode) else None
    return any(record["kind"] == "old" and _made_by(record, previous) for record in records or [])


def _check_room_to_set_aside(path: Path, output: Output) -> None:
    """An existing folder `path` is set aside as `.NAME.old` while its replacement moves in: a `.NAME.old` there
    that no run of ours recorded (a user's backup, a link) is refused by name, never deleted."""
    previous = _previous(path)
    if os.path.lexists(path) and os.path.lexists(previous):
        raise OutputError(
            f"{previous} is in the way: {output.command} sets {path} aside under that name while replacing it, and "
            f"no run of it recorded making that one (it may be your copy); move or delete {previous}, or choose "
            f"another {output.flag}"
        )


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


# ---------------------------------------------------------------------------------------------------------------------
# The writers
# ---------------------------------------------------------------------------------------------------------------------


# How a library that writes files tells an OSError it hit without raising one: tokenizers' and safetensors' (Rust)
# "No space left on device (os error 28)".
_OS_ERROR_CODE = re.compile(r"\(os error (\d+)\)")


def write_failure(error: BaseException, path: Path, staged: Path | None = None) -> OSError | None:
    """The OSError telling `error`, raised while `path` was written (through the folder `staged`, for a folder), with
    the file named as the user will find it: `path/NAME`, never the hidden partial copy; where the library named no
    file (CTranslate2's and matplotlib's file objects, tokenizers' and safetensors' Rust errors, torch's "unexpected
    pos" on a full disk), the file it was writing: the last one written in `staged`, else the file of `staged` the
    failing call was given, else `path`. None where `error` is no failure of the file system, which keeps its own
    words."""
    if isinstance(error, OSError):
        if error.errno is None:
            return None
        code, reason, names = error.errno, error.strerror, [error.filename, error.filename2]
    else:
        found = _OS_ERROR_CODE.search(str(error))
        if found is not None:
            code = int(found.group(1))
        elif isinstance(error, RuntimeError) and "unexpected pos" in str(error) and _nearly_full(path):
            code = errno.ENOSPC
        else:
            return None
        reason, names = os.strerror(code), [None, None]
    shown = [_as_written(name, path, staged) for name in names]
    return OSError(code, reason, shown[0] or str(_being_written(error, path, staged)), None, shown[1])


def _as_written(name, path: Path, staged: Path | None):
    if not isinstance(name, (str, os.PathLike)):
        return name
    name = Path(os.path.abspath(name))
    if staged is not None and name.is_relative_to(os.path.abspath(staged)):
        return str(path / name.relative_to(os.path.abspath(staged)))
    if staged is None and name.name.startswith(_partial_prefix(path)):
        return str(path)
    return str(name)


def _being_written(error: BaseException, path: Path, staged: Path | None) -> Path:
    if staged is None or not staged.is_dir():
        return path
    files = [file for file in staged.rglob("*") if file.is_file()]
    if files:  # a library writes its files one after the other: the last one is where the disk filled
        return path / max(files, key=lambda file: file.stat().st_mtime_ns).relative_to(staged)
    # Nothing left on disk (safetensors removes what it could not write): the path a failing call was given.
    root, frames, traceback = Path(os.path.abspath(staged)), [], error.__traceback__
    while traceback is not None:
        frames.append(traceback.tb_frame)
        traceback = traceback.tb_next
    for frame in reversed(frames):
        for value in frame.f_locals.values():
            if isinstance(value, (str, os.PathLike)) and (name := Path(os.path.abspath(value))) != root:
                if name.is_relative_to(root):
                    return path / name.relative_to(root)
    return path


def _nearly_full(path: Path) -> bool:
    base = next((folder for folder in (path, *path.parents) if folder.exists()), None)
    return base is not None and shutil.disk_usage(base).free < 1 << 20


def _move_into_place(staged: Path, path: Path, output: Output) -> None:
    """Renames `staged` to `path`; an existing `path` is set aside first (renames in one folder are atomic), recorded
    in its lock before, and deleted only once the new one is in place."""
    if not path.exists():
        staged.rename(path)
        return
    if path.is_file():  # a file is replaced in one step
        os.replace(staged, path)
        return
    _check_room_to_set_aside(path, output)  # again: a rename onto an empty folder or a link's name would replace it
    previous = _previous(path)
    _note(path, "old", previous, os.lstat(path))
    path.rename(previous)
    try:
        staged.rename(path)
    except BaseException:
        previous.rename(path)
        raise
    _delete_set_aside(path, previous)


def _delete_set_aside(path: Path, previous: Path) -> None:
    """Deletes the earlier output `previous`, first moved to a random name of its own (recorded as a partial output):
    a run killed while deleting it leaves no half-deleted folder under the fixed name `.NAME.old`, where a user who
    removed it could make a folder of theirs that the file system gives the same inode number."""
    doomed = Path(tempfile.mkdtemp(prefix=_partial_prefix(path), dir=path.parent))  # the name, held
    info = os.lstat(previous)
    _note(path, "partial", doomed, info)  # the folder that will be there
    previous.rename(doomed)  # over the empty folder that held the name
    _note(path, "gone", previous, info)  # .NAME.old is free: what is made there from now on is not ours
    shutil.rmtree(doomed)


@contextmanager
def staged_folder(path: str | Path, output: Output) -> Iterator[Path]:
    """A new empty folder beside `path` to write into; when the block ends without error it is marked as `output`'s
    and becomes `path`, an earlier `path` replaced whole (so a set of files, a model's or the attention maps, is
    replaced as one); it is deleted otherwise. `path` must be new, empty or `output`'s own (`check_owned`, checked
    again here under the lock, for callers that did not check before their work)."""
    path = resolve_output(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _writing(path, output.command):
        check_owned(path, output)
        _check_room_to_set_aside(path, output)
        staged = Path(tempfile.mkdtemp(prefix=_partial_prefix(path), dir=path.parent))
        try:
            _note(path, "partial", staged, os.lstat(staged))
            yield staged
            _settle_modes(staged)
            _write_marker(staged, output.command, _entries(staged))
            _move_into_place(staged, path, output)
        except BaseException as error:
            named = write_failure(error, path, staged)  # before the partial folder, which tells the file, is gone
            shutil.rmtree(staged, ignore_errors=True)
            if named is not None:
                raise named from error
            raise
    _written.add(Path(os.path.abspath(path)))


@contextmanager
def staged_file(path: str | Path, command: str | None = None) -> Iterator[Path]:
    """A path beside `path` to write a file to (by any library that writes to a path); it replaces `path` when the
    block ends without error, flushed to disk first, and is deleted otherwise. Through a symbolic link, the file it
    points to is written (as `open(path, "w")` would), the link kept; a device, FIFO, socket or descriptor
    (`writes_in_place`) is itself the path written."""
    path = Path(path)
    try:
        if writes_in_place(path):
            yield path
        else:
            with _aside(resolve_output(path), command) as staged:
                yield staged
    except BaseException as error:  # a write through a file object names no file: name the output it was for
        named = write_failure(error, path)
        if named is not None:
            raise named from error
        raise


@contextmanager
def _aside(path: Path, command: str | None) -> Iterator[Path]:
    with _writing(path, command):
        descriptor, name = tempfile.mkstemp(prefix=_partial_prefix(path), dir=path.parent)
        staged = Path(name)
        try:
            with os.fdopen(descriptor) as handle:  # closed before the caller's library opens the path
                _note(path, "partial", staged, os.fstat(handle.fileno()))
            yield staged
            _finish_file(staged, path)
            os.replace(staged, path)
        except BaseException:
            staged.unlink(missing_ok=True)
            raise
    _record(path.parent, [path.name])


def _finish_file(staged: Path, path: Path) -> None:
    """On disk before the rename (else a crash could leave an empty file in place), and with the permissions a plain
    `open(path, "w")` gives (mkstemp makes files only their owner may read)."""
    with open(staged, "rb+") as handle:
        os.fsync(handle.fileno())
    mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else 0o666 & ~_umask()
    os.chmod(staged, mode)


def _settle_modes(folder: Path) -> None:
    """Every file and folder under `folder`, and `folder` itself, with the permissions `open` and `mkdir` give a new
    one under the user's umask, whatever the library that wrote it chose (safetensors makes its files only their
    owner may read, mkdtemp its folders, and a copy keeps its source's mode)."""
    umask = _umask()
    for root, folders, files in os.walk(folder):
        for name, mode in [*((name, 0o777) for name in folders), *((name, 0o666) for name in files)]:
            entry = os.path.join(root, name)
            if not os.path.islink(entry):  # a link has no mode of its own; chmod would change its target's
                os.chmod(entry, mode & ~umask)
    os.chmod(folder, 0o777 & ~umask)


def _umask_by_setting() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


# os.umask reads the umask only by setting it, for the whole process: a file another thread creates in between gets
# the temporary mask. So it is set only here, once, while this module is imported (before any of its writes), and
# read from /proc/self/status (Linux 4.7 on) wherever that can be read, which also sees a later os.umask.
_UMASK_AT_IMPORT = _umask_by_setting()


def _umask() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return _UMASK_AT_IMPORT


@contextmanager
def atomic_text(path: str | Path) -> Iterator:
    """A UTF-8 text file object whose content replaces `path` when the block ends without error."""
    with staged_file(path) as staged, open(staged, "w", encoding="utf-8") as handle:
        yield handle


# ---------------------------------------------------------------------------------------------------------------------
# Before any work: is the output the command's own, writable, with room? The lock is taken here already, so that a
# second writer is refused before its work, not after it.
# ---------------------------------------------------------------------------------------------------------------------


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
        _check_room_to_set_aside(target, output)
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
        foreign = [name for name in _entries(path) if not any(fnmatch(name, pattern) for pattern in owned)]
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
        reason = os.strerror(errno.EROFS) if _read_only(base) else os.strerror(errno.EACCES)
        raise OutputError(f"{path} cannot be written: {base}: {reason}; expected a writable folder")
    free = shutil.disk_usage(base).free
    if need_bytes > free:
        raise OutputError(
            f"{path} needs about {_size(need_bytes)} but {base} has {_size(free)} free; free space or write elsewhere"
        )


def _read_only(folder: Path) -> bool:
    return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)


def _size(count: int) -> str:
    return f"{count / 1e6:.1f} MB"


def folder_size(folder: str | Path) -> int:
    """Bytes in the files of `folder` (not following links): what a copy of it needs."""
    return sum(path.stat().st_size for path in Path(folder).rglob("*") if path.is_file() and not path.is_symlink())


def write_text(path: str | Path, text: str) -> Path:
    """`path` holding `text` (UTF-8), written atomically."""
    with atomic_text(path) as handle:
        handle.write(text)
    return Path(path)


def save_figure(figure, path: str | Path, dpi: int) -> Path:
    """A matplotlib figure saved as PNG at `path`, atomically."""
    with staged_file(path) as staged:
        figure.savefig(staged, dpi=dpi, format="png")
    return Path(path)


def save_pretrained(output_dir: str | Path, output: Output, *objects) -> Path:
    """`save_pretrained` of each of `objects` (a model, its tokenizer) into `output_dir`, replaced whole at once."""
    with staged_folder(output_dir, output) as staged:
        for item in objects:
            item.save_pretrained(staged)
    return Path(output_dir)


def save_into(folder: str | Path, item) -> None:
    """`item.save_pretrained` into an existing `folder` beside other files (a tokenizer beside its model), each file
    it writes replacing its namesake atomically. Safe when several processes (ranks) save the same item at once: each
    writes its own staging folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=_partial_prefix(folder), dir=folder.parent))
    try:
        item.save_pretrained(staged)
        move_files_into(staged, folder)
    except BaseException as error:
        named = write_failure(error, folder, staged)
        if named is not None:
            raise named from error
        raise
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def move_files_into(staged: str | Path, folder: str | Path) -> None:
    """Each file of the folder `staged` replaces its namesake in `folder`, flushed to disk and renamed (atomic per
    file); `staged` is removed once empty."""
    staged, folder = Path(staged), Path(folder)
    names = []
    for path in staged.iterdir():
        _finish_file(path, folder / path.name)
        os.replace(path, folder / path.name)
        names.append(path.name)
    staged.rmdir()
    _record(folder, names)
