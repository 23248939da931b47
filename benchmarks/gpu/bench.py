"""The speed benchmark's measurements for the GPU run (benchmarks/gpu/run.sh), one stage a call, each the same as a
`benchmarks/benchmark.py` command (printed, and stored in the JSON): the library's run_benchmark with its worker
processes (`benchmark.py --worker`), its QUICK repetitions (one round), and here a tiny network for the CPU dry run.

    python benchmarks/gpu/bench.py training-base --device cuda --dtype bfloat16 --json OUT/bench-training-base.json

Stages, at the paper's batch for training (768 sentences of 32 + 32 tokens: 24,576 + 24,576 tokens a step):
- training-base, training-big: tokens/s, model FLOPs utilisation against the same run's measured matmul rate in the
  dtype (and float32), peak memory; this model and MarianMT of the same shapes and weights;
- generation: greedy and beam 4 at 128 sentences of 32 source tokens and exactly 32 new tokens, this model, MarianMT
  and CTranslate2 (its conversion of the Marian copy and our own export) where CTranslate2 is installed.
"""

import argparse
import dataclasses
import json
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCHMARKS))  # the measuring tools are not installed

from speed import measure, models, report, runner  # noqa: E402

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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stage", choices=list(STAGES))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16", choices=list(measure.DTYPES))
    parser.add_argument("--tiny", action="store_true", help="a tiny network (the CPU dry run)")
    parser.add_argument("--json", type=Path, required=True)
    arguments = parser.parse_args(argv)
    measure.check_device(arguments.device)
    shapes, implementations = plan(arguments.stage, arguments.tiny)
    command = equivalent_command(arguments.stage, arguments.device, arguments.dtype, implementations)
    print(("tiny network; otherwise " if arguments.tiny else "") + f"the same as: {command}", flush=True)
    results = runner.run_benchmark(
        BENCHMARKS / "benchmark.py",
        device=arguments.device,
        dtype=arguments.dtype,
        repetitions=measure.QUICK,
        implementations=implementations,
        phases=STAGES[arguments.stage]["phases"],
        shapes=shapes,
        progress=lambda line: print(line, flush=True),
    )
    table = report.format_table(results)
    print(table)
    output = {
        "stage": arguments.stage,
        "tiny": arguments.tiny,
        "command": command,
        "shapes": dataclasses.asdict(shapes),
        "table": table,
        "report": results,
    }
    arguments.json.write_text(json.dumps(output, indent=2) + "\n")
    failures = [
        f"{name} {phase}: {result['error']}"
        for name, phases in results["results"].items()
        for phase, result in phases.items()
        if "error" in result
    ]
    for failure in failures:
        print(f"FAILED {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
