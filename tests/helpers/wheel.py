"""The package as a user installs it: the wheel built from the checkout, installed into a new virtual environment
outside it, and the main job run by its console script; built once a test session (tests/conftest.py's `installed`
and `main_job`), for the wheel test and the command tests.

The wheel is built (sdist first, then the wheel from the sdist, as `python -m build` does) from a copy of the checkout,
so that no build/ or egg-info of the checkout gets into it. It is installed into a new virtual environment in a
temporary folder, without its dependencies: a .pth file there lists this environment's site-packages, so torch and
the rest are found without being installed again. A directory named in a .pth file is appended to sys.path but its own
.pth files are not run, so the editable install of this checkout (a .pth that installs an import finder) stays off;
tests/test_wheel.py checks that it does. Every command then runs through the new environment's console scripts, from
an empty folder, with PYTHONPATH unset.
"""

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from helpers.training_setup import REPO

# Not copied for the build: what a fresh clone has not (outputs of builds, tools and runs; see .gitignore).
NOT_SOURCE_NAMES = shutil.ignore_patterns(
    ".git", ".venv", ".tox", "build", "dist", "*.egg-info", ".eggs", "__pycache__", "*.pyc", ".pytest_cache",
    ".ruff_cache", "runs", ".whl", ".gl", "wheelhouse",
)  # fmt: skip


def not_sources(folder: str, names: list[str]) -> set[str]:
    """NOT_SOURCE_NAMES, and a run's outputs/ at the root only: toolkit/outputs/ is the package's (as .gitignore)."""
    return NOT_SOURCE_NAMES(folder, names) | ({"outputs"} & set(names) if Path(folder) == REPO else set())


# Settings that would put the checkout, or caches shared with other runs, in front of the installed package.
DROPPED_ENV = (
    "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE",
    "TRANSFORMERS_CACHE", "HF_MODULES_CACHE", "HF_DATASETS_CACHE", "HF_EVALUATE_CACHE",
)  # fmt: skip
# The main job as a user runs it from an empty folder (tokenizer trained here, the small preset and its default
# output_dir, runs/small), cut to 30 optimizer steps on 2000 sentence pairs: evaluated during training every 15 steps,
# the last 2 of 3 checkpoints averaged, 24 test sentences translated and scored.
MAIN_JOB = [
    "--max_steps", "30", "--warmup_steps", "10", "--save_steps", "10", "--average_last_checkpoints", "2",
    "--max_tokens", "600", "--max_train_samples", "2000", "--vocab_size", "600", "--max_eval_samples", "24",
    "--logging_steps", "5", "--eval_steps", "15", "--disable_tqdm", "true",
]  # fmt: skip
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def run(command, *, cwd, env, input=None, timeout=300) -> subprocess.CompletedProcess:
    """Runs `command`; a failure's message holds the command, its exit status and the end of its output."""
    command = [str(part) for part in command]
    result = subprocess.run(command, cwd=cwd, env=env, input=input, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, (
        f"{' '.join(command)} (in {cwd}) exited with {result.returncode}\n"
        f"--- stdout ---\n{result.stdout[-3000:]}\n--- stderr ---\n{result.stderr[-8000:]}"
    )
    return result


def clean_env(env: dict, hf_home: Path) -> dict:
    env = {k: v for k, v in env.items() if k not in DROPPED_ENV}
    env.update(HF_HOME=str(hf_home), OMP_NUM_THREADS="1", PYTHONNOUSERSITE="1")
    return env


def build(source: Path, outdir: Path) -> Path:
    """sdist, then the wheel from it. Without isolation if this environment can build it (setuptools is a dependency
    of torch and tensorboard), else in an isolated environment with setuptools from the package index."""
    command = [sys.executable, "-m", "build", "--outdir", str(outdir), str(source)]
    env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
    offline = subprocess.run([*command, "--no-isolation"], env=env, capture_output=True, text=True, timeout=300)
    if offline.returncode != 0:
        shutil.rmtree(outdir, ignore_errors=True)
        isolated = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert isolated.returncode == 0, (
            f"the wheel does not build.\n--- without isolation ---\n{offline.stdout[-3000:]}{offline.stderr[-3000:]}"
            f"\n--- isolated ---\n{isolated.stdout[-3000:]}{isolated.stderr[-3000:]}"
        )
    wheels = sorted(outdir.glob("*.whl"))
    assert len(wheels) == 1, f"expected one wheel in {outdir}, found {[p.name for p in outdir.iterdir()]}"
    return wheels[0]


def install(root: Path) -> dict:
    """The wheel built from the checkout and installed into a new virtual environment under `root`."""
    source = root / "source"
    shutil.copytree(REPO, source, ignore=not_sources, symlinks=True)
    wheel = build(source, root / "dist")

    venv = root / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=root, env=os.environ)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", python, "--disable-pip-version-check"]
    # Installed before the .pth exists: pip must see no modeling_vaswani there (this environment's editable one).
    run([*pip, "install", "--no-deps", "--no-index", "--no-compile", wheel], cwd=root, env=os.environ)
    site_packages = Path(
        run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], cwd=root, env=os.environ)
        .stdout.strip()
    )  # fmt: skip
    (site_packages / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    empty = root / "empty"
    empty.mkdir()
    return {
        "wheel": wheel,
        "bin": venv / "bin",
        "python": python,
        "site_packages": site_packages,
        "env": clean_env(dict(os.environ), root / "hf_home"),
        "empty": empty,
    }


def main_job(installed: dict, work: Path) -> subprocess.CompletedProcess:
    """`vaswani-train` with MAIN_JOB's flags from the empty folder `work`, on the shipped Multi30k, offline."""
    return run([installed["bin"] / "vaswani-train", *MAIN_JOB], cwd=work, env={**installed["env"], **OFFLINE})
