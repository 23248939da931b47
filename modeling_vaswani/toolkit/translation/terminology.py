"""Terminology: words a translation must use or must not, given as text. A phrase is tokenized the way it stands
inside a sentence (this package's byte-level BPE gives every word its leading-space form, the first one of a sentence
too), and becomes a lexical constraint of the paper's search (constraints_vaswani.DynamicBeamAllocation: dynamic
beam allocation) or a phrase it avoids (guidance_vaswani.AvoidPhrases).

- Constraints and phrases to avoid come one list a line. A line's phrases to avoid hold for each of its sentences;
  its constraints, for its one sentence (a line that splits into several is refused: which sentence should hold
  them?).
- A glossary (`Glossary`: source term TAB target term, one a line) adds to each sentence the target term of every
  source term it holds, as whole words, compared after NFKC normalization and Unicode case folding (`fold`); the
  target term is used as written.
"""

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from ...constraints_vaswani import overflows
from ..data.sentences import Layout
from ..texts import iter_text_lines, tab_fields
from ..values import shown
from .errors import InputError, RequestError

WORD = re.compile(r"\w+")


def fold(text: str) -> str:
    """How glossary terms and sentences are compared: NFKC (one form for "é" typed as one character or two, "ﬁ" as
    "fi"), then Unicode case folding ("SNOW", "Snow" and "snow" alike, "Straße" as "strasse")."""
    return unicodedata.normalize("NFKC", text).casefold()


@dataclass
class Glossary:
    """Source terms and the target term each must be translated by. `terms` is keyed by the folded source term
    (`fold`). A sentence is searched only for the terms whose first word it holds (an index by that word): the same
    answers as searching it for every term, at a cost that grows with the sentence, not the glossary (measured in
    docs/decoding.md). Written by hand: of the registry's phrase matchers, pyahocorasick finds substrings, not whole
    words, and flashtext (no release since 2018) takes ASCII letters for its word characters."""

    terms: dict[str, str]

    def __post_init__(self):
        self.terms = {fold(source): target for source, target in self.terms.items()}
        self._patterns = {source: re.compile(rf"(?<!\w){re.escape(source)}(?!\w)") for source in self.terms}
        # A match of a term holds the term's first word as a whole word of the sentence: the term's edges are word
        # edges in the sentence, and inside the term that word is bounded by what is not a word character.
        self._by_first_word: dict[str, list[str]] = {}
        self._wordless = []  # terms with no word character ("++"): searched in every sentence
        for source in self.terms:
            first = WORD.search(source)
            if first:
                self._by_first_word.setdefault(first.group(), []).append(source)
            else:
                self._wordless.append(source)

    @classmethod
    def read(cls, path: str | Path) -> "Glossary":
        """A glossary file: text (texts.iter_text_lines), one `source term<TAB>target term` a line (blank lines
        skipped), each field as written or quoted as a spreadsheet saves it (`"bike"<TAB>"Fahrrad"`, a quote inside
        doubled: `tab_fields`). Refuses a line without exactly two fields, an empty term, and a source term given
        twice (as `fold` compares them) with different targets, naming the file and line."""
        terms: dict[str, str] = {}
        places: dict[str, int] = {}
        for number, line in iter_text_lines(path):
            if not line.strip():
                continue
            parts = tab_fields(line, f"{path}, line {number}")
            if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
                raise ValueError(f"{path}, line {number}: {line!r}; expected a source term, one tab and a target term")
            source, target = parts[0].strip(), parts[1].strip()
            key = fold(source)
            if key in terms and terms[key] != target:
                raise ValueError(
                    f"{path}, line {number}: {source!r} is also on line {places[key]} with another target term "
                    f"({terms[key]!r}, now {target!r}); expected one target term a source term"
                )
            terms[key], places[key] = target, number
        return cls(terms)

    @classmethod
    def of(cls, terms) -> "Glossary":
        """A glossary from a dict of source term to target term (non-blank strs), refused (ValueError) otherwise, and
        where two source terms are one as `fold` compares them but have different targets."""
        if not isinstance(terms, dict):
            raise ValueError(f"glossary is a {type(terms).__name__}; expected a dict of source term to target term")
        folded: dict[str, tuple[str, str]] = {}
        for source, target in terms.items():
            if not (isinstance(source, str) and source.strip() and isinstance(target, str) and target.strip()):
                raise ValueError(f"glossary holds {source!r}: {target!r}; expected non-blank source and target terms")
            key = fold(source.strip())
            if key in folded and folded[key][1] != target.strip():
                raise ValueError(
                    f"glossary holds {folded[key][0]!r}: {folded[key][1]!r} and {source!r}: {target!r}, one source "
                    "term in another case or form; expected one target term a source term"
                )
            folded[key] = (source, target.strip())
        return cls({key: target for key, (_, target) in folded.items()})

    def targets(self, sentence: str) -> list[str]:
        """The target terms of the source terms `sentence` holds as whole words, in the order they appear in it."""
        folded = fold(sentence)
        candidates = {source for word in set(WORD.findall(folded)) for source in self._by_first_word.get(word, ())}
        found = []
        for source in [*candidates, *self._wordless]:
            match = self._patterns[source].search(folded)
            if match:
                found.append((match.start(), self.terms[source]))
        return list(dict.fromkeys(target for _, target in sorted(found)))


class TermError(RequestError):
    """A refused term; its `field` is the argument (or request field) that holds it: "constraints", "avoid" or
    "glossary"."""


def check_phrase_texts(value, name: str, inputs: int) -> list[list[str]]:
    """`value`: one list of phrases (str) an input. Refuses another count, a line that is not a list of str, and a
    blank phrase, naming the input."""
    if isinstance(value, str) or not isinstance(value, Sequence) or len(value) != inputs:
        if isinstance(value, str):
            described = "a str"
        elif isinstance(value, Sequence):
            described = f"{len(value)} entries"
        else:
            described = shown(value)
        raise TermError(f"{name} is {described}; expected a list of {inputs} lists of phrases, one an input", name)
    for number, phrases in enumerate(value, start=1):
        if isinstance(phrases, str) or not isinstance(phrases, Sequence):
            raise TermError(
                f"{name} of input {number} is {shown(phrases)}; expected a list of phrases (str)", name, number
            )
        for phrase in phrases:
            if not isinstance(phrase, str) or not phrase.strip():
                raise TermError(
                    f"{name} of input {number} holds {shown(phrase)}; expected non-blank phrases", name, number
                )
    return [list(phrases) for phrases in value]


class SentencePhrases(NamedTuple):
    """Each sentence's phrases to hold (its input's constraints and the glossary target terms its source terms call
    for) and to avoid, one list a sentence (None: none asked), as text or, tokenized, as token ids (`phrase_ids`).
    Apart from a request's terminology (`constraints`, `avoid`, `glossary`: one list an input, and a glossary's
    source and target terms), which `sentence_terms` moves to sentences."""

    hold: list | None
    avoid: list | None


NO_PHRASES = SentencePhrases(None, None)


def input_term(field: str, number: int | None) -> str:
    """How errors name an input's list of phrases, or the glossary (`number` None): "avoid of input 2"."""
    return f"the {field}" if number is None else f"{field} of input {number}"


def sentence_terms(
    layout: Layout | None,
    sentences: Sequence[str],
    constraints: Sequence[Sequence[str]] | None,
    avoid: Sequence[Sequence[str]] | None,
    glossary: Glossary | None,
    tokenizer=None,
    name: Callable[[str, int | None], str] = input_term,
) -> SentencePhrases:
    """Each sentence's phrases to hold and to avoid (None where none are given): the inputs' lists moved to their
    sentences (`layout`: how the inputs were split; None, one sentence an input) and the glossary's target terms
    added. Refuses (InputError) what no model is needed to tell cannot be met: lists that are not one an input,
    constraints for an input of several sentences or of none, and with `tokenizer` a phrase to avoid inside a phrase
    to hold of the same input (`check_clashes`). `name(field, input number)` is how errors name a list of phrases
    (`input_term`; the command names its files and lines)."""
    inputs = len(sentences) if layout is None else len(layout.starts)
    if constraints is not None:
        constraints = check_phrase_texts(constraints, "constraints", inputs)
    if avoid is not None:
        avoid = check_phrase_texts(avoid, "avoid", inputs)
    owner = (
        list(range(len(sentences))) if layout is None else [layout.line_index(i + 1) for i in range(len(sentences))]
    )
    if constraints is not None and layout is not None:
        check_one_sentence(layout, constraints, name)
    found = None if glossary is None else [glossary.targets(sentence) for sentence in sentences]
    if tokenizer is not None:
        targets = None if found is None else [[] for _ in range(inputs)]
        for index, terms in enumerate(found or []):
            targets[owner[index]] += terms
        check_clashes(tokenizer, constraints, avoid, targets, name)
    required = None if constraints is None else [list(constraints[line]) for line in owner]
    if found is not None:
        required = required or [[] for _ in sentences]
        for index, terms in enumerate(found):
            required[index] += [term for term in terms if term not in required[index]]
    avoided = None if avoid is None else [list(avoid[line]) for line in owner]
    return SentencePhrases(required, avoided)


def check_one_sentence(layout: Layout, constraints: list[list[str]], name: Callable) -> None:
    """Refuses (TermError) constraints for a line that splits into several sentences (which should hold them?) or
    into none (an empty line's translation is empty: they would be dropped)."""
    unit = layout.unit
    for line, phrases in enumerate(constraints):
        count = layout.count(line)
        if phrases and count != 1:
            holds = f"holds {count} sentences" if count else "is empty"
            raise TermError(
                f"{name('constraints', line + 1)} is {shown(phrases)}, for {unit} {layout.first + line}, which "
                f"{holds}: a {unit}'s constraints are its one sentence's; expected a {unit} of one sentence"
                + (", or no sentence splitting (--no_split_sentences, split_sentences=False)" if count else ""),
                "constraints",
                line + 1,
            )


def check_clashes(
    tokenizer,
    constraints: list[list[str]] | None,
    avoid: list[list[str]] | None,
    targets: list[list[str]] | None = None,
    name: Callable[[str, int | None], str] = input_term,
) -> None:
    """Refuses (TermError, field "avoid") the first phrase to avoid that a phrase to hold of the same input holds: one
    of its constraints, or a glossary target term of one of its sentences (`targets`, one list an input). Phrases are
    compared as the search gets them (`phrase_ids`): a translation cannot hold the one without the other, which
    generate() would refuse by token ids (guidance_vaswani.check_avoid), after the model loaded and decoding began."""
    if avoid is None or (constraints is None and targets is None):
        return
    ids = dict(zip(*_distinct_ids(tokenizer, [constraints, avoid, targets]), strict=True))
    for row, phrases in enumerate(avoid):
        held = [(phrase, "constraints") for phrase in (constraints or [[]] * len(avoid))[row]]
        held += [(phrase, "glossary") for phrase in (targets or [[]] * len(avoid))[row]]
        for phrase in phrases:
            tokens = ids[phrase.strip()]
            for required, field in held:
                inside = ids[required.strip()]
                if any(inside[i : i + len(tokens)] == tokens for i in range(len(inside) - len(tokens) + 1)):
                    what = "a phrase" if field == "constraints" else "a target term"
                    raise TermError(
                        f"{name('avoid', row + 1)} holds {phrase!r}, which {required!r} holds, {what} of "
                        f"{name(field, row + 1 if field == 'constraints' else None)} for the same input: its "
                        "translation cannot hold the one and avoid the other; expected phrases to avoid that no "
                        "phrase to hold holds",
                        "avoid",
                        row + 1,
                    )


def _distinct_ids(tokenizer, lists) -> tuple[list[str], list[list[int]]]:
    """The distinct phrases of `lists` (each None or one list of phrases a row) and their ids, as `phrase_ids`."""
    phrases = list(dict.fromkeys(p.strip() for rows in lists if rows is not None for row in rows for p in row))
    return phrases, phrase_ids(tokenizer, [phrases])[0] if phrases else []


def phrase_ids(tokenizer, phrases: list[list[str]] | None) -> list[list[list[int]]] | None:
    """Each sentence's phrases as token ids, each tokenized as it stands inside a sentence (`text_target`, no
    special tokens)."""
    if phrases is None:
        return None
    flat = [phrase.strip() for row in phrases for phrase in row]
    ids = iter(tokenizer(text_target=flat, add_special_tokens=False)["input_ids"] if flat else [])
    return [[next(ids) for _ in row] for row in phrases]


def check_room(constraints, prefixes, room: list[int], name_sentence) -> None:
    """Refuses a sentence whose constraint tokens, with its target prefix, are more than the `room` its translation
    may have, naming it (`name_sentence(number)`, from 1) and its phrases."""
    for index, (phrases, limit) in enumerate(zip(constraints, room, strict=True)):
        prefix = len(prefixes[index]) if prefixes is not None else 0
        if overflows(phrases, prefix, limit):
            with_prefix = f" and its target prefix {prefix}" if prefix else ""
            tokens = sum(map(len, phrases))
            raise InputError(
                f"{name_sentence(index + 1)}: its constraints are {tokens} tokens{with_prefix} and its translation "
                f"may have {limit}; expected constraints that fit in its length limit",
                index + 1,
            )
