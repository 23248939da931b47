"""vaswani-serve's "constraints", "avoid" and "glossary": each text answered as the library's translate() answers it
with the same terms; what cannot be met refused, naming the field."""

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from test_server import get_json, post  # noqa: E402

from modeling_vaswani.toolkit.translation.engines import load_translator  # noqa: E402
from modeling_vaswani.toolkit.translation.terminology import Glossary  # noqa: E402
from modeling_vaswani.toolkit.translation.translate import translate  # noqa: E402

TEXTS = ["A man rides a bike.", "Two dogs play in the snow.", "A girl sings."]


def test_terms_are_answered_as_the_library_uses_them(server, checkpoint):
    model, tokenizer = load_translator(str(checkpoint))
    terms = {"constraints": [["Fahrrad"], [], ["Frau"]], "avoid": [[], ["Schnee"], []], "glossary": {"snow": "Wiese"}}
    expected = translate(
        model, tokenizer, TEXTS, constraints=terms["constraints"], avoid=terms["avoid"],
        glossary=Glossary.of(terms["glossary"]), progress=False,
    )  # fmt: skip
    status, body = post(f"{server}/translate", {"text": TEXTS, **terms})
    assert status == 200, body
    assert body["translations"] == expected
    assert "Fahrrad" in expected[0] and "Wiese" in expected[1] and "Schnee" not in expected[1]
    assert "Frau" in expected[2]
    status, body = post(f"{server}/translate", {"text": TEXTS, "nbest": 2, "num_beams": 4, **terms})
    assert status == 200, body
    assert all("Fahrrad" in hypothesis["translation"] for hypothesis in body["translations"][0])


def test_terms_that_cannot_be_met_are_refused_by_field(server, exported):
    cases = (
        ({"text": TEXTS, "constraints": [["Fahrrad"]]}, "constraints", "1 entries; expected a list of 3 lists"),
        ({"text": TEXTS, "avoid": [[""], [], []]}, "avoid", "holds ''; expected non-blank phrases"),
        ({"text": "A man rides. A dog runs.", "constraints": [["Hund"]]}, "constraints", "text 1, which holds 2"),
        (
            {"text": TEXTS, "constraints": [[], ["Hunde im Schnee"], []], "avoid": [[], ["Schnee"], []]},
            "avoid",
            "avoid of input 2 holds 'Schnee', which 'Hunde im Schnee' holds, a phrase of constraints of input 2",
        ),
        (
            {"text": TEXTS, "glossary": {"dogs": "Hunde"}, "avoid": [[], ["Hunde"], []]},
            "avoid",
            "avoid of input 2 holds 'Hunde', which 'Hunde' holds, a target term of the glossary",
        ),
        ({"text": TEXTS[0], "constraints": [["Fahrrad"]], "paper_decoding": False}, "constraints", "paper's decoding"),
        ({"text": TEXTS[0], "glossary": {"bike": " "}}, "glossary", "expected non-blank source and target terms"),
        (
            {"text": TEXTS[0], "constraints": [["Ein Mann fährt ein rotes Fahrrad"]], "max_new_tokens": 3},
            "constraints",
            "its constraints are",
        ),
        ({"text": "<b>A</b> man.", "format": "html", "glossary": {"man": "Mann"}}, "format", "expected glossary=None"),
    )
    for body, field, message in cases:
        status, answer = post(f"{server}/translate", body)
        assert (status, answer["error"]["field"]) == (422, field), (body, answer)
        assert message in answer["error"]["message"], answer
    if exported is None:
        pytest.skip("CTranslate2 is not installed (pip install modeling_vaswani[ctranslate2])")
    _, health = get_json(f"{server}/health")
    body = {"text": TEXTS[0], "glossary": {"bike": "Fahrrad"}, "model": health["models"][1]}
    status, answer = post(f"{server}/translate", body)
    assert (status, answer["error"]["field"]) == (422, "glossary") and "no lexical constraints" in str(answer)
