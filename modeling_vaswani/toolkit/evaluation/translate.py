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
