"""What a run reports: the machine, the results combined over the rounds, the ratios, and the table."""

import math
import os
import platform
import statistics
from dataclasses import asdict

import torch

from modeling_vaswani.kernels_vaswani import cpu_info

from .measure import Repetitions, training_flops
from .models import IMPLEMENTATIONS, PEERS, Shapes
from .phases import BEAMS, PHASES

# ---------------------------------------------------------------------------------------------------------------------
# The machine
# ---------------------------------------------------------------------------------------------------------------------


def machine() -> dict:
    import transformers

    facts = {
        "cpu": cpu_name(),
        "cpu_flags": cpu_flags(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    try:
        import ctranslate2

        facts["ctranslate2"] = ctranslate2.__version__
    except ImportError:
        pass
    if torch.cuda.is_available():
        facts["gpu"] = torch.cuda.get_device_name()
    return facts


def cpu_name() -> str:
    return cpu_info("model name") or platform.processor() or "unknown"


# The instruction sets that decide CPU matmul speed: hosts of the same name differ in them from one day to the next.
SIMD_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16")


def cpu_flags() -> list[str]:
    flags = (cpu_info("flags") or "").split()
    return [flag for flag in SIMD_FLAGS if flag in flags]


# ---------------------------------------------------------------------------------------------------------------------
# The results over the rounds
# ---------------------------------------------------------------------------------------------------------------------


def summary(phase: str, result: dict) -> str:
    if "error" in result:
        return f"FAILED: {result['error']}"
    if phase == "matmul":
        return ", ".join(f"{name} {rate:.1f} GFLOP/s" for name, rate in result["rates"].items())
    if phase == "latency":
        return f"{result['ms_per_sentence']:.1f} ms/sentence"
    return f"{result['tokens_per_s']:.1f} tokens/s"


def value(result: dict | None) -> float | None:
    """The phase's figure of merit: tokens/s for throughput, ms/sentence for latency; None if it did not run."""
    if not result:
        return None
    return result.get("tokens_per_s", result.get("ms_per_sentence"))


def combine(results: list[dict]) -> dict:
    """One measurement over the rounds: the first round's result with its figures replaced by their medians over
    the rounds, the largest peak memory, and each round's result under "rounds"; a failure or skip as it came."""
    first = results[0]
    if failed := next((result for result in results if "error" in result), None):
        return failed
    if len(results) == 1 or "skipped" in first:
        return first
    combined = {**first, "rounds": results}
    for name in ("median_s", "tokens_per_s", "ms_per_sentence", "gflops"):
        if name in first:
            combined[name] = statistics.median(result[name] for result in results)
    if "rates" in first:
        combined["rates"] = {
            name: statistics.median(result["rates"][name] for result in results) for name in first["rates"]
        }
    if "peak_memory_mib" in first:
        peaks = [result["peak_memory_mib"] for result in results if result["peak_memory_mib"] is not None]
        combined["peak_memory_mib"] = max(peaks, default=None)
    return combined


def build_report(
    rounds: list[dict], shapes: Shapes, device: str, dtype: str, threads: int, repetitions: Repetitions
) -> dict:
    """The results combined over the rounds, the ratios of ours to each peer (the median of each round's ratio)
    and the model FLOPs utilisation of training."""
    results = {
        implementation: {
            key: combine([round_results[implementation][key] for round_results in rounds]) for key in keys
        }
        for implementation, keys in rounds[0].items()
    }
    ceiling = results.pop("ceiling")
    ratios = {}
    for peer in PEERS:
        for phase in PHASES:
            per_round = []
            for round_results in rounds:
                ours = value(round_results.get("vaswani", {}).get(phase))
                theirs = value(round_results.get(peer, {}).get(phase))
                if ours and theirs:
                    per_round.append(ours / theirs)
            if per_round and len(per_round) == len(rounds):
                ratios.setdefault(f"vaswani/{peer}", {})[phase] = statistics.median(per_round)
    rate = ceiling.get(dtype, {}).get("gflops")
    for implementation in results.values():
        training = implementation.get("training", {})
        if rate and "tokens_per_s" in training:
            steps_per_s = training["tokens_per_s"] / (shapes.batch * (shapes.source_length + shapes.target_length))
            training["mfu"] = training_flops(shapes) * steps_per_s / (rate * 1e9)
    return {
        "machine": machine(),
        "device": device,
        "dtype": dtype,
        "threads": threads,
        "shapes": asdict(shapes),
        "repetitions": asdict(repetitions),
        "training_gflop_per_step": training_flops(shapes) / 1e9,
        "ceiling": ceiling,
        "results": results,
        "ratios": ratios,
        "ratio_meaning": "ours / theirs: > 1 is faster for tokens/s (training, greedy, beam); "
        "< 1 is faster for ms/sentence (latency)",
    }


# ---------------------------------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------------------------------


PHASE_LABELS = {
    "training": ("training", "tokens/s"),
    "greedy": ("greedy", "tokens/s"),
    "beam": (f"beam {BEAMS}", "tokens/s"),
    "latency": ("latency (batch 1)", "ms/sentence"),
}


def cell(number: float | None, digits: int = 1) -> str:
    return "-" if number is None or math.isnan(number) else f"{number:,.{digits}f}"


def ratio_cell(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def format_table(report: dict) -> str:
    results, shapes = report["results"], Shapes(**report["shapes"])
    implementations = [name for name in IMPLEMENTATIONS if name in results]
    peers = [name for name in PEERS if f"vaswani/{name}" in report["ratios"]]
    header = ["phase", "unit", *implementations, *(f"vaswani/{peer}" for peer in peers)]
    rows = []
    for phase in [phase for phase in PHASES if any(phase in results[name] for name in implementations)]:
        label, unit = PHASE_LABELS[phase]
        rows.append(
            [
                label,
                unit,
                *(cell(value(results[name].get(phase)), 2 if phase == "latency" else 1) for name in implementations),
                *(ratio_cell(report["ratios"][f"vaswani/{peer}"].get(phase)) for peer in peers),
            ]
        )
        rows.append(
            [
                "  peak memory",
                "MiB",
                *(cell(results[name].get(phase, {}).get("peak_memory_mib"), 0) for name in implementations),
            ]
        )
    widths = [max(len(row[i]) if i < len(row) else 0 for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(text.ljust(widths[0]) if i == 0 else text.rjust(widths[i]) for i, text in enumerate(row))
             for row in [header, *rows]]  # fmt: skip
    return "\n".join([*heading(report, shapes), *lines, *footer(report, results, implementations)])


def heading(report: dict, shapes: Shapes) -> list[str]:
    facts = report["machine"]
    processor = f"{facts['cpu']} ({facts['cpu_count']} CPUs)"
    if report["device"].startswith("cuda"):
        processor = f"{facts['gpu']}, {processor}"
    libraries = [name for name in ("torch", "transformers", "ctranslate2") if name in facts]
    versions = " · ".join(f"{name} {facts[name]}" for name in libraries)
    ceiling = "; ".join(
        f"{dtype} " + ", ".join(f"{name} {cell(rate)}" for name, rate in result.get("rates", {}).items())
        for dtype, result in report["ceiling"].items()
    )
    size = report["ceiling"].get("float32", {}).get("size", "?")
    return [
        f"{report['device']} {report['dtype']}, {report['threads']} thread(s) · {processor} · {versions}",
        f"{shapes.layers}+{shapes.layers} layers, d_model {shapes.d_model}, {shapes.heads} heads, d_ff {shapes.d_ff}, "
        f"vocabulary {shapes.vocab_size}; the same random weights in each",
        f"training: batch {shapes.batch} x ({shapes.source_length} + {shapes.target_length}) tokens; generation "
        f"(per-step cost at fixed length): batch {shapes.batch} x {shapes.source_length} source tokens, exactly "
        f"{shapes.new_tokens} new tokens each, </s> suppressed until then; latency: one sentence, greedy, the same",
        f"ceiling (GFLOP/s, {size}x{size} products): {ceiling}",
        memory_setting(report),
        "",
    ]


def memory_setting(report: dict) -> str:
    """What the processes ran with (`phases.worker_main`): the commands' setting, or a user's plain program."""
    if report.get("plain"):
        return (
            "plain processes: what a user's own program gets without calling keep_freed_memory() "
            "(modeling_vaswani/toolkit/runtime.py), glibc malloc's defaults"
        )
    kept = [
        result["keeps_freed_memory"]
        for phases in report["results"].values()
        for result in phases.values()
        if "keeps_freed_memory" in result
    ]
    setting = "the vaswani-* commands' apply_process_settings() (modeling_vaswani/toolkit/runtime.py)"
    if all(kept):
        return f"every process keeps the memory it frees, as {setting} sets glibc malloc"
    return f"{setting} did not apply in {kept.count(False)} of {len(kept)} measurements: opted out, or no glibc"


def footer(report: dict, results: dict, implementations: list[str]) -> list[str]:
    lines = [
        "",
        "vaswani/peer: ours / theirs; > 1 is faster for tokens/s, < 1 is faster for ms/sentence.",
        *(
            [f"each figure: the median over {rounds} rounds; each ratio: the median of the rounds' own ratios."]
            if (rounds := report["repetitions"]["rounds"]) > 1
            else []
        ),
        f"generation tokens/s: output tokens (sentences x {report['shapes']['new_tokens']}), not beam hypotheses.",
    ]
    utilisation = [
        f"{name} {100 * results[name]['training']['mfu']:.0f}%"
        for name in implementations
        if "mfu" in results[name].get("training", {})
    ]
    if utilisation:
        lines.append(
            f"training model FLOPs utilisation ({report['training_gflop_per_step']:.0f} GFLOP a step, of the "
            f"ceiling's {report['dtype']} rate): " + ", ".join(utilisation)
        )
    for name in implementations:
        for phase, result in results[name].items():
            if "skipped" in result or "error" in result:
                lines.append(f"{name} {phase}: {result.get('skipped') or 'FAILED: ' + result['error']}")
    return lines
