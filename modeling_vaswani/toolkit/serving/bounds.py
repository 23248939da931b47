"""The bounds on one request, each before its work: `Limits` (vaswani-serve's flags), `check_texts` (the count of
texts, their characters, lone surrogates), `distinct` (a layer or head given twice), and `within`, the one bound on a
request's work, with the estimates of an answer's size it is given."""

import json
from dataclasses import dataclass

from ...search_vaswani import max_output_length
from .gate import Refused

# The most an answer's JSON spends on each: a weight of 6 decimals ("0.123456, ", service.ATTENTION_DIGITS), a list's
# brackets and separator, a float of repr's ("-1.2345678901234567e-05, "), an alignment pair ("[123, 456], "), a
# hypothesis's keys and score.
WEIGHT_BYTES, LIST_BYTES, FLOAT_BYTES, PAIR_BYTES, HYPOTHESIS_BYTES = 10, 4, 26, 16, 64


@dataclass(frozen=True)
class Limits:
    """What one request may ask, and what the server holds at once: vaswani-serve's flags of the same names."""

    max_body_bytes: int = 1_000_000  # a body's bytes, read no further (413)
    max_texts: int = 256  # texts (or pairs) a request
    max_chars: int = 5_000  # characters a text, checked before any tokenizing
    max_input_tokens: int | None = None  # tokens a sentence (default: each model's max_position_embeddings)
    max_attention_tokens: int = 64  # tokens of an /attention text: its answer grows with their square
    max_tokens: int = 4_000  # source tokens a batch
    max_queue: int = 64  # requests waiting for the worker; more are answered 503
    timeout_s: float = 60.0  # a request's time from arrival to answer (504)
    body_timeout_s: float = 10.0  # a body's time to arrive, from its headers (408), apart from the work's time
    max_sentences: int = 1_000  # sentences a request, once its texts are split (413)
    max_request_tokens: int = 16_000  # source tokens a request (413)
    max_answer_bytes: int = 16_000_000  # an answer's size, estimated from what the request asks before any work (413)
    window: float = 0.01  # how long a batch waits for more requests


def check_texts(texts: list[str], field_name: str, limits: Limits) -> None:
    """Refuses, before any tokenizing, more texts than a request may hold, a text longer than `max_chars`, and text
    that is not Unicode (a lone surrogate, which JSON's \\uD800 escapes can carry and no tokenizer can read)."""
    if len(texts) > limits.max_texts:
        raise Refused(422, field_name, f"{len(texts)} texts; expected at most {limits.max_texts} a request")
    for number, text in enumerate(texts):
        where = f"{field_name}.{number}" if len(texts) > 1 else field_name
        if len(text) > limits.max_chars:
            raise Refused(
                422, where, f"a text of {len(text):,} characters; expected at most {limits.max_chars:,} (--max_chars)"
            )
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            raise Refused(
                422, where, f"a lone surrogate {text[error.start]!r} at character {error.start}; expected Unicode text"
            ) from None


def distinct(values: list | None, field_name: str) -> None:
    """Refuses a value given twice in a list of choices (layers, heads): its answer would be sent twice, and a
    request repeating one could ask for an answer of any size."""
    first = {}
    for place, value in enumerate(values or ()):
        if value in first:
            raise Refused(
                422, f"{field_name}.{place}", f"{field_name}.{place} is {value!r}, given already as "
                f"{field_name}.{first[value]}; expected each once",
            )  # fmt: skip
        first[value] = place


def within(limits: Limits, field_name: str, sentences=None, tokens=None, answer_bytes=None) -> None:
    """The one bound on a request's work, checked before the work and named by the field that asks for it (413): its
    sentences once its texts are split, its source tokens, and its answer's size as each endpoint estimates it from
    what the request asks (an upper bound: a request within it is never cut short)."""
    for count, limit, what, flag in (
        (sentences, limits.max_sentences, "sentences", "--max_sentences"),
        (tokens, limits.max_request_tokens, "source tokens", "--max_request_tokens"),
        (answer_bytes, limits.max_answer_bytes, "bytes of answer", "--max_answer_bytes"),
    ):
        if count is not None and count > limit:
            raise Refused(413, field_name, f"{count:,} {what} asked; expected at most {limit:,} a request ({flag})")


def token_bytes(tokenizer) -> int:
    """The most an answer's JSON spends on one of the tokenizer's tokens (escaped, quoted, a separator): an upper
    bound of a translation's bytes a token, and of a token label's."""
    return max(len(json.dumps(token)) for token in tokenizer.get_vocab()) + 2


def translation_bytes(source_lengths: list[int], nbest, max_new_tokens, alignments: bool, per_token: int) -> int:
    """The most a /translate answer can hold: each sentence's hypotheses at Section 6.1's longest output."""
    longest = [max_output_length(length, max_new_tokens) for length in source_lengths]
    per_sentence = [(nbest or 1) * (n * per_token + HYPOTHESIS_BYTES) + alignments * n * PAIR_BYTES for n in longest]
    return sum(per_sentence)


def attention_bytes(config, source: int, layers, heads, per_token: int) -> int:
    """The most an /attention answer can hold: each kind's chosen layers x heads x queries x keys weights, the
    translation at Section 6.1's longest (`attention_maps` forces the model's own translation)."""
    target = max_output_length(source)
    total = (source + target) * per_token
    for queries, keys, layer_count in (
        (source, source, config.encoder_layers),
        (target, target, config.decoder_layers),
        (target, source, config.decoder_layers),
    ):
        matrices = len(layers or range(layer_count)) * len(heads or range(config.num_heads))
        total += matrices * (queries * (keys * WEIGHT_BYTES + LIST_BYTES) + LIST_BYTES)
    return total
