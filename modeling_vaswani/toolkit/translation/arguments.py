"""The one check of the library's public arguments: `translate`, `translate_nbest`, `translate_sentences`,
`translate_aligned`, `word_alignments`, `translate_markup`, `score` and the "vaswani-translation" pipeline (at creation
and per call) each hand the arguments they take to `check_arguments` before any work. A name's rule is written once
(RULES), so that `split_sentences` is a bool and `glossary` a dict or a `Glossary` wherever they are taken. A value of
another type is an ArgumentTypeError (a TypeError and a ValueError), a value outside the rule's values a ValueError,
each naming the argument, the value and what was expected. Lists of texts and of phrases are checked where their
count is known (`check_sentences`, `terminology.check_phrase_texts`), generate()'s arguments by generate()."""

from ..data.markup import FORMATS
from ..data.sentences import check_language
from ..values import ArgumentTypeError, count, shown
from .terminology import Glossary


def flag(name: str, value) -> bool:
    if not isinstance(value, bool):  # "no" and 0 would be read as their truth: a str is no switch
        raise ArgumentTypeError(f"{name}={shown(value)}; expected True or False")
    return value


def optional_count(name: str, value) -> int | None:
    return count(name, value, optional=True)


def markup_format(name: str, value) -> str:
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{name}={shown(value)}; expected one of {list(FORMATS)}")
    if value not in FORMATS:
        raise ValueError(f"unknown markup format {shown(value)} for {name}; expected one of {list(FORMATS)}")
    return value


def language(name: str, value) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ArgumentTypeError(f"{name}={shown(value)}; expected a language code (str) such as 'en', or None")
    return check_language(value, name)


def glossary(name: str, value) -> Glossary | None:
    """None, a `Glossary`, or the documented dict of source term to target term (made a Glossary)."""
    if value is None or isinstance(value, Glossary):
        return value
    if not isinstance(value, dict):
        raise ArgumentTypeError(
            f"{name} is a {type(value).__name__}; expected a dict of source term to target term, or a Glossary"
        )
    return Glossary.of(value)


RULES = {
    "batch_size": optional_count,
    "max_tokens": optional_count,
    "max_input_tokens": optional_count,
    "nbest": count,
    "first_line": count,
    "first": count,
    "paper_decoding": flag,
    "progress": flag,
    "split_sentences": flag,
    "alignments": flag,
    "language": language,
    "glossary": glossary,
    "format": markup_format,
}


def check_arguments(**arguments) -> dict:
    """`arguments`, each checked by the rule of its name (RULES) and given back as it is to be used (a glossary dict
    as a Glossary, a language without surrounding spaces). A refusal's `field` is the argument's name, as a
    request's refusals name theirs (request.py). A name without a rule is a bug here, not the caller's."""
    checked = {}
    for name, value in arguments.items():
        try:
            checked[name] = RULES[name](name, value)
        except ValueError as error:
            error.field = name
            raise
    return checked
