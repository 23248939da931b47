"""A phrase to avoid that a phrase to hold of the same input holds (issue 51, item 15) is refused from the text, with
the tokenizer alone, before any model is used: named by its argument, input and phrase text, never by token ids and
a batch's sorted index as generate() names it. The rule is generate()'s own (guidance_vaswani.check_avoid), compared
on the phrases as the search gets them: a property test checks the two agree."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from modeling_vaswani.guidance_vaswani import check_avoid
from modeling_vaswani.toolkit.translation.terminology import phrase_ids
from modeling_vaswani.toolkit.translation.translate import translate, translate_nbest

LINES = ["A man rides a bike.", "Two dogs play in the snow.", "A girl sings."]
FAST = {"max_new_tokens": 12, "progress": False}


@pytest.mark.parametrize("call", [translate, lambda *a, **k: translate_nbest(*a, 2, num_beams=4, **k)])
def test_a_phrase_to_avoid_inside_a_constraint_is_refused_by_text_before_the_model_is_used(loaded, call):
    _, tokenizer = loaded
    constraints, avoid = [[], ["Hunde im Schnee"], []], [[], ["Schnee"], []]
    # A module without weights: the refusal cannot have come from decoding (the request's check asks only which
    # engine it runs on, translation/request.py, which a None, the model this test gave before, does not say).
    with pytest.raises(ValueError) as refused:
        call(torch.nn.Module(), tokenizer, LINES, constraints=constraints, avoid=avoid, **FAST)
    assert getattr(refused.value, "field", None) == "avoid" and refused.value.sentence == 2
    message = str(refused.value)
    named = "avoid of input 2 holds 'Schnee', which 'Hunde im Schnee' holds, a phrase of constraints of input 2"
    assert named in message
    assert "[" not in message.split("expected")[0]  # no token ids


def test_a_phrase_to_avoid_inside_a_glossary_target_term_is_refused_naming_the_glossary(loaded):
    _, tokenizer = loaded
    glossary = {"snow": "im Schnee"}
    with pytest.raises(ValueError, match=r"avoid of input 2 holds 'Schnee', which 'im Schnee' holds, a target term"):
        translate(torch.nn.Module(), tokenizer, LINES, avoid=[[], ["Schnee"], []], glossary=glossary, **FAST)
    # The glossary's term is for the inputs that hold its source term only: the others may avoid its words.
    model, _ = loaded
    translate(model, tokenizer, LINES, avoid=[["Schnee"], [], ["Schnee"]], glossary=glossary, **FAST)


def test_the_pipeline_names_the_argument_and_text_not_token_ids(loaded):
    from transformers import pipeline

    model, tokenizer = loaded
    translator = pipeline("vaswani-translation", model=model, tokenizer=tokenizer, max_new_tokens=8)
    with pytest.raises(ValueError, match=r"avoid of input 1 holds 'Fahrrad', which 'ein Fahrrad' holds"):
        translator(LINES[0], constraints=["ein Fahrrad"], avoid=["Fahrrad"])


def test_constraints_for_an_empty_line_are_refused_not_dropped(loaded):
    model, tokenizer = loaded
    with pytest.raises(ValueError, match=r"constraints of input 2 is \['Hund'\], for line 2, which is empty"):
        translate(model, tokenizer, ["A man rides.", "  "], constraints=[[], ["Hund"]], **FAST)


WORDS = ["Schnee", "im", "Hunde", "Fahrrad", "Schneemann", "Mann", "ein", "rad", "Frau", "e", "nn", "Schnee."]
PHRASES = st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join)


@given(constraints=st.lists(PHRASES, max_size=3), avoid=st.lists(PHRASES, min_size=1, max_size=3))
def test_the_text_rule_refuses_exactly_what_generate_would_refuse(loaded, constraints, avoid):
    """Subwords too ("rad" in "Fahrrad", "nn" in "Mann"): refused where the ids of one are inside the other's."""
    from modeling_vaswani.toolkit.translation.terminology import TermError, check_clashes

    model, tokenizer = loaded
    try:
        check_avoid([phrase_ids(tokenizer, [avoid])[0]], model, 1, [phrase_ids(tokenizer, [constraints])[0]])
        payload_refuses = False
    except ValueError:
        payload_refuses = True
    try:
        check_clashes(tokenizer, [constraints], [avoid])
        text_refuses = False
    except TermError as refused:
        text_refuses = True
        assert refused.field == "avoid" and any(repr(phrase) in str(refused) for phrase in avoid)
    assert text_refuses == payload_refuses
