"""translate.each_generated, the translating loop every front end runs batches through: results in the batches'
order, no more batches in a model's hands than it says it takes (`batches_in_flight`), the batches read no further
ahead than twice that, a batch run whole by one search (`searches=1`) exactly where as many batches follow it, and a
batch's error raised as itself, on batches of random sizes and random work times."""

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from modeling_vaswani.toolkit.translation.translate import each_generated


class Model:
    """What each_generated reads of a model: how many batches it takes at once (an attribute only some have)."""

    def __init__(self, at_once: int | None):
        if at_once is not None:
            self.batches_in_flight = at_once


class Work:
    """A generate() that sleeps a drawn time, counting the calls running at once and the batches read so far."""

    def __init__(self, delays: list[float], failing: int | None = None):
        self.delays, self.failing = delays, failing
        self.running = self.most = self.read = 0
        self.lock = threading.Lock()
        self.searches = {}  # batch number -> the searches its call asked (None: not said)

    def batches(self):
        for number, delay in enumerate(self.delays):
            self.read += 1
            yield [number], {"sentences": [f"s{number}"], "delay": delay}, {"number": number}

    def __call__(self, batch: dict, kwargs: dict):
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            self.searches[kwargs["number"]] = kwargs.get("searches")
        try:
            time.sleep(batch["delay"])
            if kwargs["number"] == self.failing:
                raise ValueError(f"batch {kwargs['number']} refused")
            return [sentence.upper() for sentence in batch["sentences"]]
        finally:
            with self.lock:
                self.running -= 1


@settings(max_examples=40, deadline=None)
@given(
    delays=st.lists(st.sampled_from([0.0, 0.001, 0.004]), min_size=0, max_size=9),
    at_once=st.sampled_from([None, 1, 2, 3]),
)
def test_results_come_in_order_with_at_most_the_models_batches_at_once(delays, at_once):
    work = Work(delays)
    seen = []
    for indices, result in each_generated(Model(at_once), work.batches(), work):
        seen.append((indices, result))
        # Read ahead: those in the model's hands and, where it takes several, as many to know which come last.
        assert work.read <= len(seen) + (2 * at_once - 1 if (at_once or 1) > 1 else 0)
    assert seen == [([number], [f"S{number}"]) for number in range(len(delays))]
    assert work.most <= (at_once or 1)
    # Whole (one search) exactly where at least the model's batches at once follow, where it takes several.
    whole = [1 if (at_once or 1) > 1 and len(delays) - number > at_once else None for number in range(len(delays))]
    assert [work.searches[number] for number in range(len(delays))] == whole


def test_two_batches_are_in_the_models_hands_at_once_where_it_takes_two():
    work = Work([0.02] * 4)
    assert [indices for indices, _ in each_generated(Model(2), work.batches(), work)] == [[0], [1], [2], [3]]
    assert work.most == 2
    assert work.searches == {0: 1, 1: 1, 2: None, 3: None}


def test_a_callers_own_searches_are_kept():
    """A call that names its searches (a generate() argument) keeps them on every batch, whole or last."""
    work = Work([0.0] * 5)

    def batches():
        for indices, batch, kwargs in work.batches():
            yield indices, batch, {**kwargs, "searches": 3}

    assert len(list(each_generated(Model(2), batches(), work))) == 5
    assert work.searches == {number: 3 for number in range(5)}


@pytest.mark.parametrize("at_once", [1, 2])
def test_a_batchs_error_is_raised_as_itself(at_once):
    work = Work([0.0, 0.002, 0.0, 0.0], failing=1)
    results = each_generated(Model(at_once), work.batches(), work)
    assert next(results) == ([0], ["S0"])
    with pytest.raises(ValueError, match=r"^batch 1 refused$"):
        next(results)
