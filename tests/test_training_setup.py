"""The tests' tiny checkpoints are built once per process and copied (helpers.training_setup): each caller must still
get what building its own would have given it, and a copy of its own to change."""

import torch
from helpers.training_setup import save_tiny_checkpoint, tiny_checkpoint


def files(folder):
    return {path.name: path.read_bytes() for path in folder.iterdir()}


def test_a_copy_holds_the_files_a_build_of_its_own_would_and_changing_it_changes_no_other(tmp_path):
    first = tiny_checkpoint(tmp_path / "first", seed=3, lines=300)
    (first / "config.json").write_text("{}")
    (first / "model.safetensors").unlink()
    second = tiny_checkpoint(tmp_path / "second", seed=3, lines=300)
    own = save_tiny_checkpoint(tmp_path / "own", 3, 300, ("en", "de"))
    assert files(second) == files(own)
    assert set(files(own)) >= {"config.json", "model.safetensors", "tokenizer.json", "modeling_vaswani.py"}
    other_seed = tiny_checkpoint(tmp_path / "other-seed", seed=4, lines=300)
    assert files(other_seed)["model.safetensors"] != files(own)["model.safetensors"]


def test_a_copy_leaves_the_random_state_that_building_left(tmp_path):
    tiny_checkpoint(tmp_path / "first", seed=5, lines=300)
    after_first = torch.rand(4)
    torch.manual_seed(1234)
    tiny_checkpoint(tmp_path / "second", seed=5, lines=300)
    assert torch.equal(torch.rand(4), after_first)
