"""Table 3 of the paper as configurations: its parameter column, d_k and d_v apart from d_model / h, learned positions.

References are the paper's numbers (Table 3) and Equation 1 written out from a layer's weights, not the model's code.
"""

import json
import math

import pytest
import torch
from helpers.tiny_models import padded_batch, tiny_config, tiny_model
from torch import nn

from modeling_vaswani import VaswaniConfig, VaswaniForConditionalGeneration
from modeling_vaswani.modeling_vaswani import MultiHeadAttention

# Table 3's vocabulary is nowhere stated; these are the ones its parameter column fits (see the test below).
VOCABULARY_512 = 41_000  # base, (B) and (C)
VOCABULARY_BIG = 36_000  # big

# Every line of Table 3 with a parameter count (x 10^6): (row, the line's values, params).
PARAMETER_COLUMN = [
    ("base", {}, 65),
    ("B", {"d_k": 16}, 58),
    ("B", {"d_k": 32}, 60),
    ("C", {"encoder_layers": 2}, 36),
    ("C", {"encoder_layers": 4}, 50),
    ("C", {"encoder_layers": 8}, 80),
    ("C", {"d_model": 256}, 28),
    ("C", {"d_model": 1024}, 168),
    ("C", {"d_ff": 1024}, 53),
    ("C", {"d_ff": 4096}, 90),
    ("big", {}, 213),
]


def parameter_count(config: VaswaniConfig) -> int:
    """The model's parameters, built on the meta device (no memory); the tied embedding matrix counted once."""
    with torch.device("meta"):
        model = VaswaniForConditionalGeneration(config)
    return sum(parameter.numel() for parameter in model.parameters())


@pytest.mark.parametrize("row, values, paper", PARAMETER_COLUMN, ids=lambda x: str(x))
def test_parameter_counts_are_table_3s(row, values, paper):
    """Each line's parameters within 1M of Table 3's column, with one shared vocabulary per model family.

    The paper does not say which vocabulary its column counts. Section 5.1 gives "about 37000" shared BPE tokens, with
    which base has 63.0M, 2M under its 65M. With one shared embedding matrix (Section 3.4), no attention biases, FFN
    biases and two LayerNorm vectors per sublayer, a 41,000-token vocabulary puts base and every line of (B) and (C)
    within 0.5M of the column; big's 213M needs about 36,000 (41,000 gives 218.3M, 37,000 214.2M). No single size fits
    both (the next test), so the d_model-512 family is counted with 41,000 and big with 36,000.
    """
    vocab_size = VOCABULARY_BIG if row == "big" else VOCABULARY_512
    count = parameter_count(VaswaniConfig.table3(row, vocab_size=vocab_size, **values))
    assert abs(count - paper * 1e6) <= 1e6, f"{row} {values}: {count / 1e6:.2f}M, Table 3 says {paper}M"


def test_no_single_vocabulary_fits_the_whole_column():
    assert abs(parameter_count(VaswaniConfig.table3("base", vocab_size=VOCABULARY_BIG)) - 65e6) > 1e6
    assert abs(parameter_count(VaswaniConfig.table3("big", vocab_size=VOCABULARY_512)) - 213e6) > 1e6


# === d_k and d_v =====================================================================================================


def test_table3_lines_set_the_papers_shapes():
    assert VaswaniConfig.table3("base").to_dict() == VaswaniConfig.base().to_dict()
    assert VaswaniConfig.table3("big").to_dict() == VaswaniConfig.big().to_dict()
    one_head = VaswaniConfig.table3("A", num_heads=1)
    assert (one_head.num_heads, one_head.d_k, one_head.d_v, one_head.d_model) == (1, 512, 512, 512)
    small_keys = VaswaniConfig.table3("B", d_k=16)
    assert (small_keys.num_heads, small_keys.d_k, small_keys.d_v) == (8, 16, 64)  # (B): d_v stays 64
    wide = VaswaniConfig.table3("C", d_k=128)
    assert (wide.d_model, wide.num_heads, wide.d_k, wide.d_v) == (1024, 8, 128, 128)  # not 1024 / 8 by default
    shallow = VaswaniConfig.table3("C", encoder_layers=2)
    assert (shallow.encoder_layers, shallow.decoder_layers) == (2, 2)  # N: both stacks
    assert VaswaniConfig.table3("D", dropout=0.2).dropout == 0.2
    assert VaswaniConfig.table3("E").position_embedding_type == "learned"
    assert VaswaniConfig.table3("big", vocab_size=36000).vocab_size == 36000  # not a Table 3 column: an override


# Table 3's base and big lines as the paper prints them: N, d_model, d_ff, h, d_k, d_v, P_drop, eps_ls, train steps.
PAPER_LINES = {
    "base": (6, 512, 2048, 8, 64, 64, 0.1, 0.1, 100_000),
    "big": (6, 1024, 4096, 16, 64, 64, 0.3, 0.1, 300_000),
}


@pytest.mark.parametrize("row", PAPER_LINES)
def test_base_and_big_are_the_papers_lines_of_table_3(row):
    """VaswaniConfig.base()/big() and table3(row), both read from TABLE_3, against the paper's numbers written here:
    a change to either the table or the constructors that makes them disagree with the paper fails."""
    n, d_model, d_ff, h, d_k, d_v, p_drop, eps_ls, steps = PAPER_LINES[row]
    for config in (getattr(VaswaniConfig, row)(), VaswaniConfig.table3(row)):
        shape = (config.encoder_layers, config.decoder_layers, config.d_model, config.d_ff, config.num_heads)
        assert (*shape, config.d_k, config.d_v, config.dropout) == (n, n, d_model, d_ff, h, d_k, d_v, p_drop)
        assert config.position_embedding_type == "sinusoidal"
    assert VaswaniConfig.table3_training_arguments(row) == {"label_smoothing_factor": eps_ls, "max_steps": steps}


def test_table3_training_arguments_carry_eps_ls_and_steps():
    assert VaswaniConfig.table3_training_arguments("base") == {"label_smoothing_factor": 0.1, "max_steps": 100_000}
    assert VaswaniConfig.table3_training_arguments("D", label_smoothing_factor=0.2)["label_smoothing_factor"] == 0.2
    assert VaswaniConfig.table3_training_arguments("big")["max_steps"] == 300_000
    # eps_ls is not architecture: the model of row D's eps_ls lines is base's.
    assert VaswaniConfig.table3("D", label_smoothing_factor=0.0).to_dict() == VaswaniConfig.base().to_dict()


@pytest.mark.parametrize(
    "row, values, words",
    [
        ("F", {}, ["'F'", "'base'", "'A'", "'E'", "'big'"]),
        ("(B)", {}, ["'(B)'"]),
        ("B", {"d_k": 64}, ["d_k=64", "d_k=16", "d_k=32", "none"]),
        ("B", {"num_heads": 4}, ["num_heads=4", "d_k=16 | d_k=32"]),
        ("A", {"num_heads": 2}, ["num_heads=2", "num_heads=1, d_k=512, d_v=512", "num_heads=32"]),
        ("A", {"num_heads": 1, "d_k": 64}, ["num_heads=1, d_k=64", "none"]),
        ("C", {}, ["no value", "more than one", "d_ff=4096"]),
        ("D", {"dropout": 0.3}, ["dropout=0.3", "dropout=0.0", "label_smoothing_factor=0.2"]),
        ("E", {"position_embedding_type": "sinusoidal"}, ["'sinusoidal'", "'learned'"]),
        ("base", {"d_model": 1024}, ["d_model=1024", "none"]),
        ("big", {"dropout": 0.1}, ["dropout=0.1", "dropout=0.3"]),
    ],
)
def test_table3_refuses_what_the_table_does_not_have(row, values, words):
    for build in (VaswaniConfig.table3, VaswaniConfig.table3_training_arguments):
        with pytest.raises(ValueError) as error:
            build(row, **values)
        for word in words:
            assert word in str(error.value)


def attention_by_hand(attention: MultiHeadAttention, x: torch.Tensor, d_k: int, d_v: int) -> torch.Tensor:
    """Section 3.2.2 for one sequence, head by head from the layer's weights: Equation 1, concatenation, W^O."""
    heads = []
    for h in range(attention.num_heads):
        q = x @ attention.w_q.weight[h * d_k : (h + 1) * d_k].T
        k = x @ attention.w_k.weight[h * d_k : (h + 1) * d_k].T
        v = x @ attention.w_v.weight[h * d_v : (h + 1) * d_v].T
        heads.append(torch.softmax(q @ k.T / math.sqrt(d_k), dim=-1) @ v)
    return torch.cat(heads, dim=-1) @ attention.w_o.weight.T


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("d_k, d_v", [(6, 10), (16, 8)])
def test_attention_with_d_k_and_d_v_apart_from_d_model_over_h(implementation, d_k, d_v):
    config = tiny_config(d_model=12, num_heads=3, d_k=d_k, d_v=d_v)
    config._attn_implementation = implementation
    torch.manual_seed(0)
    attention = MultiHeadAttention(config).eval()
    assert attention.w_q.weight.shape == attention.w_k.weight.shape == (3 * d_k, 12)
    assert attention.w_v.weight.shape == (3 * d_v, 12)
    assert attention.w_o.weight.shape == (12, 3 * d_v)
    for linear in (attention.w_q, attention.w_k, attention.w_v, attention.w_o):
        nn.init.normal_(linear.weight)
    x = torch.randn(2, 5, 12)
    with torch.no_grad():
        output, _ = attention(x)
    for row in range(2):
        assert torch.allclose(output[row], attention_by_hand(attention, x[row], d_k, d_v), atol=1e-4)


@pytest.mark.parametrize("num_beams", [1, 3])
@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("row", [{"d_k": 4, "d_v": 12}, {"position_embedding_type": "learned"}], ids=["B", "E"])
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_decoding_with_the_caches(num_beams, cache, row):
    """Rows (B): the caches hold keys of d_k and values of d_v; row (E): cached steps look up their positions (a
    static cache counts them in a tensor). Decoding with a cache gives the tokens decoding without one gives."""
    model = tiny_model(seed=3, **row)
    input_ids, attention_mask = padded_batch([6, 4])
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=8, num_beams=num_beams)
    uncached = model.generate(**kwargs, use_cache=False)
    assert torch.equal(model.generate(**kwargs, cache_implementation=cache), uncached)


# === Learned positions (row E) =======================================================================================


def positional_parameters(model) -> dict[str, torch.Tensor]:
    return {name: p for name, p in model.named_parameters() if "positional" in name}


def test_sinusoidal_default_has_no_position_parameter():
    assert positional_parameters(tiny_model()) == {}
    assert not any("positional" in name for name in tiny_model().state_dict())


def test_learned_positions_are_trained_parameters():
    model = tiny_model(seed=4, position_embedding_type="learned", max_position_embeddings=40).train()
    tables = positional_parameters(model)
    assert set(tables) == {
        "model.encoder.positional_encoding.weight",
        "model.decoder.positional_encoding.weight",
    }  # one per stack, as ConvS2S and fairseq have them
    for table in tables.values():
        assert table.shape == (40, 32)
    # Initialized as the token embeddings: N(0, d_model^-0.5).
    assert torch.cat([t.flatten() for t in tables.values()]).std().item() == pytest.approx(32**-0.5, rel=0.1)
    input_ids, attention_mask = padded_batch([6, 4])
    model(input_ids=input_ids, attention_mask=attention_mask, labels=input_ids).loss.backward()
    for name, table in tables.items():
        assert table.grad is not None and table.grad[:6].abs().sum() > 0, name
        assert table.grad[6:].abs().sum() == 0, name  # rows past the longest sequence are not used


def test_learned_positions_are_used_and_bounded():
    model = tiny_model(seed=5, position_embedding_type="learned", max_position_embeddings=10)
    input_ids, attention_mask = padded_batch([6, 4])
    with torch.no_grad():
        before = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=input_ids).logits
        model.model.encoder.positional_encoding.weight[1].add_(1.0)
        after = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=input_ids).logits
    assert not torch.allclose(before, after)
    with pytest.raises(ValueError, match=r"max_position_embeddings \(10\).*up to 11"):
        model(input_ids=torch.full((1, 12), 5), decoder_input_ids=input_ids[:1])


@pytest.mark.filterwarnings("ignore:Unfeasible length constraints")  # min_length keeps </s> away to the end
def test_paper_decoding_stops_where_learned_positions_end(caplog):
    model = tiny_model(seed=5, position_embedding_type="learned", max_position_embeddings=10).eval()
    input_ids, attention_mask = padded_batch([6, 4])
    with caplog.at_level("WARNING"):
        output = model.generate(input_ids=input_ids, attention_mask=attention_mask, paper_decoding=True, min_length=30)
    assert output.shape[1] == 10  # the start token and 9 more: positions 0-9; source + 50 would be 57
    assert "reaches past the 10 learned positions; translations stop at 9 tokens" in caplog.text


def test_learned_positions_round_trip(tmp_path):
    model = tiny_model(seed=6, position_embedding_type="learned", max_position_embeddings=40)
    model.save_pretrained(tmp_path)
    loaded = VaswaniForConditionalGeneration.from_pretrained(tmp_path).eval()
    assert loaded.config.position_embedding_type == "learned"
    for name, table in positional_parameters(model).items():
        assert torch.equal(positional_parameters(loaded)[name], table), name
    input_ids, attention_mask = padded_batch([6, 4])
    with torch.no_grad():
        expected = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=input_ids).logits
        logits = loaded(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=input_ids).logits
    assert torch.equal(logits, expected)


# === config.json =====================================================================================================


def test_new_fields_round_trip_through_config_json(tmp_path):
    config = tiny_config(d_k=6, d_v=10, position_embedding_type="learned")
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert (saved["d_k"], saved["d_v"], saved["position_embedding_type"]) == (6, 10, "learned")
    loaded = VaswaniConfig.from_pretrained(tmp_path)
    assert (loaded.d_k, loaded.d_v, loaded.position_embedding_type) == (6, 10, "learned")
    # The default d_k = d_model / h is written as its value, so the file says what the model is.
    tiny_config().save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert (saved["d_k"], saved["d_v"], saved["position_embedding_type"]) == (8, 8, "sinusoidal")


def test_config_json_without_the_new_fields_loads_the_same_model(tmp_path):
    """A checkpoint written before d_k, d_v and position_embedding_type existed: d_model / h and the sinusoids."""
    model = tiny_model(seed=7)
    model.save_pretrained(tmp_path)
    config_file = tmp_path / "config.json"
    saved = json.loads(config_file.read_text())
    for name in ("d_k", "d_v", "position_embedding_type"):
        del saved[name]
    config_file.write_text(json.dumps(saved))
    loaded = VaswaniForConditionalGeneration.from_pretrained(tmp_path).eval()
    assert (loaded.config.d_k, loaded.config.d_v, loaded.config.position_embedding_type) == (8, 8, "sinusoidal")
    assert loaded.state_dict().keys() == model.state_dict().keys()
    input_ids, attention_mask = padded_batch([6, 4])
    with torch.no_grad():
        expected = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=input_ids).logits
        logits = loaded(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=input_ids).logits
    assert torch.equal(logits, expected)
