"""Checkpoint averaging of Section 6.1 of the paper.

"For the base models, we used a single model obtained by averaging the last 5 checkpoints, which were written at
10-minute intervals. For the big models, we averaged the last 20 checkpoints." This works on the `checkpoint-<step>`
folders the Hugging Face Trainer writes, whose weights are safetensors (one `model.safetensors`, or shards listed in
`model.safetensors.index.json`).
"""

import logging
import shutil
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from fnmatch import fnmatch
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers.utils import SAFE_WEIGHTS_INDEX_NAME

from ..checkpoints import open_weights, weight_map

logger = logging.getLogger(__name__)

# Files of a checkpoint folder not copied to the averaged model: weights (the averaged safetensors replace them; a
# leftover pytorch_model.bin would hold one checkpoint's weights, not the average) and the Trainer's state (optimizer,
# scheduler, RNG, step counters), which describes one step of one run, not the averaged model.
SKIPPED_FILES = (
    "*.safetensors",
    "*.safetensors.index.json",
    "pytorch_model*.bin",
    "pytorch_model*.bin.index.json",
    "optimizer*.pt",
    "optimizer*.bin",
    "scheduler*.pt",
    "scaler.pt",
    "rng_state*.pth",
    "trainer_state.json",
    "training_args.bin",
)


def average_checkpoints(checkpoint_dirs: Sequence[str | Path], output_dir: str | Path) -> Path:
    """Writes to `output_dir` a model folder whose weights are the element-wise mean of those of `checkpoint_dirs`.

    Floating-point tensors are averaged in float64 and cast back to their dtype; other tensors (e.g. integer
    buffers) must be equal in every checkpoint. The weight file layout, the safetensors metadata and the other model
    files (config, generation config, tokenizer, remote code) are those of the last checkpoint.

    The folder is written next to `output_dir` under a temporary name and renamed into place only when complete, so
    `output_dir` is either untouched (on any error) or entirely replaced; what a killed run leaves beside it is
    cleaned up, or restored, by the next run (`_recover`). One run at a time per `output_dir`.
    """
    checkpoints = [Path(path) for path in checkpoint_dirs]
    output_dir = Path(output_dir)
    _check_checkpoints(checkpoints)
    _check_destination(checkpoints, output_dir)
    _recover(output_dir)
    weight_maps = [weight_map(checkpoint) for checkpoint in checkpoints]
    _check_same_keys(checkpoints, weight_maps)
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.tmp-", dir=output_dir.parent))
    try:
        _write_averaged_weights(checkpoints, weight_maps, staging)
        _copy_model_files(checkpoints[-1], staging)
        _move_into_place(staging, output_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return output_dir


def _check_checkpoints(checkpoints: list[Path]) -> None:
    if not checkpoints:
        raise ValueError("no checkpoints to average")
    seen = set()
    for checkpoint in checkpoints:
        if not checkpoint.is_dir():
            raise FileNotFoundError(f"checkpoint {checkpoint} is not a folder; expected a checkpoint-<step> folder")
        if checkpoint.resolve() in seen:
            raise ValueError(f"checkpoint {checkpoint} is given twice; expected each once (it would count twice)")
        seen.add(checkpoint.resolve())


def _check_destination(checkpoints: list[Path], output_dir: Path) -> None:
    if output_dir.exists() and not output_dir.is_dir():
        raise ValueError(f"output directory {output_dir} exists and is not a directory")
    # Replacing a checkpoint with the average would destroy the training state it holds.
    if any(output_dir.resolve() == checkpoint.resolve() for checkpoint in checkpoints):
        raise ValueError(f"output directory {output_dir} is one of the checkpoints being averaged")
    # An averaged model holds files only; a folder with subfolders (a training run's output_dir and its checkpoints,
    # a home folder) is something else, and replacing it would delete them all.
    folders = sorted(path.name for path in output_dir.iterdir() if path.is_dir()) if output_dir.is_dir() else []
    if folders:
        raise ValueError(
            f"output directory {output_dir} holds folders ({', '.join(folders[:5])}), which replacing it would "
            "delete; expected a new folder or an earlier averaged model (files only)"
        )


def _previous(output_dir: Path) -> Path:
    """Where an existing `output_dir` is set aside while the new one takes its place: one fixed name, so that the next
    run finds it."""
    return output_dir.with_name(f".{output_dir.name}.old")


def _recover(output_dir: Path) -> None:
    """Undoes what a killed run left beside `output_dir`: its staging folders are deleted (the run did not finish),
    and an earlier output it had set aside is restored if the new one never took its place, else deleted."""
    if not output_dir.parent.is_dir():
        return
    for path in output_dir.parent.iterdir():
        if path.name.startswith(f".{output_dir.name}.tmp-") and path.is_dir():
            shutil.rmtree(path)
    previous = _previous(output_dir)
    if not previous.is_dir():
        return
    if output_dir.exists():
        shutil.rmtree(previous)
    else:
        previous.rename(output_dir)
        logger.warning("restored %s from %s, where an interrupted run had set it aside", output_dir, previous)


def _check_same_keys(checkpoints: list[Path], weight_maps: list[dict[str, Path]]) -> None:
    reference = set(weight_maps[-1])
    for checkpoint, tensors in zip(checkpoints, weight_maps, strict=True):
        difference = sorted(set(tensors) ^ reference)
        if difference:
            key = difference[0]
            holder, other = (checkpoint, checkpoints[-1]) if key in tensors else (checkpoints[-1], checkpoint)
            raise ValueError(
                f"checkpoints differ in their tensors: {key!r} is in {holder} but not in {other} "
                f"({len(difference)} key(s) differ)"
            )


def _write_averaged_weights(checkpoints: list[Path], weight_maps: list[dict[str, Path]], destination: Path) -> None:
    """Averages one output file at a time, so memory holds one shard of the result, not the whole model."""
    layout = weight_maps[-1]
    with ExitStack() as stack:
        opened = {}

        def handle(path: Path):
            if path not in opened:
                opened[path] = stack.enter_context(open_weights(path))
            return opened[path]

        for file in dict.fromkeys(layout.values()):
            keys = [key for key, path in layout.items() if path == file]
            tensors = {
                key: _average_tensor(key, checkpoints, [handle(weights[key]) for weights in weight_maps])
                for key in keys
            }
            metadata = handle(file).metadata() or {}
            save_file(tensors, destination / file.name, metadata={"format": "pt", **metadata})
    if (checkpoints[-1] / SAFE_WEIGHTS_INDEX_NAME).is_file():
        shutil.copy2(checkpoints[-1] / SAFE_WEIGHTS_INDEX_NAME, destination / SAFE_WEIGHTS_INDEX_NAME)


def _average_tensor(key: str, checkpoints: list[Path], sources: list) -> torch.Tensor:
    tensors = [source.get_tensor(key) for source in sources]
    reference = tensors[-1]
    for checkpoint, tensor in zip(checkpoints, tensors, strict=True):
        if tensor.shape != reference.shape or tensor.dtype != reference.dtype:
            raise ValueError(
                f"tensor {key!r} is {tuple(tensor.shape)} {tensor.dtype} in {checkpoint} but "
                f"{tuple(reference.shape)} {reference.dtype} in {checkpoints[-1]}"
            )
    if not reference.is_floating_point():
        for checkpoint, tensor in zip(checkpoints, tensors, strict=True):
            if not torch.equal(tensor, reference):
                raise ValueError(
                    f"non-floating-point tensor {key!r} differs between {checkpoint} and {checkpoints[-1]}"
                )
        return reference
    # float64 so that summing many bf16/fp16 checkpoints loses nothing before the single final rounding.
    total = torch.zeros(reference.shape, dtype=torch.float64)
    for tensor in tensors:
        total += tensor.to(torch.float64)
    return (total / len(tensors)).to(reference.dtype)


def _copy_model_files(checkpoint: Path, destination: Path) -> None:
    for path in checkpoint.iterdir():
        if path.is_file() and not any(fnmatch(path.name, pattern) for pattern in SKIPPED_FILES):
            shutil.copy2(path, destination / path.name)


def _move_into_place(staging: Path, output_dir: Path) -> None:
    """Renames `staging` to `output_dir`; an existing `output_dir` is set aside first (`_previous`, in the same parent,
    where renames are atomic) and deleted only afterwards."""
    if not output_dir.exists():
        staging.rename(output_dir)
        return
    previous = _previous(output_dir)
    output_dir.rename(previous)
    try:
        staging.rename(output_dir)
    except BaseException:
        previous.rename(output_dir)
        raise
    shutil.rmtree(previous)
