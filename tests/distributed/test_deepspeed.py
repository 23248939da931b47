"""DeepSpeed ZeRO stage 2 with the shipped settings (configs/accelerate/deepspeed_zero2.yaml), run for real on 2 CPU
processes (DeepSpeed's CPU accelerator), against DDP on the same batches: the same final weights.

Only what a CPU needs differs from the shipped file: 2 processes instead of 8, `use_cpu`, no bf16 mixed precision
(the DDP run compared with it has none). Needs the `deepspeed` extra; without it the test says so and skips.
"""

import importlib.util

import pytest
import yaml
from helpers.launching import (
    ACCELERATE,
    DDP_CONFIG,
    TRAIN,
    dropout_free_checkpoint,
    launch,
    max_difference,
    train_flags,
)
from helpers.training_setup import REPO, free_port
from safetensors.torch import load_file

pytestmark = pytest.mark.slow  # several processes over gloo

DEEPSPEED_CONFIG = REPO / "configs" / "accelerate" / "deepspeed_zero2.yaml"
# ZeRO-2 partitions gradients and optimizer state and sums them in another order than DDP's all-reduce.
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return dropout_free_checkpoint(tmp_path_factory.mktemp("tiny"))


def cpu_copy(config_file, folder):
    config = yaml.safe_load(config_file.read_text())
    config.update(num_processes=2, use_cpu=True, mixed_precision="no")
    path = folder / config_file.name
    path.write_text(yaml.safe_dump(config))
    return path, config


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="DeepSpeed is not installed (.[deepspeed])")
def test_zero2_on_two_cpu_processes_matches_ddp(checkpoint, tmp_path):
    deepspeed_config, settings = cpu_copy(DEEPSPEED_CONFIG, tmp_path)
    assert settings["distributed_type"] == "DEEPSPEED" and settings["deepspeed_config"]["zero_stage"] == 2
    ddp_config, _ = cpu_copy(DDP_CONFIG, tmp_path)
    runs = {}
    for name, config in (("deepspeed", deepspeed_config), ("ddp", ddp_config)):
        command = [*ACCELERATE, "--config_file", str(config), "--main_process_port", str(free_port()), *TRAIN]
        (output,) = launch([[*command, *train_flags(checkpoint, tmp_path / name)]], tmp_path)
        runs[name] = output
    assert runs["deepspeed"].count("DeepSpeed") >= 2, "DeepSpeed was not started in both processes"
    assert "zero" in runs["deepspeed"].lower()
    assert "DeepSpeed" not in runs["ddp"]
    zero2 = load_file(tmp_path / "deepspeed" / "model.safetensors")
    ddp = load_file(tmp_path / "ddp" / "model.safetensors")
    # DeepSpeed's save writes the tied matrix under each of its names (Section 3.4's one matrix): all equal.
    for name in zero2.keys() - ddp.keys():
        assert name.endswith("embed_tokens.weight") or name == "lm_head.weight", name
        assert (zero2[name] == zero2["model.shared.weight"]).all(), name
    difference = max_difference({name: zero2[name] for name in ddp}, ddp)
    moved = max_difference({name: load_file(checkpoint / "model.safetensors")[name] for name in ddp}, ddp)
    print(f"ZeRO-2 vs DDP, 2 CPU processes, 4 steps: max |weight difference| {difference:.3g} (moved {moved:.3g})")
    assert moved > 1e-3, "the runs did not train"
    assert difference <= TOLERANCE
