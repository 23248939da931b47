"""Fetches, on a machine that reaches PyPI, the wheels the GPU image lacks or has too old, for benchmarks/gpu/run.sh
to install there (bash benchmarks/gpu/fetch_wheels.sh; docs/gpu.md).

The GPU machines are offline and carry at most 64 MiB of files. Their image has Python 3.12, torch 2.11 with CUDA,
transformers 5.17, accelerate, sacrebleu, sentencepiece and tokenizers. This gathers, for CPython 3.12 on x86-64
manylinux, this package's wheel (built from the checkout) and, pinned to the versions this checkout's environment
runs with (the Python running this script), transformers (>= pyproject's lower bound), datasets, evaluate, the test
runner and what they need that the image does not have: never torch, CUDA, numpy or matplotlib (`pip download
--no-deps` of an explicit list).

Those wheels take about 180 MB as downloaded, pyarrow alone 54, so they travel packed:
- pyarrow loses the libraries neither datasets nor this package loads (Flight, S3, their Python modules, C++ headers
  and tests: pyarrow imports them only on request), pandas its tests; their RECORD files are rewritten to match;
- the third-party wheels are re-zipped without compression and put in one xz archive (`third-party.tar.xz`), which
  compresses their shared libraries about a third better than the wheels' own zip compression; run.sh
  (benchmarks/gpu/install.py) unpacks them with Python's lzma;
- this package's wheel sits beside it, rebuilt on every run (the archive is rebuilt only when its list changes).

The folder (default benchmarks/gpu/wheels/, ignored by git) must stay within --budget-mib (default: the 64 MiB a
call carries less what the checkout sends beside it, its tracked and untracked files that git does not ignore, and
1 MiB to spare). Optional packages are added only where they fit: hf-xet (huggingface_hub's transfer
backend, unused offline) and CTranslate2 (the speed benchmark's third engine; its CUDA wheel is 42 MB as downloaded).
Prints what it packed, what it left out and why, and the folder's total size.
"""

import argparse
import fnmatch
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from base64 import urlsafe_b64encode
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DEFAULT_OUT = HERE / "wheels"
DOWNLOADS = HERE / ".downloads"  # the wheels as downloaded, kept between runs (ignored by git; never carried)
BUNDLE = "third-party.tar.xz"
MANIFEST = "manifest.json"

PYTHON_VERSION = "3.12"
PLATFORM = [
    "--only-binary=:all:",
    "--python-version", PYTHON_VERSION,
    "--platform", "manylinux2014_x86_64",
    "--platform", "manylinux_2_17_x86_64",
    "--platform", "manylinux_2_28_x86_64",
    "--implementation", "cp",
]  # fmt: skip

# What the GPU run takes from the image as it is (IMAGE), and what it needs beyond, by who needs it (REQUIRED):
# every requirement of this package and of its `train` extra is one or the other (tests/benchmarks/test_gpu_suite.py).
# matplotlib draws vaswani-train's curves in any 3.8 or later; carried with its needs it took 18 MiB of wheels.
IMAGE = ["torch", "numpy", "pyyaml", "psutil", "sacrebleu", "sentencepiece", "matplotlib", "lxml", "tensorboard"]
REQUIRED = {
    "the model (transformers >= our lower bound)": [
        "sentencex", "transformers", "huggingface_hub", "tokenizers", "safetensors", "regex", "typer", "click",
        "shellingham", "rich", "markdown-it-py", "mdurl", "pygments", "annotated-doc", "pydantic", "pydantic_core",
        "annotated-types", "typing-inspection", "httpx2", "httpcore2", "h11", "anyio", "idna", "truststore",
        "certifi", "typing_extensions", "packaging", "tqdm", "filelock", "fsspec", "accelerate",
    ],
    "datasets": ["datasets", "pyarrow", "pandas", "python-dateutil", "tzdata", "dill", "multiprocess", "xxhash"],
    "evaluate": [
        "evaluate", "requests", "urllib3", "charset-normalizer", "aiohttp", "aiosignal", "aiohappyeyeballs", "attrs",
        "frozenlist", "multidict", "propcache", "yarl",
    ],
    "the test runner": ["pytest", "pluggy", "iniconfig"],
}  # fmt: skip

OPTIONAL = {
    "hf-xet": "huggingface_hub's Xet transfer backend (the image has one; unused offline)",
    "ctranslate2": "the speed benchmark's third engine (CUDA build)",
}

# Files left out of a wheel (fnmatch patterns on its member names): nothing that `import pyarrow`, datasets, pandas
# or this package loads. libarrow_python.so and .so.2600.1.0 are copies of libarrow_python.so.2600 (the name its
# users are linked against) kept for building extensions.
TRIMS = {
    "pyarrow": [
        "pyarrow/libarrow_flight.so*", "pyarrow/libarrow_python_flight.so*", "pyarrow/_flight.*",
        "pyarrow/libarrow_s3.so*", "pyarrow/_s3fs.*", "pyarrow/include/*", "pyarrow/tests/*", "pyarrow/src/*",
        "pyarrow/*.pxd", "pyarrow/*.pyx", "pyarrow/includes/*", "pyarrow/libarrow_python.so",
        "pyarrow/libarrow_python.so.*.*.*",
    ],
    "pandas": ["pandas/tests/*"],
}  # fmt: skip

# xz never shrinks these wheels' compressed size below half (pyarrow's shared libraries: 0.61): an optional package
# whose wheel at half its size would not fit is left out without packing it.
BEST_RATIO = 0.5
MIB = 2**20


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned(names: list[str]) -> dict[str, str]:
    """Each package at the version this interpreter's environment has (the one the CPU suite runs with)."""
    versions, missing = {}, []
    for name in names:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            missing.append(name)
    if missing:
        sys.exit(
            f"fetch_wheels: not installed in this environment ({sys.executable}): {', '.join(missing)}; run it with "
            "the project's environment (pip install -e '.[train,dev]')"
        )
    return versions


def lower_bound(package: str) -> str:
    text = (REPO / "pyproject.toml").read_text()
    match = re.search(rf'"{package}>=([0-9][^",;]*)"', text)
    if not match:
        sys.exit(f"fetch_wheels: pyproject.toml states no lower bound for {package}")
    return match.group(1)


def check_lower_bound(package: str, installed: str) -> None:
    from packaging.version import Version

    bound = lower_bound(package)
    if Version(installed) < Version(bound):
        sys.exit(f"fetch_wheels: {package} {installed} here is below pyproject's lower bound {bound}")


def wheel_of(name: str, pinned_version: str, folder: Path) -> Path | None:
    prefix = f"{normalized(name).replace('-', '_')}-{pinned_version}-"
    found = [path for path in folder.glob("*.whl") if path.name.lower().startswith(prefix.lower())]
    return found[0] if found else None


def download(requirements: dict[str, str], folder: Path) -> dict[str, Path]:
    """The wheels of `requirements` ({name: version}) in `folder`, downloading those not there yet."""
    folder.mkdir(parents=True, exist_ok=True)
    wanted = [f"{name}=={pin}" for name, pin in requirements.items() if not wheel_of(name, pin, folder)]
    if wanted:
        print(f"downloading {len(wanted)} wheel(s) for CPython {PYTHON_VERSION} manylinux x86-64")
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", *PLATFORM, "-d", str(folder)]
        subprocess.run([*command, *wanted], check=True)
    wheels = {name: wheel_of(name, pin, folder) for name, pin in requirements.items()}
    if missing := [name for name, path in wheels.items() if path is None]:
        sys.exit(f"fetch_wheels: pip download gave no wheel for {', '.join(missing)}")
    return wheels


def build_own_wheel(folder: Path) -> Path:
    """This checkout's wheel, built without an isolated environment (setuptools from this one: no download)."""
    for old in folder.glob("modeling_vaswani-*.whl"):
        old.unlink()
    with tempfile.TemporaryDirectory(prefix="vaswani-wheel-") as scratch:
        command = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", scratch, str(REPO)]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        (built,) = Path(scratch).glob("modeling_vaswani-*.whl")
        return Path(shutil.copy2(built, folder / built.name))


def record_hash(data: bytes) -> str:
    return "sha256=" + urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def repacked(wheel: Path, drop: list[str], target: Path) -> dict:
    """`wheel` re-zipped uncompressed into `target` (for xz to compress), without the members matching `drop`;
    its RECORD loses their lines. Returns what was dropped."""
    dropped, dropped_bytes = [], 0
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as out:
        members = source.infolist()
        for member in members:
            if any(fnmatch.fnmatch(member.filename, pattern) for pattern in drop):
                dropped.append(member.filename)
                dropped_bytes += member.file_size
        for member in members:
            if member.filename in dropped:
                continue
            data = source.read(member)
            if member.filename.endswith(".dist-info/RECORD") and dropped:
                lines = data.decode().splitlines()
                kept = [line for line in lines if line.split(",", 1)[0] not in dropped]
                data = ("\n".join(kept) + "\n").encode()
            info = zipfile.ZipInfo(member.filename, date_time=member.date_time)
            info.external_attr = member.external_attr
            out.writestr(info, data, compress_type=zipfile.ZIP_STORED)
    return {"files": len(dropped), "bytes": dropped_bytes} if dropped else {}


def pack(wheels: dict[str, Path], bundle: Path) -> dict[str, dict]:
    """The wheels, re-zipped uncompressed (trimmed where TRIMS says), in one tar compressed by xz at -9."""
    trims = {}
    with tempfile.TemporaryDirectory(prefix="vaswani-bundle-") as scratch:
        scratch = Path(scratch)
        tar_path = scratch / "bundle.tar"
        with tarfile.open(tar_path, "w", format=tarfile.PAX_FORMAT) as tar:
            for name in sorted(wheels):
                stored = scratch / wheels[name].name
                trims[name] = repacked(wheels[name], TRIMS.get(name, []), stored)
                tar.add(stored, arcname=stored.name)
                stored.unlink()
        print(f"compressing {tar_path.stat().st_size / MIB:.0f} MiB with xz -9 (a few minutes)")
        started = time.monotonic()
        partial = bundle.with_name(bundle.name + ".partial")
        if shutil.which("xz"):
            with open(partial, "wb") as out:
                command = ["nice", "-n", "10", "xz", "-9", "--threads=2", "--stdout", str(tar_path)]
                subprocess.run(command, stdout=out, check=True)
        else:
            import lzma

            with open(tar_path, "rb") as source, lzma.open(partial, "wb", preset=9) as out:
                shutil.copyfileobj(source, out, 16 * MIB)
        partial.replace(bundle)
        print(f"  {bundle.stat().st_size / MIB:.1f} MiB in {time.monotonic() - started:.0f} s")
    return trims


CARRIED_MIB = 64  # what one call to the GPU machine carries, the checkout and the wheels together
SPARE_MIB = 1


def checkout_bytes(repo: Path = REPO) -> int:
    """What a call sends of the checkout besides the wheels: tracked files and untracked ones git does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo, capture_output=True, check=True, text=True,
    ).stdout  # fmt: skip
    return sum((repo / name).stat().st_size for name in listed.split("\0") if name and (repo / name).is_file())


def default_budget_mib() -> float:
    return CARRIED_MIB - checkout_bytes() / MIB - SPARE_MIB


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.iterdir() if path.is_file())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the folder that travels (default: %(default)s)")
    parser.add_argument(
        "--budget-mib", type=float, help="most MiB the folder may take (default: 64 less the checkout and 1 to spare)"
    )
    parser.add_argument("--no-ctranslate2", action="store_true", help="do not try to fit CTranslate2")
    arguments = parser.parse_args(argv)
    budget_mib = arguments.budget_mib if arguments.budget_mib is not None else default_budget_mib()
    out, budget = arguments.out.resolve(), budget_mib * MIB
    print(f"budget: {budget_mib:.1f} MiB for the folder")

    names = [name for group in REQUIRED.values() for name in group]
    optional = [name for name in OPTIONAL if not (name == "ctranslate2" and arguments.no_ctranslate2)]
    versions = pinned(names)
    check_lower_bound("transformers", versions["transformers"])
    optional_versions = {}
    for name in optional:
        try:
            optional_versions[name] = version(name)
        except PackageNotFoundError:
            print(f"left out {name}: not installed here, so no version to pin")
    wheels = download(versions, DOWNLOADS)
    optional_wheels = download(optional_versions, DOWNLOADS)

    out.mkdir(parents=True, exist_ok=True)
    own = build_own_wheel(out)
    print(f"built {own.name} ({own.stat().st_size / MIB:.1f} MiB)")

    previous = json.loads((out / MANIFEST).read_text()) if (out / MANIFEST).exists() else {}
    left_out, chosen = [], dict(wheels)
    for name in optional_wheels:
        chosen[name] = optional_wheels[name]
    # Try with every optional package that could fit, then without the largest until the folder fits.
    while True:
        estimate = own.stat().st_size + sum(BEST_RATIO * path.stat().st_size for path in chosen.values())
        extra = [name for name in chosen if name in optional_wheels]
        if estimate > budget and extra:
            largest = max(extra, key=lambda name: chosen[name].stat().st_size)
            left_out.append(
                {
                    "name": largest,
                    "why": f"its {chosen.pop(largest).stat().st_size / MIB:.1f} MiB wheel cannot fit: even at half "
                    f"its size the folder would take {estimate / MIB:.0f} MiB of the {budget / MIB:.0f} MiB budget",
                }
            )
            continue
        key = {name: path.name for name, path in chosen.items()}
        key["trims"] = TRIMS
        bundle = out / BUNDLE
        if previous.get("bundle_key") == key and bundle.exists():
            print(f"{BUNDLE} is up to date ({bundle.stat().st_size / MIB:.1f} MiB)")
            trims = previous["trims"]
        else:
            trims = pack(chosen, bundle)
        total = own.stat().st_size + bundle.stat().st_size
        if total > budget and extra:
            largest = max(extra, key=lambda name: chosen[name].stat().st_size)
            chosen.pop(largest)
            left_out.append({"name": largest, "why": f"packed, the folder took {total / MIB:.1f} MiB"})
            continue
        break

    installed = {name: chosen[name] for name in chosen}
    manifest = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": PYTHON_VERSION,
        "platform": PLATFORM,
        "own_wheel": own.name,
        "bundle": BUNDLE,
        "bundle_key": key,
        "packages": {
            name: {
                "version": (versions | optional_versions)[name],
                "wheel": path.name,
                "downloaded_bytes": path.stat().st_size,
                **({"trimmed": trims[name]} if trims.get(name) else {}),
            }
            for name, path in sorted(installed.items())
        },
        "trims": trims,
        "left_out": left_out,
        "requirements": [f"modeling_vaswani=={own.name.split('-')[1]}"]
        + [f"{name}=={(versions | optional_versions)[name]}" for name in sorted(installed)],
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    for stale in out.iterdir():
        if stale.name not in (own.name, BUNDLE, MANIFEST):
            stale.unlink() if stale.is_file() else shutil.rmtree(stale)

    total = folder_bytes(out)
    downloaded = sum(path.stat().st_size for path in installed.values())
    print(f"packed {len(installed)} third-party wheels ({downloaded / MIB:.1f} MiB as downloaded) and {own.name}")
    for name, trim in trims.items():
        if trim:
            print(f"  trimmed {name}: {trim['files']} files, {trim['bytes'] / MIB:.1f} MiB unpacked")
    for entry in left_out:
        print(f"left out {entry['name']}: {entry['why']}")
    print(f"total: {total / MIB:.1f} MiB in {out} (budget {budget / MIB:.0f} MiB)")
    if total > budget:
        print("fetch_wheels: over budget even without the optional packages", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
