"""The Marian converter the other way: a Vaswani model as transformers' MarianMTModel, through the converter's map
of names (modeling_vaswani/toolkit/interop/marian.py) and the inverse permutation. It serves the benchmarks, which
measure MarianMT on our weights (speed/models.py, speed/real_text.py) and train a stock MarianMT (quality.py), and the
tests of the converter's round trip (tests/toolkit/interop/test_convert_marian.py)."""

import torch
from transformers import MarianConfig, MarianMTModel

from modeling_vaswani.configuration_vaswani import VaswaniConfig
from modeling_vaswani.modeling_vaswani import VaswaniForConditionalGeneration
from modeling_vaswani.toolkit.interop.convert import ConversionError
from modeling_vaswani.toolkit.interop.marian import POSITION_KEYS, TIED_KEYS
from modeling_vaswani.toolkit.interop.marian_export import marian_state_dict


def marian_config(
    vocab_size: int, d_model: int, encoder_layers: int, decoder_layers: int, heads: int, d_ff: int, **settings
) -> MarianConfig:
    """A MarianConfig of the paper's network at these sizes: one vocabulary and one embedding matrix for source,
    target and the pre-softmax linear, scaled by sqrt(d_model) (Section 3.4), `heads` and `d_ff` in both stacks.
    `settings` are MarianConfig's other fields (ids, dropout, activation, positions), its defaults where not given."""
    return MarianConfig(
        vocab_size=vocab_size,
        decoder_vocab_size=vocab_size,
        d_model=d_model,
        encoder_layers=encoder_layers,
        decoder_layers=decoder_layers,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=d_ff,
        decoder_ffn_dim=d_ff,
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        **settings,
    )


def marian_config_of(config: VaswaniConfig) -> MarianConfig:
    """The MarianConfig computing what `config` computes, special ids included, up to LayerNorm's epsilon (Marian's is
    fixed at 1e-5). Refuses what MarianMT cannot hold, with the setting named."""
    unrepresentable = {
        "position_embedding_type": ("sinusoidal", "MarianMT's positions are the fixed sinusoids"),
        "tie_word_embeddings": (True, "MarianMT ties the embeddings and the pre-softmax linear"),
        "d_k": (config.d_model // config.num_heads, "MarianMT's d_k is d_model / h"),
        "d_v": (config.d_model // config.num_heads, "MarianMT's d_v is d_model / h"),
    }
    for name, (value, meaning) in unrepresentable.items():
        if getattr(config, name) != value:
            raise ConversionError(f"{name} is {getattr(config, name)!r}; expected {value!r}: {meaning}")
    return marian_config(
        config.vocab_size,
        config.d_model,
        config.encoder_layers,
        config.decoder_layers,
        config.num_heads,
        config.d_ff,
        activation_function=config.activation_function,
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        activation_dropout=config.activation_dropout,
        max_position_embeddings=config.max_position_embeddings,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        decoder_start_token_id=config.decoder_start_token_id,
        forced_eos_token_id=None,  # MarianConfig's default forces token 0 at the length limit; ours forces nothing
    )


def to_marian(model: VaswaniForConditionalGeneration) -> MarianMTModel:
    """A MarianMTModel holding `model`'s weights and computing what it computes, exactly when its LayerNorm epsilon
    is Marian's 1e-5 (the paper's configuration has 1e-6, the only difference left then). Where ours has no
    attention or logits biases, Marian's are zero; its position tables are its own, the same sinusoids in halves."""
    marian = MarianMTModel(marian_config_of(model.config))
    theirs = marian.state_dict()
    weights = marian_state_dict(
        {key: tensor.detach() for key, tensor in model.state_dict().items()}, model.config.d_model
    )
    for key in TIED_KEYS:
        weights[key] = weights["model.shared.weight"]
    for key in POSITION_KEYS:
        weights[key] = theirs[key]
    for key in theirs.keys() - weights.keys():
        if not key.endswith("_proj.bias") and key != "final_logits_bias":
            raise ConversionError(f"MarianMTModel weight {key} has no counterpart in {type(model).__name__}")
        weights[key] = torch.zeros_like(theirs[key])
    marian.load_state_dict(weights, strict=True)
    return marian.to(model.dtype).eval()
