"""Stock transformers outside this package: a virtual environment holding only torch, transformers and tokenizers
(and what they require), the reference for an export that plain transformers must load without remote code.

pip installs this environment's releases of the three into it, from the wheel cache, find-links and package index pip
is configured with, under CI's constraints (.ci/constraints.txt: the CPU build of torch). Installing takes half a
minute on a 2-core host, so the environment is built once per machine for those releases, under the user's cache
folder, and reused; it is built beside its place and renamed into it when complete, so a killed build leaves nothing
that looks finished.
"""

import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from helpers.training_setup import REPO

PACKAGES = ("torch", "transformers", "tokenizers")


def cache_folder() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "modeling_vaswani-tests"


def stock_python() -> Path:
    """The Python of the environment (built on first use), which cannot import modeling_vaswani."""
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in PACKAGES]
    python_version = f"py{sys.version_info.major}.{sys.version_info.minor}"
    place = cache_folder() / "-".join(["stock", python_version, *(pin.replace("==", "-") for pin in pins)])
    if not (place / "bin" / "python").exists():
        place.parent.mkdir(parents=True, exist_ok=True)
        building = Path(tempfile.mkdtemp(prefix=f".{place.name}-", dir=place.parent))
        try:
            build(building, pins)
            building.rename(place)
        except OSError:
            if not (place / "bin" / "python").exists():  # not a concurrent build that finished first
                raise
        finally:
            shutil.rmtree(building, ignore_errors=True)
    return place / "bin" / "python"


def build(venv: Path, pins: list[str]) -> None:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--clear", venv], check=True, timeout=120)
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "--disable-pip-version-check"]
    constraints = ["--constraint", str(REPO / ".ci" / "constraints.txt")]
    result = subprocess.run(
        [*pip, "install", "--no-compile", *constraints, *pins], capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, f"pip install failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"


def run_stock(program: str, *arguments, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    """`program` run by the stock environment's Python in `cwd`, offline, with nothing of this checkout on its path."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(cwd),
        "HF_HOME": str(cwd / "hf_home"),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONNOUSERSITE": "1",
    }
    command = [str(stock_python()), "-c", program, *map(str, arguments)]
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"the stock environment's program failed:\n{result.stderr[-6000:]}"
    return result
