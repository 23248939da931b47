"""benchmarks/terminology.py's own pieces, against hand-made cases: the constraints it draws from references, the
term accuracy it reports, and the sample kept with it."""

import json
from pathlib import Path

import terminology as benchmark

from modeling_vaswani.toolkit.data.corpora import multi30k_files, read_sentences


def test_constraints_are_1_to_3_phrases_of_1_to_3_consecutive_reference_words_drawn_again_the_same():
    references = ["Ein Mann fährt auf einem roten Fahrrad.", "Zwei Hunde.", "Ein Mädchen singt (laut)!"]
    drawn = benchmark.draw_constraints(references, seed=3)
    assert drawn == benchmark.draw_constraints(references, seed=3)
    for reference, phrases in zip(references, drawn, strict=True):
        words = [word.strip(".,;:!?\"'()") for word in reference.split()]
        assert 1 <= len(phrases) <= 3
        for phrase in phrases:
            n = len(phrase.split())
            assert 1 <= n <= 3
            assert any(words[i : i + n] == phrase.split() for i in range(len(words))), (phrase, reference)


def test_term_accuracy_counts_whole_words_in_any_case():
    glossary = {"man": "Mann", "bike": "Fahrrad"}
    sources = ["A MAN rides a bike.", "A manly woman.", "The man's bike."]
    translations = ["Ein mann fährt Rad.", "Eine Frau.", "Das Fahrrad des Mannes."]
    # pairs: (1, man), (1, bike), (3, man), (3, bike); "manly" is not "man"; "Mannes" is not "Mann"
    assert benchmark.term_accuracy(sources, translations, glossary) == (2, 4)


def test_a_phrase_is_held_where_it_begins_a_word_and_counted_apart_where_it_also_ends_one():
    translations = ["Ein Schlagzeugers spielt.", "Die Frau, rote Jacke", "Zweimal"]
    constraints = [["Schlagzeuger", "spielt."], ["rote Jacke", "Frau", "Jacke,"], ["mal"]]
    # held: Schlagzeuger (word start, more of the word follows), spielt., rote Jacke, Frau; not "Jacke," nor "mal"
    # (inside "Zweimal"); whole words: spielt., rote Jacke, Frau
    assert benchmark.satisfied(translations, constraints) == (4, 3, 6)


def test_the_kept_sample_is_the_seeded_draw_over_test2016():
    rows = [json.loads(line) for line in Path(benchmark.SAMPLE).read_text(encoding="utf-8").splitlines()]
    references = read_sentences(multi30k_files("test", languages=("en", "de"))["de"])
    assert [row["line"] for row in rows] == list(range(1, len(references) + 1))
    assert [row["constraints"] for row in rows] == benchmark.draw_constraints(references)
