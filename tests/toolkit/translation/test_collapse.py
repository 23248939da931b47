"""The warning of a collapsed model (translation/collapse.py), against a rule written here by hand on the same
definition: of at least 20 different non-blank inputs, more than half got translations that agree on their first 40
characters; and on real text: test2016's own references never warn, one text cut at different lengths always does."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from modeling_vaswani.toolkit.data.corpora import multi30k_files, read_sentences
from modeling_vaswani.toolkit.translation.collapse import collapse_warning


def shipped_test_set(language: str) -> list[str]:
    """The shipped Multi30k test2016 in `language`."""
    return read_sentences(multi30k_files("test", languages=("en", language))[language])


def by_hand(sources: list[str], translations: list[str]) -> bool:
    """Collapsed: at least 20 different non-blank inputs, each counted once with the translation it got first, and a
    40-character beginning that more than half of their translations share."""
    seen, beginnings = set(), []
    for source, translation in zip(sources, translations, strict=True):
        if source.strip() == "" or source in seen:
            continue
        seen.add(source)
        beginnings.append(translation[:40])
    if len(beginnings) < 20:
        return False
    most = max(sum(1 for other in beginnings if other == each) for each in beginnings)
    return 2 * most > len(beginnings)


# Few sources and translations, so that repeats, blank inputs and shared beginnings come often.
SOURCES = st.sampled_from(["", " ", *(f"sentence {i}" for i in range(40))])
TRANSLATIONS = st.sampled_from(["", "Ein Hund.", "Ein Hund läuft.", "x" * 39, "x" * 40, "x" * 41, "x" * 80, "y"])


@given(st.lists(st.tuples(SOURCES, TRANSLATIONS), max_size=80))
def test_it_warns_exactly_where_the_rule_written_by_hand_says(pairs):
    sources = [source for source, _ in pairs]
    translations = [translation for _, translation in pairs]
    assert (collapse_warning(sources, translations) is not None) == by_hand(sources, translations)


@given(st.lists(st.text(min_size=1, max_size=60).filter(str.strip), min_size=20, max_size=60, unique=True))
def test_different_sentences_translated_as_themselves_do_not_warn(sentences):
    translations = [f"{i}: {sentence}" for i, sentence in enumerate(sentences)]  # no two beginnings alike
    assert collapse_warning(sentences, translations) is None


def test_test2016_references_do_not_warn_and_one_text_cut_at_each_length_does():
    english, german = shipped_test_set("en"), shipped_test_set("de")
    assert collapse_warning(english, german) is None
    # An untrained model's way: one text, cut at each sentence's length limit.
    text = "Ein Mann mit" + "en" * 200
    cut = [text[: 45 + len(sentence) % 50] for sentence in english[:24]]
    warning = collapse_warning(english[:24], cut)
    assert warning.startswith("24 of 24 different inputs (100%) got one and the same translation")
    assert "Train it longer" in warning and "checkpoint" in warning


def test_a_sentence_given_many_times_is_one_input():
    english = shipped_test_set("en")[:19]
    repeated = english + [english[0]] * 30
    assert collapse_warning(repeated, ["Ein Hund."] * len(repeated)) is None  # 19 different inputs: too few
    assert collapse_warning(repeated + ["A cat."], ["Ein Hund."] * (len(repeated) + 1)) is not None


def test_counts_that_differ_are_refused():
    with pytest.raises(ValueError, match="3 sources and 2 translations"):
        collapse_warning(["a", "b", "c"], ["x", "y"])
