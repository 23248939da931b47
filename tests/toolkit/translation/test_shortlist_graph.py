"""The onnxruntime engine's shortlist (translation/onnxruntime.py `shortlist_switch`: LogSoftmax or not, then a TopK
in two stages where the vocabulary divides into blocks) against one TopK over whole rows and against torch, on logits
drawn at random: vocabularies with and without blocks, every width the engine may ask, ties, either branch."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

onnxruntime = pytest.importorskip("onnxruntime")

import onnx  # noqa: E402

from modeling_vaswani.toolkit.translation.onnxruntime import (  # noqa: E402
    NORMALIZED,
    SHORTLIST,
    SHORTLIST_WIDTH,
    block_width,
    shortlist_switch,
    widest_shortlist,
)


def run(nodes, logits: np.ndarray, width: int, normalized: bool = True) -> list[np.ndarray]:
    """`nodes` as a graph of their own, from `logits` to the shortlist."""
    graph = onnx.helper.make_graph(
        nodes,
        "shortlist",
        [
            onnx.helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, [None, None, logits.shape[-1]]),
            onnx.helper.make_tensor_value_info(SHORTLIST_WIDTH, onnx.TensorProto.INT64, [1]),
            onnx.helper.make_tensor_value_info(NORMALIZED, onnx.TensorProto.BOOL, [1]),
        ],
        [
            onnx.helper.make_tensor_value_info(SHORTLIST[0], onnx.TensorProto.FLOAT, [None, None, None]),
            onnx.helper.make_tensor_value_info(SHORTLIST[1], onnx.TensorProto.INT64, [None, None, None]),
        ],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 18)])
    onnx.checker.check_model(model)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {"logits": logits, SHORTLIST_WIDTH: np.array([width], dtype=np.int64), NORMALIZED: np.array([normalized])}
    return session.run(
        list(SHORTLIST), {name: value for name, value in feeds.items() if name in session_inputs(session)}
    )


def session_inputs(session) -> set[str]:
    return {each.name for each in session.get_inputs()}


WHOLE_ROWS = [  # the test's own: one TopK over each whole row
    onnx.helper.make_node("LogSoftmax", ["logits"], ["log_probs"], axis=-1),
    onnx.helper.make_node("TopK", ["log_probs", SHORTLIST_WIDTH], list(SHORTLIST), axis=-1),
]
WHOLE_LOGITS = [onnx.helper.make_node("TopK", ["logits", SHORTLIST_WIDTH], list(SHORTLIST), axis=-1)]


def test_blocks_are_a_divisor_from_32_and_none_without_one():
    assert block_width(8000) == 32 and widest_shortlist(8000) == 250
    assert block_width(37000) == 37 and block_width(400) == 40 and widest_shortlist(400) == 10
    assert block_width(7919) is None and widest_shortlist(7919) == 7918  # a prime
    assert block_width(64) == 32 and block_width(32) is None  # one block would be the whole row


@settings(max_examples=60, deadline=None)
@given(
    vocab_size=st.sampled_from([64, 96, 400, 401, 1000, 1024, 7919, 8000]) | st.integers(2, 1500),
    rows=st.integers(1, 4),
    positions=st.integers(1, 2),
    tied=st.booleans(),
    normalized=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
    data=st.data(),
)
def test_the_shortlist_is_each_rows_likeliest_tokens(vocab_size, rows, positions, tied, normalized, seed, data):
    width = data.draw(st.integers(1, min(widest_shortlist(vocab_size), 16)), label="width")
    generator = np.random.default_rng(seed)
    shape = (rows, positions, vocab_size)
    # Small integers make ties (many tokens of one value); normal draws, none.
    logits = generator.integers(-3, 3, shape) if tied else generator.standard_normal(shape) * 4
    logits = logits.astype(np.float32)
    values, tokens = run([shortlist_switch(vocab_size)], logits, width, normalized)
    whole_values, whole_tokens = run(WHOLE_ROWS if normalized else WHOLE_LOGITS, logits, width)
    assert values.shape == tokens.shape == (rows, positions, width)
    np.testing.assert_array_equal(values, whole_values)  # the same k values, in the same order
    # The logits' branch ranks the logits: the same tokens, its values the logits themselves.
    log_probs = torch.log_softmax(torch.from_numpy(logits), dim=-1) if normalized else torch.from_numpy(logits)
    np.testing.assert_allclose(values, torch.topk(log_probs, width).values.numpy(), atol=1e-5)  # and torch's
    # Each token holds its value in its row, none twice: a tie may be broken otherwise than by one TopK.
    np.testing.assert_allclose(np.take_along_axis(log_probs.numpy(), tokens, axis=-1), values, atol=1e-5)
    assert all(len(set(row)) == width for row in tokens.reshape(-1, width).tolist())
    if not tied:
        np.testing.assert_array_equal(tokens, whole_tokens)
