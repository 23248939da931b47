"""translate_aligned(): translations with their word alignments, a line's alignment in the line's own word positions.
References computed here: each sentence translated alone, one a line, and aligned alone by word_alignments; its pairs
moved by the words of the sentences before it, counted by hand; and the merging of words that no whitespace
separates, worked out by hand."""

import pytest
from helpers.paragraphs import joined, paragraphs
from helpers.training_setup import tiny_checkpoint

from modeling_vaswani.toolkit.data.sentences import Layout
from modeling_vaswani.toolkit.translation.alignment import (
    AlignedTranslation,
    line_alignments,
    piece_words,
    translate_aligned,
    word_alignments,
)
from modeling_vaswani.toolkit.translation.engines import load_translator
from modeling_vaswani.toolkit.translation.translate import translate

FAST = {"max_new_tokens": 6, "progress": False}


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    return load_translator(str(tiny_checkpoint(tmp_path_factory.mktemp("tiny"), lines=500)))


@pytest.mark.parametrize("batching", [{}, {"batch_size": 2}], ids=["default", "2"])
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_a_paragraphs_alignment_is_its_sentences_alignments_moved_by_the_words_before(loaded, batching):
    model, tokenizer = loaded
    made = [item for item in paragraphs(10, most=4, seed=1) if len(item[0]) > 1][:5]
    lines = [joined(sentences, spacing) for sentences, spacing in made]
    lines[1:1] = ["", "  "]  # an empty and a blank line among them
    got = translate_aligned(model, tokenizer, lines, language="en", **batching, **FAST)
    assert [line.text for line in got] == translate(model, tokenizer, lines, language="en", **FAST)
    expected = []
    for sentences, spacing in made:
        alone = translate(model, tokenizer, sentences, batch_size=1, split_sentences=False, **FAST)
        pairs, sources_before, targets_before = [], 0, 0
        for sentence, translation, links in zip(
            sentences, alone, word_alignments(model, tokenizer, sentences, alone), strict=True
        ):
            pairs += [(s + sources_before, t + targets_before) for s, t in links]
            sources_before, targets_before = (
                sources_before + len(sentence.split()),
                targets_before + len(translation.split()),
            )
        expected.append(AlignedTranslation(joined(alone, spacing), pairs))
    expected[1:1] = [AlignedTranslation("", []), AlignedTranslation("", [])]
    assert got == expected
    assert sum(len(line.alignment) for line in got) > 10  # paragraphs of several sentences, aligned
    for line, aligned in zip(lines, got, strict=True):  # every pair names words of the line and of its translation
        assert all(s < len(line.split()) and t < len(aligned.text.split()) for s, t in aligned.alignment)


def test_without_splitting_each_line_is_aligned_whole(loaded):
    model, tokenizer = loaded
    lines = ["A man rides a bike. Two dogs play.", "A girl sings."]
    got = translate_aligned(model, tokenizer, lines, split_sentences=False, **FAST)
    whole = translate(model, tokenizer, lines, split_sentences=False, **FAST)
    assert got == [
        AlignedTranslation(text, links)
        for text, links in zip(whole, word_alignments(model, tokenizer, lines, whole), strict=True)
    ]
    assert translate_aligned(model, tokenizer, [" ", ""], **FAST) == [AlignedTranslation("", [])] * 2


def test_words_no_whitespace_separates_are_one_word_of_the_line():
    # "a.b" + "c d" with nothing between: the line "a.bc d" has two words, "a.bc" and "d".
    assert piece_words(["", "", ""], ["a.b", "c d"]) == [[0], [0, 1]]
    assert piece_words([" ", "  ", "\n"], ["x  y", "z"]) == [[0, 1], [2]]
    assert piece_words(["", " ", ""], ["a", ""]) == [[0], []]  # an empty translation has no words
    layout = Layout(sentences=["a.b", "c d", "e"], starts=[0, 2], spacing=[["", "", ""], [" ", ""]])
    # Sentence 1's (0, 0) and sentence 2's (0, 0) meet in the line's words (0, 0): kept once.
    got = line_alignments(layout, ["X", "Y Z", "W"], [[(0, 0)], [(0, 0), (1, 1)], [(0, 0)]])
    assert got == [[(0, 0), (1, 1)], [(0, 0)]]


def test_a_model_without_attention_weights_is_refused_before_any_translating(loaded):
    _, tokenizer = loaded

    class Exported:  # as translation/ctranslate2.py's CTranslate2Model: no attention weights to read
        engine = "ctranslate2"

        def generate(self, *args, **kwargs):
            raise AssertionError("refused before translating")

    expected = "need.s. the PyTorch model's attention weights .*CTranslate2.*the checkpoint it was exported from"
    with pytest.raises(ValueError, match=expected):
        translate_aligned(Exported(), tokenizer, ["A man."], **FAST)
