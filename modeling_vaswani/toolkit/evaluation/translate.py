"""Translating many sentences with a loaded model (PyTorch, or a CTranslate2 export run by serving/), in batches by
length, with the checks every translating caller makes before any work starts."""

import logging
from collections.abc import Sequence
from typing import TextIO

import torch
from tqdm.auto import tqdm

logger = logging.getLogger(__name__)


class InputError(ValueError):
    """Sentences that cannot be translated as they are: the message names the first such sentence and why."""


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


DEFAULT_BATCH_SIZE = 64


def length_batches(
    lengths: Sequence[int], batch_size: int | None = None, max_tokens: int | None = None
) -> list[list[int]]:
    """The sentences' indices in batches, longest sentence first: each batch at most `batch_size` sentences and at
    most `max_tokens` padded source tokens (its sentences times its longest), where given. A sentence longer than
    `max_tokens` fits no batch and is refused (InputError), not cut or dropped."""
    if max_tokens is not None and lengths and max(lengths) > max_tokens:
        index = max(range(len(lengths)), key=lengths.__getitem__)
        raise InputError(
            f"sentence {index + 1} is {lengths[index]} tokens long, more than --max_tokens {max_tokens} (the padded "
            f"source tokens a batch may hold); expected --max_tokens of at least {lengths[index]}"
        )
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches, start = [], 0
    while start < len(order):
        size = len(order) - start
        if batch_size is not None:
            size = min(size, batch_size)
        if max_tokens is not None:  # the batch's first sentence is its longest
            size = min(size, max_tokens // lengths[order[start]])
        batches.append(order[start : start + size])
        start += size
    return batches


@torch.no_grad()
def translate(
    model,
    tokenizer,
    sentences: Sequence[str],
    batch_size: int | None = None,
    paper_decoding: bool = True,
    progress: bool = True,
    max_input_tokens: int | None = None,
    max_tokens: int | None = None,
    **generate_kwargs,
) -> list[str]:
    """Translations of `sentences`, in order, one per sentence, by `model`: a checkpoint's, or an exported folder's
    `CTranslate2Model` (which decodes the same batches, as close to Section 6.1 as CTranslate2 can).

    Sentences are batched by length (`length_batches`: longest first, so a memory problem shows at once) to waste
    little on padding: `batch_size` sentences a batch (64 when neither limit is given), or as many as `max_tokens`
    padded source tokens hold, or both limits. They are decoded with Section 6.1's beam search unless
    `paper_decoding=False`. Nothing is truncated: an empty sentence, which would come back as an empty translation
    nobody asked for, one longer than `max_input_tokens` (no limit when None) and one longer than `max_tokens` are
    refused before any is translated (`check_sentences`, `length_batches`).
    """
    if batch_size is None and max_tokens is None:
        batch_size = DEFAULT_BATCH_SIZE
    limits = {"batch_size": batch_size, "max_tokens": max_tokens, "max_input_tokens": max_input_tokens}
    for name, value in limits.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name}={value!r}; expected an int of at least 1 (or None)")
    lengths = check_sentences(tokenizer, sentences, max_input_tokens)
    model.eval()
    translations = [None] * len(sentences)
    with tqdm(total=len(sentences), desc="translating", unit="sentence", disable=not progress) as bar:
        for indices in length_batches(lengths, batch_size, max_tokens):
            batch = tokenizer([sentences[i] for i in indices], return_tensors="pt", padding=True).to(model.device)
            generated = model.generate(**batch, paper_decoding=paper_decoding, **generate_kwargs)
            for index, text in zip(indices, tokenizer.batch_decode(generated, skip_special_tokens=True), strict=True):
                translations[index] = text
            bar.update(len(indices))
    return translations
