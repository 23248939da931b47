"""Checkpoint averaging of Section 6.1 of the paper.

"For the base models, we used a single model obtained by averaging the last 5 checkpoints, which were written at
10-minute intervals. For the big models, we averaged the last 20 checkpoints." This works on the `checkpoint-<step>`
folders the Hugging Face Trainer writes, whose weights are safetensors (one `model.safetensors`, or shards listed in
`model.safetensors.index.json`).
"""

import logging
import shutil
from collections.abc import Sequence
from contextlib import ExitStack
from fnmatch import fnmatch
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers.utils import SAFE_WEIGHTS_INDEX_NAME

from ..checkpoints import check_same_tokenizer, is_vaswani_folder, open_weights, validate_checkpoint, weight_map
from ..outputs import (
    AVERAGED,
    check_not_input,
    check_output_folder,
    recover,
    released_on_failure,
    restore_set_aside,
    staged_folder,
    writing,
)

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


@released_on_failure()  # a refusal after the output check leaves no lock in a process that goes on
def average_checkpoints(
    checkpoint_dirs: Sequence[str | Path], output_dir: str | Path, *, vaswani_only: bool = False
) -> Path:
    """Writes to `output_dir` a model folder whose weights are the element-wise mean of those of `checkpoint_dirs`.

    Floating-point tensors are averaged in float64 and cast back to their dtype; other tensors (e.g. integer
    buffers) must be equal in every checkpoint. The weight file layout, the safetensors metadata and the other model
    files (config, generation config, tokenizer, remote code) are those of the last checkpoint.

    The checkpoints must hold the same tensors and the same tokenizer (rows of different vocabularies do not stand
    for the same tokens). `output_dir` must be new, empty or an earlier model folder (`outputs.check_output_folder`);
    it is written aside and replaced whole when complete (`outputs.staged_folder`).

    `vaswani_only` (vaswani-average's): every checkpoint must pass the checkpoint opener (`validate_checkpoint`: a
    Vaswani config.json, another model_type named; weights and tokenizer that fit it); otherwise checkpoints of any
    model are averaged, the last one checked so where it is a Vaswani checkpoint.
    """
    checkpoints = [Path(path) for path in checkpoint_dirs]
    output_dir = Path(output_dir)
    _check_checkpoints(checkpoints)
    if vaswani_only:
        for checkpoint in checkpoints:
            validate_checkpoint(checkpoint)
    check_not_input(output_dir, checkpoints, flag=AVERAGED.flag)  # a checkpoint's training state, destroyed
    recover(output_dir)
    weight_maps = [weight_map(checkpoint) for checkpoint in checkpoints]
    _check_same_keys(checkpoints, weight_maps)
    check_same_tokenizer(checkpoints)
    if is_vaswani_folder(checkpoints[-1]):  # its config.json, tokenizer and tensors agree, as the average's will
        validate_checkpoint(checkpoints[-1])
    need = sum(path.stat().st_size for path in set(weight_maps[-1].values()))
    check_output_folder(output_dir, AVERAGED, need_bytes=need, inputs=checkpoints)
    with staged_folder(output_dir, AVERAGED) as staged:
        _write_averaged_weights(checkpoints, weight_maps, staged)
        _copy_model_files(checkpoints[-1], staged)
    return output_dir


def _check_checkpoints(checkpoints: list[Path]) -> None:
    if not checkpoints:
        raise ValueError("no checkpoints to average")
    seen = set()
    for checkpoint in checkpoints:
        restore_set_aside(checkpoint)  # one a killed run set aside
        if not checkpoint.is_dir():
            raise FileNotFoundError(f"checkpoint {checkpoint} is not a folder; expected a checkpoint-<step> folder")
        if checkpoint.resolve() in seen:
            raise ValueError(f"checkpoint {checkpoint} is given twice; expected each once (it would count twice)")
        seen.add(checkpoint.resolve())


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
            with writing(destination / file.name) as path:  # safetensors deletes, unnamed, what it cannot write
                save_file(tensors, path, metadata={"format": "pt", **metadata})
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
