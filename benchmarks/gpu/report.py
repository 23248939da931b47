"""The GPU run's report (benchmarks/gpu/run.sh writes it into its output folder OUT):

    python benchmarks/gpu/report.py environment OUT --device cuda   # the machine and versions, before the checks
    python benchmarks/gpu/report.py build OUT                       # OUT/gpu-report.json and OUT/gpu-report.md

`build` gathers what the stages left in OUT: stages.jsonl (each stage's status and time, from run.sh), logs/collect.log
(every check of tests/gpu/ as pytest collected it), junit-*.xml (each check's outcome), records.jsonl (each check's
figures, tests/helpers/gpu.py), bench-*.json (each of the speed benchmark's stages, benchmarks/gpu/bench.py, and the
training step taken apart, benchmarks/gpu/steps.py), install.json and environment.json. Every collected check and every
benchmark stage gets a row, "not run" with the reason where its stage never reached it (a stage that hung and was
stopped, or the time budget spent). Exits 1 unless every check passed.
"""

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
# bench.py's STAGES, in run.sh's order, and the run.sh stage that measures each (one bench.py call a stage).
BENCH_STAGES = {"training-base": "bench-training", "training-big": "bench-training", "generation": "bench-generation"}
# steps.py's one stage (the training step taken apart), and its run.sh stage.
STEPS_STAGE, STEPS_RUN_STAGE = "training-steps", "bench-steps"
PACKAGES = [
    "torch", "transformers", "accelerate", "datasets", "evaluate", "tokenizers", "safetensors", "huggingface_hub",
    "sacrebleu", "numpy", "pandas", "pyarrow", "pytest", "ctranslate2", "modeling_vaswani",
]  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------------
# The machine
# ---------------------------------------------------------------------------------------------------------------------


def command_output(command: list[str], cwd: Path | None = None) -> str | None:
    try:
        process = subprocess.run(command, capture_output=True, text=True, timeout=20, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return process.stdout.strip() if process.returncode == 0 else None


def environment(out: Path, device: str, tiny: bool) -> dict:
    import torch

    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    facts = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "device": device,
        "tiny": tiny,
        "python": platform.python_version(),
        "executable": sys.executable,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "versions": versions,
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }
    if torch.cuda.is_available():
        properties = torch.cuda.get_device_properties(0)
        facts["gpu"] = {
            "name": properties.name,
            "count": torch.cuda.device_count(),
            "capability": ".".join(map(str, torch.cuda.get_device_capability(0))),
            "memory_gib": round(properties.total_memory / 2**30, 1),
            "bf16_supported": torch.cuda.is_bf16_supported(),
            "cudnn": torch.backends.cudnn.version(),
            "nccl": ".".join(map(str, torch.cuda.nccl.version())) if hasattr(torch.cuda, "nccl") else None,
            "driver": command_output(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]),
        }
    commit = command_output(["git", "rev-parse", "--short", "HEAD"], cwd=REPO)
    if commit:
        changed = command_output(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO) or ""
        facts["commit"] = commit + (f" (+{len(changed.splitlines())} changed files)" if changed else "")
    (out / "environment.json").write_text(json.dumps(facts, indent=2) + "\n")
    print(json.dumps(facts, indent=2))
    return facts


# ---------------------------------------------------------------------------------------------------------------------
# What the stages left
# ---------------------------------------------------------------------------------------------------------------------


def read_json(path: Path, default=None):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return default


def read_lines(path: Path) -> list[dict]:
    entries = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                entries.append(json.loads(line))
            except ValueError:
                continue
    return entries


def stage_of(nodeid: str) -> str:
    """run.sh's stage for a check: tests/gpu/test_gpu_<name>.py runs in stage tests-<name>."""
    stem = Path(nodeid.split("::")[0]).stem
    return "tests-" + stem.removeprefix("test_gpu_")


def collected(out: Path) -> list[str]:
    log = out / "logs" / "collect.log"
    text = log.read_text() if log.exists() else ""
    return [line.strip() for line in text.splitlines() if re.match(r"^tests/gpu/\S+\.py::\S", line.strip())]


def junit_outcomes(out: Path) -> dict[str, dict]:
    outcomes = {}
    for path in sorted(out.glob("junit-*.xml")):
        try:
            root = ElementTree.parse(path).getroot()
        except ElementTree.ParseError:
            continue
        for case in root.iter("testcase"):
            nodeid = case.get("classname", "").replace(".", "/") + ".py::" + case.get("name", "")
            outcome, message = "passed", ""
            for tag in ("failure", "error", "skipped"):
                element = case.find(tag)
                if element is not None:
                    outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                    message = (element.get("message") or "").strip()
                    if tag != "skipped":
                        message = (message + "\n" + (element.text or "")).strip()[-3000:]
                    break
            # A failing teardown after a pass is reported as a second entry: keep the worse one.
            if outcomes.get(nodeid, {}).get("outcome") in ("failed", "error"):
                continue
            outcomes[nodeid] = {"outcome": outcome, "message": message, "seconds": float(case.get("time") or 0)}
    return outcomes


def stage_reason(stage: dict | None) -> str:
    if stage is None:
        return "its stage did not start"
    if stage["status"] == "not run":
        return f"its stage did not run: {stage.get('reason', '')}"
    if stage["status"] == "timed out":
        return f"its stage was stopped after {stage['seconds']} s (limit {stage['limit']} s)"
    return f"its stage ended ({stage['status']}, exit {stage['returncode']}) before reaching it"


def benchmark_check(out: Path, name: str, stage: dict | None) -> dict:
    data = read_json(out / f"bench-{name}.json")
    check = {"check": f"benchmark {name}", "kind": "benchmark", "stage": BENCH_STAGES[name]}
    if data is None:
        seconds = stage.get("seconds", 0) if stage else 0
        return {**check, "seconds": seconds, "outcome": "not run", "message": stage_reason(stage), "figures": {}}
    check["seconds"] = data.get("seconds", 0)
    results = data["report"]
    figures = {"command": data["command"]}
    errors = []
    for dtype, ceiling in results["ceiling"].items():  # measured once for the training stages; generation has none
        figures.setdefault("ceiling_gflops", {})[dtype] = ceiling.get("gflops", ceiling.get("error"))
        if "error" in ceiling:
            errors.append(f"ceiling {dtype}: {ceiling['error']}")
    for implementation, phases in results["results"].items():
        for phase, result in phases.items():
            key = f"{implementation} {phase}"
            if "error" in result:
                errors.append(f"{key}: {result['error']}")
            elif "skipped" in result:
                figures[key] = f"skipped: {result['skipped']}"
            else:
                entry = {"tokens_per_s": result.get("tokens_per_s"), "peak_memory_mib": result.get("peak_memory_mib")}
                if "mfu" in result:
                    entry["mfu"] = result["mfu"]
                figures[key] = entry
    figures["ratios"] = results["ratios"]
    # Its own results decide: its run.sh stage may also have measured another benchmark stage, which failed.
    outcome = "failed" if errors else "passed"
    message = "; ".join(errors)
    return {**check, "outcome": outcome, "message": message, "figures": figures, "table": data["table"]}


def steps_check(out: Path, stage: dict | None) -> dict:
    """steps.py's figures: by variant and pass the milliseconds of a step's phases and the profiler's counts, the
    compiled step's graphs, base and big eager and compiled against MarianMT; failed where a part failed."""
    data = read_json(out / f"bench-{STEPS_STAGE}.json")
    check = {"check": f"benchmark {STEPS_STAGE}", "kind": "benchmark", "stage": STEPS_RUN_STAGE}
    if data is None:
        seconds = stage.get("seconds", 0) if stage else 0
        return {**check, "seconds": seconds, "outcome": "not run", "message": stage_reason(stage), "figures": {}}
    command = f"python benchmarks/gpu/steps.py --device {data['device']} --dtype {data['dtype']}"
    if "parts" in data:
        command += " --parts " + " ".join(data["parts"])
    figures = {"command": command}
    if "shapes" in data:
        shapes = data["shapes"]
        for name, timings in {**shapes["variants"], "compiled": shapes["compiled"]}.items():
            figures[f"{name} step_ms"] = {part: timings[part]["step_ms"] for part in ("new shapes", "seen shapes")}
        for name, timings in shapes["variants"].items():
            figures[f"{name} ops"] = timings["profile"]
        figures["graphs_compiled"] = shapes["compiled"]["graphs_compiled"]
        figures["shape_ratios"] = shapes["ratios"]
    for model, paper in data.get("paper", {}).items():
        runs = {label: entry for label, entry in paper.items() if label not in ("batch", "ratios")}
        figures[f"{model} tokens_per_s"] = {label: entry["tokens_per_s"] for label, entry in runs.items()}
        figures[f"{model} mfu"] = {label: entry["mfu"] for label, entry in runs.items()}
        figures[f"{model} ratios"] = paper["ratios"]
    errors = (
        data["errors"] if data["complete"] else [*data["errors"], f"not every part measured: {stage_reason(stage)}"]
    )
    return {
        **check,
        "seconds": data["seconds"],
        "outcome": "failed" if errors else "passed",
        "message": "; ".join(errors),
        "figures": figures,
        "table": data["table"],
    }


def wall_seconds(stages: list[dict]) -> int:
    """From the first stage's start to the last one's end (on a CPU, run.sh runs two lanes of stages at once)."""
    timed = [stage for stage in stages if "started" in stage]
    if not timed:
        return 0
    return max(stage["started"] + stage["seconds"] for stage in timed) - min(stage["started"] for stage in timed)


def build(out: Path) -> dict:
    stages = {entry["name"]: entry for entry in read_lines(out / "stages.jsonl")}
    records = {}
    for entry in read_lines(out / "records.jsonl"):
        records[entry["nodeid"]] = entry
    outcomes = junit_outcomes(out)
    nodeids = collected(out)
    nodeids += [nodeid for nodeid in [*outcomes, *records] if nodeid not in nodeids]
    checks = []
    for nodeid in nodeids:
        stage = stage_of(nodeid)
        if stage not in stages and "tests-all" in stages:  # the dry run's one pytest process
            stage = "tests-all"
        result = outcomes.get(nodeid)
        record = records.get(nodeid, {})
        if result is None:
            result = {"outcome": "not run", "message": stage_reason(stages.get(stage)), "seconds": 0}
        checks.append(
            {
                "check": nodeid,
                "kind": "test",
                "stage": stage,
                **result,
                "figures": record.get("figures", {}),
            }
        )
    checks += [benchmark_check(out, name, stages.get(stage)) for name, stage in BENCH_STAGES.items()]
    checks.append(steps_check(out, stages.get(STEPS_RUN_STAGE)))
    counts = {}
    for check in checks:
        counts[check["outcome"]] = counts.get(check["outcome"], 0) + 1
    report = {
        "environment": read_json(out / "environment.json", {}),
        "install": read_json(out / "install.json"),
        "stages": list(stages.values()),
        "checks": checks,
        "counts": counts,
        "all_passed": bool(checks) and all(check["outcome"] == "passed" for check in checks),
        "seconds": wall_seconds(list(stages.values())),
    }
    (out / "gpu-report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (out / "gpu-report.md").write_text(markdown(report))
    return report


# ---------------------------------------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------------------------------------


def short(value, depth: int = 0) -> str:
    """A figure in a table cell: numbers to 4 significant digits, long lists elided, nested dicts inline."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {short(item, depth + 1)}" for key, item in value.items()) + "}"
    if isinstance(value, list):
        items = [short(item, depth + 1) for item in value]
        if len(items) > 6:
            items = [*items[:3], "...", *items[-2:]]
        return "[" + ", ".join(items) + "]"
    return str(value)


def cell(text: str, limit: int = 600) -> str:
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def figures_cell(check: dict) -> str:
    figures = {key: value for key, value in check["figures"].items() if key != "command"}
    text = "; ".join(f"{key} {short(value)}" for key, value in figures.items())
    if check["outcome"] not in ("passed",) and check.get("message"):
        text = f"**{check['message'].splitlines()[0][:300]}** " + text
    return cell(text)


def markdown(report: dict) -> str:
    facts = report["environment"]
    gpu = facts.get("gpu")
    device = (
        f"{gpu['name']} (compute {gpu['capability']}, {gpu['memory_gib']} GiB, driver {gpu['driver']}, "
        f"CUDA {facts.get('torch_cuda')}, cuDNN {gpu['cudnn']}, NCCL {gpu['nccl']})"
        if gpu
        else f"{facts.get('device', '?')} (no GPU)"
    )
    title = gpu["name"] if gpu else "CPU dry run"
    versions = " · ".join(f"{name} {value}" for name, value in facts.get("versions", {}).items() if value)
    missing = ", ".join(name for name, value in facts.get("versions", {}).items() if not value)
    counts = ", ".join(f"{count} {outcome}" for outcome, count in sorted(report["counts"].items()))
    lines = [
        f"# GPU run: {title}, {facts.get('date', '?')}",
        "",
        f"{len(report['checks'])} checks: {counts}. The stages took {report['seconds']:.0f} s.",
        "",
        "| | |",
        "|---|---|",
        f"| device | {cell(device)} |",
        f"| shapes | {'tiny (the dry run)' if facts.get('tiny') else 'Table 3 base and big, the small preset'} |",
        f"| Python | {facts.get('python')} ({facts.get('executable')}), {facts.get('platform')} |",
        f"| versions | {cell(versions)}{f' (not installed: {missing})' if missing else ''} |",
        f"| commit | {facts.get('commit', 'not a git checkout')} |",
    ]
    install = report.get("install")
    if install:
        left_out = ", ".join(entry["name"] for entry in install.get("left_out", [])) or "nothing"
        lines.append(
            f"| carried wheels | installed: {install.get('ok')}, resolved against the image: "
            f"{install.get('resolved')}; left out when fetched: {left_out}; pip check: "
            f"{cell(install.get('pip_check') or '')} |"
        )
    lines += ["", "## Checks", "", "| check | outcome | seconds | figures |", "|---|---|---:|---|"]
    for check in report["checks"]:
        name = check["check"].removeprefix("tests/gpu/")
        lines.append(f"| {cell(name)} | {check['outcome']} | {check.get('seconds', 0):.1f} | {figures_cell(check)} |")
    lines += ["", "## Speed", ""]
    for check in report["checks"]:
        if check["kind"] == "benchmark":
            lines += [f"### {check['check']}", ""]
            if "table" in check:
                lines += [f"`{check['figures']['command']}`", "", "```text", check["table"], "```", ""]
            else:
                lines += [f"not run: {check['message']}", ""]
    lines += ["## Stages", "", "| stage | status | seconds | limit | log |", "|---|---|---:|---:|---|"]
    for stage in report["stages"]:
        reason = f" ({stage['reason']})" if stage.get("reason") else ""
        lines.append(
            f"| {stage['name']} | {stage['status']}{reason} | {stage.get('seconds', 0)} | {stage.get('limit', '')} | "
            f"{stage.get('log', '')} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    facts = commands.add_parser("environment", help="record the machine and versions in OUT/environment.json")
    facts.add_argument("out", type=Path)
    facts.add_argument("--device", default="cuda")
    facts.add_argument("--tiny", action="store_true")
    gather = commands.add_parser("build", help="write OUT/gpu-report.json and OUT/gpu-report.md")
    gather.add_argument("out", type=Path)
    arguments = parser.parse_args(argv)
    if arguments.command == "environment":
        environment(arguments.out, arguments.device, arguments.tiny)
        return 0
    report = build(arguments.out)
    print(f"report: {arguments.out / 'gpu-report.md'} ({report['counts']})")
    return 0 if report["all_passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
