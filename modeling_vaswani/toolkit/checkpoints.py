"""What a checkpoint folder is: the one home of finding, validating, opening and loading one.

A checkpoint folder is what `save_pretrained` writes (config.json, safetensors weights: one file or a sharded index,
a tokenizer), as the Trainer's `checkpoint-<step>` folders, the averaged model, a converted model and a pushed
repository hold it. Everything in the toolkit that reads or writes such a folder goes through here, so that a damaged
one is named the same way whichever command meets it. So does a CTranslate2 export (`validate_export`): every file
vaswani-export-ctranslate2 writes, checked before CTranslate2 or transformers read any of them.

Files are opened here first, by this process: a loader that meets a file it may not read reports it in its own way
(safetensors as "No such file", transformers' generation config not at all, a probe for another file as that file),
so `check_readable` names it, as permission denied, before any loader runs.
"""

import hashlib
import json
import math
import os
import re
import struct
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from huggingface_hub import hf_hub_download
from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError
from huggingface_hub.utils import HFValidationError, validate_repo_id
from safetensors import SafetensorError, safe_open
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, GenerationConfig
from transformers.utils import SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME

from ..configuration_vaswani import VaswaniConfig
from ..modeling_vaswani import VaswaniForConditionalGeneration
from .outputs import restore_set_aside
from .values import count

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
# What vaswani-export-ctranslate2 writes: CTranslate2's model.bin, config.json and vocabulary, the generation settings,
# the tokenizer, and EXPORT_FILE, what the translating side needs beyond CTranslate2's own config.json.
EXPORT_FILE = "vaswani_ctranslate2.json"
EXPORT_VOCABULARY = "shared_vocabulary.json"
EXPORT_FILES = ("model.bin", "config.json", EXPORT_VOCABULARY, "generation_config.json", EXPORT_FILE)
# What vaswani-export-onnx writes (toolkit/interop/onnx.py): the graphs under ONNX_FOLDER, by the names transformers.js
# loads (a variant's with its suffix), and ONNX_FILE, the settings the onnxruntime engine reads and each file's size
# and SHA-256 (exports before SETTINGS_DIGEST: each graph's), so that a truncated, swapped or changed file is named
# before onnxruntime or transformers reads it.
ONNX_FOLDER, ONNX_FILE = "onnx", "vaswani_onnx.json"
ONNX_ENCODER, ONNX_DECODER = "encoder_model.onnx", "decoder_model_merged.onnx"
SETTINGS_DIGEST = "sha256"  # ONNX_FILE's digest of its own content (`settings_digest`)
ONNX_SETTINGS = (
    "max_position_embeddings", "position_rows", "vocab_size", "decoder_layers", "num_heads", "head_width", "d_model",
)  # fmt: skip
# model.bin's layout as read here: CTranslate2's binary version 6 (ctranslate2/specs/model_spec.py, `_serialize`), and
# the byte size of each of its data types by id (the order of its DataType enum).
CTRANSLATE2_BINARY_VERSION = 6
CTRANSLATE2_DTYPE_SIZES = (4, 1, 2, 4, 2, 2)  # float32, int8, int16, int32, float16, bfloat16
RESULTS = "results.json"  # the training summary and scores vaswani-train writes beside the averaged model
CHECKPOINT_PATTERN = re.compile(r"checkpoint-(\d+)")


class CheckpointError(ValueError):
    """A checkpoint folder that cannot be used as it is: the message names the folder (or file) and what is wrong."""


# ---------------------------------------------------------------------------------------------------------------------
# Finding
# ---------------------------------------------------------------------------------------------------------------------


def find_checkpoints(output_dir: str | Path, last: int | None = None) -> list[Path]:
    """The Trainer's `checkpoint-<step>` folders in `output_dir`, by increasing step; only the last `last` if given."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        raise FileNotFoundError(f"training output directory {output_dir} does not exist")
    if last is not None and last < 1:
        raise ValueError(f"last must be >= 1, got {last}")
    found = [path for path in output_dir.iterdir() if path.is_dir() and CHECKPOINT_PATTERN.fullmatch(path.name)]
    # Numerically: lexically, checkpoint-10000 would come before checkpoint-9000.
    found.sort(key=lambda path: int(CHECKPOINT_PATTERN.fullmatch(path.name).group(1)))
    if last is None:
        return found
    if len(found) < last:
        names = [path.name for path in found]
        raise ValueError(f"asked for the last {last} checkpoints but {output_dir} has only {len(found)}: {names}")
    return found[-last:]


def local_folder(name: str) -> Path | None:
    """The checkpoint folder `name` names, or None for a Hub id; a ValueError for a path that leads nowhere.

    A name is taken for a Hub id only when it has the form of one and does not start with an existing folder: a typo
    in "runs/small" (where runs/ exists) would otherwise cost a minute of retries against the Hub.
    """
    path = Path(name).expanduser()
    restore_set_aside(path)  # a folder a killed run set aside as .NAME.old: restored, or told how to
    if path.is_dir():
        check_readable(path)
        return path
    if path.exists():
        raise ValueError(f"model {name} is a file; expected a checkpoint folder or a Hub id")
    try:
        validate_repo_id(name)
        hub_id = not (len(path.parts) > 1 and Path(path.parts[0]).is_dir())
    except HFValidationError:
        hub_id = False
    if not hub_id:
        raise ValueError(f"model folder {name} does not exist; expected a checkpoint folder or a Hub id (user/model)")
    return None


def is_ctranslate2_folder(folder: Path) -> bool:
    """A CTranslate2 export, whole or not: a folder holding any of the files only an export has (model.bin, its
    vocabulary, EXPORT_FILE) whose config.json is not a Vaswani checkpoint's. A damaged export is one too, so that
    `validate_export` names what it lacks, rather than the checkpoint checks a config.json that is CTranslate2's."""
    markers = ("model.bin", EXPORT_VOCABULARY, EXPORT_FILE)
    return any((folder / name).is_file() for name in markers) and not is_vaswani_folder(folder)


def check_readable(folder: Path) -> None:
    """The folder, and every file at its top level (hidden ones aside), readable by this process; otherwise the
    PermissionError names the folder or the file. Loaders read files by names of their own choosing, and one that may
    not read a file reports it otherwise, or not at all (see the module's docstring)."""
    try:
        entries = list(os.scandir(folder))  # listing it needs read permission,
        os.stat(os.path.join(folder, "."))  # entering it execute permission
    except PermissionError as error:
        raise PermissionError(
            error.errno, f"{error.strerror}: the folder cannot be listed or entered", str(folder)
        ) from None
    for entry in entries:
        if not entry.name.startswith(".") and entry.is_file():
            with open(entry.path, "rb"):
                pass


# ---------------------------------------------------------------------------------------------------------------------
# Opening
# ---------------------------------------------------------------------------------------------------------------------


@contextmanager
def open_weights(path: Path) -> Iterator:
    """`safe_open(path)`, with an error naming the file when it is not whole (safetensors' own names none)."""
    try:
        handle = safe_open(path, framework="pt")
    except OSError:
        with open(path, "rb"):  # safetensors tells an unreadable file as a missing one: the system tells which
            pass
        raise
    except SafetensorError as error:
        raise CheckpointError(
            f"{path} is not a readable safetensors file ({error}); expected complete weights as save_pretrained "
            "writes them (truncated by a full disk or an interrupted copy?)"
        ) from error
    with handle as weights:
        yield weights


def read_json(path: Path, expected: type = dict) -> dict | list:
    """A JSON object (or value of type `expected`) from `path`, or CheckpointError naming the file."""
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise CheckpointError(f"{path} is not valid JSON: {error}") from error
    if not isinstance(values, expected):
        what = {dict: "a JSON object", list: "a JSON array"}.get(expected, expected.__name__)
        raise CheckpointError(f"{path} holds a {type(values).__name__}; expected {what}")
    return values


def check_recorded_counts(path: Path, settings: dict, names) -> None:
    """Each of `names` in an export's settings file `path` (read as `settings`) is a whole number of at least 1, as
    the exporter writes it; else a CheckpointError naming the file, the setting and its value."""
    for name in names:
        try:
            count(name, settings.get(name))
        except ValueError as error:
            raise CheckpointError(f"{path}: {error}, as the exporter writes it: export the checkpoint again") from None


def weight_files(folder: Path) -> list[Path]:
    """model.safetensors, or every shard named by model.safetensors.index.json, all checked to exist."""
    if (folder / SAFE_WEIGHTS_NAME).is_file():
        return [folder / SAFE_WEIGHTS_NAME]
    return sorted(set(shard_map(folder).values()))


def shard_map(folder: Path) -> dict[str, Path]:
    """The tensor name -> shard file map of a sharded checkpoint's index, every shard checked to exist."""
    index = folder / SAFE_WEIGHTS_INDEX_NAME
    if not index.is_file():
        raise CheckpointError(
            f"{folder} has no weights: expected {SAFE_WEIGHTS_NAME} or {SAFE_WEIGHTS_INDEX_NAME} with its shards"
        )
    names = read_json(index).get("weight_map")
    if not isinstance(names, dict) or not names:
        raise CheckpointError(
            f"{index} has no weight_map naming tensors and their shards; expected the index it writes"
        )
    shards = sorted(set(names.values()))
    missing = [name for name in shards if not (folder / name).is_file()]
    if missing:
        raise CheckpointError(f"{folder} lacks {len(missing)} of the {len(shards)} shards in {index.name}: {missing}")
    return {key: folder / name for key, name in names.items()}


def weight_map(folder: Path) -> dict[str, Path]:
    """Every tensor name of a checkpoint mapped to the safetensors file holding it, every file checked to open."""
    if (folder / SAFE_WEIGHTS_NAME).is_file():
        with open_weights(folder / SAFE_WEIGHTS_NAME) as weights:
            return dict.fromkeys(weights.keys(), folder / SAFE_WEIGHTS_NAME)
    names = shard_map(folder)
    for path in sorted(set(names.values())):
        with open_weights(path):
            pass
    return names


def stored_shapes(folder: Path) -> dict[str, tuple[tuple[int, ...], Path]]:
    """Every stored tensor's shape and file, from the safetensors headers (no tensor is read)."""
    shapes = {}
    for path in weight_files(folder):
        with open_weights(path) as weights:
            shapes.update({name: (tuple(weights.get_slice(name).get_shape()), path) for name in weights.keys()})
    return shapes


def check_torch_file(path: Path) -> None:
    """A file torch.save wrote (optimizer.pt, scheduler.pt, ...) must be whole: it is a zip archive whose directory
    sits at its end, so a truncated one is found without reading it (torch's own error names no file)."""
    try:
        with zipfile.ZipFile(path):
            pass
    except (zipfile.BadZipFile, OSError) as error:
        raise CheckpointError(
            f"{path} is not a readable torch.save file ({error}); expected it whole (truncated by a full disk or "
            "an interrupted copy?)"
        ) from error


# ---------------------------------------------------------------------------------------------------------------------
# Validating
# ---------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint folder that passed `validate_checkpoint`."""

    folder: Path
    config: VaswaniConfig
    parameters: int
    results: dict | None  # results.json, where there is one
    tokenizer: object  # the tokenizer, loaded by the check


def validate_checkpoint(folder) -> Checkpoint:
    """The Vaswani checkpoint in `folder`, or CheckpointError naming what is missing or does not fit: a Vaswani
    config.json, safetensors weights holding every tensor of that model at its shape, a tokenizer that fits it, and
    results.json a JSON object where there is one. Local files only; no tensor is read."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder} is not a folder; expected a checkpoint written by save_pretrained")
    check_readable(folder)
    config = load_config(folder)
    shapes = stored_shapes(folder)
    tokenizer = check_tokenizer(folder, config)
    check_shapes(folder, config, shapes)
    # The tied embedding matrix is stored once and the sinusoid table not at all: this is the model's parameter count.
    parameters = sum(math.prod(shape) for shape, _ in shapes.values())
    return Checkpoint(folder, config, parameters, load_results(folder), tokenizer)


def is_vaswani_folder(folder: Path) -> bool:
    """Whether `folder` holds a readable config.json of model_type vaswani (a checkpoint of this model)."""
    try:
        return read_json(folder / "config.json").get("model_type") == VaswaniConfig.model_type
    except (OSError, CheckpointError):
        return False


def load_results(folder: Path) -> dict | None:
    """results.json as vaswani-train writes it, or None where there is none."""
    path = folder / RESULTS
    return read_json(path) if path.is_file() else None


def recorded_source_language(name: str, revision: str | None = None) -> str | None:
    """The source language results.json records for the model `name` (`test_set.source_lang`, as vaswani-train writes
    it): in a local folder (a checkpoint, or an exported folder a results.json was copied into), or a Hub repository
    (vaswani-push uploads it; a file that is not there, or a Hub out of reach, is None). None where there is none."""
    folder = Path(name).expanduser()
    if folder.is_dir():
        results = load_results(folder)
    else:
        try:
            results = read_json(Path(hf_hub_download(name, RESULTS, revision=revision)))
        except (HfHubHTTPError, LocalEntryNotFoundError, HFValidationError, OSError, ValueError):
            return None
    test_set = (results or {}).get("test_set")
    language = test_set.get("source_lang") if isinstance(test_set, dict) else None
    return language if isinstance(language, str) and language.strip() else None


def foreign_type(model_type) -> str:
    """What a config of another model_type is told: the type, the one expected, and the converter where one exists."""
    told = f"model_type is {model_type!r}, expected {VaswaniConfig.model_type!r}"
    if model_type == "marian":
        told += " (a MarianMT model: `vaswani-convert marian FOLDER OUTPUT` turns it into one)"
    return told


def load_config(folder: Path) -> VaswaniConfig:
    """config.json of `folder`, which must be a Vaswani config."""
    path = folder / "config.json"
    if not path.is_file():
        raise CheckpointError(
            f"model folder {folder} has no config.json; expected a checkpoint written by save_pretrained"
        )
    values = read_json(path)
    if values.get("model_type") != VaswaniConfig.model_type:
        raise CheckpointError(f"{path} is not a Vaswani config: {foreign_type(values.get('model_type'))}")
    try:
        return VaswaniConfig.from_json_file(path)
    except ValueError as error:
        raise CheckpointError(f"{path}: {error}") from error


def check_shapes(folder: Path, config: VaswaniConfig, shapes: dict[str, tuple[tuple[int, ...], Path]]) -> None:
    """The weights must be those of the model config.json describes, every tensor at its shape: otherwise the folder
    fails to load. The model is built on the meta device, which costs nothing."""
    with torch.device("meta"):
        expected = VaswaniForConditionalGeneration(config).state_dict(keep_vars=True)
    described = (
        f"config.json (vocab_size {config.vocab_size}, d_model {config.d_model}, d_ff {config.d_ff}, "
        f"num_heads {config.num_heads}, d_k {config.d_k}, d_v {config.d_v}, "
        f"{config.encoder_layers}+{config.decoder_layers} layers)"
    )
    for name, (shape, path) in shapes.items():
        if name not in expected:
            raise CheckpointError(f"{path}: tensor {name!r} {shape} is no tensor of the model {described} describes")
        if tuple(expected[name].shape) != shape:
            raise CheckpointError(
                f"{path}: tensor {name!r} is {shape} but {described} implies {tuple(expected[name].shape)}"
            )
    # Tied tensors (the shared embedding under its four names) are stored under one name: any one stands for all.
    names_of = {}
    for name, tensor in expected.items():
        names_of.setdefault(id(tensor), []).append(name)
    missing = [names[0] for names in names_of.values() if not any(name in shapes for name in names)]
    if missing:
        raise CheckpointError(
            f"{folder}: the weights lack {len(missing)} tensor(s) of the model {described} describes, "
            f"such as {missing[:3]}; loading would initialize them at random"
        )


def check_tokenizer_files(folder: Path) -> None:
    """A model folder must carry its tokenizer (save_pretrained of the tokenizer writes these files)."""
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise CheckpointError(f"model folder {folder} has no tokenizer; expected {' or '.join(TOKENIZER_FILES)}")


def check_tokenizer(folder: Path, config: VaswaniConfig):
    """The tokenizer, which must load and match the model: one id per embedding row, the same padding and end ids."""
    tokenizer = load_tokenizer(folder)
    if len(tokenizer) != config.vocab_size:
        raise CheckpointError(
            f"{folder}: the tokenizer has {len(tokenizer)} tokens but config.json's vocab_size is {config.vocab_size}"
        )
    for name in ("pad_token_id", "eos_token_id"):
        if getattr(tokenizer, name) != getattr(config, name):
            raise CheckpointError(
                f"{folder}: the tokenizer's {name} is {getattr(tokenizer, name)} but config.json's is "
                f"{getattr(config, name)}"
            )
    return tokenizer


def load_tokenizer(folder: Path):
    """The folder's tokenizer, which must be there and load; CheckpointError naming what is wrong."""
    check_tokenizer_files(folder)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
    except (OSError, ValueError) as error:
        if not (folder / "tokenizer.json").is_file():  # transformers then suggests installing sentencepiece
            raise CheckpointError(
                f"{folder}: the tokenizer does not load: tokenizer.json is missing beside tokenizer_config.json; "
                "expected both, as save_pretrained writes them (lost in a copy?)"
            ) from error
        raise CheckpointError(f"{folder}: the tokenizer does not load: {error}") from error
    return tokenizer


def check_same_tokenizer(folders: list[Path]) -> None:
    """Checkpoints whose weights are combined (averaged) must share one tokenizer: the same tokens at the same ids and
    the same merges, or one embedding row would stand for different tokens. Compared on tokenizer.json, which
    save_pretrained of a fast tokenizer writes; folders without one must all lack it."""
    reference = folders[-1]
    expected = _tokenizer_content(reference)
    for folder in folders[:-1]:
        found = _tokenizer_content(folder)
        if found != expected:
            raise CheckpointError(
                f"{folder} and {reference} have different tokenizers: {_first_difference(found, expected)}; "
                "expected checkpoints of one model (one vocabulary), whose rows stand for the same tokens"
            )


def _tokenizer_content(folder: Path) -> dict | None:
    path = folder / "tokenizer.json"
    if not path.is_file():
        return None
    values = read_json(path)
    model = values.get("model") or {}
    vocabulary = model.get("vocab") or {}
    if isinstance(vocabulary, list):  # Unigram: [piece, score] pairs in id order
        vocabulary = {piece: index for index, (piece, _) in enumerate(vocabulary)}
    tokens = {index: token for token, index in vocabulary.items()}
    tokens.update({token["id"]: token["content"] for token in values.get("added_tokens") or []})
    merges = [" ".join(merge) if isinstance(merge, list) else merge for merge in model.get("merges") or []]
    return {"type": model.get("type"), "tokens": tokens, "merges": merges}


def _first_difference(found: dict | None, expected: dict | None) -> str:
    if found is None or expected is None:
        return "one has a tokenizer.json and the other none"
    if found["type"] != expected["type"]:
        return f"a {found['type']} model against a {expected['type']} one"
    if len(found["tokens"]) != len(expected["tokens"]):
        return f"{len(found['tokens'])} tokens against {len(expected['tokens'])}"
    for index in sorted(expected["tokens"]):
        if found["tokens"].get(index) != expected["tokens"][index]:
            return (
                f"id {index} is {found['tokens'].get(index)!r} in one and {expected['tokens'][index]!r} in the other"
            )
    for number, (one, other) in enumerate(zip(found["merges"], expected["merges"], strict=False), start=1):
        if one != other:
            return f"merge {number} is {one!r} in one and {other!r} in the other"
    return f"{len(found['merges'])} merges against {len(expected['merges'])}"


# ---------------------------------------------------------------------------------------------------------------------
# A CTranslate2 export
# ---------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Export:
    """A folder written by vaswani-export-ctranslate2 that passed `validate_export`."""

    folder: Path
    settings: dict  # EXPORT_FILE
    vocabulary: list[str]  # the tokens of model.bin's rows, in id order
    generation_config: GenerationConfig
    tokenizer: object  # None where it was not asked for


def validate_export(folder, with_tokenizer: bool = True) -> Export:
    """The export in `folder`, or CheckpointError naming each file missing, or the file damaged and how: every file
    vaswani-export-ctranslate2 writes, whole (model.bin's headers against its size), EXPORT_FILE's settings, a
    vocabulary of one token per row of model.bin's embedding matrix holding CTranslate2's special tokens, generation
    settings whose ids are in it, and (`with_tokenizer`; the model itself runs on ids) a tokenizer of the same tokens
    at the same ids. Nothing of CTranslate2 runs, and no weight is read."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder} is not a folder; expected one written by vaswani-export-ctranslate2")
    check_readable(folder)
    missing = [name for name in EXPORT_FILES if not (folder / name).is_file()]
    if with_tokenizer and not any((folder / name).is_file() for name in TOKENIZER_FILES):
        missing.append(TOKENIZER_FILES[0])
    if missing:
        raise CheckpointError(
            f"export {folder} lacks {', '.join(missing)}; expected every file vaswani-export-ctranslate2 writes "
            f"({', '.join((*EXPORT_FILES, *TOKENIZER_FILES))}): export the checkpoint again"
        )
    settings = read_json(folder / EXPORT_FILE)
    check_recorded_counts(folder / EXPORT_FILE, settings, ("max_position_embeddings", "position_rows"))
    vocabulary = read_json(folder / EXPORT_VOCABULARY, list)
    wrong = next((index for index, token in enumerate(vocabulary) if not isinstance(token, str)), None)
    if wrong is not None or not vocabulary:
        found = f"entry {wrong} is {vocabulary[wrong]!r}" if wrong is not None else "it is empty"
        raise CheckpointError(f"{folder / EXPORT_VOCABULARY}: {found}; expected the model's tokens, one string a row")
    rows = ctranslate2_rows(folder / "model.bin")
    if rows is not None and len(vocabulary) != rows:
        raise CheckpointError(
            f"{folder / EXPORT_VOCABULARY} has {len(vocabulary)} tokens but {folder / 'model.bin'}'s embedding "
            f"matrix has {rows} rows; expected one token a row (the vocabulary of another export?)"
        )
    known = set(vocabulary)
    for name, token in read_json(folder / "config.json").items():
        if name.endswith("_token") and isinstance(token, str) and token not in known:
            raise CheckpointError(
                f"{folder / 'config.json'}: {name} {token!r} is not in {EXPORT_VOCABULARY}; expected one of its tokens"
            )
    generation = load_generation_config(folder)
    for name in ("pad_token_id", "eos_token_id"):
        value = getattr(generation, name)
        if not isinstance(value, int) or not 0 <= value < len(vocabulary):
            raise CheckpointError(
                f"{folder / 'generation_config.json'}: {name} is {value!r}; expected an id of the vocabulary "
                f"({len(vocabulary)} tokens)"
            )
    if not with_tokenizer:
        return Export(folder, settings, vocabulary, generation, None)
    tokenizer = load_tokenizer(folder)
    tokens = tokenizer.convert_ids_to_tokens(list(range(min(len(tokenizer), len(vocabulary)))))
    if len(tokenizer) != len(vocabulary) or tokens != vocabulary[: len(tokens)]:
        differ = next((i for i, (a, b) in enumerate(zip(tokens, vocabulary, strict=False)) if a != b), None)
        found = (
            f"id {differ} is {tokens[differ]!r} in the tokenizer, {vocabulary[differ]!r} in the vocabulary"
            if differ is not None
            else f"the tokenizer has {len(tokenizer)} tokens, the vocabulary {len(vocabulary)}"
        )
        raise CheckpointError(
            f"{folder}: the tokenizer is not the one of {EXPORT_VOCABULARY}: {found}; expected the tokenizer exported "
            "with the model"
        )
    return Export(folder, settings, vocabulary, generation, tokenizer)


def load_generation_config(folder: Path) -> GenerationConfig:
    """generation_config.json of `folder`, or CheckpointError naming it."""
    read_json(folder / "generation_config.json")
    try:
        return GenerationConfig.from_pretrained(folder)
    except (OSError, ValueError, TypeError) as error:
        raise CheckpointError(f"{folder / 'generation_config.json'} does not load: {error}") from error


def quantized_name(graph: str) -> str:
    """The file of a graph's int8 variant, as transformers.js names its q8 files: encoder_model_quantized.onnx."""
    return graph.replace(".onnx", "_quantized.onnx")


def is_onnx_folder(folder: Path) -> bool:
    """An ONNX export, whole or not: a folder holding ONNX_FILE or ONNX_FOLDER, so that `validate_onnx` names what
    it lacks."""
    return (folder / ONNX_FILE).is_file() or (folder / ONNX_FOLDER).is_dir()


@dataclass(frozen=True)
class OnnxExport:
    """A folder written by vaswani-export-onnx that passed `validate_onnx`: its graphs' paths (the int8 variant's
    where asked for), its settings (ONNX_FILE), generation settings and tokenizer."""

    encoder: Path
    decoder: Path
    settings: dict
    generation_config: GenerationConfig
    tokenizer: object


def validate_onnx(folder, quantized: bool = False) -> OnnxExport:
    """The ONNX export in `folder`, or CheckpointError naming the file missing or damaged and how: ONNX_FILE (its
    own digest, `check_settings_digest`) and its settings, each graph (float32, or its int8 variant where
    `quantized`) and every other file it records of the size and SHA-256 the export recorded, generation settings
    whose ids are in the vocabulary, and a tokenizer of the model's vocabulary size. Nothing of onnxruntime runs."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder} is not a folder; expected one written by vaswani-export-onnx")
    check_readable(folder)
    graphs = [ONNX_ENCODER, ONNX_DECODER]
    graphs = [f"{ONNX_FOLDER}/{quantized_name(name) if quantized else name}" for name in graphs]
    expected = (*graphs, "generation_config.json", ONNX_FILE)
    missing = [name for name in expected if not (folder / name).is_file()]
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        missing.append(TOKENIZER_FILES[0])
    if missing:
        variant = " (exported with --quantize int8?)" if quantized else ""
        raise CheckpointError(
            f"ONNX export {folder} lacks {', '.join(missing)}; expected every file vaswani-export-onnx writes"
            f"{variant}: export the checkpoint again"
        )
    settings = read_json(folder / ONNX_FILE)
    check_settings_digest(folder, settings)
    check_recorded_counts(folder / ONNX_FILE, settings, ONNX_SETTINGS)
    recorded = settings.get("files") if isinstance(settings.get("files"), dict) else {}
    # An export since the settings' own digest records every file beside the graphs too (its Marian config,
    # generation settings and tokenizer): a byte changed in any of them is named, not read as the model's.
    others = [name for name in sorted(recorded) if not name.startswith(f"{ONNX_FOLDER}/")]
    missing = [name for name in others if not (folder / name).is_file()]
    if missing:
        raise CheckpointError(
            f"ONNX export {folder} lacks {', '.join(missing)}, which {ONNX_FILE} records; expected every file "
            "vaswani-export-onnx writes: export the checkpoint again"
        )
    for name in (*graphs, *others):
        check_recorded_file(folder, name, recorded.get(name))
    generation = load_generation_config(folder)
    vocab_size = settings["vocab_size"]
    for name in ("pad_token_id", "eos_token_id", "decoder_start_token_id"):
        value = getattr(generation, name)
        if not isinstance(value, int) or not 0 <= value < vocab_size:
            raise CheckpointError(
                f"{folder / 'generation_config.json'}: {name} is {value!r}; expected an id of the vocabulary "
                f"({vocab_size} tokens)"
            )
    tokenizer = load_tokenizer(folder)
    if len(tokenizer) != vocab_size:
        raise CheckpointError(
            f"{folder}: the tokenizer has {len(tokenizer)} tokens but {folder / ONNX_FILE} says the model's "
            f"vocab_size is {vocab_size}; expected the tokenizer exported with the model"
        )
    return OnnxExport(folder / graphs[0], folder / graphs[1], settings, generation, tokenizer)


def settings_digest(settings: dict) -> str:
    """The SHA-256 ONNX_FILE records of its own content (every key but SETTINGS_DIGEST, as canonical JSON), so that
    a changed value in it is told from the one the export wrote: the file cannot hold its own bytes' digest."""
    content = {name: value for name, value in settings.items() if name != SETTINGS_DIGEST}
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def check_settings_digest(folder: Path, settings: dict) -> None:
    """ONNX_FILE's content against the digest it records (`settings_digest`), else CheckpointError naming it. An
    export written before the digest has none, and records only its graphs: one that records other files without
    a digest is damaged (its digest's key changed)."""
    path = folder / ONNX_FILE
    if SETTINGS_DIGEST not in settings:
        recorded = settings.get("files") if isinstance(settings.get("files"), dict) else {}
        if any(not name.startswith(f"{ONNX_FOLDER}/") for name in recorded):
            raise CheckpointError(
                f"{path} records files beside the graphs but no {SETTINGS_DIGEST} of its own; expected both, as "
                "vaswani-export-onnx writes them (the file was edited or damaged): export the checkpoint again"
            )
        return
    if settings[SETTINGS_DIGEST] != settings_digest(settings):
        raise CheckpointError(
            f"{path}: its content is not the one its {SETTINGS_DIGEST} records (edited or damaged after the "
            "export?); expected the settings vaswani-export-onnx wrote: export the checkpoint again"
        )


def check_recorded_file(folder: Path, name: str, record) -> None:
    """`folder / name` of the size and SHA-256 that ONNX_FILE's `record` holds for it, else CheckpointError naming it:
    a cut file by its size, another export's (or a changed one) by its digest."""
    path = folder / name
    if not isinstance(record, dict) or not isinstance(record.get("bytes"), int) or "sha256" not in record:
        raise CheckpointError(
            f"{folder / ONNX_FILE} records no size and SHA-256 for {name}; expected both, as vaswani-export-onnx "
            "writes them"
        )
    size = path.stat().st_size
    if size != record["bytes"]:
        raise CheckpointError(
            f"{path} holds {size:,} bytes; the export wrote {record['bytes']:,} (cut short or replaced?): export "
            "the checkpoint again"
        )
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != record["sha256"]:
        raise CheckpointError(
            f"{path}: its SHA-256 is not the one the export recorded in {ONNX_FILE}; expected the file exported "
            "with this folder (a file of another export, or changed since?): export the checkpoint again"
        )


def ctranslate2_rows(path: Path) -> int | None:
    """The rows of the target embedding matrix of a CTranslate2 model.bin (its vocabulary size), read from the
    file's headers, whose data sizes must add up to the file's size; CheckpointError naming the file where they do
    not, or do not parse. None for a binary version other than CTRANSLATE2_BINARY_VERSION, whose layout this does not
    know: CTranslate2 checks such a file itself when it loads it."""
    size = path.stat().st_size
    shapes, aliases = {}, {}
    with open(path, "rb") as file:

        def take(count: int) -> bytes:
            data = file.read(count)
            if len(data) != count:
                raise _cut_short(path, file.tell() - len(data) + count, size)
            return data

        def number(kind: str) -> int:
            return struct.unpack("=" + kind, take(struct.calcsize("=" + kind)))[0]

        def string() -> str:
            return take(number("H"))[:-1].decode("utf-8")

        try:
            if number("I") != CTRANSLATE2_BINARY_VERSION:
                return None
            string(), number("I")  # the spec's name and revision
            for _ in range(number("I")):
                name, dims = string(), [number("I") for _ in range(number("B"))]
                dtype, length = number("B"), number("I")
                if dtype < len(CTRANSLATE2_DTYPE_SIZES) and math.prod(dims) * CTRANSLATE2_DTYPE_SIZES[dtype] != length:
                    raise CheckpointError(
                        f"{path}: variable {name!r} of shape {dims} has {length} bytes of data; expected "
                        f"{math.prod(dims) * CTRANSLATE2_DTYPE_SIZES[dtype]} (a damaged file?)"
                    )
                if file.seek(length, os.SEEK_CUR) > size:
                    raise _cut_short(path, file.tell(), size)
                shapes[name] = dims
            for _ in range(number("I")):
                alias = string()
                aliases[alias] = string()
        except UnicodeDecodeError as error:
            raise CheckpointError(
                f"{path} is not a CTranslate2 model.bin (its headers do not parse: {error}); expected the file "
                "vaswani-export-ctranslate2 writes"
            ) from error
        if file.tell() != size:
            raise CheckpointError(
                f"{path} has {size - file.tell()} bytes past the end its headers describe; expected the model.bin "
                "vaswani-export-ctranslate2 writes (two files written over each other?)"
            )
    for name in ("decoder/projection/weight", "decoder/embeddings/weight"):
        dims = shapes.get(aliases.get(name, name))
        if dims:
            return dims[0]
    raise CheckpointError(f"{path} has no decoder embedding matrix; expected a translation model's model.bin")


def _cut_short(path: Path, needed: int, size: int) -> CheckpointError:
    return CheckpointError(
        f"{path} is cut short: its headers describe at least {needed} bytes but it has {size}; expected the whole "
        "model.bin vaswani-export-ctranslate2 writes (truncated by a full disk or an interrupted copy?)"
    )


# ---------------------------------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------------------------------


def load_model_and_tokenizer(name: str, revision: str | None = None, trust_remote_code: bool = False):
    """The PyTorch model and tokenizer of a Vaswani checkpoint folder or Hub id, a folder checked first by
    `validate_checkpoint` (config, tensors, tokenizer; a `revision` applies to Hub ids only). A CTranslate2 export
    is refused here: the translation room runs those (`translation.engines.load_translator`)."""
    folder = local_folder(name)
    if folder is not None and revision is not None:
        raise ValueError(f"--revision {revision} applies to Hub ids; {name} is a local folder")
    if folder is not None and is_ctranslate2_folder(folder):
        raise ValueError(
            f"model folder {folder} holds a CTranslate2 export (model.bin); run it with --engine ctranslate2, or "
            "give the checkpoint folder it was exported from"
        )
    tokenizer = None
    if folder is not None:
        tokenizer = validate_checkpoint(folder).tokenizer
        name = str(folder)  # "~" expanded
    else:
        check_hub_config(name, revision)
    options = {"revision": revision, "trust_remote_code": trust_remote_code}
    model = AutoModelForSeq2SeqLM.from_pretrained(name, **options)
    if model.config.model_type != VaswaniConfig.model_type:  # a type its config.json did not say
        raise CheckpointError(
            f"{name} holds a {model.config.model_type!r} model; expected a Vaswani checkpoint (model_type "
            f"{VaswaniConfig.model_type!r})"
        )
    return model, tokenizer or AutoTokenizer.from_pretrained(name, **options)


def check_hub_config(name: str, revision: str | None = None) -> None:
    """A Hub model's config.json must name this model's type, checked before transformers builds anything from it, or
    asks whether to run the repository's code (it does for a type it does not know, a typo included). Where the file
    cannot be fetched, transformers' loader, which comes next, tells why in its own words."""
    try:
        path = hf_hub_download(name, "config.json", revision=revision)
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError):
        return
    model_type = read_json(Path(path)).get("model_type")
    if model_type != VaswaniConfig.model_type:
        raise CheckpointError(f"{name} (Hub): its config.json is not a Vaswani config: {foreign_type(model_type)}")
