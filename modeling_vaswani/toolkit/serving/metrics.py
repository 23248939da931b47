"""vaswani-serve's metrics, served at /metrics in Prometheus' text format by prometheus-client (the official client;
the FastAPI instrumentators build on it and add only per-route HTTP metrics, which the gate records here already).
A registry of the app's own, so that two apps in one process count apart."""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

ENDPOINTS = ("/translate", "/score", "/attention", "/health", "/metrics", "/")  # any other path counts as "other"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class Metrics:
    def __init__(self):
        self.registry = registry = CollectorRegistry()
        self.requests = Counter(
            "vaswani_requests", "HTTP requests answered, by endpoint and status", ["endpoint", "status"],
            registry=registry,
        )  # fmt: skip
        self.latency = Histogram(
            "vaswani_request_seconds", "Time from a request's arrival to its answer", ["endpoint"],
            buckets=LATENCY_BUCKETS, registry=registry,
        )  # fmt: skip
        self.batch_texts = Histogram(
            "vaswani_batch_texts", "Texts (or pairs) in each batch the worker ran", ["kind"], buckets=BATCH_BUCKETS,
            registry=registry,
        )  # fmt: skip
        self.batch_seconds = Histogram(
            "vaswani_batch_seconds", "Time the worker spent on each batch", ["kind"], buckets=LATENCY_BUCKETS,
            registry=registry,
        )  # fmt: skip
        self.tokens = Counter(
            "vaswani_source_tokens", "Source tokens of the texts translated, scored or shown", ["kind"],
            registry=registry,
        )  # fmt: skip
        self.dropped = Counter(
            "vaswani_dropped_requests", "Requests accepted and dropped before their answer, by reason", ["reason"],
            registry=registry,
        )  # fmt: skip
        self.queued = Gauge("vaswani_queued_requests", "Requests waiting for the worker", registry=registry)
        self.running = Gauge("vaswani_running_requests", "Requests in the batch being worked on", registry=registry)

    def answered(self, path: str, status: int, seconds: float) -> None:
        endpoint = path if path in ENDPOINTS else "other"
        self.requests.labels(endpoint, str(status)).inc()
        self.latency.labels(endpoint).observe(seconds)

    def watch(self, counts) -> None:
        """The queue's gauges read `counts()` (waiting, running) when scraped."""
        self.queued.set_function(lambda: counts()[0])
        self.running.set_function(lambda: counts()[1])

    def batch(self, kind: str, texts: int, tokens: int, seconds: float) -> None:
        self.batch_texts.labels(kind).observe(texts)
        self.batch_seconds.labels(kind).observe(seconds)
        self.tokens.labels(kind).inc(tokens)

    def text(self) -> bytes:
        return generate_latest(self.registry)
