"""Translating texts with markup: HTML pages and lines with inline tags (data/markup.py parses them, takes the tags
out and puts them back), the text of every document split into sentences (data/sentences.py), all sentences of all
documents translated in one `translate` call (batched by length together, as plain lines are), and the tags put
back around the target words the model's own alignment (`word_alignments`) links to the words they wrapped."""

from collections.abc import Sequence
from dataclasses import replace

from ..data.markup import Document, write_documents
from ..data.sentences import preview
from .alignment import line_alignments, request_alignments
from .arguments import markup_format
from .request import CheckedRequest, Spelling
from .translate import InputError, checked_request, decode_request, split_input

MARKUP = Spelling(names={"first_line": "first"})  # translate_markup's names of the request's fields


def translate_markup(
    model,
    tokenizer,
    texts: Sequence[str],
    format: str = "html",
    language: str | None = None,
    batch_size: int | None = None,
    max_tokens: int | None = None,
    max_input_tokens: int | None = None,
    paper_decoding: bool = True,
    progress: bool = False,
    first: int = 1,
    **generate_kwargs,
) -> list[str]:
    """The translations of `texts`, each an HTML document or fragment (`format="html"`) or a line with inline tags
    (`"xml-inline"`, written back as well-formed XML), markup kept: see data/markup.py for what is translated, what
    is kept verbatim and how malformed HTML is repaired.

    Every run of text of every document (`Document.runs`) is split into sentences by sentencex's rules for
    `language` (None: the tokenizer's recorded source language), and all the sentences are translated in one
    `translate` call (batches by length across documents; `batch_size`, `max_tokens`, `max_input_tokens`,
    `paper_decoding` and `generate_kwargs` are its). The sentences of runs that hold tags are then aligned to their
    translations (`word_alignments`, so `model` must be a PyTorch model) and the tags placed on
    the target words linked to the words they wrapped (`markup.place` says how crossings and unaligned tags go).
    An InputError names the text at fault (numbered from `first`) and its sentence, and its `sentence` is that text's
    place in `texts`, from 1."""
    request, generate_kwargs = checked_request(
        model, texts, generate_kwargs, MARKUP, format=format, language=language, batch_size=batch_size,
        max_tokens=max_tokens, max_input_tokens=max_input_tokens, paper_decoding=paper_decoding, progress=progress,
        first_line=first,
    )  # fmt: skip
    if request.format == "text":  # a request's plain text, which is no markup format
        markup_format("format", request.format)
    return markup_request(model, tokenizer, request, **generate_kwargs)


def markup_request(model, tokenizer, request: CheckedRequest, **generate_kwargs) -> list[str]:
    """`translate_markup`'s answer for a request with markup checked already (its front end's one check)."""
    texts, first = request.texts, request.first_line
    if isinstance(texts, str):
        raise ValueError("texts is a str; expected a list of documents (a single one in a list)")
    documents = []
    for number, text in enumerate(texts):
        try:
            documents.append(Document(text, request.format))
        except ValueError as error:  # a character libxml2 cannot hold: name the text
            raise InputError(f"text {first + number}: {error}", number + 1) from None
    runs = [run for document in documents for run in document.runs]
    layout = split_input([run.text for run in runs], tokenizer, request.language, unit="run of text")
    owners = [number for number, document in enumerate(documents) for _ in document.runs]  # each run's text
    translations = []
    try:
        if layout.sentences:  # the request's sentences, each translated whole as plain text
            sentences = replace(request, texts=layout.sentences, format="text", split_sentences=False, language=None)
            _, _, translations = decode_request(model, tokenizer, sentences, **generate_kwargs)
    except InputError as error:  # it names a sentence among all of them: name its text instead
        if error.sentence is None:
            raise
        text = owners[layout.line_index(error.sentence)]
        shown = preview(layout.sentences[error.sentence - 1])
        raise InputError(f"text {first + text}, its sentence {shown!r}: {error}", text + 1) from None
    # Only the sentences of runs with tags need their words aligned: the others have nothing to place.
    tagged = [
        index
        for line, run in enumerate(runs)
        if run.tags
        for index in range(layout.starts[line], layout.starts[line] + layout.count(line))
    ]
    links: list[list[tuple[int, int]]] = [[] for _ in layout.sentences]
    if tagged:
        aligned = request_alignments(
            model, tokenizer, [layout.sentences[i] for i in tagged], [translations[i] for i in tagged], request
        )
        for index, pairs in zip(tagged, aligned, strict=True):
            links[index] = pairs
    return write_documents(documents, layout.join(translations), line_alignments(layout, translations, links))
