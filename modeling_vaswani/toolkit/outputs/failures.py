"""A failure of the file system while an output is written, told as an OSError naming the file as the user will find
it: `path/NAME`, never the hidden partial copy. A library that writes files does not always name the one it failed
on (CTranslate2's and matplotlib's file objects, tokenizers' and safetensors' Rust errors, torch's "unexpected pos" on
a full disk), so the writer says which file it hands the library (`writing`), and the failure names that one."""

import errno
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .names import partial_prefix

# How a library that writes files tells an OSError it hit without raising one: tokenizers' and safetensors' (Rust)
# "No space left on device (os error 28)".
_OS_ERROR_CODE = re.compile(r"\(os error (\d+)\)")


@contextmanager
def writing(path: str | Path) -> Iterator[Path]:
    """The block writes the file `path`, by a library call: a failure of the file system that names no file (or the
    hidden partial copy of `path`) is raised as an OSError naming `path`. A writer of several files into a staged
    folder says so around each, since a library may delete what it could not write (safetensors does), leaving
    nothing on disk to tell which file it was."""
    path = Path(path)
    try:
        yield path
    except BaseException as error:
        named = write_failure(error, path)
        if named is not None:
            raise named from error
        raise


@contextmanager
def writing_natively(folder: str | Path, name: str | None) -> Iterator[Path]:
    """The block saves several files into the staged `folder` by one library call (a `save_pretrained`), the file
    `name` among them by native code (safetensors' weights, tokenizers' tokenizer.json): its failure is no OSError
    and names no file, and safetensors deletes what it could not write, leaving nothing on disk to tell, so it names
    `folder/name`. An OSError naming no file comes from Python's own file objects (the configurations' JSON), which
    leave their partial file: the folder's writer names the last one on disk (`write_failure`). So does a failure
    after `name` was written whole (`_failed_after`: a Trainer's save writes the tokenizer and the optimizer after
    the weights)."""
    folder = Path(folder)
    try:
        yield folder
    except Exception as error:
        declared = name is not None and not isinstance(error, OSError) and not _failed_after(folder, name)
        named = write_failure(error, folder / name) if declared else None
        if named is not None:
            raise named from error
        raise


@contextmanager
def writing_into(path: str | Path, staged: str | Path) -> Iterator[Path]:
    """The block writes into the folder `staged` what becomes (or joins) `path`: a failure of the file system names
    the file as the user will find it, `path/NAME` (`write_failure`)."""
    try:
        yield Path(staged)
    except BaseException as error:
        named = write_failure(error, Path(path), Path(staged))
        if named is not None:
            raise named from error
        raise


def write_failure(error: BaseException, path: Path, staged: Path | None = None) -> OSError | None:
    """The OSError telling `error`, raised while `path` was written (through the folder `staged`, for a folder), with
    the file named as the user will find it: `path/NAME`, never the hidden partial copy; where the library named no
    file, the file it was writing: the last one written in `staged`, else `path`. None where `error` is no failure of
    the file system, which keeps its own words."""
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
    return OSError(code, reason, shown[0] or str(_last_written(path, staged)), None, shown[1])


def _as_written(name, path: Path, staged: Path | None):
    if not isinstance(name, (str, os.PathLike)):
        return name
    name = Path(os.path.abspath(name))
    if staged is not None and name.is_relative_to(os.path.abspath(staged)):
        return str(path / name.relative_to(os.path.abspath(staged)))
    if staged is None and name.name.startswith(partial_prefix(path)):
        return str(path)
    return str(name)


def _last_written(path: Path, staged: Path | None) -> Path:
    """The file of the folder `path` that was written last in `staged`, else `path`. The one write this serves: a
    file of a staged folder written through Python's own file objects and declared by no `writing`, inside a library
    call that writes several (transformers' config.json and generation_config.json, CTranslate2's config.json,
    vocabulary and model.bin; the call declares only its native file, `writing_natively`): its OSError names no
    file, and the partial file it leaves is the last one on disk. A native writer's failure (safetensors deletes its
    file) never comes here: its file is declared."""
    if staged is None or not staged.is_dir():
        return path
    files = [file for file in staged.rglob("*") if file.is_file()]
    if not files:
        return path
    return path / max(files, key=lambda file: file.stat().st_mtime_ns).relative_to(staged)


def _failed_after(folder: Path, name: str) -> bool:
    """Whether a file of `folder` was written after its file `name`: the failure was that later file's. The file
    that failed is either gone (safetensors deletes what it could not write) or the last written (tokenizers and
    torch.save leave their partial file)."""
    return (folder / name).exists() and _last_written(folder, folder) != folder / name


def _nearly_full(path: Path) -> bool:
    base = next((folder for folder in (path, *path.parents) if folder.exists()), None)
    return base is not None and shutil.disk_usage(base).free < 1 << 20
