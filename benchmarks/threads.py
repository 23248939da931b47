"""The commands' thread rule measured (toolkit/threads.py): the wall time of vaswani-translate, -evaluate and -score
on real test2016 text, each run a process of its own as a user runs it, with the rule (no --threads), with
--threads 1 and with --threads N (torch's default, one a core), the three alternating in a rotating order; on the
machine as it is ("quiet") and with a second CPU-heavy process beside it ("busy": a training-sized matrix product
loop on torch's default threads, as another training job would be). Prints each median and the rule's time over
each fixed count's, with the CPU, its flags and the load average; OMP_NUM_THREADS and MKL_NUM_THREADS are removed
from the commands' environment, so that the rule measures.

python benchmarks/threads.py --model runs/small/averaged
python benchmarks/threads.py --model runs/small/averaged --commands translate --sentences 300 --conditions busy
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from speed.report import machine

from modeling_vaswani.toolkit.data.corpora import multi30k_files, read_sentences
from modeling_vaswani.toolkit.outputs import write_text
from modeling_vaswani.toolkit.threads import USER_SETTINGS

COMMANDS = ("translate", "evaluate", "score")
CONDITIONS = ("quiet", "busy")

# The busy neighbour: 512x512 products on torch's default threads, forever (killed at the end).
NEIGHBOUR = "import torch\na = torch.randn(512, 512)\nwhile True:\n    a = torch.tanh(a @ a)\n"


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def parse_arguments(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="a checkpoint folder with its tokenizer")
    parser.add_argument("--commands", nargs="+", choices=COMMANDS, default=list(COMMANDS))
    parser.add_argument("--conditions", nargs="+", choices=CONDITIONS, default=list(CONDITIONS))
    parser.add_argument("--sentences", type=positive_int, default=100, help="test2016's first N (default 100)")
    parser.add_argument("--rounds", type=positive_int, default=2, help="runs of each setting (medians)")
    parser.add_argument("--json", type=Path, help="also write the report here")
    arguments = parser.parse_args(argv)
    if not (arguments.model / "config.json").is_file():
        parser.error(f"--model {arguments.model}: no config.json there; expected a checkpoint folder")
    return arguments


def test_files(folder: Path, sentences: int) -> dict[str, Path]:
    """test2016's first `sentences` lines, English and German, written into `folder`."""
    files = {}
    for language, path in multi30k_files("test", languages=("en", "de")).items():
        files[language] = folder / f"test.{language}"
        files[language].write_text("\n".join(read_sentences(path)[:sentences]) + "\n", encoding="utf-8")
    return files


def command_line(command: str, model: Path, files: dict[str, Path], folder: Path, threads: int | None) -> list[str]:
    argv = [sys.executable, "-m", f"modeling_vaswani.toolkit.cli.{command}", str(model)]
    if command == "translate":
        argv += ["--input", str(files["en"]), "--output", str(folder / "out.de"), "--no_split_sentences"]
    elif command == "evaluate":
        argv += ["--source", str(files["en"]), "--reference", str(files["de"])]
    else:
        argv += ["--source", str(files["en"]), "--target", str(files["de"]), "--output", str(folder / "scores")]
    return argv + ([] if threads is None else ["--threads", str(threads)])


def wall_seconds(argv: list[str], environment: dict) -> tuple[float, str]:
    """The run's wall time and what it said of its threads (the rule's line on standard error)."""
    started = time.monotonic()
    done = subprocess.run(argv, env=environment, capture_output=True, text=True)
    seconds = time.monotonic() - started
    if done.returncode:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    said = [line for line in done.stderr.splitlines() if " on " in line and "thread" in line]
    return seconds, said[-1] if said else ""


def measure(arguments, files, folder, environment, progress) -> list[dict]:
    """Each command under each setting, `rounds` times, the settings' order rotating each round."""
    default = torch.get_num_threads()
    settings = [None, 1, default]  # None: the rule
    rows = []
    for command in arguments.commands:
        times = {setting: [] for setting in settings}
        said = []
        for round_ in range(arguments.rounds):
            for setting in settings[round_ % 3 :] + settings[: round_ % 3]:
                argv = command_line(command, arguments.model.resolve(), files, folder, setting)
                seconds, line = wall_seconds(argv, environment)
                times[setting].append(seconds)
                if setting is None:
                    said.append(line)
                progress(f"{command} threads={setting or 'rule'}: {seconds:.1f} s {line}")
        medians = {setting: statistics.median(values) for setting, values in times.items()}
        rows.append({
            "command": command, "rule_s": medians[None], "one_s": medians[1], "default_s": medians[default],
            "default_threads": default, "rule_said": said, "runs": {str(k): v for k, v in times.items()},
        })  # fmt: skip
    return rows


def neighbour() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", NEIGHBOUR], stdout=subprocess.DEVNULL)


def main(argv=None) -> dict:
    arguments = parse_arguments(argv)
    environment = {key: value for key, value in os.environ.items() if key not in USER_SETTINGS}
    progress = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine(), "results": {}}
    report["load_average_before"] = os.getloadavg()
    with tempfile.TemporaryDirectory() as folder:
        files = test_files(Path(folder), arguments.sentences)
        for condition in arguments.conditions:
            beside = neighbour() if condition == "busy" else None
            try:
                report["results"][condition] = measure(arguments, files, Path(folder), environment, progress)
            finally:
                if beside is not None:
                    beside.kill()
                    beside.wait()
    report["load_average_after"] = os.getloadavg()
    print(format_report(report, arguments))
    if arguments.json:
        write_text(arguments.json, json.dumps(report, indent=2) + "\n")
    return report


def format_report(report: dict, arguments) -> str:
    facts = report["machine"]
    lines = [
        f"{report['date']}: {facts['cpu']}, {facts['cpu_count']} logical CPUs, {' '.join(facts['cpu_flags'])}; load "
        f"average before {report['load_average_before'][0]:.1f}, after {report['load_average_after'][0]:.1f}",
        f"test2016's first {arguments.sentences} sentences, {arguments.model}, medians of {arguments.rounds}",
        f"{'condition':<9} {'command':<10} {'rule s':>8} {'1 thr s':>8} {'N thr s':>8} {'rule/1':>7} {'rule/N':>7}",
    ]
    for condition, rows in report["results"].items():
        for row in rows:
            lines.append(
                f"{condition:<9} {row['command']:<10} {row['rule_s']:8.1f} {row['one_s']:8.1f} "
                f"{row['default_s']:8.1f} {row['rule_s'] / row['one_s']:7.2f} {row['rule_s'] / row['default_s']:7.2f}"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
