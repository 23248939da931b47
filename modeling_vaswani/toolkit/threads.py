"""How many threads torch runs a command's work on: the user's choice where they made one (--threads N, or
OMP_NUM_THREADS in the environment, which torch reads at start), else whichever of torch's default (one a core) and
one thread does a short sample of the command's own work faster: training (training/budget.py) by `choose_threads` on
its probe's steps, vaswani-translate, -evaluate, -score and -serve by `command_threads` on a sample whose slower count
is cut short. The commands measure just before their first batch, once every check of their input has passed
(`at_work_start`, `start_work`), so that a refused input costs no measuring; vaswani-serve at startup.

Why measure rather than keep torch's default: on a machine another job keeps busy, OpenMP threads that spin at every
barrier waiting for a thread without a core make the work several times slower, and no setting of torch's tells when.
On 2 cores, the small preset's training step took 0.52 s alone, 3.3 s beside a second such job with 2 threads each,
and 0.89 s with one thread each (2026-11-26); translating 200 test2016 sentences under a load of 4 took 292 s on two
threads and 35 s on one (2026-11-27, docs/results.md). On a quiet machine the default is the faster, so neither count
can be fixed for everyone.
"""

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

# The environment's thread settings a user makes: torch's intra-op pool takes its size from them at start.
USER_SETTINGS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")

# The sample a translating command times: PROBE_SENTENCES source sentences of PROBE_TOKENS tokens (about a Multi30k
# caption's), PROBE_STEPS decoder steps of the model's own beam search; about 0.1-0.4 s of the small preset's work.
PROBE_SENTENCES, PROBE_TOKENS, PROBE_STEPS = 16, 24, 8


@contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """torch's intra-op thread count set to `count` while the block runs, and set back after it."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def user_threads(environ=None) -> str | None:
    """The environment variable by which the user fixed torch's thread count (`USER_SETTINGS`), None where none is
    set."""
    environ = os.environ if environ is None else environ
    return next((name for name in USER_SETTINGS if environ.get(name, "").strip()), None)


def choose_threads(
    seconds_per_step, has_time: Callable[[], bool] = lambda: True, environ=None
) -> tuple[int, float, tuple[int, float] | None]:
    """Times `seconds_per_step()` on torch's threads (one a core) and on one, and returns (the faster count, its
    seconds a step, (the other count, its seconds a step) or None where there is one thread, the user fixed the count
    (`user_threads(environ)`), or no time was left (`has_time()`) to try it). torch's thread count is left as it was:
    the caller that owns the process applies the choice."""
    threads = torch.get_num_threads()
    measured = seconds_per_step()
    if threads == 1 or user_threads(environ) or not has_time():
        return threads, measured, None
    with torch_threads(1):
        alone = seconds_per_step()
    if alone < measured:
        return 1, alone, (threads, measured)
    return threads, measured, (1, alone)


@dataclass(frozen=True)
class Threads:
    """What a command runs on: `count` threads, and why: "--threads" or the environment variable the user set,
    "measured" (then `seconds`, the sample's seconds on the count chosen, and `other`, (the count not chosen, its
    seconds)), or, where there was nothing to choose, "torch's count" (one thread) or "its engine's own threads"."""

    count: int
    reason: str
    seconds: float | None = None
    other: tuple[int, float] | None = None

    def describe(self, work: str) -> str:
        threads = f"{self.count} thread{'s' * (self.count > 1)}"
        if self.other is None:
            return f"{work} on {threads} ({self.reason})"
        other, seconds = self.other
        return (
            f"{work} on {threads}, measured faster than {other} on a sample of it ({self.seconds:.2f} s against "
            f"{seconds:.2f} s); --threads N fixes the count"
        )


def timed(work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def unmeasured_threads(sample: Callable | None, requested: int | None = None, environ=None) -> Threads | None:
    """The thread count `command_threads` gives without measuring anything (`requested`, the environment's, torch's
    where it is one thread or `sample` is None), None where it would measure: a command puts that off until its work
    starts (`at_work_start`)."""
    if requested is not None:
        return Threads(requested, "--threads")
    fixed = user_threads(environ)
    threads = torch.get_num_threads()
    if fixed or sample is None or threads == 1:
        reason = fixed or ("its engine's own threads" if sample is None else "torch's count")
        return Threads(threads, reason)
    return None


def command_threads(sample: Callable | None, requested: int | None = None, environ=None) -> Threads:
    """The thread count a command runs its work on: `requested` (its --threads) where given, else the count the
    environment fixed (`user_threads`), else the faster on `sample` (a short piece of the command's own work). `sample`
    None: the work does not run on torch's threads (a CTranslate2 model), which keeps torch's count.

    The sample runs on one thread first (once untimed, so that neither count pays for first-call set-up), then on
    torch's count with one thread's time as its limit (`sample(limit)` stops there, `Deadline`): on a busy machine,
    where torch's count is many times slower, measuring it costs no more than one thread's sample (under a load of 20
    on 2 cores, the sample took 1.2 s on one thread and 32 s on two measured whole, 2026-11-27)."""
    chosen = unmeasured_threads(sample, requested, environ)
    if chosen is not None:
        return chosen
    threads = torch.get_num_threads()
    with torch_threads(1):
        sample()
        alone = timed(sample)
    together = timed(lambda: sample(alone))
    if together < alone:
        return Threads(threads, "measured", together, (1, alone))
    return Threads(1, "measured", alone, (threads, together))


# The choice a command put off until its work starts (`at_work_start`), made by the first `start_work`. A context
# variable, not a global: a thread started inside the block (a server's worker) starts with none, so nothing but the
# command's own work makes it.
_AT_WORK_START: ContextVar[Callable[[], object] | None] = ContextVar("vaswani_threads_at_work_start", default=None)


@contextmanager
def at_work_start(choose: Callable[[], object]) -> Iterator[None]:
    """`choose()` (a command's measuring of its threads) made by the first `start_work()` inside the block, just
    before its first batch of real work, and not at all where none comes: an input the request's checks refuse
    (its lengths, its phrases, an empty file; checks that need the tokenizer, made after the model loads) is refused
    without the user waiting for the measuring first."""
    token = _AT_WORK_START.set(choose)
    try:
        yield
    finally:
        _AT_WORK_START.reset(token)


def start_work() -> None:
    """Called by the loops that translate (translation/translate.py's batches) and score (translation/scoring.py) once
    every check of their input is passed, before their first batch: makes the choice an `at_work_start` block put
    off, once; nothing outside such a block (a library caller's, a server's)."""
    choose = _AT_WORK_START.get()
    if choose is not None:
        _AT_WORK_START.set(None)  # once: a command's later batches, or later calls, run on the count chosen
        choose()


class Deadline(StoppingCriteria):
    """Stops a generate() call once `seconds` have passed since the criterion was made (after the step running)."""

    def __init__(self, seconds: float):
        self.at = time.perf_counter() + seconds

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        return torch.full((input_ids.shape[0],), time.perf_counter() > self.at, device=input_ids.device)


def decoding_sample(model, num_beams: int | None = None) -> Callable | None:
    """A short piece of a translating command's work for `command_threads`: PROBE_STEPS steps of the model's beam
    search (`num_beams`, else its own) on a batch of PROBE_SENTENCES made-up sentences of PROBE_TOKENS tokens (their
    ids do not change what a step costs), stopped after `limit` seconds where given. None for a model that does not
    run on torch (a CTranslate2 export)."""
    if not isinstance(model, torch.nn.Module):
        return None
    ids = made_up_batch(model)
    beams = {"num_beams": num_beams} if num_beams else {}

    @torch.no_grad()
    def sample(limit: float | None = None):
        stop = StoppingCriteriaList([] if limit is None else [Deadline(limit)])
        mask = torch.ones_like(ids)
        return model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=PROBE_STEPS, stopping_criteria=stop, **beams
        )

    return sample


def scoring_sample(model) -> Callable | None:
    """A short piece of vaswani-score's work for `command_threads`: one forward pass that scores a batch of
    PROBE_SENTENCES made-up pairs of PROBE_TOKENS tokens a side (one pass: `limit` is not needed). None for a model
    that does not run on torch."""
    if not isinstance(model, torch.nn.Module):
        return None
    ids = made_up_batch(model)

    @torch.no_grad()
    def sample(limit: float | None = None):
        return model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids)

    return sample


def made_up_batch(model) -> torch.Tensor:
    """PROBE_SENTENCES rows of PROBE_TOKENS token ids, above the special tokens' ids, on the model's device."""
    generator = torch.Generator().manual_seed(0)
    config = model.config
    special = (config.pad_token_id, config.eos_token_id, config.bos_token_id, config.decoder_start_token_id)
    first = 1 + max(token for token in special if token is not None)
    ids = torch.randint(first, model.config.vocab_size, (PROBE_SENTENCES, PROBE_TOKENS), generator=generator)
    return ids.to(model.device)


__all__ = [
    "Threads",
    "at_work_start",
    "choose_threads",
    "command_threads",
    "decoding_sample",
    "scoring_sample",
    "start_work",
    "torch_threads",
    "unmeasured_threads",
]
