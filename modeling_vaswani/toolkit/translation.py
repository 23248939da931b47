"""Translating many sentences with a checkpoint and scoring them with BLEU, and what the translating commands
(vaswani-translate, vaswani-evaluate, vaswani-plot-attention) check before any work starts: their input read as
training data is (split on "\\n" only, UTF-8), the output path, the model folder and its weight files."""

import argparse
import logging
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TextIO

import torch
from huggingface_hub.utils import HFValidationError, validate_repo_id
from tqdm.auto import tqdm
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from .averaging import open_weights
from .data import iter_stream_lines, iter_text_lines
from .hub import TOKENIZER_FILES

logger = logging.getLogger(__name__)


class InputError(ValueError):
    """Sentences that cannot be translated as they are: the message names the first such sentence and why."""


def positive_int(text: str) -> int:
    """argparse type of the commands' counts (--batch_size, --num_beams, ...)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


# ---------------------------------------------------------------------------------------------------------------------
# Input and output
# ---------------------------------------------------------------------------------------------------------------------


def read_input(path: str | Path | None) -> list[str]:
    """The lines of the text file `path` (`.gz` allowed), or of standard input when None, split as training data is,
    one sentence a line. Refuses an empty input (and, through the line reader, bytes that are not UTF-8 text)."""
    name = "standard input" if path is None else str(path)
    numbered = iter_stream_lines(sys.stdin.buffer, name) if path is None else iter_text_lines(path)
    lines = [text for _, text in numbered]
    if not lines:
        raise ValueError(f"{name} is empty; expected one sentence per line")
    return lines


def check_output_path(path: str | Path, inputs: Iterable[str | Path | None] = ()) -> Path:
    """`path` if a file can be written there: its folder exists and it is no folder, nor one of `inputs`, which
    writing it would destroy. Checked before any sentence is translated, so that no work is lost at the end."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"--output {path} is a folder; expected the path of a file to write")
    if not path.parent.is_dir():
        raise ValueError(
            f"--output {path}: the folder {path.parent} does not exist; expected a file in an existing folder"
        )
    for source in inputs:
        if source is not None and path.resolve() == Path(source).resolve():
            raise ValueError(
                f"--output {path} is also an input; expected another file, since writing it would destroy that input"
            )
    return path


def write_lines(lines: Sequence[str], target: TextIO) -> None:
    """One line per translation. A translation holding "\\n" (a byte-level vocabulary can generate one) would take
    two lines and shift every line after it: its line breaks are written as spaces, and a warning names it."""
    broken = [number for number, line in enumerate(lines, start=1) if "\n" in line]
    if broken:
        logger.warning(
            "the translations of lines %s held line breaks, written as spaces to keep one line per input line",
            broken[:10],
        )
    target.write("".join(line.replace("\n", " ") + "\n" for line in lines))


# ---------------------------------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------------------------------


def local_folder(name: str) -> Path | None:
    """The checkpoint folder `name` names, or None for a Hub id; a ValueError for a path that leads nowhere.

    A name is taken for a Hub id only when it has the form of one and does not start with an existing folder: a typo
    in "runs/small" (where runs/ exists) would otherwise cost a minute of retries against the Hub.
    """
    path = Path(name).expanduser()
    if path.is_dir():
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


def check_folder(folder: Path) -> None:
    """A checkpoint folder holds a config, a tokenizer and safetensors weights that open (named if they do not)."""
    if not (folder / "config.json").is_file():
        raise ValueError(f"model folder {folder} has no config.json; expected a checkpoint written by save_pretrained")
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise ValueError(f"model folder {folder} has no tokenizer; expected {' or '.join(TOKENIZER_FILES)}")
    for path in sorted(folder.glob("*.safetensors")):
        with open_weights(path):
            pass


ENGINES = ("pytorch", "ctranslate2")


def is_ctranslate2_folder(folder: Path) -> bool:
    """A CTranslate2 model folder (model.bin beside its config.json), as vaswani-export-ctranslate2 writes one."""
    return (folder / "model.bin").is_file() and (folder / "config.json").is_file()


def load_model_and_tokenizer(
    name: str, revision: str | None = None, trust_remote_code: bool = False, engine: str | None = None
):
    """The model and tokenizer of a checkpoint folder or Hub id, after the checks of `local_folder` and
    `check_folder` on a folder (a `revision` applies to Hub ids only).

    `engine` "ctranslate2" runs a folder written by vaswani-export-ctranslate2 (`export_ctranslate2.CTranslate2Model`),
    "pytorch" a checkpoint; None picks by what the folder holds.
    """
    if engine not in (None, *ENGINES):
        raise ValueError(f"engine {engine!r} is unknown; expected one of {', '.join(ENGINES)}")
    folder = local_folder(name)
    if folder is not None and revision is not None:
        raise ValueError(f"--revision {revision} applies to Hub ids; {name} is a local folder")
    exported = folder is not None and is_ctranslate2_folder(folder)
    if engine == "ctranslate2" or (engine is None and exported):
        return load_exported(name, folder)
    if exported:
        raise ValueError(
            f"model folder {folder} holds a CTranslate2 export (model.bin); run it with --engine ctranslate2, or "
            "give the checkpoint folder it was exported from"
        )
    if folder is not None:
        check_folder(folder)
        name = str(folder)  # "~" expanded
    options = {"revision": revision, "trust_remote_code": trust_remote_code}
    return AutoModelForSeq2SeqLM.from_pretrained(name, **options), AutoTokenizer.from_pretrained(name, **options)


def load_exported(name: str, folder: Path | None):
    """An exported folder run by CTranslate2, with the tokenizer copied beside it."""
    if folder is None:
        raise ValueError(
            f"--engine ctranslate2 runs a local folder written by vaswani-export-ctranslate2; {name} is a Hub id"
        )
    if not is_ctranslate2_folder(folder):
        raise ValueError(
            f"model folder {folder} holds no CTranslate2 model (model.bin and config.json); expected a folder "
            "written by vaswani-export-ctranslate2"
        )
    if not any((folder / file).is_file() for file in TOKENIZER_FILES):
        raise ValueError(f"model folder {folder} has no tokenizer; expected {' or '.join(TOKENIZER_FILES)}")
    from .export_ctranslate2 import CTranslate2Model  # needs the optional ctranslate2 package

    return CTranslate2Model(folder), AutoTokenizer.from_pretrained(str(folder))


def input_token_limit(model, requested: int | None) -> int:
    """The commands' --max_input_tokens: `requested`, else the model's max_position_embeddings. An exported model
    knows positions only as far as its stored table (`position_rows`), so a larger request is refused."""
    limit = requested or model.config.max_position_embeddings
    rows = getattr(model, "position_rows", None)  # only a CTranslate2Model has a table that ends
    if rows is not None and limit > rows:
        raise ValueError(
            f"--max_input_tokens {limit} is more than the exported model's position table holds ({rows} "
            f"positions); expected at most {rows}"
        )
    return limit


# ---------------------------------------------------------------------------------------------------------------------
# Translation
# ---------------------------------------------------------------------------------------------------------------------


def check_sentences(tokenizer, sentences: Sequence[str], max_input_tokens: int | None = None) -> list[int]:
    """Each sentence's length in tokens, `</s>` included, after refusing (InputError) an empty sentence or one of more
    than `max_input_tokens` tokens: under the paper's decoding (up to input + 50 tokens) a sentence of 3,000 tokens
    would run for minutes."""
    if isinstance(sentences, str):
        raise InputError("sentences is a str; expected a list of sentences (a single sentence in a list)")
    for number, sentence in enumerate(sentences, start=1):
        if not isinstance(sentence, str):
            raise InputError(f"sentence {number} is a {type(sentence).__name__}; expected a str")
        if not sentence.strip():
            raise InputError(f"sentence {number} is empty; expected text to translate")
    lengths = [len(ids) for ids in tokenizer(list(sentences), add_special_tokens=True)["input_ids"]]
    if max_input_tokens is not None:
        over = [number for number, length in enumerate(lengths, start=1) if length > max_input_tokens]
        if over:
            raise InputError(
                f"sentence {over[0]} is {lengths[over[0] - 1]} tokens long, more than the limit of "
                f"{max_input_tokens} (max_input_tokens; {len(over)} sentence(s) over it: {over[:10]}); "
                "expected shorter sentences"
            )
    return lengths


@torch.no_grad()
def translate(
    model,
    tokenizer,
    sentences: Sequence[str],
    batch_size: int = 64,
    paper_decoding: bool = True,
    progress: bool = True,
    max_input_tokens: int | None = None,
    **generate_kwargs,
) -> list[str]:
    """Translations of `sentences`, in order, one per sentence, by `model`: a checkpoint's, or an exported folder's
    `CTranslate2Model` (which decodes the same batches, as close to Section 6.1 as CTranslate2 can).

    Sentences are batched by length (longest first, so a memory problem shows at once) to waste little on padding,
    and decoded with Section 6.1's beam search unless `paper_decoding=False`. Nothing is truncated: an empty
    sentence, which would come back as an empty translation nobody asked for, and one longer than
    `max_input_tokens` (no limit when None) are refused before any is translated (`check_sentences`).
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
    if max_input_tokens is not None and max_input_tokens < 1:
        raise ValueError(f"max_input_tokens must be >= 1 or None, got {max_input_tokens!r}")
    lengths = check_sentences(tokenizer, sentences, max_input_tokens)
    model.eval()
    order = sorted(range(len(sentences)), key=lambda i: -lengths[i])
    translations = [None] * len(sentences)
    with tqdm(total=len(sentences), desc="translating", unit="sentence", disable=not progress) as bar:
        for start in range(0, len(order), batch_size):
            indices = order[start : start + batch_size]
            batch = tokenizer([sentences[i] for i in indices], return_tensors="pt", padding=True).to(model.device)
            generated = model.generate(**batch, paper_decoding=paper_decoding, **generate_kwargs)
            for index, text in zip(indices, tokenizer.batch_decode(generated, skip_special_tokens=True), strict=True):
                translations[index] = text
            bar.update(len(indices))
    return translations


def bleu(predictions: Sequence[str], references: Sequence[str]) -> dict:
    """sacreBLEU with its signature (the number to report) and the paper-style tokenized BLEU, from the project's
    offline `evaluate` metric module."""
    from .metrics import load_bleu

    return load_bleu().compute(predictions=list(predictions), references=[[r] for r in references])
