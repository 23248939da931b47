"""Lines of text into sentences and back: what every translating entry point does to its input before translation (a
line may hold a paragraph, and the models are trained on one sentence a line), and to its output after it.

The splitter is sentencex, chosen by measurement (docs/documents.md): given a language code and a text, it returns
pieces that tile the text, each keeping the whitespace after it. What is written here by hand is what sentencex does
not do:
- the layout of many lines (`Layout`): the sentences of all lines in one flat list, so that they are batched together,
  and for each line which sentences are its own and the exact whitespace before, between and after them;
- joining the translations back, each line with its own spacing, one output line per input line, an empty or blank
  line giving an empty one (`Layout.join`);
- naming a sentence by its line in errors (`Layout.name`), and each line's target prefix moved to its first sentence
  (`Layout.sentence_prefixes`);
- the language: a code checked (`check_language`, every entry point's one check) and normalized to the primary subtag
  sentencex knows, a warning (once a code) where sentencex has no rules of its own for it or none is known, and the
  source language a training run records in its tokenizer's configuration.
"""

import bisect
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

import sentencex

logger = logging.getLogger(__name__)

# ISO 639's code for "undetermined": a code sentencex has no rules for, so that it falls back to its generic ones.
GENERIC = "und"
# Where vaswani-train records its languages: keys of the tokenizer's configuration (tokenizer_config.json), which
# every copy of the tokenizer carries (checkpoints, the averaged model, exports, pushes). MarianMT's tokenizers use
# the same keys.
SOURCE_LANGUAGE_KEY, TARGET_LANGUAGE_KEY = "source_lang", "target_lang"
PREVIEW_WORDS, PREVIEW_CHARS = 4, 40  # how much of a sentence an error shows
# A language tag as BCP 47 writes one: an ISO 639 code of 2 or 3 letters, then subtags ("de-AT", "pt_BR", "zh-Hant").
LANGUAGE_TAG = re.compile(r"[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{1,8})*")
# The languages sentencex 1.0 has rules of its own for (its src/languages/*.rs); any other code falls back, through
# its table of related languages, to one of these where it names one ("lb": German), else to the generic rules.
OWN_RULES = frozenset(
    "am ar bg bn ca da de el en es fi fr gu hi hy it ja kk kn ml mr my nl pa pl pt ru sk ta te uk".split()
)

_told_generic = False
_told_borrowed: set[str] = set()


def check_language(value, name: str = "language") -> str | None:
    """`value` (None: not given) if it is a language tag: an ISO 639 code, maybe with subtags ("de", "de-AT",
    "pt_BR"), surrounding spaces dropped; else ValueError (not a str, empty, a path, a name such as "English"),
    naming `name` (the argument, flag, field or file the value came from) and the value."""
    if value is None:
        return None
    if not isinstance(value, str) or not LANGUAGE_TAG.fullmatch(value.strip()):
        raise ValueError(
            f"{name}={value!r} is not a language code; expected an ISO 639 code of 2 or 3 letters such as 'en' or "
            "'de', maybe with a region ('de-AT')"
        )
    return value.strip()


def splitter_language(language: str | None) -> str:
    """The code sentencex is given for `language` (checked by `check_language`): its primary subtag in lower case
    ("de-DE", "de_DE", "DE": "de"; sentencex knows no regional variants), or GENERIC for None (sentencex's generic
    rules, logged once a process). A code outside OWN_RULES is logged once a code: its rules are borrowed."""
    global _told_generic
    language = check_language(language)
    if language is None:
        if not _told_generic:
            logger.warning(
                "the model's source language is unknown (no --source_lang, no results.json test_set.source_lang, no "
                "source_lang in its tokenizer's configuration): sentences are split by sentencex's generic rules"
            )
            _told_generic = True
        return GENERIC
    code = language.replace("_", "-").split("-")[0].lower()
    if code not in OWN_RULES and code != GENERIC and code not in _told_borrowed:
        logger.warning(
            "sentencex has no sentence rules of its own for %r: it splits by a related language's where its table "
            "names one, else by its generic rules (today the English ones); it has rules for %s",
            code,
            ", ".join(sorted(OWN_RULES)),
        )
        _told_borrowed.add(code)
    return code


def split_text(text: str, language: str | None) -> tuple[list[str], list[str]]:
    """The sentences of `text`, each without the whitespace around it, and that whitespace: `spacing` has one more
    item than `sentences` (before the first, between each two, after the last), and
    spacing[0] + sentences[0] + spacing[1] + ... + sentences[-1] + spacing[-1] == text. A text of whitespace only (or
    none) has no sentence, and its whitespace is `spacing[0]`."""
    pieces = sentencex.get_sentence_boundaries(splitter_language(language), text)
    if "".join(piece["text"] for piece in pieces) != text:  # what the rebuilding relies on, checked every time
        raise RuntimeError(
            f"sentencex {getattr(sentencex, '__version__', '')} returned pieces that do not rebuild the text "
            f"{text[:60]!r}; expected pieces that tile it (docs/documents.md)"
        )
    sentences, spacing, gap = [], [], ""
    for piece in pieces:
        whole = piece["text"]
        sentence = whole.strip()
        if not sentence:  # a blank line ("\n\n") or other whitespace between sentences: nothing to translate
            gap += whole
            continue
        start = len(whole) - len(whole.lstrip())
        spacing.append(gap + whole[:start])
        sentences.append(sentence)
        gap = whole[start + len(sentence) :]
    spacing.append(gap)
    return sentences, spacing


def preview(sentence: str) -> str:
    """The first words of `sentence`, as errors show it."""
    words = sentence.split()
    shown = " ".join(words[:PREVIEW_WORDS])
    if len(shown) > PREVIEW_CHARS:
        shown = shown[: PREVIEW_CHARS - 4].rstrip()
    return shown if shown == " ".join(words) else f"{shown} ..."


@dataclass(frozen=True)
class Layout:
    """Lines split into sentences: `sentences`, every line's in order, one flat list; line i holds
    `sentences[starts[i] : starts[i] + len(spacing[i]) - 1]`, with `spacing[i]` the whitespace before, between and
    after them (`split_text`). `unit` is what errors call a line ("line", "text"), numbered from `first`; or
    `labels`, one a line, where the lines are parts of larger inputs (a document's runs of text: "text 2")."""

    sentences: list[str]
    starts: list[int]
    spacing: list[list[str]]
    unit: str = "line"
    first: int = 1
    labels: Sequence[str] | None = None

    def count(self, line: int) -> int:
        """How many sentences line `line` (an index, from 0) holds."""
        return len(self.spacing[line]) - 1

    def line_index(self, sentence: int) -> int:
        """The index (from 0) of the line holding sentence `sentence` (a number, from 1)."""
        # The last line starting at or before it: an empty line starts where the next line does, so it is never that.
        return bisect.bisect_right(self.starts, sentence - 1) - 1

    def line_number(self, sentence: int) -> int:
        """The number of the line holding sentence `sentence` (from 1), as errors count lines (from `first`)."""
        return self.first + self.line_index(sentence)

    def line_numbers(self, sentences: Sequence[int]) -> list[int]:
        """The numbers of the lines holding `sentences` (numbers from 1), each once, in order."""
        return sorted({self.line_number(number) for number in sentences})

    def name(self, sentence: int) -> str:
        """How errors name sentence `sentence` (from 1): "line 3, sentence 2 ('A very long ...')"."""
        line = self.line_index(sentence)
        shown = preview(self.sentences[sentence - 1])
        if self.labels is not None:  # the sentence's place in its part of a larger input would mislead: not given
            return f"{self.labels[line]}, sentence {shown!r}"
        return f"{self.unit} {self.first + line}, sentence {sentence - self.starts[line]} ({shown!r})"

    def sentence_prefixes(self, prefixes: Sequence[str] | None) -> list[str] | None:
        """Target prefixes given one a line, as one a sentence: a line's prefix starts its first sentence's
        translation, and the others have none (""). Refuses (ValueError) a count other than one a line, a prefix
        that is not a str, and a prefix for a line with nothing to translate (a shifted prefix file?)."""
        if prefixes is None:
            return None
        lines = len(self.starts)
        if isinstance(prefixes, str) or len(prefixes) != lines:
            shown = "a str" if isinstance(prefixes, str) else f"{len(prefixes)} prefixes"
            raise ValueError(
                f'target_prefixes is {shown}; expected a list of {lines}, one a {self.unit} ("" for none; a '
                f"{self.unit}'s prefix starts the translation of its first sentence)"
            )
        flat = [""] * len(self.sentences)
        for line, prefix in enumerate(prefixes):
            number = self.first + line
            if not isinstance(prefix, str):
                raise ValueError(f'target prefix {number} is a {type(prefix).__name__}; expected a str ("" for none)')
            if prefix.strip() and self.count(line) == 0:
                raise ValueError(
                    f"target prefix {number} is {preview(prefix)!r} but {self.unit} {number} is empty; expected no "
                    f"prefix for an empty {self.unit}, which stays empty"
                )
            if self.count(line):
                flat[self.starts[line]] = prefix
        return flat

    def join(self, translations: Sequence):
        """One output per line: its sentences' `translations` (strings, one a sentence) joined with the line's own
        whitespace, "" for a line with no sentence."""
        if len(translations) != len(self.sentences):
            raise ValueError(f"{len(translations)} translations for {len(self.sentences)} sentences")
        joined = []
        for start, spacing in zip(self.starts, self.spacing, strict=True):
            if len(spacing) == 1:
                joined.append("")
                continue
            parts = [spacing[0]]
            for offset, after in enumerate(spacing[1:]):
                parts += [translations[start + offset], after]
            joined.append("".join(parts))
        return joined


def split_lines(
    lines: Sequence[str], language: str | None, unit: str = "line", first: int = 1, labels: Sequence[str] | None = None
) -> Layout:
    """`lines` (each may hold a paragraph) split into sentences by sentencex's rules for `language` (None: its
    generic ones), as a `Layout`."""
    sentences, starts, spacing = [], [], []
    for line in lines:
        found, around = split_text(line, language)
        starts.append(len(sentences))
        sentences += found
        spacing.append(around)
    return Layout(sentences, starts, spacing, unit, first, labels)


def tokenizer_language(tokenizer) -> str | None:
    """The source language recorded in `tokenizer`'s configuration (vaswani-train records it; MarianMT's tokenizers
    have it too), or None."""
    language = (getattr(tokenizer, "init_kwargs", None) or {}).get(SOURCE_LANGUAGE_KEY)
    return language if isinstance(language, str) and language.strip() else None


def record_languages(tokenizer, source_language: str, target_language: str) -> None:
    """Records the languages a model is trained on in its tokenizer's configuration, which `save_pretrained` writes
    into tokenizer_config.json and every copy of the tokenizer keeps (`tokenizer_language` reads it)."""
    tokenizer.init_kwargs[SOURCE_LANGUAGE_KEY] = source_language
    tokenizer.init_kwargs[TARGET_LANGUAGE_KEY] = target_language
