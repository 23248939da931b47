"""Run by test_fsdp.py under `accelerate launch`: vaswani-train's job (the recipe), plus a probe that writes, per
rank, what actually ran: accelerate's distributed type, whether the Trainer took the FSDP path, and whether the
parameters were sharded (FSDP2 makes them DTensors holding a slice on each rank).

accelerate 1.15 turns FSDP on only for accelerator devices: on CPU, AcceleratorState keeps MULTI_CPU (DDP over gloo)
and ignores the FSDP plugin, silently. With FSDP_TRAIN_FORCE_CPU_FSDP=1 this script applies, after
AcceleratorState's own set-up, exactly what that set-up does for a GPU (distributed type FSDP, the plugin, its mixed
precision), so that everything downstream -- fully_shard of each EncoderLayer/DecoderLayer, cpu_ram_efficient_loading,
FULL_STATE_DICT saves, optimizer state, resume -- is accelerate's and torch's own FSDP2 code, on gloo.
"""

import json
import os
import sys
from pathlib import Path

from accelerate.state import AcceleratorState
from accelerate.utils import DistributedType
from transformers import TrainerCallback

from modeling_vaswani.toolkit.training import recipe


def force_fsdp_on_cpu():
    original = AcceleratorState.__init__

    def __init__(self, *args, fsdp_plugin=None, **kwargs):
        original(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
        if self.distributed_type == DistributedType.MULTI_CPU and fsdp_plugin is not None:
            # accelerate/state.py, the branch taken for MULTI_GPU/XPU/...: the same three assignments.
            self.distributed_type = DistributedType.FSDP
            if self._mixed_precision != "no":
                fsdp_plugin.set_mixed_precision(self._mixed_precision)
            self.fsdp_plugin = fsdp_plugin
            AcceleratorState._shared_state["distributed_type"] = DistributedType.FSDP
            from accelerate.state import PartialState

            PartialState._shared_state["distributed_type"] = DistributedType.FSDP

    AcceleratorState.__init__ = __init__


class Probe(TrainerCallback):
    """After the first optimizer step: what the Trainer and accelerate really did, one JSON file per rank."""

    def __init__(self, trainer):
        self.trainer = trainer

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if getattr(self, "done", False):
            return
        self.done = True
        parameters = list(model.parameters())
        sharded = [p for p in parameters if type(p).__name__ == "DTensor"]
        local = sum(p.to_local().numel() if type(p).__name__ == "DTensor" else p.numel() for p in parameters)
        report = {
            "distributed_type": str(self.trainer.accelerator.distributed_type).split(".")[-1],
            "is_fsdp_enabled": self.trainer.is_fsdp_enabled,
            "fsdp_version": getattr(
                getattr(self.trainer.accelerator.state, "fsdp_plugin", None), "fsdp_version", None
            ),
            "mixed_precision": self.trainer.accelerator.mixed_precision,
            "wrapped": type(self.trainer.model_wrapped).__name__,
            "parameters": len(parameters),
            "sharded_parameters": len(sharded),
            "local_numel": local,
            "full_numel": sum(p.numel() for p in parameters),
            "world_size": args.world_size,
        }
        # Beside output_dir, not in it: vaswani-train refuses an output_dir holding files it does not write.
        output_dir = Path(args.output_dir)
        output_dir.with_name(f"{output_dir.name}.probe-rank{args.process_index}.json").write_text(json.dumps(report))


def train_with_probe(probe_class, argv: list[str]) -> None:
    """vaswani-train on `argv`, its trainer carrying `probe_class(trainer)` among its callbacks."""

    class ProbedTrainer(recipe.VaswaniTrainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.add_callback(probe_class(self))

    recipe.VaswaniTrainer = ProbedTrainer
    from modeling_vaswani.toolkit.cli.train import main as train

    train(argv)


def main():
    if os.environ.get("FSDP_TRAIN_FORCE_CPU_FSDP") == "1":
        force_fsdp_on_cpu()
    train_with_probe(Probe, sys.argv[1:])


if __name__ == "__main__":
    main()
