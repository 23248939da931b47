"""The speed benchmark's measurements for the GPU run (benchmarks/gpu/run.sh): one or more stages in one process, each
the same as a `benchmarks/benchmark.py` command (printed, and stored in its JSON): the library's worker processes
(`benchmark.py --worker`, one a measurement), its QUICK repetitions (one round); for the CPU dry run (`--tiny`) a
tiny network, one timed call of each, measured in this process.

    python benchmarks/gpu/bench.py training-base training-big --device cuda --dtype bfloat16 --out OUT
    python benchmarks/gpu/bench.py generation --device cuda --dtype bfloat16 --out OUT

Each stage writes OUT/bench-STAGE.json as soon as it is measured. Stages, at the paper's batch for training (768
sentences of 32 + 32 tokens: 24,576 + 24,576 tokens a step):
- training-base, training-big: tokens/s, model FLOPs utilisation against the matmul rate in the dtype (and float32)
  measured by this process, peak memory; this model and MarianMT of the same shapes and weights;
- generation: greedy and beam 4 at 128 sentences of 32 source tokens and exactly 32 new tokens, this model, MarianMT
  and CTranslate2 (its conversion of the Marian copy and our own export) where CTranslate2 is installed.

What `benchmark.py` would repeat, done once here: the matmul ceilings (two worker processes) are measured once for
all the stages in the call, and only when one of them trains (only training's utilisation uses them); the models of
every stage are prepared while they run, before any timed measurement starts.
"""

import argparse
import dataclasses
import functools
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCHMARKS))  # the measuring tools are not installed

import torch  # noqa: E402
from speed import measure, models, phases, report, runner  # noqa: E402

SCRIPT = BENCHMARKS / "benchmark.py"  # the command whose --worker mode runs each measurement
STAGES = {
    "training-base": {"model": "base", "batch": 768, "phases": ["training"], "implementations": ["vaswani", "marian"]},
    "training-big": {"model": "big", "batch": 768, "phases": ["training"], "implementations": ["vaswani", "marian"]},
    "generation": {
        "model": "base",
        "batch": 128,
        "phases": ["greedy", "beam"],
        "implementations": list(models.IMPLEMENTATIONS),
    },
}
REPETITIONS = measure.QUICK
# The dry run's: one timed call of each, no warm-up (its figures mean nothing; its run is what is checked).
TINY_REPETITIONS = measure.Repetitions(
    warmup=dict.fromkeys(REPETITIONS.warmup, 0), timed=dict.fromkeys(REPETITIONS.timed, 1), rounds=1
)
SEED = 0
NO_CEILING = "ceiling: not measured in this stage (only training's model FLOPs utilisation uses it)"

# The dry run's network: the same code, seconds on a CPU.
TINY = {"vocab_size": 128, "d_model": 32, "layers": 1, "heads": 2, "d_ff": 64, "source_length": 8,
        "target_length": 8, "new_tokens": 4}  # fmt: skip
TINY_BATCH = 4
TINY_IMPLEMENTATIONS = ["vaswani", "marian"]  # CTranslate2 has its own tests (tests/benchmarks/test_benchmark.py)


def plan(stage: str, tiny: bool) -> tuple[models.Shapes, list[str]]:
    settings = STAGES[stage]
    if tiny:
        shapes = models.Shapes(**TINY, batch=TINY_BATCH)
        implementations = [name for name in settings["implementations"] if name in TINY_IMPLEMENTATIONS]
        return shapes, implementations
    return models.model_shapes(settings["model"], settings["batch"]), settings["implementations"]


def equivalent_command(stage: str, device: str, dtype: str, implementations: list[str]) -> str:
    settings = STAGES[stage]
    return (
        f"python benchmarks/benchmark.py --quick --device {device} --dtype {dtype} --model {settings['model']} "
        f"--batch {settings['batch']} --phases {' '.join(settings['phases'])} "
        f"--implementations {' '.join(implementations)}"
    )


def needs_ceiling(stages: list[str]) -> bool:
    return any("training" in STAGES[stage]["phases"] for stage in stages)


def worker_spec(implementation, phase, device, dtype, shapes, folder, threads: int, tiny: bool) -> dict:
    """What `runner.run_benchmark` gives a worker process for one measurement."""
    repetitions = TINY_REPETITIONS if tiny else REPETITIONS
    return {
        "implementation": implementation,
        "phase": phase,
        "device": device,
        "dtype": dtype,
        "threads": threads,
        "shapes": dataclasses.asdict(shapes),
        "folder": str(folder or ""),
        "warmup": repetitions.warmup[phase],
        "repetitions": repetitions.timed[phase],
        "plain": False,
    }


def measured(spec: dict, workdir: Path, tiny: bool) -> dict:
    """One measurement: in a worker process, as `runner.run_benchmark` runs it; in the dry run in this process, as
    the worker would run it (`phases.run_phase`), since a process start a measurement was most of the dry run's time
    (the worker processes are tested by tests/benchmarks/test_benchmark.py). A failure comes back as {"error": ...}."""
    if not tiny:
        return runner.run_worker(SCRIPT, spec, workdir)
    try:
        return phases.run_phase(spec)
    except Exception as error:  # as run_worker reports a worker's failure: the other measurements go on
        return {"error": f"{type(error).__name__}: {error}"}


def measure_ceilings(device: str, dtype: str, threads: int, workdir: Path, tiny: bool, progress) -> dict:
    """The matmul rate in float32 and in `dtype`, each in a worker process, as `runner.run_benchmark` measures it."""
    ceilings = {}
    for job_dtype in dict.fromkeys(["float32", dtype]):
        start = time.perf_counter()
        spec = worker_spec("ceiling", "matmul", device, job_dtype, models.Shapes(), None, threads, tiny)
        ceilings[job_dtype] = measured(spec, workdir, tiny)
        line = report.summary("matmul", ceilings[job_dtype])
        progress(f"ceiling matmul {job_dtype}: {line} ({time.perf_counter() - start:.0f} s)")
    return ceilings


def measure_stage(stage, shapes, implementations, folders, ceilings, device, dtype, threads, workdir, tiny, progress):
    """One round of the stage's measurements, each in its own worker process, as `runner.run_benchmark` runs them
    (within a phase, the implementations one right after another); the report as the library builds it."""
    results = {"ceiling": ceilings}
    jobs = [(implementation, phase) for phase in STAGES[stage]["phases"] for implementation in implementations]
    for number, (implementation, phase) in enumerate(jobs, start=1):
        label = f"[{stage} {number}/{len(jobs)}] {implementation} {phase}"
        if reason := runner.skipped_reason(implementation, phase, device, dtype):
            results.setdefault(implementation, {})[phase] = {"skipped": reason}
            progress(f"{label}: skipped ({reason})")
            continue
        start = time.perf_counter()
        spec = worker_spec(implementation, phase, device, dtype, shapes, folders.get(implementation), threads, tiny)
        results.setdefault(implementation, {})[phase] = result = measured(spec, workdir, tiny)
        progress(f"{label}: {report.summary(phase, result)} ({time.perf_counter() - start:.0f} s)")
    built = report.build_report([results], shapes, device, dtype, threads, TINY_REPETITIONS if tiny else REPETITIONS)
    return {**built, "plain": False}


def table_of(results: dict) -> str:
    table = report.format_table(results)
    if results["ceiling"]:
        return table
    return "\n".join(NO_CEILING if line.startswith("ceiling (") else line for line in table.splitlines())


def prepare(plans: dict, device: str, workdir: Path, progress) -> tuple[dict, dict]:
    """Every stage's models (`runner.run_benchmark`'s preparation): their folders and the seconds each took."""
    folders, seconds = {}, {}
    for stage, (shapes, implementations) in plans.items():
        start = time.perf_counter()
        with_ctranslate2 = bool(models.CTRANSLATE2.keys() & set(implementations))
        with_ctranslate2 = with_ctranslate2 and not models.ctranslate2_unavailable(device)
        folders[stage] = models.prepare_models(shapes, workdir / stage, SEED, with_ctranslate2)
        seconds[stage] = time.perf_counter() - start
        extra = ", CTranslate2 conversion" * with_ctranslate2
        progress(f"[{stage}] models prepared (same random weights{extra}; {seconds[stage]:.0f} s)")
    return folders, seconds


def run(stages: list[str], device: str, dtype: str, tiny: bool, out: Path, progress=print) -> list[str]:
    """Measures `stages` in order, writing OUT/bench-STAGE.json for each; returns the failed measurements."""
    threads = torch.get_num_threads()
    plans = {stage: plan(stage, tiny) for stage in stages}
    with tempfile.TemporaryDirectory(prefix="vaswani-gpu-bench-") as workdir:
        workdir = Path(workdir)
        ceilings = {}
        if needs_ceiling(stages):
            # The ceilings' processes (GPU work) run while this one prepares every stage's models (CPU work).
            (workdir / "ceiling").mkdir()
            with ThreadPoolExecutor(max_workers=1) as pool:
                pending = pool.submit(measure_ceilings, device, dtype, threads, workdir / "ceiling", tiny, progress)
                folders, prepared_s = prepare(plans, device, workdir, progress)
                ceilings = pending.result()
        else:
            folders, prepared_s = prepare(plans, device, workdir, progress)
        failures = [f"ceiling {name}: {result['error']}" for name, result in ceilings.items() if "error" in result]
        for stage, (shapes, implementations) in plans.items():
            start = time.perf_counter()
            command = equivalent_command(stage, device, dtype, implementations)
            progress(f"[{stage}] " + ("tiny network; otherwise " if tiny else "") + f"the same as: {command}")
            results = measure_stage(
                stage,
                shapes,
                implementations,
                folders[stage],
                ceilings,
                device,
                dtype,
                threads,
                workdir,
                tiny,
                progress,
            )
            table = table_of(results)
            progress(table)
            output = {
                "stage": stage,
                "tiny": tiny,
                "command": command,
                "shapes": dataclasses.asdict(shapes),
                "seconds": round(prepared_s[stage] + time.perf_counter() - start, 1),  # the ceilings' not included
                "ceiling": "measured once for this call's stages: " + ", ".join(stages) if ceilings else NO_CEILING,
                "table": table,
                "report": results,
            }
            (out / f"bench-{stage}.json").write_text(json.dumps(output, indent=2) + "\n")
            failures += [
                f"{stage}: {name} {phase}: {result['error']}"
                for name, phases in results["results"].items()
                for phase, result in phases.items()
                if "error" in result
            ]
    return failures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stages", nargs="+", choices=list(STAGES), metavar="STAGE", help=", ".join(STAGES))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16", choices=list(measure.DTYPES))
    parser.add_argument("--tiny", action="store_true", help="a tiny network (the CPU dry run)")
    parser.add_argument("--out", type=Path, required=True, help="the folder for bench-STAGE.json")
    arguments = parser.parse_args(argv)
    measure.check_device(arguments.device)
    arguments.out.mkdir(parents=True, exist_ok=True)
    stages = list(dict.fromkeys(arguments.stages))
    progress = functools.partial(print, flush=True)
    failures = run(stages, arguments.device, arguments.dtype, arguments.tiny, arguments.out, progress)
    for failure in failures:
        print(f"FAILED {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
