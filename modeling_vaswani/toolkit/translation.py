"""Translating many sentences with a checkpoint, and scoring them with BLEU."""

from collections.abc import Sequence

import torch
from tqdm.auto import tqdm


@torch.no_grad()
def translate(
    model,
    tokenizer,
    sentences: Sequence[str],
    batch_size: int = 64,
    paper_decoding: bool = True,
    progress: bool = True,
    **generate_kwargs,
) -> list[str]:
    """Translations of `sentences`, in order, one per sentence.

    Sentences are batched by length (longest first, so a memory problem shows at once) to waste little on padding,
    and decoded with Section 6.1's beam search unless `paper_decoding=False`. Nothing is truncated: an empty line
    is refused, since it would come back as an empty translation nobody asked for.
    """
    for number, sentence in enumerate(sentences, start=1):
        if not sentence.strip():
            raise ValueError(f"sentence {number} is empty; expected text to translate")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    model.eval()
    lengths = [len(ids) for ids in tokenizer(list(sentences), add_special_tokens=True)["input_ids"]]
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
