"""Where the toolkit writes: the one atomic writer, and the check that an output is the command's own.

Every file and folder a command writes (translations, averaged, converted and exported models, tokenizers, plots,
results.json) is written aside under a hidden name in the same folder and renamed into place when complete, so that a
killed run, a full disk or an error leaves the earlier output whole. What a killed run leaves beside an output is
removed (its partial output) or restored (an earlier output it had set aside) by the next run that writes there.
Written by hand: neither the standard library nor the libraries we build on have an atomic folder replacement.
"""

import errno
import logging
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from fnmatch import fnmatch
from pathlib import Path

logger = logging.getLogger(__name__)

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
# What a model folder holds as save_pretrained, the Trainer and our commands write it: a folder holding only these
# is an earlier model output, which a command that writes a model may replace.
MODEL_OUTPUT = (
    *TOKENIZER_OUTPUT,
    "config.json",
    "generation_config.json",
    "*.safetensors",
    "model.safetensors.index.json",
    "*_vaswani.py",
    "README.md",
    "results.json",
    "*.hyp.*",  # vaswani-train's translations of its test split, beside the model that wrote them
)


class OutputError(ValueError):
    """An output that may not or cannot be written: the message names the path and what was expected."""


def _partial_prefix(path: Path) -> str:
    return f".{path.name}.partial-"


def _previous(path: Path) -> Path:
    """Where an existing output waits while the new one takes its place: one fixed name, so the next run finds it."""
    return path.with_name(f".{path.name}.old")


def recover(path: Path) -> None:
    """Undoes what a killed run left beside `path`: its partial outputs are deleted (the run did not finish), and an
    earlier output it had set aside is restored if the new one never took its place, else deleted. One run at a time
    per output."""
    path = Path(path)
    if not path.parent.is_dir():
        return
    for leftover in path.parent.iterdir():
        if leftover.name.startswith(_partial_prefix(path)):
            _remove(leftover)
            logger.warning("removed %s, the partial output of an interrupted run", leftover)
    previous = _previous(path)
    if not previous.exists():
        return
    if path.exists():
        _remove(previous)
    else:
        previous.rename(path)
        logger.warning("restored %s from %s, where an interrupted run had set it aside", path, previous)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


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
def staged_folder(path: str | Path) -> Iterator[Path]:
    """A new empty folder beside `path` to write into; it becomes `path` when the block ends without error (an
    earlier `path` replaced whole), and is deleted otherwise."""
    path = Path(path)
    recover(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=_partial_prefix(path), dir=path.parent))
    os.chmod(staged, 0o777 & ~_umask())  # as mkdir makes it (mkdtemp makes folders only their owner may open)
    try:
        yield staged
        _move_into_place(staged, path)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise


@contextmanager
def staged_file(path: str | Path) -> Iterator[Path]:
    """A path beside `path` to write a file to (by any library that writes to a path); it replaces `path` when the
    block ends without error, flushed to disk first, and is deleted otherwise. Through a symbolic link, the file it
    points to is written (as `open(path, "w")` would), the link kept."""
    path = Path(path)
    if path.is_symlink():
        path = path.resolve()
    recover(path)
    descriptor, name = tempfile.mkstemp(prefix=_partial_prefix(path), dir=path.parent)
    os.close(descriptor)
    staged = Path(name)
    try:
        yield staged
        _finish_file(staged, path)
        os.replace(staged, path)
    except OSError as error:
        staged.unlink(missing_ok=True)
        if error.filename is None:  # a write through a file object names no file: name the output it was for
            raise OSError(error.errno, error.strerror, str(path)) from error
        raise
    except BaseException:
        staged.unlink(missing_ok=True)
        raise


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
# Before any work: is the output the command's own, writable, with room?
# ---------------------------------------------------------------------------------------------------------------------


def check_output_folder(path: str | Path, owned: Iterable[str], command: str, need_bytes: int = 0) -> Path:
    """`path` if `command` may write its output folder there: a new or empty folder, or one holding only entries whose
    names match `owned` (its own earlier output; a pattern ending in "/" matches a folder) and what a killed run of
    ours left; refused by name otherwise, and when the disk cannot be written or has less than `need_bytes` free."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputError(f"output folder {path} is a file; expected a new folder or an earlier output of {command}")
    if path.is_dir():
        owned = tuple(owned)
        entries = (entry.name + ("/" if entry.is_dir() else "") for entry in path.iterdir())
        foreign = sorted(
            name for name in entries if not _leftover(name) and not any(fnmatch(name, pattern) for pattern in owned)
        )
        if foreign:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise OutputError(
                f"output folder {path} holds {shown}, which {command} does not write; expected a new or empty "
                f"folder, or an earlier output of {command} (replaced whole)"
            )
    check_writable(path, need_bytes)
    return path


def _leftover(name: str) -> bool:
    """A hidden partial or set-aside output of ours (`staged_file`, `staged_folder`, the Trainer's checkpoints)."""
    name = name.rstrip("/")
    return name.startswith(".") and (".partial-" in name or name.endswith(".old") or name.startswith(".tmp-"))


def check_writable(path: str | Path, need_bytes: int = 0) -> None:
    """The folder that will hold `path` (or its nearest existing ancestor, where the command creates the rest) must
    be writable and have `need_bytes` free: checked before the work, not found out at its end."""
    path = Path(path)
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


def save_pretrained(output_dir: str | Path, *objects) -> Path:
    """`save_pretrained` of each of `objects` (a model, its tokenizer) into `output_dir`, replaced whole at once."""
    with staged_folder(output_dir) as staged:
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
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def move_files_into(staged: str | Path, folder: str | Path) -> None:
    """Each file of the folder `staged` replaces its namesake in `folder`, flushed to disk and renamed (atomic per
    file); `staged` is removed once empty."""
    staged, folder = Path(staged), Path(folder)
    for path in staged.iterdir():
        _finish_file(path, folder / path.name)
        os.replace(path, folder / path.name)
    staged.rmdir()
