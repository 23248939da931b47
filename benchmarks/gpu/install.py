"""Installs the wheels that benchmarks/gpu/fetch_wheels.sh packed (benchmarks/gpu/wheels/) into a virtual environment
of their own on the GPU machine, in front of the image's packages, which stay as they are: run by run.sh.

    python3 benchmarks/gpu/install.py --wheels benchmarks/gpu/wheels --venv /tmp/venv --report OUT/install.json

The environment is made by the image's Python, without pip and without the image's packages; a .pth file then adds
the image's site-packages folders behind its own, so that torch with its CUDA libraries comes from the image and
everything installed here shadows the image's older copies (transformers 5.17, ...). This works whether the image's
Python is a system Python or itself a virtual environment (where `--system-site-packages` would reach past it), and
pip never touches the image: a package it "upgrades" lives outside this environment and is only shadowed.

pip (the image's, found through the .pth) installs the pinned list from the folder alone (`--no-index`), resolving
against what the image has; if that resolution fails (an image package too old for a wheel's needs, one that was not
carried), it installs the same list with `--no-deps` and says so, and `pip check` is recorded either way.
"""

import argparse
import json
import os
import site
import subprocess
import sys
import sysconfig
import tarfile
import time
from pathlib import Path


def image_site_folders() -> list[str]:
    """The folders this (the image's) Python imports installed packages from."""
    folders = [*site.getsitepackages(), *sys.path]
    if site.ENABLE_USER_SITE:
        folders.append(site.getusersitepackages())
    stdlib = {sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib")}
    seen, result = set(), []
    for folder in folders:
        if folder and folder not in seen and folder not in stdlib and Path(folder).is_dir():
            if folder.endswith(("site-packages", "dist-packages")):
                seen.add(folder)
                result.append(folder)
    return result


def environment_site(venv: Path) -> Path:
    python = venv / "bin" / "python"
    code = "import sysconfig; print(sysconfig.get_path('purelib'))"
    return Path(subprocess.run([str(python), "-c", code], check=True, capture_output=True, text=True).stdout.strip())


def run(command: list[str], log: list, **kwargs) -> subprocess.CompletedProcess:
    started = time.monotonic()
    process = subprocess.run(command, capture_output=True, text=True, **kwargs)
    log.append(
        {
            "command": " ".join(command),
            "returncode": process.returncode,
            "seconds": round(time.monotonic() - started, 1),
            "output_tail": (process.stdout + process.stderr)[-4000:],
        }
    )
    print(f"$ {' '.join(command)[:200]}\n{(process.stdout + process.stderr)[-1500:]}", flush=True)
    return process


def install(wheels: Path, venv: Path, scratch: Path) -> dict:
    manifest = json.loads((wheels / "manifest.json").read_text())
    report = {"manifest_created": manifest["created"], "left_out": manifest.get("left_out", []), "steps": []}
    unpacked = scratch / "wheels"
    unpacked.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tarfile.open(wheels / manifest["bundle"], "r:xz") as bundle:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.12 (and late 3.8-3.11 releases)
            bundle.extractall(unpacked, filter="data")
        else:
            bundle.extractall(unpacked)
    (unpacked / manifest["own_wheel"]).write_bytes((wheels / manifest["own_wheel"]).read_bytes())
    report["unpack_seconds"] = round(time.monotonic() - started, 1)

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--clear", str(venv)], check=True)
    folders = image_site_folders()
    # site runs an "import" line of a .pth with exec() inside a function: no comprehension (its own scope) may use
    # the name the import binds.
    line = f"import site; list(map(site.addsitedir, {folders!r}))\n"
    (environment_site(venv) / "zz_image_packages.pth").write_text(line)
    report["image_site_folders"] = folders
    python = str(venv / "bin" / "python")

    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1", "PIP_NO_CACHE_DIR": "1"}
    pip = [python, "-m", "pip", "install", "--no-index", "--find-links", str(unpacked)]
    process = run([*pip, *manifest["requirements"]], report["steps"], env=env)
    report["resolved"] = process.returncode == 0
    if process.returncode != 0:
        everything = sorted(str(path) for path in unpacked.glob("*.whl"))
        process = run([*pip, "--no-deps", *everything], report["steps"], env=env)
    report["installed"] = process.returncode == 0
    check = run([python, "-m", "pip", "check"], report["steps"], env=env)
    report["pip_check"] = check.stdout.strip() or check.stderr.strip()
    probe = (
        "import json, torch, transformers, datasets, evaluate, accelerate, pytest, modeling_vaswani; "
        "print(json.dumps({'torch': torch.__version__, 'cuda': torch.cuda.is_available(), "
        "'transformers': transformers.__version__, 'datasets': datasets.__version__, "
        "'torch_from': torch.__file__, 'transformers_from': transformers.__file__}))"
    )
    imported = run([python, "-c", probe], report["steps"], env=env)
    report["imports"] = json.loads(imported.stdout) if imported.returncode == 0 else imported.stderr[-2000:]
    report["ok"] = report["installed"] and imported.returncode == 0
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheels", type=Path, required=True, help="fetch_wheels.sh's folder")
    parser.add_argument("--venv", type=Path, required=True, help="the environment to make (replaced if there)")
    parser.add_argument("--report", type=Path, help="write what happened here as JSON")
    arguments = parser.parse_args(argv)
    report = install(arguments.wheels.resolve(), arguments.venv.resolve(), arguments.venv.resolve().parent)
    if arguments.report:
        arguments.report.write_text(json.dumps(report, indent=2) + "\n")
    print(f"install: {'ok' if report['ok'] else 'FAILED'} (resolved: {report['resolved']}); pip check: "
          f"{report['pip_check'][:500]}")  # fmt: skip
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
