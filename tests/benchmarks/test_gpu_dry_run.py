"""The GPU check's dry run, so that it cannot rot before a GPU comes: `bash benchmarks/gpu/run.sh OUT --device cpu
--tiny --no-install` end to end, every stage on the CPU with tiny shapes (no wheels installed, nothing downloaded),
and the reports it writes hold every check of tests/gpu/ and every benchmark stage, passed."""

import ast
import json
import os
import re
import subprocess
import sys

import pytest
from helpers.training_setup import REPO

pytestmark = pytest.mark.slow  # every stage's processes


def filled(value) -> bool:
    """Every figure there: no None, no empty collection, numbers above 0 (counts of what did not happen apart)."""
    if isinstance(value, dict):
        return bool(value) and all(filled(item) or key in ZERO_ALLOWED for key, item in value.items())
    if isinstance(value, list | str):
        return bool(value)
    return value is not None and (isinstance(value, bool) or value > 0)


ZERO_ALLOWED = {"host_reads"}  # a step may read nothing back to the host


def gpu_check_functions() -> list[str]:
    names = []
    for path in sorted((REPO / "tests" / "gpu").glob("test_gpu_*.py")):
        tree = ast.parse(path.read_text())
        names += [f"{path.name}::{node.name}" for node in tree.body if isinstance(node, ast.FunctionDef)]
    return [name for name in names if name.split("::")[1].startswith("test_")]


def test_dry_run_writes_reports_holding_every_check_passed(tmp_path):
    out = tmp_path / "out"
    env = {key: value for key, value in os.environ.items() if not key.startswith("VASWANI_GPU_")}
    env.update(PYTHON=sys.executable, VASWANI_GPU_WORK=str(tmp_path / "work"))
    command = ["bash", str(REPO / "benchmarks" / "gpu" / "run.sh"), str(out), "--device", "cpu", "--tiny"]
    # A budget no stage reaches on a slow machine: this checks the stages, not the time limits.
    process = subprocess.run(
        [*command, "--no-install", "--budget", "1500"], env=env, capture_output=True, text=True, timeout=1700
    )
    print(process.stdout[-6000:])
    assert process.returncode == 0, process.stdout[-8000:] + process.stderr[-3000:]
    assert not re.search(r"/proc/\d+/environ", process.stdout + process.stderr)  # reap() reads /proc quietly

    report = json.loads((out / "gpu-report.json").read_text())
    markdown = (out / "gpu-report.md").read_text()
    checks = {check["check"]: check for check in report["checks"]}
    failed = {name: check.get("message") for name, check in checks.items() if check["outcome"] != "passed"}
    assert not failed and report["all_passed"]
    for function in gpu_check_functions():
        ran = [name for name in checks if name.startswith(f"tests/gpu/{function}[cpu")]
        assert ran, f"{function} is not in the report"
        for name in ran:
            assert checks[name]["figures"], f"{name} recorded no figures"
            assert f"| {name.removeprefix('tests/gpu/')} | passed |" in markdown
    bench_stages = ("training-base", "training-big", "generation")
    for stage in bench_stages:
        check = checks[f"benchmark {stage}"]
        assert check["outcome"] == "passed" and "vaswani" in check["table"]
        assert f"### benchmark {stage}" in markdown
    assert "mfu" in checks["benchmark training-base"]["figures"]["vaswani training"]
    # The matmul ceilings: measured once, for the training stages only.
    ceilings = [json.loads((out / f"bench-{stage}.json").read_text())["report"]["ceiling"] for stage in bench_stages]
    assert ceilings[0] == ceilings[1] and set(ceilings[0]) == {"float32"} and ceilings[2] == {}
    steps = checks["benchmark training-steps"]
    assert steps["outcome"] == "passed" and "### benchmark training-steps" in markdown, steps
    figures = steps["figures"]
    variants = ("float32", "bf16 without cuDNN attention", "bf16", "compiled")
    assert {f"{name} step_ms" for name in variants} <= set(figures) and filled(figures), figures
    assert figures["graphs_compiled"] >= 2  # the second shape recompiles
    for model in ("base", "big"):
        assert set(figures[f"{model} mfu"]) == {"vaswani eager", "vaswani compiled", "marian eager"}
        assert set(figures[f"{model} ratios"]) == {
            "vaswani eager / marian eager",
            "vaswani compiled / marian eager",
            "vaswani compiled / eager",
        }
    stages = {stage["name"]: stage["status"] for stage in report["stages"]}
    assert stages.pop("install") == "not run" and set(stages.values()) == {"passed"}, stages
    assert {"tests-all", "bench-training", "bench-steps", "bench-generation"} <= set(stages), stages
    environment = report["environment"]
    assert environment["device"] == "cpu" and environment["tiny"] and environment["versions"]["torch"]
    assert "# GPU run: CPU dry run" in markdown
