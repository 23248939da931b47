"""Paragraphs made of known sentences, for the tests of sentence splitting: the shipped Multi30k test2016 captions
joined with known whitespace, so that each paragraph's sentences and spacing, and the expected output of translating
it, are known without the code under test."""

import random

from modeling_vaswani.toolkit.data.corpora import multi30k_files, read_sentences

SEPARATORS = [" ", "  ", "\t", " \t ", "   "]  # between sentences
AROUND = ["", " ", "\t", "  "]  # before the first sentence, after the last


def captions(language: str = "en", count: int = 200) -> list[str]:
    """test2016 captions whose boundaries a splitter cannot miss: ending in ".", a capital first, no other "."."""
    other = "de" if language != "de" else "en"
    found = []
    for text in read_sentences(multi30k_files("test", languages=(language, other))[language]):
        text = text.strip()
        if text.endswith(".") and text[0].isupper() and text.count(".") == 1:
            found.append(text)
    return found[:count]


def paragraphs(count: int, most: int = 3, seed: int = 0, language: str = "en") -> list[tuple[list[str], list[str]]]:
    """`count` paragraphs as (sentences, spacing): 1 to `most` consecutive captions each, with varied whitespace
    before, between and after them (`spacing` has one more item than `sentences`)."""
    rng, pool, made, start = random.Random(seed), captions(language), [], 0
    for _ in range(count):
        size = rng.randint(1, most)
        spacing = [rng.choice(AROUND)] + [rng.choice(SEPARATORS) for _ in range(size - 1)] + [rng.choice(AROUND)]
        made.append((pool[start : start + size], spacing))
        start += size
    return made


def joined(parts: list[str], spacing: list[str]) -> str:
    """spacing[0] + parts[0] + spacing[1] + ... + parts[-1] + spacing[-1]: a paragraph, or its translation."""
    return spacing[0] + "".join(part + after for part, after in zip(parts, spacing[1:], strict=True))
