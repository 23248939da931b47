"""The language sentences are split by (issue 51, item 16): one check of a language code (`check_language`) for every
entry point, refusing an empty value, a path or a name with the value and what was expected, and a warning, once a
code, where sentencex has no rules of its own for a code and borrows another language's or its generic ones, as
docs/documents.md promises."""

import logging
import re

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from modeling_vaswani.toolkit.data import sentences as module
from modeling_vaswani.toolkit.data.sentences import split_lines
from modeling_vaswani.toolkit.translation.translate import source_language, translate

TAGS = st.from_regex(r"[A-Za-z]{2,3}([-_][A-Za-z0-9]{1,8}){0,2}", fullmatch=True)
NOT_TAGS = st.one_of(
    st.sampled_from(["", " ", "\t", "../../etc/passwd", "/etc/passwd", "English", "deutsch", "e", "d e", "de--AT"]),
    st.text(max_size=16).filter(lambda text: not re.fullmatch(r"[A-Za-z]{2,3}([-_][A-Za-z0-9]{1,8})*", text.strip())),
)


@given(code=TAGS, spaces=st.sampled_from(["", " ", "  "]))
def test_a_language_code_is_taken_as_given(code, spaces):
    from modeling_vaswani.toolkit.data.sentences import check_language

    assert check_language(spaces + code + spaces, "--source_lang") == code


@given(value=NOT_TAGS)
def test_what_is_no_language_code_is_refused_naming_the_value(value):
    from modeling_vaswani.toolkit.data.sentences import check_language

    with pytest.raises(ValueError) as refused:
        check_language(value, "--source_lang")
    assert str(refused.value).startswith(f"--source_lang={value!r} is not a language code; expected an ISO 639")


@pytest.mark.parametrize("value", ["", "../../etc/passwd", "English", 5])
def test_translate_refuses_them_before_any_model_is_used(loaded, value):
    _, tokenizer = loaded
    # A module without weights, which cannot translate: the request's check asks which engine it runs on
    # (translation/request.py), which the None this test gave before does not say.
    with pytest.raises(ValueError, match=rf"language={re.escape(repr(value))}"):
        translate(torch.nn.Module(), tokenizer, ["A man. A dog."], language=value)


def test_a_recorded_language_that_is_no_code_is_refused_naming_where_it_was_recorded(loaded):
    _, tokenizer = loaded
    tokenizer.init_kwargs["source_lang"] = "English"
    try:
        with pytest.raises(ValueError, match=r"the tokenizer's source_lang='English' is not a language code"):
            source_language(None, tokenizer)
    finally:
        del tokenizer.init_kwargs["source_lang"]


@pytest.fixture
def warnings(monkeypatch, caplog):
    monkeypatch.setattr(module, "_told_borrowed", set(), raising=False)
    caplog.set_level(logging.WARNING, logger=module.__name__)
    return lambda: [r.getMessage() for r in caplog.records if "no sentence rules of its own" in r.getMessage()]


def test_a_code_without_rules_of_its_own_is_warned_about_once(warnings):
    split_lines(["A man. A dog."], "xx")
    split_lines(["A man. A dog."], "XX-YY")
    split_lines(["Ein Mann. Ein Hund."], "de-AT")
    split_lines(["Un homme."], "fr")
    told = warnings()
    assert len(told) == 1 and "'xx'" in told[0] and "generic rules" in told[0], told


def test_the_pipeline_and_translate_warn_too(loaded, warnings):
    from transformers import pipeline

    model, tokenizer = loaded
    translator = pipeline("vaswani-translation", model=model, tokenizer=tokenizer, max_new_tokens=4)
    translator("A man rides.", language="xx")
    translate(model, tokenizer, ["A man rides."], language="zz", max_new_tokens=4, progress=False)
    assert [re.search(r"own for '(\w+)'", message).group(1) for message in warnings()] == ["xx", "zz"]
