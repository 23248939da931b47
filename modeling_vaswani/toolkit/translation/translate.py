"""Translating many sentences with a loaded model (PyTorch, or a CTranslate2 export run by serving/), in batches by
length, with the checks every translating caller makes before any work starts. With `split_sentences` (the default of
`translate` and `translate_nbest`) each input is a line that may hold a paragraph: split into sentences
(data/sentences.py), the sentences of all lines batched together, and each line's translations joined back with its
own spacing."""

import collections
import functools
import inspect
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields

import torch
from tqdm.auto import tqdm

from ...generation_vaswani import stock_output_length
from ...guidance_vaswani import leaves_no_room
from ...search_vaswani import max_output_length
from ..checkpoints import recorded_source_language
from ..data.sentences import Layout, check_language, split_lines, tokenizer_language
from ..threads import start_work
from .arguments import check_arguments
from .errors import InputError
from .request import ARGUMENTS, LIMITS, CheckedRequest, Spelling, TranslationRequest, checked
from .terminology import NO_PHRASES, Glossary, SentencePhrases, check_room, phrase_ids, sentence_terms


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


def sentence_name(layout: Layout | None, number: int, what: str = "sentence") -> str:
    """How an error names sentence `number` (from 1): "sentence 3", or where the sentences were split from lines
    (`layout`), by its line and first words: "line 2, sentence 1 ('A man rides ...')"."""
    return f"{what} {number}" if layout is None else layout.name(number)


def input_number(layout: Layout | None, number: int) -> int:
    """The position (from 1) in the call's input of what holds sentence `number`: the sentence itself, or the line it
    was split from (InputError.sentence)."""
    return number if layout is None else layout.line_index(number) + 1


def check_sentences(
    tokenizer,
    sentences: Sequence[str],
    max_input_tokens: int | None = None,
    side: str = "source",
    layout: Layout | None = None,
) -> list[int]:
    """Each sentence's length in tokens, `</s>` included, after refusing (InputError) an empty sentence or one of more
    than `max_input_tokens` tokens: under the paper's decoding (up to input + 50 tokens) a sentence of 3,000 tokens
    would run for minutes. `side` "target" tokenizes them as translations (`text_target`) and names them so. Where
    the sentences were split from lines, `layout` names them by their line (`sentence_name`)."""
    what = "sentence" if side == "source" else f"{side} sentence"
    if isinstance(sentences, str):
        argument = "sentences" if side == "source" else "targets"
        raise InputError(f"{argument} is a str; expected a list of sentences (a single sentence in a list)")
    for number, sentence in enumerate(sentences, start=1):
        if not isinstance(sentence, str):
            raise InputError(f"{what} {number} is a {type(sentence).__name__}; expected a str", number)
        if not sentence.strip():
            expected = "text to translate" if side == "source" else "a translation to score"
            raise InputError(f"{what} {number} is empty; expected {expected}", number)
    if not sentences:  # nothing to tokenize (a tokenizer refuses an empty batch)
        return []
    texts = {"text" if side == "source" else "text_target": list(sentences)}
    lengths = [len(ids) for ids in tokenizer(**texts, add_special_tokens=True)["input_ids"]]
    if max_input_tokens is not None:
        over = [number for number, length in enumerate(lengths, start=1) if length > max_input_tokens]
        if over:
            where = f": {over[:10]}" if layout is None else f", in {layout.unit}s {layout.line_numbers(over)[:10]}"
            raise InputError(
                f"{sentence_name(layout, over[0], what)} is {lengths[over[0] - 1]} tokens long, more than the limit "
                f"of {max_input_tokens} (max_input_tokens; {len(over)} sentence(s) over it{where}); expected shorter "
                "sentences",
                input_number(layout, over[0]),
            )
    return lengths


DEFAULT_BATCH_SIZE = 64


def length_batches(
    lengths: Sequence[int],
    batch_size: int | None = None,
    max_tokens: int | None = None,
    layout: Layout | None = None,
) -> list[list[int]]:
    """The sentences' indices in batches, longest sentence first: each batch at most `batch_size` sentences and at
    most `max_tokens` padded source tokens (its sentences times its longest), where given. A sentence longer than
    `max_tokens` fits no batch and is refused (InputError, named as `sentence_name` names it), not cut or dropped."""
    if max_tokens is not None and lengths and max(lengths) > max_tokens:
        index = max(range(len(lengths)), key=lengths.__getitem__)
        raise InputError(
            f"{sentence_name(layout, index + 1)} is {lengths[index]} tokens long, more than --max_tokens "
            f"{max_tokens} (the padded source tokens a batch may hold); expected --max_tokens of at least "
            f"{lengths[index]}",
            input_number(layout, index + 1),
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


def plan_batches(
    tokenizer,
    sentences: Sequence[str],
    batch_size: int | None,
    max_tokens: int | None,
    max_input_tokens: int | None,
    layout: Layout | None = None,
) -> tuple[list[int], list[list[int]]]:
    """The checks every translating caller makes, before any work: each sentence's length in tokens, and the batches
    (lists of sentence indices) to translate them in. Sentences are batched by length (`length_batches`: longest
    first, so a memory problem shows at once) to waste little on padding: `batch_size` sentences a batch (64 when
    neither limit is given), or as many as `max_tokens` padded source tokens hold, or both limits. Nothing is
    truncated: an empty sentence, which would come back as an empty translation nobody asked for, one longer than
    `max_input_tokens` (no limit when None) and one longer than `max_tokens` are refused (`check_sentences`,
    `length_batches`; errors name a sentence split from a line by that line, `layout`). The limits themselves were
    checked with their request."""
    if batch_size is None and max_tokens is None:
        batch_size = DEFAULT_BATCH_SIZE
    lengths = check_sentences(tokenizer, sentences, max_input_tokens, layout=layout)
    return lengths, length_batches(lengths, batch_size, max_tokens, layout)


def tokenized_batches(
    model, tokenizer, sentences: Sequence[str], batches: list[list[int]], progress: bool
) -> Iterator[tuple[list[int], dict]]:
    """Each batch's sentence indices and their tokenized, padded source on the model's device, with a progress bar.
    Its first step is the work's start (`threads.start_work`: a command measures its threads here, once every check of
    the request has passed, so that a refused input never waits for the measuring)."""
    model.eval()
    start_work()
    with tqdm(total=len(sentences), desc="translating", unit="sentence", disable=not progress) as bar:
        for indices in batches:
            batch = tokenizer([sentences[i] for i in indices], return_tensors="pt", padding=True)
            yield indices, batch.to(model.device)
            bar.update(len(indices))


def output_room(model, lengths: list[int], paper_decoding: bool, generate_kwargs: dict) -> list[int]:
    """How many tokens each sentence's translation may have, as generate() limits it: Section 6.1's source + 50
    under the paper's decoding, lowered to the call's `max_new_tokens` or `max_length` (which counts the start
    token); without, the call's or the model's generation settings (transformers' max_length 20 at the least)."""
    max_new_tokens, max_length = generate_kwargs.get("max_new_tokens"), generate_kwargs.get("max_length")
    if paper_decoding:
        return [max_output_length(length, max_new_tokens or None, max_length or None) for length in lengths]
    config = model.generation_config
    return [stock_output_length(max_new_tokens or config.max_new_tokens, max_length or config.max_length)] * len(
        lengths
    )


def prefix_ids(
    tokenizer,
    target_prefixes: Sequence[str] | None,
    room: Callable[[], list[int]],
    layout: Layout | None = None,
) -> list[list[int]] | None:
    """The token ids of each target prefix ("" for none: no ids), as the start of a translation (`text_target`,
    without `</s>`); None for no prefixes. Refuses (InputError) a count other than one a sentence, and a prefix that
    leaves its translation no room to go on within the tokens `room()` allows each sentence (it would come back
    cut); where the sentences were split from lines (`layout`), such a prefix is named by its line's number."""
    if target_prefixes is None:
        return None
    room = room()
    sentences = len(room)
    if isinstance(target_prefixes, str) or len(target_prefixes) != sentences:
        shown = "a str" if isinstance(target_prefixes, str) else f"{len(target_prefixes)} prefixes"
        raise InputError(f'target_prefixes is {shown}; expected a list of {sentences}, one a sentence ("" for none)')
    for number, prefix in enumerate(target_prefixes, start=1):
        if not isinstance(prefix, str):
            raise InputError(f'target prefix {number} is a {type(prefix).__name__}; expected a str ("" for none)')
    if not target_prefixes:  # no sentence, so no prefix (a tokenizer refuses an empty batch)
        return []
    ids = tokenizer(text_target=list(target_prefixes), add_special_tokens=False)["input_ids"]
    ids = [row if prefix.strip() else [] for row, prefix in zip(ids, target_prefixes, strict=True)]
    for number, (row, limit) in enumerate(zip(ids, room, strict=True), start=1):
        if leaves_no_room(len(row), limit):
            named = number if layout is None else layout.line_number(number)
            raise InputError(
                f"target prefix {named} is {len(row)} tokens long and its translation may have {limit}; expected a "
                "shorter prefix, leaving room for the rest of the translation"
            )
    return ids


def decoding_batches(
    model,
    tokenizer,
    sentences: Sequence[str],
    batch_size: int | None,
    max_tokens: int | None,
    max_input_tokens: int | None,
    target_prefixes: Sequence[str] | None,
    paper_decoding: bool,
    progress: bool,
    generate_kwargs: dict,
    layout: Layout | None = None,
    phrases: SentencePhrases = NO_PHRASES,
) -> Iterator[tuple[list[int], dict, dict]]:
    """What `translate` and `translate_nbest` decode, batch by batch (their arguments of the same names): the sentence
    indices, their tokenized source and the batch's generate() keyword arguments (its rows' `target_prefix`, when
    given). Every check (`plan_batches`, `prefix_ids`) is made before the first batch is yielded; `layout`: the lines
    the sentences were split from, which errors name."""
    lengths, batches = plan_batches(tokenizer, sentences, batch_size, max_tokens, max_input_tokens, layout)
    room = functools.partial(output_room, model, lengths, paper_decoding, generate_kwargs)
    prefixes = prefix_ids(tokenizer, target_prefixes, room, layout)
    required, avoided = checked_phrase_ids(tokenizer, phrases, prefixes, room, layout)
    for indices, batch in tokenized_batches(model, tokenizer, sentences, batches, progress):
        kwargs = dict(generate_kwargs)
        for name, rows in (("target_prefix", prefixes), ("constraints", required), ("avoid", avoided)):
            if rows is not None and (name == "target_prefix" or any(rows[i] for i in indices)):
                kwargs[name] = [rows[i] for i in indices]
        yield indices, batch, kwargs


def checked_phrase_ids(tokenizer, phrases: SentencePhrases, prefixes, room: Callable, layout: Layout | None):
    """Each sentence's phrases to hold and to avoid (`phrases`, from `terminology.sentence_terms`) as token ids, after
    refusing (InputError) constraints longer than a sentence's room (naming the sentence). What the engine and the
    decoding cannot meet was refused by the request's check."""
    if not any(rows for rows in phrases if rows is not None):
        return NO_PHRASES
    ids = SentencePhrases(*(phrase_ids(tokenizer, rows) for rows in phrases))
    if ids.hold is not None:
        check_room(ids.hold, prefixes, room(), layout.name if layout is not None else lambda n: f"sentence {n}")
    return ids


def checked_request(
    model, texts, generate_kwargs: dict, spelling: Spelling = ARGUMENTS, **options
) -> tuple[CheckedRequest, dict]:
    """The request of a call of `translate`, `translate_sentences` or `translate_nbest` (`options`: their arguments,
    with generate()'s beam count and length limit taken from `generate_kwargs` and its ensemble counted), checked once
    for `model` (`TranslationRequest.check_for`; `spelling`: how the function names the fields) before any work; and
    generate()'s other arguments."""
    others = {name: value for name, value in generate_kwargs.items() if name not in LIMITS}
    limits = {name: generate_kwargs.get(name) for name in LIMITS}
    models = 1 + len(others.get("ensemble") or ())
    request = TranslationRequest(texts=texts, **limits, models=models, **options)
    return request.check_for(model, spelling=spelling), others


def request_sentences(tokenizer, request: CheckedRequest, one_a_line: bool = False):
    """The `Layout` `request`'s texts split into (None where it splits none), the sentences to translate and their
    target prefixes; with `one_a_line`, a line of several sentences refused (an n-best list's)."""
    if not request.split_sentences:
        return None, request.texts, request.target_prefixes
    layout = split_input(request.texts, tokenizer, request.language, request.first_line)
    if one_a_line:
        check_one_sentence_a_line(layout)
    return layout, layout.sentences, split_prefixes(layout, request.target_prefixes)


def request_batches(model, tokenizer, request: CheckedRequest, layout, sentences, prefixes, generate_kwargs: dict):
    """`decoding_batches` of a checked request's sentences (`request_sentences`), its terminology per sentence."""
    phrases = sentence_terms(layout, sentences, request.constraints, request.avoid, request.glossary, tokenizer)
    return decoding_batches(
        model, tokenizer, sentences, request.batch_size, request.max_tokens, request.max_input_tokens, prefixes,
        request.paper_decoding, request.progress, {**request.limits(), **generate_kwargs}, layout, phrases,
    )  # fmt: skip


def each_generated(model, batches: Iterable[tuple[list[int], dict, dict]], generate: Callable) -> Iterator[tuple]:
    """Each batch's sentence indices and `generate(batch, kwargs)`, in the batches' order. A model that runs several
    searches at once says how many batches it takes at once (`batches_in_flight`, the onnxruntime engine's): the next
    batches are handed over before the last one's result is read, each run whole by one search (`searches=1` among
    its generate() arguments, unless they say otherwise) while as many follow it as the model takes, so that every
    search has a batch of its own; the last ones are dealt to all its searches, so that none waits at the end for the
    slowest batch. The batches are read that many ahead of those handed over. Other models get one batch at a
    time."""
    at_once = getattr(model, "batches_in_flight", 1)
    if at_once == 1:
        for indices, batch, kwargs in batches:
            yield indices, generate(batch, kwargs)
        return
    with ThreadPoolExecutor(at_once, thread_name_prefix="batches") as pool:
        read, pending = collections.deque(), collections.deque()

        def hand_over(whole: bool) -> Iterator[tuple]:
            indices, batch, kwargs = read.popleft()
            pending.append((indices, pool.submit(generate, batch, {"searches": 1, **kwargs} if whole else kwargs)))
            if len(pending) == at_once:
                indices, result = pending.popleft()
                yield indices, result.result()

        for batch in batches:
            read.append(batch)
            if len(read) > at_once:  # as many batches follow it as the model takes: one search runs it whole
                yield from hand_over(whole=True)
        while read:
            yield from hand_over(whole=False)
        while pending:
            indices, result = pending.popleft()
            yield indices, result.result()


def decode_request(model, tokenizer, request: CheckedRequest, **generate_kwargs):
    """What `translate_sentences` gives, for a request checked already (its front end's one check): the `Layout`, the
    sentences translated and their translations. `generate_kwargs`: generate()'s own beyond the request."""
    request = checked(request)
    layout, sentences, prefixes = request_sentences(tokenizer, request)
    if layout is not None and not sentences:  # only empty lines: nothing to translate
        return layout, [], []
    translations = [None] * len(sentences)
    batches = request_batches(model, tokenizer, request, layout, sentences, prefixes, generate_kwargs)

    def generate(batch: dict, kwargs: dict):
        return model.generate(**batch, paper_decoding=request.paper_decoding, **kwargs)

    for indices, generated in each_generated(model, batches, generate):
        for index, text in zip(indices, tokenizer.batch_decode(generated, skip_special_tokens=True), strict=True):
            translations[index] = text
    return layout, list(sentences), translations


def decode_nbest(model, tokenizer, request: CheckedRequest, **generate_kwargs) -> list[list["Hypothesis"]]:
    """What `translate_nbest` gives, for a request with `nbest` checked already (its front end's one check)."""
    request = checked(request)
    layout, sentences, prefixes = request_sentences(tokenizer, request, one_a_line=True)
    if layout is not None and not sentences:  # only empty lines: nothing to translate
        return [[] for _ in layout.starts]
    results = [None] * len(sentences)
    batches = request_batches(model, tokenizer, request, layout, sentences, prefixes, generate_kwargs)

    def generate(batch: dict, kwargs: dict):
        if hasattr(model, "generate_checked_nbest"):  # an exported model: its engine searches, not checking again
            nbest, paper = request.nbest, request.paper_decoding
            return model.generate_checked_nbest(**batch, nbest=nbest, paper_decoding=paper, **kwargs)
        return pytorch_nbest(model, batch, request.nbest, request.paper_decoding, kwargs)

    for indices, rows in each_generated(model, batches, generate):
        for index, hypotheses in zip(indices, rows, strict=True):
            results[index] = [
                Hypothesis(tokenizer.decode(ids, skip_special_tokens=True), score) for ids, score in hypotheses
            ]
    if layout is None:
        return results
    return [results[start] if layout.count(line) else [] for line, start in enumerate(layout.starts)]


def source_language(name: str | None, tokenizer, language: str | None = None, revision: str | None = None):
    """The language sentences are split by for the model `name` (a folder, an exported folder or a Hub id; None: only
    the tokenizer is known): `language` where given (a --source_lang flag), else what its training run recorded:
    results.json's `test_set.source_lang` (`checkpoints.recorded_source_language`), else the `source_lang` of its
    tokenizer's configuration (vaswani-train records both); None where nothing says (sentencex's generic rules).
    Each is checked as a language code (`sentences.check_language`), refused naming where it came from."""
    if language is not None:
        return check_language(language, "--source_lang")
    recorded = recorded_source_language(name, revision) if name else None
    if recorded:
        return check_language(recorded, f"{name}'s results.json test_set.source_lang")
    return check_language(tokenizer_language(tokenizer), "the tokenizer's source_lang")


def split_input(
    lines: Sequence[str],
    tokenizer,
    language: str | None,
    first_line: int = 1,
    unit: str = "line",
    labels: Sequence[str] | None = None,
) -> Layout:
    """`lines` split into sentences (`data.sentences.split_lines`) by the rules of `language`, else of the source
    language the tokenizer records, else sentencex's generic ones. Refuses (InputError) `lines` that is a str, and a
    line that is not a str, naming it by its number counted from `first_line`."""
    if isinstance(lines, str):
        raise InputError("sentences is a str; expected a list of sentences (a single sentence in a list)")
    for number, line in enumerate(lines, start=first_line):
        if not isinstance(line, str):
            raise InputError(f"{unit} {number} is a {type(line).__name__}; expected a str", number - first_line + 1)
    return split_lines(lines, language or tokenizer_language(tokenizer), unit=unit, first=first_line, labels=labels)


def split_prefixes(layout: Layout, target_prefixes: Sequence[str] | None) -> list[str] | None:
    """`Layout.sentence_prefixes`, its refusals as InputError: each line's prefix moved to its first sentence."""
    try:
        return layout.sentence_prefixes(target_prefixes)
    except ValueError as error:
        raise InputError(str(error)) from None


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
    target_prefixes: Sequence[str] | None = None,
    split_sentences: bool = True,
    language: str | None = None,
    first_line: int = 1,
    constraints: Sequence[Sequence[str]] | None = None,
    avoid: Sequence[Sequence[str]] | None = None,
    glossary: Glossary | dict | None = None,
    **generate_kwargs,
) -> list[str]:
    """Translations of `sentences`, in order, one per input, by `model`: a checkpoint's, or an exported folder's
    `CTranslate2Model` (which decodes the same batches, as close to Section 6.1 as CTranslate2 can). Batched and
    checked by `plan_batches`; decoded with Section 6.1's beam search unless `paper_decoding=False`. With
    `target_prefixes` (one an input, "" for none), each translation starts with its prefix's tokens.

    With `split_sentences` (the default) each input is a line that may hold a paragraph: it is split into sentences
    by sentencex's rules for `language` (None: the source language the tokenizer records, else generic rules), the
    sentences of all lines are batched together, and each line's translations are joined with the whitespace the
    line had around and between its sentences; an empty or blank line gives "". A line's target prefix starts its
    first sentence's translation. Errors name a sentence by its line (numbered from `first_line`) and first words,
    and InputError.sentence is that line's place in `sentences`, counted from 1. `split_sentences=False` translates
    each input whole, as one sentence (an empty one is refused): for sentence-aligned text such as a test set.

    Terminology (translation/terminology.py): `constraints`, phrases each input's translation must hold (one list an
    input); `avoid`, phrases it must not; `glossary`, target terms each sentence holding their source terms must use.
    """
    layout, _, translations = translate_sentences(
        model, tokenizer, sentences, batch_size, paper_decoding, progress, max_input_tokens, max_tokens,
        target_prefixes, split_sentences, language, first_line, constraints, avoid, glossary, **generate_kwargs,
    )  # fmt: skip
    return translations if layout is None else layout.join(translations)


@torch.no_grad()
def translate_sentences(
    model,
    tokenizer,
    sentences: Sequence[str],
    batch_size: int | None = None,
    paper_decoding: bool = True,
    progress: bool = True,
    max_input_tokens: int | None = None,
    max_tokens: int | None = None,
    target_prefixes: Sequence[str] | None = None,
    split_sentences: bool = True,
    language: str | None = None,
    first_line: int = 1,
    constraints: Sequence[Sequence[str]] | None = None,
    avoid: Sequence[Sequence[str]] | None = None,
    glossary: Glossary | dict | None = None,
    **generate_kwargs,
) -> tuple[Layout | None, list[str], list[str]]:
    """What `translate` decodes, before its lines are joined (same arguments): the `Layout` the inputs were split by
    (None with `split_sentences=False`), the sentences translated (the layout's, else the inputs) and their
    translations, one a sentence. For callers that need each sentence's translation as well as the lines
    (`alignment.translate_aligned` aligns sentence by sentence)."""
    request, others = checked_request(
        model, sentences, generate_kwargs, batch_size=batch_size, paper_decoding=paper_decoding, progress=progress,
        max_input_tokens=max_input_tokens, max_tokens=max_tokens, target_prefixes=target_prefixes,
        split_sentences=split_sentences, language=language, first_line=first_line, constraints=constraints,
        avoid=avoid, glossary=glossary,
    )  # fmt: skip
    return decode_request(model, tokenizer, request, **others)


# translate()'s own options, which a request holds: its other keyword arguments are generate()'s.
OPTIONS = frozenset(inspect.signature(translate_sentences).parameters) & {
    each.name for each in fields(TranslationRequest)
}


@dataclass
class Hypothesis:
    """One of a sentence's n best translations, and the score the search ranked it by: log P(Y|X) / lp(Y), with
    Section 6.1's lp(Y) = ((5 + |Y|) / 6)^alpha under the paper's decoding and transformers' (and CTranslate2's)
    |Y|^alpha without, |Y| counting `</s>`. Times lp(Y) it is the log-probability `scoring.score` gives Y."""

    text: str
    score: float


@torch.no_grad()
def translate_nbest(
    model,
    tokenizer,
    sentences: Sequence[str],
    nbest: int,
    batch_size: int | None = None,
    paper_decoding: bool = True,
    progress: bool = True,
    max_input_tokens: int | None = None,
    max_tokens: int | None = None,
    target_prefixes: Sequence[str] | None = None,
    split_sentences: bool = True,
    language: str | None = None,
    first_line: int = 1,
    constraints: Sequence[Sequence[str]] | None = None,
    avoid: Sequence[Sequence[str]] | None = None,
    glossary: Glossary | dict | None = None,
    **generate_kwargs,
) -> list[list[Hypothesis]]:
    """The `nbest` best translations of each of `sentences`, in order, best first, as `translate` decodes them (the
    first is `translate`'s translation): the finished hypotheses of beam search, so `nbest` may not exceed the number
    of beams (`num_beams`, else the model's).

    With `split_sentences` (the default, as `translate`) an empty or blank line has no hypotheses ([]), and a line
    that splits into several sentences is refused (InputError naming it): the n best translations of a paragraph
    would be n combinations of its sentences' ones. Give `split_sentences=False` (--no_split_sentences) to have such
    a line translated whole, as one sentence. `constraints`, `avoid` and `glossary` as `translate` takes them."""
    check_arguments(nbest=nbest)  # the request's None (one translation) is no n-best list
    request, others = checked_request(
        model, sentences, generate_kwargs, nbest=nbest, batch_size=batch_size, paper_decoding=paper_decoding,
        progress=progress, max_input_tokens=max_input_tokens, max_tokens=max_tokens, target_prefixes=target_prefixes,
        split_sentences=split_sentences, language=language, first_line=first_line, constraints=constraints,
        avoid=avoid, glossary=glossary,
    )  # fmt: skip
    return decode_nbest(model, tokenizer, request, **others)


def check_one_sentence_a_line(layout: Layout) -> None:
    """Refuses (InputError) the first line of `layout` that holds more than one sentence: an n-best list is of one
    sentence's translations."""
    for line, start in enumerate(layout.starts):
        if layout.count(line) > 1:
            number = layout.first + line
            raise InputError(
                f"{layout.unit} {number} holds {layout.count(line)} sentences ({layout.name(start + 1)} and "
                f"{layout.count(line) - 1} more); an n-best list is of one sentence's translations: expected one "
                f"sentence a {layout.unit}, or the {layout.unit} translated whole as one sentence "
                "(--no_split_sentences; split_sentences=False)",
                line + 1,
            )


def pytorch_nbest(model, batch: dict, nbest: int, paper_decoding: bool, generate_kwargs: dict):
    """Each sentence's `nbest` hypotheses (token ids, score), best first, from generate()'s `sequences_scores`."""
    output = model.generate(
        **batch,
        paper_decoding=paper_decoding,
        num_return_sequences=nbest,
        return_dict_in_generate=True,
        output_scores=True,
        **generate_kwargs,
    )
    sequences = output.sequences.view(-1, nbest, output.sequences.shape[-1]).tolist()
    scores = output.sequences_scores.view(-1, nbest).tolist()
    return [list(zip(*row, strict=True)) for row in zip(sequences, scores, strict=True)]
