"""vaswani-serve's HTTP API: translate, score and attention on models loaded once, requests that arrive together
translated together (a short collection window, a token budget a batch), the checks of the commands, 4xx JSON errors.

Built on FastAPI (Starlette) and run by uvicorn, the `serve` extra; fastapi-offline serves /docs without a CDN. The
model work runs on one worker thread, so the event loop keeps accepting requests while a batch is translated; requests
of the same options that arrive within `window` seconds of each other share a batch.
"""

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import torch

try:
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import HTMLResponse, JSONResponse
    from fastapi_offline import FastAPIOffline
    from pydantic import BaseModel, ConfigDict, Field
except ImportError as error:
    raise ImportError(
        f"the serve extra is not installed ({error}); vaswani-serve needs it: pip install modeling_vaswani[serve]"
    ) from error

from ...generation_vaswani import OUTPUT_MARGIN
from ..evaluation.plotting import ATTENTION_KINDS, attention_maps
from ..evaluation.scoring import score
from ..evaluation.translate import (
    InputError,
    check_nbest,
    check_sentences,
    input_token_limit,
    output_room,
    prefix_ids,
    translate,
    translate_nbest,
)

MAX_TEXTS = 256  # sentences a request may hold
PAGE = Path(__file__).with_name("page.html")  # the page at /: self-contained, it talks only to this server


class Strict(BaseModel):
    """A request's body: no field the API does not know, no value of another type ("4" is no beam count)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class TranslateRequest(Strict):
    """A text or a list of them, and what vaswani-translate's flags set."""

    text: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1, max_length=MAX_TEXTS)] | str
    model: str | None = Field(None, description="a served model's name (default: the first)")
    num_beams: Annotated[int, Field(ge=1, le=32)] | None = None
    paper_decoding: bool = True
    nbest: Annotated[int, Field(ge=1, le=32)] | None = None
    max_new_tokens: Annotated[int, Field(ge=1)] | None = None
    target_prefix: list[str] | str | None = None


class ScoreRequest(Strict):
    model: str | None = None
    source: Annotated[list[str], Field(min_length=1, max_length=MAX_TEXTS)]
    target: Annotated[list[str], Field(min_length=1, max_length=MAX_TEXTS)]


class AttentionRequest(Strict):
    model: str | None = None
    text: Annotated[str, Field(min_length=1)]


@dataclass
class Job:
    """One request's sentences and options, waiting for the worker; `done` is set on the event loop's side."""

    key: tuple
    sentences: list[str]
    prefixes: list[str] | None
    done: Callable[[Any, BaseException | None], None]
    tokens: int = 0
    arrived: float = field(default_factory=time.monotonic)


class Batcher:
    """Collects the jobs that arrive within `window` seconds (up to `max_tokens` source tokens) and translates those
    of the same options as one batch, on one worker thread. Written by hand: no ASGI library batches requests."""

    def __init__(self, run: Callable[[tuple, list[str], list[str] | None], list], window: float, max_tokens: int):
        self.run, self.window, self.max_tokens = run, window, max_tokens
        self.jobs: list[Job] = []
        self.ready = threading.Condition()
        self.batches = 0
        threading.Thread(target=self.work, daemon=True, name="vaswani-serve-worker").start()

    def submit(self, job: Job) -> None:
        with self.ready:
            self.jobs.append(job)
            self.ready.notify()

    def work(self) -> None:
        while True:
            with self.ready:
                while not self.jobs:
                    self.ready.wait()
                first = self.jobs[0]
            time.sleep(max(0.0, first.arrived + self.window - time.monotonic()))
            with self.ready:
                taken, budget = [], self.max_tokens
                for job in list(self.jobs):
                    if job.key == first.key and (not taken or job.tokens <= budget):
                        taken.append(job)
                        budget -= job.tokens
                        self.jobs.remove(job)
            self.batches += 1
            sentences = [s for job in taken for s in job.sentences]
            prefixes = None
            if any(job.prefixes is not None for job in taken):
                prefixes = [p for job in taken for p in (job.prefixes or [""] * len(job.sentences))]
            try:
                outputs = self.run(first.key, sentences, prefixes)
                error = None
            except BaseException as failure:  # handed to each request, which answers with it
                outputs, error = None, failure
            start = 0
            for job in taken:
                part = None if outputs is None else outputs[start : start + len(job.sentences)]
                start += len(job.sentences)
                job.done(part, error)


class Refused(Exception):
    """A request the server will not run: answered with `status` and the JSON error naming `field`."""

    def __init__(self, status: int, field_name: str, message: str):
        super().__init__(message)
        self.status, self.field_name, self.message = status, field_name, message


def error_response(status: int, field_name: str, message: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": {"field": field_name, "message": message}})


def create_app(
    models: dict, window: float = 0.01, max_tokens: int = 4000, max_input_tokens: int | None = None
) -> FastAPI:
    """The API over `models` ({name: (model, tokenizer)}, loaded once; the first is the default): requests arriving
    within `window` seconds share a batch of up to `max_tokens` source tokens; a text longer than `max_input_tokens`
    (default: each model's max_position_embeddings) is refused."""
    names = list(models)
    for model, _ in models.values():
        input_token_limit(model, max_input_tokens)  # refuses a limit beyond an export's position table
    # FastAPIOffline: FastAPI whose /docs and /redoc take Swagger UI and ReDoc from its own package, not a CDN.
    app = FastAPIOffline(title="vaswani-serve", description="Attention Is All You Need, translating")

    def chosen(name: str | None) -> tuple[str, Any, Any]:
        """The served model named `name` (None: the first), with its tokenizer."""
        name = names[0] if name is None else name
        if name not in models:
            raise Refused(404, "model", f"no model named {name!r}; expected one of {names}")
        return name, *models[name]

    def checked(model, tokenizer, texts: list[str], field_name: str, side: str = "source") -> list[int]:
        """The texts' lengths in tokens, after the commands' checks (empty, longer than the model's positions)."""
        try:
            return check_sentences(tokenizer, texts, input_token_limit(model, max_input_tokens), side=side)
        except InputError as refused:
            raise Refused(422, field_name, str(refused)) from refused

    def run(key: tuple, sentences: list[str], prefixes: list[str] | None) -> list:
        name, num_beams, paper_decoding, nbest, max_new_tokens = key
        model, tokenizer = models[name]
        settings = {"paper_decoding": paper_decoding, "max_tokens": max_tokens, "progress": False}
        settings |= {k: v for k, v in (("num_beams", num_beams), ("max_new_tokens", max_new_tokens)) if v}
        if nbest:
            lists = translate_nbest(model, tokenizer, sentences, nbest, target_prefixes=prefixes, **settings)
            return [[{"translation": h.text, "score": h.score} for h in hypotheses] for hypotheses in lists]
        return translate(model, tokenizer, sentences, target_prefixes=prefixes, **settings)

    batcher = Batcher(run, window, max_tokens)
    app.state.batcher = batcher

    @app.exception_handler(Refused)
    async def refused(request: Request, error: Refused):
        return error_response(error.status, error.field_name, error.message)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError):
        first = error.errors()[0]
        if first.get("type") == "json_invalid":
            context = first.get("ctx", {}).get("error", "")
            return error_response(400, "body", f"the body is not valid JSON ({context}); expected a JSON object")
        # loc holds the field's path, and for a union the member tried ("list[constrained-str]"): the path is kept.
        path = [str(part) for part in first.get("loc", ())[1:] if isinstance(part, int) or part.isidentifier()]
        where = ".".join(path) or "body"
        return error_response(422, where, f"{first.get('msg')}; got {first.get('input')!r}"[:500])

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page():
        return PAGE.read_text(encoding="utf-8")

    @app.get("/health")
    async def health():
        return {"status": "ok", "models": names, "batches": batcher.batches}

    def check_translation(request: TranslateRequest, model, tokenizer, sentences, prefixes) -> list[int]:
        """The texts' lengths, after the translate command's checks of the texts and options, each error naming its
        field; what translate() and generate() check again is caught here, before the request joins a batch."""
        if prefixes is not None and len(prefixes) != len(sentences):
            raise Refused(
                422, "target_prefix", f"{len(prefixes)} prefixes for {len(sentences)} texts; expected one a text"
            )
        lengths = checked(model, tokenizer, sentences, "text")
        if max(lengths) > max_tokens:
            raise Refused(
                422, "text", f"a text of {max(lengths)} tokens is more than the server's batch of {max_tokens}"
            )
        longest = input_token_limit(model, max_input_tokens) + OUTPUT_MARGIN  # Section 6.1 for the longest text
        if request.max_new_tokens is not None and request.max_new_tokens > longest:
            raise Refused(
                422, "max_new_tokens", f"max_new_tokens {request.max_new_tokens} is more than {longest}, the input "
                f"limit + {OUTPUT_MARGIN} of Section 6.1; expected at most {longest}",
            )  # fmt: skip
        limits = {"max_new_tokens": request.max_new_tokens} if request.max_new_tokens else {}
        try:
            if request.nbest is not None:
                check_nbest(model, request.nbest, request.num_beams)
        except InputError as refused:
            raise Refused(422, "nbest", str(refused)) from refused
        try:
            prefix_ids(tokenizer, prefixes, lambda: output_room(model, lengths, request.paper_decoding, limits))
        except InputError as refused:
            raise Refused(422, "target_prefix", str(refused)) from refused
        return lengths

    async def batched(job_key: tuple, sentences: list[str], prefixes: list[str] | None, tokens: int) -> list:
        """The outputs of these sentences, translated by the worker in a batch with whatever arrives with them."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()

        def done(outputs, failure):
            loop.call_soon_threadsafe(lambda: future.set_exception(failure) if failure else future.set_result(outputs))

        batcher.submit(Job(job_key, sentences, prefixes, done, tokens=tokens))
        try:
            return await future
        except ValueError as refused:  # the checks of translate() and generate(): the request's own fault
            raise Refused(422, "body", str(refused)) from refused

    @app.post("/translate")
    async def translate_endpoint(request: TranslateRequest):
        name, model, tokenizer = chosen(request.model)
        single = isinstance(request.text, str)
        sentences = [request.text] if single else request.text
        prefixes = [request.target_prefix] if isinstance(request.target_prefix, str) else request.target_prefix
        lengths = check_translation(request, model, tokenizer, sentences, prefixes)
        key = (name, request.num_beams, request.paper_decoding, request.nbest, request.max_new_tokens)
        outputs = await batched(key, sentences, prefixes, sum(lengths))
        return {"model": name, "translations": outputs[0] if single else outputs}

    @app.post("/score")
    async def score_endpoint(request: ScoreRequest):
        name, model, tokenizer = chosen(request.model)
        if len(request.source) != len(request.target):
            raise Refused(
                422, "target", f"{len(request.target)} targets for {len(request.source)} sources; expected one each"
            )
        checked(model, tokenizer, request.source, "source")
        checked(model, tokenizer, request.target, "target", side="target")
        try:
            scores = await asyncio.to_thread(
                score, model, tokenizer, request.source, request.target, max_tokens=max_tokens, progress=False
            )
        except ValueError as refused:  # a pair longer than the server's batch
            raise Refused(422, "body", str(refused)) from refused
        return {
            "model": name,
            "scores": [
                {"total": s.total, "mean": s.mean, "tokens": s.tokens, "log_probs": s.log_probs} for s in scores
            ],
        }

    @app.post("/attention")
    async def attention_endpoint(request: AttentionRequest):
        name, model, tokenizer = chosen(request.model)
        if not isinstance(model, torch.nn.Module):
            raise Refused(422, "model", f"{name} is a CTranslate2 export; attention needs a PyTorch model")
        checked(model, tokenizer, [request.text], "text")
        outputs, source, target = await asyncio.to_thread(attention_maps, model, tokenizer, request.text)
        maps = {
            kind: [layer[0].tolist() for layer in getattr(outputs, field_name)]
            for kind, (field_name, _) in ATTENTION_KINDS.items()
        }
        return {"model": name, "source_tokens": source, "target_tokens": target, **maps}

    return app
