"""One ONNX export a test process, for every test that needs one (the export's, the engine's, the browser page's and
the Hub's): `vaswani-export-onnx CHECKPOINT OUT --quantize int8 --web` of the trained tiny checkpoint, which
translates its TINY_PAIRS as written. Exporting traces the decoder twice with torch.onnx's dynamo exporter (about
half a minute on two idle cores, minutes on busy ones), so it is done once; tests that change files work on a copy."""

import functools
import shutil
from pathlib import Path

from helpers.training_setup import BUILT, trained_tiny_checkpoint


@functools.cache
def built_onnx_export() -> tuple[Path, Path]:
    """(the checkpoint, its export with the int8 variant and the browser page), read-only."""
    from modeling_vaswani.toolkit.cli import export_onnx

    checkpoint = trained_tiny_checkpoint(BUILT / "onnx-checkpoint")
    folder = BUILT / "onnx-export"
    export_onnx.main([str(checkpoint), str(folder), "--quantize", "int8", "--web"])
    return checkpoint, folder


def tiny_onnx_export(folder: Path) -> Path:
    """A copy of the export in `folder`: onnx/, the stock MarianMT config and tokenizer, vaswani_onnx.json, page."""
    shutil.copytree(built_onnx_export()[1], folder, dirs_exist_ok=True)
    return folder
