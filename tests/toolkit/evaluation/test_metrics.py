"""chrF and TER beside BLEU (metrics.py): against sacrebleu's corpus functions called here, and by hand."""

import gzip
import json

import pytest
import sacrebleu
from helpers.training_setup import REPO

from modeling_vaswani.toolkit.evaluation.metrics import bleu, chrf, ter, translation_scores

MULTI30K_TEST_DE = REPO / "modeling_vaswani" / "toolkit" / "data" / "multi30k" / "test_2016_flickr.de.gz"
VERSION = sacrebleu.__version__


@pytest.fixture(scope="module")
def references():
    with gzip.open(MULTI30K_TEST_DE, "rt", encoding="utf-8") as lines:
        return [next(lines).rstrip("\n") for _ in range(40)]


@pytest.fixture(scope="module")
def predictions(references):
    """Translation-like errors, fixed: the last word dropped, the first two swapped, a word lowercased, or none."""
    perturbed = []
    for i, sentence in enumerate(references):
        words = sentence.split()
        if i % 4 == 0:
            del words[-1]
        elif i % 4 == 1:
            words[0], words[1] = words[1], words[0]
        elif i % 4 == 2:
            words[1] = words[1].lower()
        perturbed.append(" ".join(words))
    return perturbed


def test_chrf_and_ter_are_sacrebleus_with_its_default_signatures(predictions, references):
    scores = {**chrf(predictions, references), **ter(predictions, references)}
    expected_chrf = sacrebleu.corpus_chrf(predictions, [references]).score
    expected_ter = sacrebleu.corpus_ter(predictions, [references]).score
    assert 0 < expected_chrf < 100 and 0 < expected_ter < 100  # a comparison that could fail either way
    assert scores["chrf"] == pytest.approx(expected_chrf) and scores["ter"] == pytest.approx(expected_ter)
    # WMT's chrF2: character 6-grams, no word n-grams, case kept; TER: tercom tokens, case ignored.
    assert scores["chrf_signature"] == f"nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:{VERSION}"
    assert scores["ter_signature"] == f"nrefs:1|case:lc|tok:tercom|norm:no|punct:yes|asian:no|version:{VERSION}"


def test_a_perfect_translation_has_chrf_100_and_ter_0(references):
    assert chrf(references, references)["chrf"] == pytest.approx(100)
    assert ter(references, references)["ter"] == 0


def test_chrf_by_hand():
    # Spaces ignored, character n-grams of orders 1-6. "Hund" against "Hunde": orders 1-4 have 4, 3, 2, 1 n-grams in
    # the hypothesis, all matching (precision 1), against 5, 4, 3, 2 in the reference (recall 4/5, 3/4, 2/3, 1/2);
    # orders 5 and 6 have none in the hypothesis and are left out of the averages. Mean recall R = 163/240, mean
    # precision 1, and chrF2 = (1 + 2^2) P R / (2^2 P + R) = 5 R / (4 + R) = 815 / 1123.
    assert chrf(["Hund"], ["Hunde"])["chrf"] == pytest.approx(100 * 815 / 1123)


def test_ter_by_hand():
    reference = "Ein Hund läuft im Park"  # 5 words
    assert ter(["Ein Hund rennt im Park"], [reference])["ter"] == pytest.approx(100 * 1 / 5)  # one substitution
    assert ter(["Ein Hund läuft"], [reference])["ter"] == pytest.approx(100 * 2 / 5)  # two words to insert
    # A corpus: its edits over its reference words, not the mean of the sentences' scores.
    two = ter(["Ein Hund rennt im Park", "Ein Hund läuft"], [reference, reference])
    assert two["ter"] == pytest.approx(100 * (1 + 2) / (5 + 5))
    # A phrase moved is one shift, where insertions and deletions would be two edits or more.
    assert ter(["im Park Ein Hund läuft"], [reference])["ter"] == pytest.approx(100 * 1 / 5)


def test_case_counts_for_chrf_and_not_for_ter_as_the_signatures_say():
    lowercased, reference = "ein hund läuft im park", "Ein Hund läuft im Park"
    assert ter([lowercased], [reference])["ter"] == 0
    assert chrf([lowercased], [reference])["chrf"] < 100


def test_translation_scores_are_bleu_chrf_and_ter_together(predictions, references):
    scores = translation_scores(predictions, references)
    expected = {**bleu(predictions, references), **chrf(predictions, references), **ter(predictions, references)}
    assert scores == expected
    assert {"sacrebleu", "tokenized_bleu", "chrf", "chrf_signature", "ter", "ter_signature"} <= set(scores)
    assert json.loads(json.dumps(scores)) == scores  # what vaswani-evaluate prints and results.json holds


@pytest.mark.parametrize("score", [chrf, ter])
def test_unpaired_or_no_segments_are_refused(score):
    name = score.__name__
    with pytest.raises(ValueError, match=f"got 3 predictions and 2 references; {name} needs one reference per"):
        score(["a", "b", "c"], ["a", "b"])
    with pytest.raises(ValueError, match=f"got no predictions; {name} needs at least one segment"):
        score([], [])
