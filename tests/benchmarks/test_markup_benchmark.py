"""benchmarks/markup.py's synthetic tags: every kind well-formed, its text the sentence, the kinds it says."""

import random

import markup
from helpers.markup import xml_shape

SENTENCE = "A man in an orange hat starring at something ."


def test_every_kind_of_synthetic_tags_is_well_formed_around_the_sentence():
    generator = random.Random(0)
    for kind in markup.KINDS:
        for _ in range(50):
            text, shape = xml_shape(markup.tagged(SENTENCE.split(), kind, generator))
            assert text == SENTENCE
            names = [name for name, _, _ in shape]
            if kind == "adjacent":
                assert names == ["b", "i"]
            elif kind.startswith("nested"):
                assert names[0] == "a" and [name for name, _, _ in shape[0][2]] == ["i"]
                assert names[1:] == (["u"] if kind == "nested + after" else [])
            elif kind == "break":  # the <br/> may fall inside the <em>
                assert sorted(names + [name for name, _, _ in shape[0][2]]) == ["br", "em"]
    assert markup.tagged(["Dogs"], "nested", generator) == "<b>Dogs</b>"  # too short for its kind: one tag
