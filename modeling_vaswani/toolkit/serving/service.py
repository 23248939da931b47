"""vaswani-serve's translation service, apart from HTTP: the models served, each request's checks, the one worker
thread that runs its batches, and each answer's content. The app (`server.py`) routes requests to it and shapes its
refusals; tests build it without the app.

What a request goes through here, each step in one place:
1. on the event loop, cheap and before any tokenizing: the model named, `bounds.check_texts` (the count of texts,
   their characters, lone surrogates) and `bounds.distinct` (a layer or head given twice);
2. on checking threads with tokenizers of their own (`worker.Checker`): the texts split into sentences (unless
   `split_sentences` is false), the checks that tokenize (lengths, prefixes, options, terms), and `bounds.within`,
   the one bound on a request's work (its sentences once split, its tokens, its answer's estimated size);
3. the work, on the one worker thread (`worker.Worker`: a bounded queue, batches, a time limit, dropped when the
   client is gone), which alone runs the models and pads with their tokenizers. No request changes state another
   reads.
"""

import asyncio
import json
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import torch
from transformers import StoppingCriteriaList

from ...search_vaswani import OUTPUT_MARGIN, max_output_length
from ..data.markup import Document, write_documents
from ..evaluation.plotting import ATTENTION_KINDS, attention_maps
from ..translation.alignment import line_alignments, request_alignments
from ..translation.engines import CAPABILITIES, engine_of
from ..translation.request import CheckedRequest, Spelling, TranslationRequest
from ..translation.scoring import score
from ..translation.terminology import check_room, phrase_ids, sentence_terms
from ..translation.translate import (
    InputError,
    check_one_sentence_a_line,
    check_sentences,
    decode_nbest,
    decode_request,
    input_token_limit,
    output_room,
    prefix_ids,
    sentence_name,
    split_input,
    split_prefixes,
)
from .bodies import AttentionRequest, ScoreRequest, TranslateRequest
from .bounds import (
    FLOAT_BYTES,
    Limits,
    attention_bytes,
    check_texts,
    distinct,
    token_bytes,
    translation_bytes,
    within,
)
from .gate import Refused
from .metrics import Metrics
from .worker import BatchKey, Cancelled, Checker, Job, Overloaded, Stop, Worker

ATTENTION_DIGITS = 6  # attention weights are sent rounded to 6 decimals (a 1e-6 step): 8-9 bytes a weight in JSON
API = Spelling(names={"target_prefixes": "target_prefix"})  # how refusals name a request's fields: as the API does


class TranslateOptions(NamedTuple):
    """What a /translate request asks of the search, its batch key's options: only equal ones share a batch."""

    num_beams: int | None
    paper_decoding: bool
    nbest: int | None
    max_new_tokens: int | None
    alignments: bool

    @classmethod
    def of(cls, request: TranslateRequest) -> "TranslateOptions":
        return cls(*(getattr(request, name) for name in cls._fields))


class PreparedTexts(NamedTuple):
    """What a /translate request's checks prepared: the sentences to translate (with the `layout` that joins their
    translations back, None where the texts are translated whole), their prefixes and lengths in tokens, the tokens
    each translation may have (`room`, Section 6.1's or `max_new_tokens`), and the prefixes as token ids."""

    layout: object
    sentences: list[str]
    prefixes: list[str] | None
    source_lengths: list[int]
    room: list[int]
    prefix_ids: list[list[int]] | None


class Sentence(NamedTuple):
    """One sentence of a /translate request, as the worker translates it: with its target prefix and its phrases to
    hold (the glossary's target terms among them) and to avoid, None where it has none."""

    text: str
    prefix: str | None = None
    constraints: list[str] | None = None
    avoid: list[str] | None = None


class Pair(NamedTuple):
    """One pair of a /score request."""

    source: str
    target: str


class AttentionText(NamedTuple):
    """An /attention request's text, with the layers and heads to show (None: all)."""

    text: str
    layers: list[int] | None = None
    heads: list[int] | None = None


def never() -> Awaitable:
    """A client that never goes away: the service used without HTTP."""
    return asyncio.get_running_loop().create_future()


class TranslationService:
    """Translating, scoring and showing attention with `models` ({name: (model, tokenizer)}, loaded once; the first is
    the default), within `limits` (default: vaswani-serve's). `languages` ({name: code or None}): each model's source
    language, whose rules split texts into sentences (a model not named: the language its tokenizer records, else
    sentencex's generic rules). Refusals are `gate.Refused`, naming the field. Its coroutines run on one event loop;
    `close` ends its threads."""

    def __init__(self, models: dict, limits: Limits | None = None, languages: dict | None = None):
        limits = limits or Limits()
        for model, _ in models.values():
            input_token_limit(model, limits.max_input_tokens)  # refuses a limit beyond an export's position table
        self.models, self.names, self.limits = models, list(models), limits
        self.languages = languages or {}
        self.metrics = Metrics()
        self.per_token = {name: token_bytes(tokenizer) for name, (_, tokenizer) in models.items()}
        self.checker = Checker({name: tokenizer for name, (_, tokenizer) in models.items()})
        self.checking_threads = ThreadPoolExecutor(max_workers=2, thread_name_prefix="vaswani-serve-check")
        self.worker = Worker(self.execute_batch, limits.window, limits.max_tokens, limits.max_queue, self.on_batch)
        self.metrics.watch(self.worker.counts)

    @property
    def aligning(self) -> list[str]:
        """The models whose attention answers alignments, markup and /attention: those whose engine gives it."""
        return [name for name in self.names if "attention" in engine_of(self.models[name][0]).can]

    def close(self, timeout: float) -> bool:
        """Refuses new work and waits up to `timeout` seconds for the work accepted; whether all of it finished."""
        finished = self.worker.close(timeout)
        self.checking_threads.shutdown(wait=False, cancel_futures=True)
        return finished

    def model_named(self, name: str | None) -> tuple[str, object, object]:
        """The served model named `name` (None: the first), with its tokenizer."""
        name = self.names[0] if name is None else name
        if name not in self.models:
            raise Refused(404, "model", f"no model named {name!r}; expected one of {self.names}")
        return name, *self.models[name]

    async def on_checking_thread(self, check: Callable, *arguments):
        """`check(*arguments)` on a checking thread: tokenizing stays off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self.checking_threads, check, *arguments)

    # === /translate ==================================================================================================

    async def translate(self, request: TranslateRequest, gone: Callable[[], Awaitable] = never) -> dict:
        """The /translate answer: the texts' translations (a string or a list, as `text` was), with their alignments
        where asked. `gone`: returns once the client has gone, whose work is then dropped."""
        name, _, _ = self.model_named(request.model)
        single = isinstance(request.text, str)
        texts = [request.text] if single else request.text
        prefixes = [request.target_prefix] if isinstance(request.target_prefix, str) else request.target_prefix
        check_texts(texts, "text", self.limits)
        if prefixes is not None:
            check_texts(prefixes, "target_prefix", self.limits)
        translation_request = await self.on_checking_thread(self.check_request, request, name, prefixes)
        documents = labels = None
        if request.format != "text":  # the documents' runs of text are translated, aligned where they hold tags
            documents = await self.on_checking_thread(self.parse_documents, request, texts)
            runs = [run for document in documents for run in document.runs]
            labels = [f"text {number}" for number, document in enumerate(documents, 1) for _ in document.runs]
            texts = [run.text for run in runs]
            request = request.model_copy(update={"alignments": any(run.tags for run in runs)})
        prepared = await self.on_checking_thread(self.check_translation, request, name, texts, prefixes, labels)
        required, avoided = await self.on_checking_thread(self.check_phrases, translation_request, name, prepared)
        layout, sentences = prepared.layout, prepared.sentences
        none = [None] * len(sentences)
        items = [
            Sentence(*fields)
            for fields in zip(sentences, prepared.prefixes or none, required or none, avoided or none, strict=True)
        ]
        key = BatchKey("translate", name, TranslateOptions.of(request))
        outputs = (
            await self.batch_outputs(key, items, sum(prepared.source_lengths), gone) if items else []
        )  # blank texts
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

    def check_request(self, request: TranslateRequest, name: str, prefixes) -> CheckedRequest:
        """The request as the translation library checks every request (`TranslationRequest.check_for` the served
        model: the one home of the refusals a translation can get by what it asks: options that do not go together,
        what the served model's engine cannot do, an n-best list past the beam), before any tokenizing; refusals name
        the API's field. Its one check: the worker runs its sentences as checked."""
        model, _ = self.models[name]
        asked = TranslationRequest(
            num_beams=request.num_beams, paper_decoding=request.paper_decoding, nbest=request.nbest,
            max_new_tokens=request.max_new_tokens, target_prefixes=prefixes, constraints=request.constraints,
            avoid=request.avoid, glossary=request.glossary, alignments=request.alignments, format=request.format,
            split_sentences=request.split_sentences,
        )  # fmt: skip
        try:
            return asked.check_for(model, name, API)
        except ValueError as refused:  # a RequestError, or an argument's rule: each names its field
            raise Refused(422, API.name(getattr(refused, "field", "body")), str(refused)) from refused

    def token_lengths(
        self, name: str, texts: list[str], field_name: str, side: str = "source", limit: int | None = None, layout=None
    ) -> list[int]:
        """The texts' lengths in tokens, after the commands' checks (empty, longer than the input limit); `layout`:
        the texts are the sentences of the request's texts, and errors name them by text and first words."""
        model, _ = self.models[name]
        limit = limit or input_token_limit(model, self.limits.max_input_tokens)
        try:
            return check_sentences(self.checker.tokenizer(name), texts, limit, side=side, layout=layout)
        except InputError as refused:
            raise Refused(422, field_name, str(refused)) from refused

    def check_translation(
        self, request: TranslateRequest, name: str, texts, prefixes, labels=None
    ) -> PreparedTexts:  # fmt: skip
        """The sentences to translate (the texts, or with `split_sentences` the sentences they split into, with the
        `Layout` that joins their translations back), their prefixes, lengths and room, after the checks that
        tokenize (each once: lengths, prefixes and the room they leave), each error naming its field (and a
        sentence, its text and first words), before the request joins a batch. `labels`: how errors name each of
        `texts` where they are parts of the request's texts (a document's runs of text)."""
        limits = self.limits
        model, _ = self.models[name]
        if prefixes is not None and len(prefixes) != len(texts):
            raise Refused(
                422, "target_prefix", f"{len(prefixes)} prefixes for {len(texts)} texts; expected one a text"
            )
        layout, sentences = None, texts
        if request.split_sentences:
            layout = split_input(
                texts, self.checker.tokenizer(name), self.languages.get(name), unit="text", labels=labels
            )  # fmt: skip
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
        source_lengths = self.token_lengths(name, sentences, "text", layout=layout)
        within(limits, "text", tokens=sum(source_lengths))
        if source_lengths and max(source_lengths) > limits.max_tokens:
            longest = max(range(len(source_lengths)), key=source_lengths.__getitem__) + 1
            what = "a text" if layout is None else f"a sentence ({sentence_name(layout, longest)})"
            raise Refused(
                422, "text", f"{what} of {max(source_lengths)} tokens is more than the server's batch of "
                f"{limits.max_tokens}",
            )  # fmt: skip
        longest = max_output_length(input_token_limit(model, limits.max_input_tokens))  # the longest text's
        if request.max_new_tokens is not None and request.max_new_tokens > longest:
            raise Refused(
                422, "max_new_tokens", f"max_new_tokens {request.max_new_tokens} is more than {longest}, the input "
                f"limit + {OUTPUT_MARGIN} of Section 6.1; expected at most {longest}",
            )  # fmt: skip
        answer = translation_bytes(
            source_lengths, request.nbest, request.max_new_tokens, request.alignments, self.per_token[name]
        )  # fmt: skip
        within(limits, "nbest" if request.nbest else "text", answer_bytes=answer)
        room = output_room(model, source_lengths, request.paper_decoding, {"max_new_tokens": request.max_new_tokens})
        try:
            ids = prefix_ids(self.checker.tokenizer(name), prefixes, lambda: room, layout)
        except InputError as refused:
            raise Refused(422, "target_prefix", str(refused)) from refused
        return PreparedTexts(layout, sentences, prefixes, source_lengths, room, ids)

    def check_phrases(self, request: TranslationRequest, name: str, prepared: PreparedTexts):
        """Each sentence's phrases to hold and to avoid (`terminology.sentence_terms`) of the checked `request`, after
        refusing what cannot be met, naming the field: a count other than one list a text, a phrase to avoid inside
        one to hold, constraints longer than their sentence's room (`prepared.room`, with its prefix)."""
        given = [field for field in ("constraints", "avoid", "glossary") if getattr(request, field) is not None]
        if not given:
            return None, None
        tokenizer = self.checker.tokenizer(name)
        layout = prepared.layout
        try:
            terminology = (request.constraints, request.avoid, request.glossary)
            required, avoided = sentence_terms(layout, prepared.sentences, *terminology, tokenizer)
            if required is not None:
                ids = phrase_ids(tokenizer, required)
                check_room(
                    ids,
                    prepared.prefix_ids,
                    prepared.room,
                    layout.name if layout is not None else lambda n: f"text {n}",
                )
        except (InputError, ValueError) as refused:  # a TermError names its field: a clash is avoid's
            raise Refused(422, getattr(refused, "field", given[0]), str(refused)) from refused
        return required, avoided

    def parse_documents(self, request: TranslateRequest, texts: list[str]) -> list[Document]:
        """The texts parsed as documents of `request.format` (what markup cannot go with was refused by the request's
        check), a text that markup cannot hold refused."""
        documents = []
        for number, text in enumerate(texts):
            try:
                documents.append(Document(text, request.format))
            except ValueError as error:  # a character libxml2 cannot hold
                raise Refused(422, "text", f"text {number + 1}: {error}") from error
        return documents

    def translate_batch(self, model, tokenizer, sentences: list[Sentence], options: TranslateOptions, stop: Stop):
        """A batch of sentences translated as `options` ask, on the worker thread: one output a sentence (its
        translation; with alignments, (translation, pairs); with nbest, its list of hypotheses). Each sentence's
        request was checked on the event loop (`check_request`), and a batch joins only requests of equal options:
        the batch runs as a checked request, without a second check."""
        prefixes = None
        if any(sentence.prefix is not None for sentence in sentences):
            prefixes = [sentence.prefix or "" for sentence in sentences]
        phrases = {
            field: [getattr(sentence, field) or [] for sentence in sentences]
            for field in ("constraints", "avoid")
            if any(getattr(sentence, field) for sentence in sentences)
        }
        # The items are sentences already (split, where the request asked, by its checks): each translated whole.
        batch = CheckedRequest(
            texts=[sentence.text for sentence in sentences], num_beams=options.num_beams or None,
            paper_decoding=options.paper_decoding, nbest=options.nbest, max_new_tokens=options.max_new_tokens or None,
            target_prefixes=prefixes, split_sentences=False, max_tokens=self.limits.max_tokens, progress=False,
            **phrases,
        )  # fmt: skip
        stopping = {}
        if isinstance(model, torch.nn.Module):  # CTranslate2 decodes a batch in one call, with no step to stop at
            stopping["stopping_criteria"] = StoppingCriteriaList([stop.criteria])
        if options.nbest:
            lists = decode_nbest(model, tokenizer, batch, **stopping)
            return [[{"translation": h.text, "score": h.score} for h in hypotheses] for hypotheses in lists]
        _, texts, translations = decode_request(model, tokenizer, batch, **stopping)
        if not options.alignments:
            return translations
        pairs = request_alignments(model, tokenizer, texts, translations, batch)
        return list(zip(translations, pairs, strict=True))

    # === /score ======================================================================================================

    async def score(self, request: ScoreRequest, gone: Callable[[], Awaitable] = never) -> dict:
        """The /score answer: each pair's total and mean log-probability, tokens and per-token log-probabilities."""
        name, _, _ = self.model_named(request.model)
        check_texts(request.source, "source", self.limits)
        check_texts(request.target, "target", self.limits)
        tokens = await self.on_checking_thread(self.check_score, name, request.source, request.target)
        pairs = [Pair(*pair) for pair in zip(request.source, request.target, strict=True)]
        scores = await self.batch_outputs(BatchKey("score", name), pairs, tokens, gone)
        return {"model": name, "scores": scores}

    def check_score(self, name: str, sources: list[str], targets: list[str]) -> int:
        """The pairs' source tokens, after refusing pairs that are not one target a source, or too long."""
        if len(sources) != len(targets):
            raise Refused(422, "target", f"{len(targets)} targets for {len(sources)} sources; expected one each")
        source_lengths = self.token_lengths(name, sources, "source")
        target_lengths = self.token_lengths(name, targets, "target", side="target")
        longest = max(s + t for s, t in zip(source_lengths, target_lengths, strict=True))
        if longest > self.limits.max_tokens:
            raise Refused(
                422, "source", f"a pair of {longest} tokens is more than the server's batch of "
                f"{self.limits.max_tokens}",
            )  # fmt: skip
        within(self.limits, "source", tokens=sum(source_lengths))
        within(self.limits, "target", answer_bytes=sum((n + 4) * FLOAT_BYTES for n in target_lengths))
        return sum(source_lengths)

    def score_batch(self, model, tokenizer, pairs: list[Pair]) -> list[dict]:
        sources, targets = zip(*pairs, strict=True)
        scores = score(model, tokenizer, sources, targets, max_tokens=self.limits.max_tokens, progress=False)
        return [{"total": s.total, "mean": s.mean, "tokens": s.tokens, "log_probs": s.log_probs} for s in scores]

    # === /attention ==================================================================================================

    async def attention(self, request: AttentionRequest, gone: Callable[[], Awaitable] = never) -> bytes:
        """The /attention answer as JSON bytes: the text's and its translation's tokens, and each kind's weights of
        the layers and heads asked."""
        name, model, _ = self.model_named(request.model)
        engine, attention = engine_of(model), CAPABILITIES["attention"]
        if "attention" not in engine.can:
            message = f"{name} runs on {engine.title}, which {attention.lack}; /attention needs {attention.need}"
            raise Refused(422, "model", f"{message}: {engine.instead}" if engine.instead else message)
        check_texts([request.text], "text", self.limits)
        distinct(request.layers, "layers")
        distinct(request.heads, "heads")
        tokens = await self.on_checking_thread(self.check_attention, name, model, request)
        item = AttentionText(request.text, request.layers, request.heads)
        (content,) = await self.batch_outputs(BatchKey("attention", name), [item], tokens, gone)
        return content

    def check_attention(self, name: str, model, request: AttentionRequest) -> int:
        """The text's tokens, after refusing a text over --max_attention_tokens, layers or heads the model has not,
        and an answer over --max_answer_bytes."""
        limit = min(self.limits.max_attention_tokens, input_token_limit(model, self.limits.max_input_tokens))
        (length,) = self.token_lengths(name, [request.text], "text", limit=limit)
        config = model.config
        for field_name, asked, count in (
            ("layers", request.layers, min(config.encoder_layers, config.decoder_layers)),  # in each stack
            ("heads", request.heads, config.num_heads),
        ):
            if asked is not None and max(asked) >= count:
                raise Refused(422, field_name, f"{field_name} {asked}; the model has {count}, counted from 0")
        answer = attention_bytes(config, length, request.layers, request.heads, self.per_token[name])
        within(self.limits, "layers" if request.layers else "text", answer_bytes=answer)
        return length

    def attention_json(self, name: str, model, tokenizer, item: AttentionText) -> bytes:
        """The /attention answer, as JSON bytes (built on the worker, not on the event loop)."""
        outputs, source, target = attention_maps(model, tokenizer, item.text)
        answer = {"model": name, "source_tokens": source, "target_tokens": target}
        for kind, (field_name, _) in ATTENTION_KINDS.items():
            maps = getattr(outputs, field_name)
            kept = [maps[i][0] for i in (item.layers if item.layers is not None else range(len(maps)))]
            answer[kind] = [
                (layer if item.heads is None else layer[item.heads]).double().round(decimals=ATTENTION_DIGITS).tolist()
                for layer in kept
            ]
        return json.dumps(answer).encode()

    # === the worker ==================================================================================================

    def execute_batch(self, key: BatchKey, items: list, stop: Stop) -> list:
        """A batch's work, on the worker thread: one output per item."""
        model, tokenizer = self.models[key.model]
        if key.kind == "translate":
            return self.translate_batch(model, tokenizer, items, key.options, stop)
        if key.kind == "score":
            return self.score_batch(model, tokenizer, items)
        return [self.attention_json(key.model, model, tokenizer, item) for item in items]

    def on_batch(self, key: BatchKey, jobs: list[Job], seconds: float) -> None:
        self.metrics.batch(key.kind, sum(len(job.items) for job in jobs), sum(job.tokens for job in jobs), seconds)

    async def batch_outputs(self, key: BatchKey, items: list, tokens: int, gone: Callable[[], Awaitable]) -> list:
        """The outputs of `items`, worked on by the worker in a batch with whatever arrives with them; dropped when
        the client goes away (`gone` returns), refused at the time limit or when the queue is full."""
        loop = asyncio.get_running_loop()
        answer = loop.create_future()

        def done(outputs, failure):
            def settle():
                if not answer.done():
                    answer.set_exception(failure) if failure else answer.set_result(outputs)

            loop.call_soon_threadsafe(settle)

        job = Job(key, items, done, tokens=tokens, deadline=loop.time() + self.limits.timeout_s)
        try:
            self.worker.submit(job)
        except Overloaded as busy:
            raise Refused(503, "server", str(busy), {"Retry-After": str(busy.retry_after)}) from busy
        client_gone = asyncio.ensure_future(gone())
        try:
            finished, _ = await asyncio.wait(
                {answer, client_gone}, timeout=job.deadline - loop.time(), return_when="FIRST_COMPLETED"
            )
        finally:
            client_gone.cancel()
        if answer in finished:
            try:
                return answer.result()
            except ValueError as refused:  # the checks of translate() and generate(): the request's own fault
                raise Refused(422, "body", str(refused)) from refused
            except Cancelled:
                pass  # the worker dropped it at the time limit
        self.worker.cancel(job)
        if client_gone in finished:
            self.metrics.dropped.labels("client gone").inc()
            raise Refused(499, "client", "the client went away; its work was dropped")
        self.metrics.dropped.labels("time limit").inc()
        raise Refused(504, "server", f"no answer within the time limit of {self.limits.timeout_s:g} s (--timeout_s)")
