"""vaswani-serve's HTTP API: translate, score and attention on models loaded once; requests that arrive together
translated together; every refusal one JSON shape, `{"error": {"field", "message"}}`, with its status.

Built on FastAPI (Starlette) and run by uvicorn, the `serve` extra; fastapi-offline serves /docs without a CDN. What a
request goes through, each step in one place:
1. `gate.Gate` (before the body is parsed): the API key (and an address's failed ones), the client's request limit,
   the content type, the body's size and its time to arrive, the requests in flight;
2. the request's model (pydantic, strict types), `bounded` (the count of texts, their characters, lone surrogates)
   and `unique` (a layer or head given twice), on the event loop, cheap and before any tokenizing;
3. the texts split into sentences (unless `split_sentences` is false) and the checks that tokenize (lengths,
   prefixes, options), on checking threads with tokenizers of their own (`worker.Checker`); `within`, the one bound
   on a request's work (its sentences once split, its tokens, its answer's estimated size), before any work;
4. the work, on the one worker thread (`worker.Worker`: a bounded queue, batches, a time limit, dropped when the client
   is gone), which alone runs the models and pads with their tokenizers. No request changes state another reads.
"""

import asyncio
import json
import reprlib
import signal
import socket
import sys
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import torch

try:
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import HTMLResponse, JSONResponse, Response
    from fastapi_offline import FastAPIOffline
    from pydantic import BaseModel, ConfigDict, Field
    from starlette.exceptions import HTTPException
    from uvicorn import Config, Server
    from uvicorn.protocols.http.h11_impl import H11Protocol
except ImportError as error:
    raise ImportError(
        f"the serve extra is not installed ({error}); vaswani-serve needs it: pip install modeling_vaswani[serve]"
    ) from error

from transformers import StoppingCriteriaList

from ...search_vaswani import OUTPUT_MARGIN, max_output_length
from ..data.markup import Document, write_documents
from ..evaluation.plotting import ATTENTION_KINDS, attention_maps
from ..translation.alignment import line_alignments, word_alignments
from ..translation.scoring import score
from ..translation.terminology import Glossary, check_room, phrase_ids, sentence_terms
from ..translation.translate import (
    InputError,
    check_nbest,
    check_one_sentence_a_line,
    check_sentences,
    input_token_limit,
    output_room,
    prefix_ids,
    sentence_name,
    split_input,
    split_prefixes,
    translate,
    translate_nbest,
)
from .gate import Gate, InFlight, RateLimit, Refused, error_body
from .metrics import Metrics
from .worker import Cancelled, Checker, Job, Overloaded, Stop, Worker

PAGE = Path(__file__).with_name("page.html")  # the page at /: self-contained, it talks only to this server
ATTENTION_DIGITS = 6  # attention weights are sent rounded to 6 decimals (a 1e-6 step): 8-9 bytes a weight in JSON
# The most an answer's JSON spends on each: a weight of 6 decimals ("0.123456, "), a list's brackets and separator, a
# float of repr's ("-1.2345678901234567e-05, "), an alignment pair ("[123, 456], "), a hypothesis's keys and score.
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


class Strict(BaseModel):
    """A request's body: no field the API does not know, no value of another type ("4" is no beam count)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class TranslateRequest(Strict):
    """A text or a list of them, and what vaswani-translate's flags set. A text may hold a paragraph: it is split into
    sentences (by the served model's source language) and its translations joined with its own spacing, an empty or
    blank text giving ""; `split_sentences` false translates each text whole, as one sentence."""

    text: Annotated[list[str], Field(min_length=1)] | str
    model: str | None = Field(None, description="a served model's name (default: the first)")
    num_beams: Annotated[int, Field(ge=1, le=32)] | None = None
    paper_decoding: bool = True
    nbest: Annotated[int, Field(ge=1, le=32)] | None = None
    max_new_tokens: Annotated[int, Field(ge=1)] | None = None
    target_prefix: list[str] | str | None = None
    split_sentences: bool = True
    alignments: bool = Field(
        False,
        description="also answer `alignments`: each text's word alignment, [source word, target word] pairs, words "
        "counted from 0 in the text's and the translation's whitespace-separated words (a PyTorch model's attention)",
    )
    constraints: list[list[str]] | None = Field(
        None,
        description="phrases each text's translation must hold: one list a text (docs/decoding.md#terminology-"
        "constraints-phrases-to-avoid-glossaries; the paper's decoding, a PyTorch model)",
    )
    avoid: list[list[str]] | None = Field(None, description="phrases each text's translation must not hold")
    glossary: dict[str, str] | None = Field(
        None, description="source term to target term: a sentence holding the source term holds the target term"
    )
    format: Literal["text", "html", "xml-inline"] = Field(
        "text",
        description="html: each text is an HTML document or fragment, answered with its markup; xml-inline: a line "
        "with inline tags (<b>, <a href>, <br/>), answered as well-formed XML; tags go on the target words the "
        "model's alignment links to theirs (docs/documents.md#markup; a PyTorch model's attention)",
    )


class ScoreRequest(Strict):
    model: str | None = None
    source: Annotated[list[str], Field(min_length=1)]
    target: Annotated[list[str], Field(min_length=1)]


class AttentionRequest(Strict):
    model: str | None = None
    text: Annotated[str, Field(min_length=1)]
    layers: Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)] | None = Field(
        None, description="the layers to show, counting from 0 (default: every layer)"
    )
    heads: Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)] | None = Field(
        None, description="the heads to show, counting from 0 (default: every head)"
    )


def error_response(status: int, field_name: str, message: str, headers: dict | None = None) -> Response:
    content = error_body(field_name, message)
    return Response(content, status_code=status, headers=headers, media_type="application/json")


def bounded(texts: list[str], field_name: str, limits: Limits) -> None:
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


def unique(values: list | None, field_name: str) -> None:
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


def translation_bytes(found: list[int], nbest, max_new_tokens, alignments: bool, per_token: int) -> int:
    """The most a /translate answer can hold: each sentence's hypotheses at Section 6.1's longest output."""
    longest = [max_output_length(length, max_new_tokens) for length in found]
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


def create_app(
    models: dict,
    limits: Limits = Limits(),
    keys=(),
    rate_limit: str | None = None,
    languages: dict | None = None,
    auth_failure_limit: str | None = None,
) -> FastAPI:
    """The API over `models` ({name: (model, tokenizer)}, loaded once; the first is the default), within `limits`;
    with `keys`, the API answers only requests that carry one (Authorization: Bearer KEY), and with
    `auth_failure_limit` ("20/minute") an address that sends more wrong keys than that is refused (429); with
    `rate_limit` ("120/minute"), each client (its key, else its address) is held to it. `languages` ({name: code or
    None}): each
    model's source language, whose rules split texts into sentences (a model not named: the language its tokenizer
    records, else sentencex's generic rules)."""
    names = list(models)
    languages = languages or {}
    for model, _ in models.values():
        input_token_limit(model, limits.max_input_tokens)  # refuses a limit beyond an export's position table
    metrics = Metrics()
    per_token = {name: token_bytes(tokenizer) for name, (_, tokenizer) in models.items()}
    checker = Checker({name: tokenizer for name, (_, tokenizer) in models.items()})
    checking_threads = ThreadPoolExecutor(max_workers=2, thread_name_prefix="vaswani-serve-check")

    def run(key: tuple, items: list, stop: Stop) -> list:
        """A batch's work, on the worker thread: one output per item."""
        kind, name, *options = key
        model, tokenizer = models[name]
        if kind == "translate":
            return run_translation(model, tokenizer, items, options, stop)
        if kind == "score":
            sources, targets = zip(*items, strict=True)
            scores = score(model, tokenizer, sources, targets, max_tokens=limits.max_tokens, progress=False)
            return [{"total": s.total, "mean": s.mean, "tokens": s.tokens, "log_probs": s.log_probs} for s in scores]
        return [attention_answer(name, model, tokenizer, *item) for item in items]

    def run_translation(model, tokenizer, items: list, options: list, stop: Stop) -> list:
        num_beams, paper_decoding, nbest, max_new_tokens, alignments = options
        sentences = [sentence for sentence, *_ in items]
        prefixes = None
        if any(prefix is not None for _, prefix, *_ in items):
            prefixes = [prefix or "" for _, prefix, *_ in items]
        # Each sentence's phrases to hold and to avoid (the glossary's target terms among the first), from its job.
        terms = {
            name: [item[place] or [] for item in items]
            for place, name in ((2, "constraints"), (3, "avoid"))
            if any(item[place] for item in items)
        }
        # The items are sentences already (split, where the request asked, by its checks): each translated whole.
        settings = {"paper_decoding": paper_decoding, "max_tokens": limits.max_tokens, "progress": False}
        settings["split_sentences"] = False
        settings |= {k: v for k, v in (("num_beams", num_beams), ("max_new_tokens", max_new_tokens)) if v}
        if isinstance(model, torch.nn.Module):  # CTranslate2 decodes a batch in one call, with no step to stop at
            settings["stopping_criteria"] = StoppingCriteriaList([stop.criteria])
        if nbest:
            lists = translate_nbest(model, tokenizer, sentences, nbest, target_prefixes=prefixes, **terms, **settings)
            return [[{"translation": h.text, "score": h.score} for h in hypotheses] for hypotheses in lists]
        translations = translate(model, tokenizer, sentences, target_prefixes=prefixes, **terms, **settings)
        if not alignments:
            return translations
        pairs = word_alignments(model, tokenizer, sentences, translations, max_tokens=limits.max_tokens)
        return list(zip(translations, pairs, strict=True))

    def on_batch(key: tuple, jobs: list[Job], seconds: float) -> None:
        metrics.batch(key[0], sum(len(job.items) for job in jobs), sum(job.tokens for job in jobs), seconds)

    worker = Worker(run, limits.window, limits.max_tokens, limits.max_queue, on_batch)
    metrics.watch(worker.counts)

    @asynccontextmanager
    async def lifespan(app):
        yield
        # uvicorn has stopped taking connections and waited for those in flight; what is left is refused or dropped.
        finished = await asyncio.to_thread(worker.close, limits.timeout_s)
        outcome = "every request accepted was answered" if finished else "requests still in flight were dropped"
        print(f"vaswani-serve: stopped; {outcome}", file=sys.stderr, flush=True)
        checking_threads.shutdown(wait=False, cancel_futures=True)

    # FastAPIOffline: FastAPI whose /docs and /redoc take Swagger UI and ReDoc from its own package, not a CDN.
    app = FastAPIOffline(
        title="vaswani-serve", description="Attention Is All You Need, translating", lifespan=lifespan
    )
    app.state.worker, app.state.metrics = worker, metrics
    limiter = RateLimit(rate_limit) if rate_limit else None
    failures = None
    if auth_failure_limit:
        failures = RateLimit(auth_failure_limit, "--auth_failure_limit", "failed authentications", "authorization")
    in_flight = InFlight(2 * limits.max_queue)
    app.add_middleware(
        Gate, metrics=metrics, in_flight=in_flight, keys=keys, rate_limit=limiter, auth_failures=failures,
        max_body_bytes=limits.max_body_bytes, body_seconds=limits.body_timeout_s,
    )  # fmt: skip

    def chosen(name: str | None) -> tuple[str, Any, Any]:
        """The served model named `name` (None: the first), with its tokenizer."""
        name = names[0] if name is None else name
        if name not in models:
            raise Refused(404, "model", f"no model named {name!r}; expected one of {names}")
        return name, *models[name]

    async def checked(check, *arguments):
        """`check(*arguments)` on a checking thread: tokenizing stays off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(checking_threads, check, *arguments)

    def lengths(
        name: str, texts: list[str], field_name: str, side: str = "source", limit: int | None = None, layout=None
    ):
        """The texts' lengths in tokens, after the commands' checks (empty, longer than the input limit); `layout`:
        the texts are the sentences of the request's texts, and errors name them by text and first words."""
        model, _ = models[name]
        limit = limit or input_token_limit(model, limits.max_input_tokens)
        try:
            return check_sentences(checker.tokenizer(name), texts, limit, side=side, layout=layout)
        except InputError as refused:
            raise Refused(422, field_name, str(refused)) from refused

    async def work(http: Request, key: tuple, items: list, tokens: int) -> list:
        """The outputs of `items`, worked on by the worker in a batch with whatever arrives with them; dropped when
        the client goes away, refused at the time limit or when the queue is full."""
        loop = asyncio.get_running_loop()
        answer = loop.create_future()

        def done(outputs, failure):
            def settle():
                if not answer.done():
                    answer.set_exception(failure) if failure else answer.set_result(outputs)

            loop.call_soon_threadsafe(settle)

        job = Job(key, items, done, tokens=tokens, deadline=loop.time() + limits.timeout_s)
        try:
            worker.submit(job)
        except Overloaded as busy:
            raise Refused(503, "server", str(busy), {"Retry-After": str(busy.retry_after)}) from busy
        gone = asyncio.ensure_future(disconnected(http))
        try:
            finished, _ = await asyncio.wait(
                {answer, gone}, timeout=job.deadline - loop.time(), return_when="FIRST_COMPLETED"
            )
        finally:
            gone.cancel()
        if answer in finished:
            try:
                return answer.result()
            except ValueError as refused:  # the checks of translate() and generate(): the request's own fault
                raise Refused(422, "body", str(refused)) from refused
            except Cancelled:
                pass  # the worker dropped it at the time limit
        worker.cancel(job)
        if gone in finished:
            metrics.dropped.labels("client gone").inc()
            raise Refused(499, "client", "the client went away; its work was dropped")
        metrics.dropped.labels("time limit").inc()
        raise Refused(504, "server", f"no answer within the time limit of {limits.timeout_s:g} s (--timeout_s)")

    install_error_handlers(app)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page():
        return PAGE.read_text(encoding="utf-8")

    @app.get("/health")
    async def health():
        """What a load balancer needs: whether a request sent now could be taken (200, else 503 and why), and the
        work held against the capacity."""
        queued, running = worker.counts()
        status = "ok"
        if worker.closed:
            status = "shutting down"
        elif queued >= limits.max_queue or in_flight.full:
            status = "full"
        aligning = [name for name in names if isinstance(models[name][0], torch.nn.Module)]  # the page asks these
        answer = {
            "status": status, "ready": status == "ok", "models": names, "aligning": aligning,
            "batches": worker.batches, "queued": queued, "running": running, "in_flight": in_flight.count,
            "capacity": {"queued": limits.max_queue, "in_flight": in_flight.limit},
        }  # fmt: skip
        return JSONResponse(answer, status_code=200 if status == "ok" else 503)

    @app.get("/metrics", include_in_schema=False)
    async def metrics_endpoint():
        return Response(metrics.text(), media_type="text/plain; version=0.0.4; charset=utf-8")

    def check_translation(request: TranslateRequest, name: str, texts, prefixes, labels=None):
        """The sentences to translate (the texts, or with `split_sentences` the sentences they split into, with the
        `Layout` that joins their translations back), their prefixes and lengths, after the translate command's
        checks of the texts and options, each error naming its field (and a sentence, its text and first words);
        what translate() and generate() check again is caught here, before the request joins a batch. `labels`: how
        errors name each of `texts` where they are parts of the request's texts (a document's runs of text)."""
        model, _ = models[name]
        if request.alignments and not isinstance(model, torch.nn.Module):
            raise Refused(
                422, "alignments", f"{name} is a CTranslate2 export; alignments need a PyTorch model's attention "
                "weights (serve the checkpoint it was exported from)",
            )  # fmt: skip
        if request.alignments and request.nbest is not None:
            raise Refused(422, "alignments", "alignments are of each text's one translation; expected no nbest")
        if prefixes is not None and len(prefixes) != len(texts):
            raise Refused(
                422, "target_prefix", f"{len(prefixes)} prefixes for {len(texts)} texts; expected one a text"
            )
        layout, sentences = None, texts
        if request.split_sentences:
            layout = split_input(texts, checker.tokenizer(name), languages.get(name), unit="text", labels=labels)
            sentences = layout.sentences
            within(limits, "text", sentences=len(sentences))  # before any tokenizing
            try:
                if request.nbest is not None:
                    check_one_sentence_a_line(layout)
            except InputError as refused:
                raise Refused(422, "text", str(refused)) from refused
            try:
                prefixes = split_prefixes(layout, prefixes)
            except InputError as refused:
                raise Refused(422, "target_prefix", str(refused)) from refused
        found = lengths(name, sentences, "text", layout=layout)
        within(limits, "text", tokens=sum(found))
        if found and max(found) > limits.max_tokens:
            longest = max(range(len(found)), key=found.__getitem__) + 1
            what = "a text" if layout is None else f"a sentence ({sentence_name(layout, longest)})"
            raise Refused(
                422, "text", f"{what} of {max(found)} tokens is more than the server's batch of {limits.max_tokens}"
            )
        longest = max_output_length(input_token_limit(model, limits.max_input_tokens))  # the longest text's
        if request.max_new_tokens is not None and request.max_new_tokens > longest:
            raise Refused(
                422, "max_new_tokens", f"max_new_tokens {request.max_new_tokens} is more than {longest}, the input "
                f"limit + {OUTPUT_MARGIN} of Section 6.1; expected at most {longest}",
            )  # fmt: skip
        answer = translation_bytes(found, request.nbest, request.max_new_tokens, request.alignments, per_token[name])
        within(limits, "nbest" if request.nbest else "text", answer_bytes=answer)
        room_limits = {"max_new_tokens": request.max_new_tokens} if request.max_new_tokens else {}
        try:
            if request.nbest is not None:
                check_nbest(model, request.nbest, request.num_beams)
        except InputError as refused:
            raise Refused(422, "nbest", str(refused)) from refused
        try:
            room = lambda: output_room(model, found, request.paper_decoding, room_limits)  # noqa: E731
            prefix_ids(checker.tokenizer(name), prefixes, room, layout)
        except InputError as refused:
            raise Refused(422, "target_prefix", str(refused)) from refused
        return layout, sentences, prefixes, found

    def check_terms(request: TranslateRequest, name: str, layout, sentences, prefixes, found):
        """Each sentence's phrases to hold and to avoid (`terminology.sentence_terms`), after refusing what cannot
        be met, naming the field: a CTranslate2 model, constraints without the paper's decoding, a count other than
        one list a text, constraints longer than their sentence's room."""
        given = [(field, value) for field, value in (("constraints", request.constraints), ("avoid", request.avoid),
                 ("glossary", request.glossary)) if value is not None]  # fmt: skip
        if not given:
            return None, None
        field = given[0][0]
        model, _ = models[name]
        if not isinstance(model, torch.nn.Module):
            raise Refused(
                422, field, f"{name} is a CTranslate2 export, which has no lexical constraints: serve the checkpoint "
                "it was exported from (the PyTorch engine)",
            )  # fmt: skip
        if request.constraints is not None and not request.paper_decoding:
            raise Refused(422, "constraints", "constraints need the paper's decoding; expected paper_decoding true")
        try:
            glossary = Glossary.of(request.glossary) if request.glossary is not None else None
            terms = (request.constraints, request.avoid, glossary)
            required, avoided = sentence_terms(layout, sentences, *terms, checker.tokenizer(name))
            if required is not None:
                room = output_room(model, found, request.paper_decoding, {"max_new_tokens": request.max_new_tokens})
                ids = phrase_ids(checker.tokenizer(name), required)
                prefix = prefix_ids(checker.tokenizer(name), prefixes, lambda: room, layout)
                check_room(ids, prefix, room, layout.name if layout is not None else lambda n: f"text {n}")
        except (InputError, ValueError) as refused:  # a TermError names its field: a clash is avoid's
            raise Refused(422, getattr(refused, "field", field), str(refused)) from refused
        return required, avoided

    def parse_documents(request: TranslateRequest, name: str, texts: list[str]) -> list[Document]:
        """The texts parsed as documents of `request.format`, after refusing what markup cannot go with."""
        if not isinstance(models[name][0], torch.nn.Module):
            raise Refused(
                422, "format", f"{name} is a CTranslate2 export; markup is placed by a PyTorch model's attention "
                "weights (serve the checkpoint it was exported from, or format \"text\")",
            )  # fmt: skip
        clashing = [
            field_name
            for field_name, given in (
                ("nbest", request.nbest is not None),
                ("alignments", request.alignments),
                ("target_prefix", request.target_prefix is not None),
                ("split_sentences", not request.split_sentences),
                *((term, True) for term in ("constraints", "avoid", "glossary") if getattr(request, term) is not None),
            )
            if given
        ]
        if clashing:
            raise Refused(
                422, "format", f"format {request.format!r} answers each text with its markup; expected no "
                f"{' and no '.join(clashing)} (or format \"text\")",
            )  # fmt: skip
        documents = []
        for number, text in enumerate(texts):
            try:
                documents.append(Document(text, request.format))
            except ValueError as error:  # a character libxml2 cannot hold
                raise Refused(422, "text", f"text {number + 1}: {error}") from error
        return documents

    @app.post("/translate")
    async def translate_endpoint(request: TranslateRequest, http: Request):
        name, _, _ = chosen(request.model)
        single = isinstance(request.text, str)
        texts = [request.text] if single else request.text
        prefixes = [request.target_prefix] if isinstance(request.target_prefix, str) else request.target_prefix
        bounded(texts, "text", limits)
        if prefixes is not None:
            bounded(prefixes, "target_prefix", limits)
        documents = labels = None
        if request.format != "text":  # the documents' runs of text are translated, aligned where they hold tags
            documents = await checked(parse_documents, request, name, texts)
            runs = [run for document in documents for run in document.runs]
            labels = [f"text {number}" for number, document in enumerate(documents, 1) for _ in document.runs]
            texts = [run.text for run in runs]
            request = request.model_copy(update={"alignments": any(run.tags for run in runs)})
        layout, sentences, prefixes, found = await checked(
            check_translation, request, name, texts, prefixes, labels
        )  # fmt: skip
        key = (
            "translate", name, request.num_beams, request.paper_decoding, request.nbest, request.max_new_tokens,
            request.alignments,
        )  # fmt: skip
        required, avoided = await checked(check_terms, request, name, layout, sentences, prefixes, found)
        none = [None] * len(sentences)
        items = list(zip(sentences, prefixes or none, required or none, avoided or none, strict=True))
        outputs = await work(http, key, items, sum(found)) if items else []  # only blank texts: nothing to do
        pairs = None
        if request.alignments:  # (translation, pairs) a sentence; pairs in each text's word positions
            outputs, pairs = [text for text, _ in outputs], [links for _, links in outputs]
            if layout is not None:
                pairs = line_alignments(layout, outputs, pairs)
        if layout is not None and request.nbest is not None:  # one sentence a text at most: its list, or none
            outputs = [outputs[start] if layout.count(i) else [] for i, start in enumerate(layout.starts)]
        elif layout is not None:
            outputs = layout.join(outputs)
        if documents is not None:
            outputs = write_documents(documents, outputs, pairs or [[] for _ in outputs])
            pairs = None  # they placed the tags; the request asked for none
        answer = {"model": name, "translations": outputs[0] if single else outputs}
        if pairs is not None:
            answer["alignments"] = pairs[0] if single else pairs
        return answer

    def check_score(name: str, sources: list[str], targets: list[str]) -> int:
        if len(sources) != len(targets):
            raise Refused(422, "target", f"{len(targets)} targets for {len(sources)} sources; expected one each")
        found = lengths(name, sources, "source")
        found_targets = lengths(name, targets, "target", side="target")
        longest = max(s + t for s, t in zip(found, found_targets, strict=True))
        if longest > limits.max_tokens:
            raise Refused(
                422, "source", f"a pair of {longest} tokens is more than the server's batch of {limits.max_tokens}"
            )
        within(limits, "source", tokens=sum(found))
        within(limits, "target", answer_bytes=sum((n + 4) * FLOAT_BYTES for n in found_targets))
        return sum(found)

    @app.post("/score")
    async def score_endpoint(request: ScoreRequest, http: Request):
        name, _, _ = chosen(request.model)
        bounded(request.source, "source", limits)
        bounded(request.target, "target", limits)
        tokens = await checked(check_score, name, request.source, request.target)
        scores = await work(http, ("score", name), list(zip(request.source, request.target, strict=True)), tokens)
        return {"model": name, "scores": scores}

    def check_attention(name: str, model, request: AttentionRequest) -> int:
        limit = min(limits.max_attention_tokens, input_token_limit(model, limits.max_input_tokens))
        (found,) = lengths(name, [request.text], "text", limit=limit)
        config = model.config
        for field_name, chosen_ones, count in (
            ("layers", request.layers, min(config.encoder_layers, config.decoder_layers)),  # in each stack
            ("heads", request.heads, config.num_heads),
        ):
            if chosen_ones is not None and max(chosen_ones) >= count:
                raise Refused(422, field_name, f"{field_name} {chosen_ones}; the model has {count}, counted from 0")
        answer = attention_bytes(config, found, request.layers, request.heads, per_token[name])
        within(limits, "layers" if request.layers else "text", answer_bytes=answer)
        return found

    def attention_answer(name: str, model, tokenizer, text: str, layers, heads) -> bytes:
        """The /attention answer, as JSON bytes (built here, on the worker, not on the event loop)."""
        outputs, source, target = attention_maps(model, tokenizer, text)
        answer = {"model": name, "source_tokens": source, "target_tokens": target}
        for kind, (field_name, _) in ATTENTION_KINDS.items():
            maps = getattr(outputs, field_name)
            kept = [maps[i][0] for i in (layers if layers is not None else range(len(maps)))]
            answer[kind] = [
                (layer if heads is None else layer[heads]).double().round(decimals=ATTENTION_DIGITS).tolist()
                for layer in kept
            ]
        return json.dumps(answer).encode()

    @app.post("/attention")
    async def attention_endpoint(request: AttentionRequest, http: Request):
        name, model, _ = chosen(request.model)
        if not isinstance(model, torch.nn.Module):
            raise Refused(422, "model", f"{name} is a CTranslate2 export; attention needs a PyTorch model")
        bounded([request.text], "text", limits)
        unique(request.layers, "layers")
        unique(request.heads, "heads")
        tokens = await checked(check_attention, name, model, request)
        item = (request.text, request.layers, request.heads)
        (content,) = await work(http, ("attention", name), [item], tokens)
        return Response(content, media_type="application/json")

    return app


async def disconnected(http: Request) -> None:
    """Returns once the client has gone (the body was read already, so the next message is the disconnect)."""
    while (await http.receive())["type"] != "http.disconnect":
        pass


SHORT = reprlib.Repr()  # a value named in an error: short, however large or deep the value
SHORT.maxlevel, SHORT.maxstring, SHORT.maxother, SHORT.maxlist, SHORT.maxdict = 2, 80, 80, 4, 4


def install_error_handlers(app: FastAPI) -> None:
    """Every refusal in the API's one shape, whoever raised it: ours, pydantic's and Starlette's (a body that is not
    UTF-8 or is nested too deep, an unknown path or method), and a 500 that names no internals for the rest."""

    @app.exception_handler(Refused)
    async def refused(request: Request, error: Refused):
        return error_response(error.status, error.field_name, error.message, error.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError):
        first = error.errors()[0]
        if first.get("type") == "json_invalid":
            context = first.get("ctx", {}).get("error", "")
            return error_response(400, "body", f"the body is not valid JSON ({context}); expected a JSON object")
        # loc holds the field's path, and for a union the member tried ("list[constrained-str]"): the path is kept.
        path = [str(part) for part in first.get("loc", ())[1:] if isinstance(part, int) or part.isidentifier()]
        where = ".".join(path) or "body"
        return error_response(422, where, f"{first.get('msg')}; got {SHORT.repr(first.get('input'))}")

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException):
        fields = {400: "body", 404: "path", 405: "method"}
        message = str(error.detail)
        if error.status_code == 400:  # Starlette's "There was an error parsing the body": not UTF-8, too deep
            message = "the body could not be read as JSON (not UTF-8, or nested too deep); expected a JSON object"
        return error_response(error.status_code, fields.get(error.status_code, "request"), message, error.headers)

    @app.exception_handler(Exception)
    async def failed(request: Request, error: Exception):
        return error_response(500, "server", f"the server failed ({type(error).__name__}); see its log")


class GracefulServer(Server):
    """uvicorn's server, saying what a stop signal (SIGTERM, Ctrl-C) does: uvicorn takes no more connections and
    waits up to --timeout_s for the requests in flight, which the worker finishes while refusing new work (503);
    a second signal stops at once."""

    def __init__(self, config: Config, worker: Worker):
        super().__init__(config)
        self.worker = worker

    def handle_exit(self, sig: int, frame) -> None:
        if not self.should_exit:
            queued, running = self.worker.counts()
            print(
                f"vaswani-serve: {signal.Signals(sig).name}: finishing the {queued + running} requests in flight "
                f"(at most {self.config.timeout_graceful_shutdown} s) and refusing new ones",
                file=sys.stderr,
                flush=True,
            )
            self.worker.refuse_new()
        super().handle_exit(sig, frame)


def headers_in_time(seconds: float) -> type:
    """uvicorn's h11 protocol, closing a connection whose next request's headers are not whole `seconds` after it
    opened or after its last answer: uvicorn bounds no request's arrival (its keep-alive timeout restarts at every
    byte), and the gate sees a request only once its headers are whole, so a connection that sends nothing or half
    its headers was held for ever. It reads uvicorn's internals (`cycle`, a request's, replaced once the next one's
    headers are whole; `on_response_complete`), checked here so that a uvicorn without them fails at startup."""
    if not callable(getattr(H11Protocol, "on_response_complete", None)):
        raise RuntimeError("uvicorn's H11Protocol has no on_response_complete: the header deadline needs updating")

    class HeadersInTime(H11Protocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self.wait_for_headers()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self.wait_for_headers()

        def wait_for_headers(self) -> None:
            answered = self.cycle  # None on a new connection

            def late():
                if self.cycle is answered and not self.transport.is_closing():
                    self.transport.close()

            self.loop.call_later(seconds, late)

    return HeadersInTime


def serve(app: FastAPI, sock: socket.socket, timeout_s: int, body_timeout_s: float) -> None:
    """Runs `app` on the listening socket `sock` until a stop signal, a request's headers due within `body_timeout_s`
    (and its body within as long again, the gate's)."""
    config = Config(
        app, log_level="info", access_log=False, timeout_graceful_shutdown=timeout_s,
        http=headers_in_time(body_timeout_s),
    )  # fmt: skip
    GracefulServer(config, app.state.worker).run(sockets=[sock])
