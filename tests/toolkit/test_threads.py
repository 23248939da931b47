"""The one thread rule (toolkit/threads.py): the user's count wins (--threads, OMP_NUM_THREADS, MKL_NUM_THREADS),
else the faster count on a sample of real work whose cost depends on the thread count it runs on; the samples of the
commands' work run on a real tiny model."""

import time

import pytest
import torch
from helpers.tiny_models import tiny_model

from modeling_vaswani.toolkit.threads import (
    PROBE_SENTENCES,
    PROBE_STEPS,
    PROBE_TOKENS,
    choose_threads,
    command_threads,
    decoding_sample,
    scoring_sample,
    torch_threads,
)


def sleeping(seconds_on: dict[int, float], runs: list[int]):
    """Work of 4 steps that takes `seconds_on[count]` on torch's current thread count, stopped after the step that
    passes `limit` seconds as generate() stops at a Deadline; it records each count it ran on."""

    def work(limit: float | None = None):
        count = torch.get_num_threads()
        runs.append(count)
        started = time.perf_counter()
        for _ in range(4):
            time.sleep(seconds_on[count] / 4)
            if limit is not None and time.perf_counter() - started > limit:
                return

    return work


@pytest.mark.parametrize(("slower", "faster"), [(2, 1), (1, 2)])
def test_the_count_that_did_the_sample_faster_is_chosen(slower, faster):
    runs = []
    with torch_threads(2):
        chosen = command_threads(sleeping({slower: 0.4, faster: 0.04}, runs), environ={})
        assert torch.get_num_threads() == 2  # the caller applies the choice
    assert (chosen.count, chosen.reason, chosen.other[0]) == (faster, "measured", slower)
    assert chosen.seconds < chosen.other[1]
    assert runs == [1, 1, 2]  # once untimed, then each count
    if slower == 2:  # stopped once it had taken one thread's time: the slower count costs little to measure
        assert chosen.other[1] < 0.3
    assert f"on {faster} thread" in chosen.describe("translating") and "--threads N" in chosen.describe("x")


@pytest.mark.parametrize("setting", ["OMP_NUM_THREADS", "MKL_NUM_THREADS"])
def test_a_count_the_user_fixed_is_kept_and_nothing_is_measured(setting):
    runs = []
    with torch_threads(2):
        fixed = command_threads(sleeping({1: 0.0, 2: 0.05}, runs), environ={setting: "2"})
        assert (fixed.count, fixed.reason, runs) == (2, setting, [])
        asked = command_threads(sleeping({1: 0.0, 2: 0.05}, runs), requested=3, environ={})
        assert (asked.count, asked.reason, runs) == (3, "--threads", [])
        # Training measures its steps through the same rule: the user's count there too.
        assert choose_threads(lambda: 0.5, environ={setting: "2"}) == (2, 0.5, None)


def test_a_model_not_run_by_torch_keeps_torch_count():
    with torch_threads(2):
        assert command_threads(None, environ={}).count == 2


@pytest.fixture(scope="module")
def model():
    return tiny_model()


def test_the_decoding_sample_is_the_model_beam_search_on_a_batch(model):
    with torch_threads(1):
        sample = decoding_sample(model, num_beams=2)
        sequences, cut = sample(), sample(0.0)
    assert sequences.shape[0] == PROBE_SENTENCES and sequences.shape[1] <= PROBE_STEPS + 1
    assert cut.shape == (PROBE_SENTENCES, 2)  # the start and the one step that passed the limit
    assert decoding_sample(object()) is None and scoring_sample(object()) is None


def test_the_scoring_sample_scores_a_batch(model):
    with torch_threads(1):
        output = scoring_sample(model)()
    assert output.logits.shape[:2] == (PROBE_SENTENCES, PROBE_TOKENS) and torch.isfinite(output.loss)
