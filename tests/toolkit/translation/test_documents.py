"""Translating texts with markup (evaluation/documents.py) with a real tiny checkpoint (trained on TINY_PAIRS): the
output read by a second parser (xml.etree), its text equal to the plain translation of the input's text, all
sentences in one translate call, verbatim content byte for byte."""

import pytest
from helpers.markup import xml_shape as read
from helpers.training_setup import trained_tiny_checkpoint
from transformers import AutoTokenizer

from modeling_vaswani import VaswaniForConditionalGeneration
from modeling_vaswani.toolkit.translation import documents
from modeling_vaswani.toolkit.translation.documents import translate_markup
from modeling_vaswani.toolkit.translation.translate import InputError, decode_request, translate


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    folder = trained_tiny_checkpoint(tmp_path_factory.mktemp("trained"))
    return VaswaniForConditionalGeneration.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)


LINES = [
    "A <b>man</b> rides a <i>bike</i>.",
    'Two <a href="/d?x=1&amp;y=2">dogs <b>play</b></a> in the snow.<br/> A <u>girl</u> sings.',
    "A girl sings.",
    "",
    "<b></b>",
]


def test_inline_tags_come_back_on_a_translation_equal_to_the_plain_one(loaded, monkeypatch):
    model, tokenizer = loaded
    calls = []

    def counted(model, tokenizer, request, **kwargs):
        calls.append(len(request.texts))
        return decode_request(model, tokenizer, request, **kwargs)

    monkeypatch.setattr(documents, "decode_request", counted)
    outputs = translate_markup(model, tokenizer, LINES, format="xml-inline", progress=False)
    assert calls == [4]  # every sentence of every line, in one call
    plain = translate(model, tokenizer, [read(line)[0] for line in LINES], progress=False)
    assert plain[:3] == [
        "Ein Mann fährt Fahrrad.",
        "Zwei Hunde spielen im Schnee. Ein Mädchen singt.",
        "Ein Mädchen singt.",
    ]
    for line, output, expected in zip(LINES, outputs, plain, strict=True):
        text, shape = read(output)
        assert text == expected
        assert shape == read(line)[1]  # the same tags, attributes and nesting
    assert outputs[3] == "" and outputs[4] == "<b></b>"


def test_html_page_verbatim_content_is_byte_identical(loaded):
    model, tokenizer = loaded
    page = (
        "<!DOCTYPE html>\n<html><head><title>A girl sings.</title>"
        "<script>if (a < b) { x(); }</script><style>b > i { color: red }</style></head>\n"
        "<body><p>A man rides a bike. <code>git  log &amp;&amp; ls</code></p>"
        '<pre>A man rides a bike.\n  keep</pre><div translate="no">A girl sings.</div>'
        "<p>Two dogs play in the snow.</p></body></html>"
    )
    [output] = translate_markup(model, tokenizer, [page], format="html", progress=False)
    for verbatim in (
        "<script>if (a < b) { x(); }</script>",
        "<style>b > i { color: red }</style>",
        "<code>git  log &amp;&amp; ls</code>",
        "<pre>A man rides a bike.\n  keep</pre>",
        '<div translate="no">A girl sings.</div>',
    ):
        assert verbatim in output
    assert "<title>Ein Mädchen singt.</title>" in output
    assert "<p>Ein Mann fährt Fahrrad.<code>" in output  # after the last word, before the space that followed it
    assert "<p>Zwei Hunde spielen im Schnee.</p>" in output


def test_refusals_name_what_was_expected(loaded):
    model, tokenizer = loaded
    with pytest.raises(ValueError, match="unknown markup format 'rtf'"):
        translate_markup(model, tokenizer, ["x"], format="rtf")
    with pytest.raises(ValueError, match="texts is a str"):
        translate_markup(model, tokenizer, "A man.")


def test_a_sentence_over_the_limit_is_named_by_its_text(loaded):
    model, tokenizer = loaded
    texts = ["<p>A girl sings.</p>", "<p>Two <b>dogs</b> play in the snow near the river.</p>"]
    with pytest.raises(InputError, match=r"^text 8, its sentence 'Two dogs play in \.\.\.': sentence 2 is") as caught:
        translate_markup(model, tokenizer, texts, max_input_tokens=12, first=7)
    assert caught.value.sentence == 2
