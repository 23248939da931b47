"""What every request passes before the API reads it (an ASGI middleware around the app): the API key (and the failed
ones of its address), the client's request limit, the content type, and the body, read here whole up to a byte limit
and within a time limit of its own, a key given twice in one of its objects refused; then the places in flight, which
only a request with a whole body takes; then, once answered, the access log line and the request metrics. Each
refusal is the API's JSON error (`error_body`), before any parsing or work.

Written by hand: Starlette's middlewares check none of these, and a body limit must stop reading at the limit, which
only a middleware that owns `receive` can do.
"""

import asyncio
import hashlib
import hmac
import json
import logging
import time
from collections.abc import Iterable

from limits import parse
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

from ..texts import iter_text_lines
from .metrics import Metrics

ACCESS_LOG = logging.getLogger("vaswani_serve.access")
OPEN_PATHS = ("/", "/health", "/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect")  # pages, no data
MIN_KEY_LENGTH = 16
DISCARD_BYTES = 64 * 2**20  # a refused body is read (and dropped) up to this size, then the connection is dropped


def error_body(field_name: str, message: str) -> bytes:
    """The API's one error shape. ASCII-escaped, so that any text a client sent (a lone surrogate too) can be named
    in a message without failing to encode."""
    return json.dumps({"error": {"field": field_name, "message": message}}, ensure_ascii=True).encode()


def fingerprint(key: str) -> str:
    """How logs and metrics name a key: never the key itself."""
    return "key-" + hashlib.sha256(key.encode()).hexdigest()[:8]


def read_keys(keys: Iterable[str], keys_file=None) -> list[str]:
    """The API keys of --api_key and of --api_keys_file (one a line; blank lines and # comments skipped), each of at
    least MIN_KEY_LENGTH characters: a key is a password."""
    keys = list(keys)
    if keys_file is not None:
        lines = [text for _, text in iter_text_lines(keys_file)]
        keys += [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
        if not keys:
            raise ValueError(f"--api_keys_file {keys_file} holds no key; expected one key a line")
    for key in keys:
        if len(key) < MIN_KEY_LENGTH or any(c.isspace() for c in key):
            raise ValueError(
                f"an API key ({fingerprint(key)}) of {len(key)} characters; expected at least {MIN_KEY_LENGTH} "
                "characters and no spaces (it is a password)"
            )
    return keys


class Refused(Exception):
    """A request the server will not run, whether the gate or an endpoint finds it: answered with `status` and the
    JSON error naming `field_name` (`error_body`), with `headers` (Retry-After, WWW-Authenticate) where given."""

    def __init__(self, status: int, field_name: str, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.field_name, self.message, self.headers = status, field_name, message, headers or {}


class RateLimit:
    """At most `rate` (limits' notation: "120/minute", "10/second") events a client, counted in a moving window: the
    requests of a client (its API key, else its address; --rate_limit), or the failed authentications of an address
    (--auth_failure_limit). The `limits` package (the core of slowapi and Flask-Limiter), chosen over pyrate-limiter:
    exact in a moving window, the time to wait known, 3.7 us a request (docs/serving.md)."""

    def __init__(self, rate: str, flag: str = "--rate_limit", what: str = "requests", field_name: str = "client"):
        try:
            self.rate = parse(rate)
        except ValueError as error:
            raise ValueError(f"{flag} {rate!r}: {error}; expected e.g. 120/minute or 5/second") from None
        self.limiter = MovingWindowRateLimiter(MemoryStorage())
        self.flag, self.what, self.field_name = flag, what, field_name

    def refusal(self, client: str) -> Refused | None:
        """Counts one event of `client`: its refusal once it is over the rate."""
        return None if self.limiter.hit(self.rate, client) else self.told(client)

    def spent(self, client: str) -> Refused | None:
        """The refusal of a client over the rate already, counting nothing."""
        return None if self.limiter.test(self.rate, client) else self.told(client)

    def told(self, client: str) -> Refused:
        reset = self.limiter.get_window_stats(self.rate, client).reset_time
        wait = max(1, round(reset - time.time() + 0.5))
        message = f"more than {self.rate} {self.what} from this client ({self.flag}); retry in {wait} s"
        return Refused(429, self.field_name, message, {"Retry-After": str(wait)})


class InFlight:
    """The POST requests between their whole body's arrival and their answer, and how many may be: counted and
    refused by the gate, reported by /health. A request whose body is still arriving is not one: it holds nothing
    the server could work on, and its time is bounded apart (the gate's `body_seconds`)."""

    def __init__(self, limit: int):
        self.limit, self.count = limit, 0

    @property
    def full(self) -> bool:
        return self.count >= self.limit


class Gate:
    """The ASGI middleware. `keys`: API keys required of the API (POST and /metrics) when not empty; `rate_limit`:
    a RateLimit or None; `auth_failures`: a RateLimit of the failed authentications an address may make, after which
    its requests are refused 429 before their key is compared, a right one too (else a guesser would still learn
    which guess was right); `max_body_bytes`: the largest body read; `body_seconds`: how long a body may take to
    arrive (408, apart from the time limit of the work); `in_flight`: the requests with a whole body, not yet
    answered (503 beyond its limit)."""

    def __init__(
        self,
        app,
        metrics: Metrics,
        in_flight: InFlight,
        keys=(),
        rate_limit: RateLimit | None = None,
        auth_failures: RateLimit | None = None,
        max_body_bytes: int = 10**6,
        body_seconds: float = 10.0,
    ):
        self.app, self.metrics, self.rate_limit, self.max_body_bytes = app, metrics, rate_limit, max_body_bytes
        self.keys = {key.encode(): fingerprint(key) for key in keys}
        self.in_flight, self.body_seconds, self.auth_failures = in_flight, body_seconds, auth_failures

    def client(self, scope, headers: dict) -> tuple[str | None, Refused | None]:
        """The request's API key's fingerprint (None without keys), or its refusal."""
        if not self.keys or (scope["method"] == "GET" and scope["path"] in OPEN_PATHS):
            return None, None
        blocked = self.auth_failures.spent(address(scope)) if self.auth_failures else None
        if blocked:
            return None, blocked
        scheme, _, given = headers.get(b"authorization", b"").partition(b" ")
        for key, name in self.keys.items():
            if scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), key):
                return name, None
        if self.auth_failures:
            self.auth_failures.refusal(address(scope))
        told = "a wrong API key" if given else "no API key"
        message = f"{told}; expected the header Authorization: Bearer KEY, with a key this server was given"
        return None, Refused(401, "authorization", message, {"WWW-Authenticate": "Bearer"})

    def refusal(self, scope, headers: dict, key_name: str | None) -> Refused | None:
        if self.rate_limit is not None and scope["method"] == "POST":
            refused = self.rate_limit.refusal(key_name or address(scope))
            if refused:
                return refused
        if scope["method"] == "POST":
            media_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
            if media_type != b"application/json":
                given = media_type.decode("latin-1") or "none"
                return Refused(415, "content-type", f"Content-Type {given}; expected application/json")
        return None

    def busy(self) -> Refused | None:
        if self.in_flight.full:
            message = f"the server is busy: {self.in_flight.count} requests are in flight; retry in 1 s"
            return Refused(503, "server", message, {"Retry-After": "1"})
        return None

    def too_large(self, size: int) -> Refused:
        return Refused(
            413, "body", f"a body of {size:,} bytes or more; expected at most {self.max_body_bytes:,} bytes "
            "(--max_body_bytes)",
        )  # fmt: skip

    async def read_body_in_time(self, receive, headers: dict) -> tuple[bytes, Refused | None]:
        """`read_body`, refused (408, and the connection closed: the rest of the body is never read) when the body
        takes longer than `body_seconds` to arrive: a client sending a byte a second holds no place for long."""
        try:
            return await asyncio.wait_for(self.read_body(receive, headers), self.body_seconds)
        except asyncio.TimeoutError:  # TimeoutError itself from Python 3.11
            message = (
                f"the body took more than {self.body_seconds:g} s to arrive (--body_timeout_s); expected it sooner"
            )
            return b"", Refused(408, "body", message, {"Connection": "close"})

    async def read_body(self, receive, headers: dict) -> tuple[bytes, Refused | None]:
        """The whole body, or its refusal: empty, or larger than the limit. A body over the limit is kept no further
        and read on only to be discarded (up to DISCARD_BYTES), so that the client, still sending, reads the 413
        rather than a reset connection."""
        length = headers.get(b"content-length", b"")
        chunks, size = [], 0
        refused = self.too_large(int(length)) if length.isdigit() and int(length) > self.max_body_bytes else None
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return b"", Refused(499, "client", "the client went away while sending")
            chunk = message.get("body", b"")
            size += len(chunk)
            if refused is None and size > self.max_body_bytes:
                refused, chunks = self.too_large(size), []
            if refused is None:
                chunks.append(chunk)
            if not message.get("more_body", False) or size > DISCARD_BYTES:
                break
        if refused is None and size == 0:
            refused = Refused(400, "body", "an empty body; expected a JSON object")
        return (b"", refused) if refused else (b"".join(chunks), None)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        headers = dict(scope["headers"])
        answer = {"status": 500, "bytes": 0}

        async def sending(message):
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]
            elif message["type"] == "http.response.body":
                answer["bytes"] += len(message.get("body", b""))
            await send(message)

        key_name, refused = self.client(scope, headers)
        refused = refused or self.refusal(scope, headers, key_name)
        body, counted = b"", False
        try:
            if refused is None and scope["method"] in ("POST", "PUT", "PATCH"):
                body, refused = await self.read_body_in_time(receive, headers)
                refused = refused or repeated_key(body)
            if refused is None and scope["method"] == "POST":
                refused = self.busy()
                counted = refused is None
                self.in_flight.count += counted  # from here to the answer: its checks and work
            if refused is not None:
                await respond(sending, refused)
            else:
                await self.app(scope, replay(body, receive), sending)
        finally:
            self.in_flight.count -= counted
            seconds = time.perf_counter() - started
            self.metrics.answered(scope["path"], answer["status"], seconds)
            log_access(scope, key_name, answer, len(body), seconds)


class Twice(dict):
    """A JSON object that named `key` twice (json keeps the last value)."""

    key = ""


def repeated_key(body: bytes) -> Refused | None:
    """The refusal of a JSON body in which an object names a key twice, named by its path (`glossary.snow`): json,
    and so the API, would keep the last value and drop the first without a word. A body that is not JSON is left to
    the API's own refusal. The path is looked for only when there is one, and through objects only (no request
    holds an object in a list; a list of 300,000 would take seconds to walk): one in a list is named by its key."""
    repeated = []  # the objects that name a key twice

    def keep_twice(pairs: list) -> dict:
        value = dict(pairs)
        if len(value) < len(pairs):
            seen, value = set(), Twice(value)
            value.key = next(key for key, _ in pairs if key in seen or seen.add(key))
            repeated.append(value)
        return value

    try:
        value = json.loads(body, object_pairs_hook=keep_twice)
    except (ValueError, RecursionError):
        return None
    if not repeated:
        return None
    waiting, where = [((), value)] if isinstance(value, dict) else [], None
    while waiting and where is None:
        path, value = waiting.pop()
        if isinstance(value, Twice):
            where = ".".join((*path, value.key))
        waiting += [((*path, key), item) for key, item in value.items() if isinstance(item, dict)]
    told = where or f"the key {repeated[0].key!r} of an object in a list"
    return Refused(422, where or "body", f"{told} is given twice; expected each key of an object once")


def replay(body: bytes, receive):
    """`receive` for the app: the body read already, then the connection's own messages (its disconnect)."""
    sent = False

    async def receiving():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return receiving


async def respond(send, refused: Refused) -> None:
    content = error_body(refused.field_name, refused.message)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(content)).encode())]
    headers += [(name.lower().encode(), value.encode()) for name, value in refused.headers.items()]
    await send({"type": "http.response.start", "status": refused.status, "headers": headers})
    await send({"type": "http.response.body", "body": content})


def address(scope) -> str:
    return scope["client"][0] if scope.get("client") else "unknown"


def log_access(scope, key_name: str | None, answer: dict, bytes_in: int, seconds: float) -> None:
    """One JSON line a request: who, what, the answer and how long it took (never a key or a text)."""
    if ACCESS_LOG.isEnabledFor(logging.INFO):
        ACCESS_LOG.info(
            json.dumps(
                {
                    "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "client": address(scope),
                    "key": key_name,
                    "method": scope["method"],
                    "path": scope["path"],
                    "status": answer["status"],
                    "ms": round(1000 * seconds, 1),
                    "bytes_in": bytes_in,
                    "bytes_out": answer["bytes"],
                }
            )
        )
