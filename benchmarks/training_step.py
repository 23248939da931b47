"""The main job's training step (vaswani-train's small preset on the shipped Multi30k, its token batches of 1500),
part by part and in variants, measured in one run: every variant trains its own copy of the same initial model on the
same batches, one step each in turn (the order rotating every step), so that each sees the same machine load and all
reach the same step; then each one's validation loss (label-smoothed and plain) on the first 300 validation pairs.

Variants: `current` (the Trainer's step before issue 53: its LabelSmoother, fused AdamW); `current_seed1` (the same
from another initial model: the noise that a validation loss difference must beat); `fused_loss` (training/step.py's
smoothed_cross_entropy, VaswaniTrainer's compute_loss_func); `foreach_adam`, `loop_adam` (AdamW's other
implementations); `bf16` (training/step.py's bf16_autocast: bfloat16 autocast, attention by SDPA's math kernel);
`bf16_flash` (plain autocast, the flash kernel); `mkl_products` (`current` with training's products through
nn.Linear's MKL sgemm where kernels_vaswani.ONEDNN_TRAINING would take oneDNN's); `compile` (torch.compile of the
model, dynamic shapes; its compile time is reported apart); `adopted` (what VaswaniTrainer now does on this machine:
its loss, and the autocast its probe chose); `marian` (a stock MarianMTModel of the same shapes, as a stock
Seq2SeqTrainer steps it: LabelSmoother, fused AdamW); `marian_stock` (the same on the batches a stock Seq2SeqTrainer
draws instead of ours: quality.py's baseline's 64 sentences in random order, each batch padded to its longest, as
DataCollatorForSeq2Seq pads; a step of its own batch, so that its steps/s are not comparable and its tokens/s, the
tokens that are not padding, are).

Prints steps/s and tokens/s of each, tokens/s ratios against `current`, `marian` and `marian_stock`, the parts of a
step (batch, forward, loss, backward, optimizer), the padding of the batches, the CPU flags and what ran beside it
(load average, the busiest other processes).

python benchmarks/training_step.py --steps 60                      # a few minutes on 2 cores
python benchmarks/training_step.py --steps 200 --variants current bf16 fused_loss adopted marian
"""

import argparse
import copy
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from functools import partial
from pathlib import Path

import torch
from quality import BASELINE_BATCH  # the stock recipe's batch, one home (benchmarks/quality.py)
from speed.report import machine
from transformers import DataCollatorForSeq2Seq, MarianMTModel, Seq2SeqTrainer, Seq2SeqTrainingArguments
from transformers.trainer_pt_utils import LabelSmoother

from modeling_vaswani import kernels_vaswani
from modeling_vaswani.modeling_vaswani import VaswaniForConditionalGeneration
from modeling_vaswani.toolkit.interop.marian_export import check_marian_exportable, marian_config
from modeling_vaswani.toolkit.outputs import write_text
from modeling_vaswani.toolkit.training.budget import cycled
from modeling_vaswani.toolkit.training.presets import PRESETS, preset_config
from modeling_vaswani.toolkit.training.recipe import load_data, parse_arguments, prepare_tokenizer, tokenize_pairs
from modeling_vaswani.toolkit.training.step import bf16_autocast, probe_bf16
from modeling_vaswani.toolkit.training.trainer import VaswaniTrainer, smoothed_loss

VARIANTS = (
    "current", "current_seed1", "fused_loss", "foreach_adam", "loop_adam", "bf16", "bf16_flash", "compile", "adopted",
    "mkl_products", "marian", "marian_stock",
)  # fmt: skip
PARTS = ("batch", "forward", "loss", "backward", "optimizer")
WARMUP_STEPS = 3  # untimed per variant: allocator warm-up, and compilation for `compile`


@contextmanager
def mkl_products():
    """Training's products through nn.Linear (MKL) inside, whatever kernels_vaswani.ONEDNN_TRAINING says."""
    chosen = kernels_vaswani.ONEDNN_TRAINING
    kernels_vaswani.ONEDNN_TRAINING = False
    try:
        yield
    finally:
        kernels_vaswani.ONEDNN_TRAINING = chosen


def main_job_trainer(output_dir: str) -> VaswaniTrainer:
    """A VaswaniTrainer of the main job (vaswani-train's defaults), for its batches, its arguments and its model."""
    model_args, data_args, training_args = parse_arguments(["--output_dir", output_dir, "--report_to", "none"])
    data = load_data(data_args)
    source, target = data_args.source_lang, data_args.target_lang
    tokenizer = prepare_tokenizer(model_args, data["train"], source, target, Path(output_dir))
    train = tokenize_pairs(data["train"], tokenizer, source, target)
    validation = tokenize_pairs(data[data_args.validation_split], tokenizer, source, target)
    torch.manual_seed(training_args.seed)
    model = VaswaniForConditionalGeneration(preset_config(model_args.preset, tokenizer))
    return VaswaniTrainer(
        model=model, args=training_args, train_dataset=train, eval_dataset=validation, processing_class=tokenizer
    )


class Runner:
    """One variant: its model, optimizer and Equation 3's schedule (the preset's peak and warmup), its timings."""

    def __init__(self, name: str, model: torch.nn.Module, trainer: VaswaniTrainer):
        self.name = name
        self.model = model.train()
        args = trainer.args
        fused = {"foreach_adam": {"foreach": True}, "loop_adam": {"foreach": False}}.get(name, {"fused": True})
        hyper = {"lr": args.learning_rate, "betas": (args.adam_beta1, args.adam_beta2), "eps": args.adam_epsilon}
        self.optimizer = torch.optim.AdamW(model.parameters(), weight_decay=0.0, **hyper, **fused)
        warmup = args.warmup_steps
        self.schedule = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda update: min((update + 1) / warmup, (warmup / (update + 1)) ** 0.5)
        )
        fused = partial(smoothed_loss, epsilon=args.label_smoothing_factor)
        self.loss = {"fused_loss": fused, "adopted": trainer.compute_loss_func}.get(
            name, LabelSmoother(epsilon=args.label_smoothing_factor)
        )
        self.autocast = {
            "bf16": bf16_autocast,
            "bf16_flash": partial(torch.autocast, "cpu", torch.bfloat16),
            "adopted": trainer.autocast_smart_context_manager,  # after the probe: VaswaniTrainer's own choice
        }.get(name, nullcontext)
        self.products = mkl_products if name == "mkl_products" else nullcontext
        self.forward = torch.compile(model, dynamic=True) if name == "compile" else model
        self.times = {part: [] for part in PARTS}
        self.tokens = []
        self.compile_seconds = 0.0
        self.batches = None  # a variant with batches of its own (marian_stock) draws them here
        self.drawn = []

    def step(self, batch: dict, batch_seconds: float, timed: bool) -> None:
        if self.batches is not None:
            fetched = time.perf_counter()
            batch = next(self.batches)
            batch_seconds = time.perf_counter() - fetched
            self.drawn.append(batch)
        labels = batch["labels"]
        inputs = {key: value for key, value in batch.items() if key != "labels"}
        marks = [time.perf_counter()]
        with self.products():
            with self.autocast():
                outputs = self.forward(**inputs)
                marks.append(time.perf_counter())
                loss = self.loss(outputs, labels)
            marks.append(time.perf_counter())
            loss.backward()
            marks.append(time.perf_counter())
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.schedule.step()
        marks.append(time.perf_counter())
        if not timed:
            self.compile_seconds += marks[-1] - marks[0]
            return
        for part, seconds in zip(PARTS, [batch_seconds, *(b - a for a, b in itertools.pairwise(marks))], strict=True):
            self.times[part].append(seconds)
        tokens = batch["attention_mask"].sum() + labels.ne(-100).sum()
        self.tokens.append(int(tokens))

    def summary(self) -> dict:
        step_seconds = [sum(parts) for parts in zip(*self.times.values(), strict=True)]
        total = sum(step_seconds)
        return {
            "steps_per_s": len(step_seconds) / total,
            "tokens_per_s": sum(self.tokens) / total,
            "median_step_s": statistics.median(step_seconds),
            "parts_s": {part: statistics.median(times) for part, times in self.times.items()},
            "untimed_first_steps_s": self.compile_seconds,
        }


@torch.no_grad()
def validation_losses(model, batches: list[dict], epsilon: float) -> dict:
    """Label-smoothed and plain per-token cross-entropy over `batches`, in float32, the model in eval mode."""
    model.eval()
    smoothed = plain = 0.0
    count = 0
    for batch in batches:
        labels = batch["labels"]
        logits = model(**{key: value for key, value in batch.items() if key != "labels"}).logits.float()
        flat = logits.flatten(0, -2), labels.flatten()
        smoothed += float(torch.nn.functional.cross_entropy(*flat, label_smoothing=epsilon, reduction="sum"))
        plain += float(torch.nn.functional.cross_entropy(*flat, reduction="sum"))
        count += int(labels.ne(-100).sum())
    model.train()
    return {"smoothed": smoothed / count, "plain": plain / count}


def beside() -> dict:
    """What else ran: the load average and the five busiest other processes (ps)."""
    top = subprocess.run(
        ["ps", "-eo", "pcpu,comm", "--sort=-pcpu", "--no-headers"], capture_output=True, text=True, check=False
    ).stdout.splitlines()
    others = [line.strip() for line in top if str(os.getpid()) not in line][:6]
    return {"load_average": os.getloadavg(), "busiest_processes": others}


def padding(batches: list[dict]) -> dict:
    """The share of padded positions in the source and target tensors of `batches`."""
    source = sum(b["attention_mask"].numel() for b in batches), sum(int(b["attention_mask"].sum()) for b in batches)
    target = sum(b["labels"].numel() for b in batches), sum(int(b["labels"].ne(-100).sum()) for b in batches)
    return {"source": 1 - source[1] / source[0], "target": 1 - target[1] / target[0]}


def stock_batches(trainer: VaswaniTrainer, model) -> Iterator[dict]:
    """The batches a stock Seq2SeqTrainer draws from the main job's tokenized training pairs: BASELINE_BATCH sentences
    in random order, padded to the longest of each by DataCollatorForSeq2Seq (labels with -100)."""
    args = Seq2SeqTrainingArguments(
        output_dir=trainer.args.output_dir, per_device_train_batch_size=BASELINE_BATCH, seed=trainer.args.seed,
        report_to=[], use_cpu=trainer.args.use_cpu,
    )  # fmt: skip
    collator = DataCollatorForSeq2Seq(trainer.processing_class, model=model)
    stock = Seq2SeqTrainer(model=model, args=args, train_dataset=trainer.train_dataset, data_collator=collator)
    return cycled(stock.get_train_dataloader)


def build_runners(trainer: VaswaniTrainer, names: list[str]) -> list[Runner]:
    args = trainer.args
    runners = []
    for name in names:
        if name in ("marian", "marian_stock"):
            check_marian_exportable(trainer.model.config)  # the export's MarianConfig, of shapes MarianMT can hold
            torch.manual_seed(args.seed)
            model = MarianMTModel(marian_config(trainer.model.config))
        elif name == "current_seed1":
            torch.manual_seed(args.seed + 1)
            model = VaswaniForConditionalGeneration(trainer.model.config)
        else:
            model = copy.deepcopy(trainer.model)
        runners.append(Runner(name, model, trainer))
        if name == "marian_stock":
            runners[-1].batches = stock_batches(trainer, model)
    return runners


def run(steps: int, names: list[str], threads: int | None) -> dict:
    if threads:
        torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as folder:
        trainer = main_job_trainer(folder)
        trainer.bf16_autocast = probe_bf16(trainer)  # what the probe would choose (vaswani-train no longer adopts it)
        runners = build_runners(trainer, names)
        loader = iter(trainer.get_train_dataloader())
        validation = list(itertools.islice(iter(trainer.get_eval_dataloader()), 300 // trainer.args.eval_batch_size))
        before = beside()
        started = time.monotonic()
        used = []
        for index in range(WARMUP_STEPS + steps):
            fetched = time.perf_counter()
            batch = next(loader)
            batch_seconds = time.perf_counter() - fetched
            used.append(batch)
            shift = index % len(runners)
            for runner in runners[shift:] + runners[:shift]:
                runner.step(batch, batch_seconds, timed=index >= WARMUP_STEPS)
            if (index + 1) % 10 == 0:
                elapsed = time.monotonic() - started
                print(f"step {index + 1} of {WARMUP_STEPS + steps}: {elapsed:.0f} s", file=sys.stderr)
        wall = time.monotonic() - started
        after = beside()
        epsilon = trainer.args.label_smoothing_factor
        results = {}
        for runner in runners:
            losses = validation_losses(runner.model, validation, epsilon)
            results[runner.name] = runner.summary() | {"validation": losses}
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine(),
        "torch_threads": torch.get_num_threads(),
        "adopted_bf16": trainer.bf16_autocast,
        "steps": steps,
        "wall_s": wall,
        "padding": padding(used),
        "padding_stock": padding(runners[names.index("marian_stock")].drawn) if "marian_stock" in names else None,
        "beside_before": before,
        "beside_after": after,
        "variants": results,
    }


def table(report: dict) -> str:
    variants = report["variants"]
    lines = [
        f"{report['date']}: the main job's step (small preset, Multi30k, max_tokens "
        f"{PRESETS['small']['training']['max_tokens']}), {report['steps']} steps each after {WARMUP_STEPS} untimed, "
        f"{report['torch_threads']} torch threads, variants alternating; adopted: the fused loss, "
        f"{'bfloat16 autocast' if report['adopted_bf16'] else 'float32'} (the probe's choice)",
        f"cpu: {report['machine']['cpu']}, flags {' '.join(report['machine']['cpu_flags'])}; torch "
        f"{report['machine']['torch']}",
        f"beside it: load {report['beside_before']['load_average']} before, {report['beside_after']['load_average']} "
        f"after; busiest others at the start: {report['beside_before']['busiest_processes'][:3]}",
        f"padding: {report['padding']['source']:.1%} of source positions, {report['padding']['target']:.1%} of target"
        + (
            f"; marian_stock's {report['padding_stock']['source']:.1%} and {report['padding_stock']['target']:.1%}"
            if report.get("padding_stock")
            else ""
        ),
        "",
        f"{'variant':<14} {'steps/s':>8} {'x current':>9} {'tokens/s':>9} {'x marian':>8} {'x stock':>8}  "
        + " ".join(f"{part:>9}" for part in PARTS)
        + f" {'val loss':>9} {'val NLL':>8} {'untimed s':>9}",
    ]
    for name, result in variants.items():
        ratio = {  # tokens that are not padding: the one rate comparable across batchings
            peer: f"{result['tokens_per_s'] / variants[peer]['tokens_per_s']:.2f}" if peer in variants else "-"
            for peer in ("current", "marian", "marian_stock")
        }
        parts = " ".join(f"{result['parts_s'][part] * 1000:7.0f}ms" for part in PARTS)
        lines.append(
            f"{name:<14} {result['steps_per_s']:8.3f} {ratio['current']:>9} {result['tokens_per_s']:9.0f} "
            f"{ratio['marian']:>8} {ratio['marian_stock']:>8}  {parts} {result['validation']['smoothed']:9.4f} "
            f"{result['validation']['plain']:8.4f} {result['untimed_first_steps_s']:9.1f}"
        )
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60, help="timed steps of each variant (default: 60)")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--threads", type=int, help="torch's intra-op threads (default: torch's)")
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    arguments = parser.parse_args(argv)
    if arguments.steps < 1:
        parser.error(f"--steps must be >= 1, got {arguments.steps}")
    report = run(arguments.steps, arguments.variants, arguments.threads)
    print(table(report))
    if arguments.json:
        write_text(arguments.json, json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
