"""Real small and read-only disks for the tests of full-disk and read-only failures: a tmpfs mounted for the test
(root can mount one; elsewhere the test is skipped, saying so). Root ignores file permissions, so a read-only mount,
not a chmod, is what makes a folder unwritable here."""

import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_disk(folder: Path, size: str, read_only: bool = False):
    """`folder` mounted as a tmpfs of `size` bytes ("64k", "1m"), read-only if asked, until the block ends."""
    folder.mkdir(parents=True, exist_ok=True)
    options = f"size={size}" + (",ro" if read_only else "")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


def fill(folder: Path, leave_bytes: int) -> None:
    """Fills the disk holding `folder` until about `leave_bytes` are free."""
    free = shutil.disk_usage(folder).free
    with open(folder / "filler", "wb") as handle:
        handle.write(b"\0" * max(free - leave_bytes, 0))
