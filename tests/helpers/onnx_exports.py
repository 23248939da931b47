"""One ONNX export of the trained tiny model a test session, copied for each test that needs one: an export traces
the decoder twice with torch.onnx's dynamo exporter, about a minute on two idle cores."""

import functools
import shutil
from pathlib import Path

from helpers.training_setup import BUILT, trained_tiny_checkpoint
from modeling_vaswani.toolkit.interop.onnx import export_onnx


def tiny_onnx_export(folder: Path) -> Path:
    """`vaswani-export-onnx --web` of `trained_tiny_checkpoint` (which translates its TINY_PAIRS as written), copied
    into `folder`: onnx/, the stock MarianMT config and tokenizer, vaswani_onnx.json and the browser page."""
    shutil.copytree(built_onnx_export(), folder, dirs_exist_ok=True)
    return folder


@functools.cache
def built_onnx_export() -> Path:
    return export_onnx(str(trained_tiny_checkpoint(BUILT / "onnx-checkpoint")), BUILT / "onnx-export", web=True)
