"""The one atomic writer: every file and folder is written aside under a hidden name in the same folder and renamed
into place when complete, so that a killed run, a full disk or an error leaves the earlier output whole. Written by
hand: neither the standard library nor the libraries we build on have an atomic folder replacement. Every partial
output or set-aside is recorded in the output's lock (`locks.note`) before it can be left behind."""

import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .checks import check_room_to_set_aside
from .failures import write_failure, writing, writing_into, writing_natively
from .locks import locked, note
from .markers import Output, check_owned, entries, read_marker, write_marker
from .modes import settle_modes, umask
from .names import partial_prefix, previous
from .paths import resolve_output, writes_in_place


class FoldersWrittenWhole:
    """The folders this process wrote whole (`staged_folder`). Files it adds to one later (vaswani-train's tokenizer,
    results and translations beside its averaged model) join the folder's marker, so that the folder stays its
    command's own; another process's files (a user's --output into it) do not: they are the user's."""

    def __init__(self) -> None:
        self._folders: set[Path] = set()

    def add(self, folder: Path) -> None:
        self._folders.add(Path(os.path.abspath(folder)))

    def record(self, folder: Path, names: Iterable[str]) -> None:
        marker = read_marker(folder) if Path(os.path.abspath(folder)) in self._folders else None
        if marker is not None:
            write_marker(folder, marker["command"], {*marker["files"], *names})


WRITTEN_WHOLE = FoldersWrittenWhole()


def _move_into_place(staged: Path, path: Path, output: Output) -> None:
    """Renames `staged` to `path`; an existing `path` is set aside first (renames in one folder are atomic), recorded
    in its lock before, and deleted only once the new one is in place."""
    if not path.exists():
        staged.rename(path)
        return
    if path.is_file():  # a file is replaced in one step
        os.replace(staged, path)
        return
    check_room_to_set_aside(path, output)  # again: a rename onto an empty folder or a link's name would replace it
    aside = previous(path)
    note(path, "old", aside, os.lstat(path))
    path.rename(aside)
    try:
        staged.rename(path)
    except BaseException:
        aside.rename(path)
        raise
    _delete_set_aside(path, aside)


def _delete_set_aside(path: Path, aside: Path) -> None:
    """Deletes the earlier output `aside`, first moved to a random name of its own (recorded as a partial output):
    a run killed while deleting it leaves no half-deleted folder under the fixed name `.NAME.old`, where a user who
    removed it could make a folder of theirs that the file system gives the same inode number."""
    doomed = Path(tempfile.mkdtemp(prefix=partial_prefix(path), dir=path.parent))  # the name, held
    info = os.lstat(aside)
    note(path, "partial", doomed, info)  # the folder that will be there
    aside.rename(doomed)  # over the empty folder that held the name
    note(path, "gone", aside, info)  # .NAME.old is free: what is made there from now on is not ours
    shutil.rmtree(doomed)


@contextmanager
def staged_folder(path: str | Path, output: Output) -> Iterator[Path]:
    """A new empty folder beside `path` to write into; when the block ends without error it is marked as `output`'s
    and becomes `path`, an earlier `path` replaced whole (so a set of files, a model's or the attention maps, is
    replaced as one); it is deleted otherwise. `path` must be new, empty or `output`'s own (`check_owned`, checked
    again here under the lock, for callers that did not check before their work)."""
    path = resolve_output(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(path, output.command):
        check_owned(path, output)
        check_room_to_set_aside(path, output)
        staged = Path(tempfile.mkdtemp(prefix=partial_prefix(path), dir=path.parent))
        try:
            note(path, "partial", staged, os.lstat(staged))
            yield staged
            settle_modes(staged)
            write_marker(staged, output.command, entries(staged))
            _move_into_place(staged, path, output)
        except BaseException as error:
            named = write_failure(error, path, staged)  # before the partial folder, which tells the file, is gone
            shutil.rmtree(staged, ignore_errors=True)
            if named is not None:
                raise named from error
            raise
    WRITTEN_WHOLE.add(path)


@contextmanager
def staged_file(path: str | Path, command: str | None = None) -> Iterator[Path]:
    """A path beside `path` to write a file to (by any library that writes to a path); it replaces `path` when the
    block ends without error, flushed to disk first, and is deleted otherwise. Through a symbolic link, the file it
    points to is written (as `open(path, "w")` would), the link kept; a device, FIFO, socket or descriptor
    (`writes_in_place`) is itself the path written. A write through a file object names no file: a failure names
    the output it was for (`writing`)."""
    with writing(path) as path:
        if writes_in_place(path):
            yield path
        else:
            with _aside(resolve_output(path), command) as staged:
                yield staged


@contextmanager
def _aside(path: Path, command: str | None) -> Iterator[Path]:
    with locked(path, command):
        descriptor, name = tempfile.mkstemp(prefix=partial_prefix(path), dir=path.parent)
        staged = Path(name)
        try:
            with os.fdopen(descriptor) as handle:  # closed before the caller's library opens the path
                note(path, "partial", staged, os.fstat(handle.fileno()))
            yield staged
            _finish_file(staged, path)
            os.replace(staged, path)
        except BaseException:
            staged.unlink(missing_ok=True)
            raise
    WRITTEN_WHOLE.record(path.parent, [path.name])


def _finish_file(staged: Path, path: Path) -> None:
    """On disk before the rename (else a crash could leave an empty file in place), and with the permissions a plain
    `open(path, "w")` gives (mkstemp makes files only their owner may read)."""
    with open(staged, "rb+") as handle:
        os.fsync(handle.fileno())
    mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else 0o666 & ~umask()
    os.chmod(staged, mode)


@contextmanager
def atomic_text(path: str | Path) -> Iterator:
    """A UTF-8 text file object whose content replaces `path` when the block ends without error."""
    with staged_file(path) as staged, open(staged, "w", encoding="utf-8") as handle:
        yield handle


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


def save_object(staged: str | Path, item) -> None:
    """`item.save_pretrained(staged)` into the staged folder `staged`, the file it writes by native code declared."""
    with writing_natively(staged, _written_natively(item)):
        item.save_pretrained(staged)


def _written_natively(item) -> str | None:
    """The file `item.save_pretrained` writes by native code: a model's weights (safetensors, one file: our models
    are far below transformers' shard size), a fast tokenizer's tokenizer.json (tokenizers)."""
    from transformers import PreTrainedModel  # loaded already: `item` is a transformers object
    from transformers.utils import SAFE_WEIGHTS_NAME

    if isinstance(item, PreTrainedModel):
        return SAFE_WEIGHTS_NAME
    return getattr(item, "vocab_files_names", {}).get("tokenizer_file")


def save_pretrained(output_dir: str | Path, output: Output, *objects) -> Path:
    """`save_pretrained` of each of `objects` (a model, its tokenizer) into `output_dir`, replaced whole at once."""
    with staged_folder(output_dir, output) as staged:
        for item in objects:
            save_object(staged, item)
    return Path(output_dir)


def save_into(folder: str | Path, item) -> None:
    """`item.save_pretrained` into an existing `folder` beside other files (a tokenizer beside its model), each file
    it writes replacing its namesake atomically. Safe when several processes (ranks) save the same item at once: each
    writes its own staging folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=partial_prefix(folder), dir=folder.parent))
    try:
        with writing_into(folder, staged):
            save_object(staged, item)
            move_files_into(staged, folder)
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
    WRITTEN_WHOLE.record(folder, names)
