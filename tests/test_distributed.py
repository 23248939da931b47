"""Real multi-process training: two CPU processes over gloo, launched with torchrun and with accelerate."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from training_setup import REPO, tiny_checkpoint

TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("tiny"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def environment():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(REPO)]), "OMP_NUM_THREADS": "1"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def run(command, cwd):
    result = subprocess.run(command, cwd=cwd, env=environment(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    return result


def test_two_processes_match_one_with_accumulation(checkpoint, tmp_path):
    """2 ranks x 1 batch each == 1 process x 2 accumulated batches: the same global batches (the token-budget
    sampler deals batch i to rank i mod 2), so the same updates up to floating-point summation order."""
    two, one = tmp_path / "two", tmp_path / "one"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    run([*torchrun, str(TESTS / "ddp_train.py"), str(checkpoint), str(two), "1"], tmp_path)
    run([sys.executable, str(TESTS / "ddp_train.py"), str(checkpoint), str(one), "2"], tmp_path)

    rank0 = torch.load(two / "weights-rank0.pt")
    rank1 = torch.load(two / "weights-rank1.pt")
    assert all(torch.equal(rank0[name], rank1[name]) for name in rank0)  # DDP kept the replicas identical
    alone = torch.load(one / "weights-rank0.pt")
    assert max((rank0[n] - alone[n]).abs().max().item() for n in rank0) < 1e-4
    two_result = json.loads((two / "result.json").read_text())
    one_result = json.loads((one / "result.json").read_text())
    assert two_result["world_size"] == 2 and one_result["world_size"] == 1
    assert two_result["batches_per_rank"] * 2 == one_result["batches_per_rank"]
    print(f"loss after 6 steps: 2 processes {two_result['loss']:.6f}, 1 process {one_result['loss']:.6f}")
    assert two_result["loss"] == pytest.approx(one_result["loss"], rel=1e-4)


def test_train_script_under_accelerate_launch(checkpoint, tmp_path):
    launch = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--num_processes",
        "2",
        "--cpu",
        "--main_process_port",
        "0",
    ]
    flags = [
        "--model_name_or_path",
        str(checkpoint),
        "--output_dir",
        str(tmp_path / "run"),
        "--max_steps",
        "3",
        "--max_tokens",
        "300",
        "--max_train_samples",
        "200",
        "--max_eval_samples",
        "8",
        "--warmup_steps",
        "2",
        "--save_strategy",
        "no",
        "--average_last_checkpoints",
        "0",
        "--report_to",
        "none",
        "--use_cpu",
        "--disable_tqdm",
        "true",
    ]
    result = run([*launch, str(REPO / "scripts" / "train.py"), *flags], tmp_path)
    assert "sacreBLEU" in result.stdout
    assert (tmp_path / "run" / "model.safetensors").exists()


@pytest.mark.parametrize("name", ["ddp", "fsdp", "deepspeed_zero2"])
def test_shipped_accelerate_configs_load(name):
    from accelerate.commands.config.config_args import load_config_from_file

    import modeling_vaswani.modeling_vaswani as modeling

    config = load_config_from_file(str(REPO / "scripts" / "accelerate" / f"{name}.yaml"))
    expected = {"ddp": "MULTI_GPU", "fsdp": "FSDP", "deepspeed_zero2": "DEEPSPEED"}[name]
    assert config.distributed_type.value == expected and config.mixed_precision == "bf16"
    if name == "fsdp":
        for layer in config.fsdp_config["fsdp_transformer_layer_cls_to_wrap"].split(","):
            assert hasattr(modeling, layer), f"{layer} is not a layer class of the model"
    if name == "deepspeed_zero2":
        assert config.deepspeed_config["zero_stage"] == 2
