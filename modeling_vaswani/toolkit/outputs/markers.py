"""Whose folder is it: a folder written whole is known by what it holds, never by its names. MARKER, written into it
last, names the command that wrote it and its entries; a command replaces a folder only when it is new, empty, or
marked as its own with nothing beside what the marker names (`check_owned`); an older version's output, which has no
marker, only where content that version alone wrote tells it exactly (`Output.legacy`)."""

import json
import os
import stat
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

from ...configuration_vaswani import VaswaniConfig
from .errors import OutputError
from .modes import umask
from .names import leftover, partial_prefix

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
        sign(folder) and all(any(fnmatch(name, pattern) for pattern in patterns) for name in entries(folder))
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


def entries(folder: Path) -> list[str]:
    """The names in `folder` (a folder's with "/"), leaving out the marker and what a killed run of ours left."""
    names = (entry.name + ("/" if entry.is_dir() else "") for entry in folder.iterdir())
    return sorted(name for name in names if name != MARKER and not leftover(name))


def read_marker(folder: Path) -> dict | None:
    marker = _read_json(folder / MARKER)
    if not isinstance(marker, dict) or not isinstance(marker.get("command"), str):
        return None
    files = marker.get("files")
    return marker if isinstance(files, list) and all(isinstance(name, str) for name in files) else None


def marked_files(folder: str | Path) -> list[str] | None:
    """The entries the folder's marker names as its command's output (vaswani-push uploads them), or None where it has
    no readable marker."""
    marker = read_marker(Path(folder))
    return None if marker is None else marker["files"]


def write_marker(folder: Path, command: str, files: Iterable[str]) -> None:
    marker = {"command": command, "files": sorted(files)}
    descriptor, name = tempfile.mkstemp(prefix=partial_prefix(folder / MARKER), dir=folder)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(marker, indent=2) + "\n")
    os.chmod(name, 0o666 & ~umask())
    os.replace(name, folder / MARKER)


def check_owned(path: str | Path, output: Output) -> None:
    """OutputError unless `output.command` may replace the folder `path`: new, empty (but for what a killed run of ours
    left), marked as its own with nothing beside what its marker names, or an older version's output (`legacy`)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputError(
            f"output folder {path} is a file; expected a new folder or an earlier output of {output.command}"
        )
    found = entries(path) if path.is_dir() else []
    marker = read_marker(path) if found else None
    if not found or (marker is None and output.legacy is not None and output.legacy(path)):
        return
    own = marker is not None and marker["command"] == output.command
    foreign = sorted(set(found) - set(marker["files"])) if own else found
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
