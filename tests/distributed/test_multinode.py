"""Several machines, simulated on this host: two launchers started side by side, node (machine) rank 0 and 1, one CPU
process each, meeting at a rendezvous on 127.0.0.1 and training over gloo, with the README's multi-node commands
(`torchrun --nnodes 2 --node_rank R --master_addr HOST --master_port PORT ...` and `accelerate launch --config_file
configs/accelerate/ddp.yaml --num_machines 2 --machine_rank R --main_process_ip HOST --main_process_port PORT
--num_processes N --no_python vaswani-train ...`), plus only what a CPU needs (`--mixed_precision no` for accelerate,
over the shipped config's bf16, and train.py's `--use_cpu`). Each node writes to its own folder, as separate machines
would. The two-node job must end with the same weights as the same job run as two processes on one node (one process
would take other batches: a match means two processes there as well)."""

import json
from pathlib import Path

import pytest
from helpers.launching import (
    ACCELERATE,
    DDP_CONFIG,
    TOLERANCE,
    TORCHRUN,
    TORCHRUN_TRAIN,
    TRAIN,
    dropout_free_checkpoint,
    launch,
    max_difference,
    train_flags,
)
from helpers.training_setup import free_port
from safetensors.torch import load_file

pytestmark = pytest.mark.slow  # several processes over gloo


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return dropout_free_checkpoint(tmp_path_factory.mktemp("tiny"))


def launch_two_nodes(tmp_path: Path, name: str, node_command) -> tuple[list[Path], list[str]]:
    """Starts `node_command(rank, port, output_dir)` for node ranks 0 and 1 side by side, each with its own folder."""
    port = free_port()
    folders = [tmp_path / f"{name}{rank}" for rank in range(2)]
    return folders, launch([node_command(rank, port, folders[rank]) for rank in range(2)], tmp_path)


def compare(kind: str, folders: list[Path], outputs: list[str], one: Path, steps: int = 4) -> None:
    """What the two nodes saved and printed, against the one-node run's model and results.json. Node 0 holds the
    global main process: it saves the model and scores the test split; node 1 saves nothing."""
    assert "sacreBLEU" in outputs[0] and "sacreBLEU" not in outputs[1]
    assert not (folders[1] / "model.safetensors").exists()
    two = folders[0]
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
    """docs/training.md: `torchrun --nnodes 2 --node_rank R --master_addr HOST --master_port 29500 --nproc_per_node 8
    --no-python vaswani-train ...` (static rendezvous), here one process a node, against `torchrun --standalone
    --nproc_per_node 2`."""
    one = tmp_path / "one"
    launch(
        [[*TORCHRUN, "--standalone", "--nproc_per_node", "2", *TORCHRUN_TRAIN, *train_flags(checkpoint, one)]],
        tmp_path,
    )

    def node(rank: int, port: int, output_dir: Path) -> list:
        return [
            *TORCHRUN,
            *("--nnodes", "2", "--node_rank", str(rank), "--master_addr", "127.0.0.1", "--master_port", str(port)),
            *("--nproc_per_node", "1", *TORCHRUN_TRAIN, *train_flags(checkpoint, output_dir)),
        ]

    compare("torchrun", *launch_two_nodes(tmp_path, "node", node), one)


def test_accelerate_launch_two_machines_match_one_machine(checkpoint, tmp_path):
    """docs/training.md: `accelerate launch --config_file configs/accelerate/ddp.yaml --num_machines 2 --machine_rank R
    --main_process_ip HOST --main_process_port 29500 --num_processes 16 --no_python vaswani-train ...`, with the
    shipped config, 2 processes in all (one a machine), on CPU: `--mixed_precision no` overrides the config's bf16 and
    the script's `--use_cpu` puts the processes on the CPU over gloo. (Not the launcher's `--cpu`: that runs a single
    process per machine, not num_processes / num_machines.)"""
    config = [*ACCELERATE, "--config_file", str(DDP_CONFIG), "--mixed_precision", "no"]
    one = tmp_path / "one"
    single = [*config, *("--num_processes", "2", "--main_process_port", "0"), *TRAIN, *train_flags(checkpoint, one)]
    assert "sacreBLEU" in launch([single], tmp_path)[0]

    def machine(rank: int, port: int, output_dir: Path) -> list:
        return [
            *config,
            *("--num_machines", "2", "--machine_rank", str(rank)),
            *("--main_process_ip", "127.0.0.1", "--main_process_port", str(port)),
            *("--num_processes", "2", *TRAIN, *train_flags(checkpoint, output_dir)),
        ]

    compare("accelerate launch", *launch_two_nodes(tmp_path, "machine", machine), one)
