"""Before and after a change, in one run: vaswani-translate from two checkouts of this repository, alternated round
by round on the same machine, on a real test set; reports sentences/s of each, their ratio, and whether the
translations are byte for byte the same (a change that only restructures code must change neither).

    python benchmarks/trees.py --before ../main --after . --model runs/small/averaged
    python benchmarks/trees.py --before ../main --after . --model runs/small/averaged --flags "--num_beams 1"

Each translation is a fresh process, as a user runs the command (loading the model included); the checkout is put
first on PYTHONPATH, so both use this environment's libraries.
"""

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from speed.report import machine

TEST_SET = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k" / "test_2016_flickr.en"


def translate(tree: Path, model: str, source: Path, output: Path, flags: list[str]) -> float:
    """Seconds vaswani-translate from `tree` takes to translate `source` into `output`."""
    program = "import sys; from modeling_vaswani.toolkit.cli.translate import main; main(sys.argv[1:])"
    command = [sys.executable, "-c", program, model, "--input", str(source), "--output", str(output), *flags]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")])}
    start = time.perf_counter()
    subprocess.run(command, env=environment, check=True, capture_output=True)
    return time.perf_counter() - start


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, required=True, help="the checkout before the change")
    parser.add_argument("--after", type=Path, required=True, help="the checkout after it")
    parser.add_argument("--model", required=True, help="a trained checkpoint folder")
    parser.add_argument("--source", type=Path, default=TEST_SET, help="one sentence a line (default: test2016)")
    parser.add_argument("--flags", default="--max_tokens 2000", help="vaswani-translate's flags, one string")
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args(argv)
    flags = shlex.split(arguments.flags)
    sentences = len(arguments.source.read_text(encoding="utf-8").splitlines())
    seconds = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as folder:
        outputs = {name: Path(folder, f"{name}.txt") for name in seconds}
        for round_number in range(arguments.rounds):
            order = ("before", "after") if round_number % 2 == 0 else ("after", "before")  # no side always first
            for name in order:
                tree = arguments.before if name == "before" else arguments.after
                seconds[name].append(translate(tree, arguments.model, arguments.source, outputs[name], flags))
            print(f"round {round_number + 1}: " + ", ".join(f"{n} {seconds[n][-1]:.1f} s" for n in seconds))
        same = outputs["before"].read_bytes() == outputs["after"].read_bytes()
    speed = {name: sentences / statistics.median(values) for name, values in seconds.items()}
    report = {
        "machine": machine(),
        "flags": flags,
        "sentences": sentences,
        "seconds": seconds,
        "sentences_per_second": speed,
        "after_over_before": speed["after"] / speed["before"],
        "identical_translations": same,
    }
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
