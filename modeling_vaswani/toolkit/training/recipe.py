"""The whole job behind vaswani-train: data, tokenizer, model, Seq2SeqTrainer, averaging, test scores, plots.

With no arguments it trains the "small" preset on the shipped Multi30k En->De; every Seq2SeqTrainingArguments flag
and the flags below change it.
"""

import json
import logging
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from inspect import getsource
from pathlib import Path

import numpy as np
import tokenizers
import torch
from datasets import DatasetDict, is_caching_enabled
from datasets.fingerprint import Hasher, generate_fingerprint
from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer, HfArgumentParser, IntervalStrategy
from transformers.trainer_utils import TrainOutput
from transformers.utils import SAFE_WEIGHTS_NAME

from ...modeling_vaswani import VaswaniForConditionalGeneration
from ..checkpoints import (
    check_hub_config,
    check_torch_file,
    find_checkpoints,
    load_config,
    local_folder,
    validate_checkpoint,
)
from ..data import tokenizer as tokenizer_module
from ..data.batching import check_examples_fit
from ..data.corpora import (
    MULTI30K_SPLITS,
    load_hub_pairs,
    load_multi30k,
    load_table_pairs,
    load_text_pairs,
    multi30k_files,
    text_pair_location,
)
from ..data.sentences import record_languages
from ..data.tables import table_row_location
from ..data.tokenization import check_max_length, filter_by_length, tokenize_pairs
from ..data.tokenizer import train_tokenizer_from_texts
from ..evaluation.metrics import bleu, chrf, translation_scores
from ..evaluation.plotting import plot_training_curves
from ..outputs import (
    MODEL_OUTPUT,
    atomic_text,
    check_working_folder,
    move_files_into,
    save_into,
    save_object,
    write_failure,
    write_text,
    writing_into,
    writing_natively,
)
from ..texts import write_lines
from ..translation.collapse import collapse_warning
from ..translation.translate import translate
from .averaging import average_checkpoints
from .budget import CURVES, plan_run
from .flags import HELP_ALL, help_asked, project_parser, tell_complements
from .presets import MAIN_PRESET, PRESETS, preset_config, preset_overrides
from .trainer import VaswaniTrainer, VaswaniTrainingArguments

logger = logging.getLogger(__name__)

# What a run writes into its output_dir: the Trainer's checkpoints, logs and final model, the tokenizer, the averaged
# model, the results and the curves. An output_dir holding only these is an earlier run's.
TRAIN_OUTPUT = (
    *MODEL_OUTPUT,
    "training_args.bin",
    "trainer_state.json",
    "*results.json",
    "training_curves.png",
    "checkpoint-*/",
    "averaged/",
    "best/",  # --early_stopping_patience: the best checkpoint, kept beside the average
    "tokenizer/",
    "runs/",
)


@dataclass
class ModelArguments:
    preset: str | None = field(
        default=MAIN_PRESET,
        metadata={
            "help": f"model preset: {', '.join(PRESETS)} (Table 3); vaswani-train's default: {MAIN_PRESET}, or "
            "where neither this nor --max_steps is given, the size the time budget trains best (docs/training.md)"
        },
    )
    model_name_or_path: str | None = field(
        default=None, metadata={"help": "continue from a checkpoint (folder or Hub id) instead of a new model"}
    )
    tokenizer_name_or_path: str | None = field(
        default=None, metadata={"help": "an existing tokenizer; default: the checkpoint's, else one trained here"}
    )
    vocab_size: int = field(default=8000, metadata={"help": "size of the BPE vocabulary trained when none is given"})
    dropout: float | None = field(default=None, metadata={"help": "P_drop; default: the preset's"})
    length_penalty: float | None = field(
        default=None,
        metadata={
            "help": "alpha of the GNMT length penalty (Section 6.1: 0.6, chosen on the development set), saved in "
            "the model's generation_config; default: the preset's, else the checkpoint's"
        },
    )


@dataclass
class DataArguments:
    source_lang: str = field(default="en", metadata={"help": "source language code"})
    target_lang: str = field(default="de", metadata={"help": "target language code"})
    dataset_name: str | None = field(
        default=None, metadata={"help": "a Hub dataset (e.g. wmt14) or a folder written by save_to_disk"}
    )
    dataset_config_name: str | None = field(default=None, metadata={"help": "its configuration (e.g. de-en)"})
    train_source_file: str | None = field(default=None, metadata={"help": "plain text, one sentence a line"})
    train_target_file: str | None = field(default=None, metadata={"help": "aligned line by line with the source"})
    validation_source_file: str | None = field(default=None)
    validation_target_file: str | None = field(default=None)
    test_source_file: str | None = field(default=None)
    test_target_file: str | None = field(default=None)
    train_file: str | None = field(default=None, metadata={"help": "jsonl or csv of translation pairs"})
    validation_file: str | None = field(default=None)
    test_file: str | None = field(default=None)
    validation_split: str = field(default="validation", metadata={"help": "split name (Hub: e.g. validation)"})
    test_split: str = field(default="test", metadata={"help": "split name scored at the end (Hub: e.g. test)"})
    max_train_samples: int | None = field(default=None, metadata={"help": "use only the first N training pairs"})
    max_eval_samples: int | None = field(
        default=None, metadata={"help": "use only the first N validation and test pairs (quick runs)"}
    )
    max_validation_samples: int | None = field(
        default=None,
        metadata={"help": "evaluate during training on the first N validation pairs only; default: the preset's"},
    )
    max_length: int | None = field(
        default=None,
        metadata={"help": "drop (and count in the log) training pairs with more tokens on either side"},
    )
    eval_batch_size_sentences: int = field(default=64, metadata={"help": "sentences per batch when translating"})
    preprocessing_num_workers: int | None = field(
        default=None, metadata={"help": "processes that tokenize and filter the data (default: this one)"}
    )


def parse_arguments(
    argv=None,
    leading: tuple = (),
    defaults: dict | None = None,
    output_dir: str = "runs/{preset}",
    check=None,
    adapt: Callable | None = None,
    budget_sizes: bool = False,
) -> tuple:
    """Every Seq2SeqTrainingArguments flag, with the preset's training settings as defaults (the user's win).

    vaswani-train's (ModelArguments, DataArguments, VaswaniTrainingArguments); another job on the same recipe (vaswani-
    ablate) puts its own dataclasses first (`leading`, each titled by HfArgumentParser's `_argument_group_name`), adds
    its `defaults` over the preset's, names its default `output_dir` (a pattern of {preset}), and may `check` the
    parsed flags (a namespace) before the dataclasses are built, whose own checks would otherwise speak first.
    `adapt` is called on each argparse parser built here before it parses (the commands give every float flag a
    finite type: `cli.arguments.finite_floats`). A flag no parser knows is a usage error (argparse's, exit 2), as for
    every other command. `--help` prints the project's flags with the preset's defaults (`flags.project_parser`),
    `--help_all` every flag, and both exit. `budget_sizes` (vaswani-train): where neither --preset nor --max_steps
    is given, ModelArguments.preset is None, the size left to the time budget (`sizes_to_build`).
    """
    parser = HfArgumentParser((*leading, ModelArguments, DataArguments, VaswaniTrainingArguments), add_help=False)
    preset_parser = HfArgumentParser(ModelArguments, add_help=False)
    for each in (preset_parser, parser) if adapt is not None else ():
        adapt(each)
    preset_parser.set_defaults(preset=None)  # to tell a --preset given from none
    model_args, _ = preset_parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
    preset = model_args.preset or MAIN_PRESET
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; expected one of {sorted(PRESETS)}")
    output_dir = output_dir.format(preset=preset)
    preset_defaults = {"output_dir": output_dir, **PRESETS[preset]["training"], **(defaults or {})}
    parser.set_defaults(**preset_defaults)
    tell_complements(parser)
    asked = help_asked(argv)
    if asked is not None:
        groups = {job._argument_group_name: job for job in leading} | {
            "the model": ModelArguments,
            "the data": DataArguments,
        }
        (parser if asked == HELP_ALL else project_parser(groups, preset_defaults)).print_help()
        parser.exit()
    namespace, unknown = parser.parse_known_args(argv)
    if unknown:  # HfArgumentParser would raise a ValueError of its own about them, a traceback
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if check is not None:
        check(namespace)
    arguments = parser.parse_args_into_dataclasses(args=argv)
    if budget_sizes and model_args.preset is None and not given(parser, argv, "max_steps"):
        next(each for each in arguments if isinstance(each, ModelArguments)).preset = None
    return arguments


def given(parser, argv, name: str) -> bool:
    """Whether the flag of `name` is on the command line `argv` (argparse's abbreviations and spellings included)."""
    default = parser.get_default(name)
    parser.set_defaults(**{name: UNSET})
    try:
        return parser.parse_known_args(argv)[0].__dict__[name] is not UNSET
    finally:
        parser.set_defaults(**{name: default})


UNSET = object()


def sizes_to_build(model_args: ModelArguments, training_args: VaswaniTrainingArguments) -> tuple[str, ...]:
    """The presets of the models the run builds: the one given, else (vaswani-train with neither --preset nor
    --max_steps) each size of budget.CURVES where a new run's time budget is planned, for its plan to choose from,
    and MAIN_PRESET where it is not."""
    if model_args.preset is not None:
        return (model_args.preset,)
    planned = training_args.max_train_minutes and training_args.plan_time_budget
    return tuple(CURVES) if planned and training_args.resume_from_checkpoint is None else (MAIN_PRESET,)


def load_data(args: DataArguments) -> DatasetDict:
    """The splits as a DatasetDict with the `translation` column; the shipped Multi30k when nothing is named."""
    languages = {"source_lang": args.source_lang, "target_lang": args.target_lang}
    if args.dataset_name:
        data = load_hub_pairs(args.dataset_name, args.dataset_config_name, **languages)
    elif args.train_source_file or args.train_file:
        data = DatasetDict()
        for split, source, target, table in (
            ("train", args.train_source_file, args.train_target_file, args.train_file),
            (args.validation_split, args.validation_source_file, args.validation_target_file, args.validation_file),
            (args.test_split, args.test_source_file, args.test_target_file, args.test_file),
        ):
            if source:
                if not target:
                    raise ValueError(f"{split}: a source file ({source}) needs its target file")
                data[split] = load_text_pairs(source, target, **languages)
            elif table:
                data[split] = load_table_pairs(table, **languages)
    else:
        data = load_multi30k(**languages)
    if "train" not in data:
        raise ValueError(f"no training split: the data has {list(data)}")
    validation_limits = [n for n in (args.max_eval_samples, args.max_validation_samples) if n is not None]
    limits = {"train": args.max_train_samples, args.validation_split: min(validation_limits, default=None)}
    limits[args.test_split] = args.max_eval_samples
    for split, limit in limits.items():
        if limit is not None and split in data:
            data[split] = data[split].select(range(min(limit, len(data[split]))))
    return data


def train_example_location(args: DataArguments) -> Callable[[int], str]:
    """How `load_data`'s training example `index` (counted from 0) is named to the user: by its line where it came
    from files (--max_train_samples keeps the first N pairs, so the indices are the files'), else by its number."""
    if args.dataset_name:
        return lambda index: f"{index + 1} (counted from 1) of {args.dataset_name}'s train split"
    if args.train_source_file:
        return lambda index: f"at {text_pair_location(args.train_source_file, args.train_target_file, index)}"
    if args.train_file:
        return lambda index: f"at {table_row_location(args.train_file, index)}"
    files = multi30k_files("train", languages=(args.source_lang, args.target_lang))
    return lambda index: f"at {text_pair_location(files[args.source_lang], files[args.target_lang], index)}"


def prepare_tokenizer(model_args: ModelArguments, train_split, source_lang: str, target_lang: str, output_dir: Path):
    """An existing tokenizer, or one BPE vocabulary trained on both sides of the training data (Section 5.1).

    A trained one is kept beside the training split's Arrow files, keyed by the split's fingerprint and the settings,
    as `datasets` keeps its map results there: a second run on the same data loads it instead of training again.
    """
    name = model_args.tokenizer_name_or_path or model_args.model_name_or_path
    if name:
        return AutoTokenizer.from_pretrained(name)
    cached = _cached_tokenizer_dir(train_split, model_args.vocab_size, source_lang, target_lang)
    if cached is not None and cached.is_dir():
        logger.info("tokenizer: reusing the one trained on the same data, %s", cached)
    else:
        texts = (text for language in (source_lang, target_lang) for text in split_texts(train_split, language))
        where = f"the training split's {source_lang} and {target_lang} sentences"
        tokenizer = train_tokenizer_from_texts(texts, model_args.vocab_size, where=where)
        if cached is None:
            save_into(output_dir / "tokenizer", tokenizer)
            return tokenizer
        _save_whole(tokenizer, cached)
    # Loaded back even when just trained: `datasets` keys its cached tokenization on the tokenizer's pickled state,
    # which differs between a trained and a loaded tokenizer, and the second run only has the loaded one.
    tokenizer = AutoTokenizer.from_pretrained(cached)
    save_into(output_dir / "tokenizer", tokenizer)
    return tokenizer


def _cached_tokenizer_dir(train_split, vocab_size: int, source_lang: str, target_lang: str) -> Path | None:
    if not train_split.cache_files or not is_caching_enabled():
        return None  # an in-memory split: nowhere that outlives this run
    # The tokenizer module's source is in the key, so a change to how tokenizers are built retrains them.
    key = Hasher.hash(
        [
            generate_fingerprint(train_split),  # public: its files, their times, the slice or selection taken
            vocab_size,
            source_lang,
            target_lang,
            tokenizers.__version__,
            getsource(tokenizer_module),
        ]
    )
    return Path(train_split.cache_files[0]["filename"]).parent / f"vaswani-tokenizer-{key}"


def _save_whole(tokenizer, folder: Path) -> None:
    # Saved aside, then renamed: a run killed while saving leaves no half-written tokenizer to be reused.
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=folder.parent))
    try:
        save_object(staging, tokenizer)
    except BaseException as error:  # a full disk: the file named in `staging`, told as in `folder`
        named = write_failure(error, folder, staging)
        shutil.rmtree(staging, ignore_errors=True)
        if named is not None:
            raise named from error
        raise
    try:
        staging.rename(folder)
    except OSError:  # another process (a DDP rank) saved the same tokenizer first
        shutil.rmtree(staging)


def split_texts(split, language: str, batch_size: int = 10_000) -> Iterator[str]:
    """One language's sentences of a `translation` split, read from its Arrow data a batch at a time, so that no
    Python object per pair of a corpus of millions is held at once."""
    for batch in split.select_columns("translation").iter(batch_size=batch_size):
        yield from (pair[language] for pair in batch["translation"])


def sources_and_references(split, source_lang: str, target_lang: str) -> tuple[list[str], list[str]]:
    return list(split_texts(split, source_lang)), list(split_texts(split, target_lang))


# What decides the shapes of the weights; the vocabulary comes from the tokenizer, known only after data loading.
SHAPE_FIELDS = ("d_model", "encoder_layers", "decoder_layers", "num_heads", "d_ff", "attention_bias")


def check_output_and_resume(model_args: ModelArguments, training_args: VaswaniTrainingArguments) -> None:
    """Refuse, before any data is loaded, a run that would mix with an earlier one or could not resume.

    An output_dir holding anything vaswani-train does not write is refused by name (`outputs.check_working_folder`).
    An output_dir holding checkpoint-N folders is refused unless the run resumes or `--overwrite_output_dir` is given
    (which deletes them): averaging takes the highest-numbered checkpoints there, whichever run wrote them. A resume
    target must be a checkpoint folder of a model with the shapes this run builds.
    """
    output_dir = Path(training_args.output_dir)
    resume = training_args.resume_from_checkpoint
    check_working_folder(output_dir, TRAIN_OUTPUT, "vaswani-train")  # a user's own files are never written over
    earlier = find_checkpoints(output_dir) if output_dir.is_dir() else []
    if earlier and resume is None:
        if not training_args.overwrite_output_dir:
            names = ", ".join(checkpoint.name for checkpoint in earlier)
            raise ValueError(
                f"output_dir {str(output_dir)!r} holds checkpoints of an earlier run ({names}); expected an empty or "
                f"new folder: pass --resume_from_checkpoint {earlier[-1]} to "
                "continue that run, --overwrite_output_dir to delete them and start afresh, or another --output_dir"
            )
        if training_args.should_save:
            for checkpoint in earlier:
                shutil.rmtree(checkpoint)
            for decided in ("averaged", "best"):  # what the earlier run made of them: no run of this one's name
                shutil.rmtree(output_dir / decided, ignore_errors=True)
    start = model_args.model_name_or_path and local_folder(model_args.model_name_or_path)
    if start:  # the one checkpoint opener, before any data
        validate_checkpoint(start)
    elif model_args.model_name_or_path:  # a Hub id: its config.json's model_type
        check_hub_config(model_args.model_name_or_path)
    if resume is not None:
        _check_resume_target(Path(resume), model_args)


def _check_resume_target(checkpoint: Path, model_args: ModelArguments) -> None:
    if not (checkpoint / "trainer_state.json").is_file():
        raise FileNotFoundError(
            f"resume_from_checkpoint {str(checkpoint)!r} is not a checkpoint: expected a checkpoint-N folder "
            "with trainer_state.json, as the Trainer writes into output_dir"
        )
    saved = load_config(checkpoint)
    if model_args.model_name_or_path:
        wanted, source = AutoConfig.from_pretrained(model_args.model_name_or_path), model_args.model_name_or_path
    else:
        if model_args.preset is None:  # the run resumed goes on with the size its budget chose: the one it holds
            shape = lambda config: [getattr(config, name, None) for name in SHAPE_FIELDS]  # noqa: E731
            held = (size for size in CURVES if shape(preset_config(size)) == shape(saved))
            model_args.preset = next(held, MAIN_PRESET)  # none: refused below as another model than MAIN_PRESET
        wanted = preset_config(model_args.preset, **preset_overrides(model_args.dropout))
        source = f"--preset {model_args.preset}"
    differences = [
        f"{name}={getattr(saved, name)!r} (this run: {getattr(wanted, name, None)!r})"
        for name in SHAPE_FIELDS
        if getattr(saved, name) != getattr(wanted, name, None)
    ]
    if differences:
        raise ValueError(
            f"resume_from_checkpoint {str(checkpoint)!r} holds another model than {source} builds: "
            f"{', '.join(differences)}; expected the preset or model it was trained with"
        )
    validate_checkpoint(checkpoint)  # weights and tokenizer whole and fitting, named if not
    for name in ("optimizer.pt", "scheduler.pt"):
        if (checkpoint / name).is_file():
            check_torch_file(checkpoint / name)


def train_and_score(
    model_args: ModelArguments, data_args: DataArguments, training_args: VaswaniTrainingArguments
) -> dict:
    """Trains, averages, translates the test split with the final model and scores it. Returns the results."""
    check_output_and_resume(model_args, training_args)
    check_max_length(data_args.max_length)
    output_dir = Path(training_args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    data = load_data(data_args)
    source_lang, target_lang = data_args.source_lang, data_args.target_lang
    tokenizer = prepare_tokenizer(model_args, data["train"], source_lang, target_lang, output_dir)
    workers = data_args.preprocessing_num_workers
    train = tokenize_pairs(data["train"], tokenizer, source_lang, target_lang, num_proc=workers)
    if training_args.max_tokens is not None:  # before the model is built, naming the example by its line
        check_examples_fit(train, training_args.max_tokens, data_args.max_length, train_example_location(data_args))
    if data_args.max_length is not None:
        train = filter_by_length(train, data_args.max_length, workers, "train")
    validation = data.get(data_args.validation_split)
    if validation is not None:
        validation = tokenize_pairs(validation, tokenizer, source_lang, target_lang, num_proc=workers)
    elif training_args.early_stopping_patience is not None:
        raise ValueError(
            f"--early_stopping_patience stops on validation scores, but the data has no "
            f"{data_args.validation_split!r} split; expected validation data (--validation_source_file and "
            "--validation_target_file, or a split)"
        )
    elif training_args.eval_strategy != IntervalStrategy.NO:
        logger.warning("no %r split to evaluate on: no evaluation during training", data_args.validation_split)
        training_args.eval_strategy = IntervalStrategy.NO
    # The languages, in the tokenizer's configuration: every folder of the run (checkpoints, the averaged and best
    # models) carries it whatever the data, so that vaswani-translate splits sentences by the source language's
    # rules. Recorded after the tokenizing above, whose cache is keyed on the tokenizer's state.
    record_languages(tokenizer, source_lang, target_lang)

    if model_args.model_name_or_path:
        model = AutoModelForSeq2SeqLM.from_pretrained(model_args.model_name_or_path)  # its type checked earlier
    else:  # where the budget chooses the size, a model of each (small ones: 7.6 and 2.4 M parameters)
        overrides = preset_overrides(model_args.dropout)
        sizes = sizes_to_build(model_args, training_args)
        model = {size: VaswaniForConditionalGeneration(preset_config(size, tokenizer, **overrides)) for size in sizes}
    main_job = is_main_job(model_args, data_args)
    trainer, _ = train_model(model, model_args, training_args, tokenizer, train, validation, main_job)
    results = {"train": {k: v for k, v in trainer.state.log_history[-1].items()}}
    if trainer.is_world_process_zero():
        if any("loss" in entry for entry in trainer.state.log_history):
            plot_training_curves(trainer.state.log_history, output_dir / "training_curves.png")
        else:
            logger.warning("no training loss was logged (logging_steps > steps run): no training_curves.png")

    final_dir = output_dir / "averaged" if training_args.average_last_checkpoints else output_dir
    best_dir = keep_best_checkpoint(trainer, output_dir) if training_args.early_stopping_patience else None
    if trainer.is_world_process_zero() and data_args.test_split in data:
        test = data[data_args.test_split]
        for folder in (final_dir, best_dir):
            if folder is None:
                continue
            model = AutoModelForSeq2SeqLM.from_pretrained(folder).to(training_args.device)
            scores = translate_and_score(
                model, tokenizer, test, data_args.test_split, data_args, folder, training_args.paper_decoding
            )
            if folder == final_dir:
                results["test"] = scores
            else:
                results["best"] = best_checkpoint_summary(trainer, scores)
        results["test_set"] = describe_test_set(data_args)
        # Through the Trainer's loggers, so the final scores land in TensorBoard beside the training curves.
        trainer.log({f"{data_args.test_split}_{name}": results["test"][name] for name in ("sacrebleu", "chrf")})
        save_into(final_dir, tokenizer)
        write_text(final_dir / "results.json", json.dumps(results, indent=2) + "\n")
        if best_dir is not None:  # its own summary, with its own test scores, for vaswani-push's model card
            best_results = {**results, "test": results["best"]["test"]}
            save_into(best_dir, tokenizer)
            write_text(best_dir / "results.json", json.dumps(best_results, indent=2) + "\n")
    results["model_dir"] = str(final_dir)
    if best_dir is not None:
        results["best_dir"] = str(best_dir)
    return results


def keep_best_checkpoint(trainer: VaswaniTrainer, output_dir: Path) -> Path | None:
    """--early_stopping_patience: the best checkpoint by the validation score, copied into OUTPUT_DIR/best (the
    Trainer's checkpoint-N folders rotate; this stays beside the averaged model)."""
    best = trainer.state.best_model_checkpoint
    if best is None:
        logger.warning("no checkpoint was saved at an evaluation: no best checkpoint to keep")
        return None
    if trainer.is_world_process_zero():
        average_checkpoints([Path(best)], output_dir / "best")  # the mean of one checkpoint: a copy, written aside
    trainer.accelerator.wait_for_everyone()
    return output_dir / "best"


def best_checkpoint_summary(trainer: VaswaniTrainer, test_scores: dict) -> dict:
    """What results.json says of the best checkpoint: where and when it was, and its validation and test scores."""
    return {
        "checkpoint": trainer.state.best_model_checkpoint,
        "step": trainer.state.best_global_step,
        "metric": trainer.args.metric_for_best_model,
        "validation": trainer.state.best_metric,
        "test": test_scores,
    }


# What makes a run the main job, whose planned runs budget.PLANNED_RUNS measured: the model and the data as they are
# by default (the small preset and its vocabulary, trained from scratch on all of the shipped Multi30k En-De and
# scored on its test2016). The training flags may differ: the planner fits those into the budget.
MAIN_JOB_MODEL = ("preset", "model_name_or_path", "tokenizer_name_or_path", "vocab_size", "dropout")
MAIN_JOB_DATA = (
    "source_lang", "target_lang", "dataset_name", "dataset_config_name", "train_source_file", "train_target_file",
    "train_file", "test_source_file", "test_target_file", "test_file", "test_split", "max_train_samples",
    "max_eval_samples", "max_length",
)  # fmt: skip


def is_main_job(model_args: ModelArguments, data_args: DataArguments) -> bool:
    """Whether the run trains the main job's model on its data (MAIN_JOB_MODEL, MAIN_JOB_DATA at their defaults; the
    preset MAIN_PRESET or left to the budget)."""
    model = {name: getattr(model_args, name) for name in MAIN_JOB_MODEL} | {"preset": model_args.preset or MAIN_PRESET}
    return all(model[name] == getattr(ModelArguments(), name) for name in MAIN_JOB_MODEL) and all(
        getattr(data_args, name) == getattr(DataArguments(), name) for name in MAIN_JOB_DATA
    )


def train_model(
    model, model_args: ModelArguments, training_args: VaswaniTrainingArguments, tokenizer, train, validation,
    main_job: bool = False,
) -> tuple[VaswaniTrainer, TrainOutput]:  # fmt: skip
    """Trains `model` on the tokenized `train` split with VaswaniTrainer (BLEU and chrF on `validation`, if any, when
    it evaluates; resumed from --resume_from_checkpoint when given) and saves it into output_dir, --length_penalty set
    in its generation_config first. Returns the Trainer and what its train() returned. `main_job`: the run is the
    main job (`is_main_job`), whose time budget's plan may say what it is expected to score. `model` may be a dict
    of models by preset name, of which the time budget's plan chooses the one to train (budget.choose_size)."""
    sizes = model if isinstance(model, dict) else {None: model}
    for each in sizes.values():
        if model_args.length_penalty is not None:
            each.generation_config.length_penalty = model_args.length_penalty

    def trainer_of(model) -> VaswaniTrainer:
        return VaswaniTrainer(
            model=model,
            args=training_args,
            train_dataset=train,
            eval_dataset=validation,
            processing_class=tokenizer,
            compute_metrics=lambda prediction: validation_scores(prediction, tokenizer),
        )

    trainer = trainer_of(next(iter(sizes.values())))
    planned = training_args.max_train_minutes and training_args.plan_time_budget
    if planned and training_args.resume_from_checkpoint is None:  # a resumed run keeps the plan it started with
        # Measured with the trainer of the arguments as given; the plan is then the input of the optimizer and of
        # Equation 3's schedule, which train() builds from the warmup and steps it ends with.
        plan = plan_run(trainer, main_job, sizes if len(sizes) > 1 else None)
        if plan.size is not None and sizes[plan.size] is not trainer.model:
            trainer = trainer_of(sizes[plan.size])
        torch.set_num_threads(plan.threads)  # the job owns its process: it trains on the count measured faster
        # No bfloat16 autocast, though a step takes 0.17 s against float32's 0.22 s on an avx512_bf16 host: at equal
        # steps float32's validation sacreBLEU led at each of 4 evaluations, and at equal time too; on an AMX host,
        # two jobs at once a core each, float32 led by 1.09 on test2016 (docs/results.md).
        trainer.follow(plan)
    logger.info("model: %s parameters", f"{trainer.model.num_parameters():,}")
    output = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    save_final_model(trainer, Path(training_args.output_dir))
    return trainer, output


def save_final_model(trainer: VaswaniTrainer, output_dir: Path) -> None:
    """`trainer.save_model` written aside, then each file moved into `output_dir` atomically by the main process (as
    `outputs.save_into` does; the staging folder has one name on every rank, which a sharded save needs). A failure of
    the file system names the file of `output_dir` it was writing, the weights declared (`writing_natively`)."""
    staged = output_dir / f".final-model.partial-{trainer.state.global_step}"
    if trainer.args.should_save:  # what a run killed while saving left
        for leftover in output_dir.glob(".final-model.partial-*"):
            shutil.rmtree(leftover)
    trainer.accelerator.wait_for_everyone()
    with writing_into(output_dir, staged), writing_natively(staged, SAFE_WEIGHTS_NAME):
        trainer.save_model(str(staged))
    trainer.accelerator.wait_for_everyone()
    if trainer.args.should_save:
        move_files_into(staged, output_dir)
    trainer.accelerator.wait_for_everyone()


def translate_and_score(
    model, tokenizer, split, split_name: str, data_args: DataArguments, folder: Path, paper_decoding: bool,
    progress: bool = True,
) -> dict:  # fmt: skip
    """BLEU, chrF and TER with their signatures (metrics.translation_scores) of `model`'s translations of the
    `split_name` split `split` against its references; the translations are written to
    FOLDER/<split_name>.hyp.<target_lang>, one a line. Each source is translated whole, as the sentence it is aligned
    with its reference (no sentence splitting: the paper's evaluation). Translations that show a collapsed model
    (`collapse.collapse_warning`) are warned of loudly."""
    sources, references = sources_and_references(split, data_args.source_lang, data_args.target_lang)
    batch_size = data_args.eval_batch_size_sentences
    hypotheses = translate(
        model, tokenizer, sources, batch_size, paper_decoding=paper_decoding, progress=progress, split_sentences=False
    )
    with atomic_text(Path(folder) / f"{split_name}.hyp.{data_args.target_lang}") as output:
        write_lines(hypotheses, output)
    warning = collapse_warning(sources, hypotheses)
    if warning:  # the end of training: loud, as the plan's shortfall is
        logger.warning("\n%s\nWARNING: the %s split's translations: %s\n%s", "!" * 80, split_name, warning, "!" * 80)
    return translation_scores(hypotheses, references)


def describe_test_set(args: DataArguments) -> dict:
    """Where the test BLEU was measured, as hub.EvaluationSet's fields (hub/push.py reads them for the card)."""
    split = args.test_split
    if args.dataset_name:
        dataset_id, config = args.dataset_name, args.dataset_config_name or "default"
        name = f"{args.dataset_name} {args.dataset_config_name or ''}".strip() + f", {split}"
    elif args.test_source_file or args.test_file:
        files = [args.test_file] if args.test_file else [args.test_source_file, args.test_target_file]
        dataset_id, config, name = Path(files[0]).stem, "default", " + ".join(Path(file).name for file in files)
    else:  # the shipped copy of the Hub's multi30k task1
        dataset_id, config, split, name = "multi30k", "task1", MULTI30K_SPLITS["test"], "Multi30k, test2016 (flickr)"
    return {
        "dataset_id": dataset_id,
        "dataset_config": config,
        "dataset_split": split,
        "dataset_name": name,
        "source_lang": args.source_lang,
        "target_lang": args.target_lang,
    }


def validation_scores(prediction, tokenizer) -> dict:
    """compute_metrics for the Trainer: sacreBLEU, tokenized BLEU and chrF of the generated validation translations
    against the decoded labels. TER is left to the test set: on the long, poor translations of early training it
    took 4 times chrF's time (0.9 s against 0.2 s for 300 sentences on a 2-core CPU, 2026-11-24)."""
    # The Trainer pads predictions and labels across batches with -100, which is no token id.
    predictions = np.where(prediction.predictions < 0, tokenizer.pad_token_id, prediction.predictions)
    labels = np.where(prediction.label_ids < 0, tokenizer.pad_token_id, prediction.label_ids)
    hypotheses = tokenizer.batch_decode(predictions, skip_special_tokens=True)
    references = tokenizer.batch_decode(labels, skip_special_tokens=True)
    scores = bleu(hypotheses, references)
    return {
        "sacrebleu": scores["sacrebleu"],
        "tokenized_bleu": scores["tokenized_bleu"],
        "chrf": chrf(hypotheses, references)["chrf"],
    }
