"""Launching training jobs as users do (torchrun, accelerate launch) from tests, several at once, with every process
stopped on failure or timeout; shared by the multi-node and DeepSpeed tests."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from helpers.training_setup import REPO, TESTS, tiny_checkpoint

TIMEOUT = 300  # seconds for a whole launch, both nodes: a rendezvous that never completes fails, it does not hang
TOLERANCE = 1e-6
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
ACCELERATE = [sys.executable, "-m", "accelerate.commands.launch"]
DDP_CONFIG = REPO / "configs" / "accelerate" / "ddp.yaml"
# The installed command, as docs/training.md launches it: accelerate's flag is --no_python, torchrun's --no-python.
TRAIN = ["--no_python", "vaswani-train"]
TORCHRUN_TRAIN = ["--no-python", "vaswani-train"]


def dropout_free_checkpoint(folder: Path) -> Path:
    """The tiny checkpoint with no dropout (train.py takes the model's config as it is): runs compared draw no
    random masks, so only the process layout differs."""
    folder = tiny_checkpoint(folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder


def environment():
    """The environment every launched training job of the distributed tests runs in. PYTHONFAULTHANDLER: a rank that
    aborts (a finished 2-process FSDP job's rank 1 did, once in about ten CI runs: "terminate called without an active
    exception") prints every thread's Python stack, so the test's failure shows where it was."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(REPO)]), "OMP_NUM_THREADS": "1"}
    env["PYTHONFAULTHANDLER"] = "1"
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])  # the vaswani-* commands
    env.pop("CUDA_VISIBLE_DEVICES", None)
    for name in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK"):
        env.pop(name, None)  # nothing from an enclosing launcher
    return env


def stop(processes: list[subprocess.Popen]) -> None:
    """torchrun starts each worker in a session of its own, so killing the launcher's process group would orphan
    them, waiting at a rendezvous: SIGTERM first, which torchrun passes on to its workers, then SIGKILL to every
    process found under the launcher and to its group."""
    running = [process for process in processes if process.poll() is None]
    descendants = []
    for process in running:
        with contextlib.suppress(psutil.NoSuchProcess):
            descendants += psutil.Process(process.pid).children(recursive=True)
        process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 15
    for process in running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(max(deadline - time.monotonic(), 0))
    psutil.wait_procs(descendants, timeout=max(deadline - time.monotonic(), 0))
    for process in running:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    for descendant in descendants:
        with contextlib.suppress(psutil.NoSuchProcess):
            descendant.kill()
    for process in processes:
        process.wait()


def launch(commands: list[list[str]], cwd: Path) -> list[str]:
    """Starts every command at once (one per node) and waits for all of them. On a failure or past TIMEOUT, stops
    every launcher still running and every process under it. Returns the outputs."""
    logs = [cwd / f"launcher-{i}.log" for i in range(len(commands))]
    processes = []
    try:
        for command, log in zip(commands, logs, strict=True):
            with open(log, "w") as out:
                processes.append(
                    subprocess.Popen(
                        command,
                        cwd=cwd,
                        env=environment(),
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        deadline = time.monotonic() + TIMEOUT
        while any(process.poll() is None for process in processes):
            if time.monotonic() > deadline or any(process.poll() not in (None, 0) for process in processes):
                break
            time.sleep(0.5)
    finally:
        stop(processes)
    outputs = [log.read_text() for log in logs]
    failures = [
        f"launcher {i}: exit {process.returncode} (-N: stopped by signal N, after a failure or past {TIMEOUT} s)\n"
        + output[-5000:]
        for i, (process, output) in enumerate(zip(processes, outputs, strict=True))
        if process.returncode != 0
    ]
    assert not failures, "\n\n".join(failures)
    return outputs


def max_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[name].float() - b[name].float()).abs().max().item() for name in a)


def train_flags(checkpoint: Path, output_dir: Path) -> list[str]:
    return [
        *("--model_name_or_path", str(checkpoint), "--output_dir", str(output_dir)),
        *("--max_steps", "4", "--max_tokens", "300", "--warmup_steps", "2", "--learning_rate", "3e-3", "--seed", "0"),
        *("--max_train_samples", "200", "--max_eval_samples", "8", "--eval_strategy", "no"),
        *("--save_strategy", "no", "--average_last_checkpoints", "0", "--report_to", "none"),
        *("--use_cpu", "--disable_tqdm", "true"),
    ]
