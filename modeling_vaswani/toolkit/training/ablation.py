"""The job behind vaswani-ablate: chosen lines of Table 3 trained as changes to a preset, on one dataset with one
budget, and scored with Table 3's columns (dev perplexity, dev BLEU, parameters).

A line is named as `VaswaniConfig.table3` names it, in Table 3's own terms (changes to base): ROW or
ROW:NAME=VALUE[,NAME=VALUE], e.g. `base`, `A:h=1`, `B:d_k=32`, `C:N=2`, `C:d_model=256`, `C:d_ff=4096`, `D:P_drop=0.0`,
`D:eps_ls=0.2`, `E`, `big`. NAME is a column of the table, by the paper's name (N, h, d_k, d_v, d_model, d_ff, P_drop,
eps_ls) or the configuration's (encoder_layers, num_heads, dropout, label_smoothing_factor, ...).

Table 3 changes base (N 6, d_model 512, d_ff 2048, h 8, d_k = d_v = 64). Another preset gets the same change:
- N, d_model and d_ff are scaled by the line's ratio to base's value (C: N 2 is a third of the preset's layers,
  d_model 256 half its width), and so is a d_k or d_v the line sets apart from d_model / h (B: d_k 32 halves it;
  every preset has base's d_k = d_v = 64, so there d_k 32 is 32). A ratio that gives no whole number is refused.
- h is taken as written where the line keeps d_model ((A): one head is one head, with d_k = d_v = d_model / h,
  "keeping the amount of computation constant"), and scaled where the line widens the model too (big: twice the
  heads at twice the width, so each head keeps d_k 64).
- d_k and d_v that are d_model / h in the line (every line but (B)'s d_k) are d_model / h of the result.
- P_drop, eps_ls (D) and the learned positions (E) are taken as written, and P_drop is base's 0.1 in every other line
  (whatever the preset's own); eps_ls goes to the training arguments.
With --preset base every line is exactly Table 3's (tests/toolkit/training/test_ablate.py). Table 3's train steps (big:
300K) are not taken: every line gets the run's one budget (--max_steps, --max_train_minutes), so that the lines
compare.
"""

import copy
import json
import logging
import math
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import torch
from matplotlib.figure import Figure
from transformers import set_seed

from ...configuration_vaswani import TABLE_3_COLUMNS, VaswaniConfig
from ...modeling_vaswani import VaswaniForConditionalGeneration
from ..data.batching import check_examples_fit
from ..data.sentences import record_languages
from ..data.tokenization import check_max_length, filter_by_length, tokenize_pairs
from ..evaluation.plotting import DPI
from ..outputs import save_figure, write_text
from .presets import preset_config, preset_overrides
from .recipe import (
    load_data,
    prepare_tokenizer,
    train_example_location,
    train_model,
    translate_and_score,
)
from .recipe import parse_arguments as parse_recipe_arguments
from .trainer import VaswaniTrainer

logger = logging.getLogger(__name__)

PAPER_NAMES = {"N": "encoder_layers", "h": "num_heads", "P_drop": "dropout", "eps_ls": "label_smoothing_factor"}
SCALED = ("encoder_layers", "decoder_layers", "d_model", "d_ff")  # sizes: the line's ratio to base, on the preset
SYNTAX = "ROW or ROW:NAME=VALUE[,NAME=VALUE] (e.g. base, A:h=1, B:d_k=32, C:N=2, D:eps_ls=0.0, E)"

# What vaswani-ablate changes in the preset's training settings (the user's flags still win).
ABLATION_DEFAULTS = {
    "average_last_checkpoints": 0,  # Table 3's caption: "no checkpoint averaging"
    "save_strategy": "no",  # the model at the end of the budget is the one scored: no checkpoint is needed
    "eval_strategy": "no",  # the budget goes to training alike in every line; the dev set is scored once, at the end
    "max_validation_samples": None,  # the whole dev set, as Table 3 scores the whole of newstest2013
    # Steps are the budget (the preset's, or --max_steps), alike on any host and under any load: a preset's time
    # limit would give a line trained on a busier machine fewer steps. --max_train_minutes still adds one.
    "max_train_minutes": None,
}


@dataclass
class AblationArguments:
    _argument_group_name = "the lines of Table 3"  # HfArgumentParser's title of these flags in --help
    rows: list[str] = field(
        metadata={
            "help": f"the lines of Table 3 to train, each {SYNTAX}; see modeling_vaswani/toolkit/training/ablation.py"
        }
    )


@dataclass(frozen=True)
class Line:
    """A line of Table 3 as it was asked for (`spec`) and as VaswaniConfig.table3 takes it (`row`, `values`)."""

    spec: str
    row: str
    values: dict

    @property
    def folder(self) -> str:
        return self.spec.replace(":", "_").replace(",", "_")  # A:h=1 -> A_h=1


def _number(text: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text  # position_embedding_type=learned


def parse_line(spec: str) -> Line:
    """The line `spec` names, refused (ValueError naming it) unless it is a line of Table 3."""
    row, _, assignments = spec.partition(":")
    values = {}
    for assignment in assignments.split(",") if assignments else []:
        name, equals, text = assignment.partition("=")
        name = PAPER_NAMES.get(name, name)
        if not (name and equals and text):
            raise ValueError(f"row {spec!r}: {assignment!r} is no NAME=VALUE; expected {SYNTAX}")
        if name not in TABLE_3_COLUMNS - {"max_steps"}:
            raise ValueError(
                f"row {spec!r}: {name!r} is no column of Table 3 that a row changes; expected one of N, d_model, "
                f"d_ff, h, d_k, d_v, P_drop, eps_ls (the train steps are every row's budget: --max_steps)"
            )
        values[name] = _number(text)
    try:
        VaswaniConfig.table3(row, **values)
    except ValueError as error:
        raise ValueError(f"row {spec!r}: {error}") from None
    return Line(spec, row, values)


def _scaled(line: Line, name: str, preset_value: int, paper_value: int, base_value: int) -> int:
    value = Fraction(preset_value * paper_value, base_value)
    if value.denominator != 1:
        raise ValueError(
            f"row {line.spec!r}: {name} {paper_value} is {paper_value}/{base_value} of base's; the preset's "
            f"{preset_value} times that is {float(value):g}, no whole number; expected a preset where it is one"
        )
    return int(value)


def line_config(line: Line, preset: str, tokenizer=None, **overrides) -> VaswaniConfig:
    """The model of `line` as a change to `preset` (with `overrides`, such as --dropout), by the rules of this
    module's docstring; with the vocabulary and special ids of `tokenizer` when given."""
    paper, base, start = VaswaniConfig.table3(line.row, **line.values), VaswaniConfig.base(), preset_config(preset)
    changes = {
        name: _scaled(line, name, getattr(start, name), getattr(paper, name), getattr(base, name))
        for name in SCALED
        if getattr(paper, name) != getattr(base, name)
    }
    if paper.num_heads != base.num_heads:
        keeps_width = paper.d_model == base.d_model
        heads = (start.num_heads, paper.num_heads, base.num_heads)
        changes["num_heads"] = paper.num_heads if keeps_width else _scaled(line, "num_heads", *heads)
    for name in ("d_k", "d_v"):
        # None: d_model / h of the result, as the line has it; a value apart from that (B) is scaled.
        apart = getattr(paper, name) != paper.d_model // paper.num_heads
        sizes = (getattr(start, name), getattr(paper, name), getattr(base, name))
        changes[name] = _scaled(line, name, *sizes) if apart else None
    if paper.position_embedding_type != base.position_embedding_type:
        changes["position_embedding_type"] = paper.position_embedding_type
    # P_drop is a column of Table 3: every line takes the paper's (base's 0.1, or (D)'s), not the preset's own (the
    # small preset trains without dropout, see training.PRESETS); --dropout replaces base's value.
    if paper.dropout != base.dropout or "dropout" not in overrides:
        changes["dropout"] = paper.dropout
    try:
        return preset_config(preset, tokenizer, **{**overrides, **changes})
    except ValueError as error:
        raise ValueError(f"row {line.spec!r} on the {preset} preset: {error}") from None


def line_label_smoothing(line: Line, default: float) -> float:
    """eps_ls of `line`: as written in (D), else `default` (--label_smoothing_factor, the paper's 0.1 unless given)."""
    paper = VaswaniConfig.table3_training_arguments(line.row, **line.values)["label_smoothing_factor"]
    return paper if paper != VaswaniConfig.table3_training_arguments("base")["label_smoothing_factor"] else default


def check_lines(specs: list[str], preset: str, dropout: float | None, label_smoothing: float) -> list[Line]:
    """The lines `specs` name, each refused (ValueError naming it) unless its model can be built from `preset`, and
    two that train the same model with the same eps_ls (A:h=1 and A:num_heads=1; base and A:h=4 on small) refused."""
    overrides = preset_overrides(dropout)
    seen = {}
    for line in map(parse_line, specs):
        config = line_config(line, preset, **overrides).to_dict()
        key = json.dumps([config, line_label_smoothing(line, label_smoothing)], sort_keys=True)
        if key in seen:
            raise ValueError(
                f"rows {seen[key].spec!r} and {line.spec!r} train the same model with the same eps_ls on the {preset} "
                "preset; expected each model once"
            )
        seen[key] = line
    return list(seen.values())


def check_settings(model_args, training_args) -> None:
    """Refuses settings that would not measure Table 3's columns (ValueError naming the flag)."""
    refusals = {
        "model_name_or_path": "Table 3 trains every line from scratch, and a line's shapes are its own",
        "resume_from_checkpoint": "each line trains in its own folder under output_dir, from scratch",
    }
    for name, why in refusals.items():
        value = getattr(model_args, name, None) or getattr(training_args, name, None)
        if value is not None:
            raise ValueError(f"--{name} {value}: {why}; expected no --{name} for vaswani-ablate")
    if training_args.average_last_checkpoints:
        raise ValueError(
            f"--average_last_checkpoints {training_args.average_last_checkpoints}: Table 3 scores each model "
            "without checkpoint averaging (its caption); expected 0"
        )
    if not training_args.paper_decoding:
        raise ValueError("--no_paper_decoding: Table 3's BLEU is with the paper's beam search; expected it on")
    if training_args.push_to_hub:
        raise ValueError(
            "--push_to_hub: a line of Table 3 is a measurement, not a model to share; expected no --push_to_hub "
            "(push a line's folder with vaswani-push)"
        )


def parse_arguments(argv=None, adapt=None):
    """(AblationArguments, ModelArguments, DataArguments, VaswaniTrainingArguments), as vaswani-train's parse_arguments
    takes them (`adapt` too), with ABLATION_DEFAULTS over the preset's training settings (the user's flags win)."""
    # Checked on the parsed flags before the dataclasses are built: VaswaniTrainingArguments would refuse averaging
    # first, for want of checkpoints, and send the user to --save_steps.
    return parse_recipe_arguments(
        argv,
        leading=(AblationArguments,),
        defaults=ABLATION_DEFAULTS,
        output_dir="runs/ablation-{preset}",
        check=lambda flags: check_settings(flags, flags),
        adapt=adapt,
    )


@torch.no_grad()
def dev_perplexity(trainer: VaswaniTrainer, dataset) -> dict:
    """Perplexity per wordpiece of the dev set: exp of the mean negative log-likelihood of its target tokens (</s>
    included), dropout off, without label smoothing.

    Not the Trainer's eval_loss: that is label-smoothed (eps_ls, Section 5.4, which "hurts perplexity") and averages
    each batch's mean with the weight of its sentences, not of its tokens.
    """
    model = trainer.model.eval()
    total, tokens = 0.0, 0
    for batch in trainer.get_eval_dataloader(dataset):
        labels = batch.pop("labels")
        logits = model(**batch).logits.float()
        total += torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="sum").item()
        tokens += int(labels.ne(-100).sum())
    return {"dev_perplexity": math.exp(total / tokens), "dev_nll_per_token": total / tokens, "dev_tokens": tokens}


def train_line(line: Line, model_args, data_args, training_args, tokenizer, train, dev, dev_split) -> dict:
    """Trains `line` from scratch in OUTPUT_DIR/<line>, saves it there and scores it on the dev set (`dev` tokenized,
    `dev_split` as loaded); the results are written to the folder's results.json and returned."""
    args = copy.deepcopy(training_args)  # each line's own folder and label smoothing
    args.output_dir = str(Path(training_args.output_dir) / line.folder)
    args.label_smoothing_factor = line_label_smoothing(line, training_args.label_smoothing_factor)
    set_seed(args.seed)  # every line starts from the same random state
    config = line_config(line, model_args.preset, tokenizer, **preset_overrides(model_args.dropout))
    model = VaswaniForConditionalGeneration(config)
    logger.info(
        "row %s: %s parameters, eps_ls %s", line.spec, f"{model.num_parameters():,}", args.label_smoothing_factor
    )
    # The dev set is the Trainer's eval_dataset too: under --eval_strategy steps, validation curves in TensorBoard.
    trainer, output = train_model(model, model_args, args, tokenizer, train, dev)
    scores = translate_and_score(
        trainer.model, tokenizer, dev_split, data_args.validation_split, data_args, args.output_dir,
        paper_decoding=True, progress=not args.disable_tqdm,
    )  # fmt: skip
    config = model.config
    results = {
        "row": line.spec,
        "folder": line.folder,
        "N": config.encoder_layers,
        "d_model": config.d_model,
        "d_ff": config.d_ff,
        "h": config.num_heads,
        "d_k": config.d_k,
        "d_v": config.d_v,
        "P_drop": config.dropout,
        "eps_ls": args.label_smoothing_factor,
        "positions": config.position_embedding_type,
        "alpha": model.generation_config.length_penalty,
        "parameters": model.num_parameters(),
        "steps": trainer.state.global_step,
        "train_minutes": output.metrics["train_runtime"] / 60,
        **dev_perplexity(trainer, dev),
        "dev_bleu": scores["tokenized_bleu"],
        "dev_sacrebleu": scores["sacrebleu"],
        "bleu_signature": scores["tokenized_bleu_signature"],
        "sacrebleu_signature": scores["signature"],
        "dev_chrf": scores["chrf"],
        "chrf_signature": scores["chrf_signature"],
        "dev_ter": scores["ter"],
        "ter_signature": scores["ter_signature"],
    }
    write_text(Path(args.output_dir) / "results.json", json.dumps(results, indent=2) + "\n")
    logger.info("row %s: dev PPL %.2f, dev BLEU %.2f", line.spec, results["dev_perplexity"], results["dev_bleu"])
    return results


def describe_run(model_args, data_args, training_args, sizes: dict, alpha: float) -> str:
    """What ablation.md's table measured; `sizes`: train_pairs, dev_pairs, vocabulary."""
    data = data_args.dataset_name or data_args.train_file or data_args.train_source_file or "Multi30k (shipped)"
    budget = [f"at most {training_args.max_steps:,} steps"] if training_args.max_steps > 0 else []
    if training_args.max_train_minutes:
        budget.append(f"{training_args.max_train_minutes:g} minutes of training")
    return (
        f"Table 3's lines as changes to the {model_args.preset} preset, trained on {data} "
        f"{data_args.source_lang}->{data_args.target_lang} ({sizes['train_pairs']:,} pairs, one shared vocabulary "
        f"of {sizes['vocabulary']:,} tokens), each from scratch with the same budget: "
        f"{' and '.join(budget) or f'{training_args.num_train_epochs:g} epochs'}. "
        f"Dev set: the {data_args.validation_split!r} split, {sizes['dev_pairs']:,} pairs.\n\n"
        "dev PPL: exp of the mean negative log-likelihood per target wordpiece (</s> included) of the dev set, "
        "without label smoothing, dropout off. dev BLEU: tokenized BLEU with compound splitting, as the paper's "
        "tables (sacreBLEU beside it), of the dev set translated with the paper's beam search (Section 6.1: beam 4, "
        f"length penalty alpha {alpha:g}, input + 50) by the model at the end of the budget, without checkpoint "
        "averaging. params: the model's parameters, the shared embedding matrix counted once. steps: optimizer steps "
        "trained. minutes: training time."
    )


COLUMNS = ("row", "N", "d_model", "d_ff", "h", "d_k", "d_v", "P_drop", "eps_ls", "positions", "params", "steps")


def markdown_table(results: list[dict], description: str) -> str:
    header = [*COLUMNS, "minutes", "dev PPL", "dev BLEU", "dev sacreBLEU"]
    rows = []
    for result in results:
        cells = [f"{result['parameters']:,}" if name == "params" else str(result[name]) for name in COLUMNS]
        rows.append(
            cells
            + [f"{result['train_minutes']:.1f}", f"{result['dev_perplexity']:.2f}"]
            + [f"{result['dev_bleu']:.2f}", f"{result['dev_sacrebleu']:.2f}"]
        )
    lines = [header, ["---"] * len(header), *rows]
    table = "\n".join("| " + " | ".join(cells) + " |" for cells in lines)
    return f"# Table 3, measured\n\n{description}\n\n{table}\n"


def ablation_figure(results: list[dict], title: str) -> Figure:
    """Dev BLEU and dev perplexity of each line as horizontal bars, the lines in the order asked for, top down."""
    names = [result["row"] for result in results]
    figure = Figure(figsize=(10, 1.2 + 0.45 * len(results)), layout="constrained")
    figure.suptitle(title)
    panels = (("dev_bleu", "dev BLEU (tokenized)", "tab:blue"), ("dev_perplexity", "dev PPL per wordpiece", "tab:red"))
    for axis, (key, label, color) in zip(figure.subplots(1, 2, sharey=True), panels, strict=True):
        bars = axis.barh(names, [result[key] for result in results], color=color)
        axis.bar_label(bars, fmt="%.2f", padding=2, fontsize=8)
        axis.set_xlabel(label)
        axis.margins(x=0.15)
        axis.set_xlim(left=0)
        axis.grid(axis="x", alpha=0.3)
    figure.axes[0].invert_yaxis()
    return figure


def train_and_score_lines(ablation_args, model_args, data_args, training_args) -> list[dict]:
    """Trains and scores every requested line; writes OUTPUT_DIR/ablation.md, ablation.png and ablation.json."""
    check_settings(model_args, training_args)
    if training_args.world_size > 1:
        raise ValueError(
            f"{training_args.world_size} processes: vaswani-ablate scores the dev set in one process; expected one "
            "process, without accelerate launch or torchrun (--gradient_accumulation_steps gives a larger batch)"
        )
    lines = check_lines(
        ablation_args.rows, model_args.preset, model_args.dropout, training_args.label_smoothing_factor
    )
    check_max_length(data_args.max_length)
    data = load_data(data_args)
    if data_args.validation_split not in data:
        raise ValueError(
            f"no {data_args.validation_split!r} split to score (the data has {list(data)}); Table 3 scores a dev set: "
            "expected one (--validation_split, --validation_source_file/--validation_target_file, --validation_file)"
        )
    output_dir = Path(training_args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    source_lang, target_lang = data_args.source_lang, data_args.target_lang
    workers = data_args.preprocessing_num_workers
    tokenizer = prepare_tokenizer(model_args, data["train"], source_lang, target_lang, output_dir)  # one for all
    train = tokenize_pairs(data["train"], tokenizer, source_lang, target_lang, num_proc=workers)
    if training_args.max_tokens is not None:  # before any line is trained, as vaswani-train does
        check_examples_fit(train, training_args.max_tokens, data_args.max_length, train_example_location(data_args))
    if data_args.max_length is not None:
        train = filter_by_length(train, data_args.max_length, workers, "train")
    dev_split = data[data_args.validation_split]
    dev = tokenize_pairs(dev_split, tokenizer, source_lang, target_lang, num_proc=workers)
    record_languages(tokenizer, source_lang, target_lang)  # each line's model folder carries them, as vaswani-train's
    results = [
        train_line(line, model_args, data_args, training_args, tokenizer, train, dev, dev_split) for line in lines
    ]
    sizes = {"train_pairs": len(train), "dev_pairs": len(dev_split), "vocabulary": len(tokenizer)}
    description = describe_run(model_args, data_args, training_args, sizes, results[0]["alpha"])
    write_text(output_dir / "ablation.md", markdown_table(results, description))
    write_text(output_dir / "ablation.json", json.dumps(results, indent=2) + "\n")
    title = f"Table 3 lines on the {model_args.preset} preset, {source_lang}->{target_lang}"
    save_figure(ablation_figure(results, title), output_dir / "ablation.png", DPI)
    return results
