"""Translation speed on real text: a trained model translating Multi30k test2016 and WMT newstest2013 with each engine
as a user runs it (PyTorch with the paper's decoding and with transformers' own, MarianMT on the same weights, our
CTranslate2 export in float32 and int8), in one run, each measurement in a process of its own. Reports sentences/s,
target tokens/s, sacreBLEU, chrF2 and the ratios; the library is benchmarks/speed/real_text.py. For the per-step cost
at a fixed length, see benchmarks/benchmark.py.

python benchmarks/real_text.py --model runs/small/averaged                  # every engine, decoding, batch: long
python benchmarks/real_text.py --model runs/small/averaged --quick          # test2016, 200 sentences, batch 32 and 1
python benchmarks/real_text.py --train_minutes 10 --json real_text.json     # trains the model first (vaswani-train)
"""

import argparse
import json
import sys
from pathlib import Path

# This folder's library: the measuring tools are not installed.
from speed import real_text
from speed.measure import positive

from modeling_vaswani.toolkit.outputs import write_text

QUICK = {"test_sets": ["test2016"], "sentences": 200, "batches": ["sentences:32", "sentences:1"]}


def batch_type(text: str) -> str:
    try:
        return real_text.check_batch(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def parse_arguments(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--model", type=Path, help="a trained checkpoint folder with its tokenizer")
    source.add_argument(
        "--train_minutes",
        type=positive(float),
        help="train one first for this many minutes (vaswani-train --output_dir real_text_model)",
    )
    parser.add_argument("--quick", action="store_true", help=f"fewer measurements: {QUICK}")
    parser.add_argument("--test_sets", nargs="+", choices=real_text.TEST_SETS, help="default: both")
    parser.add_argument("--engines", nargs="+", choices=real_text.ENGINES, default=list(real_text.ENGINES))
    parser.add_argument("--decodings", nargs="+", choices=list(real_text.DECODINGS), default=list(real_text.DECODINGS))
    parser.add_argument(
        "--batches",
        nargs="+",
        type=batch_type,
        help=f"sentences:N or tokens:N (default: {' '.join(real_text.BATCHES)})",
    )
    parser.add_argument(
        "--layouts",
        nargs="+",
        choices=real_text.LAYOUTS,
        default=["lines"],
        help=f"lines: one sentence a line; paragraphs: {real_text.PARAGRAPH} sentences a line, split again",
    )
    parser.add_argument(
        "--full_stops",
        action="store_true",
        help="end each sentence that has no final punctuation with a full stop, in every layout",
    )
    parser.add_argument("--sentences", type=positive(int), help="the first N sentences of each set (default: all)")
    parser.add_argument("--threads", type=positive(int), help="CPU threads for every engine (default: torch's)")
    parser.add_argument("--rounds", type=positive(int), default=1, help="times the whole list runs (medians)")
    parser.add_argument("--json", type=Path, help="also write the report to this JSON file")
    # The mode each measurement runs in, in a process of its own; not for users.
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--worker-output", help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    if arguments.worker is None and arguments.model is None and arguments.train_minutes is None:
        parser.error("give --model FOLDER (a trained checkpoint) or --train_minutes N (train one first)")
    if arguments.model is not None and not (arguments.model / "config.json").is_file():
        parser.error(f"--model {arguments.model}: no config.json there; expected a trained checkpoint folder")
    return arguments


def main(argv=None) -> dict | None:
    arguments = parse_arguments(argv)
    if arguments.worker is not None:
        real_text.worker_main(arguments.worker, arguments.worker_output)
        return None
    quick = QUICK if arguments.quick else {}
    model_dir = arguments.model
    if model_dir is None:
        model_dir = real_text.train_model(Path("real_text_model"), arguments.train_minutes)
    report = real_text.run_benchmark(
        Path(__file__).resolve(),
        model_dir.resolve(),
        test_sets=arguments.test_sets or quick.get("test_sets", real_text.TEST_SETS),
        engines=arguments.engines,
        decodings=arguments.decodings,
        batches=arguments.batches or quick.get("batches", real_text.BATCHES),
        layouts=arguments.layouts,
        full_stops=arguments.full_stops,
        sentences=arguments.sentences or quick.get("sentences"),
        threads=arguments.threads,
        rounds=arguments.rounds,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(real_text.format_table(report))
    if arguments.json:
        write_text(arguments.json, json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
