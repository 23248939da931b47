"""Where the toolkit writes: the one atomic writer, and the checks that an output is the command's own.

Every file and folder a command writes (translations, averaged, converted and exported models, tokenizers, plots,
results.json) is written aside under a hidden name in the same folder and renamed into place when complete, so that a
killed run, a full disk or an error leaves the earlier output whole. Written by hand: neither the standard library nor
the libraries we build on have an atomic folder replacement. Each rule has its one home here:

- A folder written whole is known by what it holds, never by its names: MARKER, written into it last, names the
  command that wrote it and its entries. A command replaces a folder only when it is new, empty, or marked as its own
  with nothing beside what the marker names (`check_owned`); an older version's output, which has no marker, only
  where content that version alone wrote tells it exactly (`Output.legacy`).
- A target that is not a regular file (a device, a FIFO, a socket, anything under /dev or /proc such as /dev/stdout)
  is written in place (`writes_in_place`): renaming over /dev/null, as root may, would replace the device for every
  process. A symbolic link is followed: its target is written, atomically, and the link kept.
- One writer per output (`claim`): a lock file beside it, held with flock, which the kernel releases when its process
  ends (a killed run blocks nobody), and which names its holder to the writer it refuses.
- What a killed run left beside an output is undone by the next writer (`recover`), or by a reader that finds the
  output missing (`restore_set_aside`): its partial output deleted, an earlier output it had set aside restored,
  saying so.
"""

import atexit
import errno
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
    chooses another folder; `legacy`, where given, recognises the output of a version before markers by content."""

    command: str
    flag: str
    legacy: Callable[[Path], bool] | None = None


def older_output(sign: Callable[[Path], bool], names: Iterable[str]) -> Callable[[Path], bool]:
    """An `Output.legacy`: `sign` (content only this package writes) holds, and every entry has a name that the older
    versions wrote there (as their check required)."""
    patterns = tuple(names)
    return lambda folder: (
        sign(folder) and all(any(fnmatch(name, pattern) for pattern in patterns) for name in _entries(folder))
    )


def _vaswani_config(folder: Path) -> bool:
    try:
        values = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(values, dict) and values.get("model_type") == VaswaniConfig.model_type


_OLDER_MODEL = older_output(_vaswani_config, MODEL_OUTPUT)
AVERAGED = Output("vaswani-average", "--output", _OLDER_MODEL)
CONVERTED = Output("vaswani-convert", "output folder", _OLDER_MODEL)
# Anyone's tokenizer.json or PNGs look like ours: an older version's are refused, saying how to proceed.
TRAINED_TOKENIZER = Output("vaswani-train-tokenizer", "--output_dir")
ATTENTION_MAPS = Output("vaswani-plot-attention", "--output_dir")


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
    try:
        marker = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
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
    shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
    if marker is not None and not own:
        why = f" (it is an output of {marker['command']})"
    elif marker is None and output.legacy is None:
        why = f" (it has no {MARKER}: if an older version of {output.command} wrote it, delete it first)"
    else:
        why = ""
    raise OutputError(
        f"output folder {path} holds {shown}, which {output.command} did not write{why}; expected a new or empty "
        f"folder, or an earlier output of {output.command} (replaced whole): choose another {output.flag}"
    )


# ---------------------------------------------------------------------------------------------------------------------
# Where a write lands: links followed, devices written in place
# ---------------------------------------------------------------------------------------------------------------------


def _target(path: Path) -> Path:
    """Where writing `path` lands: through a symbolic link, the path it points to (written as `open` would)."""
    if not path.is_symlink():
        return path
    try:
        return path.resolve()
    except (OSError, RuntimeError) as error:  # a loop of links (RuntimeError before Python 3.13)
        raise OutputError(f"{path} is a symbolic link that cannot be followed ({error}); expected a path") from error


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


# ---------------------------------------------------------------------------------------------------------------------
# One writer per output: the lock
# ---------------------------------------------------------------------------------------------------------------------

_held: dict[Path, tuple[int, int]] = {}  # output -> (descriptor of its lock file, the process that took it)


def _key(path: str | Path) -> Path:
    return Path(os.path.abspath(_target(Path(path))))


def _lock_file(key: Path) -> Path:
    return key.with_name(f".{key.name}.lock")


def _program() -> str:
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return name if name and not name.startswith("-") else "python"


def claim(path: str | Path, command: str | None = None) -> bool:
    """Takes the lock of the output `path` for this process until its write ends (`release`) or the process does;
    OutputError, naming the holder, where another process holds it. Returns whether it was taken now (not where this
    process held it already, nor where it cannot be: no folder yet, a file system without locks)."""
    key = _key(path)
    # The ranks of one distributed job write their outputs together: rank 0 holds the lock for all.
    if fcntl is None or key in _held or os.environ.get("RANK", "0") != "0" or not key.parent.is_dir():
        return False
    lock = _lock_file(key)
    while True:
        try:
            descriptor = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError:  # a folder that cannot hold the lock cannot hold the output: its write names why
            return False
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            holder = os.pread(descriptor, 200, 0).decode("utf-8", "replace").strip() or "process"
            os.close(descriptor)
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                return False  # no locks on this file system
            raise OutputError(
                f"another {holder} is writing {path}; expected one writer at a time: wait for it to end, or write "
                "elsewhere"
            ) from None
        try:
            current = os.stat(lock)
        except FileNotFoundError:
            current = None
        opened = os.fstat(descriptor)
        if current is not None and (current.st_dev, current.st_ino) == (opened.st_dev, opened.st_ino):
            break
        os.close(descriptor)  # its last holder removed it while we opened it: lock the file there now
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, f"{command or _program()} (pid {os.getpid()})\n".encode(), 0)
    _held[key] = (descriptor, os.getpid())
    return True


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
# What a killed run left
# ---------------------------------------------------------------------------------------------------------------------


def _partial_prefix(path: Path) -> str:
    return f".{path.name}.partial-"


def _previous(path: Path) -> Path:
    """Where an existing output waits while the new one takes its place: one fixed name, so the next run finds it."""
    return path.with_name(f".{path.name}.old")


def _recover(path: Path) -> None:
    """Undoes what a killed run left beside `path`, its lock held: an earlier output it had set aside is restored if
    the new one never took its place, else deleted; its partial outputs are deleted (the run did not finish)."""
    if not path.parent.is_dir():
        return
    previous = _previous(path)
    if previous.exists() and path.exists():
        _remove(previous)
    elif previous.exists():
        try:
            previous.rename(path)
        except OSError as error:
            raise OutputError(
                f"{path} is missing: a run killed while replacing it left the earlier one as {previous}, which "
                f"cannot be restored here ({error.strerror}); rename {previous} to {path} to restore it"
            ) from error
        logger.warning("restored %s from %s, where a run killed while replacing it had set it aside", path, previous)
    for leftover in path.parent.iterdir():
        if leftover.name.startswith(_partial_prefix(path)):
            _remove(leftover)
            logger.warning("removed %s, the partial output of an interrupted run", leftover)


def recover(path: str | Path, command: str | None = None) -> None:
    """`_recover` under the lock of `path` (OutputError where another process writes it now)."""
    path = _target(Path(path))
    taken = claim(path, command)
    try:
        _recover(path)
    finally:
        if taken:
            release(path)


def restore_set_aside(path: str | Path) -> None:
    """For a reader: an output that is missing because a run was killed between setting it aside (`.NAME.old`) and
    moving its new one in is restored, saying so; where it cannot be, OutputError says what happened and how to
    restore it, or which process is replacing it right now. Touches nothing otherwise (readers call it on every
    open)."""
    path = Path(path)
    if not path.exists() and _previous(path).exists():
        recover(path)


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


def _move_into_place(staged: Path, path: Path) -> None:
    """Renames `staged` to `path`; an existing `path` is set aside first (renames in one folder are atomic) and
    deleted only once the new one is in place."""
    if not path.exists():
        staged.rename(path)
        return
    if path.is_file():  # a file is replaced in one step
        os.replace(staged, path)
        return
    previous = _previous(path)
    path.rename(previous)
    try:
        staged.rename(path)
    except BaseException:
        previous.rename(path)
        raise
    shutil.rmtree(previous)


@contextmanager
def staged_folder(path: str | Path, output: Output) -> Iterator[Path]:
    """A new empty folder beside `path` to write into; when the block ends without error it is marked as `output`'s
    and becomes `path`, an earlier `path` replaced whole (so a set of files, a model's or the attention maps, is
    replaced as one); it is deleted otherwise. `path` must be new, empty or `output`'s own (`check_owned`, checked
    again here under the lock, for callers that did not check before their work)."""
    path = _target(Path(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    with _writing(path, output.command):
        _recover(path)
        check_owned(path, output)
        staged = Path(tempfile.mkdtemp(prefix=_partial_prefix(path), dir=path.parent))
        os.chmod(staged, 0o777 & ~_umask())  # as mkdir makes it (mkdtemp makes folders only their owner may open)
        try:
            yield staged
            _write_marker(staged, output.command, _entries(staged))
            _move_into_place(staged, path)
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
            with _aside(_target(path), command) as staged:
                yield staged
    except BaseException as error:  # a write through a file object names no file: name the output it was for
        named = write_failure(error, path)
        if named is not None:
            raise named from error
        raise


@contextmanager
def _aside(path: Path, command: str | None) -> Iterator[Path]:
    with _writing(path, command):
        _recover(path)
        descriptor, name = tempfile.mkstemp(prefix=_partial_prefix(path), dir=path.parent)
        os.close(descriptor)
        staged = Path(name)
        try:
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


def _umask() -> int:
    umask = os.umask(0)  # the only way to read it is to set it
    os.umask(umask)
    return umask


@contextmanager
def atomic_text(path: str | Path) -> Iterator:
    """A UTF-8 text file object whose content replaces `path` when the block ends without error."""
    with staged_file(path) as staged, open(staged, "w", encoding="utf-8") as handle:
        yield handle


# ---------------------------------------------------------------------------------------------------------------------
# Before any work: is the output the command's own, writable, with room? The lock is taken here already, so that a
# second writer is refused before its work, not after it.
# ---------------------------------------------------------------------------------------------------------------------


def check_output_folder(path: str | Path, output: Output, need_bytes: int = 0) -> Path:
    """`path` if `output.command` may write its folder there (`check_owned`, after what a killed run set aside is
    restored); refused by name otherwise, and when the disk cannot be written or has less than `need_bytes` free. Its
    lock is held from here until the folder is written (`staged_folder`)."""
    target = _target(Path(path))
    check_writable(target, need_bytes)
    taken = claim(target, output.command)
    try:
        _recover(target)
        check_owned(target, output)
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
    path = _target(path)
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
