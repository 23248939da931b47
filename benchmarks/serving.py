"""vaswani-serve under load and under abuse, the command serving a trained model in a process of its own on
127.0.0.1.

Load (the default): Multi30k test2016's sentences one a request, one client at a time and then many at once;
requests/s, p50/p95 latency, batches formed and the throughput ratio. The library is benchmarks/speed/serving.py.

Abuse (--abuse): rounds a served model meets in the open, each bounded in requests and in seconds
(--round_seconds), at 127.0.0.1 only: many rounds of many clients sending valid requests of every kind, a 10 MB body,
texts over the character limit, the attention of a long text, malformed bodies, a client gone before its answer, a
flood beyond the queue, keys, rates and time limits. For each: requests/s, p50/p95/p99 latency, failures by status,
/health's latency meanwhile and the server's memory before, at its peak and after. A round whose flag
`vaswani-serve --help` lacks runs where it can and says what the server did, or is reported "not supported by this
server": the same harness measures a server from before the flags (--server_pythonpath: another checkout's). The
library is benchmarks/speed/abuse.py.

python benchmarks/serving.py --model runs/small/averaged                    # 200 requests, 50 clients
python benchmarks/serving.py --model runs/small/averaged --requests 50 --clients 10 --json serving.json
python benchmarks/serving.py --model runs/small/averaged --abuse            # the load, then every abuse round
python benchmarks/serving.py --model runs/small/averaged --only mixed flood --short   # two rounds, the test's sizes
python benchmarks/serving.py --model runs/small/averaged --abuse --server_pythonpath ../before  # its server
"""

import argparse
import json
import signal
import sys
import tempfile
from dataclasses import replace
from datetime import date
from pathlib import Path

# This folder's library: the measuring tools are not installed.
from speed import abuse, serving
from speed.measure import positive
from speed.report import machine

from modeling_vaswani.toolkit.outputs import write_text

PARTS = ("throughput", *abuse.ROUNDS)


def parse_arguments(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="a trained checkpoint (or exported) folder")
    parser.add_argument("--requests", type=positive(int), default=200, help="test2016 sentences, one a request")
    parser.add_argument("--clients", type=positive(int), default=50, help="clients at once in the second measurement")
    parser.add_argument("--abuse", action="store_true", help="after the load, every abuse round")
    parser.add_argument(
        "--only", nargs="+", choices=PARTS, metavar="PART", help=f"run these alone, of: {', '.join(PARTS)}"
    )
    parser.add_argument("--short", action="store_true", help="the abuse rounds at the test suite's sizes (a minute)")
    parser.add_argument("--abuse_clients", type=positive(int), help="clients at once in the mixed round (default 50)")
    parser.add_argument("--abuse_rounds", type=positive(int), help="rounds of clients in mixed, malformed and flood")
    parser.add_argument("--round_seconds", type=positive(float), help="each abuse round's time limit (default 60 s)")
    parser.add_argument(
        "--server_pythonpath",
        help="put this folder first on the server's PYTHONPATH (a worktree of another commit, for a before/after)",
    )
    parser.add_argument("--json", type=Path, help="also write the report (with every translation) to this JSON file")
    arguments = parser.parse_args(argv)
    if not (arguments.model / "config.json").is_file():
        parser.error(f"--model {arguments.model}: no config.json there; expected a trained checkpoint folder")
    return arguments


def plan_of(arguments: argparse.Namespace) -> abuse.Plan:
    plan = abuse.Plan.short() if arguments.short else abuse.Plan()
    chosen = {"clients": arguments.abuse_clients, "rounds": arguments.abuse_rounds}
    chosen["round_seconds"] = arguments.round_seconds
    return replace(plan, **{name: value for name, value in chosen.items() if value is not None})


def main(argv=None) -> dict:
    arguments = parse_arguments(argv)
    # Stopped (a test's time limit, a CI job cancelled): the servers this run started are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    parts = arguments.only or (PARTS if arguments.abuse else ("throughput",))
    model = arguments.model.resolve()
    progress = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    with tempfile.TemporaryDirectory() as folder:
        if "throughput" in parts:
            report = serving.run_benchmark(
                model,
                arguments.requests,
                arguments.clients,
                Path(folder) / "server.log",
                progress=progress,
                pythonpath=arguments.server_pythonpath,
            )
        else:
            report = {"date": date.today().isoformat(), "machine": machine(), "model": str(model)}
        rounds = [part for part in parts if part in abuse.ROUNDS]
        if rounds:
            report["abuse"] = abuse.run_abuse(
                model, Path(folder), plan_of(arguments), rounds, arguments.server_pythonpath, progress
            )
    tables = [serving.format_table(report)] if "throughput" in parts else []
    if "abuse" in report:
        tables.append(abuse.format_abuse_table(report["abuse"]))
    print("\n\n".join(tables))
    if arguments.json:
        write_text(arguments.json, json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
