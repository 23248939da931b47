"""The GPU check's parts that run anywhere (docs/gpu.md): the suite is collected and skipped with its reason where
there is no CUDA; the wheel folder's packing (benchmarks/gpu/fetch_wheels.py) and its installation in front of an
image's packages (benchmarks/gpu/install.py), on small fake wheels; the stage names the scripts share."""

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from helpers.training_setup import REPO

GPU = REPO / "benchmarks" / "gpu"
sys.path.insert(0, str(GPU))

import bench  # noqa: E402
import fetch_wheels  # noqa: E402
import report  # noqa: E402


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the suite runs instead of skipping")
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_without_cuda_the_suite_is_collected_and_skipped_with_its_reason():
    env = {key: value for key, value in os.environ.items() if not key.startswith("VASWANI_GPU_")}
    process = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/gpu", "-o", "addopts=", "-rs", "-p", "no:cacheprovider", "-m", "gpu"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    skipped = re.search(r"(\d+) skipped", process.stdout)
    assert skipped and int(skipped.group(1)) >= 15 and " passed" not in process.stdout, process.stdout[-2000:]
    assert "needs CUDA" in process.stdout and "--device cpu --tiny" in process.stdout


def test_the_scripts_name_the_same_benchmark_stages():
    """run.sh's `bench NAME LIMIT STAGE...` lines call bench.py with each of its stages once, in order, and the
    report knows which run.sh stage (bench-NAME) measured each."""
    run_sh = (GPU / "run.sh").read_text()
    calls = re.findall(r"^ +bench (\S+) \d+ (.+)$", run_sh, re.MULTILINE)
    measured_in = {stage: f"bench-{name}" for name, stages in calls for stage in stages.split()}
    assert list(measured_in) == list(bench.STAGES) and measured_in == report.BENCH_STAGES, calls
    # the ceilings once, in the call that trains; the generation call measures none
    assert bench.needs_ceiling(["training-base", "training-big"]) and not bench.needs_ceiling(["generation"])


def fake_benchmark(out: Path, stage: str, ceiling: dict):
    results = {"vaswani": {"training": {"tokens_per_s": 2.0, "peak_memory_mib": 3.0, "mfu": 0.25}}}
    data = {"command": f"python benchmarks/benchmark.py ({stage})", "table": f"table of {stage}", "seconds": 12.5}
    data["report"] = {"ceiling": ceiling, "results": results, "ratios": {}}
    (out / f"bench-{stage}.json").write_text(json.dumps(data))


def test_the_report_judges_each_benchmark_stage_by_its_own_results(tmp_path):
    """bench-training measures base and big: stopped during big, base's figures stand and big is not run; the
    generation stage, with no ceiling, shows none."""
    stages = [
        {"name": "bench-training", "status": "timed out", "started": 100, "seconds": 201, "limit": 200},
        {"name": "bench-generation", "status": "passed", "started": 301, "seconds": 80, "limit": 180},
    ]
    (tmp_path / "stages.jsonl").write_text("".join(json.dumps(stage) + "\n" for stage in stages))
    fake_benchmark(tmp_path, "training-base", {"float32": {"gflops": 5e4}, "bfloat16": {"gflops": 7e5}})
    fake_benchmark(tmp_path, "generation", {})
    built = report.build(tmp_path)
    checks = {check["check"]: check for check in built["checks"]}
    base, big, generation = (checks[f"benchmark {name}"] for name in bench.STAGES)
    assert base["outcome"] == "passed" and base["seconds"] == 12.5 and base["stage"] == "bench-training"
    assert base["figures"]["ceiling_gflops"] == {"float32": 5e4, "bfloat16": 7e5}
    assert big["outcome"] == "not run" and "stopped after 201 s (limit 200 s)" in big["message"]
    assert generation["outcome"] == "passed" and "ceiling_gflops" not in generation["figures"]
    assert not built["all_passed"] and built["seconds"] == 281


def test_reaping_kills_a_marked_process_and_says_nothing_of_processes_it_cannot_read(tmp_path):
    """run.sh's reap() against the race it met on the first GPU run: processes ending between the glob of /proc and
    the read of their environ (and zombies, and other users' processes) printed hundreds of shell errors."""
    reap = re.search(r"^reap\(\) \{.*?^\}$", (GPU / "run.sh").read_text(), re.MULTILINE | re.DOTALL).group(0)
    script = tmp_path / "reap.sh"
    script.write_text(
        reap
        + """
( while :; do /bin/true; done ) > /dev/null 2>&1 &
storm=$!
VASWANI_GPU_STAGE=test-$$-stage setsid sleep 300 > /dev/null 2>&1 &
marked=$!
VASWANI_GPU_STAGE=test-$$-stage-other setsid sleep 300 > /dev/null 2>&1 &
other=$!
sleep 0.3
for _ in 1 2 3 4 5 6 7 8; do reap "test-$$-stage"; done
kill "$storm"
sleep 0.3
kill -0 "$marked" 2>/dev/null && echo "marked: alive" || echo "marked: reaped"
kill -0 "$other" 2>/dev/null && echo "other: alive" || echo "other: reaped"
kill "$other" 2>/dev/null
"""
    )
    process = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=120)
    assert process.stdout.split("\n")[:2] == ["marked: reaped", "other: alive"], process.stdout
    assert "environ" not in process.stderr, process.stderr[-2000:]


def fake_wheel(folder: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """A pure-Python wheel of `files` ({path: text}) with its metadata and RECORD."""
    dist_info = f"{name}-{version}.dist-info"
    files = {
        **files,
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [f"{path},{fetch_wheels.record_hash(text.encode())},{len(text.encode())}" for path, text in files.items()]
    files[f"{dist_info}/RECORD"] = "\n".join([*record, f"{dist_info}/RECORD,,"]) + "\n"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for member, text in files.items():
            wheel.writestr(member, text)
    return path


def test_repacking_drops_the_trimmed_files_and_their_record_lines(tmp_path):
    wheel = fake_wheel(
        tmp_path, "trimmed", "1.0", {"trimmed/__init__.py": "x = 1\n", "trimmed/libbig.so.1": "0" * 5000}
    )
    target = tmp_path / "out" / wheel.name
    target.parent.mkdir()
    dropped = fetch_wheels.repacked(wheel, ["trimmed/libbig.so*"], target)
    assert dropped == {"files": 1, "bytes": 5000}
    with zipfile.ZipFile(target) as out:
        assert {info.compress_type for info in out.infolist()} == {zipfile.ZIP_STORED}
        assert "trimmed/libbig.so.1" not in out.namelist() and "trimmed/__init__.py" in out.namelist()
        record = out.read("trimmed-1.0.dist-info/RECORD").decode()
    assert "libbig" not in record and "trimmed/__init__.py," in record


@pytest.mark.slow  # two virtual environments and three pip runs
def test_install_puts_the_carried_wheels_in_front_of_an_images_packages_and_leaves_them(tmp_path):
    """An "image" that is itself a virtual environment (the case --system-site-packages would get wrong), holding
    an old copy of a package; install.py makes its own environment in front of it: the carried, newer copy is
    imported there, the image's copy stays where it was, and the image's torch is still found."""
    image = tmp_path / "image"
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(image)], check=True)
    image_python = str(image / "bin" / "python")
    image_site = subprocess.run(
        [image_python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # The image sees this environment's packages (pip, torch, ...) behind its own.
    here = [folder for folder in sys.path if folder.endswith("site-packages")]
    Path(image_site, "test_image.pth").write_text("\n".join(here) + "\n")
    old = fake_wheel(tmp_path, "vaswani_gpu_probe", "1.0", {"vaswani_gpu_probe.py": "VERSION = '1.0'\n"})
    subprocess.run(
        [image_python, "-m", "pip", "install", "--no-index", "--no-deps", "--disable-pip-version-check", str(old)],
        check=True,
        capture_output=True,
    )

    new = fake_wheel(tmp_path / "wheels", "vaswani_gpu_probe", "2.0", {"vaswani_gpu_probe.py": "VERSION = '2.0'\n"})
    own = fake_wheel(wheels, "vaswani_gpu_own", "0.1", {"vaswani_gpu_own.py": "OWN = True\n"})
    fetch_wheels.pack({"vaswani_gpu_probe": new}, wheels / fetch_wheels.BUNDLE)
    new.unlink()
    manifest = {
        "created": "now",
        "bundle": fetch_wheels.BUNDLE,
        "own_wheel": own.name,
        "requirements": ["vaswani_gpu_own==0.1", "vaswani_gpu_probe==2.0"],
    }
    (wheels / fetch_wheels.MANIFEST).write_text(json.dumps(manifest))

    venv = tmp_path / "work" / "venv"
    venv.parent.mkdir()
    command = [image_python, str(GPU / "install.py"), "--wheels", str(wheels), "--venv", str(venv)]
    process = subprocess.run(
        [*command, "--report", str(tmp_path / "install.json")], capture_output=True, text=True, timeout=600
    )
    assert process.returncode == 0, process.stdout[-4000:] + process.stderr[-4000:]
    result = json.loads((tmp_path / "install.json").read_text())
    assert result["ok"] and result["resolved"], result
    assert Path(result["imports"]["torch_from"]).is_relative_to(Path(torch.__file__).parents[1])

    probe = "import vaswani_gpu_probe, vaswani_gpu_own; print(vaswani_gpu_probe.VERSION, vaswani_gpu_probe.__file__)"
    ours = subprocess.run([str(venv / "bin" / "python"), "-c", probe], capture_output=True, text=True, check=True)
    assert ours.stdout.split()[0] == "2.0" and ours.stdout.split()[1].startswith(str(venv))
    theirs = subprocess.run(
        [image_python, "-c", "import vaswani_gpu_probe; print(vaswani_gpu_probe.VERSION)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert theirs.stdout.strip() == "1.0"


def test_the_wheels_budget_leaves_room_for_what_the_checkout_sends(tmp_path):
    """A call carries 64 MiB in all: the checkout's tracked files and its untracked ones that git does not ignore
    travel beside the wheels, ignored ones do not; the default budget is what they leave, less 1 MiB."""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("ignored/\n")  # 9 bytes, untracked: travels
    (tmp_path / "tracked.bin").write_bytes(b"t" * 3000)
    subprocess.run([*git, "add", "tracked.bin"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], cwd=tmp_path, check=True)
    (tmp_path / "new.txt").write_bytes(b"n" * 500)
    (tmp_path / "ignored").mkdir()
    (tmp_path / "ignored" / "wheel.whl").write_bytes(b"w" * 70000)
    assert fetch_wheels.checkout_bytes(tmp_path) == 3000 + 500 + 9
    expected = 64 - fetch_wheels.checkout_bytes() / 2**20 - 1
    assert fetch_wheels.default_budget_mib() == pytest.approx(expected) and expected < 64 - 1


def test_every_requirement_of_the_package_is_carried_or_the_images():
    """What the GPU run installs this package with: its requirements and its `train` extra's, each either in the
    carried wheels (REQUIRED) or taken from the image (IMAGE). A new dependency missing from both failed the install
    on the GPU machine (sentencex, 2026-11-30); here it fails before the machine is asked for."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["train"]]
    names = {fetch_wheels.normalized(re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0]) for requirement in wanted}
    carried = {fetch_wheels.normalized(name) for group in fetch_wheels.REQUIRED.values() for name in group}
    image = {fetch_wheels.normalized(name) for name in fetch_wheels.IMAGE}
    assert names - carried - image == set(), "neither carried nor the image's"
    assert not carried & image, "both carried and the image's"
