"""`accelerate launch` with the shipped configs/accelerate/ddp.yaml and fsdp.yaml on one process: vaswani-train's job
(tests/helpers/gpu_launch_train.py: its main, plus a probe of what ran) trains, saves checkpoints, averages the last
two, and a second launch resumes from the first checkpoint to the same end.

Each configuration is the shipped file with `num_processes: 1` (on a CPU also `use_cpu: true` and
`mixed_precision: no`); everything else is as shipped: on a GPU, NCCL, bf16, and for FSDP, FSDP2 with one shard unit
per EncoderLayer/DecoderLayer and FULL_STATE_DICT checkpoints. On a GPU the probe must report MULTI_GPU (DDP) or FSDP
(version 2) over NCCL; on a CPU (the dry run) one process over gloo, with FSDP's gate for accelerator devices lifted
as tests/distributed/test_fsdp.py does (tests/helpers/fsdp_train.py), so that FSDP2 saves and resumes there too.

Resuming: the first launch runs 8 steps, saving at 4 and 8; the second starts in a new folder holding only that
checkpoint-4 (as a killed run leaves it) and runs to 8. Its losses at steps 5-8 must be the first run's and its final
weights must be the first run's, to within a tenth of how far steps 5-8 moved them (CUDA's kernels are not bitwise
reproducible, and Adam turns rounding noise in near-zero gradients into steps of the learning rate's size); on a
CPU, exactly.
"""

import json
import shutil
import sys

import pytest
import yaml
from helpers.gpu import IS_TINY, is_cuda, small_checkpoint
from helpers.launching import launch
from helpers.training_setup import REPO, TESTS, free_port
from safetensors.torch import load_file

pytestmark = pytest.mark.gpu

STEPS, SAVE_STEPS = 8, 4
FLAGS = [
    "--max_steps", STEPS, "--save_steps", SAVE_STEPS, "--max_tokens", 400 if IS_TINY else 4000,
    "--max_train_samples", 300 if IS_TINY else 4000, "--warmup_steps", 4, "--learning_rate", 1e-3,
    "--logging_steps", 1, "--average_last_checkpoints", 2, "--test_split", "none", "--validation_split", "none",
    "--report_to", "none", "--disable_tqdm", "true", "--seed", 3,
]  # fmt: skip
EXPECTED = {"ddp": ("MULTI_GPU", "MULTI_GPU"), "fsdp": ("FSDP", "FSDP")}  # shipped type, type on a GPU


@pytest.fixture(scope="module")
def checkpoint(device, tmp_path_factory):
    return small_checkpoint(tmp_path_factory.mktemp("small"))


def config_file(name: str, device: str, folder):
    config = yaml.safe_load((REPO / "configs" / "accelerate" / f"{name}.yaml").read_text())
    assert config["distributed_type"] == EXPECTED[name][0]
    config["num_processes"] = 1
    if not is_cuda(device):
        config.update(use_cpu=True, mixed_precision="no")
    path = folder / f"{name}-1.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def launch_train(config, checkpoint, output_dir, device, *extra):
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config)]
    command += ["--main_process_port", str(free_port()), str(TESTS / "helpers" / "gpu_launch_train.py")]
    command += ["--model_name_or_path", str(checkpoint), "--output_dir", str(output_dir), *map(str, FLAGS)]
    command += ["--bf16"] if is_cuda(device) else ["--use_cpu"]
    launch([[*command, *map(str, extra)]], output_dir.parent)
    return json.loads((output_dir / "probe-rank0.json").read_text())


def step_losses(folder) -> dict[int, float]:
    state = json.loads((folder / "trainer_state.json").read_text())
    return {entry["step"]: entry["loss"] for entry in state["log_history"] if "loss" in entry}


def max_difference(one: dict, other: dict) -> float:
    return max((one[key].float() - other[key].float()).abs().max().item() for key in one.keys() & other.keys())


# The dry run launches FSDP's alone: on a CPU both take the same lines of this check (DDP's differ only in what a GPU
# asserts), each launch costs more than every other tiny check together, and tests/distributed/ launches DDP on CPUs.
@pytest.mark.parametrize("name", ["fsdp"] if IS_TINY else ["ddp", "fsdp"])
def test_accelerate_launch_trains_saves_and_resumes(device, name, checkpoint, tmp_path, figures, monkeypatch):
    if name == "fsdp" and not is_cuda(device):
        monkeypatch.setenv("GPU_LAUNCH_FORCE_CPU_FSDP", "1")
    config = config_file(name, device, tmp_path)
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    straight.mkdir()
    probe = launch_train(config, checkpoint, straight, device)
    assert sorted(path.name for path in straight.glob("checkpoint-*")) == ["checkpoint-4", "checkpoint-8"]
    assert (straight / "model.safetensors").exists() and (straight / "averaged" / "model.safetensors").exists()

    resumed.mkdir()
    shutil.copytree(straight / f"checkpoint-{SAVE_STEPS}", resumed / f"checkpoint-{SAVE_STEPS}")
    launch_train(config, checkpoint, resumed, device, "--resume_from_checkpoint", resumed / f"checkpoint-{SAVE_STEPS}")

    final_straight, final_resumed = (load_file(folder / "model.safetensors") for folder in (straight, resumed))
    middle = load_file(straight / f"checkpoint-{SAVE_STEPS}" / "model.safetensors")
    moved, difference = max_difference(final_straight, middle), max_difference(final_resumed, final_straight)
    losses_straight = step_losses(straight / f"checkpoint-{STEPS}")
    losses_resumed = step_losses(resumed / f"checkpoint-{STEPS}")
    later = [step for step in range(SAVE_STEPS + 1, STEPS + 1)]
    loss_difference = max(abs(losses_resumed[step] - losses_straight[step]) / losses_straight[step] for step in later)
    figures.add(
        config=f"configs/accelerate/{name}.yaml, num_processes 1",
        probe=probe,
        losses=[losses_straight[step] for step in sorted(losses_straight)],
        resumed_losses=[losses_resumed[step] for step in later],
        max_relative_loss_difference=loss_difference,
        weights_moved_by_steps_5_to_8=moved,
        max_abs_difference_resumed_vs_straight=difference,
    )
    assert moved > 0
    if name == "fsdp":
        assert probe["distributed_type"] == "FSDP" and probe["is_fsdp_enabled"] and probe["fsdp_version"] == 2, probe
    if is_cuda(device):
        assert probe["distributed_type"] == EXPECTED[name][1], probe
        assert "nccl" in (probe["backend"] or ""), probe
        assert probe["mixed_precision"] == "bf16" and probe["device"].startswith("cuda"), probe
        assert loss_difference < 1e-3 and difference <= 0.1 * moved
    else:
        assert loss_difference < 1e-6 and difference < 1e-6
