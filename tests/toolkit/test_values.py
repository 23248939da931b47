"""values.py: the one whole-number check every room refuses its counts with (data's vocab_size and max_length,
translation's batch sizes and beams, the exports' recorded settings), against the rule written out here."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from modeling_vaswani.toolkit.values import ArgumentTypeError, count, shown

ANYTHING = st.one_of(
    st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=True), st.text(max_size=30),
    st.lists(st.integers(), max_size=3), st.binary(max_size=5),
)  # fmt: skip


@given(ANYTHING, st.integers(-5, 300), st.booleans())
def test_a_count_is_an_int_not_a_bool_of_at_least_the_minimum(value, minimum, optional):
    accepted = (optional and value is None) or (type(value) is int and value >= minimum)
    if accepted:
        assert count("n", value, minimum, optional=optional) is value
        return
    with pytest.raises(ValueError) as refused:
        count("n", value, minimum, why="the reason", optional=optional)
    message = str(refused.value)
    assert message.startswith(f"n={shown(value)}; expected an int of at least {minimum} (the reason)")
    assert message.endswith(" (or None)") is optional
    # the wrong type is also a TypeError, as Python's own are; a low whole number is not
    assert isinstance(refused.value, TypeError) is (type(value) is not int)


@pytest.mark.parametrize("value", [True, False, 2.0, "3", None])
def test_what_looks_like_a_count_is_refused_by_its_type(value):
    with pytest.raises(ArgumentTypeError, match="expected an int of at least 1"):
        count("batch_size", value)


def test_a_long_value_is_shown_shortened():
    with pytest.raises(ValueError) as refused:
        count("nbest", "x" * 10_000)
    assert len(str(refused.value)) < 200 and "..." in str(refused.value)
