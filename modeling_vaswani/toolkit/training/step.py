"""The training step's speed: Section 5.4's label-smoothed loss in one fused call (the recipe's), torch.compile where a
run's steps repay it (on CUDA), and bfloat16 autocast with the probe that times it against float32 on the machine at
hand, which benchmarks/training_step.py measures: the recipe trains in float32, which scored higher at equal time
(docs/results.md)."""

import copy
import itertools
import logging
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext

import torch
from torch.nn import functional
from torch.nn.attention import SDPBackend, sdpa_kernel

from ...kernels_vaswani import cpu_info
from .budget import cycled

logger = logging.getLogger(__name__)


def smoothed_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, epsilon: float, num_items_in_batch=None):
    """Section 5.4's label smoothing (eps_ls) over the vocabulary, -100 labels left out: the Trainer's LabelSmoother's
    value, (1 - eps) * NLL + eps * the mean over the vocabulary of -log p, from torch's cross_entropy, which takes the
    log-softmax once and neither negates nor gathers a [tokens x vocabulary] copy. In float32 whatever the autocast:
    the sum over the vocabulary is where bfloat16's 8 bits of mantissa would show."""
    loss = functional.cross_entropy(
        logits.flatten(0, -2).float(), labels.flatten(), ignore_index=-100, label_smoothing=epsilon, reduction="sum"
    )
    if num_items_in_batch is None:
        num_items_in_batch = labels.ne(-100).sum()
    return loss / torch.as_tensor(num_items_in_batch, device=loss.device)


# What gives a CPU bfloat16 dot products in hardware; without one, oneDNN emulates them, slower than float32.
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_has_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether the CPU's flags (Linux's `cpuinfo`) name a bfloat16 instruction set (BF16_FLAGS)."""
    return any(flag in (cpu_info("flags", cpuinfo) or "").split() for flag in BF16_FLAGS)


@contextmanager
def bf16_autocast() -> Iterator[None]:
    """Autocast to bfloat16 on the CPU, attention through SDPA's math kernel: the flash kernel's backward in bfloat16
    took 65 ms a call against float32's 11 ms here (torch 2.13, avx512_bf16), more than the matmuls saved."""
    with torch.autocast("cpu", torch.bfloat16), sdpa_kernel(SDPBackend.MATH):
        yield


# SDPA's kernels for training on CUDA: every one but cuDNN's attention, which torch tries first for bfloat16 on sm90
# with cuDNN >= 9.15 and which builds an execution plan for every new shape; token-budget batches bring a new shape
# nearly every step (docs/gpu.md, "Why bf16 trained slower").
CUDA_TRAINING_ATTENTION = (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH)


def training_attention(device: torch.device):
    """The SDPA kernels a training or evaluation step on `device` may use (CUDA_TRAINING_ATTENTION on CUDA; elsewhere
    torch's)."""
    return sdpa_kernel(list(CUDA_TRAINING_ATTENTION)) if device.type == "cuda" else nullcontext()


# A compiled training step pays where the steps left save more than its compilation costs. On the H200 (docs/gpu.md,
# 2026-11-30) compiling took 76-146 s and saved 3-10 ms a step: it paid after some 14,000 (base at the paper's batch)
# to 25,000 steps (the small preset against float32); on the CPU the compiled step was slower (0.54x, docs/results.md).
COMPILE_PAYS_AFTER_STEPS = 25_000
COMPILE_BACKEND = "inductor"  # torch.compile's default, which docs/gpu.md measured


def compile_pays(device: torch.device, steps: int) -> bool:
    """Whether a run with `steps` training steps left on `device` should train through torch.compile: on CUDA, from
    COMPILE_PAYS_AFTER_STEPS steps (the figures measured; no probe times a compilation on the machine)."""
    return device.type == "cuda" and steps >= COMPILE_PAYS_AFTER_STEPS


PROBE_PAIRS = 3  # timed float32 and bfloat16 steps each, after one untimed pair
BF16_MARGIN = 0.9  # bfloat16 is taken where its step takes under this share of float32's: a clear gain, not noise


def time_precisions(step: Callable[[bool], None], pairs: int = PROBE_PAIRS) -> tuple[float, float]:
    """Times `step(False)` (float32) and `step(True)` (bf16_autocast) in turn, the first pair untimed and the order
    alternating, and returns the median seconds of each: (float32, bfloat16)."""
    timings = {False: [], True: []}
    for index in range(pairs + 1):
        for bf16 in (False, True) if index % 2 else (True, False):
            started = time.perf_counter()
            step(bf16)
            if index:
                timings[bf16].append(time.perf_counter() - started)
    return statistics.median(timings[False]), statistics.median(timings[True])


def bf16_pays(float32: float, bfloat16: float) -> bool:
    """Whether a step of `bfloat16` seconds is a clear gain on one of `float32` (BF16_MARGIN)."""
    return bfloat16 < BF16_MARGIN * float32


def probe_bf16(trainer) -> bool:
    """Whether `trainer` should train under bf16_autocast: on a CPU with bfloat16 instructions (BF16_FLAGS), where
    steps of a copy of its model on its own batches, through its own loss, are measured faster so (`bf16_pays`).
    The run's model, optimizer and data order are untouched."""
    if trainer.args.device.type != "cpu" or trainer.args.bf16 or not cpu_has_bf16():
        return False
    model = copy.deepcopy(trainer.model).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    batches = cycled(trainer.get_train_dataloader)
    calls = itertools.count()
    batch = None

    def step(bf16: bool) -> None:
        nonlocal batch
        if next(calls) % 2 == 0:  # the two steps of a pair on one batch
            batch = next(batches)
        with bf16_autocast() if bf16 else nullcontext():
            loss = trainer.compute_loss(model, dict(batch))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    float32, bfloat16 = time_precisions(step)
    chosen = bf16_pays(float32, bfloat16)
    logger.warning(
        "precision: a training step took %.2f s in float32 and %.2f s under bfloat16 autocast: training in %s",
        float32,
        bfloat16,
        "bfloat16 autocast" if chosen else "float32",
    )
    return chosen
