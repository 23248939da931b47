"""The hidden names the package gives what it creates beside an output (partial outputs, an earlier output set aside,
the lock), made to fit in a file name, and how they are known again."""

import hashlib
import os
from pathlib import Path

_NAME_MAX = 255  # bytes in one file name (Linux, macOS)


def beside(path: Path, suffix: str, room: int = 0) -> Path:
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


def partial_prefix(path: Path) -> str:
    return beside(path, ".partial-", room=8).name  # mkstemp and mkdtemp add 8 characters


def previous(path: Path) -> Path:
    """Where an existing output waits while the new one takes its place: one fixed name, so the next run finds it."""
    return beside(path, ".old")


def lock_file(key: Path) -> Path:
    return beside(key, ".lock")


def leftover(name: str) -> bool:
    """A hidden partial, set-aside or lock file of ours (`staged_file`, `staged_folder`, `claim`, the Trainer)."""
    name = name.rstrip("/")
    return name.startswith(".") and (
        ".partial-" in name or name.endswith((".old", ".lock")) or name.startswith(".tmp-")
    )
