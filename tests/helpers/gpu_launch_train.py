"""Run by tests/gpu/test_gpu_accelerate.py under `accelerate launch`: vaswani-train's job (its main, the recipe),
plus a probe that writes, after the first optimizer step, what really ran: accelerate's distributed type, the
process group's backend (NCCL on a GPU), the device of the weights, the wrapper, mixed precision and, for FSDP, its
version and how many parameters were sharded.

    accelerate launch --config_file CONFIG gpu_launch_train.py VASWANI-TRAIN-FLAGS...

On a CPU, accelerate runs FSDP configurations as DDP (it turns FSDP on for accelerator devices only); with
GPU_LAUNCH_FORCE_CPU_FSDP=1 this script lifts that one gate as tests/helpers/fsdp_train.py does, so that the dry run
goes through FSDP2's preparation, saving and resuming too.
"""

import json
import os
import sys
from pathlib import Path

import torch
from transformers import TrainerCallback


class Probe(TrainerCallback):
    def __init__(self, trainer):
        self.trainer = trainer
        self.done = False

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.done:
            return
        self.done = True
        parameters = list(model.parameters())
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        device = parameters[0].device
        plugin = getattr(self.trainer.accelerator.state, "fsdp_plugin", None)
        report = {
            "distributed_type": str(self.trainer.accelerator.distributed_type).split(".")[-1],
            "backend": torch.distributed.get_backend() if distributed else None,
            "world_size": args.world_size,
            "device": str(device),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
            "mixed_precision": self.trainer.accelerator.mixed_precision,
            "wrapped": type(self.trainer.model_wrapped).__name__,
            "is_fsdp_enabled": self.trainer.is_fsdp_enabled,
            "fsdp_version": getattr(plugin, "fsdp_version", None),
            "parameters": len(parameters),
            "sharded_parameters": sum(type(p).__name__ == "DTensor" for p in parameters),
        }
        Path(args.output_dir, f"probe-rank{args.process_index}.json").write_text(json.dumps(report))


def main():
    from helpers.fsdp_train import force_fsdp_on_cpu, train_with_probe

    if os.environ.get("GPU_LAUNCH_FORCE_CPU_FSDP") == "1":
        force_fsdp_on_cpu()
    train_with_probe(Probe, sys.argv[1:])


if __name__ == "__main__":
    main()
