"""vaswani-serve under load, as users run it: the command started in a process of its own on a free port, Multi30k
test2016's English sentences sent one a request, first by one client at a time, then by many clients at once. Reports
requests/s and p50/p95 latency for each, the batches the server formed, the ratio of the two throughputs, and how many
translations under load differ from those of one client at a time (none should: batching does not change them)."""

import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from .real_text import test_set
from .report import machine


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def serve_command() -> list[str]:
    """The installed console script, as a user types it; `python -m` where the package is not installed as scripts."""
    script = Path(sys.executable).with_name("vaswani-serve")
    return [str(script)] if script.exists() else [sys.executable, "-m", "modeling_vaswani.toolkit.cli.serve"]


def server_environment(pythonpath: str | None = None) -> dict:
    """This process's environment, with `pythonpath` first on PYTHONPATH: to run another checkout's server (a
    before/after comparison) with this environment's packages."""
    environment = dict(os.environ)
    if pythonpath:
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), environment.get("PYTHONPATH")]))
    return environment


@dataclass
class Server:
    url: str
    pid: int  # the server's own process: its memory is what the abuse rounds read
    log: Path


@contextmanager
def running_servers(specs: list[tuple[Path, Path, list]], timeout: float = 300, pythonpath: str | None = None):
    """`vaswani-serve MODEL [ARGS]` for each (model folder, log file, ARGS) of `specs`, on 127.0.0.1 at free ports,
    started together (their start-ups overlap) and stopped when the block ends; yields them once each /health
    answers. Each runs in its log's folder, so that no folder of this checkout shadows the package it imports."""
    started = []
    try:
        for model_dir, log, extra_args in specs:
            port = free_port()
            with log.open("wb") as output:
                command = [*serve_command(), str(model_dir), "--port", str(port), *map(str, extra_args)]
                process = subprocess.Popen(
                    command, stdout=output, stderr=output, env=server_environment(pythonpath), cwd=log.parent
                )
            started.append((process, Server(f"http://127.0.0.1:{port}", process.pid, log)))
        deadline = time.monotonic() + timeout
        for process, server in started:
            while True:
                try:
                    with urllib.request.urlopen(f"{server.url}/health", timeout=1):
                        break
                except OSError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        output = server.log.read_text(errors="replace")[-3000:]
                        raise RuntimeError(f"vaswani-serve did not start; its output:\n{output}") from None
                    time.sleep(0.2)
        yield [server for _, server in started]
    finally:
        for process, _ in started:
            process.terminate()
        for process, _ in started:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:  # a server still busy with work nobody waits for
                process.kill()
                process.wait(timeout=60)


@contextmanager
def running_server(model_dir: Path, log: Path, timeout: float = 300, extra_args=(), pythonpath: str | None = None):
    """`vaswani-serve MODEL [extra_args]` (see running_servers), yielded once /health answers."""
    with running_servers([(model_dir, log, list(extra_args))], timeout, pythonpath) as (server,):
        yield server


def translate_request(url: str, text: str) -> tuple[float, str | None]:
    """One POST /translate: its latency in seconds and the translation (None for an error answer)."""
    request = urllib.request.Request(
        f"{url}/translate", data=json.dumps({"text": text}).encode(), headers={"Content-Type": "application/json"}
    )
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=600) as response:
            translation = json.loads(response.read())["translations"]
    except urllib.error.HTTPError:
        translation = None
    return time.perf_counter() - start, translation


def batches_so_far(url: str) -> int:
    with urllib.request.urlopen(f"{url}/health", timeout=60) as response:
        return json.loads(response.read())["batches"]


def measure(url: str, sentences: list[str], clients: int) -> dict:
    """All `sentences`, one a request, sent by `clients` threads at once (each takes the next unsent sentence)."""
    latencies, translations = [None] * len(sentences), [None] * len(sentences)
    pending = iter(range(len(sentences)))
    lock = threading.Lock()

    def client():
        while True:
            with lock:
                index = next(pending, None)
            if index is None:
                return
            latencies[index], translations[index] = translate_request(url, sentences[index])

    before = batches_so_far(url)
    start = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - start
    return {
        "clients": clients,
        "requests": len(sentences),
        "seconds": seconds,
        "requests_per_s": len(sentences) / seconds,
        "p50_ms": 1000 * statistics.median(latencies),
        "p95_ms": 1000 * statistics.quantiles(latencies, n=20, method="inclusive")[18],
        "batches": batches_so_far(url) - before,
        "errors": sum(translation is None for translation in translations),
        "translations": translations,
    }


def run_benchmark(
    model_dir: Path,
    requests: int,
    clients: int,
    log: Path,
    progress: Callable[[str], None] = print,
    pythonpath: str | None = None,
) -> dict:
    sentences, _ = test_set("test2016", requests)
    with running_server(model_dir, log, pythonpath=pythonpath) as server:
        url = server.url
        translate_request(url, sentences[0])  # warm-up: the first request pays for lazy set-up
        progress(f"one client at a time, {len(sentences)} requests")
        alone = measure(url, sentences, 1)
        progress(f"{clients} clients at once, {len(sentences)} requests")
        together = measure(url, sentences, clients)
    differ = sum(a != b for a, b in zip(alone["translations"], together["translations"], strict=True))
    return {
        "date": date.today().isoformat(),
        "machine": machine(),
        "model": str(model_dir),
        "one_client": alone,
        "many_clients": together,
        "throughput_ratio": together["requests_per_s"] / alone["requests_per_s"],
        "translations_differing": differ,
    }


def format_table(report: dict) -> str:
    facts = report["machine"]
    lines = [
        f"vaswani-serve under load, {report['date']}: {facts['cpu']}, {', '.join(facts['cpu_flags']) or 'no AVX2'}, "
        f"{facts['cpu_count']} CPUs, torch {facts['torch']}; model {report['model']}",
        "",
        "| clients | requests | requests/s | p50 latency | p95 latency | batches | errors |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in (report["one_client"], report["many_clients"]):
        lines.append(
            f"| {row['clients']} | {row['requests']} | {row['requests_per_s']:.1f} | {row['p50_ms']:,.0f} ms | "
            f"{row['p95_ms']:,.0f} ms | {row['batches']} | {row['errors']} |"
        )
    lines += [
        "",
        f"{report['many_clients']['clients']} clients: {report['throughput_ratio']:.2f}x the requests/s of one client "
        f"at a time; translations differing from one client's: {report['translations_differing']}",
    ]
    return "\n".join(lines)
