"""The run: the list of measurements, each in a fresh process of the benchmark's command (`--worker`), in rounds."""

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch

from .measure import FULL, Repetitions
from .models import CTRANSLATE2, IMPLEMENTATIONS, Shapes, ctranslate2_unavailable, prepare_models
from .phases import PHASES
from .report import build_report, summary

WORKER_TIMEOUT_S = 3600


def run_worker(script: Path, spec: dict, folder: Path) -> dict:
    """Runs `spec` in a fresh process of `script --worker`; a failure comes back as {"error": ...}."""
    output = folder / "result.json"
    output.unlink(missing_ok=True)
    command = [sys.executable, str(script), "--worker", json.dumps(spec), "--worker-output", str(output)]
    # OpenMP pools sized like torch's, so that CTranslate2 and torch use the same cores.
    env = {**os.environ, "OMP_NUM_THREADS": str(spec["threads"])}
    try:
        process = subprocess.run(command, capture_output=True, text=True, env=env, timeout=WORKER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {WORKER_TIMEOUT_S} s"}
    if process.returncode != 0:
        return {"error": process.stderr.strip().splitlines()[-1] if process.stderr.strip() else "no output"}
    return json.loads(output.read_text())


def skipped_reason(implementation: str, phase: str, device: str, dtype: str) -> str | None:
    if implementation not in CTRANSLATE2:
        return None
    if phase == "training":
        return "CTranslate2 is an inference engine"
    return ctranslate2_unavailable(device, CTRANSLATE2[implementation] or dtype)


def run_benchmark(
    script: Path,
    device: str = "cpu",
    dtype: str = "float32",
    repetitions: Repetitions = FULL,
    implementations=IMPLEMENTATIONS,
    phases=PHASES,
    threads: int | None = None,
    shapes: Shapes | None = None,
    seed: int = 0,
    plain: bool = False,
    progress: Callable[[str], None] = print,
) -> dict:
    """Measures `phases` of `implementations` and the matmul ceiling, each in its own `script --worker` process.

    The list of processes runs `repetitions.rounds` times over. A shared machine drifts (other tenants' load, memory
    bandwidth) over minutes, more than implementations differ; within a round the implementations of a phase run one
    right after another, so each round gives a ratio of ours to each peer under the same conditions. Reported: the
    median over the rounds of each figure and of each ratio. `shapes`: the comparison's (`Shapes()`) when None.
    """
    shapes = shapes or Shapes()
    threads = threads or torch.get_num_threads()
    jobs = [("ceiling", "matmul", "float32")]
    if dtype != "float32":
        jobs.append(("ceiling", "matmul", dtype))
    jobs += [(implementation, phase, dtype) for phase in phases for implementation in implementations]
    jobs = [(round_number, *job) for round_number in range(repetitions.rounds) for job in jobs]
    rounds = [{} for _ in range(repetitions.rounds)]
    with tempfile.TemporaryDirectory(prefix="vaswani-benchmark-") as workdir:
        workdir = Path(workdir)
        with_ctranslate2 = bool(CTRANSLATE2.keys() & set(implementations)) and not ctranslate2_unavailable(device)
        progress(f"preparing the models (same random weights{', CTranslate2 conversion' * with_ctranslate2})")
        folders = prepare_models(shapes, workdir, seed, with_ctranslate2)
        for number, (round_number, implementation, phase, job_dtype) in enumerate(jobs, start=1):
            results = rounds[round_number]
            label = f"[{number}/{len(jobs)}] {implementation} {phase}" + (f" {job_dtype}" if phase == "matmul" else "")
            if reason := skipped_reason(implementation, phase, device, job_dtype):
                results.setdefault(implementation, {})[phase] = {"skipped": reason}
                if round_number == 0:
                    progress(f"{label}: skipped ({reason})")
                continue
            spec = {
                "implementation": implementation,
                "phase": phase,
                "device": device,
                "dtype": job_dtype,
                "threads": threads,
                "shapes": asdict(shapes),
                "folder": str(folders.get(implementation, "")),
                "warmup": repetitions.warmup[phase],
                "repetitions": repetitions.timed[phase],
                "plain": plain,
            }
            start = time.perf_counter()
            result = run_worker(script, spec, workdir)
            key = job_dtype if phase == "matmul" else phase
            results.setdefault(implementation, {})[key] = result
            progress(f"{label}: {summary(phase, result)} ({time.perf_counter() - start:.0f} s)")
    return {**build_report(rounds, shapes, device, dtype, threads, repetitions), "plain": plain}
