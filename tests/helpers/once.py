"""A session fixture's work done once per test run, also when pytest-xdist runs the suite in several workers.

Each xdist worker is a process of its own with its own session, so a session fixture runs once per worker. For the
costly ones (a wheel built and installed, the main job trained), the first worker to ask does the work under a file
lock in the run's shared temporary folder and leaves its result there, pickled; the others wait for the lock and read
it. The pattern is the one pytest-xdist's documentation gives ("Making session-scoped fixtures execute only once").
"""

import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from filelock import FileLock

T = TypeVar("T")


def once_per_run(tmp_path_factory, name: str, work: Callable[[Path], T]) -> T:
    """`work(folder)`'s result, computed once per test run in a folder kept for the run."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return work(tmp_path_factory.mktemp(name))
    shared = tmp_path_factory.getbasetemp().parent  # the workers' basetemps are its children
    result = shared / f"{name}.pickle"
    with FileLock(str(shared / f"{name}.lock")):
        if not result.is_file():
            folder = shared / name
            folder.mkdir()
            try:
                outcome = ("value", work(folder))
            except Exception as failure:  # every worker's tests see the first one's failure, not a second try
                outcome = ("failure", failure)
            result.write_bytes(pickle.dumps(outcome))
        kind, value = pickle.loads(result.read_bytes())
    if kind == "failure":
        raise value
    return value
