import json

import pytest
import torch
from transformers import AutoConfig
from transformers.cache_utils import Cache

from modeling_vaswani import VaswaniConfig, VaswaniForConditionalGeneration


def test_defaults_are_the_base_model_of_table_3():
    config = VaswaniConfig()
    assert (config.encoder_layers, config.decoder_layers, config.d_model, config.d_ff) == (6, 6, 512, 2048)
    assert (config.num_heads, config.d_k, config.d_v, config.dropout) == (8, 64, 64, 0.1)
    assert config.activation_function == "relu"
    assert config.vocab_size == 37000
    assert config.tie_word_embeddings and config.is_encoder_decoder
    assert config.to_dict() == VaswaniConfig.base().to_dict()


def test_big_preset_and_overrides():
    big = VaswaniConfig.big()
    assert (big.d_model, big.num_heads, big.d_ff, big.dropout, big.d_k) == (1024, 16, 4096, 0.3, 64)
    assert VaswaniConfig.big(dropout=0.1).dropout == 0.1  # Table 3: big EN-FR uses P_drop 0.1
    assert VaswaniConfig.base(vocab_size=32000).vocab_size == 32000


def test_standard_names_map_onto_the_papers():
    config = VaswaniConfig(d_model=256, num_heads=4, encoder_layers=3)
    assert (config.hidden_size, config.num_attention_heads, config.num_hidden_layers) == (256, 4, 3)
    config.hidden_size = 128
    assert config.d_model == 128


@pytest.mark.parametrize(
    "overrides, words",
    [
        ({"d_model": 500}, ["d_model (500)", "num_heads (8)"]),
        ({"d_model": 0}, ["d_model", "0"]),
        ({"d_ff": -1}, ["d_ff", "-1"]),
        ({"encoder_layers": 0}, ["encoder_layers", "0"]),
        ({"vocab_size": 0}, ["vocab_size", "0"]),
        ({"dropout": 1.0}, ["dropout", "1.0", "[0, 1)"]),
        ({"attention_dropout": -0.1}, ["attention_dropout", "-0.1"]),
        ({"activation_function": "swoosh"}, ["swoosh", "relu"]),
        ({"pad_token_id": 37000}, ["pad_token_id (37000)", "vocab_size (37000)"]),
        ({"eos_token_id": -1}, ["eos_token_id (-1)"]),
        ({"decoder_start_token_id": 40000}, ["decoder_start_token_id (40000)"]),
        ({"d_k": 0}, ["d_k", "0"]),
        ({"d_v": 2.5}, ["d_v", "2.5"]),
        ({"d_model": 500, "d_v": 50}, ["d_model (500)", "num_heads (8)", "d_k is not given"]),
        ({"position_embedding_type": "rope"}, ["'rope'", "'sinusoidal'", "'learned'"]),
        ({"init_std": 0.0}, ["init_std", "0.0", "positive number or None"]),
        ({"init_std": "0.02"}, ["init_std", "'0.02'"]),
    ],
)
def test_invalid_values_are_refused_by_name(overrides, words):
    with pytest.raises(ValueError) as error:
        VaswaniConfig(**overrides)
    for word in words:
        assert word in str(error.value)


def test_d_k_and_d_v_default_to_d_model_over_h_and_may_be_given():
    assert (VaswaniConfig(d_model=256, num_heads=4).d_k, VaswaniConfig(d_model=256, num_heads=4).d_v) == (64, 64)
    config = VaswaniConfig(d_model=500, num_heads=8, d_k=50, d_v=70)  # no divisibility needed when both are given
    assert (config.d_k, config.d_v, config.head_dim) == (50, 70, 50)


def test_decoding_settings_live_in_the_generation_config(tmp_path):
    config = VaswaniConfig(vocab_size=50, d_model=16, d_ff=32, num_heads=2, encoder_layers=1, decoder_layers=1)
    model = VaswaniForConditionalGeneration(config)
    assert (model.generation_config.num_beams, model.generation_config.length_penalty) == (4, 0.6)  # Section 6.1
    model.save_pretrained(tmp_path)
    saved_config = json.loads((tmp_path / "config.json").read_text())
    saved_generation = json.loads((tmp_path / "generation_config.json").read_text())
    assert "num_beams" not in saved_config and "length_penalty" not in saved_config
    assert (saved_generation["num_beams"], saved_generation["length_penalty"]) == (4, 0.6)
    assert saved_generation["decoder_start_token_id"] == config.decoder_start_token_id


def test_config_round_trip_through_auto_config(tmp_path):
    VaswaniConfig.big(vocab_size=1234).save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert type(loaded) is VaswaniConfig
    expected = VaswaniConfig.big(vocab_size=1234).to_dict()
    assert {k: v for k, v in loaded.to_dict().items() if k in expected and k != "_name_or_path"} == {
        k: v for k, v in expected.items() if k != "_name_or_path"
    }


def test_keys_ignored_at_inference_are_the_cache_the_model_returns():
    # The Trainer drops these fields from a forward's outputs before gathering the logits of an evaluation: each must
    # be a field the model returns, and together they must leave no cache behind.
    config = VaswaniConfig(vocab_size=50, d_model=16, d_ff=32, num_heads=2, encoder_layers=1, decoder_layers=1)
    model = VaswaniForConditionalGeneration(config).eval()
    ids = torch.tensor([[5, 6, 7, 2]])
    outputs = model(input_ids=ids, decoder_input_ids=ids[:, :2], use_cache=True)  # a cache: no labels given
    ignored = config.keys_to_ignore_at_inference
    assert ignored and set(ignored) <= set(outputs.keys()), (ignored, list(outputs.keys()))
    kept = {name: value for name, value in outputs.items() if name not in ignored}
    assert not any(isinstance(value, Cache) for value in kept.values()), list(kept)
