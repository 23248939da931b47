"""translate() and translate_nbest() on lines that hold paragraphs: a paragraph translates as its sentences translated
one a line (each whole, no splitting), joined with the paragraph's own spacing; empty lines stay empty; a line's
prefix starts its first sentence; errors name the line and the sentence's first words."""

import pytest
from helpers.paragraphs import joined, paragraphs
from helpers.training_setup import tiny_checkpoint

from modeling_vaswani.toolkit.data.sentences import record_languages
from modeling_vaswani.toolkit.translation.engines import load_translator
from modeling_vaswani.toolkit.translation.translate import InputError, translate, translate_nbest

FAST = {"max_new_tokens": 6, "progress": False}
LONG = " ".join(["word"] * 80) + "."  # one sentence of more than 64 tokens


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    return load_translator(str(tiny_checkpoint(tmp_path_factory.mktemp("tiny"), lines=500)))


def one_a_line(loaded, sentences, **options):
    """The reference: each sentence translated whole, one a line, in batches of one (no splitting involved)."""
    model, tokenizer = loaded
    return translate(model, tokenizer, sentences, batch_size=1, split_sentences=False, **FAST, **options)


@pytest.mark.parametrize("batching", [{}, {"max_tokens": 200}, {"batch_size": 3}], ids=["default", "tokens", "3"])
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_a_paragraph_translates_as_its_sentences_one_a_line_joined_with_its_spacing(loaded, batching):
    model, tokenizer = loaded
    made = paragraphs(12, most=4)
    lines = [joined(sentences, spacing) for sentences, spacing in made]
    lines[3:3] = ["", "   "]  # an empty and a blank line among them
    references = iter(one_a_line(loaded, [sentence for sentences, _ in made for sentence in sentences]))
    expected = [joined([next(references) for _ in sentences], spacing) for sentences, spacing in made]
    expected[3:3] = ["", ""]
    assert any(len(sentences) > 1 for sentences, _ in made) and any("\t" in line for line in lines)
    got = translate(model, tokenizer, lines, language="en", **batching, **FAST)
    assert got == expected
    assert len(got) == len(lines)


def test_without_splitting_a_line_is_one_sentence_and_an_empty_line_is_refused(loaded):
    model, tokenizer = loaded
    (sentences, spacing), *_ = [item for item in paragraphs(12, most=4) if len(item[0]) > 1]
    line = joined(sentences, spacing)
    whole = translate(model, tokenizer, [line], split_sentences=False, **FAST)
    assert whole == one_a_line(loaded, [line])
    split = translate(model, tokenizer, [line], **FAST)
    assert split == [joined(one_a_line(loaded, sentences), spacing)]
    with pytest.raises(InputError, match="sentence 2 is empty; expected text to translate"):
        translate(model, tokenizer, ["A man.", " "], split_sentences=False, **FAST)
    assert translate(model, tokenizer, ["A man.", " ", ""], **FAST) == [*one_a_line(loaded, ["A man."]), "", ""]
    assert translate(model, tokenizer, [" ", ""], **FAST) == ["", ""]  # nothing to translate at all


def test_a_lines_prefix_starts_its_first_sentence(loaded):
    model, tokenizer = loaded
    lines = ["A man rides a bike.  Two dogs play.", "", "A girl sings."]
    prefixes = ["Ein Mann", "", "Ein"]
    first = one_a_line(loaded, ["A man rides a bike.", "A girl sings."], target_prefixes=["Ein Mann", "Ein"])
    second = one_a_line(loaded, ["Two dogs play."])
    expected = [f"{first[0]}  {second[0]}", "", first[1]]
    assert translate(model, tokenizer, lines, target_prefixes=prefixes, **FAST) == expected
    assert expected[0].startswith("Ein Mann") and expected[2].startswith("Ein")
    with pytest.raises(InputError, match="target_prefixes is 2 prefixes; expected a list of 3, one a line"):
        translate(model, tokenizer, lines, target_prefixes=prefixes[:2], **FAST)
    with pytest.raises(InputError, match="target prefix 2 is 'Ein' but line 2 is empty"):
        translate(model, tokenizer, lines, target_prefixes=["", "Ein", ""], **FAST)


def test_a_sentence_over_the_limit_is_named_by_its_line_and_first_words(loaded):
    model, tokenizer = loaded
    lines = ["A man sleeps.", "", f"A dog runs.  {LONG}", "A cat sits."]
    length = len(tokenizer(LONG)["input_ids"])
    with pytest.raises(InputError) as refused:
        translate(model, tokenizer, lines, max_input_tokens=64, **FAST)
    assert str(refused.value) == (
        f"line 3, sentence 2 ('word word word word ...') is {length} tokens long, more than the limit of 64 "
        "(max_input_tokens; 1 sentence(s) over it, in lines [3]); expected shorter sentences"
    )
    assert refused.value.sentence == 3  # the line: what a stream answers up to
    with pytest.raises(InputError) as counted:
        translate(model, tokenizer, lines, max_input_tokens=64, first_line=8, **FAST)
    assert str(counted.value).startswith("line 10, sentence 2 ('word word word word ...')")
    assert counted.value.sentence == 3
    with pytest.raises(InputError, match=r"^line 3, sentence 2 \('word word .*more than --max_tokens 20"):
        translate(model, tokenizer, lines, max_tokens=20, **FAST)
    with pytest.raises(InputError, match="line 2 is a NoneType; expected a str"):
        translate(model, tokenizer, ["A man.", None], **FAST)
    with pytest.raises(InputError, match="sentences is a str; expected a list of sentences"):
        translate(model, tokenizer, "A man. A dog.", **FAST)


def test_nbest_lists_are_of_one_sentence_lines(loaded):
    model, tokenizer = loaded
    lines = ["  A man rides a bike. ", "", "Two dogs play."]
    got = translate_nbest(model, tokenizer, lines, 2, max_new_tokens=5, progress=False)
    expected = translate_nbest(
        model, tokenizer, ["A man rides a bike.", "Two dogs play."], 2, max_new_tokens=5, progress=False,
        split_sentences=False,
    )  # fmt: skip
    assert [[h.text for h in hypotheses] for hypotheses in got] == [
        [h.text for h in expected[0]],
        [],
        [h.text for h in expected[1]],
    ]
    with pytest.raises(InputError) as refused:
        translate_nbest(model, tokenizer, ["A man.", "A dog runs. A cat sits."], 2, progress=False)
    message = str(refused.value)
    assert message.startswith("line 2 holds 2 sentences (line 2, sentence 1 ('A dog runs.') and 1 more)")
    assert "--no_split_sentences" in message and refused.value.sentence == 2
    whole = translate_nbest(
        model, tokenizer, ["A dog runs. A cat sits."], 2, max_new_tokens=5, progress=False, split_sentences=False
    )
    assert len(whole[0]) == 2


def test_the_language_chooses_where_a_line_is_cut(loaded):
    """German rules keep "sog." inside its sentence, generic rules cut after it; without `language`, the language the
    tokenizer records is used."""
    model, tokenizer = loaded
    line = "Das ist die sog. Lösung. Gut."
    german = " ".join(one_a_line(loaded, ["Das ist die sog. Lösung.", "Gut."]))
    generic = " ".join(one_a_line(loaded, ["Das ist die sog.", "Lösung.", "Gut."]))
    assert german != generic, "the two cuts must translate differently for the test to mean anything"
    assert translate(model, tokenizer, [line], language="de", **FAST) == [german]
    assert translate(model, tokenizer, [line], language="und", **FAST) == [generic]
    record_languages(tokenizer, "de", "en")
    try:
        assert translate(model, tokenizer, [line], **FAST) == [german]
    finally:
        for key in ("source_lang", "target_lang"):
            tokenizer.init_kwargs.pop(key)
    assert translate(model, tokenizer, [line], **FAST) == [generic]
