"""vaswani-serve's "format": "html" and "xml-inline": each text answered with its markup as the library's
translate_markup gives it; what markup cannot go with refused, naming the field."""

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from test_server import get_json, post  # noqa: E402

from modeling_vaswani.toolkit.translation.documents import translate_markup  # noqa: E402
from modeling_vaswani.toolkit.translation.engines import load_translator  # noqa: E402

PAGE = (
    "<!DOCTYPE html>\n<html><head><title>A girl sings.</title><style>b { color: red }</style></head>"
    '<body><p>A <b>man</b> rides a bike. <code>x &lt; y</code></p><p translate="no">A girl sings.</p></body></html>'
)
LINES = ['Two <i>dogs</i> play in the <a href="/snow">snow</a>.<br/> A girl sings.', "", "A man rides a bike."]


@pytest.mark.parametrize(
    ("format", "texts"), [("html", [PAGE, "<p>A girl <em>sings</em>.</p>"]), ("xml-inline", LINES)]
)
def test_markup_is_answered_as_the_library_places_it(server, checkpoint, format, texts):
    model, tokenizer = load_translator(str(checkpoint))
    expected = translate_markup(model, tokenizer, texts, format)
    status, body = post(f"{server}/translate", {"text": texts, "format": format})
    assert status == 200, body
    assert body["translations"] == expected and "alignments" not in body
    status, body = post(f"{server}/translate", {"text": texts[0], "format": format})
    assert status == 200 and body["translations"] == expected[0]


def test_markup_refuses_what_it_cannot_go_with(server, exported):
    for extra in ({"nbest": 2, "num_beams": 2}, {"alignments": True}, {"split_sentences": False}):
        status, answer = post(f"{server}/translate", {"text": "<b>A</b> dog.", "format": "html", **extra})
        assert (status, answer["error"]["field"]) == (422, "format"), answer
        assert f"expected {next(iter(extra))}=" in answer["error"]["message"]
        assert "or format='text'" in answer["error"]["message"]
    status, answer = post(f"{server}/translate", {"text": "A dog.", "format": "markdown"})
    assert (status, answer["error"]["field"]) == (422, "format"), answer
    if exported is None:
        pytest.skip("CTranslate2 is not installed (pip install modeling_vaswani[ctranslate2])")
    _, health = get_json(f"{server}/health")
    status, answer = post(f"{server}/translate", {"text": "A dog.", "format": "html", "model": health["models"][1]})
    assert (status, answer["error"]["field"]) == (422, "format") and "CTranslate2" in answer["error"]["message"]


def test_a_sentence_over_the_limit_is_named_by_its_text_not_its_run_of_text(server):
    """Two documents of several runs of text each: the long sentence is in the second text's fourth run (the
    request's sixth), and the refusal names the text the client sent."""
    long = "dog " * 1100  # under the server's --max_chars, over its token limits
    texts = ["<p>A <b>man</b> rides.</p><p>A girl sings.</p>", f"<p>Fine.</p><p>Two.</p><p>Three.</p><p>{long}</p>"]
    status, answer = post(f"{server}/translate", {"text": texts, "format": "html"})
    assert (status, answer["error"]["field"]) == (422, "text"), answer
    assert answer["error"]["message"].startswith("text 2, sentence 'dog dog"), answer


@pytest.mark.parametrize("format", ["html", "xml-inline"])
def test_a_character_markup_cannot_hold_is_refused_naming_its_text(server, format):
    """A form feed, as itself or as a reference, was an error from inside lxml (500) or written as U+FFFD."""
    for written in ("\x0c", "&#12;", "&#x0C;"):
        texts = ["A <b>man</b> rides.", f"Two dogs\n play {written} <i>here</i>."]
        status, answer = post(f"{server}/translate", {"text": texts, "format": format})
        assert (status, answer["error"]["field"]) == (422, "text"), answer
        message = answer["error"]["message"]
        assert message.startswith(f"text 2: the {format} text holds U+000C") and "line 2, character 7" in message
    status, _ = post(f"{server}/translate", {"text": "A man \x0c rides.", "format": "text"})  # no markup: taken
    assert status == 200


def test_markup_is_answered_whole_at_depth_or_refused_where_libxml2_drops_text(server):
    """Issue 51, item 7: 300 nested elements were answered as 254 empty <div>s (200), and text after </html> was
    dropped. (Nesting beyond libxml2's 2,048 levels takes more characters than the server's --max_chars.)"""
    status, answer = post(f"{server}/translate", {"text": "<div>" * 300 + "A man." + "</div>" * 300, "format": "html"})
    assert status == 200 and answer["translations"].count("<div>") == 300, answer
    assert answer["translations"].replace("<div>", "").replace("</div>", "").strip(), answer
    page = "<html><body><p>A man.</p></body></html>\n<p>Two dogs play.</p>"
    status, answer = post(f"{server}/translate", {"text": ["<p>Fine.</p>", page], "format": "html"})
    assert (status, answer["error"]["field"]) == (422, "text"), answer
    expected = "text 2: the html text: libxml2's HTML parser drops its text at line 2, character 4 ('Two dogs play.')"
    assert answer["error"]["message"].startswith(expected), answer
