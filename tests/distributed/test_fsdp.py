"""FSDP executed: the shipped configs/accelerate/fsdp.yaml run on 2 CPU processes (gloo) through `accelerate launch`.

A copy of the shipped configuration changes only what a CPU needs (num_processes 2, use_cpu true, mixed_precision
no); everything FSDP-specific is kept: FSDP2, TRANSFORMER_BASED_WRAP of EncoderLayer/DecoderLayer,
reshard_after_forward, FULL_STATE_DICT, cpu_ram_efficient_loading. The job is vaswani-train's (the recipe), run by
fsdp_train.py, which also reports per rank what really ran.

accelerate 1.15 does not run FSDP on CPU: its AcceleratorState turns FSDP on for accelerator devices only and, on CPU,
silently trains with DDP instead. test_accelerate_falls_back_to_ddp_on_cpu pins that behaviour (and fails the day it
changes); the other tests lift that one gate (fsdp_train.py's FSDP_TRAIN_FORCE_CPU_FSDP) so that the rest -- torch's
fully_shard, accelerate's FSDP2 preparation, saving, loading and resuming -- runs as it would on GPUs.
Resuming goes through VaswaniTrainer's own loader of the full weights (training.load_full_weights_into_fsdp2), since
accelerate's fails in torch 2.13 on the tied embeddings; the test fails if either loader breaks.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
import yaml
from helpers import launching
from helpers.training_setup import REPO, TESTS, free_port, tiny_checkpoint
from safetensors.torch import load_file

from modeling_vaswani.toolkit.checkpoints import find_checkpoints
from modeling_vaswani.toolkit.training.averaging import average_checkpoints

pytestmark = pytest.mark.slow  # several processes over gloo

TOLERANCE = 1e-5
# SGD (no momentum): an update off by a factor, e.g. a gradient summed instead of averaged over the 2 ranks, shows.
FLAGS = [
    "--max_steps", 12, "--save_steps", 4, "--max_tokens", 300, "--max_train_samples", 400, "--warmup_steps", 2,
    "--learning_rate", 0.3, "--optim", "sgd", "--logging_steps", 1, "--average_last_checkpoints", 2,
    "--test_split", "none", "--validation_split", "none", "--report_to", "none", "--disable_tqdm", "true",
    "--seed", 3, "--use_cpu",
]  # fmt: skip


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """The tiny model without dropout, so that every run of the same batches computes the same updates."""
    folder = tiny_checkpoint(tmp_path_factory.mktemp("tiny"))
    config = json.loads((folder / "config.json").read_text())
    config["dropout"] = 0.0
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder


@pytest.fixture(scope="module")
def config_file(tmp_path_factory):
    """The shipped FSDP configuration with only what 2 CPU processes need changed."""
    config = yaml.safe_load((REPO / "configs" / "accelerate" / "fsdp.yaml").read_text())
    assert config["distributed_type"] == "FSDP" and config["fsdp_config"]["fsdp_version"] == 2
    config.update(num_processes=2, use_cpu=True, mixed_precision="no")
    path = tmp_path_factory.mktemp("accelerate") / "fsdp_cpu.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def ddp_config_file(tmp_path_factory):
    """The shipped DDP configuration, the same changes. (`accelerate launch --cpu --num_processes 2` would start a
    single process: --cpu takes accelerate's simple launcher, which ignores num_processes.)"""
    config = yaml.safe_load((REPO / "configs" / "accelerate" / "ddp.yaml").read_text())
    config.update(num_processes=2, use_cpu=True, mixed_precision="no")
    path = tmp_path_factory.mktemp("accelerate") / "ddp_cpu.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def environment(force_fsdp: bool):
    return {**launching.environment(), "FSDP_TRAIN_FORCE_CPU_FSDP": "1" if force_fsdp else "0"}


def launch_command(config_file, output_dir, *extra):
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config_file)]
    launch += ["--main_process_port", str(free_port()), str(TESTS / "helpers" / "fsdp_train.py")]
    return [*launch, "--output_dir", str(output_dir), *map(str, [*FLAGS, *extra])]


def train(config_file, output_dir, *extra, checkpoint, force_fsdp=True):
    command = launch_command(config_file, output_dir, "--model_name_or_path", checkpoint, *extra)
    result = subprocess.run(
        command, cwd=output_dir.parent, env=environment(force_fsdp), capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    probes = [output_dir.with_name(f"{output_dir.name}.probe-rank{rank}.json") for rank in (0, 1)]
    return [json.loads(probe.read_text()) for probe in probes]


def max_difference(one: dict, other: dict) -> float:
    return max((one[key] - other[key]).abs().max().item() for key in one.keys() & other.keys())


def assert_sharded_by_fsdp2(probes):
    for probe in probes:
        assert probe["distributed_type"] == "FSDP" and probe["is_fsdp_enabled"] and probe["fsdp_version"] == 2, probe
        assert probe["world_size"] == 2 and probe["wrapped"] == "FSDPVaswaniForConditionalGeneration", probe
        # Every parameter a DTensor, each rank holding about half of the model.
        assert probe["sharded_parameters"] == probe["parameters"], probe
    assert sum(probe["local_numel"] for probe in probes) == probes[0]["full_numel"]


def test_accelerate_falls_back_to_ddp_on_cpu(checkpoint, config_file, tmp_path):
    """What `accelerate launch` alone does with the shipped FSDP settings on CPU: DDP over gloo, with no error.
    accelerate/state.py sets DistributedType.FSDP only for MULTI_GPU/NPU/XPU/... devices; MULTI_CPU keeps DDP."""
    probes = train(config_file, tmp_path / "run", "--max_steps", 1, checkpoint=checkpoint, force_fsdp=False)
    for probe in probes:
        if probe["distributed_type"] == "FSDP":
            pytest.fail(f"accelerate now runs FSDP on CPU by itself: fsdp_train.py's forcing can go ({probe})")
        assert probe["distributed_type"] == "MULTI_CPU" and not probe["is_fsdp_enabled"], probe
        assert probe["sharded_parameters"] == 0 and probe["wrapped"] == "DistributedDataParallel", probe


@pytest.fixture(scope="module")
def fsdp_run(checkpoint, config_file, tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("fsdp") / "run"
    output_dir.mkdir()
    return output_dir, train(config_file, output_dir, checkpoint=checkpoint)


def test_fsdp_matches_ddp_on_the_same_batches(checkpoint, ddp_config_file, fsdp_run, tmp_path):
    output_dir, probes = fsdp_run
    assert_sharded_by_fsdp2(probes)
    ddp_dir = tmp_path / "ddp"
    ddp_dir.mkdir()
    ddp_probes = train(ddp_config_file, ddp_dir, checkpoint=checkpoint, force_fsdp=False)
    assert all(probe["distributed_type"] == "MULTI_CPU" and probe["world_size"] == 2 for probe in ddp_probes)

    fsdp, ddp = load_file(output_dir / "model.safetensors"), load_file(ddp_dir / "model.safetensors")
    start = load_file(checkpoint / "model.safetensors")
    assert set(ddp) <= set(fsdp)
    difference, moved = max_difference(fsdp, ddp), max_difference(fsdp, start)
    print(f"max |FSDP - DDP| over the final weights: {difference:.3g} (training moved them by up to {moved:.3g})")
    assert moved > 1e-2 and difference < TOLERANCE
    for step in (4, 8, 12):
        name = f"checkpoint-{step}"
        assert (
            max_difference(
                load_file(output_dir / name / "model.safetensors"), load_file(ddp_dir / name / "model.safetensors")
            )
            < TOLERANCE
        )


def test_fsdp_checkpoints_are_full_tied_and_averaged(checkpoint, fsdp_run, tmp_path):
    from transformers import AutoModelForSeq2SeqLM

    output_dir, _ = fsdp_run
    shapes = {key: tensor.shape for key, tensor in load_file(checkpoint / "model.safetensors").items()}
    checkpoints = find_checkpoints(output_dir)
    assert [folder.name for folder in checkpoints] == ["checkpoint-4", "checkpoint-8", "checkpoint-12"]
    for folder in checkpoints:
        # FULL_STATE_DICT: one full model.safetensors (plus the Trainer's full pytorch_model_fsdp.bin for resuming),
        # no sharded DCP folder; no torch source file taken for the model's remote code.
        assert not [path.name for path in folder.iterdir() if path.is_dir() or path.name.startswith("_fsdp")]
        weights = load_file(folder / "model.safetensors")
        assert {key: weights[key].shape for key in shapes} == shapes
        assert json.loads((folder / "config.json").read_text())["auto_map"]["AutoModelForSeq2SeqLM"] == (
            "modeling_vaswani.VaswaniForConditionalGeneration"
        )

    for folder in (output_dir, output_dir / "averaged", checkpoints[-1]):
        model = AutoModelForSeq2SeqLM.from_pretrained(folder)
        assert model.lm_head.weight is model.model.shared.weight
        assert model.model.encoder.embed_tokens.weight is model.model.shared.weight
        saved = load_file(folder / "model.safetensors")
        for key in ("lm_head.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"):
            if key in saved:  # the gathered full state dict holds each tied name as its own copy: all equal
                assert torch.equal(saved[key], saved["model.shared.weight"]), key
        assert torch.equal(model.model.shared.weight.detach(), saved["model.shared.weight"])

    # The recipe averaged the last 2 checkpoints at the end; so does averaging them again, by hand.
    again = average_checkpoints(find_checkpoints(output_dir, last=2), tmp_path / "averaged")
    last, before = (load_file(folder / "model.safetensors") for folder in checkpoints[-1:-3:-1])
    mean = {key: (last[key].double() + before[key].double()).div(2).float() for key in last}
    assert max_difference(load_file(output_dir / "averaged" / "model.safetensors"), mean) < 1e-7
    assert max_difference(load_file(again / "model.safetensors"), mean) < 1e-7


# The recipe's Adam (Section 5.3's betas and epsilon are its defaults), whose moments must come back sharded.
# (Resuming plain SGD, which has no state, fails in torch 2.13's set_optimizer_state_dict: "Expected device to be
# set", which it looks for among the state's tensors.)
ADAM = ["--optim", "adamw_torch", "--learning_rate", 0.01]


def test_fsdp_resumes_after_sigkill_to_the_uninterrupted_weights(checkpoint, config_file, tmp_path):
    straight_dir, killed_dir = tmp_path / "straight", tmp_path / "killed"
    straight_dir.mkdir(), killed_dir.mkdir()
    train(config_file, straight_dir, *ADAM, checkpoint=checkpoint)
    command = launch_command(config_file, killed_dir, "--model_name_or_path", checkpoint, *ADAM)
    process = subprocess.Popen(
        command,
        cwd=tmp_path,
        env=environment(force_fsdp=True),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # the launcher and its 2 workers in one process group, killed together
    )
    deadline = time.monotonic() + 240
    while not (killed_dir / "checkpoint-4").exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL
    complete = find_checkpoints(killed_dir)
    assert complete and not (killed_dir / "checkpoint-12").exists()  # it died mid-run
    for folder in complete:
        assert (folder / "trainer_state.json").exists() and (folder / "model.safetensors").exists()

    command = launch_command(config_file, killed_dir, "--model_name_or_path", checkpoint, *ADAM)
    command += ["--resume_from_checkpoint", str(complete[-1])]
    result = subprocess.run(command, cwd=tmp_path, env=environment(True), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    straight = load_file(straight_dir / "model.safetensors")
    resumed = load_file(killed_dir / "model.safetensors")
    difference = max_difference(straight, resumed)
    print(f"killed after {complete[-1].name}, resumed: max |resumed - uninterrupted| = {difference:.3g}")
    assert difference < TOLERANCE
