"""Terminology through the library (evaluation/terminology.py, translate's constraints, avoid and glossary): phrases
given as text reach generate() as the token ids they have inside a sentence; each line's translation holds its
constraints and none of its phrases to avoid; glossary terms are found as whole words; what cannot be met is refused
naming the line. The references are generate() called directly and the tokenizer's own ids."""

import random
import re
import unicodedata

import pytest
from helpers.training_setup import TINY_PAIRS, trained_tiny_checkpoint

from modeling_vaswani.toolkit.data.corpora import multi30k_files, read_sentences
from modeling_vaswani.toolkit.translation.alignment import translate_aligned
from modeling_vaswani.toolkit.translation.engines import load_translator
from modeling_vaswani.toolkit.translation.terminology import Glossary
from modeling_vaswani.toolkit.translation.translate import InputError, translate

FAST = {"max_new_tokens": 12, "progress": False}
LINES = [source for source, _ in TINY_PAIRS]  # "A man rides a bike.", "Two dogs play in the snow.", "A girl sings."


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """A tiny model that has learned TINY_PAIRS by heart: its translations are words, which phrases can name."""
    return load_translator(str(trained_tiny_checkpoint(tmp_path_factory.mktemp("trained"))))


def ids_of(tokenizer, text: str) -> list[int]:
    return tokenizer(text_target=text, add_special_tokens=False)["input_ids"]


def holds(tokens: list[int], phrase: list[int]) -> bool:
    return any(tokens[i : i + len(phrase)] == phrase for i in range(len(tokens) - len(phrase) + 1))


def direct(model, tokenizer, line: str, **generate_kwargs) -> str:
    """The reference: generate() on the one sentence, decoded."""
    batch = tokenizer([line], return_tensors="pt")
    output = model.generate(**batch, paper_decoding=True, max_new_tokens=FAST["max_new_tokens"], **generate_kwargs)
    return tokenizer.decode(output[0], skip_special_tokens=True)


def test_constraints_reach_generate_as_the_ids_they_have_inside_a_sentence(loaded):
    model, tokenizer = loaded
    constraints = [["Fahrrad"], ["Hunde", "im Schnee"], []]
    got = translate(model, tokenizer, LINES, constraints=constraints, batch_size=1, **FAST)
    for line, phrases, translation in zip(LINES, constraints, got, strict=True):
        phrase_ids = [ids_of(tokenizer, phrase) for phrase in phrases]
        expected = direct(model, tokenizer, line, **({"constraints": [phrase_ids]} if phrases else {}))
        assert translation == expected
        for phrase, ids in zip(phrases, phrase_ids, strict=True):
            assert holds(ids_of(tokenizer, translation), ids) and phrase in translation, (phrase, translation)
    # The leading-space form: "Fahrrad" alone has the ids it has after a word.
    assert ids_of(tokenizer, "Fahrrad") == ids_of(tokenizer, "ein Fahrrad")[-len(ids_of(tokenizer, "Fahrrad")) :]


def test_avoided_phrases_are_not_in_their_lines_translation_and_other_lines_are_untouched(loaded):
    model, tokenizer = loaded
    free = translate(model, tokenizer, LINES, **FAST)
    words = free[1].split()
    assert words, free
    avoid = [[], [words[0]], []]
    got = translate(model, tokenizer, LINES, avoid=avoid, **FAST)
    assert not holds(ids_of(tokenizer, got[1]), ids_of(tokenizer, words[0])), (free[1], got[1])
    assert got[0] == free[0] and got[2] == free[2]


def test_a_glossary_adds_its_target_term_to_the_sentences_holding_the_source_term(loaded):
    model, tokenizer = loaded
    glossary = Glossary({"snow": "Schnee", "girl": "Mädchen"})
    lines = ["Two dogs play in the SNOW. A man rides a bike.", "A snowman stands.", "The girl's dog runs."]
    got = translate(model, tokenizer, lines, glossary=glossary, **FAST)
    free = translate(model, tokenizer, lines, **FAST)
    assert "Schnee" in got[0]
    assert got[1] == free[1]  # "snowman" does not hold the word "snow"
    assert "Mädchen" in got[2]  # "girl's": a word boundary at the apostrophe
    assert glossary.targets("snow, SNOW and Snow; a girl") == ["Schnee", "Mädchen"]


def term_by_term(terms: dict[str, str]):
    """The second implementation: every term searched for in the sentence, as whole words, after NFKC and case
    folding; targets in the order their terms first appear (ties by target), each once."""
    fold = lambda text: unicodedata.normalize("NFKC", text).casefold()  # noqa: E731
    patterns = [(re.compile(rf"(?<!\w){re.escape(fold(source))}(?!\w)"), target) for source, target in terms.items()]

    def scan(sentence: str) -> list[str]:
        found = [(match.start(), target) for pattern, target in patterns if (match := pattern.search(fold(sentence)))]
        return list(dict.fromkeys(target for _, target in sorted(found)))

    return scan


def test_glossary_terms_are_found_as_a_term_by_term_scan_finds_them():
    """Glossary.targets looks up only the terms whose first word a sentence holds: on 2,000 Multi30k sentences and
    600 terms of every shape (one word, several, punctuation inside or at the edges, no word character at all, case
    and Unicode forms), the same targets, in the same order, as scanning for every term."""
    sources = read_sentences(multi30k_files("train", languages=("en", "de"))["en"])[:2000]
    words = sorted({word for sentence in sources for word in sentence.split()})
    rng = random.Random(44)
    terms = {}
    for number in range(600):
        start = rng.randrange(len(words) - 3)
        term = " ".join(words[start : start + rng.choice([1, 1, 2, 3])])  # edge punctuation kept: "dog." "(red"
        term = term.upper() if number % 7 == 0 else term
        if term.casefold() not in {known.casefold() for known in terms}:  # one target a term (refused otherwise)
            terms[term] = f"T{number}"
    terms.update({"++": "plus", ".net": "dotnet", "e-mail": "Mail", "café": "Café", "ﬁle": "Datei", "a": "ein"})
    sentences = [*sources, "Send an E-MAIL from the cafe\u0301 about ++ and .NET (not C++).", "A file, a café."]
    glossary, scan = Glossary.of(terms), term_by_term(terms)
    found = 0
    for sentence in sentences:
        expected = scan(sentence)
        assert glossary.targets(sentence) == expected, sentence
        found += len(expected)
    assert found > 2000  # most sentences hold some term: the comparison is not of empty lists
    assert glossary.targets(sentences[-2]) == ["Mail", "Café", "plus", "dotnet"]  # "café" typed as e + U+0301
    assert glossary.targets(sentences[-1]) == ["ein", "Datei", "Café"]  # "ﬁle" (one ligature character) is "file"


def test_a_glossary_refuses_one_source_term_twice_with_two_targets():
    with pytest.raises(ValueError, match="'Bike': 'Rad' and 'bike': 'Fahrrad', one source term in another case"):
        Glossary.of({"Bike": "Rad", "bike": "Fahrrad"})
    with pytest.raises(ValueError, match="one source term in another case or form"):
        Glossary.of({"café": "Café", "cafe\u0301": "Kaffeehaus"})
    assert Glossary.of({"Bike": "Fahrrad", "bike": "Fahrrad"}).terms == {"bike": "Fahrrad"}


def test_glossary_files_are_read_and_refused_by_file_and_line(tmp_path):
    path = tmp_path / "terms.tsv"
    path.write_text("bike\tFahrrad\n\nSnow\tSchnee\n", encoding="utf-8")
    assert Glossary.read(path).terms == {"bike": "Fahrrad", "snow": "Schnee"}
    for text, message in (
        ("bike Fahrrad\n", r"line 1: 'bike Fahrrad'; expected a source term, one tab and a target term"),
        ("bike\t\n", r"line 1: 'bike\\t'; expected a source term"),
        ("a\tb\tc\n", r"line 1: 'a\\tb\\tc'; expected"),
        ("bike\tRad\nBike\tFahrrad\n", r"line 2: 'Bike' is also on line 1 with another target term"),
    ):
        path.write_text(text, encoding="utf-8")
        with pytest.raises(ValueError, match=message):
            Glossary.read(path)


def test_what_cannot_be_met_is_refused_naming_the_line(loaded):
    model, tokenizer = loaded
    cases = (
        ({"constraints": [["Fahrrad"]]}, r"constraints is 1 entries; expected a list of 3 lists of phrases"),
        ({"constraints": [[], ["  "], []]}, r"constraints of input 2 holds '  '; expected non-blank phrases"),
        ({"avoid": "Mann"}, r"avoid is a str; expected a list of 3 lists of phrases"),
        (
            {"constraints": [[], ["Hunde spielen im Schnee und"], []], "max_new_tokens": 3},
            r"line 2, sentence 1 .*: its constraints are \d+ tokens and its translation may have 3",
        ),
        # Worded by the request's one check (translation/request.py), which names every field it refuses the same way.
        ({"constraints": [["Fahrrad"], [], []], "paper_decoding": False}, r"constraints need\(s\) the paper's"),
    )
    for options, message in cases:
        settings = {**FAST, **options}
        with pytest.raises(InputError, match=message):
            translate(model, tokenizer, LINES, **settings)
    with pytest.raises(InputError, match=r"input 1 is \['Fahrrad'\], for line 1, which holds 2 sentences"):
        translate(model, tokenizer, ["A man rides. A dog runs.", "x"], constraints=[["Fahrrad"], []], **FAST)
    both = translate(
        model, tokenizer, ["A man rides. A dog runs."], constraints=[["Fahrrad"]], split_sentences=False, **FAST
    )
    assert "Fahrrad" in both[0]


def test_the_pipeline_takes_the_same_terms_as_translate(loaded, tmp_path):
    """The "vaswani-translation" pipeline, per call: each text's constraints and phrases to avoid, and a glossary,
    give what translate() gives (batched with sentences of other texts: batch_size 2 over 4 sentences)."""
    from transformers import pipeline

    model, tokenizer = loaded
    translator = pipeline("vaswani-translation", model=model, tokenizer=tokenizer, max_new_tokens=12)
    texts = [LINES[0] + " " + LINES[2], LINES[1], LINES[2]]
    avoid, glossary = [["singt"], [], []], {"Snow": "Schnee", "girl": "Frau"}
    expected = translate(model, tokenizer, texts, avoid=avoid, glossary=Glossary.of(glossary), batch_size=2, **FAST)
    got = translator(texts, avoid=avoid, glossary=glossary, batch_size=2)
    assert got == [{"translation_text": text} for text in expected]
    constraints = [[], ["Hunde", "Schnee"], ["Frau"]]
    expected = translate(model, tokenizer, texts, constraints=constraints, **FAST)
    assert translator(texts, constraints=constraints) == [{"translation_text": text} for text in expected]
    assert translator(LINES[1], constraints=["Hunde"]) == translator([LINES[1]], constraints=[["Hunde"]])
    # With alignments, those of the translation that meets the terms, in the text's word positions.
    aligned = translator(texts, constraints=constraints, alignments=True)
    assert [answer["translation_text"] for answer in aligned] == expected
    assert aligned == [
        {"translation_text": line.text, "alignment": line.alignment}
        for line in translate_aligned(model, tokenizer, texts, constraints=constraints, **FAST)
    ]
    with pytest.raises(ValueError, match=r"glossary holds 'snow': ''; expected non-blank"):
        translator(LINES[1], glossary={"snow": ""})
