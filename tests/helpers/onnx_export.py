"""One ONNX export (float32 and int8) of the tiny checkpoint, built once per process for the ONNX tests: exporting
traces the model three times (about 30 s on two busy cores). Callers that change files work on a copy."""

import functools
from pathlib import Path

from helpers.training_setup import BUILT, tiny_checkpoint


@functools.cache
def built_onnx_export() -> tuple[Path, Path]:
    """(the checkpoint, its export by `vaswani-export-onnx CHECKPOINT OUT --quantize int8`), read-only."""
    from modeling_vaswani.toolkit.cli import export_onnx

    checkpoint = tiny_checkpoint(BUILT / "onnx-checkpoint")
    folder = BUILT / "onnx-export"
    export_onnx.main([str(checkpoint), str(folder), "--quantize", "int8"])
    return checkpoint, folder
