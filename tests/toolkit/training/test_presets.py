"""The presets take Table 3's numbers from the configuration's table: the paper's, written here by hand."""

import pytest

from modeling_vaswani import VaswaniConfig
from modeling_vaswani.toolkit.training.presets import PRESETS
from modeling_vaswani.toolkit.training.recipe import parse_arguments

# The paper's base and big: d_model, P_drop, eps_ls and train steps (Table 3), the shared vocabulary (Section 5.1).
PAPER = {"base": (512, 0.1, 0.1, 100_000, 37_000), "big": (1024, 0.3, 0.1, 300_000, 37_000)}


@pytest.mark.parametrize("preset", PAPER)
def test_base_and_big_presets_train_table_3s_models_for_its_steps(preset):
    d_model, p_drop, eps_ls, steps, vocab_size = PAPER[preset]
    config = PRESETS[preset]["config"]()
    assert config.to_dict() == getattr(VaswaniConfig, preset)().to_dict()
    assert (config.d_model, config.dropout) == (d_model, p_drop)
    model_args, _, training_args = parse_arguments(["--preset", preset])
    assert model_args.vocab_size == vocab_size
    assert (training_args.label_smoothing_factor, training_args.max_steps) == (eps_ls, steps)


def test_the_small_preset_takes_the_vocabulary_size_of_the_flag_and_its_own_steps():
    model_args, _, training_args = parse_arguments([])
    assert (model_args.vocab_size, training_args.max_steps) == (8000, 4000)
    model_args, _, _ = parse_arguments(["--vocab_size", "500", "--preset", "big"])
    assert model_args.vocab_size == 500  # the user's flag wins over the preset's
