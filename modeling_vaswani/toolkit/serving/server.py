"""vaswani-serve's HTTP API: translate, score and attention on models loaded once; requests that arrive together
translated together; every refusal one JSON shape, `{"error": {"field", "message"}}`, with its status.

Built on FastAPI (Starlette) and run by uvicorn, the `serve` extra; fastapi-offline serves /docs without a CDN. This
module is the routes, the lifespan, the error handlers and uvicorn's setup, thin over the two that do the work:
`gate.Gate` (before the body is parsed: the API key, and an address's failed ones, the client's request limit, the
content type, the body's size and its time to arrive, the requests in flight), then the request's model (pydantic,
strict types: `bodies.py`) and `service.TranslationService` (the checks, the worker, the answers).
"""

import asyncio
import reprlib
import signal
import socket
import sys
from contextlib import asynccontextmanager
from pathlib import Path

try:
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import HTMLResponse, JSONResponse, Response
    from fastapi_offline import FastAPIOffline
    from starlette.exceptions import HTTPException
    from uvicorn import Config, Server
    from uvicorn.protocols.http.h11_impl import H11Protocol
except ImportError as error:
    raise ImportError(
        f"the serve extra is not installed ({error}); vaswani-serve needs it: pip install modeling_vaswani[serve]"
    ) from error

from .bodies import AttentionRequest, ScoreRequest, TranslateRequest
from .bounds import Limits
from .gate import Gate, InFlight, RateLimit, Refused, error_body
from .service import TranslationService
from .worker import Worker

PAGE = Path(__file__).with_name("page.html")  # the page at /: self-contained, it talks only to this server


def error_response(status: int, field_name: str, message: str, headers: dict | None = None) -> Response:
    content = error_body(field_name, message)
    return Response(content, status_code=status, headers=headers, media_type="application/json")


def create_app(
    models: dict,
    limits: Limits | None = None,
    keys=(),
    rate_limit: str | None = None,
    languages: dict | None = None,
    auth_failure_limit: str | None = None,
) -> FastAPI:
    """The API over `models` ({name: (model, tokenizer)}, loaded once; the first is the default), within `limits`
    (default: vaswani-serve's); with `keys`, the API answers only requests that carry one (Authorization: Bearer
    KEY), and with `auth_failure_limit` ("20/minute") an address that sends more wrong keys than that is refused
    (429); with `rate_limit` ("120/minute"), each client (its key, else its address) is held to it. `languages`
    ({name: code or None}): each model's source language (`TranslationService`)."""
    service = TranslationService(models, limits, languages)
    limits = service.limits
    worker, metrics = service.worker, service.metrics

    @asynccontextmanager
    async def lifespan(app):
        yield
        # uvicorn has stopped taking connections and waited for those in flight; what is left is refused or dropped.
        finished = await asyncio.to_thread(service.close, limits.timeout_s)
        outcome = "every request accepted was answered" if finished else "requests still in flight were dropped"
        print(f"vaswani-serve: stopped; {outcome}", file=sys.stderr, flush=True)

    # FastAPIOffline: FastAPI whose /docs and /redoc take Swagger UI and ReDoc from its own package, not a CDN.
    app = FastAPIOffline(
        title="vaswani-serve", description="Attention Is All You Need, translating", lifespan=lifespan
    )
    app.state.service = service
    limiter = RateLimit(rate_limit) if rate_limit else None
    failures = None
    if auth_failure_limit:
        failures = RateLimit(auth_failure_limit, "--auth_failure_limit", "failed authentications", "authorization")
    in_flight = InFlight(2 * limits.max_queue)
    app.add_middleware(
        Gate, metrics=metrics, in_flight=in_flight, keys=keys, rate_limit=limiter, auth_failures=failures,
        max_body_bytes=limits.max_body_bytes, body_seconds=limits.body_timeout_s,
    )  # fmt: skip
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
        answer = {
            "status": status, "ready": status == "ok", "models": service.names, "aligning": service.aligning,
            "batches": worker.batches, "queued": queued, "running": running, "in_flight": in_flight.count,
            "capacity": {"queued": limits.max_queue, "in_flight": in_flight.limit},
        }  # fmt: skip
        return JSONResponse(answer, status_code=200 if status == "ok" else 503)

    @app.get("/metrics", include_in_schema=False)
    async def metrics_endpoint():
        return Response(metrics.text(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.post("/translate")
    async def translate_endpoint(request: TranslateRequest, http: Request):
        return await service.translate(request, gone=lambda: disconnected(http))

    @app.post("/score")
    async def score_endpoint(request: ScoreRequest, http: Request):
        return await service.score(request, gone=lambda: disconnected(http))

    @app.post("/attention")
    async def attention_endpoint(request: AttentionRequest, http: Request):
        content = await service.attention(request, gone=lambda: disconnected(http))
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
    GracefulServer(config, app.state.service.worker).run(sockets=[sock])
