"""The model against independent references: the paper's formulas written out, and torch.nn.Transformer layers."""

import math

import pytest
import torch
from helpers.tiny_models import padded_batch, tiny_config, tiny_model
from torch import nn

from modeling_vaswani import VaswaniConfig, VaswaniForConditionalGeneration
from modeling_vaswani.modeling_vaswani import MultiHeadAttention, PositionalEncoding


def paper_positional_encoding(num_positions: int, d_model: int) -> torch.Tensor:
    """Section 3.5 computed element by element with Python's math, independent of the model's vectorised code."""
    table = torch.empty(num_positions, d_model, dtype=torch.float64)
    for pos in range(num_positions):
        for dim in range(d_model):
            i = dim // 2
            angle = pos / 10000 ** (2 * i / d_model)
            table[pos, dim] = math.sin(angle) if dim % 2 == 0 else math.cos(angle)
    return table


def test_positional_encoding_is_the_papers_formula():
    config = tiny_config(d_model=16, max_position_embeddings=50)
    encoding = PositionalEncoding(config)
    expected = paper_positional_encoding(80, 16)
    assert torch.allclose(encoding(50).double(), expected[:50], atol=1e-6)
    # Past the precomputed table, positions are computed on the fly; an offset continues the count.
    assert torch.allclose(encoding(30, offset=50).double(), expected[50:80], atol=1e-6)
    assert torch.allclose(encoding(3, offset=7).double(), expected[7:10], atol=1e-6)
    # A static cache's length is a tensor: the same rows, computed rather than looked up, inside the table or past it.
    assert torch.equal(encoding(3, offset=torch.tensor(7)), encoding(3, offset=7))
    assert torch.equal(encoding(30, offset=torch.tensor(50)), encoding(30, offset=50))
    # Interleaved layout: dimension 0 is sin(pos), dimension 1 is cos(pos).
    assert encoding(2)[1, 0].item() == pytest.approx(math.sin(1.0), abs=1e-7)
    assert encoding(2)[1, 1].item() == pytest.approx(math.cos(1.0), abs=1e-7)


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_one_attention_head_by_hand(implementation):
    config = tiny_config(d_model=12, num_heads=3)
    config._attn_implementation = implementation
    torch.manual_seed(0)
    attention = MultiHeadAttention(config).eval()
    for linear in (attention.w_q, attention.w_k, attention.w_v, attention.w_o):
        nn.init.normal_(linear.weight)
    x = torch.randn(1, 5, 12)
    d_k = 4
    heads = []
    for h in range(3):
        rows = slice(h * d_k, (h + 1) * d_k)
        q = x[0] @ attention.w_q.weight[rows].T
        k = x[0] @ attention.w_k.weight[rows].T
        v = x[0] @ attention.w_v.weight[rows].T
        heads.append(torch.softmax(q @ k.T / math.sqrt(d_k), dim=-1) @ v)  # Equation 1
    expected = torch.cat(heads, dim=-1) @ attention.w_o.weight.T
    with torch.no_grad():
        output, _ = attention(x)
    assert torch.allclose(output[0], expected, atol=1e-5)


def torch_reference(model: VaswaniForConditionalGeneration):
    """torch.nn encoder and decoder stacks (post-LN, no final norm) holding the model's weights."""
    config = model.config
    kwargs = dict(
        d_model=config.d_model,
        nhead=config.num_heads,
        dim_feedforward=config.d_ff,
        dropout=0.0,
        activation="relu",
        layer_norm_eps=config.layer_norm_eps,
        batch_first=True,
        norm_first=False,
    )
    encoder = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(**kwargs), config.encoder_layers, enable_nested_tensor=False
    )
    decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(**kwargs), config.decoder_layers)

    def copy_attention(target: nn.MultiheadAttention, source: MultiHeadAttention):
        target.in_proj_weight.copy_(torch.cat([source.w_q.weight, source.w_k.weight, source.w_v.weight]))
        target.out_proj.weight.copy_(source.w_o.weight)
        if config.attention_bias:
            target.in_proj_bias.copy_(torch.cat([source.w_q.bias, source.w_k.bias, source.w_v.bias]))
            target.out_proj.bias.copy_(source.w_o.bias)
        else:  # ours has no bias: the reference's biases are zero
            target.in_proj_bias.zero_()
            target.out_proj.bias.zero_()

    def copy_layer_norm(target: nn.LayerNorm, source):
        target.load_state_dict(source.norm.state_dict())

    def copy_feed_forward(target, source):
        target.linear1.load_state_dict(source.feed_forward.w1.state_dict())
        target.linear2.load_state_dict(source.feed_forward.w2.state_dict())

    with torch.no_grad():
        for ref, ours in zip(encoder.layers, model.model.encoder.layers, strict=True):
            copy_attention(ref.self_attn, ours.self_attn)
            copy_feed_forward(ref, ours)
            copy_layer_norm(ref.norm1, ours.self_attn_sublayer)
            copy_layer_norm(ref.norm2, ours.feed_forward_sublayer)
        for ref, ours in zip(decoder.layers, model.model.decoder.layers, strict=True):
            copy_attention(ref.self_attn, ours.self_attn)
            copy_attention(ref.multihead_attn, ours.cross_attn)
            copy_feed_forward(ref, ours)
            copy_layer_norm(ref.norm1, ours.self_attn_sublayer)
            copy_layer_norm(ref.norm2, ours.cross_attn_sublayer)
            copy_layer_norm(ref.norm3, ours.feed_forward_sublayer)
    return encoder.eval(), decoder.eval()


def reference_logits(model, input_ids, attention_mask, decoder_input_ids):
    """Figure 1 assembled around torch.nn: scaled shared embeddings + Section 3.5 sinusoids, tied output layer."""
    encoder, decoder = torch_reference(model)
    d_model = model.config.d_model
    embedding = model.model.shared.weight
    table = paper_positional_encoding(max(input_ids.shape[1], decoder_input_ids.shape[1]), d_model).float()
    source = embedding[input_ids] * math.sqrt(d_model) + table[: input_ids.shape[1]]
    target = embedding[decoder_input_ids] * math.sqrt(d_model) + table[: decoder_input_ids.shape[1]]
    padding = attention_mask == 0
    memory = encoder(source, src_key_padding_mask=padding)
    causal = nn.Transformer.generate_square_subsequent_mask(decoder_input_ids.shape[1])
    hidden = decoder(target, memory, tgt_mask=causal, tgt_is_causal=True, memory_key_padding_mask=padding)
    return hidden @ embedding.T


@pytest.mark.parametrize("implementation", ["eager", "sdpa", "flex_attention"])
@pytest.mark.parametrize("attention_bias", [False, True])
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_logits_equal_torch_nn_transformer(implementation, attention_bias):
    model = tiny_model(seed=1, attention_bias=attention_bias, attn_implementation=implementation)
    if attention_bias:  # non-zero biases, so that a wrong mapping shows
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if name.endswith("bias"):
                    parameter.normal_()
    input_ids, attention_mask = padded_batch([7, 4, 6], seed=1)
    decoder_input_ids, _ = padded_batch([5, 5, 3], seed=2)
    with torch.no_grad():
        ours = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
        expected = reference_logits(model, input_ids, attention_mask, decoder_input_ids)
    difference = (ours - expected).abs().max().item()
    print(f"largest logit difference against torch.nn ({implementation}, bias={attention_bias}): {difference:.2e}")
    assert difference < 1e-5


def expected_parameter_count(config: VaswaniConfig) -> int:
    """Section 3, counted by hand: one shared V x d_model matrix (3.4); per layer 4 d_model^2 for each attention
    (no biases, 3.2.2), 2 d_model d_ff + d_ff + d_model for the FFN (Equation 2), 2 d_model per LayerNorm."""
    d, d_ff, vocab = config.d_model, config.d_ff, config.vocab_size
    attention = 4 * d * d
    feed_forward = 2 * d * d_ff + d_ff + d
    norm = 2 * d
    encoder_layer = attention + feed_forward + 2 * norm
    decoder_layer = 2 * attention + feed_forward + 3 * norm
    return vocab * d + config.encoder_layers * encoder_layer + config.decoder_layers * decoder_layer


@pytest.mark.parametrize("preset, millions", [("base", 63.0), ("big", 214.2)])
def test_parameter_counts(preset, millions):
    config = getattr(VaswaniConfig, preset)()
    with torch.device("meta"):
        model = VaswaniForConditionalGeneration(config)
    count = sum(p.numel() for p in model.parameters())  # tied matrices are counted once
    print(f"{preset}: {count:,} parameters")
    assert count == expected_parameter_count(config)
    assert round(count / 1e6, 1) == millions
