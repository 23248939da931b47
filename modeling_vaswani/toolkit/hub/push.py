"""Sharing a checkpoint on the Hugging Face Hub: validation, the model card, and the push (vaswani-push).

A checkpoint folder is checked before anything is uploaded: a Vaswani config.json, safetensors weights (one file or
a complete sharded index) that open and hold every tensor of the model config.json describes at its shape, and a
tokenizer that fits the model. Its model card is rendered from model_card.md with the checkpoint's real configuration
and its measured results (results.json, written by vaswani-train); a template field without a value is an error, so
no placeholder ever reaches the Hub. A checkpoint without results.json is refused unless the card is asked for
without its evaluation section (`with_results=False`, `--no_results`).

The push uploads a staging copy of the folder's top-level files (subfolders such as checkpoint-N stay local) with the
card as README.md, the model's code and pipeline from this package, and config.json naming them (`auto_map`,
`custom_pipelines`), so that the repository loads with `trust_remote_code=True` where the package is not installed.

A push replaces the model: it is one commit that adds the folder's files and deletes the repository's files of a
kind the model is made of (weights in any layout or format, the tokenizer's files, results.json) that the new model
does not have. An earlier push of another layout (one model.safetensors against shards and their index, another
number of shards, a pytorch_model.bin) can then never be loaded in place of, or beside, the new one. Files of other
kinds (a user's notes, images for the card) stay. The commit names its parent, the state the deletions were computed
on: a push that raced another one is refused by the Hub rather than deleting from a state it did not see.
"""

import fnmatch
import json
import logging
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi, ModelCard
from huggingface_hub.utils import HFValidationError, validate_repo_id

from ...configuration_vaswani import VaswaniConfig
from ...remote_code_vaswani import AUTO_MAP, CUSTOM_PIPELINES, payload_files
from ..checkpoints import RESULTS, Checkpoint, CheckpointError, read_json, validate_checkpoint
from ..texts import read_text

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
# Written into the staging folder from this package, replacing whatever the checkpoint holds.
REPLACED = {"README.md", "config.json"}
# The kinds of file a model is made of, as transformers reads them from a repository's top level: the weights in every
# layout and format from_pretrained looks for (one file, shards and their index, variants such as model.fp16.*),
# what a tokenizer's save_pretrained writes, and the results the card reports. A push deletes those of the repository
# that the pushed model does not have (`stale_files`).
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
        sections = {"results": with_results, "chrf_ter": "chrf" in values}
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


def stage(checkpoint: Checkpoint, card: str, staging: Path) -> None:
    """The files to upload: the checkpoint's top-level files, the card, this package's code and a config naming it."""
    code = payload_files()
    replaced = REPLACED | {path.name for path in code}
    for path in sorted(checkpoint.folder.iterdir()):
        if path.is_file() and not path.name.startswith(".") and path.name not in replaced:
            link_or_copy(path, staging / path.name)
    for path in code:
        shutil.copyfile(path, staging / path.name)
    config = read_json(checkpoint.folder / "config.json")
    config.update(auto_map=AUTO_MAP, custom_pipelines=CUSTOM_PIPELINES)
    (staging / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    (staging / "README.md").write_text(card, encoding="utf-8")


def stale_files(remote: list[str], pushed: set[str]) -> list[str]:
    """The files of `remote` (a repository's paths) that a push of `pushed` (top-level names) deletes: those at the
    top level of a kind a model is made of (MODEL_FILE_PATTERNS) that the pushed model does not have. Subfolders are
    not the model's files: from_pretrained reads the top level."""
    return sorted(
        path
        for path in remote
        if "/" not in path
        and path not in pushed
        and any(fnmatch.fnmatchcase(path, pattern) for pattern in MODEL_FILE_PATTERNS)
    )


def link_or_copy(source: Path, target: Path) -> None:
    # Weights can be gigabytes: a hard link stages them for free where the file system allows it.
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


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
) -> str:
    """Validates `folder`, renders its card, and uploads it to `repo_id` (created if needed; `private` applies only
    then) on `revision`, a branch created from main if it does not exist. Returns the repository's URL.

    Everything that can be wrong with the folder is found before the first request to the Hub. Files that did not
    change since the last push are not uploaded again (the client compares hashes with the Hub's). The push is one
    commit, which also deletes the repository's model files that this model does not have (`stale_files`): the
    repository then holds this model's weights alone, in this folder's layout.
    """
    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        raise CheckpointError(f"{repo_id!r} is not a Hub repository id ({error}); expected user/name") from error
    checkpoint = validate_checkpoint(folder)
    card = render_model_card(checkpoint, repo_id, test_set, with_results, template)
    api = HfApi()
    with tempfile.TemporaryDirectory(prefix="vaswani-push-") as staging:
        stage(checkpoint, card, Path(staging))
        # Not private: None leaves the visibility to the Hub's default for the account, as the Trainer does.
        url = api.create_repo(repo_id, private=private or None, exist_ok=True)
        if revision is not None:
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        # The deletions are computed on one commit, which the new commit names as its parent.
        head = api.model_info(repo_id, revision=revision).sha
        added = [CommitOperationAdd(path.name, path) for path in sorted(Path(staging).iterdir())]
        pushed = {operation.path_in_repo for operation in added}
        stale = stale_files(api.list_repo_files(repo_id, revision=head), pushed)
        if stale:
            logger.warning(
                "%s: deleting the earlier model's files that this one does not have: %s", repo_id, ", ".join(stale)
            )
        api.create_commit(
            repo_id,
            [*added, *(CommitOperationDelete(path) for path in stale)],
            commit_message=commit_message or f"Upload {checkpoint.folder.name} with modeling_vaswani.toolkit.hub.push",
            revision=revision,
            parent_commit=head,
        )
    return str(url)
