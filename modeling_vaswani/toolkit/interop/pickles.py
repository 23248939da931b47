"""Files written by torch.save (fairseq's model.pt, a MarianMT folder's pytorch_model.bin), read only as weights.

Every such file is loaded with `torch.load(weights_only=True)`, which builds tensors and plain containers and refuses
every other global a pickle names, so that nothing in the file is ever run. What it cannot read is refused with an
error naming the file and what was expected: a pickle that needs other globals (code, or classes outside the
allow-list, named where torch can name them), a file torch.save did not write (a plain pickle), or one that is not
whole. torch.save's two formats are read: the zip format (torch >= 1.6) and the legacy one
(`_use_new_zipfile_serialization=False`).
"""

import pickle
import pickletools
import re
import zipfile
from collections.abc import Iterable
from pathlib import Path

import torch

ZIP, LEGACY = "zip", "legacy"
ZIP_START = b"PK\x03\x04"  # a zip file's first local header
REFUSED_GLOBAL = re.compile(r"\bGLOBAL ([\w.]+)")  # as torch's WeightsUnpickler names the global it refuses


def saved_format(path: Path) -> str | None:
    """ZIP or LEGACY for the two formats torch.save writes, None for any other file (a plain pickle, text). A legacy
    file starts with a pickle of torch's magic number alone; it is read with pickletools, which runs nothing."""
    with open(path, "rb") as stream:
        if stream.read(4) == ZIP_START or zipfile.is_zipfile(stream):  # a truncated zip has its start, not its end
            return ZIP
        stream.seek(0)
        try:
            values = [arg for opcode, arg, _ in pickletools.genops(stream) if opcode.name in ("LONG1", "LONG4")]
        except (ValueError, EOFError, pickle.UnpicklingError, UnicodeDecodeError):
            return None
    return LEGACY if values == [torch.serialization.MAGIC_NUMBER] else None


def refused_globals(path: Path, saved: str, error: Exception, allowed: Iterable[type]) -> list[str]:
    """The globals outside the allow-list that the pickle in `path` names: all of them for the zip format (read from
    its data.pkl without running it), else the one torch's `error` names (the first); [] if none is known."""
    allowed_names = {f"{kind.__module__}.{kind.__qualname__}" for kind in allowed}
    names = []
    if saved == ZIP:
        try:
            names = torch.serialization.get_unsafe_globals_in_checkpoint(path)
        except (RuntimeError, ValueError, EOFError, pickle.UnpicklingError):
            pass
    names = [name for name in names if name not in allowed_names]
    return names or REFUSED_GLOBAL.findall(str(error))


def load_weights_only(
    path: str | Path,
    error: type[Exception],
    expected: str,
    allowed: Iterable[type] = (),
    remedy: str = "",
    map_location: str = "cpu",
):
    """`torch.load(path, weights_only=True)` with `allowed` classes added to torch's allow-list; `error` (a
    ValueError subclass) naming the file and `expected` (what it should hold) when it cannot be read that way;
    `remedy` (a sentence) tells what to do with a pickle that needs other globals.
    `map_location="meta"` reads the structure and every tensor's shape without its data."""
    path = Path(path)
    allowed = tuple(allowed)
    if not path.is_file():
        state = "is a folder" if path.is_dir() else "does not exist"
        raise error(f"{path} {state}; expected {expected}")
    saved = saved_format(path)
    if saved is None:
        raise error(
            f"{path} is not a file torch.save writes (neither its zip format nor the legacy one: a plain pickle, or "
            f"another kind of file?); expected {expected}"
        )
    try:
        with torch.serialization.safe_globals(list(allowed)):
            return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as failure:
        names = refused_globals(path, saved, failure, allowed)
        if not names:
            raise error(_unreadable(path, failure, expected)) from None
        raise error(
            f"{path} needs globals outside the allow-list to load ({', '.join(names)}): "
            "only weights-only pickles are read (torch.load(weights_only=True)), so nothing in it was run; "
            f"expected {expected}" + (f". {remedy}" if remedy else "")
        ) from None
    except (RuntimeError, EOFError, ValueError, KeyError, IndexError, TypeError, AttributeError) as failure:
        raise error(_unreadable(path, failure, expected)) from None


def _unreadable(path: Path, failure: Exception, expected: str) -> str:
    text = str(failure).strip()
    reason = text.splitlines()[0].split(". ")[0].rstrip(".") if text else type(failure).__name__
    return (
        f"{path} is not a readable torch.save file ({reason}); expected {expected} "
        "(truncated by a full disk or an interrupted copy?)"
    )
