"""The GPU suite's settings (tests/gpu/), read from the environment that benchmarks/gpu/run.sh sets, its shapes, and
the figures each check records for the report.

- VASWANI_GPU_DEVICE: the device the checks run on (default `cuda`); `cpu` runs the same checks on the CPU, which is
  what the dry run does (`bash benchmarks/gpu/run.sh OUT --device cpu --tiny`), so that the suite cannot rot before a
  GPU comes. The reference the device is compared with is always the CPU.
- VASWANI_GPU_TINY=1: tiny shapes and few steps (seconds on a CPU) instead of the paper's base and big shapes.
- VASWANI_GPU_RECORD: a JSON-lines file each check appends its figures to (run.sh's OUT/records.jsonl); unset, the
  figures are only printed.
"""

import json
import os
import time
from pathlib import Path

import torch

from helpers.training_setup import TINY, tiny_checkpoint

DEVICE = os.environ.get("VASWANI_GPU_DEVICE", "cuda")
IS_TINY = os.environ.get("VASWANI_GPU_TINY", "0") == "1"
RECORD = os.environ.get("VASWANI_GPU_RECORD")

# The tolerance of every float32 comparison between the device and the CPU (logits, and the margins under which
# two tokens count as tied).
TOLERANCE = 1e-4


def unavailable() -> str | None:
    """Why the checks cannot run on DEVICE here, or None."""
    try:
        device = torch.device(DEVICE)
    except RuntimeError:
        return f"VASWANI_GPU_DEVICE={DEVICE!r} is no device torch knows"
    if device.type == "cuda" and not torch.cuda.is_available():
        return (
            f"needs CUDA, which this torch ({torch.__version__}) does not see; the dry run runs these checks on CPU: "
            "bash benchmarks/gpu/run.sh OUT --device cpu --tiny"
        )
    if device.type not in ("cuda", "cpu"):
        return f"VASWANI_GPU_DEVICE={DEVICE!r}: the suite runs on cuda or cpu"
    return None


def is_cuda(device: str) -> bool:
    return torch.device(device).type == "cuda"


def synchronize(device: str) -> None:
    if is_cuda(device):
        torch.cuda.synchronize(device)


class Recorder:
    """The figures of one check: `recorder.add(name=value, ...)`, written when the check ends, passed or failed."""

    def __init__(self, nodeid: str):
        self.nodeid = nodeid
        self.figures: dict = {}
        self.started = time.perf_counter()

    def add(self, **figures) -> None:
        self.figures.update(figures)

    def write(self) -> None:
        entry = {
            "nodeid": self.nodeid,
            "device": DEVICE,
            "tiny": IS_TINY,
            "seconds": round(time.perf_counter() - self.started, 2),
            "figures": self.figures,
        }
        print(f"[figures] {json.dumps(entry, default=str)}")
        if RECORD:
            with open(RECORD, "a") as out:
                out.write(json.dumps(entry, default=str) + "\n")


# ---------------------------------------------------------------------------------------------------------------------
# Shapes
# ---------------------------------------------------------------------------------------------------------------------


def equivalence_config(**overrides):
    """The model the device-against-CPU checks compare: Table 3's base shapes with an 8000-token vocabulary (tiny:
    the model tests' tiny configuration), random weights, the paper's defaults otherwise."""
    from modeling_vaswani import VaswaniConfig

    if IS_TINY:
        from helpers.tiny_models import tiny_config

        return tiny_config(**overrides)
    return VaswaniConfig.base(vocab_size=8000, **overrides)


def source_lengths() -> list[int]:
    """A padded batch: sentences of different lengths, the longest unpadded."""
    return [9, 4, 12, 7] if IS_TINY else [37, 12, 50, 25, 8, 44, 31, 19]


def small_checkpoint(folder: Path) -> Path:
    """The `small` preset (vaswani-train's default model) with an 8000-token BPE vocabulary trained on the shipped
    Multi30k, untrained, saved with its tokenizer; tiny: the training tests' tiny checkpoint (400 tokens)."""
    if IS_TINY:
        return tiny_checkpoint(folder)
    from modeling_vaswani import VaswaniForConditionalGeneration
    from modeling_vaswani.toolkit.data.corpora import multi30k_files
    from modeling_vaswani.toolkit.data.tokenizer import train_tokenizer
    from modeling_vaswani.toolkit.training.presets import preset_config

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(list(multi30k_files("train", languages=("en", "de")).values()), vocab_size=8000)
    tokenizer.save_pretrained(folder)
    torch.manual_seed(0)
    VaswaniForConditionalGeneration(preset_config("small", tokenizer)).save_pretrained(folder)
    return folder


__all__ = [
    "DEVICE",
    "IS_TINY",
    "TINY",
    "TOLERANCE",
    "Recorder",
    "equivalence_config",
    "is_cuda",
    "small_checkpoint",
    "source_lengths",
    "synchronize",
    "unavailable",
]
