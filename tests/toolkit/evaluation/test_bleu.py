"""The BLEU metric module, loaded with evaluate.load as users will, checked against sacrebleu and by hand."""

import gzip
import importlib
import json
import math
import os
import subprocess
import sys

import evaluate
import pytest
import sacrebleu
from helpers.training_setup import REPO

BLEU_DIR = REPO / "modeling_vaswani" / "toolkit" / "evaluation" / "bleu"
MULTI30K_TEST_DE = REPO / "modeling_vaswani" / "toolkit" / "data" / "multi30k" / "test_2016_flickr.de.gz"


@pytest.fixture(scope="module")
def bleu():
    return evaluate.load(str(BLEU_DIR))


@pytest.fixture(scope="module")
def bleu_module(bleu):
    return importlib.import_module(type(bleu).__module__)


@pytest.fixture(scope="module")
def references():
    with gzip.open(MULTI30K_TEST_DE, "rt", encoding="utf-8") as lines:
        return [next(lines).rstrip("\n") for _ in range(50)]


def perturb(sentences):
    """Translation-like errors, fixed so scores are reproducible: drop a word, swap two, or leave the sentence."""
    perturbed = []
    for i, sentence in enumerate(sentences):
        words = sentence.split()
        if i % 3 == 0:
            del words[-2]
        elif i % 3 == 1:
            words[0], words[1] = words[1], words[0]
        perturbed.append(" ".join(words))
    return perturbed


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_loads_and_computes_offline(tmp_path):
    # huggingface_hub reads the offline switches at import, hence a fresh interpreter with an empty cache.
    script = f"""
import json, evaluate
try:
    evaluate.load("sacrebleu")
    hub = "reachable"
except FileNotFoundError:
    hub = "blocked"
bleu = evaluate.load({str(BLEU_DIR)!r})
print(json.dumps({{"hub": hub, **bleu.compute(predictions=["Ein Hund rennt."], references=["Ein Hund rennt."])}}))
"""
    offline = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_EVALUATE_OFFLINE": "1", "HF_HOME": str(tmp_path)}
    run = subprocess.run(
        [sys.executable, "-c", script], env={**os.environ, **offline}, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.splitlines()[-1])
    assert result["hub"] == "blocked", "the environment must really cut off the Hub for this test to prove anything"
    assert result["sacrebleu"] == pytest.approx(100)
    assert result["tokenized_bleu"] == pytest.approx(100)


def test_load_bleu_helper_uses_the_shipped_file(references):
    from modeling_vaswani.toolkit.evaluation.metrics import BLEU_PATH, load_bleu

    assert BLEU_PATH == BLEU_DIR / "bleu.py"
    result = load_bleu().compute(predictions=references, references=references)
    assert result["sacrebleu"] == pytest.approx(100)


def test_output_keys(bleu, references):
    result = bleu.compute(predictions=perturb(references), references=references)
    assert set(result) == {
        "sacrebleu",
        "signature",
        "counts",
        "totals",
        "precisions",
        "bp",
        "sys_len",
        "ref_len",
        "tokenized_bleu",
        "tokenized_bleu_signature",
    }
    assert result["tokenized_bleu_signature"] == (
        f"nrefs:1|case:mixed|eff:no|tok:13a+compound-split|smooth:none|version:{sacrebleu.__version__}"
    )


def test_sacrebleu_matches_sacrebleu_called_directly(bleu, references):
    predictions = perturb(references)
    result = bleu.compute(predictions=predictions, references=references)
    direct = sacrebleu.BLEU()
    expected = direct.corpus_score(predictions, [references])
    assert 0 < result["sacrebleu"] < 100
    assert result["sacrebleu"] == pytest.approx(expected.score)
    assert result["counts"] == expected.counts
    assert result["totals"] == expected.totals
    assert result["precisions"] == pytest.approx(expected.precisions)
    assert result["bp"] == pytest.approx(expected.bp)
    assert (result["sys_len"], result["ref_len"]) == (expected.sys_len, expected.ref_len)
    assert result["signature"] == str(direct.get_signature())
    assert result["signature"] == f"nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:{sacrebleu.__version__}"


def test_perfect_translation_scores_100(bleu, references):
    result = bleu.compute(predictions=references, references=references)
    assert result["sacrebleu"] == pytest.approx(100)
    assert result["tokenized_bleu"] == pytest.approx(100)
    assert result["bp"] == 1


@pytest.mark.parametrize(
    "text, split",
    [
        ("state-of-the-art", "state ##AT##-##AT## of ##AT##-##AT## the ##AT##-##AT## art"),
        ("über saftig-grünes Gras", "über saftig ##AT##-##AT## grünes Gras"),
        ("Nummer 3-4", "Nummer 3 ##AT##-##AT## 4"),
        # A hyphen with a space on either side is not inside a compound.
        ("Ein- und Ausgang", "Ein- und Ausgang"),
        ("Hund - Katze", "Hund - Katze"),
        ("bei -5 Grad", "bei -5 Grad"),
        # perl's s///g does not rescan the letter after a replaced hyphen, so single-letter parts keep one hyphen.
        ("A-B-C", "A ##AT##-##AT## B-C"),
    ],
)
def test_compound_split(bleu_module, text, split):
    assert bleu_module.split_compounds(text) == split


def test_paper_tokenization_splits_punctuation_then_compounds(bleu_module):
    tokens = bleu_module.paper_tokenize("Ein Terrier läuft über saftig-grünes Gras, vor einem Zaun.")
    assert tokens == "Ein Terrier läuft über saftig ##AT##-##AT## grünes Gras , vor einem Zaun ."


def test_tokenized_bleu_by_hand(bleu):
    predictions = ["Ein schwarz-weißer Hund rennt.", "Ein Ein Ball."]
    references = ["Ein schwarz-weißer Hund läuft schnell.", "Ein roter Ball."]
    # Paper tokens, sentence 1: Ein schwarz ##AT##-##AT## weißer Hund rennt .          (7)
    #                           Ein schwarz ##AT##-##AT## weißer Hund läuft schnell .  (8)
    #   matches: 1-grams 6 of 7 (not "rennt"), 2-grams 4 of 6, 3-grams 3 of 5, 4-grams 2 of 4.
    # Sentence 2: Ein Ein Ball . (4) against Ein roter Ball . (4)
    #   matches: 1-grams 3 of 4 ("Ein" counts once, as often as the reference has it), 2-grams 1 of 3 ("Ball ."),
    #   3-grams 0 of 2, 4-grams 0 of 1.
    precisions = [(6 + 3) / (7 + 4), (4 + 1) / (6 + 3), (3 + 0) / (5 + 2), (2 + 0) / (4 + 1)]
    brevity_penalty = math.exp(1 - (8 + 4) / (7 + 4))
    expected = 100 * brevity_penalty * math.prod(precisions) ** (1 / 4)
    result = bleu.compute(predictions=predictions, references=references)
    assert result["tokenized_bleu"] == pytest.approx(expected)


def test_tokenized_bleu_matches_sacrebleu_on_text_split_by_hand(bleu, references):
    predictions = [
        "Ein Mann mit orangefarbenem Hut, der etwas anstarrt.",
        "Ein Terrier rennt über saftig-grünes Gras vor einem weißen Zaun.",
        "Leute reparieren das Dach eines Hauses.",
    ]
    sample = [references[0], references[1], references[4]]
    split_predictions = [
        "Ein Mann mit orangefarbenem Hut , der etwas anstarrt .",
        "Ein Terrier rennt über saftig ##AT##-##AT## grünes Gras vor einem weißen Zaun .",
        "Leute reparieren das Dach eines Hauses .",
    ]
    split_references = [
        "Ein Mann mit einem orangefarbenen Hut , der etwas anstarrt .",
        "Ein Boston Terrier läuft über saftig ##AT##-##AT## grünes Gras vor einem weißen Zaun .",
        "Leute Reparieren das Dach eines Hauses .",
    ]
    expected = sacrebleu.corpus_bleu(
        split_predictions, [split_references], tokenize="none", smooth_method="none", force=True
    )
    result = bleu.compute(predictions=predictions, references=sample)
    assert result["tokenized_bleu"] == pytest.approx(expected.score)


def test_multiple_references(bleu, references):
    predictions = perturb(references)
    lowercased = [sentence.lower() for sentence in references]
    paired = [[reference, lower] for reference, lower in zip(references, lowercased, strict=True)]
    result = bleu.compute(predictions=predictions, references=paired)
    expected = sacrebleu.corpus_bleu(predictions, [references, lowercased])
    assert result["sacrebleu"] == pytest.approx(expected.score)
    assert result["counts"] == expected.counts
    assert result["signature"].startswith("nrefs:2|")

    # A prediction found among its references is a perfect match, whatever the other references say.
    including_prediction = [[r, p] for r, p in zip(references, predictions, strict=True)]
    result = bleu.compute(predictions=predictions, references=including_prediction)
    assert result["sacrebleu"] == pytest.approx(100)
    assert result["tokenized_bleu"] == pytest.approx(100)


def test_number_of_references_may_vary(bleu, references):
    predictions = perturb(references)
    second = [sentence.lower() if i % 2 else None for i, sentence in enumerate(references)]
    varying = [[r] if s is None else [r, s] for r, s in zip(references, second, strict=True)]
    result = bleu.compute(predictions=predictions, references=varying)
    assert result["sacrebleu"] == pytest.approx(sacrebleu.corpus_bleu(predictions, [references, second]).score)
    assert result["signature"].startswith("nrefs:var|")


def test_length_mismatch_is_an_error(bleu):
    with pytest.raises(ValueError, match="3 predictions and 2 references"):
        bleu.compute(predictions=["a", "b", "c"], references=["a", "b"])


def test_no_predictions_is_an_error(bleu):
    with pytest.raises(ValueError, match="no predictions"):
        bleu.compute(predictions=[], references=[])


def test_prediction_without_reference_is_an_error(bleu):
    with pytest.raises(ValueError, match="at least one reference"):
        bleu.compute(predictions=["a", "b"], references=[["a"], []])
