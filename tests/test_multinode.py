"""Several machines, simulated on this host: two launchers started side by side, node (machine) rank 0 and 1, one CPU
process each, meeting at a rendezvous on 127.0.0.1 and training over gloo, with the README's multi-node commands
(`torchrun --nnodes 2 --node_rank R --master_addr HOST --master_port PORT ...` and `accelerate launch --config_file
scripts/accelerate/ddp.yaml --num_machines 2 --machine_rank R --main_process_ip HOST --main_process_port PORT
--num_processes N scripts/train.py ...`), plus only what a CPU needs (`--mixed_precision no` for accelerate, over
the shipped config's bf16, and train.py's `--use_cpu`). Each node writes to its own folder, as separate machines
would. The two-node job must end with the same weights as the same job run as two processes on one node (one process
would take other batches: a match means two processes there as well)."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from safetensors.torch import load_file
from training_setup import REPO, free_port, tiny_checkpoint

TESTS = Path(__file__).resolve().parent
TIMEOUT = 300  # seconds for a whole launch, both nodes: a rendezvous that never completes fails, it does not hang
TOLERANCE = 1e-6
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
ACCELERATE = [sys.executable, "-m", "accelerate.commands.launch"]
DDP_CONFIG = REPO / "scripts" / "accelerate" / "ddp.yaml"
TRAIN = str(REPO / "scripts" / "train.py")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """The tiny checkpoint with no dropout (train.py takes the model's config as it is): the runs compared draw no
    random masks, so only the process layout differs."""
    folder = tiny_checkpoint(tmp_path_factory.mktemp("tiny"))
    config = json.loads((folder / "config.json").read_text())
    config.update(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder


def environment():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(REPO)]), "OMP_NUM_THREADS": "1"}
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


def compare(kind: str, two: Path, one: Path, steps: int = 4) -> None:
    """The model that train.py saved (machine 0's OUTPUT_DIR) and its results.json, against the one-node run's."""
    two_weights, one_weights = load_file(two / "model.safetensors"), load_file(one / "model.safetensors")
    difference = max_difference(two_weights, one_weights)
    two_results = json.loads((two / "results.json").read_text())
    one_results = json.loads((one / "results.json").read_text())
    two_loss, one_loss = two_results["train"]["train_loss"], one_results["train"]["train_loss"]
    print(f"{kind}, 2 nodes x 1 process vs 1 node x 2 processes: max |weight difference| {difference:.3g}")
    print(f"{kind}, mean training loss: 2 nodes {two_loss:.8f}, 1 node {one_loss:.8f}")
    assert difference <= TOLERANCE
    assert two_results["train"]["step"] == one_results["train"]["step"] == steps
    assert two_loss == pytest.approx(one_loss, abs=1e-6)
    assert two_results["test"]["sacrebleu"] == one_results["test"]["sacrebleu"]


def test_torchrun_two_nodes_match_one_node(checkpoint, tmp_path):
    """README: `torchrun --nnodes 2 --node_rank R --master_addr HOST --master_port 29500 --nproc_per_node 8
    scripts/train.py ...` (static rendezvous, as the README gives it), here one process a node, against
    `torchrun --standalone --nproc_per_node 2`."""
    one = tmp_path / "one"
    launch([[*TORCHRUN, "--standalone", "--nproc_per_node", "2", TRAIN, *train_flags(checkpoint, one)]], tmp_path)

    port = free_port()
    nodes = [tmp_path / f"node{rank}" for rank in range(2)]
    outputs = launch(
        [
            [
                *TORCHRUN,
                *("--nnodes", "2", "--node_rank", str(rank)),
                *("--master_addr", "127.0.0.1", "--master_port", str(port)),
                *("--nproc_per_node", "1"),
                TRAIN,
                *train_flags(checkpoint, nodes[rank]),
            ]
            for rank in range(2)
        ],
        tmp_path,
    )

    # Node 0 holds the global main process: it saves the model and scores the test split; node 1 saves nothing.
    assert "sacreBLEU" in outputs[0] and "sacreBLEU" not in outputs[1]
    assert not (nodes[1] / "model.safetensors").exists()
    compare("torchrun", nodes[0], one)


def test_accelerate_launch_two_machines_match_one_machine(checkpoint, tmp_path):
    """README: `accelerate launch --config_file scripts/accelerate/ddp.yaml --num_machines 2 --machine_rank R
    --main_process_ip HOST --main_process_port 29500 --num_processes 16 scripts/train.py ...`, with the shipped
    config, 2 processes in all (one a machine), on CPU: `--mixed_precision no` overrides the config's bf16 and the
    script's `--use_cpu` puts the processes on the CPU over gloo. (Not the launcher's `--cpu`: that runs a single
    process per machine, not num_processes / num_machines.)"""
    config = [*ACCELERATE, "--config_file", str(DDP_CONFIG), "--mixed_precision", "no"]
    one = tmp_path / "one"
    single = [*config, *("--num_processes", "2", "--main_process_port", "0"), TRAIN, *train_flags(checkpoint, one)]
    single_output = launch([single], tmp_path)[0]

    port = free_port()
    machines = [tmp_path / f"machine{rank}" for rank in range(2)]
    outputs = launch(
        [
            [
                *config,
                *("--num_machines", "2", "--machine_rank", str(rank)),
                *("--main_process_ip", "127.0.0.1", "--main_process_port", str(port)),
                *("--num_processes", "2"),
                TRAIN,
                *train_flags(checkpoint, machines[rank]),
            ]
            for rank in range(2)
        ],
        tmp_path,
    )

    # Machine 0 holds the global main process: it saves the model and scores the test split; machine 1 saves nothing.
    assert "sacreBLEU" in outputs[0] and "sacreBLEU" not in outputs[1] and "sacreBLEU" in single_output
    assert not (machines[1] / "model.safetensors").exists()
    compare("accelerate launch", machines[0], one)
