"""vaswani-serve under abuse: rounds of requests that a served model meets in the open, each bounded in requests and
seconds and sent only to 127.0.0.1, at a server this harness started (benchmarks/speed/serving.running_server).

The clients are written here (http.client, and raw sockets where a request must be cut short or sent as no library
sends it), never the server's own code. Throughout each round a thread asks GET /health every ~20 ms (its latency,
its status, the `queued` and `running` it reports) and another reads the server's resident memory every ~100 ms
(psutil, on the pid of the process this harness started). Concurrency is tested by many rounds of many clients, each
round's clients released together.

Rounds, and what each expects of the server (issue 40):
- mixed: valid /translate (one text, several, stock beams, greedy, n-best, prefixes), /score and /attention requests
  over test2016 sentences, first from a lone client (the expected answers), then from C clients x R rounds: every
  request answered 2xx and as the lone client was;
- big_body: 256 texts of 40,000 characters (10 MB), with a Content-Length and chunked: 413 at once (--max_body_bytes);
- long_texts: texts over --max_chars within the body limit, to /translate, /score and /attention, and more texts
  than --max_texts: 422 at once;
- attention: the attention of a text of ~1,000 tokens: 422 at once (--max_attention_tokens); a valid one's size;
- malformed: a lone surrogate, a latin-1 body, 100,000 nested arrays, JSON sent as text/plain or with no type, an
  unknown field, a wrong type...: 400, 415, 422, 404, each with {"error": {"field", "message"}}, never a 500;
- client_gone: a raw socket sends 256 texts at num_beams 32 and closes, right after sending and again once the work
  runs: how long until /health shows nothing queued or running (or, where /health does not say, until a new request
  is answered), and whether a batch was started at all (/health's batches);
- flood: a server started with a small --max_queue, more requests at once than it holds: 503s with Retry-After, the
  accepted ones answered as the lone client was, nothing else;
- limits: a server started with --api_key, --rate_limit and --timeout_s: 401 without the key, 429 with Retry-After
  past the rate, 504 past the time.

A round needing a flag the server's --help lacks either runs and reports what the server did instead (big_body,
long_texts, attention: the requests can be sent to any server) or is reported "not supported by this server" (flood,
limits: the server cannot be started so), so that one harness measures the server before and after issue 40.
"""

import http.client
import json
import math
import re
import select
import socket
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from .real_text import test_set
from .serving import running_server, running_servers, serve_command, server_environment

ROUNDS = ("mixed", "big_body", "long_texts", "attention", "malformed", "client_gone", "flood", "limits")
# One server with its defaults runs these, in this order; flood and limits start servers of their own.
ON_THE_MAIN_SERVER = ROUNDS[:6]
LIMIT_FLAGS = (
    "--max_body_bytes",
    "--max_chars",
    "--max_texts",
    "--max_queue",
    "--timeout_s",
    "--max_attention_tokens",
    "--api_key",
    "--api_keys_file",
    "--allow_anonymous",
    "--rate_limit",
)
EXPECTS = {  # the flag that carries a round's expectation
    "big_body": "--max_body_bytes",
    "long_texts": "--max_chars",
    "attention": "--max_attention_tokens",
    "flood": "--max_queue",
}
JSON_TYPE = "application/json"
API_KEY = "abuse-harness-key"


@dataclass
class Plan:
    """How much of each round: the benchmark's sizes by default, `Plan.short()` the test suite's."""

    clients: int = 50  # mixed: clients at once
    rounds: int = 3  # mixed, malformed and flood: rounds of clients
    per_client: int = 2  # mixed: requests a client sends in a round
    sentences: int = 48  # test2016 sentences the valid requests draw on
    heavy_clients: int = 2  # big_body, long_texts, attention: clients at once
    heavy_rounds: int = 3
    malformed_clients: int = 8
    attention_tokens: int = 1000
    gone_texts: int = 256
    gone_beams: int = 32
    gone_wait_s: float = 60.0
    max_queue: int = 4  # the flood's server
    flood: int = 20  # requests at once in a flood round: more than max_queue
    rate_limit: int = 10  # a minute, the limits round's server
    timeout_s: int = 1  # the limits round's server
    round_seconds: float = 60.0  # a round's clients send nothing more after this (the harness's time bound)
    health_every: float = 0.02
    rss_every: float = 0.1

    @classmethod
    def short(cls) -> "Plan":
        return cls(
            clients=8,
            rounds=3,
            sentences=16,
            heavy_clients=1,
            heavy_rounds=1,
            malformed_clients=3,
            gone_wait_s=20.0,
            max_queue=2,
            flood=12,
            rate_limit=5,
            round_seconds=30.0,
        )


# ---------------------------------------------------------------------------------------------------------------------
# The clients
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class Reply:
    """One request's answer: `status` None when there was no HTTP answer (`error` names why)."""

    status: int | None
    seconds: float
    headers: dict = field(default_factory=dict)
    body: bytes = b""
    error: str | None = None
    sent: int | None = None  # raw requests: bytes of the body written before the answer came

    @property
    def outcome(self) -> str:
        return str(self.status) if self.status is not None else (self.error or "no answer")

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    def error_body(self) -> dict | None:
        """The refusal's {"field", "message"} when the body is {"error": {...}} with both strings, else None."""
        answer = self.json()
        error = answer.get("error") if isinstance(answer, dict) else None
        if isinstance(error, dict) and isinstance(error.get("field"), str) and isinstance(error.get("message"), str):
            return error
        return None


def address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname, parts.port


def call(url: str, method: str, path: str, body: bytes | None = None, headers=None, timeout: float = 60) -> Reply:
    """One request on a connection of its own (http.client)."""
    host, port = address(url)
    start = time.perf_counter()
    connection = http.client.HTTPConnection(host, port, timeout=max(timeout, 0.1))
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        data = response.read()
        headers = {name.lower(): value for name, value in response.getheaders()}
        return Reply(response.status, time.perf_counter() - start, headers, data)
    except (OSError, http.client.HTTPException) as error:
        return Reply(None, time.perf_counter() - start, error=type(error).__name__)
    finally:
        connection.close()


def post_json(url: str, path: str, payload, timeout: float = 60, headers=None) -> Reply:
    body = json.dumps(payload).encode()
    return call(url, "POST", path, body, {"Content-Type": JSON_TYPE, **(headers or {})}, timeout)


def request_head(path: str, headers: dict) -> bytes:
    lines = [
        f"POST {path} HTTP/1.1",
        "Host: 127.0.0.1",
        "Connection: close",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def chunked(body: bytes, size: int = 65536) -> bytes:
    parts = [b"%x\r\n%s\r\n" % (len(body[i : i + size]), body[i : i + size]) for i in range(0, len(body), size)]
    return b"".join(parts) + b"0\r\n\r\n"


def raw_post(url: str, path: str, headers: dict, body: bytes, timeout: float) -> Reply:
    """A POST written on a socket of our own, 64 KiB at a time, that stops writing as soon as the server answers (a
    server may refuse a body before it has read it); the answer is read to the end (Connection: close)."""
    head = request_head(path, headers)
    start = time.perf_counter()
    deadline = time.monotonic() + timeout
    sent = 0
    try:
        with socket.create_connection(address(url), timeout=timeout) as sock:
            sock.sendall(head)
            sock.setblocking(False)
            view = memoryview(body)
            while sent < len(body):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                readable, writable, _ = select.select([sock], [sock], [], left)
                if readable:
                    break  # the answer (or the connection closed) before the whole body
                if writable:
                    try:
                        sent += sock.send(view[sent : sent + 65536])
                    except (BrokenPipeError, ConnectionResetError):
                        break  # the server closed its side: its answer may be waiting
            sock.setblocking(True)
            data = read_to_end(sock, deadline)
    except OSError as error:
        return Reply(None, time.perf_counter() - start, error=type(error).__name__, sent=sent)
    seconds = time.perf_counter() - start
    if not data:
        return Reply(None, seconds, error="closed without an answer", sent=sent)
    return parse_answer(data, seconds, sent)


def read_to_end(sock: socket.socket, deadline: float) -> bytes:
    data = bytearray()
    while True:
        sock.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            part = sock.recv(65536)
        except ConnectionResetError:
            break  # what was read before the reset stands
        if not part:
            break
        data += part
    return bytes(data)


def parse_answer(data: bytes, seconds: float, sent: int | None) -> Reply:
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    try:
        status = int(lines[0].split()[1])
    except (IndexError, ValueError):
        return Reply(None, seconds, error="not HTTP", sent=sent)
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = dechunk(body)
    return Reply(status, seconds, headers, body, sent=sent)


def dechunk(body: bytes) -> bytes:
    out, rest = bytearray(), body
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out += rest[:size]
        rest = rest[size + 2 :]
    return bytes(out)


class Deadline:
    """A round's time limit: nothing is sent after it, and what was sent before waits for its answer until then, or
    `grace` seconds (what is not answered by then is a failure, TimeoutError)."""

    def __init__(self, seconds: float, grace: float = 10.0):
        self.end, self.grace = time.monotonic() + seconds, grace

    def left(self) -> float:
        return self.end - time.monotonic()

    def timeout(self) -> float:
        return max(self.left(), self.grace)


def together(count: int, work: Callable[[int], list]) -> list:
    """`work(i)` for i in range(count) on `count` threads released at once; their results, in order."""
    barrier = threading.Barrier(count)
    results = [[] for _ in range(count)]

    def client(index):
        with suppress(threading.BrokenBarrierError):
            barrier.wait(timeout=30)
        try:
            results[index] = work(index)
        except Exception as error:  # a harness fault is one failed request, not a dead round
            results[index] = [Reply(None, 0.0, error=f"harness: {type(error).__name__}: {error}")]

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [item for result in results for item in result]


# ---------------------------------------------------------------------------------------------------------------------
# What each round watches: /health and the server's memory
# ---------------------------------------------------------------------------------------------------------------------


def rss_mb(pid: int) -> float | None:
    """The resident memory of the process and its children, in MB; None without psutil or once it is gone."""
    try:
        import psutil

        process = psutil.Process(pid)
        return sum(p.memory_info().rss for p in [process, *process.children(recursive=True)]) / 1e6
    except Exception:  # psutil missing, the process gone, a child gone between listing and reading
        return None


@dataclass
class HealthSample:
    at: float  # time.monotonic() when the answer came
    seconds: float
    outcome: str
    queued: int | None = None
    running: int | None = None
    batches: int | None = None


MIN_HEALTH_SAMPLES = 10
NOT_READY = "503 not ready"


class Watch:
    """For the length of a `with` block: GET /health every `every` seconds and the server's RSS every `rss_every`."""

    def __init__(self, url: str, pid: int, plan: Plan):
        self.url, self.pid, self.plan = url, pid, plan
        self.health: list[HealthSample] = []
        self.rss: list[float] = []
        self.stopping = threading.Event()

    def __enter__(self):
        self.rss_before = rss_mb(self.pid)
        self.threads = [threading.Thread(target=loop, daemon=True) for loop in (self.ask_health, self.read_rss)]
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        deadline = time.monotonic() + 1.0  # a round over in milliseconds still gets a few samples of /health
        while len(self.health) < MIN_HEALTH_SAMPLES and time.monotonic() < deadline:
            time.sleep(self.plan.health_every)
        self.stopping.set()
        for thread in self.threads:
            thread.join()
        self.rss_after = rss_mb(self.pid)

    def ask_health(self):
        while not self.stopping.is_set():
            began = time.perf_counter()
            reply = call(self.url, "GET", "/health", timeout=10)
            answer = reply.json() if reply.status in (200, 503) else None
            answer = answer if isinstance(answer, dict) else {}
            # A 503 saying "not ready" (its queue full, shutting down) is /health answering, as load balancers read it.
            outcome = NOT_READY if reply.status == 503 and answer.get("ready") is False else reply.outcome
            sample = HealthSample(time.monotonic(), reply.seconds, outcome)
            sample.queued, sample.running = answer.get("queued"), answer.get("running")
            sample.batches = answer.get("batches")
            self.health.append(sample)
            self.stopping.wait(max(0.0, self.plan.health_every - (time.perf_counter() - began)))

    def read_rss(self):
        while not self.stopping.is_set():
            if (value := rss_mb(self.pid)) is not None:
                self.rss.append(value)
            self.stopping.wait(self.plan.rss_every)

    def summary(self) -> dict:
        seconds = [sample.seconds for sample in self.health]
        failed = Counter(sample.outcome for sample in self.health if sample.outcome not in ("200", NOT_READY))
        not_ready = sum(sample.outcome == NOT_READY for sample in self.health)
        peak = max(
            [value for value in (self.rss_before, *self.rss, self.rss_after) if value is not None], default=None
        )
        return {
            "health": {
                "samples": len(seconds),
                **percentiles(seconds, (50, 99)),
                "failures": dict(failed),
                "not_ready": not_ready,
            },
            "rss_mb": {"before": self.rss_before, "peak": peak, "after": self.rss_after},
        }


def percentiles(seconds: list[float], points=(50, 95, 99)) -> dict:
    """Nearest-rank percentiles and the maximum, in milliseconds."""
    if not seconds:
        return {}
    ordered = sorted(1000 * value for value in seconds)
    ranks = {f"p{p}_ms": ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)] for p in points}
    return {**ranks, "max_ms": ordered[-1]}


def round_report(replies: list[Reply], seconds: float, watch: Watch, expected: Callable[[Reply], bool]) -> dict:
    """A round's figures: requests, requests/s, latency, every outcome and those that were not expected."""
    return {
        "supported": True,
        "requests": len(replies),
        "seconds": seconds,
        "requests_per_s": len(replies) / seconds if seconds else None,
        "latency": percentiles([reply.seconds for reply in replies]),
        "outcomes": dict(Counter(reply.outcome for reply in replies)),
        "failures": dict(Counter(reply.outcome for reply in replies if not expected(reply))),
        **watch.summary(),
    }


def not_supported(missing: list[str]) -> dict:
    return {"supported": False, "reason": f"not supported by this server: vaswani-serve --help has no {missing}"}


# ---------------------------------------------------------------------------------------------------------------------
# The valid requests and their answers
# ---------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Valid:
    kind: str
    path: str
    payload: dict


KINDS = ("one text", "several texts", "stock beams", "greedy", "n-best", "prefixes", "score", "attention")


def valid_requests(sources: list[str], references: list[str], short: Callable[[str], bool]) -> list[Valid]:
    """A request of each kind in turn, the i-th starting at sentence i: translations with each option, scores,
    attention (of the first sentence from i on that is `short`: the server's attention limit is a short one)."""
    count, requests = len(sources), []
    for i in range(count):
        texts = [sources[(i + j) % count] for j in range(3)]
        targets = [references[(i + j) % count] for j in range(2)]
        kind = KINDS[i % len(KINDS)]
        path, payload = (
            "/translate",
            {
                "one text": {"text": texts[0]},
                "several texts": {"text": texts},
                "stock beams": {"text": texts[0], "num_beams": 2, "paper_decoding": False},
                "greedy": {"text": texts[:2], "num_beams": 1},
                "n-best": {"text": texts[0], "num_beams": 3, "nbest": 2},
                "prefixes": {"text": texts[:2], "target_prefix": [targets[0].split()[0], ""]},
            }.get(kind, {}),
        )
        if kind == "score":
            path, payload = "/score", {"source": texts[:2], "target": targets}
        elif kind == "attention":
            text = next((sources[(i + j) % count] for j in range(count) if short(sources[(i + j) % count])), texts[0])
            path, payload = "/attention", {"text": text}
        requests.append(Valid(kind, path, payload))
    return requests


ANSWER_FIELDS = {
    "/translate": ("translations",),
    "/score": ("scores",),
    "/attention": ("source_tokens", "target_tokens", "encoder", "decoder", "cross"),
}


def answer_of(request: Valid, reply: Reply):
    """What a valid request's answer says (the fields it is asked for), None for a failure."""
    answer = reply.json() if reply.status is not None and 200 <= reply.status < 300 else None
    if not isinstance(answer, dict):
        return None
    return {name: answer.get(name) for name in ANSWER_FIELDS[request.path]}


def difference(a, b, path: str = "") -> str | None:
    """Where `a` and `b` first differ (None: equal, numbers within 1e-4: batches pad differently, which moves the last
    digits of a score or an attention weight)."""
    if isinstance(a, float) or isinstance(b, float):
        numbers = isinstance(a, int | float) and isinstance(b, int | float)
        return None if numbers and math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-4) else f"{path}: {a!r} vs {b!r}"
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items vs {len(b)}"
        pairs = enumerate(zip(a, b, strict=True))
        return next(filter(None, (difference(x, y, f"{path}[{i}]") for i, (x, y) in pairs)), None)
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return f"{path}: fields {sorted(a)} vs {sorted(b)}"
        return next(filter(None, (difference(a[k], b[k], f"{path}.{k}".lstrip(".")) for k in a)), None)
    return None if a == b else f"{path}: {a!r} vs {b!r}"[:300]


def lone_answers(url: str, requests: list[Valid], timeout: float) -> tuple[list, dict]:
    """Each request sent once by a lone client, one after another: the expected answers, and how it went."""
    answers, replies = [], []
    for request in requests:
        reply = post_json(url, request.path, request.payload, timeout)
        replies.append(reply)
        answers.append(answer_of(request, reply))
    return answers, {
        "requests": len(replies),
        "failures": dict(Counter(reply.outcome for reply in replies if not 200 <= (reply.status or 0) < 300)),
        **percentiles([reply.seconds for reply in replies], (50, 95)),
    }


def failure(request: Valid, reply: Reply) -> dict:
    return {
        "kind": request.kind,
        "request": json.dumps(request.payload)[:300],
        "outcome": reply.outcome,
        "answer": reply.body[:300].decode("utf-8", "replace"),
    }


def compare(request: Valid, reply: Reply, expected) -> dict | None:
    """None when the answer is the expected one (or the request failed, counted apart); else where it differs."""
    got = answer_of(request, reply)
    where = None if got is None or expected is None else difference(got, expected)
    if where is None:
        return None
    return {"kind": request.kind, "request": json.dumps(request.payload)[:300], "got vs lone client": where}


# ---------------------------------------------------------------------------------------------------------------------
# The rounds
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class Context:
    """What the rounds share: the server, the plan, the valid requests and their expected answers, the texts."""

    url: str
    pid: int
    plan: Plan
    flags: set
    requests: list[Valid]
    expected: list
    sources: list[str]
    model_dir: Path
    health_fields: list = field(default_factory=list)
    tokenizer: object = None


def mixed_round(ctx: Context) -> dict:
    plan = ctx.plan
    replies, differing, failed, not_sent, seconds = [], [], [], 0, 0.0
    with Watch(ctx.url, ctx.pid, plan) as watch:
        deadline = Deadline(plan.round_seconds)
        for number in range(plan.rounds):

            def client(c, number=number, deadline=deadline):
                out = []
                for j in range(plan.per_client):
                    index = ((number * plan.clients + c) * plan.per_client + j) % len(ctx.requests)
                    if deadline.left() <= 0:
                        out.append((index, None))
                        continue
                    request = ctx.requests[index]
                    out.append((index, post_json(ctx.url, request.path, request.payload, deadline.timeout())))
                return out

            start = time.perf_counter()
            for item in together(plan.clients, client):
                if isinstance(item, Reply):  # the harness failed
                    replies.append(item)
                    continue
                index, reply = item
                if reply is None:
                    not_sent += 1
                    continue
                replies.append(reply)
                if differs := compare(ctx.requests[index], reply, ctx.expected[index]):
                    differing.append(differs)
                if not 200 <= (reply.status or 0) < 300:
                    failed.append(failure(ctx.requests[index], reply))
            seconds += time.perf_counter() - start
    report = round_report(replies, seconds, watch, lambda reply: 200 <= (reply.status or 0) < 300)
    kinds = Counter(request.kind for request in ctx.requests)
    return {
        **report,
        "clients": plan.clients,
        "rounds": plan.rounds,
        "per_client": plan.per_client,
        "kinds": dict(kinds),
        "not_sent": not_sent,
        "differing": len(differing),
        "differing_examples": differing[:3],
        "failure_examples": failed[:5],
    }


def filler(sources: list[str], characters: int) -> str:
    """Real words, `characters` long."""
    text = " ".join(sources)
    return (text * (characters // len(text) + 1))[:characters]


def names(error: dict, field_name: str | None) -> bool:
    """The error names the field (`text`, or an item of it: `text.0`, `text[0]`), or any when `field_name` is None."""
    got = error["field"]
    return field_name is None or got == field_name or got.startswith((f"{field_name}.", f"{field_name}["))


def refused_with(status: int, field_name: str | None = None) -> Callable[[Reply], bool]:
    def expected(reply: Reply) -> bool:
        error = reply.error_body()
        return reply.status == status and error is not None and names(error, field_name)

    return expected


def named_rounds(ctx: Context, rounds: int, clients: int, client: Callable) -> tuple[list, float, Watch]:
    """`client(c, deadline)` (a list of (name, Reply)) by `clients` clients at once, `rounds` times within the
    round's seconds, /health and memory watched throughout: every (name, reply), a harness fault named "harness",
    the seconds spent sending, and the watch."""
    named, seconds = [], 0.0
    with Watch(ctx.url, ctx.pid, ctx.plan) as watch:
        deadline = Deadline(ctx.plan.round_seconds)
        for _ in range(rounds):
            if deadline.left() <= 0:
                break
            start = time.perf_counter()
            named += together(clients, lambda c, deadline=deadline: client(c, deadline))
            seconds += time.perf_counter() - start
    return [item if isinstance(item, tuple) else ("harness", item) for item in named], seconds, watch


def heavy_round(ctx: Context, send: Callable[[Deadline], list[tuple[str, Reply]]], checks: dict) -> tuple[dict, dict]:
    """`send` by heavy_clients clients at once, heavy_rounds times; each reply checked by its name's check."""
    plan = ctx.plan
    named, seconds, watch = named_rounds(
        ctx, plan.heavy_rounds, plan.heavy_clients, lambda _, deadline: send(deadline)
    )
    replies = [reply for _, reply in named]
    report = round_report(replies, seconds, watch, lambda reply: False)  # failures: filled in below
    report["failures"] = dict(
        Counter(reply.outcome for name, reply in named if not checks.get(name, lambda _: False)(reply))
    )
    by_name = {}
    for name, reply in named:
        entry = by_name.setdefault(name, {"outcomes": Counter(), "seconds": []})
        entry["outcomes"][reply.outcome] += 1
        entry["seconds"].append(reply.seconds)
    details = {}
    for name, entry in by_name.items():
        first = next(reply for n, reply in named if n == name)
        details[name] = {
            "outcomes": dict(entry["outcomes"]),
            **percentiles(entry["seconds"], (50,)),
            "bytes": len(first.body),  # the first answer's
            "example": first.body[:300].decode("utf-8", "replace"),
        }
        sent = [reply.sent for n, reply in named if n == name and reply.sent is not None]
        if sent:
            details[name]["body_sent_bytes_max"] = max(sent)  # of the body, when the answer came
    return report, details


def big_body_round(ctx: Context) -> dict:
    text = filler(ctx.sources, 40_000)
    body = json.dumps({"text": [text] * 256}).encode()
    variants = {
        "Content-Length": ({"Content-Type": JSON_TYPE, "Content-Length": str(len(body))}, body),
        "chunked": ({"Content-Type": JSON_TYPE, "Transfer-Encoding": "chunked"}, chunked(body)),
    }

    def send(deadline: Deadline):
        return [
            (name, raw_post(ctx.url, "/translate", headers, payload, deadline.timeout()))
            for name, (headers, payload) in variants.items()
        ]

    checks = dict.fromkeys(variants, refused_with(413))
    report, details = heavy_round(ctx, send, checks)
    return {**report, "expected": "413", "body_bytes": len(body), "variants": details}


def long_texts_round(ctx: Context) -> dict:
    text = filler(ctx.sources, 20_000)
    cases = {
        "translate: 40 texts of 20,000 characters": ("/translate", {"text": [text] * 40}, "text"),
        "translate: 257 short texts": ("/translate", {"text": ctx.sources[:1] * 257}, "text"),  # over --max_texts
        "score: a source of 20,000 characters": ("/score", {"source": [text], "target": ["Ein Hund."]}, "source"),
        "attention: a text of 20,000 characters": ("/attention", {"text": text}, "text"),
    }

    def send(deadline: Deadline):
        return [
            (name, post_json(ctx.url, path, payload, deadline.timeout())) for name, (path, payload, _) in cases.items()
        ]

    checks = {name: refused_with(422, field_name) for name, (_, _, field_name) in cases.items()}
    report, details = heavy_round(ctx, send, checks)
    return {**report, "expected": "422", "cases": details}


def load_tokenizer(model_dir: Path):
    """The model's tokenizer, to size texts in tokens (None where it cannot be loaded: then words stand for tokens)."""
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(model_dir))
    except Exception:
        return None


# Valid attention requests: texts of at most this many tokens (the server's --max_attention_tokens is 64 by default).
ATTENTION_TOKENS = 48


def short_for_attention(tokenizer) -> Callable[[str], bool]:
    if tokenizer is None:
        return lambda text: len(text.split()) <= ATTENTION_TOKENS // 4
    return lambda text: len(tokenizer(text)["input_ids"]) <= ATTENTION_TOKENS


def text_of_tokens(tokenizer, sources: list[str], tokens: int) -> tuple[str, int | None]:
    """The shortest run of test2016's words that the model's tokenizer makes `tokens` tokens or more, and its count
    (None without a tokenizer: then as many words, each a token or more)."""
    words = " ".join(sources * (tokens // 5 + 1)).split()
    if tokenizer is None:
        return " ".join(words[:tokens]), None
    count = lambda n: len(tokenizer(" ".join(words[:n]))["input_ids"])  # noqa: E731
    low, high = 1, min(len(words), tokens)
    while low < high:
        middle = (low + high) // 2
        if count(middle) >= tokens:
            high = middle
        else:
            low = middle + 1
    return " ".join(words[:low]), count(low)


def attention_round(ctx: Context) -> dict:
    text, tokens = text_of_tokens(ctx.tokenizer, ctx.sources, ctx.plan.attention_tokens)
    short = short_for_attention(ctx.tokenizer)
    valid = {"text": next((source for source in ctx.sources if short(source)), ctx.sources[0])}

    def send(deadline: Deadline):
        return [
            ("long text", post_json(ctx.url, "/attention", {"text": text}, deadline.timeout())),
            ("valid", post_json(ctx.url, "/attention", valid, deadline.timeout())),
        ]

    checks = {"long text": refused_with(422, "text"), "valid": lambda reply: reply.status == 200}
    report, details = heavy_round(ctx, send, checks)
    return {
        **report,
        "expected": "422 for the long text, 200 for the valid one",
        "long_text": {"tokens": tokens, "characters": len(text)},
        "cases": details,
    }


def malformed_cases() -> dict:
    """name: (Content-Type or None, body, expected statuses, the error's field or None for any)."""
    valid = json.dumps({"text": "A dog runs.", "num_beams": 1, "max_new_tokens": 4}).encode()
    nested = b'{"text": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    return {
        "a lone surrogate (\\ud800)": (JSON_TYPE, b'{"text": "A dog \\ud800 runs."}', (400, 422), None),
        "a latin-1 body": (JSON_TYPE, '{"text": "Ein Mädchen singt."}'.encode("latin-1"), (400,), None),
        "100,000 nested arrays": (JSON_TYPE, nested, (400,), None),
        "not JSON": (JSON_TYPE, b"{not json", (400,), None),
        "an empty body": (JSON_TYPE, b"", (400, 422), None),  # not JSON (400), or no field given (422)?
        "JSON sent as text/plain": ("text/plain", valid, (415,), None),
        "JSON with no Content-Type": (None, valid, (415,), None),
        "an unknown field": (JSON_TYPE, json.dumps({"text": "A dog.", "colour": "red"}).encode(), (422,), "colour"),
        "a wrong type": (JSON_TYPE, json.dumps({"text": "A dog.", "num_beams": "4"}).encode(), (422,), "num_beams"),
        "a model not served": (
            JSON_TYPE,
            json.dumps({"text": "A dog.", "model": "nowhere"}).encode(),
            (404,),
            "model",
        ),
        "valid, with a charset": ("application/json; charset=utf-8", valid, (200,), None),
    }


def malformed_ok(reply: Reply, statuses: tuple, field_name: str | None) -> bool:
    if reply.status not in statuses:
        return False
    if reply.status == 200:
        return True
    error = reply.error_body()
    return error is not None and names(error, field_name)


def malformed_round(ctx: Context) -> dict:
    plan, cases = ctx.plan, malformed_cases()

    def client(c, deadline):
        out = []
        order = list(cases)
        for name in order[c % len(order) :] + order[: c % len(order)]:  # each client in its own order
            if deadline.left() <= 0:
                break
            content_type, body, _, _ = cases[name]
            headers = {"Content-Type": content_type} if content_type else {}
            out.append((name, call(ctx.url, "POST", "/translate", body, headers, deadline.timeout())))
        return out

    named, seconds, watch = named_rounds(ctx, plan.rounds, plan.malformed_clients, client)
    ok = {id(reply): name in cases and malformed_ok(reply, *cases[name][2:]) for name, reply in named}
    report = round_report([reply for _, reply in named], seconds, watch, lambda reply: ok[id(reply)])
    details = {}
    for name, (_, _, statuses, field_name) in cases.items():
        replies = [reply for n, reply in named if n == name]
        errors = Counter(str((reply.error_body() or {}).get("field")) for reply in replies if reply.status != 200)
        details[name] = {
            "expected": "/".join(map(str, statuses)) + (f" {field_name}" if field_name else ""),
            "outcomes": dict(Counter(reply.outcome for reply in replies)),
            "fields": dict(errors),
            "as_expected": sum(ok[id(reply)] for reply in replies),
            "requests": len(replies),
            "example": replies[0].body[:200].decode("utf-8", "replace") if replies else "",
        }
    return {**report, "clients": plan.malformed_clients, "rounds": plan.rounds, "cases": details}


GONE_MOMENTS = ("after sending", "while running")


def client_gone_round(ctx: Context) -> dict:
    """256 texts at num_beams 32 on a raw socket that closes, once as soon as they are sent and once when their work is
    running (/health's `running` above 0; where /health does not say, after a second); each time, how long from the
    close until the server is idle: /health's queued and running both 0 (the first idle answer after the last busy
    one, watching a second at least), or where /health does not report them, how long a new request waits for its
    answer. /health's `batches` tells whether the work was started at all."""
    plan = ctx.plan
    texts = [ctx.sources[i % len(ctx.sources)] for i in range(plan.gone_texts)]
    body = json.dumps({"text": texts, "num_beams": plan.gone_beams}).encode()
    head = request_head("/translate", {"Content-Type": JSON_TYPE, "Content-Length": str(len(body))})
    reports_work = {"queued", "running"} <= set(ctx.health_fields)
    facts = {"texts": len(texts), "num_beams": plan.gone_beams, "wait_s": plan.gone_wait_s}
    facts["method"] = (
        "/health: queued and running"
        if reports_work
        else "a new request's latency (/health reports no queued and running)"
    )
    replies = []
    with Watch(ctx.url, ctx.pid, plan) as watch:
        start = time.perf_counter()
        for moment in GONE_MOMENTS:
            facts[moment] = leave(ctx, watch, head + body, moment == "while running", reports_work, replies)
        seconds = time.perf_counter() - start
    report = round_report(replies, seconds, watch, lambda reply: reply.status == 200)
    return {**report, "requests": len(GONE_MOMENTS) + len(replies), "requests_per_s": None, **facts}


def leave(ctx: Context, watch: Watch, request: bytes, when_running: bool, reports_work: bool, replies: list) -> dict:
    """One request sent and abandoned (see client_gone_round); what the server did about it."""
    plan = ctx.plan
    health = call(ctx.url, "GET", "/health", timeout=10).json()
    batches_before = health.get("batches") if isinstance(health, dict) else None
    facts = {}
    with socket.create_connection(address(ctx.url), timeout=30) as sock:
        sock.sendall(request)
        sent = time.monotonic()
        while when_running and time.monotonic() - sent < 10:
            if select.select([sock], [], [], 0)[0]:  # answered (refused?) before its work ran
                data = read_to_end(sock, time.monotonic() + 5)
                facts["answered_before_leaving"] = parse_answer(data, 0.0, None).outcome if data else "closed"
                break
            latest = [sample for sample in watch.health if sample.at > sent and sample.outcome == "200"]
            if reports_work and latest and latest[-1].running:
                break
            if not reports_work and time.monotonic() - sent >= 1.0:
                break
            time.sleep(plan.health_every / 2)
    closed = time.monotonic()
    facts["left_after_s"] = closed - sent
    if reports_work:
        while (now := time.monotonic()) - closed < plan.gone_wait_s:
            after = [sample for sample in watch.health if sample.at > closed and sample.outcome == "200"]
            if now - closed >= 1.0 and after and not (after[-1].queued or after[-1].running):
                break
            time.sleep(plan.health_every)
        after = [sample for sample in watch.health if sample.at > closed and sample.outcome == "200"]
        busy = [sample.at for sample in after if sample.queued or sample.running]
        last_busy = max(busy, default=0.0)
        idle = [sample.at for sample in after if not (sample.queued or sample.running) and sample.at > last_busy]
        facts["busy_seen_after_leaving"] = bool(busy)
        facts["idle_after_s"] = (idle[0] - closed) if idle else None
    probes = 0
    if not reports_work:
        reply = post_json(ctx.url, "/translate", {"text": ctx.sources[0], "num_beams": 1}, plan.gone_wait_s)
        replies.append(reply)
        facts["idle_after_s"] = reply.seconds if reply.status == 200 else None
        probes = int(reply.status == 200)  # the new request's own batch (its options differ: a batch of its own)
    health = call(ctx.url, "GET", "/health", timeout=10).json()
    if batches_before is not None and isinstance(health, dict) and health.get("batches") is not None:
        facts["batches_started"] = health["batches"] - batches_before - probes
    return facts


def flood_arguments(plan: Plan) -> list[str]:
    return ["--max_queue", str(plan.max_queue)]


def flood_round(server, plan: Plan, requests: list[Valid]) -> dict:
    """`plan.flood` translations at once, `plan.rounds` times, at a server started with flood_arguments."""
    translations = [request for request in requests if request.path == "/translate"]
    unique = translations[: plan.flood]
    expected, lone = lone_answers(server.url, unique, plan.round_seconds)
    replies, differing, failed, seconds = [], [], [], 0.0
    with Watch(server.url, server.pid, plan) as watch:
        deadline = Deadline(plan.round_seconds)
        for _ in range(plan.rounds):
            if deadline.left() <= 0:
                break
            start = time.perf_counter()

            def client(i, deadline=deadline):
                request = unique[i % len(unique)]
                reply = post_json(server.url, request.path, request.payload, deadline.timeout())
                return [(i % len(unique), reply)]

            for item in together(plan.flood, client):
                index, reply = item if isinstance(item, tuple) else (None, item)
                replies.append(reply)
                if index is None:
                    continue
                if differs := compare(unique[index], reply, expected[index]):
                    differing.append(differs)
                if reply.status not in (200, 503):
                    failed.append(failure(unique[index], reply))
            seconds += time.perf_counter() - start
    accepted = lambda reply: reply.status == 200  # noqa: E731
    refused = lambda reply: reply.status == 503 and reply.error_body() is not None  # noqa: E731
    report = round_report(replies, seconds, watch, lambda reply: accepted(reply) or refused(reply))
    retry_after = [reply.headers.get("retry-after") for reply in replies if reply.status == 503]
    return {
        **report,
        "max_queue": plan.max_queue,
        "at_once": plan.flood,
        "rounds": plan.rounds,
        "lone": lone,
        "accepted": sum(map(accepted, replies)),
        "refused_503": len(retry_after),
        "retry_after_missing": sum(not (value or "").strip().isdigit() for value in retry_after),
        "retry_after_values": sorted(set(retry_after), key=str)[:5],
        "differing": len(differing),
        "differing_examples": differing[:3],
        "failure_examples": failed[:5],
    }


def limits_arguments(plan: Plan, flags: set) -> list[str]:
    """Those of --api_key, --rate_limit and --timeout_s that the server's --help offers."""
    arguments = []
    if "--api_key" in flags:
        arguments += ["--api_key", API_KEY]
    if "--rate_limit" in flags:
        arguments += ["--rate_limit", f"{plan.rate_limit}/minute"]
    if "--timeout_s" in flags:
        arguments += ["--timeout_s", str(plan.timeout_s)]
    return arguments


def limits_round(server, plan: Plan, sources: list[str], flags: set) -> dict:
    """Keys (--api_key), the rate (--rate_limit N/minute) and the time (--timeout_s) of a server started with
    limits_arguments. One client, one request after another: the order of the checks is part of the round."""
    arguments = limits_arguments(plan, flags)
    key = {"Authorization": f"Bearer {API_KEY}"} if "--api_key" in flags else {}
    cheap = {"text": sources[0], "num_beams": 1, "max_new_tokens": 4}
    checks, named = {}, []
    url = server.url
    with Watch(url, server.pid, plan) as watch:
        start = time.perf_counter()
        if "--api_key" in flags:
            for name, headers in {
                "no key": {},
                "a wrong key": {"Authorization": "Bearer not-the-key"},
                "the key without Bearer": {"Authorization": API_KEY},
            }.items():
                named.append((name, post_json(url, "/translate", cheap, 30, headers)))
                checks[name] = refused_with(401)
            named.append(("the key", post_json(url, "/translate", cheap, 30, key)))
            checks["the key"] = lambda reply: reply.status == 200
        if "--timeout_s" in flags:
            texts = [sources[i % len(sources)] for i in range(plan.gone_texts)]
            payload = {"text": texts, "num_beams": plan.gone_beams}
            named.append(("past --timeout_s", post_json(url, "/translate", payload, plan.round_seconds, key)))
            checks["past --timeout_s"] = refused_with(504)
        if "--rate_limit" in flags:
            for _ in range(plan.rate_limit + 3):
                named.append(("past --rate_limit", post_json(url, "/translate", cheap, 30, key)))
            checks["past --rate_limit"] = lambda reply: (
                reply.status == 200
                or (
                    reply.status == 429
                    and reply.error_body() is not None
                    and (reply.headers.get("retry-after") or "").strip().isdigit()
                )
            )
        seconds = time.perf_counter() - start
    ok = {id(reply): checks[name](reply) for name, reply in named}
    report = round_report([reply for _, reply in named], seconds, watch, lambda reply: ok[id(reply)])
    steps = {}
    for name, reply in named:
        step = steps.setdefault(name, {"outcomes": Counter(), "ms": [], "as_expected": 0, "requests": 0})
        step["outcomes"][reply.outcome] += 1
        step["ms"].append(round(1000 * reply.seconds, 1))
        step["as_expected"] += ok[id(reply)]
        step["requests"] += 1
    rate = [reply for name, reply in named if name == "past --rate_limit"]
    return {
        **report,
        "server_arguments": arguments,
        "steps": {name: {**step, "outcomes": dict(step["outcomes"])} for name, step in steps.items()},
        "accepted_with_the_key": sum(
            reply.status == 200 for name, reply in named if name in ("the key", "past --rate_limit")
        ),
        "rate_limited": sum(reply.status == 429 for reply in rate),
    }


# ---------------------------------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------------------------------


MAIN_ROUNDS = {
    "mixed": mixed_round,
    "big_body": big_body_round,
    "long_texts": long_texts_round,
    "attention": attention_round,
    "malformed": malformed_round,
    "client_gone": client_gone_round,
}


def server_flags(pythonpath: str | None = None) -> set[str]:
    """The flags `vaswani-serve --help` lists."""
    result = subprocess.run(
        [*serve_command(), "--help"], capture_output=True, text=True, env=server_environment(pythonpath), timeout=300
    )
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9_]*", result.stdout))


def metrics(url: str) -> dict:
    reply = call(url, "GET", "/metrics", timeout=30)
    names = set()
    if reply.status == 200:
        for line in reply.body.decode("utf-8", "replace").splitlines():
            if line and not line.startswith("#"):
                names.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return {
        "outcome": reply.outcome,
        "content_type": reply.headers.get("content-type"),
        "vaswani_metrics": sorted(name for name in names if name.startswith("vaswani_")),
        "other_metrics": len([name for name in names if not name.startswith("vaswani_")]),
    }


def run_abuse(
    model_dir: Path,
    folder: Path,
    plan: Plan,
    rounds=ROUNDS,
    pythonpath: str | None = None,
    progress: Callable[[str], None] = print,
) -> dict:
    """The chosen rounds against `vaswani-serve MODEL` started here (the main one with its defaults, flood's and
    limits' with their flags); a dict of the server's flags and each round's report."""
    with ThreadPoolExecutor(1) as pool:  # --help is read while the main server starts
        asked = pool.submit(server_flags, pythonpath)
        sources, references = test_set("test2016", max(plan.sentences, plan.gone_texts))
        tokenizer = load_tokenizer(model_dir)
        short = short_for_attention(tokenizer)
        requests = valid_requests(sources[: plan.sentences], references[: plan.sentences], short)
        results, server_facts = {}, {}
        main_rounds = [name for name in ON_THE_MAIN_SERVER if name in rounds]
        if main_rounds:
            with running_server(model_dir, folder / "server.log", pythonpath=pythonpath) as server:
                flags = asked.result()
                health = call(server.url, "GET", "/health", timeout=30).json()
                server_facts["health_fields"] = sorted(health) if isinstance(health, dict) else []
                progress(f"abuse: a lone client sends {len(requests)} valid requests (the expected answers)")
                expected, lone = lone_answers(server.url, requests, plan.round_seconds)
                fields = server_facts["health_fields"]
                ctx = Context(server.url, server.pid, plan, flags, requests, expected, sources, model_dir, fields)
                ctx.tokenizer = tokenizer
                for name in main_rounds:
                    if name == "client_gone":  # last: a server that keeps a gone client's work is busy long after
                        server_facts["metrics"] = metrics(server.url)
                    progress(f"abuse: {name}")
                    results[name] = MAIN_ROUNDS[name](ctx)
                    if name == "mixed":
                        results[name]["lone"] = lone
                server_facts.setdefault("metrics", metrics(server.url))
        flags = asked.result()
    own = {}  # the rounds that start a server of their own: both started together
    if "flood" in rounds:
        if "--max_queue" in flags:
            own["flood"] = flood_arguments(plan)
        else:
            results["flood"] = not_supported(["--max_queue"])
    if "limits" in rounds:
        if limits_arguments(plan, flags):
            own["limits"] = limits_arguments(plan, flags)
        else:
            results["limits"] = not_supported(["--api_key", "--rate_limit", "--timeout_s"])
    if own:
        progress(f"abuse: starting the servers of {', '.join(own)}")
        specs = [(model_dir, folder / f"server-{name}.log", arguments) for name, arguments in own.items()]
        with running_servers(specs, pythonpath=pythonpath) as servers:
            started = dict(zip(own, servers, strict=True))
            if "flood" in started:
                progress("abuse: flood")
                results["flood"] = flood_round(started["flood"], plan, requests)
            if "limits" in started:
                progress("abuse: limits")
                results["limits"] = limits_round(started["limits"], plan, sources, flags)
    results = {name: results[name] for name in ROUNDS if name in results}
    for name, result in results.items():
        if name in EXPECTS and result.get("supported"):
            result["expectation_flag"] = EXPECTS[name]
            result["flag_present"] = EXPECTS[name] in flags
    return {
        "flags": sorted(flag for flag in LIMIT_FLAGS if flag in flags),
        "flags_missing": sorted(flag for flag in LIMIT_FLAGS if flag not in flags),
        "server": server_facts,
        "plan": asdict(plan),
        "rounds": results,
    }


# ---------------------------------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------------------------------


def ms(value) -> str:
    return "" if value is None else f"{value:,.0f} ms" if value >= 10 else f"{value:.1f} ms"


def mb(value) -> str:
    return "?" if value is None else f"{value:,.0f}"


def failures(counts: dict) -> str:
    return ", ".join(f"{outcome}: {count}" for outcome, count in sorted(counts.items())) or "none"


def first_failure(result: dict) -> str:
    """The first failed request and the first answer that differed, if any."""
    shown = ""
    if result.get("failure_examples"):
        first = result["failure_examples"][0]
        shown += f"; first failure: {first['kind']} -> {first['outcome']} {first['answer'][:160]}"
    if result.get("differing_examples"):
        first = result["differing_examples"][0]
        shown += f"; first difference: {first['kind']}, {first['got vs lone client'][:160]}"
    return shown


def round_facts(name: str, result: dict) -> str:
    """The round's own figures, in a line."""
    if name == "mixed":
        lone = result.get("lone", {})
        return (
            f"{result['clients']} clients x {result['rounds']} rounds x {result['per_client']} requests "
            f"({', '.join(f'{k} {v}' for k, v in result['kinds'].items())} in the list); lone client: "
            f"{lone.get('requests')} requests, p50 {ms(lone.get('p50_ms'))}, "
            f"failures {failures(lone.get('failures', {}))}; "
            f"not sent in time: {result['not_sent']}; answers differing from the lone client's: {result['differing']}"
            + first_failure(result)
        )
    if name in ("big_body", "long_texts"):
        parts = result.get("variants") or result.get("cases")
        size = f"{result['body_bytes'] / 1e6:.1f} MB bodies; " if "body_bytes" in result else ""
        return size + "; ".join(
            f"{case}: {failures(facts['outcomes'])}, p50 {ms(facts.get('p50_ms'))}"
            + (f", {facts['body_sent_bytes_max'] / 1e6:.2f} MB sent at most" if "body_sent_bytes_max" in facts else "")
            for case, facts in parts.items()
        )
    if name == "attention":
        tokens, characters = result["long_text"]["tokens"], result["long_text"]["characters"]
        long_text, valid = result["cases"]["long text"], result["cases"]["valid"]
        return (
            f"a text of {'?' if tokens is None else f'{tokens:,}'} tokens ({characters:,} characters): "
            f"{failures(long_text['outcomes'])}, p50 {ms(long_text.get('p50_ms'))}, {long_text['bytes']:,} bytes; "
            f"a valid one (a test2016 sentence): {failures(valid['outcomes'])}, {valid['bytes']:,} bytes"
        )
    if name == "malformed":
        return "; ".join(
            f"{case} -> {failures(facts['outcomes'])} (expected {facts['expected']}; fields "
            f"{', '.join(facts['fields']) or '-'})"
            for case, facts in result["cases"].items()
        )
    if name == "client_gone":
        shown = []
        for moment in GONE_MOMENTS:
            facts = result[moment]
            idle = facts.get("idle_after_s")
            started = facts.get("batches_started")
            shown.append(
                f"closed {moment} ({facts['left_after_s']:.2f} s after sending"
                + (
                    f", answered first: {facts['answered_before_leaving']}"
                    if "answered_before_leaving" in facts
                    else ""
                )
                + "): idle after "
                + ("(not within the wait)" if idle is None else f"{idle:.2f} s")
                + ("" if started is None else f", batches started {started}")
            )
        return (
            f"{result['texts']} texts at num_beams {result['num_beams']} on a socket; "
            + "; ".join(shown)
            + f" ({result['method']}; waited at most {result['wait_s']:.0f} s)"
        )
    if name == "flood":
        return (
            f"--max_queue {result['max_queue']}, {result['at_once']} at once x {result['rounds']} rounds: "
            f"200 x {result['accepted']}, 503 x {result['refused_503']} (without a Retry-After: "
            f"{result['retry_after_missing']}); answers differing from the lone client's: {result['differing']}"
            + first_failure(result)
        )
    if name == "limits":
        return f"{' '.join(result['server_arguments'])}: " + "; ".join(
            f"{step} -> {failures(facts['outcomes'])}" for step, facts in result["steps"].items()
        )
    return ""


def format_abuse_table(abuse: dict) -> str:
    server = abuse["server"]
    metric = server.get("metrics", {})
    lines = [
        f"vaswani-serve under abuse: flags {', '.join(abuse['flags']) or 'none of the limits'}"
        + (f" (missing: {', '.join(abuse['flags_missing'])})" if abuse["flags_missing"] else "")
        + f"; /health fields {', '.join(server.get('health_fields', [])) or '?'}"
        + f"; /metrics {metric.get('outcome', '?')}"
        + (f", {len(metric['vaswani_metrics'])} vaswani_ metrics" if metric.get("vaswani_metrics") else ""),
        "",
        "| round | requests | requests/s | p50 | p95 | p99 | failures by status | /health p50 / p99 / max "
        "| RSS before / peak / after (MB) |",
        "|---|---:|---:|---:|---:|---:|---|---|---|",
    ]
    notes = []
    for name, result in abuse["rounds"].items():
        if not result.get("supported"):
            lines.append(f"| {name} | {result['reason']} | | | | | | | |")
            continue
        latency, health, rss = result["latency"], result["health"], result["rss_mb"]
        rate = result.get("requests_per_s")
        health_failed = f"; failed: {failures(health['failures'])}" if health.get("failures") else ""
        lines.append(
            f"| {name} | {result['requests']} | {'' if rate is None else f'{rate:.1f}'} | {ms(latency.get('p50_ms'))} "
            f"| {ms(latency.get('p95_ms'))} | {ms(latency.get('p99_ms'))} | {failures(result['failures'])} "
            f"| {ms(health.get('p50_ms'))} / {ms(health.get('p99_ms'))} / {ms(health.get('max_ms'))}{health_failed} "
            f"| {mb(rss['before'])} / {mb(rss['peak'])} / {mb(rss['after'])} |"
        )
        flag = ""
        if result.get("flag_present") is False:
            flag = f" [this server has no {result['expectation_flag']}]"
        notes.append(f"- {name}{flag}: {round_facts(name, result)}")
    return "\n".join([*lines, "", *notes])
