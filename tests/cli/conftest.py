"""Fixtures the command tests share."""

import pytest
from helpers.training_setup import tiny_checkpoint, trained_tiny_checkpoint


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A trained tiny model (500 lines of Multi30k), built once per test module."""
    return tiny_checkpoint(tmp_path_factory.mktemp("tiny"), lines=500)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny model trained on TINY_PAIRS until it translates them (terms, texts), built once per test module."""
    return trained_tiny_checkpoint(tmp_path_factory.mktemp("trained"))


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "input.en"
    path.write_text("A man rides a bike.\nTwo dogs play.\n", encoding="utf-8")
    return path
