"""The ONNX export (toolkit/interop/onnx.py) against the PyTorch model, run by onnxruntime by hand here (not by the
engine under test, translation/onnxruntime.py), and the one opener's refusals of a damaged export.

The export is built once per process (helpers/onnx_export.py): the trained tiny checkpoint, with its int8 variant.
"""

import json
import shutil

import numpy as np
import pytest
import torch
from helpers.onnx_export import built_onnx_export
from helpers.tiny_models import tiny_model
from helpers.training_setup import run_command

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")

from modeling_vaswani.toolkit.checkpoints import CheckpointError  # noqa: E402
from modeling_vaswani.toolkit.cli import export_onnx  # noqa: E402
from modeling_vaswani.toolkit.interop.convert import ConversionError  # noqa: E402
from modeling_vaswani.toolkit.interop.onnx import write_onnx  # noqa: E402
from modeling_vaswani.toolkit.translation.engines import load_translator  # noqa: E402

pytestmark = pytest.mark.slow  # the export, once per process: about 30 s on two busy cores (2026-11-27)

LAYERS, HEADS, WIDTH = 2, 4, 8  # helpers.training_setup.TINY: 2 layers, d_model 32 over 4 heads
KINDS = [(part, kind) for part in ("decoder", "encoder") for kind in ("key", "value")]
PAST = [f"past_key_values.{n}.{part}.{kind}" for n in range(LAYERS) for part, kind in KINDS]


@pytest.fixture(scope="module")
def exported():
    checkpoint, folder = built_onnx_export()
    model, tokenizer = load_translator(str(checkpoint))
    return model, tokenizer, folder


def test_the_graphs_pass_the_checker_and_carry_transformers_js_names(exported):
    _, _, folder = exported
    for name in ("encoder_model", "decoder_model_merged", "encoder_model_quantized", "decoder_model_merged_quantized"):
        onnx.checker.check_model(str(folder / "onnx" / f"{name}.onnx"), full_check=True)
    encoder = onnx.load(folder / "onnx" / "encoder_model.onnx")
    assert [value.name for value in encoder.graph.input] == ["input_ids", "attention_mask"]
    assert [value.name for value in encoder.graph.output] == ["last_hidden_state"]
    decoder = onnx.load(folder / "onnx" / "decoder_model_merged.onnx")
    inputs = {value.name: value for value in decoder.graph.input}
    assert list(inputs) == ["input_ids", "encoder_attention_mask", "encoder_hidden_states", *PAST, "use_cache_branch"]
    presents = [name.replace("past_key_values", "present") for name in PAST]
    assert [value.name for value in decoder.graph.output] == ["logits", *presents]
    for name in PAST:  # transformers.js sizes the empty cache from these: batch_size the batch, numbers kept
        dims = inputs[name].type.tensor_type.shape.dim
        assert dims[0].dim_param == "batch_size" and dims[2].dim_param
        assert (dims[1].dim_value, dims[3].dim_value) == (HEADS, WIDTH)
    assert inputs["use_cache_branch"].type.tensor_type.elem_type == onnx.TensorProto.BOOL
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "marian" and config["d_model"] == HEADS * WIDTH


def run_by_hand(folder, ids, mask, decoder_input, suffix=""):
    """The logits of every decoder position, the first through the no-cache branch, each later one through the cache
    branch fed the presents of the step before, as transformers.js feeds them."""
    options = {"providers": ["CPUExecutionProvider"]}
    encoder = onnxruntime.InferenceSession(str(folder / "onnx" / f"encoder_model{suffix}.onnx"), **options)
    decoder = onnxruntime.InferenceSession(str(folder / "onnx" / f"decoder_model_merged{suffix}.onnx"), **options)
    states = encoder.run(None, {"input_ids": ids, "attention_mask": mask})[0]
    feeds = {"encoder_attention_mask": mask, "encoder_hidden_states": states, "use_cache_branch": np.array([False])}
    feeds |= {name: np.zeros((len(ids), HEADS, 0, WIDTH), np.float32) for name in PAST}
    names = [output.name for output in decoder.get_outputs()]
    logits = []
    for step in range(decoder_input.shape[1]):
        results = decoder.run(None, {**feeds, "input_ids": decoder_input[:, step : step + 1]})
        outputs = dict(zip(names, results, strict=True))
        logits.append(outputs["logits"][:, -1])
        for name in PAST:
            if step == 0 or ".decoder." in name:  # transformers.js keeps the first step's encoder presents
                feeds[name] = outputs[name.replace("past_key_values", "present")]
        feeds["use_cache_branch"] = np.array([True])
    return np.stack(logits, axis=1)


def test_onnxruntime_computes_the_checkpoint_s_logits_step_by_step(exported):
    model, tokenizer, folder = exported
    sentences = ["A man rides a bike.", "Two dogs play in the deep snow near a house."]
    batch = tokenizer(sentences, return_tensors="pt", padding=True)
    generator = torch.Generator().manual_seed(0)
    decoder_input = torch.randint(3, len(tokenizer), (2, 60), generator=generator)  # longer than the sources + 50
    decoder_input[:, 0] = model.config.decoder_start_token_id
    with torch.no_grad():
        expected = model(**batch, decoder_input_ids=decoder_input).logits.numpy()
    ids, mask = batch["input_ids"].numpy(), batch["attention_mask"].numpy()
    found = run_by_hand(folder, ids, mask, decoder_input.numpy())
    assert np.abs(found - expected).max() < 1e-4
    quantized = run_by_hand(folder, ids, mask, decoder_input.numpy(), "_quantized")
    # int8 weights: close, not equal. How close depends on the trained weights' ranges (one run's largest difference
    # was 0.77 on logits spanning 11, another's under 0.5), so the mean and the choice of token are what is held.
    error = np.abs(quantized - expected)
    assert 0 < error.mean() < 0.1 and error.max() < 0.1 * np.ptp(expected)
    assert (quantized.argmax(-1) == expected.argmax(-1)).mean() >= 0.9
    weights = onnx.load(folder / "onnx" / "decoder_model_merged_quantized.onnx").graph.initializer
    assert any(tensor.data_type == onnx.TensorProto.INT8 for tensor in weights)


def test_what_onnx_cannot_carry_is_refused_before_any_work(tmp_path, capsys):
    for overrides, setting in (({"position_embedding_type": "learned"}, "position_embedding_type"),
                               ({"d_k": 16, "d_v": 16}, "d_k")):  # fmt: skip
        with pytest.raises(ConversionError, match=setting):
            write_onnx(tiny_model(**overrides), None, tmp_path)
        assert not any(tmp_path.iterdir())
    checkpoint, _ = built_onnx_export()
    code, _, err = run_command(export_onnx, [checkpoint, tmp_path / "out", "--quantize", "int4"], capsys)
    assert code == 2 and "quantize 'int4' is unknown; expected one of int8" in err and not (tmp_path / "out").exists()
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    code, _, err = run_command(export_onnx, [checkpoint, tmp_path / "taken"], capsys)
    assert code == 2 and "holds notes.txt, which vaswani-export-onnx did not write" in err


@pytest.mark.parametrize("damage", ["missing", "cut", "swapped"])
def test_the_opener_names_a_damaged_graph(exported, tmp_path, damage):
    _, _, folder = exported
    copy = shutil.copytree(folder, tmp_path / "export")
    graph = copy / "onnx" / "decoder_model_merged.onnx"
    if damage == "missing":
        graph.unlink()
        expected = "lacks onnx/decoder_model_merged.onnx"
    elif damage == "cut":
        graph.write_bytes(graph.read_bytes()[:1000])
        expected = f"{graph} holds 1,000 bytes"
    else:  # same size, another byte: another export's file
        data = bytearray(graph.read_bytes())
        data[len(data) // 2] ^= 0xFF
        graph.write_bytes(bytes(data))
        expected = f"{graph}: its SHA-256 is not the one the export recorded"
    with pytest.raises(CheckpointError, match=expected):
        load_translator(str(copy))
    with pytest.raises(CheckpointError, match=expected):
        load_translator(str(copy), engine="onnxruntime")
