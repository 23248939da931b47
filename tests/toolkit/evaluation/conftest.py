"""Fixtures the evaluation tests share (a module may define its own under the same name)."""

import pytest
from helpers.training_setup import tiny_checkpoint

from modeling_vaswani.toolkit.translation.engines import load_translator


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """An untrained tiny model with a tokenizer trained on 2,000 lines of Multi30k, built once per test module."""
    return tiny_checkpoint(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def loaded(checkpoint):
    """(model, tokenizer) as the commands load them."""
    return load_translator(str(checkpoint))
