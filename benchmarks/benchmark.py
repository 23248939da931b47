"""Training and generation speed of this model next to transformers' MarianMTModel and CTranslate2 (converted from
the Marian copy, and this model's own export in float32 and int8), in one run.

The same shapes (by default the base model: 6+6 layers, d_model 512, 8 heads, d_ff 2048, vocabulary 32000; batch
32) and the same random weights in all; each implementation and phase in a process of its own; the machine's
matmul rate as the ceiling. The whole list runs in rounds, so that each round compares the implementations under the
same machine load. Generation and latency measure the per-step cost at fixed length: exactly 32 new tokens a
sentence in every implementation (</s> suppressed until then), not the decoding of real text.

Every process starts as the vaswani-* commands do (modeling_vaswani/toolkit/runtime.py's apply_process_settings():
glibc's malloc keeps the memory it frees); --plain sets nothing, which is what a user's own program gets without
calling keep_freed_memory().

python benchmarks/benchmark.py --quick --json benchmark.json   # a few minutes on a small CPU
python benchmarks/benchmark.py                                 # three interleaved rounds: the numbers to publish
python benchmarks/benchmark.py --plain                         # a user's own program without keep_freed_memory()
python benchmarks/benchmark.py --device cuda --dtype bfloat16 --model big --batch 768 --phases training
"""

import argparse
import dataclasses
import json
from pathlib import Path

# This folder's library: the measuring tools are not installed.
from speed import measure, models, phases, report, runner

from modeling_vaswani.toolkit.outputs import write_text


def choice(check):
    """An argparse type from one of the library's checks, so that a bad value is refused with the check's reason."""

    def parse(text: str) -> str:
        try:
            return check(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return parse


def parse_arguments(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, the same shapes (under 3 minutes)")
    parser.add_argument("--json", type=Path, help="also write the results, ratios and machine to this JSON file")
    parser.add_argument("--device", type=choice(measure.check_device), default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument(
        "--dtype",
        type=choice(measure.check_dtype),
        default="float32",
        help=f"one of {', '.join(measure.DTYPES)} (training: autocast over float32 weights)",
    )
    parser.add_argument(
        "--implementations",
        nargs="+",
        choices=models.IMPLEMENTATIONS,
        default=list(models.IMPLEMENTATIONS),
        help="which to measure (default: all; ctranslate2 is skipped when not installed)",
    )
    parser.add_argument("--phases", nargs="+", choices=phases.PHASES, default=list(phases.PHASES), help="default: all")
    parser.add_argument(
        "--rounds", type=int, help="times the whole list of measurements runs, interleaved (default: 3, --quick: 1)"
    )
    parser.add_argument("--model", choices=models.MODELS, default="base", help="Table 3's base or big (default: base)")
    parser.add_argument(
        "--batch", type=int, default=32, help="sentences a batch, training and generation (default: 32; latency: 1)"
    )
    parser.add_argument("--threads", type=int, help="CPU threads for torch and CTranslate2 (default: torch's)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    parser.add_argument(
        "--plain",
        action="store_true",
        help="set nothing in the processes: what a user's own program gets without calling keep_freed_memory() "
        "(default: every process starts as the vaswani-* commands do, keeping the memory it frees)",
    )
    # The mode each measurement runs in, in a process of its own; not for users.
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--worker-output", help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    for name in ("threads", "rounds", "batch"):
        if getattr(arguments, name) is not None and getattr(arguments, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(arguments, name)}")
    return arguments


def main(argv=None) -> None:
    arguments = parse_arguments(argv)
    if arguments.worker:
        phases.worker_main(arguments.worker, arguments.worker_output)
        return
    repetitions = measure.QUICK if arguments.quick else measure.FULL
    if arguments.rounds is not None:
        repetitions = dataclasses.replace(repetitions, rounds=arguments.rounds)
    results = runner.run_benchmark(
        Path(__file__).resolve(),
        device=arguments.device,
        dtype=arguments.dtype,
        repetitions=repetitions,
        implementations=arguments.implementations,
        phases=arguments.phases,
        threads=arguments.threads,
        shapes=models.model_shapes(arguments.model, arguments.batch),
        seed=arguments.seed,
        plain=arguments.plain,
    )
    print(report.format_table(results))
    if arguments.json:
        write_text(arguments.json, json.dumps(results, indent=2) + "\n")
        print(f"results written to {arguments.json}")


if __name__ == "__main__":
    main()
