"""The end of training warns of a collapsed model: `recipe.translate_and_score`, which scores vaswani-train's test
split, logs the warning of translation/collapse.py when a real untrained tiny checkpoint gives 20 different test2016
sentences one translation (checked here without the rule too)."""

import logging

import pytest
from datasets import Dataset
from helpers.training_setup import tiny_checkpoint

from modeling_vaswani.toolkit.data.corpora import multi30k_files, read_sentences
from modeling_vaswani.toolkit.threads import torch_threads
from modeling_vaswani.toolkit.training.recipe import DataArguments, translate_and_score
from modeling_vaswani.toolkit.translation.engines import load_translator


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-28): an untrained model runs to its length limit
def test_the_test_split_of_a_collapsed_model_is_warned_of(tmp_path, caplog):
    files = multi30k_files("test", languages=("en", "de"))
    english, german = (read_sentences(files[language])[:20] for language in ("en", "de"))
    split = Dataset.from_dict({"translation": [{"en": e, "de": g} for e, g in zip(english, german, strict=True)]})
    model, tokenizer = load_translator(str(tiny_checkpoint(tmp_path / "tiny", lines=500)))
    with torch_threads(1), caplog.at_level(logging.WARNING, logger="modeling_vaswani.toolkit.training.recipe"):
        translate_and_score(model, tokenizer, split, "test", DataArguments(), tmp_path, True, progress=False)
    translations = (tmp_path / "test.hyp.de").read_text(encoding="utf-8").splitlines()
    beginnings = [translation[:40] for translation in translations]
    assert max(beginnings.count(each) for each in beginnings) > 10  # the collapse, seen without the rule
    warned = [
        record.getMessage() for record in caplog.records if "got one and the same translation" in record.getMessage()
    ]
    assert len(warned) == 1 and "the test split's translations: 20 of 20 different inputs" in warned[0]
