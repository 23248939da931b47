"""Instruments: devices and dtypes, wall time of repeated calls, the peak memory a stretch of work adds, the machine's
matmul rate (the ceiling) and the FLOPs of a training step."""

import argparse
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .models import Shapes

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

# ---------------------------------------------------------------------------------------------------------------------
# Devices and dtypes
# ---------------------------------------------------------------------------------------------------------------------


def positive(kind):
    """argparse type of the benchmarks' counts and durations: `kind` (int, float) of the text, above 0."""

    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text}; expected a number above 0")
        return value

    return parse


def check_device(name: str) -> str:
    """`cpu`, `cuda` or `cuda:N`, usable on this machine; anything else is refused with the reason."""
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"unknown device {name!r}: expected cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"unsupported device {name!r}: expected cpu, cuda or cuda:N")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r}: CUDA is not available to this torch ({torch.__version__})")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise ValueError(f"device {name!r}: only {torch.cuda.device_count()} CUDA device(s) here")
    return name


def check_dtype(name: str) -> str:
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}: expected one of {', '.join(DTYPES)}")
    return name


def synchronize(device: str):
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


@dataclass(frozen=True)
class Repetitions:
    """Untimed warm-up calls and timed repetitions of each phase in each process (`matmul`: the ceiling's loop), and
    the rounds: how many times the whole list of processes runs, one implementation after another within a round."""

    warmup: dict = field(default_factory=lambda: {"matmul": 2, "training": 2, "greedy": 1, "beam": 1, "latency": 3})
    timed: dict = field(default_factory=lambda: {"matmul": 5, "training": 5, "greedy": 3, "beam": 2, "latency": 10})
    rounds: int = 3


FULL = Repetitions()

QUICK = Repetitions(
    warmup={"matmul": 1, "training": 1, "greedy": 1, "beam": 1, "latency": 1},
    timed={"matmul": 3, "training": 2, "greedy": 2, "beam": 2, "latency": 3},
    rounds=1,
)


# ---------------------------------------------------------------------------------------------------------------------
# Time and memory
# ---------------------------------------------------------------------------------------------------------------------


def proc_status_kib(field_name: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise KeyError(field_name)


class PeakMemory:
    """The peak memory of a stretch of work, in MiB: `start()` before it, `peak_mib()` after.

    On CUDA: torch's allocator statistics (tensors only; None for CTranslate2, whose allocator torch does not see).
    On CPU: the process's resident set at its largest, the kernel's high-water mark (exact, not sampled), which Linux
    resets on request (clear_refs 5); None elsewhere.
    """

    def __init__(self, device: str = "cpu", torch_allocations: bool = True):
        self.device = device
        self.torch_allocations = torch_allocations
        self.baseline = None

    def start(self):
        if self.device.startswith("cuda"):
            if self.torch_allocations:
                synchronize(self.device)
                torch.cuda.reset_peak_memory_stats(self.device)
                self.baseline = torch.cuda.memory_allocated(self.device)
        elif os.path.exists("/proc/self/clear_refs"):
            with open("/proc/self/clear_refs", "w") as clear_refs:
                clear_refs.write("5")
            self.baseline = proc_status_kib("VmHWM") * 1024  # the resident set now, as the reset left it
        return self

    def peak_mib(self, whole: bool = False) -> float | None:
        """What the work added at its peak over what the process held at `start()`; `whole`: the peak itself."""
        if self.baseline is None:
            return None
        if self.device.startswith("cuda"):
            peak = torch.cuda.max_memory_allocated(self.device)
        else:
            peak = proc_status_kib("VmHWM") * 1024
        return (peak - (0 if whole else self.baseline)) / 2**20


def timed(call: Callable[[], object], warmup: int, repetitions: int, device: str) -> list[float]:
    """Seconds taken by each of `repetitions` calls, after `warmup` untimed ones."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repetitions):
        synchronize(device)
        start = time.perf_counter()
        call()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return times


def operator_counts(call: Callable[[], object]) -> dict[str, int]:
    """How many times `call` calls each torch operator, as torch's profiler counts them on the host (every kernel a
    CUDA operator launches is named by its operator there too)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        call()
    return {event.key: event.count for event in profiler.key_averages()}


def sdpa_operators(counts: dict[str, int]) -> dict[str, int]:
    """The scaled-dot-product-attention kernels among `counts` (operator_counts): which of SDPA's backends ran."""
    return {op: count for op, count in counts.items() if "scaled_dot_product" in op}


# ---------------------------------------------------------------------------------------------------------------------
# The ceiling and the model's FLOPs
# ---------------------------------------------------------------------------------------------------------------------


def matmul_rate(device: str, dtype: str, warmup: int, repetitions: int) -> dict:
    """GFLOP/s of square matrix products (2 n^3 FLOPs each): the most this machine can give a transformer.

    On CPU, torch's own products (MKL for float32) and oneDNN's with a prepacked operand, the kernel behind
    inductor's CPU linears and what CTranslate2 uses on AMD CPUs: MKL runs its slower code paths on non-Intel CPUs
    (seen on an AMD EPYC: 91 GFLOP/s a core against oneDNN's 203). The ceiling is the faster of the two.
    """
    size = 8192 if device.startswith("cuda") else 2048
    a, b = (torch.randn(size, size, device=device, dtype=DTYPES[dtype]) for _ in range(2))
    rates = {"torch.matmul": gflops(size, timed(lambda: torch.matmul(a, b), warmup, repetitions, device))}
    if onednn := onednn_product(a, b):
        rates["oneDNN"] = gflops(size, timed(onednn, warmup, repetitions, device))
    return {"dtype": dtype, "size": size, "rates": rates, "gflops": max(rates.values())}


def gflops(size: int, times: list[float]) -> float:
    return 2 * size**3 / statistics.median(times) / 1e9


def onednn_product(a: torch.Tensor, b: torch.Tensor) -> Callable[[], torch.Tensor] | None:
    """a @ b through oneDNN (torch's private mkldnn ops), or None off CPU or where this torch lacks them."""
    from modeling_vaswani.kernels_vaswani import ONEDNN_LINEAR, onednn_linear

    if a.device.type != "cpu" or not ONEDNN_LINEAR:
        return None
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(b.t().contiguous(), a.shape[0])
        onednn_linear(a, packed)
    except RuntimeError:
        return None
    return lambda: onednn_linear(a, packed)


def forward_flops(shapes: Shapes, batch: int, source_length: int, target_length: int) -> int:
    """FLOPs of the matrix products of one teacher-forced forward pass (2 per multiply-add).

    Embedding lookups, norms, softmax and the other element-wise work are left out, as model FLOPs utilisation
    conventionally does. Attention counts the full score matrix, as the kernels compute it.
    """
    d, d_ff, layers = shapes.d_model, shapes.d_ff, shapes.layers
    per_source_token = layers * (8 * d * d + 4 * d * d_ff + 4 * source_length * d)  # encoder
    per_source_token += layers * 4 * d * d  # the decoder's cross-attention keys and values of the encoder output
    per_target_token = layers * (12 * d * d + 4 * d * d_ff + 4 * (target_length + source_length) * d)
    per_target_token += 2 * d * shapes.vocab_size  # the output layer
    return batch * (source_length * per_source_token + target_length * per_target_token)


def training_flops(shapes: Shapes) -> int:
    """Forward + backward: the backward pass does two products (input and weight gradients) per forward one."""
    return 3 * forward_flops(shapes, shapes.batch, shapes.source_length, shapes.target_length)
