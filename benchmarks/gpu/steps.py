"""The training step taken apart, for the GPU run (benchmarks/gpu/run.sh): why bf16 autocast trained 6x slower than
float32 in the GPU check (docs/gpu.md: 46.8 s against 7.6 s for the same 300 steps of VaswaniTrainer), whether
torch.compile pays for training, and Table 3's base and big at the paper's batch against MarianMT.

    python benchmarks/gpu/steps.py --device cuda --dtype bfloat16 --out OUT    # OUT/bench-training-steps.json
    python benchmarks/gpu/steps.py --device cpu --tiny --out OUT                # the dry run
    python benchmarks/gpu/steps.py --parts big --out OUT                         # one part (PARTS)

One process, three parts (`--parts`, default all: on the H200 of 2026-11-30 the shapes took 90 s and base 151 s,
its first compiled step 146 s, so that the three do not fit the 300 s run.sh gives the stage; run.sh passes
VASWANI_GPU_STEPS_PARTS, a comma-separated list, as --parts):
- `shapes`: the small preset (vaswani-train's default model; tiny: bench.py's tiny network) on batches as
  VaswaniTrainer's token budget makes them (SHAPES: a padded batch of another shape each step, with its padding
  mask), every shape new in the first pass and seen in the second, after a first step of another shape
  (WARMUP_SHAPE). Three variants, each from the same weights, in this order: float32; bf16 autocast with cuDNN's
  attention kept out of SDPA's choices; bf16 autocast as torch chooses (on sm90 with cuDNN >= 9.15 torch tries
  cuDNN's attention first, and cuDNN builds an execution plan for every new shape). The last meets shapes the others
  have met already, so only cuDNN's plans can be new to it. For each variant and pass: forward, backward and
  optimizer milliseconds a step (the device synchronised between them), and from the profiler over one more step, the
  SDPA kernels that ran, autocast's casts (aten::_to_copy) and the host reads (aten::_local_scalar_dense, a
  synchronisation each on a GPU).
- `compiled`: the same batches through torch.compile (inductor; the CPU dry run dynamo alone) in the run's dtype: the
  graphs compiled over the varied shapes (each one a compilation: recompiles), both passes' step times.
- `paper`: base and big (tiny: the tiny network twice) at bench.py's batch (768 sentences of 32 + 32 tokens: the
  paper's 25,000 + 25,000 tokens a step), autocast in the run's dtype, Adam: our model eager and compiled, MarianMT
  eager (stock, as transformers ships it), on the same weights, in this process: tokens/s, model FLOPs utilisation
  against the matmul rate in that dtype measured here, and the ratios.

How to read it: docs/gpu.md ("Why bf16 trained slower").
"""

import argparse
import contextlib
import copy
import functools
import json
import statistics
import sys
import time
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCHMARKS))  # the measuring tools are not installed

import torch  # noqa: E402
from bench import TINY, TINY_BATCH  # noqa: E402
from speed import measure, models, phases  # noqa: E402
from torch.nn.attention import sdpa_kernel  # noqa: E402

from modeling_vaswani.toolkit.interop.marian_export import to_marian  # noqa: E402
from modeling_vaswani.toolkit.training.step import CUDA_TRAINING_ATTENTION  # noqa: E402

STAGE = "training-steps"
SEED = 0
# (sentences, longest source, longest target) of token-budget batches of 4000 tokens over Multi30k's lengths, as
# tests/gpu/test_gpu_training.py trains with; tiny: of bench.py's tiny network.
SHAPES = [(125, 15, 17), (110, 17, 19), (98, 19, 21), (87, 22, 23), (78, 24, 26), (70, 27, 29), (62, 30, 34)]
TINY_SHAPES = [(4, 5, 6), (3, 7, 8)]
# An untimed first step of each variant, of a shape of its own: what happens once a run (the optimizer's state, the
# device's libraries, a compiled step's first graph) stays out of the new-shape pass.
WARMUP_SHAPE, TINY_WARMUP_SHAPE = (140, 13, 15), (2, 4, 4)
PASSES = ("new shapes", "seen shapes")
STEP_PHASES = ("forward", "backward", "optimizer")
PAPER_BATCH = 768
PAPER_MODELS = ("base", "big")
PARTS = ("shapes", *PAPER_MODELS)
WARMUP, REPETITIONS = 2, 3  # the paper part's untimed and timed steps (the first untimed one compiles)
COUNTED_OPS = {"casts": "aten::_to_copy", "host_reads": "aten::_local_scalar_dense"}


def dynamo_graphs() -> int:
    """Graphs torch.compile has compiled in this process, from dynamo's private counters (torch's own tests read
    them; no public API counts recompilations). They count from 0: `compiled_graphs` fails where none were counted."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def compiled_graphs(before: int) -> int:
    graphs = dynamo_graphs() - before
    if graphs < 1:  # a compiled step compiles at least one graph: the counter has moved or been renamed
        raise RuntimeError(
            f"torch {torch.__version__}: torch._dynamo.utils.counters['stats']['unique_graphs'] no "
            "longer counts compiled graphs; adapt benchmarks/gpu/steps.py's dynamo_graphs"
        )
    return graphs


def small_model(tiny: bool, device: str):
    from modeling_vaswani import VaswaniForConditionalGeneration
    from modeling_vaswani.toolkit.training.presets import preset_config

    torch.manual_seed(SEED)
    if tiny:
        config = models.vaswani_config(models.Shapes(**TINY))
    else:
        config = preset_config("small", vocab_size=8000)  # vaswani-train's vocabulary on Multi30k
    return VaswaniForConditionalGeneration(config).to(device).train()


def padded(rows: int, length: int, config, generator: torch.Generator) -> torch.Tensor:
    """Right-padded ids ending in </s>, rows of length/2 to `length`, the first row the longest."""
    ids = torch.full((rows, length), config.pad_token_id)
    lengths = torch.randint(max(2, length // 2), length + 1, (rows,), generator=generator)
    lengths[0] = length
    for row, size in enumerate(lengths.tolist()):
        ids[row, : size - 1] = torch.randint(4, config.vocab_size, (size - 1,), generator=generator)
        ids[row, size - 1] = config.eos_token_id
    return ids


def shape_batches(config, tiny: bool, device: str) -> list[dict]:
    generator = torch.Generator().manual_seed(SEED)
    batches = []
    shapes = [TINY_WARMUP_SHAPE, *TINY_SHAPES] if tiny else [WARMUP_SHAPE, *SHAPES]
    for rows, source_length, target_length in shapes:
        source = padded(rows, source_length, config, generator)
        labels = padded(rows, target_length, config, generator)
        batches.append(
            {
                "input_ids": source.to(device),
                "attention_mask": source.ne(config.pad_token_id).long().to(device),
                "labels": labels.masked_fill(labels == config.pad_token_id, -100).to(device),
            }
        )
    return batches


def optimizer_of(model, device: str):
    """The optimizer VaswaniTrainer trains with on this device (transformers' choice from its arguments)."""
    from transformers import Trainer

    from modeling_vaswani.toolkit.training.trainer import VaswaniTrainingArguments

    arguments = VaswaniTrainingArguments(
        output_dir="unused", use_cpu=device == "cpu", report_to=[], learning_rate=1e-4
    )
    optimizer_class, keywords = Trainer.get_optimizer_cls_and_kwargs(arguments, model)
    return optimizer_class(model.parameters(), **keywords)


def step_times(model, optimizer, batch: dict, context, device: str) -> dict[str, float]:
    """One training step; milliseconds of its forward, backward and optimizer phases."""
    marks = [time.perf_counter()]
    with context():
        loss = model(**batch).loss
        measure.synchronize(device)
        marks.append(time.perf_counter())
        loss.backward()
        measure.synchronize(device)
        marks.append(time.perf_counter())
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    measure.synchronize(device)
    marks.append(time.perf_counter())
    return {phase: 1000 * (end - start) for phase, start, end in zip(STEP_PHASES, marks[:-1], marks[1:], strict=True)}


def passes(model, optimizer, warmup: dict, batches: list[dict], context, device: str) -> dict:
    """The warm-up step's milliseconds, then each pass over `batches`: its mean milliseconds a step, by phase and in
    all."""
    result = {"warmup_step_ms": sum(step_times(model, optimizer, warmup, context, device).values())}
    for name in PASSES:
        steps = [step_times(model, optimizer, batch, context, device) for batch in batches]
        mean = {f"{phase}_ms": statistics.fmean(step[phase] for step in steps) for phase in STEP_PHASES}
        result[name] = {**mean, "step_ms": sum(mean.values())}
    return result


def profiled_ops(model, optimizer, batch: dict, context, device: str) -> dict:
    """The SDPA kernels, casts and host reads of one step, as the profiler counts the operators called."""
    counts = measure.operator_counts(lambda: step_times(model, optimizer, batch, context, device))
    found = {name: counts.get(op, 0) for name, op in COUNTED_OPS.items()}
    found["sdpa_kernels"] = measure.sdpa_operators(counts)
    return found


def variant_context(dtype: torch.dtype | None, backends, device: str):
    def context():
        stack = contextlib.ExitStack()
        if dtype is not None:
            stack.enter_context(torch.autocast(torch.device(device).type, dtype=dtype))
        if backends is not None:
            stack.enter_context(sdpa_kernel(backends))
        return stack

    return context


def shapes_part(tiny: bool, device: str, dtype: str) -> dict:
    """float32, bf16 without cuDNN's attention, bf16 as torch chooses: phases by pass, the profiler's counts."""
    initial = small_model(tiny, device)
    warmup, *batches = shape_batches(initial.config, tiny, device)
    variants = {
        "float32": variant_context(None, None, device),
        "bf16 without cuDNN attention": variant_context(torch.bfloat16, list(CUDA_TRAINING_ATTENTION), device),
        "bf16": variant_context(torch.bfloat16, None, device),
    }
    result = {
        "model": {"d_model": initial.config.d_model, "layers": initial.config.encoder_layers},
        "attn_implementation": initial.config._attn_implementation,
        "shapes": TINY_SHAPES if tiny else SHAPES,
        "variants": {},
    }
    for name, context in variants.items():
        model = copy.deepcopy(initial)
        optimizer = optimizer_of(model, device)
        result["optimizer"] = type(optimizer).__name__
        timings = passes(model, optimizer, warmup, batches, context, device)
        timings["profile"] = profiled_ops(model, optimizer, batches[0], context, device)
        result["variants"][name] = timings
        del model, optimizer
    compiled = torch.compile(copy.deepcopy(initial), backend=compile_backend(device))
    before = dynamo_graphs()
    context = variant_context(None if dtype == "float32" else measure.DTYPES[dtype], None, device)
    result["compiled"] = {
        "backend": compile_backend(device),
        "dtype": dtype,
        **passes(compiled, optimizer_of(compiled, device), warmup, batches, context, device),
        "graphs_compiled": compiled_graphs(before),
    }
    result["ratios"] = shape_ratios(result)
    return result


def shape_ratios(result: dict) -> dict:
    """What tells the causes apart: bf16 against float32 by phase on seen shapes, and what a new shape costs."""
    variants = result["variants"]
    seen = {name: timings["seen shapes"] for name, timings in variants.items()}
    ratios = {
        f"{name} / float32, seen shapes, {phase}": seen[name][f"{phase}_ms"] / seen["float32"][f"{phase}_ms"]
        for name in variants
        if name != "float32"
        for phase in (*STEP_PHASES, "step")
    }
    for name, timings in variants.items():
        ratios[f"{name}: new / seen shapes, step"] = (
            timings["new shapes"]["step_ms"] / timings["seen shapes"]["step_ms"]
        )
    compiled = result["compiled"]
    ratios["compiled / eager, seen shapes, step"] = (
        compiled["seen shapes"]["step_ms"] / seen["float32" if compiled["dtype"] == "float32" else "bf16"]["step_ms"]
    )
    return ratios


def compile_backend(device: str) -> str:
    # The dry run proves the path (dynamo's capture of the step, the counts), not the kernels: inductor's C++ code
    # generation takes a minute on a small CPU, and tests/gpu/test_gpu_training.py runs AOTAutograd's.
    return "inductor" if device.startswith("cuda") else "eager"


def paper_model(name: str, tiny: bool, device: str, dtype: str, ceiling_gflops: float) -> dict:
    """`name` (base or big) at the paper's batch: our model eager and compiled, MarianMT eager, tokens/s and MFU."""
    from modeling_vaswani import VaswaniForConditionalGeneration

    shapes = models.Shapes(**TINY, batch=TINY_BATCH) if tiny else models.model_shapes(name, PAPER_BATCH)
    torch.manual_seed(SEED)
    ours = VaswaniForConditionalGeneration(models.vaswani_config(shapes))
    marian = to_marian(ours).to(device)
    ours = ours.to(device)
    implementations = {
        "vaswani eager": ours,
        "vaswani compiled": torch.compile(copy.deepcopy(ours), backend=compile_backend(device)),
        "marian eager": marian,
    }
    del ours, marian
    flops = measure.training_flops(shapes)
    figures = {"batch": f"{shapes.batch} x ({shapes.source_length} + {shapes.target_length})"}
    for label in list(implementations):
        figures[label] = paper_figures(implementations.pop(label), shapes, device, dtype, flops, ceiling_gflops)
    figures["ratios"] = {
        f"{label} / marian eager": figures[label]["tokens_per_s"] / figures["marian eager"]["tokens_per_s"]
        for label in ("vaswani eager", "vaswani compiled")
    }
    figures["ratios"]["vaswani compiled / eager"] = (
        figures["vaswani compiled"]["tokens_per_s"] / figures["vaswani eager"]["tokens_per_s"]
    )
    return figures


def paper_figures(model, shapes, device: str, dtype: str, flops: int, ceiling_gflops: float) -> dict:
    call = phases.training_call(model, shapes, device, dtype)
    measure.synchronize(device)
    start = time.perf_counter()
    call()  # the first step: a compiled model compiles here
    measure.synchronize(device)
    first_s = time.perf_counter() - start
    memory = measure.PeakMemory(device).start()
    times = measure.timed(call, WARMUP - 1, REPETITIONS, device)
    median = statistics.median(times)
    tokens = shapes.batch * (shapes.source_length + shapes.target_length)
    return {
        "tokens_per_s": tokens / median,
        "mfu": flops / median / (ceiling_gflops * 1e9),
        "step_ms": 1000 * median,
        "first_step_s": first_s,
        "peak_memory_mib": memory.peak_mib(),
    }


def table_of(output: dict) -> str:
    """The figures as text, the report's table for this stage."""
    lines = []
    shapes = output.get("shapes")
    if shapes:
        lines.append(
            f"varied shapes ({len(shapes['shapes'])} a pass), ms a step: forward / backward / optimizer = step"
        )
        rows = {**shapes["variants"], f"compiled ({shapes['compiled']['dtype']})": shapes["compiled"]}
        for name, timings in rows.items():
            cells = [
                " / ".join(f"{timings[part][f'{phase}_ms']:.1f}" for phase in STEP_PHASES)
                + f" = {timings[part]['step_ms']:.1f}"
                for part in PASSES
            ]
            lines.append(f"  {name:<30} first {timings['warmup_step_ms']:.0f}, new {cells[0]:<32} seen {cells[1]}")
        for name, timings in shapes["variants"].items():
            profile = timings["profile"]
            lines.append(
                f"  {name:<30} casts {profile['casts']}, host reads {profile['host_reads']}, SDPA "
                + ", ".join(f"{op} x{count}" for op, count in profile["sdpa_kernels"].items())
            )
        lines.append(f"  graphs compiled over the shapes: {shapes['compiled']['graphs_compiled']}")
        lines += [f"  {name}: {value:.2f}x" for name, value in shapes["ratios"].items()]
    for model, figures in output.get("paper", {}).items():
        lines.append(f"{model} at {figures['batch']} tokens, {output['dtype']}:")
        for label in ("vaswani eager", "vaswani compiled", "marian eager"):
            entry = figures[label]
            lines.append(
                f"  {label:<18} {entry['tokens_per_s']:>12,.0f} tokens/s  MFU {entry['mfu']:.1%}  "
                f"{entry['step_ms']:.1f} ms a step (first {entry['first_step_s']:.1f} s)"
            )
        lines += [f"  {name}: {value:.2f}x" for name, value in figures["ratios"].items()]
    lines += [f"FAILED {error}" for error in output["errors"]]
    return "\n".join(lines)


def run(device: str, dtype: str, tiny: bool, out: Path, progress=print, parts=PARTS) -> dict:
    """Each of `parts` (one failing leaves the others), OUT/bench-training-steps.json written after each, `complete`
    once all ran (a stage stopped at its time limit leaves the parts it measured); returns what it wrote last."""
    start = time.perf_counter()
    torch.set_float32_matmul_precision("highest")  # float32 means float32, as in tests/gpu/
    output = {"stage": STAGE, "tiny": tiny, "device": device, "dtype": dtype, "parts": list(parts), "errors": []}
    output["complete"] = False

    def write(part: str):
        output["seconds"] = round(time.perf_counter() - start, 1)
        output["table"] = table_of(output)
        (out / f"bench-{STAGE}.json").write_text(json.dumps(output, indent=2, default=str) + "\n")
        progress(f"[{STAGE}] {part} measured ({output['seconds']:.0f} s)")

    if "shapes" in parts:
        try:
            output["shapes"] = shapes_part(tiny, device, dtype)
        except Exception as error:  # a benchmark reports what failed, and measures the rest
            output["errors"].append(f"shapes: {type(error).__name__}: {error}")
        write("varied shapes")
    models = [name for name in PAPER_MODELS if name in parts]
    try:
        if models:
            output["ceiling"] = measure.matmul_rate(device, dtype, 1, REPETITIONS)
        for name in models:
            output.setdefault("paper", {})[name] = paper_model(name, tiny, device, dtype, output["ceiling"]["gflops"])
            write(name)
    except Exception as error:
        output["errors"].append(f"paper: {type(error).__name__}: {error}")
    output["complete"] = True
    write("everything")
    progress(output["table"])
    return output


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16", choices=list(measure.DTYPES))
    parser.add_argument("--tiny", action="store_true", help="a tiny network (the CPU dry run)")
    parser.add_argument("--out", type=Path, required=True, help="the folder for bench-training-steps.json")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="default: all, in order")
    arguments = parser.parse_args(argv)
    measure.check_device(arguments.device)
    arguments.out.mkdir(parents=True, exist_ok=True)
    output = run(
        arguments.device,
        arguments.dtype,
        arguments.tiny,
        arguments.out,
        functools.partial(print, flush=True),
        [part for part in PARTS if part in arguments.parts],
    )
    for error in output["errors"]:
        print(f"FAILED {error}", file=sys.stderr)
    return 1 if output["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
