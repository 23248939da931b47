"""Sharing a checkpoint on the Hugging Face Hub: validation, the model card, and the push (vaswani-push).

A checkpoint folder is checked before anything is uploaded: a Vaswani config.json, safetensors weights (one file or
a complete sharded index) that open and hold every tensor of the model config.json describes at its shape, and a
tokenizer that fits the model. Its model card is rendered from model_card.md with the checkpoint's real configuration
and its measured results (results.json, written by vaswani-train); a template field without a value is an error, so
no placeholder ever reaches the Hub. A checkpoint without results.json is refused unless the card is asked for
without its evaluation section (`with_results=False`, `--no_results`).

The push uploads the model's files and nothing else: those the checkpoint opener knows as a model's (config.json,
the weights it opens, with their index; the tokenizer's files; generation_config.json; results.json) and those the
folder's marker names as its command's output (`outputs.MARKER`: vaswani-train's translations beside its model). Any
other file (a user's notes, a log, a key) is refused by name before any request, unless `include` adds it; the
Trainer's training state of a checkpoint-N folder (optimizer, scheduler, RNG state) is left out, named; subfolders
and hidden files stay local. The card is uploaded as README.md (a user's own text: `--template FILE`), with the model's
code and pipeline from this package, config.json naming them (`auto_map`, `custom_pipelines`), so that the
repository loads with `trust_remote_code=True` where the package is not installed, and MANIFEST, the list of what the
push uploaded.

A push replaces the model in one commit that adds its files and deletes the earlier model's files that it does not
have: those the earlier push's MANIFEST lists, and no other file (anyone's own files added by hand stay). A repository
without a MANIFEST (the Trainer's push, or a version before it) has no record of what its model was: there the files
of a kind a model is made of (weights in any layout or format, the tokenizer's files, results.json) that the new model
lacks are deleted, so that an earlier model of another layout (one model.safetensors against shards and their index,
another number of shards, a pytorch_model.bin) can never be loaded in place of, or beside, the new one. The commit
names its parent, the state the deletions were computed on: a push that raced another one is refused by the Hub
(412), told as `PushRaced`, rather than deleting from a state it did not see.

The stock variants (issue 54), the folders of vaswani-export-onnx and vaswani-export-marian, are pushed as they are,
without this package's code: their stock MarianMT config, tokenizer and generation settings, and the ONNX graphs
under onnx/ (where transformers.js reads a repository) or the MarianMT weights (`validate_export`, `stock_files`);
the card is the same template's variant section.
"""

import fnmatch
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

import torch
from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi, ModelCard
from huggingface_hub.errors import HfHubHTTPError
from huggingface_hub.utils import HFValidationError, validate_repo_id
from transformers import AutoTokenizer, MarianConfig, MarianMTModel
from transformers.tokenization_utils_base import (
    ADDED_TOKENS_FILE,
    CHAT_TEMPLATE_FILE,
    SPECIAL_TOKENS_MAP_FILE,
    TOKENIZER_CONFIG_FILE,
)
from transformers.trainer import OPTIMIZER_NAME, SCALER_NAME, SCHEDULER_NAME, TRAINER_STATE_NAME, TRAINING_ARGS_NAME
from transformers.utils import SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME

from ...configuration_vaswani import VaswaniConfig
from ...remote_code_vaswani import AUTO_MAP, CUSTOM_PIPELINES, payload_files
from ..checkpoints import (
    ONNX_FILE,
    ONNX_FOLDER,
    RESULTS,
    Checkpoint,
    CheckpointError,
    is_onnx_folder,
    load_results,
    read_json,
    validate_checkpoint,
    validate_onnx,
    weight_files,
)
from ..outputs import MARKER, marked_files
from ..texts import read_text
from ..web import LISTING, PAGE_FILES

logger = logging.getLogger(__name__)

TEMPLATE = Path(str(resources.files(__package__) / "model_card.md"))  # package data
# What the paper reports of its two models beyond their shapes: parameters (Table 3), training time (Section 5.2),
# checkpoints averaged (Section 6.1), tokenized BLEU on newstest2014 EN-DE (Table 2).
PAPER_MODELS = {
    "base": {"parameters": "65M", "training_time": "12 hours", "checkpoints": 5, "bleu": 27.3},
    "big": {"parameters": "213M", "training_time": "3.5 days", "checkpoints": 20, "bleu": 28.4},
}
# The card's result fields and where results.json (as vaswani-train writes it) holds them.
RESULT_FIELDS = {
    "sacrebleu": ("test", "sacrebleu"),
    "signature": ("test", "signature"),
    "tokenized_bleu": ("test", "tokenized_bleu"),
    "tokenized_bleu_signature": ("test", "tokenized_bleu_signature"),
    "train_steps": ("train", "step"),
}
# Reported beside BLEU when results.json has them: vaswani-train writes them since chrF and TER joined its results,
# and a checkpoint trained before still pushes, its card without them.
OTHER_METRIC_FIELDS = {
    "chrf": ("test", "chrf"),
    "chrf_signature": ("test", "chrf_signature"),
    "ter": ("test", "ter"),
    "ter_signature": ("test", "ter_signature"),
}
# What a push uploaded, written by it into the repository: the next push deletes exactly these of the files it lacks.
MANIFEST = "vaswani_push.json"
# Written into the staging folder from this package, replacing whatever the checkpoint holds.
REPLACED = {"README.md", "config.json", MANIFEST}
# What a tokenizer's save_pretrained writes beside the vocabulary files its class names (`vocab_files_names`).
TOKENIZER_FILES = (
    TOKENIZER_CONFIG_FILE,
    SPECIAL_TOKENS_MAP_FILE,
    ADDED_TOKENS_FILE,
    CHAT_TEMPLATE_FILE,
    "chat_template.json",
)
# A model's files beside its weights and tokenizer, as the checkpoint opener reads them.
MODEL_FILES = ("config.json", "generation_config.json", RESULTS, "README.md", MANIFEST)
# The Trainer's state of a checkpoint-N folder: known, and not the model's (a resume needs it, a model user not).
TRAINING_STATE = (
    OPTIMIZER_NAME,
    SCHEDULER_NAME,
    SCALER_NAME,
    TRAINER_STATE_NAME,
    TRAINING_ARGS_NAME,
    "rng_state*.pth",
)
# The kinds of file a model is made of, as transformers reads them from a repository's top level: the weights in every
# layout and format from_pretrained looks for (one file, shards and their index, variants such as model.fp16.*),
# what a tokenizer's save_pretrained writes, and the results the card reports. A push over a repository without a
# MANIFEST deletes those of the repository that the pushed model does not have (`stale_files`).
MODEL_FILE_PATTERNS = (
    "*.safetensors",
    "*.safetensors.index.json",
    "pytorch_model*.bin",
    "pytorch_model*.bin.index.json",
    "tf_model*.h5",
    "tf_model*.h5.index.json",
    "flax_model*.msgpack",
    "flax_model*.msgpack.index.json",
    "model.ckpt*",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "*.spm",
    "*.model",
    "chat_template.*",
    "generation_config.json",
    RESULTS,
)
FIELD = re.compile(r"\{\{\s*(\w+)\s*\}\}")
# A block kept only when its condition holds: "{{#results}}" ... "{{/results}}", each marker on a line of its own;
# blocks may hold other blocks.
SECTION = re.compile(r"^\{\{#(\w+)\}\}\n(.*?)^\{\{/\1\}\}\n", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class EvaluationSet:
    """Where the BLEU in results.json was measured: its `test_set` (vaswani-train writes it) unless given."""

    dataset_id: str = "wmt14"
    dataset_config: str = "de-en"
    dataset_split: str = "test"
    dataset_name: str = "WMT14 English-German, newstest2014"
    source_lang: str = "en"
    target_lang: str = "de"


# ---------------------------------------------------------------------------------------------------------------------
# The model card
# ---------------------------------------------------------------------------------------------------------------------


def template_for(config: VaswaniConfig, name: str | None = None) -> tuple[Path, str]:
    """The card's template and the paper's model it describes the checkpoint beside: `name` "base" or "big" picks
    that model with the package's template, another `name` is a template file; by default the big model for a
    big-like checkpoint (d_model >= 1024), else the base one."""
    paper_model = "big" if config.d_model >= 1024 else "base"
    if name in PAPER_MODELS:
        return TEMPLATE, name
    path = TEMPLATE if name is None else Path(name)
    if not path.is_file():
        raise FileNotFoundError(f"model card template {path} not found; expected base, big or a template file")
    return path, paper_model


def paper_values(paper_model: str) -> dict:
    """The paper's column of the card: its model's shapes (the configuration's presets) and what Table 3 and the
    text report of it."""
    config = getattr(VaswaniConfig, paper_model)()
    steps = VaswaniConfig.table3_training_arguments(paper_model)["max_steps"]
    shapes = (
        "encoder_layers",
        "decoder_layers",
        "d_model",
        "d_ff",
        "num_heads",
        "d_k",
        "d_v",
        "dropout",
        "vocab_size",
    )
    return {
        "paper_model": paper_model,
        **{f"paper_{name}": getattr(config, name) for name in shapes},
        "paper_steps": f"{steps // 1000}k",
        **{f"paper_{name}": value for name, value in PAPER_MODELS[paper_model].items()},
    }


def render_template(template: str, values: dict, sections: dict[str, bool]) -> str:
    """Fills `{{field}}`s, keeps or drops `{{#section}}` blocks. Every field needs a value, None is none; in the YAML
    front matter values are written as JSON scalars, which YAML reads back as the same strings and numbers."""

    def section(match):
        if match[1] not in sections:
            raise CheckpointError(f"the template has a section {match[1]!r}; known sections: {sorted(sections)}")
        return match[2] if sections[match[1]] else ""

    text, previous = template, None
    while text != previous:  # a kept block's text may hold another block, which the next pass decides
        previous, text = text, SECTION.sub(section, text)
    missing = sorted({match[1] for match in FIELD.finditer(text)} - {k for k, v in values.items() if v is not None})
    if missing:
        raise CheckpointError(f"the template has fields without a value: {missing}")
    if not text.startswith("---\n") or "\n---\n" not in text[4:]:
        raise CheckpointError("a model card template starts with YAML metadata between two '---' lines")
    end = text.index("\n---\n", 4) + 5
    metadata = FIELD.sub(lambda match: json.dumps(values[match[1]]), text[:end])
    card = metadata + FIELD.sub(lambda match: str(values[match[1]]), text[end:])
    if "{{" in card:
        raise CheckpointError(f"template syntax left in the card: {card[card.index('{{') :][:40]!r}")
    return card


def resolve_test_set(
    checkpoint: Checkpoint, test_set: EvaluationSet | dict | None, with_results: bool
) -> EvaluationSet:
    """Where the card says the BLEU was measured: a complete `test_set` as given, else the set results.json records
    with the fields of a `test_set` dict in place of its own. Without a recorded set, fields default to the paper's
    test set, unless the card reports results and nothing at all names their test set: that is an error."""
    if isinstance(test_set, EvaluationSet):
        return test_set
    fields = test_set or {}
    recorded = (checkpoint.results or {}).get("test_set")
    if isinstance(recorded, dict):
        try:
            base = EvaluationSet(**recorded)
        except TypeError as error:
            raise CheckpointError(
                f"{checkpoint.folder / RESULTS}: test_set is not a test set's description: {error}"
            ) from error
    elif with_results and not fields:
        raise CheckpointError(
            f"{checkpoint.folder / RESULTS} does not say which test set its BLEU was measured on (no test_set); "
            "name it with --dataset, --dataset_config, --dataset_split and --dataset_name"
        )
    else:
        base = EvaluationSet()
    return replace(base, **fields)


def card_values(checkpoint: Checkpoint, repo_id: str, test_set: EvaluationSet) -> dict:
    """The template's fields: the checkpoint's configuration, its size, where it was tested (and its results)."""
    config = checkpoint.config
    return {
        "repo_id": repo_id,
        "model_name": repo_id.rsplit("/", 1)[-1],
        "encoder_layers": config.encoder_layers,
        "decoder_layers": config.decoder_layers,
        "d_model": config.d_model,
        "d_ff": config.d_ff,
        "num_heads": config.num_heads,
        "d_k": config.d_k,
        "d_v": config.d_v,
        "dropout": config.dropout,
        "vocab_size": config.vocab_size,
        "parameters": f"{checkpoint.parameters:,}",
        **vars(test_set),
    }


def result_values(checkpoint: Checkpoint) -> dict:
    """The scores and the training steps from results.json, chrF and TER among them if it has any of their four
    fields; CheckpointError if it has not all of them."""
    results = checkpoint.results
    if results is None:
        raise CheckpointError(
            f"{checkpoint.folder} has no {RESULTS}, so the model card would have no BLEU to report; "
            "train with vaswani-train (it writes one), or push a card without evaluation (--no_results)"
        )
    values = read_fields(results, RESULT_FIELDS)
    others = read_fields(results, OTHER_METRIC_FIELDS)
    if any(value is not None for value in others.values()):
        values.update(others)  # some of them: then all, so that a card never shows a score without its signature
    places = {**RESULT_FIELDS, **OTHER_METRIC_FIELDS}
    missing = [".".join(places[field]) for field, value in values.items() if value is None]
    if missing:
        raise CheckpointError(
            f"{checkpoint.folder / RESULTS} lacks {', '.join(missing)}; expected the results vaswani-train writes"
        )
    for field in ("sacrebleu", "tokenized_bleu", "chrf", "ter"):
        if field in values:
            values[field] = round(float(values[field]), 2)
    return values


def read_fields(results: dict, fields: dict[str, tuple[str, str]]) -> dict:
    """Each of `fields` (name: (part, key)) from results.json's `results`, None where it is not there."""
    values = {}
    for field, (part, key) in fields.items():
        section = results.get(part)
        values[field] = section.get(key) if isinstance(section, dict) else None
    return values


def render_model_card(
    checkpoint: Checkpoint,
    repo_id: str,
    test_set: EvaluationSet | dict | None = None,
    with_results: bool = True,
    template: str | None = None,
) -> str:
    """The README.md for `repo_id`, checked by huggingface_hub's own card parser (metadata and model-index).

    With `with_results` (the default) the card reports the BLEU of results.json, which must be there, and its chrF
    and TER where it has them; without, the card has no evaluation section and no model-index. `test_set` (an
    EvaluationSet, or a dict of the fields that differ) defaults to the one results.json records.
    """
    values = result_values(checkpoint) if with_results else {}
    values.update(card_values(checkpoint, repo_id, resolve_test_set(checkpoint, test_set, with_results)))
    path, paper_model = template_for(checkpoint.config, template)
    values.update(paper_values(paper_model))
    try:
        export = exported_by(checkpoint.folder)
        sections = {
            "results": with_results,
            "chrf_ter": "chrf" in values,
            "remote_code": export is None,
            "onnx": export == "vaswani-export-onnx",
            "quantized": any((checkpoint.folder / ONNX_FOLDER).glob("*_quantized.onnx")),
            "marian": export == "vaswani-export-marian",
        }
        card = render_template(read_text(path), values, sections)
    except CheckpointError as error:
        raise CheckpointError(f"model card template {path}: {error}") from error
    check_card(card, with_results)
    return card


def check_card(card: str, with_results: bool) -> None:
    """huggingface_hub's parser raises on malformed metadata or model-index; the evaluation must be there or not."""
    try:
        data = ModelCard(card).data
    except ValueError as error:
        raise CheckpointError(f"the rendered model card's metadata is invalid: {error}") from error
    if bool(data.eval_results) != with_results:
        expected = "a model-index with BLEU" if with_results else "no model-index"
        raise CheckpointError(f"the rendered model card should have {expected}")


# ---------------------------------------------------------------------------------------------------------------------
# The push
# ---------------------------------------------------------------------------------------------------------------------


# The commands whose folders are pushed as they are, stock MarianMT models without this package's code (`stock_files`).
STOCK_EXPORTS = ("vaswani-export-onnx", "vaswani-export-marian")
# Why a file of the folder is not pushed: a stock export's browser page, a checkpoint's training state.
LEFT_OUT = dict.fromkeys((*PAGE_FILES, LISTING), "the browser page, which vaswani-export-onnx --web writes")
TRAINER_STATE_LEFT_OUT = "the Trainer's training state, not the model's"


def exported_by(folder: Path) -> str | None:
    """The command of STOCK_EXPORTS that wrote `folder`, by what it holds: an ONNX export's files, or a MarianMT
    config.json; None for anything else (a checkpoint, which `validate_checkpoint` judges)."""
    if is_onnx_folder(folder):
        return STOCK_EXPORTS[0]
    config = folder / "config.json"
    if config.is_file() and read_json(config).get("model_type") == "marian":
        return STOCK_EXPORTS[1]
    return None


def validate_export(folder: Path) -> Checkpoint:
    """A stock export (vaswani-export-onnx or -marian) as the card and the push see a checkpoint: an ONNX export
    checked by the one opener (`validate_onnx`; its int8 variant too where onnx/ holds it), a Marian export's weights
    and tokenizer opened; the shapes read from the MarianMT config beside them, and the parameters counted on the
    MarianMTModel that config builds, without memory (its zero biases, which this network has not, included)."""
    if exported_by(folder) == "vaswani-export-onnx":
        tokenizer = validate_onnx(folder).tokenizer
        if any((folder / ONNX_FOLDER).glob("*_quantized.onnx")):
            validate_onnx(folder, quantized=True)
    else:
        tokenizer = validate_marian_export(folder)
    marian = MarianConfig.from_dict(read_json(folder / "config.json"))
    with torch.device("meta"):
        parameters = MarianMTModel(marian).num_parameters()
    shapes = VaswaniConfig(
        vocab_size=marian.vocab_size,
        d_model=marian.d_model,
        d_ff=marian.encoder_ffn_dim,
        num_heads=marian.encoder_attention_heads,
        encoder_layers=marian.encoder_layers,
        decoder_layers=marian.decoder_layers,
        dropout=marian.dropout,
    )
    return Checkpoint(folder, shapes, parameters, load_results(folder), tokenizer)


def validate_marian_export(folder: Path):
    """A vaswani-export-marian folder's tokenizer, once its weights open (`weight_files` names a damaged file)."""
    if not weight_files(folder):
        raise CheckpointError(f"{folder} has no model.safetensors; expected the folder vaswani-export-marian writes")
    try:
        return AutoTokenizer.from_pretrained(folder)
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{folder}: its tokenizer does not load: {error}") from error


def stock_files(checkpoint: Checkpoint, include: Iterable[str] = ()) -> tuple[dict[str, Path], list[str]]:
    """`files_to_push` of a stock export: its config, generation settings, tokenizer, weights or ONNX_FILE with every
    graph under onnx/ (where transformers.js reads them), pushed as written; the browser page's files left out
    (LEFT_OUT); any other file refused by name unless `include` adds it."""
    folder = checkpoint.folder
    included = included_files(folder, include)
    known = {*checkpoint.tokenizer.vocab_files_names.values(), *TOKENIZER_FILES, *MODEL_FILES, ONNX_FILE}
    if exported_by(folder) == "vaswani-export-marian":
        known |= {path.name for path in weight_files(folder)}
    files, left, others = {}, [], []
    for path in sorted(folder.iterdir()):
        if path.name in included or path.name.startswith("."):
            continue
        if path.is_dir() and path.name == ONNX_FOLDER:
            graphs = sorted(path.iterdir())
            others += [f"{ONNX_FOLDER}/{graph.name}" for graph in graphs if graph.suffix != ".onnx"]
            files.update({f"{ONNX_FOLDER}/{graph.name}": graph for graph in graphs if graph.suffix == ".onnx"})
        elif path.name in known and path.name not in {"README.md", MANIFEST}:
            files[path.name] = path
        elif path.name in LEFT_OUT:
            left.append(path.name)
        else:
            others.append(path.name)
    if others:
        raise CheckpointError(
            f"{folder} holds {', '.join(others)}, not an export's model files; push such a file on purpose with "
            "--include NAME, or move it out of the folder"
        )
    return {**files, **included}, left


class PushRaced(ValueError):
    """Another push changed the repository between this push's look at it and its commit: nothing was committed."""


def model_files(checkpoint: Checkpoint) -> set[str]:
    """The top-level names in the checkpoint's folder that are the model's: what the checkpoint opener read
    (config.json, the weights and their index, the tokenizer's files as its class names them, generation_config.json,
    results.json), the card, this package's code, and what the folder's marker names as its command's output."""
    folder = checkpoint.folder
    weights = {path.name for path in weight_files(folder)}
    if SAFE_WEIGHTS_NAME not in weights:  # shards, which their index names
        weights.add(SAFE_WEIGHTS_INDEX_NAME)
    tokenizer = {*checkpoint.tokenizer.vocab_files_names.values(), *TOKENIZER_FILES}
    names = {path.name for path in folder.iterdir() if path.is_file()}
    known = weights | tokenizer | set(MODEL_FILES) | payload_names() | set(marked_files(folder) or ())
    return names & known


def included_files(folder: Path, include: Iterable[str]) -> dict[str, Path]:
    """What `include` adds (file names or glob patterns relative to `folder`, subfolders allowed), by path in the
    repository; a pattern that names no file of the folder, or a file outside it, is refused."""
    root, chosen = folder.resolve(), {}
    for pattern in include:
        if Path(pattern).is_absolute():
            raise CheckpointError(f"--include {pattern}: expected a file or pattern relative to {folder}")
        found = [path for path in sorted(folder.glob(pattern)) if path.is_file()]
        outside = [path for path in found if not path.resolve().is_relative_to(root)]
        if outside or not found:
            what = f"names {outside[0]}, outside it" if outside else "matches no file in it"
            raise CheckpointError(f"--include {pattern} {what}; expected files of {folder}")
        chosen.update({path.relative_to(folder).as_posix(): path for path in found})
    written = sorted(set(chosen) & (REPLACED | payload_names()))
    if written:
        raise CheckpointError(
            f"--include names {', '.join(written)}, which the push writes itself (the card, the config naming the "
            "code, the code, the list of files); expected other files (your own card: --template FILE)"
        )
    return chosen


def files_to_push(checkpoint: Checkpoint, include: Iterable[str] = ()) -> tuple[dict[str, Path], list[str]]:
    """({path in the repository: local file} of the checkpoint folder's files to upload, the Trainer's state files
    left out).
    Every other top-level file is refused by name unless `include` adds it, so that a push never uploads a file the
    user did not know was there (a key, a log); hidden files and subfolders stay local unless included."""
    folder = checkpoint.folder
    included = included_files(folder, include)
    model = model_files(checkpoint)
    files = {name: folder / name for name in model if name not in REPLACED and name not in payload_names()}
    left, others = [], []
    for path in sorted(folder.iterdir()):
        if path.name in model or path.name in included or not path.is_file() or path.name.startswith("."):
            continue
        (left if matches(path.name, TRAINING_STATE) else others).append(path.name)
    if others:
        raise CheckpointError(
            f"{folder} holds {', '.join(others)}, which {'is' if len(others) == 1 else 'are'} not the model's files "
            f"(config.json, weights, tokenizer, generation_config.json, {RESULTS}, or what its {MARKER} names); "
            "expected only those: push such a file on purpose with --include NAME, or move it out of the folder"
        )
    return {**files, **included}, left


def payload_names() -> set[str]:
    return {path.name for path in payload_files()}


def matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def stage(checkpoint: Checkpoint, files: dict[str, Path], card: str, staging: Path, remote_code: bool = True) -> None:
    """The files to upload: `files`, the card, with `remote_code` this package's code and a config naming it (a stock
    export's config is one of `files`), and the MANIFEST of them."""
    for name, path in files.items():
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
        link_or_copy(path, staging / name)
    if remote_code:
        for path in payload_files():
            shutil.copyfile(path, staging / path.name)
        config = read_json(checkpoint.folder / "config.json")
        config.update(auto_map=AUTO_MAP, custom_pipelines=CUSTOM_PIPELINES)
        (staging / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    (staging / "README.md").write_text(card, encoding="utf-8")
    pushed = sorted(
        [*(path.relative_to(staging).as_posix() for path in staging.rglob("*") if path.is_file()), MANIFEST]
    )
    (staging / MANIFEST).write_text(json.dumps({"files": pushed}, indent=2) + "\n", encoding="utf-8")


def stale_files(remote: list[str], pushed: set[str], earlier: list[str] | None = None) -> list[str]:
    """The files of `remote` (a repository's paths) that a push of `pushed` deletes: with `earlier` (the files the
    earlier push's MANIFEST lists) those of them that the new model does not have, and no other; without, those at the
    top level of a kind a model is made of (MODEL_FILE_PATTERNS) that the pushed model does not have (subfolders are
    not a model's files: from_pretrained reads the top level)."""
    if earlier is not None:
        return sorted(set(earlier) & set(remote) - pushed)
    return sorted(
        path for path in remote if "/" not in path and path not in pushed and matches(path, MODEL_FILE_PATTERNS)
    )


def log_line(line: str) -> None:
    (logger.warning if line.startswith("deleting ") else logger.info)(line)


def earlier_manifest(api: HfApi, repo_id: str, head: str, remote: list[str]) -> list[str] | None:
    """The files the earlier push listed in the repository's MANIFEST at `head`, or None where it has none."""
    if MANIFEST not in remote:
        return None
    path = Path(api.hf_hub_download(repo_id, MANIFEST, revision=head))
    try:
        files = json.loads(path.read_text(encoding="utf-8"))["files"]
    except (ValueError, KeyError, TypeError) as error:
        files = error
    if not isinstance(files, list) or not all(isinstance(name, str) for name in files):
        raise CheckpointError(
            f"{repo_id}: {MANIFEST} is not the list of files vaswani-push writes ({files}); expected "
            '{"files": [...]}: delete it from the repository to have the model files of every kind replaced'
        )
    return files


def link_or_copy(source: Path, target: Path) -> None:
    # Weights can be gigabytes: a hard link stages them for free where the file system allows it.
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def check_repo_id(repo_id: str) -> None:
    """CheckpointError unless `repo_id` is a Hub repository id ("user/name", or a bare name under the login's)."""
    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        raise CheckpointError(f"{repo_id!r} is not a Hub repository id ({error}); expected user/name") from error


def account_repo_id(name: str, token: str | None = None) -> str:
    """`name` checked (`check_repo_id`) and as the Hub will create it: a bare name under the logged-in account, as
    transformers' Trainer puts it. Asks the Hub who is logged in, so that a push that could not be made is known before
    the work whose result it shares."""
    check_repo_id(name)
    account = HfApi(token=token).whoami()["name"]
    return name if "/" in name else f"{account}/{name}"


def push_checkpoint(
    folder,
    repo_id: str,
    *,
    private: bool = False,
    revision: str | None = None,
    commit_message: str | None = None,
    with_results: bool = True,
    template: str | None = None,
    test_set: EvaluationSet | dict | None = None,
    include: Iterable[str] = (),
    report: Callable[[str], None] | None = None,
    token: str | None = None,
) -> str:
    """Validates `folder`, renders its card, and uploads the model's files (`files_to_push`; `include` adds others)
    to `repo_id` (created if needed; `private` applies only then) on `revision`, a branch created from main if it does
    not exist. Returns the repository's URL; `report` (default: the log, deletions as warnings) is given one line for
    each file pushed, left out, or deleted; `token` (default: the login's, or HF_TOKEN) is the one pushing.

    Everything that can be wrong with the folder is found before the first request to the Hub. Files that did not
    change since the last push are not uploaded again (the client compares hashes with the Hub's). The push is one
    commit, which also deletes the earlier model's files that this model does not have (`stale_files`). A push that
    another one overtook is refused (`PushRaced`) with nothing committed.
    """
    report = report or log_line
    check_repo_id(repo_id)
    stock = exported_by(Path(folder)) is not None
    checkpoint = validate_export(Path(folder)) if stock else validate_checkpoint(folder)
    files, left_out = (stock_files if stock else files_to_push)(checkpoint, include)
    card = render_model_card(checkpoint, repo_id, test_set, with_results, template)
    api = HfApi(token=token)
    with tempfile.TemporaryDirectory(prefix="vaswani-push-") as staging:
        stage(checkpoint, files, card, Path(staging), remote_code=not stock)
        # Not private: None leaves the visibility to the Hub's default for the account, as the Trainer does.
        url = api.create_repo(repo_id, private=private or None, exist_ok=True)
        if revision is not None:
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        # The deletions are computed on one commit, which the new commit names as its parent.
        head = api.model_info(repo_id, revision=revision).sha
        added = [
            CommitOperationAdd(path.relative_to(staging).as_posix(), path)
            for path in sorted(Path(staging).rglob("*"))
            if path.is_file()
        ]
        pushed = {operation.path_in_repo for operation in added}
        remote = api.list_repo_files(repo_id, revision=head)
        stale = stale_files(remote, pushed, earlier_manifest(api, repo_id, head, remote))
        for name in sorted(pushed):
            report(f"pushing {name}")
        for name in left_out:
            report(f"left out {name} ({LEFT_OUT.get(name, TRAINER_STATE_LEFT_OUT)})")
        for name in stale:
            report(f"deleting {name} (the earlier model's; this one does not have it)")
        try:
            api.create_commit(
                repo_id,
                [*added, *(CommitOperationDelete(path) for path in stale)],
                commit_message=commit_message
                or f"Upload {checkpoint.folder.name} with modeling_vaswani.toolkit.hub.push",
                revision=revision,
                parent_commit=head,
            )
        except HfHubHTTPError as error:
            if error.response is None or error.response.status_code != 412:
                raise
            raise PushRaced(
                f"{repo_id} ({revision or 'main'}): another push changed the repository while this one was being "
                "prepared, so nothing was committed (its deletions were computed on the earlier state); push again"
            ) from error
    return str(url)
