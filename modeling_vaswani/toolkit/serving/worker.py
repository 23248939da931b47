"""vaswani-serve's one worker thread: the only thread that runs the models, and the only one that uses their
tokenizers to pad batches, so that no request changes state another reads (a fast tokenizer's padding setting lives
in the shared Rust object; see `Checker` for the tokenizers the checks use).

Requests wait in a bounded queue (`Overloaded` when it is full); those of the same kind and options that arrive within
a short window share a batch of at most `max_tokens` source tokens. Each request carries a deadline and can be
cancelled (its client gone, its time spent): a waiting one is dropped before any work, and a running batch whose
requests are all cancelled stops at the next decoding step (`Stop`). Written by hand: no ASGI library batches
requests or runs them on one thread of its own.
"""

import copy
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from transformers import MaxTimeCriteria


class Overloaded(Exception):
    """The queue holds `max_queue` requests already, or the server is shutting down."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(f"{message}; retry in {retry_after} s")
        self.retry_after = retry_after


class Cancelled(Exception):
    """The request was dropped before its answer was ready (its client went away, or its time limit passed)."""


class BatchKey(NamedTuple):
    """What a job runs: `kind` ("translate", "score", "attention") on the served model named `model`, with `options`
    (hashable: a translation's decoding options, None for the rest). Jobs of equal keys may share a batch, and only
    translations do: a score's or an attention's batch is one request's."""

    kind: str
    model: str
    options: Hashable = None

    @property
    def shares_batches(self) -> bool:
        return self.kind == "translate"


@dataclass(eq=False)
class Job:
    """One request's work: `items` (sentences, pairs, texts) of one `key`. `done(outputs, error)` is called once, on
    the worker's thread."""

    key: BatchKey
    items: list
    done: Callable[[Any, BaseException | None], None]
    tokens: int = 0
    deadline: float = float("inf")  # time.monotonic() after which the answer is no use
    cancelled: bool = False
    arrived: float = field(default_factory=time.monotonic)

    def finish(self, outputs, error: BaseException | None) -> None:
        if not self.cancelled:
            self.done(outputs, error)


class Stop:
    """What stops a running batch of PyTorch translations between decoding steps: transformers' MaxTimeCriteria
    (public, and one that Section 6.1's search knows to be row-independent, so finished sentences still leave the
    batch), whose limit is cut to nothing when every request of the batch has been cancelled."""

    def __init__(self, seconds: float):
        self.criteria = MaxTimeCriteria(max_time=max(seconds, 0.0))

    def now(self) -> None:
        self.criteria.max_time = -1.0  # MaxTimeCriteria compares the time spent with this attribute at each step

    @property
    def stopped(self) -> bool:
        return time.time() - self.criteria.initial_timestamp > self.criteria.max_time


class Worker:
    """The queue and the thread. `execute(key, items, stop)` does a batch's work and returns one output per item; it
    is called on the worker thread only."""

    def __init__(
        self,
        execute: Callable[[BatchKey, list, Stop], list],
        window: float,
        max_tokens: int,
        max_queue: int,
        on_batch: Callable[[BatchKey, list[Job], float], None] = lambda key, jobs, seconds: None,
    ):
        self.execute, self.window, self.max_tokens, self.max_queue = execute, window, max_tokens, max_queue
        self.on_batch = on_batch
        self.waiting: list[Job] = []
        self.running: list[Job] = []
        self.stop: Stop | None = None
        self.batches = 0
        self.batch_seconds = 1.0  # a running mean, for Retry-After
        self.ready = threading.Condition()
        self.closed = False
        self.thread = threading.Thread(target=self.execute_batches, daemon=True, name="vaswani-serve-worker")
        self.thread.start()

    def submit(self, job: Job) -> None:
        with self.ready:
            if self.closed:
                raise Overloaded("the server is shutting down", retry_after=30)
            if len(self.waiting) >= self.max_queue:
                retry_after = max(1, round(self.batch_seconds * (1 + len(self.waiting) // 8)))
                raise Overloaded(f"the server is busy: {len(self.waiting)} requests are waiting", retry_after)
            self.waiting.append(job)
            self.ready.notify()

    def cancel(self, job: Job) -> None:
        """Drops `job`: taken out of the queue, or, running, the batch stopped once none of its jobs is wanted."""
        with self.ready:
            job.cancelled = True
            if job in self.waiting:
                self.waiting.remove(job)
            elif job in self.running and all(other.cancelled for other in self.running) and self.stop is not None:
                self.stop.now()

    def counts(self) -> tuple[int, int]:
        """Requests waiting, and requests in the batch being worked on."""
        with self.ready:
            return len(self.waiting), len(self.running)

    def refuse_new(self) -> None:
        with self.ready:
            self.closed = True

    def close(self, timeout: float) -> bool:
        """Refuses new requests, and waits up to `timeout` seconds for those accepted; whether all finished."""
        self.refuse_new()
        deadline = time.monotonic() + timeout
        while any(self.counts()) and time.monotonic() < deadline:
            time.sleep(0.05)
        return not any(self.counts())

    def take(self) -> list[Job]:
        """The next batch: the first waiting job, and those of its key that arrived within the window and fit."""
        with self.ready:
            while not self.waiting:
                self.ready.wait()
            first = self.waiting[0]
        time.sleep(max(0.0, first.arrived + self.window - time.monotonic()))
        with self.ready:
            now = time.monotonic()
            for job in [job for job in self.waiting if job.deadline <= now]:
                self.waiting.remove(job)
                job.finish(None, Cancelled("the time limit passed while waiting"))
            if not self.waiting:  # every job cancelled during the window
                return []
            lead = self.waiting[0]
            taken, budget = [lead], self.max_tokens - lead.tokens
            if lead.key.shares_batches:
                for job in self.waiting[1:]:
                    if job.key == lead.key and job.tokens <= budget:
                        taken.append(job)
                        budget -= job.tokens
            for job in taken:
                self.waiting.remove(job)
            self.running = taken
            self.stop = Stop(max(job.deadline for job in taken) - now)
            return taken

    def execute_batches(self) -> None:
        """The thread's life: each batch taken and executed, its outputs handed to its jobs."""
        while True:
            taken = self.take()
            if not taken:
                continue
            started = time.monotonic()
            try:
                outputs = self.execute(taken[0].key, [item for job in taken for item in job.items], self.stop)
                error = Cancelled("the batch was stopped") if self.stop.stopped else None
            except BaseException as failure:  # handed to each request, which answers with it
                outputs, error = None, failure
            seconds = time.monotonic() - started
            with self.ready:
                self.batches += 1
                self.batch_seconds = 0.8 * self.batch_seconds + 0.2 * seconds
                self.running, self.stop = [], None
            self.on_batch(taken[0].key, taken, seconds)
            start = 0
            for job in taken:
                part = None if outputs is None or error else outputs[start : start + len(job.items)]
                start += len(job.items)
                job.finish(part, error)


class Checker:
    """Each checking thread's own copy of each model's tokenizer: the checks (lengths, prefixes) tokenize off the event
    loop, in threads of their own, and never touch the tokenizers the worker pads batches with."""

    def __init__(self, tokenizers: dict):
        self.tokenizers, self.local = tokenizers, threading.local()

    def tokenizer(self, name: str):
        mine = self.local.__dict__.setdefault("tokenizers", {})
        if name not in mine:
            mine[name] = copy.deepcopy(self.tokenizers[name])
        return mine[name]
