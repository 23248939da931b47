"""vaswani-serve under load: the command serving a trained model in a process of its own, Multi30k test2016's
sentences one a request, one client at a time and then many at once; requests/s, p50/p95 latency, batches formed and
the throughput ratio. The library is benchmarks/speed/serving.py.

python benchmarks/serving.py --model runs/small/averaged                    # 200 requests, 50 clients
python benchmarks/serving.py --model runs/small/averaged --requests 50 --clients 10 --json serving.json
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

# This folder's library: the measuring tools are not installed.
from speed import serving
from speed.measure import positive

from modeling_vaswani.toolkit.outputs import write_text


def parse_arguments(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="a trained checkpoint (or exported) folder")
    parser.add_argument("--requests", type=positive(int), default=200, help="test2016 sentences, one a request")
    parser.add_argument("--clients", type=positive(int), default=50, help="clients at once in the second measurement")
    parser.add_argument("--json", type=Path, help="also write the report (with every translation) to this JSON file")
    arguments = parser.parse_args(argv)
    if not (arguments.model / "config.json").is_file():
        parser.error(f"--model {arguments.model}: no config.json there; expected a trained checkpoint folder")
    return arguments


def main(argv=None) -> dict:
    arguments = parse_arguments(argv)
    with tempfile.TemporaryDirectory() as folder:
        report = serving.run_benchmark(
            arguments.model.resolve(),
            arguments.requests,
            arguments.clients,
            Path(folder) / "server.log",
            progress=lambda line: print(line, file=sys.stderr, flush=True),
        )
    print(serving.format_table(report))
    if arguments.json:
        write_text(arguments.json, json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
