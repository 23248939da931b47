"""benchmarks/marian_export.py's comparisons, on the trained tiny checkpoint and lines written here."""

import pytest
from helpers.training_setup import TINY_PAIRS, trained_tiny_checkpoint
from marian_export import differing, largest_logit_difference
from transformers import AutoTokenizer

from modeling_vaswani import VaswaniForConditionalGeneration
from modeling_vaswani.toolkit.interop.marian_export import to_marian


def test_differing_lines_are_numbered_from_one():
    assert differing(["Ein Mann.", "Zwei Hunde.", "Ein Kind."], ["Ein Mann.", "Zwei Hunde .", "Ein Kind!"]) == [2, 3]
    assert differing(["Ein Mann."], ["Ein Mann."]) == []


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return trained_tiny_checkpoint(tmp_path_factory.mktemp("trained"))


def test_the_logit_difference_is_none_for_the_same_model_and_the_epsilons_for_the_export(checkpoint):
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    ours = VaswaniForConditionalGeneration.from_pretrained(checkpoint).eval()
    sources, targets = (list(side) for side in zip(*TINY_PAIRS, strict=True))
    assert largest_logit_difference(ours, ours, tokenizer, sources, targets, batch_size=2) == 0
    at_marian_eps = VaswaniForConditionalGeneration.from_pretrained(checkpoint, layer_norm_eps=1e-5).eval()
    assert largest_logit_difference(at_marian_eps, to_marian(ours), tokenizer, sources, targets, 2) < 1e-5
    assert 1e-5 < largest_logit_difference(ours, to_marian(ours), tokenizer, sources, targets, 2) < 1e-3
