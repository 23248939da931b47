"""The speed-ups of inference change nothing: generate() gives what the plain path gives.

The plain path is nn.Linear's own product (oneDNN switched off with torch.backends.mkldnn.flags) and torch's SDPA for
every attention (`is_cpu_decoding_step` answering no). The attention paths are also checked against transformers' own
functions, as the model's interface holds them, and torch's SDPA: each sentence's hypotheses over one row of encoder
output (`by_sentence`, which the paper's decoding uses) against that row repeated for each.
"""

import copy

import pytest
import torch
from helpers.tiny_models import padded_batch, tiny_config, tiny_model
from transformers import LogitsProcessor, LogitsProcessorList, TopKLogitsWarper

import modeling_vaswani.kernels_vaswani as kernels
import modeling_vaswani.modeling_vaswani as modeling
from modeling_vaswani.decoding_vaswani import DecoderSteps
from modeling_vaswani.kernels_vaswani import (
    ATTENTION_FUNCTIONS,
    ONEDNN_LINEAR,
    Linear,
    is_cpu_decoding_step,
)
from modeling_vaswani.modeling_vaswani import MultiHeadAttention, eager_attention_forward

needs_onednn = pytest.mark.skipif(not ONEDNN_LINEAR, reason="this torch has no oneDNN linear")


@pytest.fixture(autouse=True)
def every_product_through_onednn(monkeypatch):
    """The tests here take the oneDNN path at their small sizes too (ONEDNN_SMALLEST 0), except where one sets it."""
    monkeypatch.setattr(kernels, "ONEDNN_SMALLEST", 0)


def reference(layer: Linear, x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.linear(x, layer.weight, layer.bias)


@needs_onednn
def test_packed_linear_is_nn_linear_up_to_rounding():
    torch.manual_seed(0)
    layer = Linear(48, 80)
    x = torch.randn(3, 5, 48)
    with torch.no_grad():
        output = layer(x)
    assert layer._packed is not None, "inference without gradients should take the packed path"
    assert output.shape == (3, 5, 80)
    torch.testing.assert_close(output, reference(layer, x), rtol=1e-5, atol=1e-5)


@needs_onednn
@pytest.mark.parametrize("bias", [True, False])
def test_gradients_through_onednn_are_nn_linears_up_to_rounding(bias, monkeypatch):
    monkeypatch.setattr(kernels, "ONEDNN_TRAINING", True)  # the AVX-512 path, tested on every host
    torch.manual_seed(0)
    layer = Linear(48, 80, bias=bias)
    x = torch.randn(3, 7, 48, requires_grad=True)
    upstream = torch.randn(3, 7, 80)
    output = layer(x)
    (output * upstream).sum().backward()
    assert layer._packed is None, "with gradients the weight is used as stored, not packed"
    ours = [x.grad, layer.weight.grad, *([layer.bias.grad] if bias else [])]

    x_ref = x.detach().clone().requires_grad_()
    weight, bias_ref = (
        layer.weight.detach().clone().requires_grad_(),
        layer.bias.detach().clone().requires_grad_() if bias else None,
    )
    expected = torch.nn.functional.linear(x_ref, weight, bias_ref)
    (expected * upstream).sum().backward()
    torch.testing.assert_close(output, expected, rtol=1e-5, atol=1e-5)
    for got, want in zip(ours, [x_ref.grad, weight.grad, *([bias_ref.grad] if bias else [])], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)


@needs_onednn
def test_switched_off_or_under_autocast_it_is_nn_linear_exactly():
    torch.manual_seed(0)
    layer, x = Linear(48, 80), torch.randn(7, 48)
    with torch.backends.mkldnn.flags(enabled=False):
        assert torch.equal(layer(x), reference(layer, x))
        with torch.no_grad():
            assert torch.equal(layer(x), reference(layer, x)) and layer._packed is None
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert layer(x).dtype == torch.bfloat16 and layer._packed is None  # autocast decides, as for nn.Linear


@needs_onednn
@pytest.mark.parametrize("onednn_training", [True, False])
def test_training_products_go_through_onednn_only_where_chosen(onednn_training, monkeypatch):
    """With gradients, oneDNN's autograd function where ONEDNN_TRAINING (AVX-512 CPUs not Intel's), nn.Linear's
    elsewhere."""
    monkeypatch.setattr(kernels, "ONEDNN_TRAINING", onednn_training)
    applied = []
    original = kernels.OneDNNLinearFunction.apply
    monkeypatch.setattr(kernels.OneDNNLinearFunction, "apply", lambda *args: applied.append(1) or original(*args))
    torch.manual_seed(0)
    layer, x = Linear(16, 24), torch.randn(2, 3, 16, requires_grad=True)
    layer(x).sum().backward()
    assert bool(applied) == onednn_training
    assert x.grad.shape == x.shape and layer.weight.grad.shape == layer.weight.shape
    assert kernels.ONEDNN_TRAINING == onednn_training
    monkeypatch.undo()
    with open("/proc/cpuinfo") as cpuinfo:
        intel = any(line.startswith("vendor_id") and line.rstrip().endswith("GenuineIntel") for line in cpuinfo)
    assert kernels.ONEDNN_TRAINING == (torch.backends.cpu.get_cpu_capability().startswith("AVX512") and not intel)


def test_cpu_info_reads_the_first_of_a_field_and_none_where_there_is_none(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu avx2 avx512f\n\n"
        "processor\t: 1\nvendor_id\t: GenuineIntel\n"
    )
    assert kernels.cpu_info("vendor_id", str(cpuinfo)) == "AuthenticAMD"
    assert kernels.cpu_info("flags", str(cpuinfo)) == "fpu avx2 avx512f"
    assert kernels.cpu_info("vendor", str(cpuinfo)) is None  # a field's whole name, not its beginning
    assert kernels.cpu_info("vendor_id", str(tmp_path / "absent")) is None


@needs_onednn
def test_a_product_under_the_smallest_worth_onednn_is_nn_linears_exactly(monkeypatch):
    """rows x in x out multiply-adds: 4 x 128 x 512 = 262,144, under 2^22, nn.Linear's own product (bit for bit, no
    packed weight); 4 x 128 x 8192 = 2^22, oneDNN's, packed."""
    monkeypatch.setattr(kernels, "ONEDNN_SMALLEST", 2**22)
    assert kernels.ONEDNN_SMALLEST == 4 * 128 * 8192
    torch.manual_seed(0)
    x = torch.randn(4, 1, 128)
    small, large = Linear(128, 512), Linear(128, 8192)
    with torch.no_grad():
        assert torch.equal(small(x), reference(small, x)) and small._packed is None
        torch.testing.assert_close(large(x), reference(large, x), rtol=1e-5, atol=1e-5)
        assert large._packed is not None
        assert large(x[:3]).shape == (3, 1, 8192) and torch.equal(large(x[:3]), reference(large, x[:3]))


@needs_onednn
def test_the_packed_weight_follows_every_change_of_the_weight():
    torch.manual_seed(0)
    layer, x = Linear(16, 24, bias=False), torch.randn(4, 16)

    def packed_output():
        with torch.no_grad():
            return layer(x)

    before = packed_output()
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.5)
    layer(x).square().sum().backward()
    optimizer.step()  # an in-place update
    after_step = packed_output()
    assert not torch.allclose(after_step, before)
    torch.testing.assert_close(after_step, reference(layer, x), rtol=1e-5, atol=1e-5)

    layer.load_state_dict({"weight": torch.randn(24, 16)})
    torch.testing.assert_close(packed_output(), reference(layer, x), rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        layer.weight.mul_(-1)
    torch.testing.assert_close(packed_output(), reference(layer, x), rtol=1e-5, atol=1e-5)
    layer.weight = torch.nn.Parameter(torch.randn(24, 16))  # a new tensor altogether
    torch.testing.assert_close(packed_output(), reference(layer, x), rtol=1e-5, atol=1e-5)
    packed = layer._packed
    layer.eval()
    assert layer._packed is packed  # eval() keeps the copy: translating again does not repack
    with torch.no_grad():
        layer.weight.add_(1.0)  # changed after eval(): still caught by the version counter
    torch.testing.assert_close(packed_output(), reference(layer, x), rtol=1e-5, atol=1e-5)
    layer.train()
    assert layer._packed is None  # training drops the copy


@pytest.fixture(scope="module")
def model():
    # Wider than the other tests' model, so that the products are ones oneDNN blocks and packs like real ones.
    return tiny_model(seed=5, vocab_size=301, d_model=64, d_ff=256, num_heads=4, encoder_layers=3, decoder_layers=3)


@pytest.fixture(scope="module")
def batch():
    input_ids, attention_mask = padded_batch([9, 4, 12, 6], vocab_size=301, seed=6)
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def plain_generate(model, batch, monkeypatch, **settings):
    with monkeypatch.context() as patch, torch.backends.mkldnn.flags(enabled=False):
        patch.setattr(kernels, "is_cpu_decoding_step", lambda module, query: False)
        torch.manual_seed(1)
        return model.generate(**batch, **settings)


@pytest.mark.parametrize(
    "settings",
    [
        {"num_beams": 1, "max_new_tokens": 20},
        {"num_beams": 4, "max_new_tokens": 20},
        {"num_beams": 1, "do_sample": True, "top_k": 0, "max_new_tokens": 20},
        {"paper_decoding": True},
        {"paper_decoding": True, "num_beams": 4, "num_return_sequences": 2},
    ],
    ids=["greedy", "beam", "sampling", "paper", "paper-n-best"],
)
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_generate_is_unchanged_by_the_fast_paths(model, batch, settings, monkeypatch):
    settings = {**settings, "return_dict_in_generate": True, "output_scores": True}
    plain = plain_generate(model, batch, monkeypatch, **settings)
    torch.manual_seed(1)
    fast = model.generate(**batch, **settings)
    assert torch.equal(fast.sequences, plain.sequences)
    if "sequences_scores" in plain:
        torch.testing.assert_close(fast.sequences_scores, plain.sequences_scores, rtol=1e-5, atol=1e-5)
    for fast_step, plain_step in zip(fast.scores, plain.scores, strict=True):
        torch.testing.assert_close(fast_step, plain_step, rtol=1e-4, atol=1e-4)


def test_a_model_that_has_packed_its_weights_can_be_copied_and_pickled(model, batch, tmp_path):
    settings = {"num_beams": 1, "max_new_tokens": 8}
    expected = model.generate(**batch, **settings)
    assert not ONEDNN_LINEAR or model.lm_head._packed is not None
    copied = copy.deepcopy(model)
    torch.save(model, tmp_path / "model.pt")
    loaded = torch.load(tmp_path / "model.pt", weights_only=False)
    for other in (copied, loaded):
        assert other.lm_head._packed is None and other.lm_head.weight is other.model.shared.weight  # still tied
        assert torch.equal(other.generate(**batch, **settings), expected)


def test_the_beams_of_a_sentence_share_one_row_of_cross_attention_keys_and_values(model, batch):
    """The paper's decoding keeps one row of encoder output per sentence for its beams."""
    beams = 4
    settings = {"num_beams": beams, "max_new_tokens": 6, "return_dict_in_generate": True}
    output = model.generate(**batch, paper_decoding=True, **settings)
    for layer in output.past_key_values.cross_attention_cache.layers:
        assert layer.keys.shape[0] == layer.values.shape[0] == len(batch["input_ids"])
    assert len(output.past_key_values.self_attention_cache.layers[0].keys) == beams * len(batch["input_ids"])


def test_beams_of_a_sentence_hold_equal_cross_attention_keys_and_values(model, batch, monkeypatch):
    """Where the encoder output is repeated per beam (transformers' own beam search), leaving the cross-attention cache
    unordered is still right: its rows are equal within each sentence."""
    beams = 4
    output = model.generate(**batch, num_beams=beams, max_new_tokens=6, return_dict_in_generate=True)
    cross = output.past_key_values.cross_attention_cache
    for layer in cross.layers:
        for states in (layer.keys, layer.values):
            grouped = states.view(len(batch["input_ids"]), beams, *states.shape[1:])
            assert torch.equal(grouped, grouped[:, :1].expand_as(grouped))


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_hypotheses_sharing_a_sentence_equal_its_encoder_output_repeated(batch, implementation):
    """k decoder rows per encoder row (rows s*k to s*k+k-1 for sentence s) give what k copies of each encoder row give,
    logits and encoder-decoder attention weights alike, with padded sentences."""
    k, sentences = 3, len(batch["input_ids"])
    model = tiny_model(seed=5, vocab_size=301, attn_implementation=implementation)
    decoder_input_ids = torch.randint(4, 301, (sentences * k, 5), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        encoder = model.get_encoder()(**batch)
        shared = model(
            encoder_outputs=encoder,
            attention_mask=batch["attention_mask"],
            decoder_input_ids=decoder_input_ids,
            output_attentions=implementation == "eager",
        )
        repeated = model(
            encoder_outputs=(encoder.last_hidden_state.repeat_interleave(k, dim=0),),
            attention_mask=batch["attention_mask"].repeat_interleave(k, dim=0),
            decoder_input_ids=decoder_input_ids,
            output_attentions=implementation == "eager",
        )
    torch.testing.assert_close(shared.logits, repeated.logits, rtol=1e-5, atol=1e-5)
    if implementation == "eager":
        for got, want in zip(shared.cross_attentions, repeated.cross_attentions, strict=True):
            assert got.shape == (sentences * k, 4, 5, batch["input_ids"].shape[1])
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        padding = batch["attention_mask"].repeat_interleave(k, dim=0)[:, None, None, :].expand_as(got) == 0
        assert padding.any() and got[padding].abs().max() == 0  # each sentence's padding stays masked for all k


def test_a_decoder_batch_that_is_not_a_multiple_of_the_encoders_is_refused(model, batch):
    encoder = model.get_encoder()(**batch)
    with pytest.raises(ValueError, match=r"decoder's batch \(5 rows\) must be a multiple of the encoder.s \(4\)"):
        model(encoder_outputs=encoder, decoder_input_ids=torch.full((5, 2), 3))


@pytest.mark.parametrize("queries", [1, 4])
@pytest.mark.parametrize("mask", ["none", "boolean", "additive"])
def test_decoding_steps_by_equation_1_are_torchs_sdpa(queries, mask):
    torch.manual_seed(0)
    rows, heads, keys, d_k = 16, 4, 9, 16  # at least 16 queries: a decoding step
    query = torch.randn(rows, heads, queries, d_k)
    key, value = torch.randn(rows, heads, keys, d_k), torch.randn(rows, heads, keys, d_k)
    allowed = torch.ones(rows, 1, queries, keys, dtype=torch.bool)
    allowed[::2, ..., -3:] = False  # padded sources
    attention_mask = {
        "none": None,
        "boolean": allowed,
        "additive": torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min),
    }[mask]
    module = MultiHeadAttention(tiny_config()).eval()
    sdpa = ATTENTION_FUNCTIONS.get_interface("sdpa", eager_attention_forward)
    with torch.no_grad():
        assert is_cpu_decoding_step(module, query)
        output, weights = sdpa(module, query, key, value, attention_mask, scaling=d_k**-0.5)
    expected = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, scale=d_k**-0.5
    )
    assert weights is None  # as SDPA returns none
    torch.testing.assert_close(output, expected.transpose(1, 2), rtol=1e-5, atol=1e-6)


def test_decoding_steps_on_cpu_and_only_they_take_equation_1_as_two_products():
    cross = MultiHeadAttention(tiny_config()).eval()
    causal = MultiHeadAttention(tiny_config(), is_causal=True).eval()

    def step(rows, queries):
        return torch.zeros(rows, 4, queries, 8)

    with torch.no_grad():
        assert is_cpu_decoding_step(causal, step(32, 1))  # a new token for each of 32 rows
        assert is_cpu_decoding_step(cross, step(8, 4))  # 8 sentences' 4 beams over their source
        assert not is_cpu_decoding_step(causal, step(2, 1))  # SDPA is faster for a row or two
        assert not is_cpu_decoding_step(causal, step(8, 4))  # a causal block: SDPA may hold the mask implicitly
        assert not is_cpu_decoding_step(cross, step(8, 32))  # a whole sequence (the encoder, or training)
    assert not is_cpu_decoding_step(causal, step(32, 1))  # gradients: SDPA's own backward


def test_beam_search_takes_the_two_products_for_its_steps(model, batch, monkeypatch):
    calls = []

    def counted(*args, **kwargs):
        calls.append(args[1].shape)
        return eager_attention_forward(*args, **kwargs)

    # Equation 1's one home, which the model hands its attention interface as the default
    monkeypatch.setattr(modeling, "eager_attention_forward", counted)
    assert model.config._attn_implementation == "sdpa"
    rows = len(batch["input_ids"])
    model.generate(**batch, num_beams=4, max_new_tokens=5)  # transformers' own: the encoder output repeated per beam
    assert set(calls) == {(rows * 4, 4, 1, 16)}  # self-attention and encoder-decoder attention, a row per beam
    calls.clear()
    model.generate(**batch, paper_decoding=True, num_beams=4, max_new_tokens=5)  # a row per sentence (by_sentence)
    assert (rows * 4, 4, 1, 16) in calls and (rows, 4, 4, 16) in calls  # self-attention and encoder-decoder attention


def test_only_this_models_sdpa_takes_the_decoding_steps():
    """The model's interface overrides "sdpa" on its own instance: transformers' library-wide one keeps its own."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    assert ALL_ATTENTION_FUNCTIONS["sdpa"] is sdpa_attention_forward
    assert ATTENTION_FUNCTIONS["sdpa"] is kernels.sdpa_with_cpu_decoding_steps
    assert ATTENTION_FUNCTIONS["flex_attention"] is ALL_ATTENTION_FUNCTIONS["flex_attention"]
    (sdpa,) = ATTENTION_FUNCTIONS.get_interface("sdpa", eager_attention_forward).args  # taken by_sentence
    assert sdpa.func is kernels.sdpa_with_cpu_decoding_steps
    assert sdpa.keywords == {"equation_1": eager_attention_forward}  # Equation 1 as the model writes it


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("queries", [1, 3])
def test_attention_by_sentence_is_each_hypothesis_over_its_sentence(implementation, queries):
    """k query rows per key row give what the attention function gives on the key rows repeated k times."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    torch.manual_seed(0)
    sentences, k, heads, keys, d_k = 3, 4, 2, 5, 8
    query = torch.randn(sentences * k, queries, heads, d_k).transpose(1, 2)  # as the projection leaves it
    key, value = torch.randn(sentences, heads, keys, d_k), torch.randn(sentences, heads, keys, d_k)
    allowed = torch.ones(sentences, 1, 1, keys, dtype=torch.bool)
    allowed[1, ..., -2:] = False
    plain = eager_attention_forward if implementation == "eager" else ALL_ATTENTION_FUNCTIONS["sdpa"]
    module = MultiHeadAttention(tiny_config()).eval()
    with torch.no_grad():
        output, weights = ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)(
            module, query, key, value, allowed, scaling=d_k**-0.5
        )
        repeat = lambda x: x.repeat_interleave(k, dim=0)  # noqa: E731
        expected, expected_weights = plain(
            module, query, repeat(key), repeat(value), repeat(allowed), scaling=d_k**-0.5
        )
    assert output.shape == (sentences * k, queries, heads, d_k)
    torch.testing.assert_close(output, expected, rtol=1e-5, atol=1e-6)
    if implementation == "eager":
        torch.testing.assert_close(weights, expected_weights, rtol=1e-5, atol=1e-6)


def test_missing_onednn_ops_are_an_error_naming_them(monkeypatch):
    assert kernels.MISSING_ONEDNN_OPS == [] or not ONEDNN_LINEAR
    assert kernels.missing_ops(("_linear_pointwise", "_no_such_op")) == ["_no_such_op"]
    monkeypatch.setattr(kernels, "ONEDNN_LINEAR", True)
    monkeypatch.setattr(kernels, "MISSING_ONEDNN_OPS", ["_no_such_op"])
    with pytest.raises(RuntimeError, match=r"torch.ops.mkldnn._no_such_op, the private ops"):
        Linear(4, 3)(torch.randn(2, 4))
    with torch.backends.mkldnn.flags(enabled=False):  # the way out the message names
        assert Linear(4, 3)(torch.randn(2, 4)).shape == (2, 3)


@pytest.mark.skipif(not ONEDNN_LINEAR, reason="this torch has no oneDNN")
def test_changed_onednn_ops_are_an_error_naming_them(monkeypatch):
    assert kernels.onednn_ops_differ() is None  # this torch's private ops and version counter work as Linear expects
    # As if torch's op changed what it computes (here: the bias left out), the first product says so and stops.
    monkeypatch.setattr(
        kernels,
        "onednn_linear",
        lambda x, weight, bias=None: torch.ops.mkldnn._linear_pointwise.default(x, weight, None, "none", [], ""),
    )
    kernels.onednn_ops_differ.cache_clear()
    try:
        with pytest.raises(RuntimeError, match=r"torch.ops.mkldnn._linear_pointwise.*changed: their product differs"):
            Linear(4, 3)(torch.randn(2, 4))
    finally:
        kernels.onednn_ops_differ.cache_clear()


def batch_sizes_left(monkeypatch) -> list[int]:
    """The sentences kept each time finished ones leave the batch (DecoderSteps.select, run as it is)."""
    selected = []
    original = DecoderSteps.select
    monkeypatch.setattr(
        DecoderSteps, "select", lambda self, kept, k: selected.append(len(kept)) or original(self, kept, k)
    )
    return selected


@pytest.mark.parametrize(
    "settings",
    [
        {"num_beams": 1},
        {"num_beams": 4},
        {"num_beams": 4, "num_return_sequences": 3},
        {"num_beams": 3, "max_new_tokens": 7},
    ],
    ids=["greedy", "beam", "n-best", "beam-capped"],
)
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_paper_decoding_gives_the_same_tokens_whether_finished_sentences_leave_the_batch_or_not(
    model, batch, settings, monkeypatch
):
    """Without return_dict_in_generate finished sentences leave the batch (DecoderSteps.select); with it, every
    sentence is carried to the end: the same tokens."""
    selected = batch_sizes_left(monkeypatch)
    shrinking = model.generate(**batch, paper_decoding=True, **settings)
    # Capped at 7 tokens, the sentences reach the cap together; otherwise some finish first and leave.
    assert bool(selected) == ("max_new_tokens" not in settings), selected
    selected.clear()
    full = model.generate(**batch, paper_decoding=True, return_dict_in_generate=True, **settings).sequences
    assert not selected
    assert torch.equal(shrinking, full)


class RowBias(LogitsProcessor):
    """Not row-wise: favours a token by the row's place in the batch, which changes when a sentence leaves."""

    def __call__(self, input_ids, scores):
        return scores + torch.arange(scores.shape[0])[:, None] * torch.nn.functional.one_hot(
            torch.tensor(7), scores.shape[-1]
        )


class TopKByPlace(TopKLogitsWarper):
    """A subclass of a row-wise processor of transformers' that is no longer row-wise."""

    def __call__(self, input_ids, scores):
        return RowBias()(input_ids, super().__call__(input_ids, scores))


@pytest.mark.parametrize(
    "settings, shrinks",
    [
        ({}, True),
        ({"repetition_penalty": 1.3, "top_k": 20}, True),  # transformers' row-wise processors
        ({"encoder_repetition_penalty": 1.3}, False),  # holds each sentence's source by its row
        ({"logits_processor": LogitsProcessorList([RowBias()])}, False),
        ({"logits_processor": LogitsProcessorList([TopKByPlace(5)])}, False),
    ],
    ids=["none", "row-wise", "encoder-repetition", "custom", "subclass"],
)
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_the_batch_shrinks_only_under_processors_known_to_be_row_wise(model, batch, settings, shrinks, monkeypatch):
    selected = batch_sizes_left(monkeypatch)
    shrinking = model.generate(**batch, paper_decoding=True, num_beams=1, **settings)
    assert bool(selected) == shrinks, selected
    full = model.generate(**batch, paper_decoding=True, num_beams=1, return_dict_in_generate=True, **settings)
    assert torch.equal(shrinking, full.sequences)
