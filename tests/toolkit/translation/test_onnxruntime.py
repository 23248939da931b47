"""The onnxruntime engine (translation/onnxruntime.py) against the PyTorch model it was exported from: the same
search (the payload's) over onnxruntime's steps gives PyTorch's translations and scores; the commands run an ONNX
export as they run a checkpoint, and refuse what the engine cannot do by name.

The export is built once per process (helpers/onnx_export.py): the trained tiny checkpoint, with its int8 variant.
Untrained, its translations run long (to source + 50 tokens), which the limit and the batch's shrinking must follow.
"""

import pytest
from helpers.onnx_export import built_onnx_export
from helpers.request_checks import counted_checks
from helpers.training_setup import run_command

pytest.importorskip("onnxruntime")

from modeling_vaswani.toolkit.cli import evaluate, translate  # noqa: E402
from modeling_vaswani.toolkit.data.corpora import multi30k_files, read_sentences  # noqa: E402
from modeling_vaswani.toolkit.translation.engines import load_translator  # noqa: E402
from modeling_vaswani.toolkit.translation.errors import RequestError  # noqa: E402
from modeling_vaswani.toolkit.translation.onnxruntime import OnnxRuntimeModel  # noqa: E402
from modeling_vaswani.toolkit.translation.translate import translate as translate_sentences  # noqa: E402
from modeling_vaswani.toolkit.translation.translate import translate_nbest  # noqa: E402

pytestmark = pytest.mark.slow  # the export, once per process: about 30 s on two busy cores (2026-11-27)


@pytest.fixture(scope="module")
def loaded():
    checkpoint, folder = built_onnx_export()
    return checkpoint, folder, load_translator(str(checkpoint)), load_translator(str(folder))


@pytest.fixture(scope="module")
def sentences():
    """test2016's first 12 English sentences, of varied lengths."""
    return read_sentences(multi30k_files("test")["en"])[:12]


# Untrained, the model translates to its length limit; a cap of a few tokens keeps the search (its beams, ranking and
# finished sentences leaving the batch) and cuts the time.
SHORT = {"max_new_tokens": 8, "split_sentences": False, "progress": False}


@pytest.mark.parametrize("beams", [4, 1], ids=["beam 4", "greedy"])
def test_translations_are_pytorch_s(loaded, sentences, beams):
    _, _, (model, tokenizer), (engine, engine_tokenizer) = loaded
    assert isinstance(engine, OnnxRuntimeModel)
    assert engine_tokenizer.get_vocab() == tokenizer.get_vocab()
    options = {**SHORT, "num_beams": beams, "batch_size": 4}
    ours = translate_sentences(model, tokenizer, sentences, **options)
    assert translate_sentences(engine, tokenizer, sentences, **options) == ours


def test_nbest_lists_and_scores_are_pytorch_s(loaded, sentences):
    _, _, (model, tokenizer), (engine, _) = loaded
    ours = translate_nbest(model, tokenizer, sentences[:4], 3, **SHORT)
    theirs = translate_nbest(engine, tokenizer, sentences[:4], 3, **SHORT)
    assert [[h.text for h in row] for row in theirs] == [[h.text for h in row] for row in ours]
    for row, expected in zip(theirs, ours, strict=True):
        assert [h.score for h in row] == pytest.approx([h.score for h in expected], abs=1e-4)


def test_an_nbest_list_is_checked_once_and_a_direct_call_past_the_beam_is_refused(loaded, sentences, monkeypatch):
    """translate_nbest's request is checked once, by its front end, and the engine runs it as checked (on 491cfca
    generate_nbest checked it a second time); a direct generate_nbest call, which no front end checked, is checked
    once by the request's own rule and refused past the beam, naming nbest and the beam."""
    _, _, (_, tokenizer), (engine, _) = loaded
    checks = counted_checks(monkeypatch)
    lists = translate_nbest(engine, tokenizer, sentences[:2], 2, **SHORT)
    assert checks == ["TranslationRequest"]
    batch = tokenizer(sentences[:2], return_tensors="pt", padding=True)
    direct = engine.generate_nbest(batch.input_ids, batch.attention_mask, 2, max_new_tokens=SHORT["max_new_tokens"])
    assert checks == ["TranslationRequest"] * 2
    texts = [[tokenizer.decode(ids, skip_special_tokens=True) for ids, _ in row] for row in direct]
    assert texts == [[hypothesis.text for hypothesis in row] for row in lists]
    with pytest.raises(RequestError, match=rf"^nbest=5 with num_beams={engine.num_beams}; expected beam search") as no:
        engine.generate_nbest(batch.input_ids, batch.attention_mask, 5)  # the export's beam
    assert no.value.field == "nbest" and engine.num_beams < 5
    with pytest.raises(RequestError, match=r"^nbest=3 with num_beams=2; expected beam search"):
        engine.generate_nbest(batch.input_ids, batch.attention_mask, 3, num_beams=2)


def test_the_int8_variant_translates(loaded, sentences):
    _, folder, (_, tokenizer), _ = loaded
    engine = OnnxRuntimeModel(folder, quantized=True)
    translations = translate_sentences(engine, tokenizer, sentences[:3], **SHORT)
    assert len(translations) == 3 and all(translations)


def test_the_commands_run_an_export_and_refuse_what_it_cannot(loaded, tmp_path, capsys):
    checkpoint, folder, (_, tokenizer), _ = loaded
    source, reference = tmp_path / "test.en", tmp_path / "test.de"
    source.write_text("A dog.\nTwo men.\n")
    reference.write_text("Ein Hund.\nZwei Männer.\n")
    code, _, err = run_command(translate, [checkpoint, "--input", source, "--output", tmp_path / "pytorch.de"], capsys)
    assert code == 0, err
    for engine in ([], ["--engine", "onnxruntime"]):  # found by what the folder holds, or named
        argv = [folder, "--input", source, "--output", tmp_path / "onnx.de", *engine]
        code, _, err = run_command(translate, argv, capsys)
        assert code == 0, err
        assert (tmp_path / "onnx.de").read_text() == (tmp_path / "pytorch.de").read_text()
    code, out, err = run_command(evaluate, [folder, "--source", source, "--reference", reference], capsys)
    assert code == 0 and "sacreBLEU" in out, err
    code, _, err = run_command(translate, [folder, "--input", source, "--constraints", source], capsys)
    assert code == 2 and "runs on onnxruntime" in err
    code, _, err = run_command(translate, [checkpoint, "--input", source, "--engine", "onnxruntime"], capsys)
    assert code == 2 and "runs a local folder written by vaswani-export-onnx" in err
    engine, _ = load_translator(str(folder))
    with pytest.raises(RequestError, match="runs on onnxruntime"):
        translate_sentences(engine, tokenizer, ["A man."], constraints=[["Mann"]], progress=False)
    with pytest.raises(ValueError, match="paper_decoding=False: the onnxruntime engine decodes as Section 6.1"):
        translate_sentences(engine, tokenizer, ["A man."], paper_decoding=False, progress=False)
