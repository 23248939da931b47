"""Lines split into sentences and joined back (toolkit/data/sentences.py): paragraphs built from known sentences (the
shipped Multi30k test2016 captions) with known spacing, so that the true boundaries and the expected rebuilt lines are
computed here, apart from the code under test; the language rule's sources (results.json, the tokenizer's
configuration) and the record vaswani-train writes."""

import json
import logging
import random

import pytest
from transformers import AutoTokenizer

from modeling_vaswani.toolkit.checkpoints import recorded_source_language
from modeling_vaswani.toolkit.data import sentences as module
from modeling_vaswani.toolkit.data.corpora import multi30k_files, read_sentences
from modeling_vaswani.toolkit.data.sentences import (
    GENERIC,
    preview,
    record_languages,
    split_lines,
    split_text,
    splitter_language,
    tokenizer_language,
)
from modeling_vaswani.toolkit.data.tokenizer import train_tokenizer_from_texts
from modeling_vaswani.toolkit.translation.translate import source_language

SEPARATORS = [" ", "  ", "\t", " \t ", "   ", "\u3000"]  # between sentences
AROUND = ["", " ", "\t", "  ", " \t"]  # before the first, after the last


def captions(language: str, count: int = 400) -> list[str]:
    """test2016 captions a splitter can tell apart: ending in ".", starting with a capital letter, no other "."."""
    found, other = [], "de" if language != "de" else "en"
    for text in read_sentences(multi30k_files("test", languages=(language, other))[language]):
        text = text.strip()
        if text.endswith(".") and text[0].isupper() and text.count(".") == 1:
            found.append(text)
    assert len(found) >= count, len(found)
    return found[:count]


def paragraphs(language: str, seed: int = 0, count: int = 60) -> list[tuple[str, list[str], list[str]]]:
    """(line, its sentences, its spacing): 1-4 consecutive captions joined by varied whitespace, with varied leading
    and trailing whitespace."""
    rng, pool, made, start = random.Random(seed), captions(language), [], 0
    for _ in range(count):
        size = rng.randint(1, 4)
        chosen = pool[start : start + size]
        start += size
        spacing = [rng.choice(AROUND)] + [rng.choice(SEPARATORS) for _ in chosen[1:]] + [rng.choice(AROUND)]
        line = spacing[0] + "".join(sentence + after for sentence, after in zip(chosen, spacing[1:], strict=True))
        made.append((line, chosen, spacing))
    return made


@pytest.mark.parametrize("language", ["en", "de", "fr"])
def test_paragraphs_of_known_sentences_split_at_their_boundaries_and_rejoin_with_their_spacing(language):
    made = paragraphs(language)
    lines = [line for line, _, _ in made]
    layout = split_lines(lines, language)
    assert layout.sentences == [sentence for _, chosen, _ in made for sentence in chosen]
    assert layout.spacing == [spacing for _, _, spacing in made]
    # Translations stand-ins that differ from the sentences: each line's expected output built here, by hand.
    translations = [f"<{number}:{sentence[::-1]}>" for number, sentence in enumerate(layout.sentences)]
    expected, number = [], 0
    for _, _, spacing in made:
        parts = [spacing[0]]
        for after in spacing[1:]:
            parts += [translations[number], after]
            number += 1
        expected.append("".join(parts))
    assert layout.join(translations) == expected
    assert layout.join(layout.sentences) == lines  # the identity rebuilds every line exactly


def test_empty_and_blank_lines_hold_no_sentence_and_give_empty_lines():
    lines = ["", "A man sleeps.", "   ", "\t", "Two dogs run.  A cat sits.", "\u3000"]
    layout = split_lines(lines, "en")
    assert layout.sentences == ["A man sleeps.", "Two dogs run.", "A cat sits."]
    assert [layout.count(i) for i in range(len(lines))] == [0, 1, 0, 0, 2, 0]
    assert layout.join(["X", "Y", "Z"]) == ["", "X", "", "", "Y  Z", ""]
    assert len(layout.join(["X", "Y", "Z"])) == len(lines)  # one output line per input line
    nothing = split_lines(["", " "], "en")
    assert nothing.sentences == [] and nothing.join([]) == ["", ""]
    with pytest.raises(ValueError, match="2 translations for 3 sentences"):
        layout.join(["X", "Y"])


@pytest.mark.parametrize(
    "text",
    [
        "Two dogs play.\n\nA man reads.  ",  # a blank line inside a text (the server's texts may hold them)
        "no punctuation at all",
        "Wait... what?! Yes.",
        "A\u00a0man runs.\u2003A dog\u00a0barks.",
        "😀 A smile. 🐶 A dog.",
        "...",
        "  .  ",
        "Er kam z. B. am 20. Dezember an. Dann ging er.",
    ],
)
def test_any_text_is_rebuilt_exactly_from_its_sentences_and_spacing(text):
    sentences, spacing = split_text(text, "de")
    assert len(spacing) == len(sentences) + 1
    rebuilt = spacing[0] + "".join(sentence + after for sentence, after in zip(sentences, spacing[1:], strict=True))
    assert rebuilt == text
    assert all(sentence == sentence.strip() and sentence for sentence in sentences)
    assert all(not gap.strip() for gap in spacing)


def test_the_language_chooses_the_rules():
    """German rules keep "sog." inside its sentence; the generic ones cut after it: the language is no formality."""
    text = "Das ist die sog. Lösung. Gut."
    assert split_text(text, "de")[0] == ["Das ist die sog. Lösung.", "Gut."]
    assert split_text(text, "de-DE")[0] == split_text(text, "de_DE")[0] == split_text(text, "DE")[0]
    assert split_text(text, GENERIC)[0] == ["Das ist die sog.", "Lösung.", "Gut."]
    assert [splitter_language(code) for code in ("de-DE", "pt_BR", " EN ", "fr")] == ["de", "pt", "en", "fr"]


def test_generic_rules_are_logged_once(monkeypatch, caplog):
    monkeypatch.setattr(module, "_told_generic", False)
    with caplog.at_level(logging.WARNING, logger=module.__name__):
        assert splitter_language(None) == GENERIC
        split_lines(["A man. A dog."], None)
    told = [record for record in caplog.records if "generic rules" in record.getMessage()]
    assert len(told) == 1, caplog.text


def test_a_sentence_is_named_by_its_line_and_first_words():
    lines = ["A dog.", "", "A cat sits.  A very long sentence that goes on and on and on.", "One more."]
    layout = split_lines(lines, "en", first=11)
    assert layout.name(1) == "line 11, sentence 1 ('A dog.')"
    assert layout.name(3) == "line 13, sentence 2 ('A very long sentence ...')"
    assert layout.name(4) == "line 14, sentence 1 ('One more.')"
    assert [layout.line_index(n) for n in (1, 2, 3, 4)] == [0, 2, 2, 3]  # the empty line holds none
    assert layout.line_numbers([3, 2, 4]) == [13, 14]
    texts = split_lines(["A man. A dog."], "en", unit="text")
    assert texts.name(2) == "text 1, sentence 2 ('A dog.')"
    long_word = preview("Donaudampfschifffahrtsgesellschaftskapitänsmützen sind teuer.")
    assert long_word.startswith("Donaudampfschifffahrts") and long_word.endswith(" ...") and len(long_word) <= 40


def test_a_lines_prefix_starts_its_first_sentence_only():
    layout = split_lines(["A man. A dog.", "", "A cat."], "en")
    assert layout.sentence_prefixes(["Ein", "", "Eine"]) == ["Ein", "", "Eine"]
    assert layout.sentence_prefixes(["", "", "Eine"]) == ["", "", "Eine"]
    assert layout.sentence_prefixes(None) is None
    with pytest.raises(ValueError, match=r"target_prefixes is 2 prefixes; expected a list of 3, one a line"):
        layout.sentence_prefixes(["Ein", ""])
    with pytest.raises(ValueError, match="target prefix 2 is 'Ein' but line 2 is empty"):
        layout.sentence_prefixes(["", "Ein", ""])
    with pytest.raises(ValueError, match="target prefix 3 is a int"):
        layout.sentence_prefixes(["", "", 3])


@pytest.fixture
def tokenizer():
    texts = read_sentences(multi30k_files("train")["en"])[:300] + read_sentences(multi30k_files("train")["de"])[:300]
    return train_tokenizer_from_texts(texts, vocab_size=300)


def test_recorded_languages_survive_save_and_load(tokenizer, tmp_path):
    assert tokenizer_language(tokenizer) is None
    record_languages(tokenizer, "fr", "en")
    tokenizer.save_pretrained(tmp_path / "saved")
    assert json.loads((tmp_path / "saved" / "tokenizer_config.json").read_text())["source_lang"] == "fr"
    loaded = AutoTokenizer.from_pretrained(tmp_path / "saved")
    assert tokenizer_language(loaded) == "fr"
    loaded.save_pretrained(tmp_path / "again")  # a copy of a copy (an export, a push) keeps it
    assert tokenizer_language(AutoTokenizer.from_pretrained(tmp_path / "again")) == "fr"


def test_the_language_rule_flag_then_results_then_tokenizer(tokenizer, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    record_languages(tokenizer, "fr", "en")
    assert recorded_source_language(str(folder)) is None  # no results.json
    assert source_language(str(folder), tokenizer) == "fr"  # the tokenizer's record
    (folder / "results.json").write_text(json.dumps({"test_set": {"source_lang": "de", "target_lang": "en"}}))
    assert recorded_source_language(str(folder)) == "de"
    assert source_language(str(folder), tokenizer) == "de"  # results.json before the tokenizer
    assert source_language(str(folder), tokenizer, "en") == "en"  # the flag before both
    (folder / "results.json").write_text(json.dumps({"test": {"sacrebleu": 1.0}, "test_set": "x"}))
    assert source_language(str(folder), tokenizer) == "fr"
    tokenizer.init_kwargs.pop("source_lang")
    assert source_language(str(folder), tokenizer) is None
    assert source_language(None, tokenizer) is None
