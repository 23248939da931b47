"""The onnxruntime engine (translation/onnxruntime.py) against the PyTorch model it was exported from: the same
search (the payload's) over onnxruntime's steps gives PyTorch's translations and scores; the commands run an ONNX
export as they run a checkpoint, and refuse what the engine cannot do by name.

The export is built once per process (helpers/onnx_export.py): the trained tiny checkpoint, with its int8 variant.
Untrained, its translations run long (to source + 50 tokens), which the limit and the batch's shrinking must follow.
"""

import copy
import re
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from helpers.onnx_export import built_onnx_export
from helpers.request_checks import OTHER_OPTIONS, counted_checks, other_options_are_refused
from helpers.training_setup import run_command
from hypothesis import assume, given, settings
from hypothesis import strategies as st

pytest.importorskip("onnxruntime")

import onnx  # noqa: E402
import onnxruntime  # noqa: E402

from modeling_vaswani.toolkit.checkpoints import CheckpointError  # noqa: E402
from modeling_vaswani.toolkit.cli import evaluate, translate  # noqa: E402
from modeling_vaswani.toolkit.data.corpora import multi30k_files, read_sentences  # noqa: E402
from modeling_vaswani.toolkit.translation.engines import load_translator  # noqa: E402
from modeling_vaswani.toolkit.translation.errors import RequestError  # noqa: E402
from modeling_vaswani.toolkit.translation.onnxruntime import (  # noqa: E402
    NORMALIZED,
    SHORTLIST,
    OnnxRuntimeModel,
    OnnxSteps,
    step_graph,
)
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


def test_target_prefixes_run_on_the_whole_distribution_as_pytorch_s(loaded, sentences):
    """A target prefix rules tokens out of the whole vocabulary, so the engine's steps give their logits, not a
    shortlist: the translations are PyTorch's with the same prefixes, beam and greedy."""
    _, _, (model, tokenizer), (engine, _) = loaded
    prefixes = ["Ein", "", "Zwei Männer", "Der"]
    for beams in (4, 1):
        options = {**SHORT, "num_beams": beams, "batch_size": 4, "target_prefixes": prefixes}
        ours = translate_sentences(model, tokenizer, sentences[:4], **options)
        assert translate_sentences(engine, tokenizer, sentences[:4], **options) == ours
        assert ours[0].startswith("Ein") and ours[2].startswith("Zwei Männer")


def test_a_beam_wider_than_the_shortlist_runs_on_the_logits_as_pytorch_s(loaded, sentences, monkeypatch):
    """The step graph ranks one token a block at most (the tiny model's 400 tokens: 10 blocks of 40): at 5 beams (10
    candidates a sentence) the steps give a shortlist of 10, at 6 beams and at 200 (candidates filling the
    vocabulary) their logits, and the translations and scores are PyTorch's each time."""
    _, _, (model, tokenizer), (engine, _) = loaded
    assert engine.vocab_size == 400
    widths, init = [], OnnxSteps.__init__
    monkeypatch.setattr(OnnxSteps, "__init__", lambda self, *args: widths.append(args[-2]) or init(self, *args))
    options = {**SHORT, "max_new_tokens": 4}
    for beams, width in ((200, None), (6, None), (5, 10)):
        ours = translate_nbest(model, tokenizer, sentences[:2], 2, num_beams=beams, **options)
        theirs = translate_nbest(engine, tokenizer, sentences[:2], 2, num_beams=beams, **options)
        assert widths.pop() == width
        assert [[h.text for h in row] for row in theirs] == [[h.text for h in row] for row in ours]
        for row, expected in zip(theirs, ours, strict=True):
            assert [h.score for h in row] == pytest.approx([h.score for h in expected], abs=1e-4)


def test_searches_run_at_once_give_one_search_s_hypotheses_whatever_the_padding_side(loaded, sentences):
    """A batch dealt to 3 searches at once (7 sentences: shares of 3, 2 and 2), each padded to its own longest source,
    gives what one search of the whole batch gives and PyTorch's n-best lists, with and without target prefixes, and
    so with the batch padded on the left (each share keeps the columns its sentences use; the positions differ from
    the right-padded batch's, so the hypotheses may too)."""
    _, folder, (model, tokenizer), _ = loaded
    one, three = OnnxRuntimeModel(folder, threads=1), OnnxRuntimeModel(folder, threads=3)
    assert (one.searches, three.searches) == (1, 3)
    torch_threads, default = torch.get_num_threads(), OnnxRuntimeModel(folder)
    try:
        torch.set_num_threads(3)  # as a command's --threads 3 does, after the model loaded
        assert default.searches == 3
    finally:
        torch.set_num_threads(torch_threads)
    seven = sentences[:7]
    prefixes = [[], tokenizer("Ein", add_special_tokens=False).input_ids, [], [], [], [], []]
    for prefix in (None, prefixes):
        options = {"nbest": 2, "num_beams": 4, "max_new_tokens": 6, "target_prefix": prefix}
        right = tokenizer(seven, return_tensors="pt", padding=True)
        theirs = three.generate_nbest(right.input_ids, right.attention_mask, **options)
        assert theirs == one.generate_nbest(right.input_ids, right.attention_mask, **options)
        # A call's own count: one search of all, shares of 4 and 3, one a sentence; the same tokens, and scores
        # within float32's rounding (a share's padding to its own columns changes the sums' order).
        for engine, searches in ((three, 1), (three, 2), (three, 7), (three, 9), (one, 3)):
            asked = engine.generate_nbest(right.input_ids, right.attention_mask, searches=searches, **options)
            assert [[ids for ids, _ in row] for row in asked] == [[ids for ids, _ in row] for row in theirs]
            for row, expected in zip(asked, theirs, strict=True):
                assert [score for _, score in row] == pytest.approx([score for _, score in expected], abs=1e-5)
        tokenizer.padding_side = "left"
        try:
            left = tokenizer(seven, return_tensors="pt", padding=True)
        finally:
            tokenizer.padding_side = "right"
        assert not left.attention_mask[:, 0].all() and left.attention_mask[:, -1].all()
        from_left = three.generate_nbest(left.input_ids, left.attention_mask, **options)
        assert from_left == one.generate_nbest(left.input_ids, left.attention_mask, **options)
    texts = translate_nbest(three, tokenizer, seven, 2, num_beams=4, **SHORT)
    assert [[h.text for h in row] for row in texts] == [
        [h.text for h in row] for row in translate_nbest(model, tokenizer, seven, 2, num_beams=4, **SHORT)
    ]


def test_batches_handed_over_at_once_and_many_callers_share_the_models_searches(loaded, sentences):
    """An engine of two searches takes four batches at once (translate's loop hands the next ones over before the
    last one ends), the first ones each run whole by one search and the last four dealt to both, and one of one
    search takes a batch at a time; both give one search's translations, greedy and beam, and never more than two
    searches run at once. Then 6 callers at once over 3 rounds, each its own sentences and beam, on the one engine:
    every answer is the one the same call gets alone, and every call's searches ran on the model's one pool of two.
    Each caller pads with a tokenizer of its own, as vaswani-serve's threads do: a tokenizer's padding is state its
    calls set."""
    _, folder, (_, tokenizer), _ = loaded
    one, two = OnnxRuntimeModel(folder, threads=1), OnnxRuntimeModel(folder, threads=2)
    assert (one.batches_in_flight, two.batches_in_flight) == (1, 4)
    lock = threading.Lock()
    counts = {"calls": 0, "calls at once": 0, "searches": 0, "searches at once": 0}
    running = {"calls": 0, "searches": 0}

    def counted(method, kind):
        def call(*args, **kwargs):
            with lock:
                running[kind] += 1
                counts[kind] += 1
                counts[f"{kind} at once"] = max(counts[f"{kind} at once"], running[kind])
            try:
                return method(*args, **kwargs)
            finally:
                with lock:
                    running[kind] -= 1

        return call

    two.nbest_hypotheses = counted(two.nbest_hypotheses, "calls")
    two.hypotheses = counted(two.hypotheses, "searches")

    def ask(engine, part: list[str], beams: int, own=tokenizer, **options) -> list[str]:
        return translate_sentences(engine, own, part, **SHORT, num_beams=beams, **options)

    for beams in (1, 4):
        assert ask(two, sentences, beams, batch_size=2) == ask(one, sentences, beams, batch_size=2)  # 6 batches
    # 12 calls: in each translation the first 2 batches whole, the last 4 in two shares each.
    assert (counts["calls"], counts["searches"]) == (12, 2 * (2 + 4 * 2))
    assert 2 <= counts["calls at once"] <= 4 and counts["searches at once"] == 2

    requests = [(sentences[first::3], 1 + first % 4, copy.deepcopy(tokenizer)) for first in range(6)]
    alone = [ask(one, *request) for request in requests]
    for _ in range(3):
        with ThreadPoolExecutor(len(requests)) as callers:
            assert list(callers.map(lambda request: ask(two, *request), requests)) == alone
    assert list(two.pools) == [2] and counts["searches at once"] == 2


@pytest.mark.parametrize("searches", [0, -1, True, 1.5, "2"])
def test_a_calls_searches_must_be_a_whole_number_of_at_least_one(loaded, searches):
    """Refused by the one rule of counts (arguments.optional_count), naming the value."""
    engine, tokenizer = loaded[3]
    batch = tokenizer(["A man."], return_tensors="pt")
    with pytest.raises(ValueError, match=re.escape(f"searches={searches!r}; expected an int of at least 1 (or None)")):
        engine.generate(batch.input_ids, batch.attention_mask, searches=searches)


@pytest.fixture(scope="module")
def step_sessions(loaded):
    """The export's merged decoder, run as written (the reference), and the engine's step graph made from it."""
    engine = loaded[3][0]
    path = engine.export.decoder
    return (
        engine,
        onnxruntime.InferenceSession(str(path)),
        onnxruntime.InferenceSession(step_graph(path, engine.export.settings)),
    )


def compare_steps(step_sessions, feeds, step_feeds, width=5):
    """The step graph's outputs on `step_feeds` against the merged decoder's on `feeds` (the same step, each row's
    encoder keys and values its own): the same logits and self-attention presents, and each row's `width` likeliest
    tokens and log-probabilities torch's topk of log_softmax over the merged graph's logits (the logits themselves
    where the shortlist is not normalized, as greedy search asks)."""
    _, merged, session = step_sessions
    names = [output.name for output in merged.get_outputs()]
    expected = dict(zip(names, merged.run(None, feeds), strict=True))
    compared = [name for name in names if not (feeds["use_cache_branch"][0] and ".encoder." in name)]
    for normalized in (True, False):
        given_feeds = {**step_feeds, "shortlist_width": np.array([width]), NORMALIZED: np.array([normalized])}
        results = dict(zip([*names, *SHORTLIST], session.run([*names, *SHORTLIST], given_feeds), strict=True))
        for name in compared:
            np.testing.assert_allclose(results[name], expected[name], atol=1e-5, err_msg=name)
        logits = torch.from_numpy(expected["logits"][:, -1])
        values, tokens = torch.topk(torch.log_softmax(logits, dim=-1) if normalized else logits, width)
        assert torch.equal(torch.from_numpy(results[SHORTLIST[1]][:, -1]), tokens)
        np.testing.assert_allclose(results[SHORTLIST[0]][:, -1], values.numpy(), atol=1e-5)
    return expected


def test_the_step_graphs_first_step_is_the_merged_decoders(step_sessions):
    """The uncached branch as exported (three rows, one of them a padded source), with each row's shortlist."""
    engine, merged, _ = step_sessions
    settings = engine.export.settings
    rows, length = 3, 5
    heads, head_width = settings["num_heads"], settings["head_width"]
    generator = np.random.default_rng(0)
    mask = np.ones((rows, length), dtype=np.int64)
    mask[1, 3:] = 0  # a padded source
    empty = np.zeros((rows, heads, 0, head_width), dtype=np.float32)
    feeds = {
        "input_ids": np.full((rows, 1), engine.generation_config.decoder_start_token_id, dtype=np.int64),
        "encoder_attention_mask": mask,
        "encoder_hidden_states": generator.standard_normal((rows, length, heads * head_width)).astype(np.float32),
        "use_cache_branch": np.array([False]),
        **{name.name: empty for name in merged.get_inputs() if name.name.startswith("past_key_values.")},
    }
    compare_steps(step_sessions, feeds, feeds)


@settings(max_examples=12, deadline=None)
@given(
    sentences=st.integers(1, 4),
    hypotheses=st.integers(1, 4),
    past=st.integers(1, 4),
    source=st.integers(1, 7),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_step_graphs_cached_step_attends_over_one_row_of_encoder_keys_a_sentence(
    step_sessions, sentences, hypotheses, past, source, seed
):
    """grouped_cross_attention: the cached branch given each sentence's encoder keys and values once, for its
    `hypotheses` consecutive rows (each with a cache and a token of its own, sources padded at random), computes what
    the export computes with those keys and values repeated for every row."""
    engine, merged, _ = step_sessions
    settings = engine.export.settings
    heads, head_width, rows = settings["num_heads"], settings["head_width"], sentences * hypotheses
    generator = np.random.default_rng(seed)
    mask = np.ones((sentences, source), dtype=np.int64)
    mask[np.arange(source)[None, :] >= generator.integers(1, source + 1, (sentences, 1))] = 0

    def random(*shape):
        return generator.standard_normal(shape).astype(np.float32)

    by_sentence, by_row = {}, {}
    for name in (each.name for each in merged.get_inputs() if each.name.startswith("past_key_values.")):
        if ".encoder." in name:
            by_sentence[name] = random(sentences, heads, source, head_width)
            by_row[name] = np.repeat(by_sentence[name], hypotheses, axis=0)
        else:
            by_sentence[name] = by_row[name] = random(rows, heads, past, head_width)
    common = {
        "input_ids": generator.integers(4, settings["vocab_size"], (rows, 1)),
        "encoder_attention_mask": np.repeat(mask, hypotheses, axis=0),
        "use_cache_branch": np.array([True]),
    }
    states = random(sentences, source, heads * head_width)
    compare_steps(
        step_sessions,
        {**common, **by_row, "encoder_hidden_states": np.repeat(states, hypotheses, axis=0)},
        {**common, **by_sentence, "encoder_hidden_states": states},
    )


@pytest.mark.parametrize("alike", [True, False], ids=["a search's start", "rows that differ"])
def test_the_steps_keep_one_row_of_encoder_keys_a_sentence_and_compute_alike_first_rows_once(step_sessions, alike):
    """OnnxSteps over two steps of 3 sentences, 2 rows each, against the export's merged decoder run row by row:
    the same logits, whether a sentence's first rows are alike (as every search starts; computed once a sentence and
    repeated) or not (computed a row); the encoder-decoder keys and values it keeps are one row a sentence, the
    reference's first row of each."""
    engine, merged, _ = step_sessions
    sentences, each, source = 3, 2, 4
    settings = engine.export.settings
    generator = np.random.default_rng(1)
    states = generator.standard_normal((sentences, source, settings["num_heads"] * settings["head_width"]))
    states = states.astype(np.float32)
    mask = np.ones((sentences, source), dtype=np.int64)
    mask[2, 2:] = 0
    steps = OnnxSteps(engine.decoder, states, mask, engine.layers, engine.shape, None, True)
    start = engine.generation_config.decoder_start_token_id
    first = torch.full((sentences * each, 1), start) if alike else torch.arange(5, 5 + sentences * each)[:, None]
    names = [output.name for output in merged.get_outputs()]
    empty = np.zeros((sentences * each, *engine.shape[:1], 0, engine.shape[1]), dtype=np.float32)
    feeds = {
        "input_ids": first.numpy(),
        "encoder_attention_mask": np.repeat(mask, each, axis=0),
        "encoder_hidden_states": np.repeat(states, each, axis=0),
        "use_cache_branch": np.array([False]),
        **{name.replace("present", "past_key_values"): empty for name in names[1:]},
    }
    expected = dict(zip(names, merged.run(None, feeds), strict=True))
    np.testing.assert_allclose(steps(first).logits.numpy(), expected["logits"][:, -1:], atol=1e-5)
    for name in (name for name in names if ".encoder." in name):
        kept = steps.past[name.replace("present", "past_key_values")]
        np.testing.assert_allclose(kept, expected[name][::each], atol=1e-5, err_msg=name)
    second = torch.cat((first, torch.arange(7, 7 + sentences * each)[:, None]), dim=1)
    feeds.update({"input_ids": second[:, -1:].numpy(), "use_cache_branch": np.array([True])})
    feeds.update({name.replace("present", "past_key_values"): expected[name] for name in names[1:]})
    later = dict(zip(names, merged.run(None, feeds), strict=True))
    np.testing.assert_allclose(steps(second).logits.numpy(), later["logits"], atol=1e-5)


def test_a_merged_decoder_without_the_exports_attention_pattern_is_refused_naming_the_file(loaded, tmp_path):
    """grouped_cross_attention finds the encoder-decoder attention by its inputs' names: a second reader of a layer's
    encoder keys (as a changed exporter might write), or no If on use_cache_branch, is refused before any step."""
    path = loaded[3][0].export.decoder
    settings = loaded[3][0].export.settings
    model = onnx.load(str(path))
    branch = next(attribute.g for attribute in model.graph.node[0].attribute if attribute.name == "then_branch")
    reader = next(node for node in branch.node if "past_key_values.1.encoder.key" in node.input)
    extra = onnx.NodeProto()
    extra.CopyFrom(reader)
    extra.output[0] += "/again"
    branch.node.append(extra)
    changed = tmp_path / "decoder_model_merged.onnx"
    onnx.save(model, changed)
    with pytest.raises(
        CheckpointError, match=re.escape(f"{changed}: 2 Transpose nodes read past_key_values.1.encoder.key")
    ):
        step_graph(changed, settings)
    model.graph.node[0].input[0] = "not_use_cache_branch"
    model.graph.input.append(onnx.helper.make_tensor_value_info("not_use_cache_branch", onnx.TensorProto.BOOL, [1]))
    onnx.save(model, changed)
    with pytest.raises(CheckpointError, match=re.escape(f"{changed}: 0 If nodes on use_cache_branch; expected")):
        step_graph(changed, settings)


def test_a_decoder_without_logits_is_refused_naming_the_file(tmp_path):
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["x"], ["y"])],
        "not a decoder",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])],
    )
    path = tmp_path / "decoder_model_merged.onnx"
    onnx.save(onnx.helper.make_model(graph), path)
    with pytest.raises(CheckpointError, match=rf"^{path}: a graph without a logits output; expected the merged"):
        step_graph(path, {"vocab_size": 400, "decoder_layers": 1, "num_heads": 1})


@pytest.mark.parametrize("options", OTHER_OPTIONS, ids=lambda options: ",".join(options))
def test_generate_options_the_search_does_not_take_are_refused_by_name(loaded, sentences, options):
    """Before this check (2026-11-29) translate(..., early_stopping=True) on the engine met a TypeError from deep in
    the call; now every entry refuses such options by name before the search runs."""
    other_options_are_refused(*loaded[3], sentences[:2], options)


@settings(max_examples=50)
@given(name=st.from_regex(r"[a-z][a-z_]{0,24}", fullmatch=True), value=st.integers() | st.booleans() | st.text())
def test_any_other_option_name_is_refused_by_name(loaded, name, value):
    """Any name but those the search takes (the four every exported engine's takes, and its searches), with any
    value, on the direct entries."""
    assume(name not in loaded[3][0].options and name not in ("self", "input_ids", "attention_mask", "nbest"))
    engine, tokenizer = loaded[3]
    batch = tokenizer(["A man."], return_tensors="pt")
    for call in (engine.generate, lambda *args, **kwargs: engine.generate_nbest(*args, nbest=1, **kwargs)):
        with pytest.raises(ValueError, match=re.escape(f"{name}={value!r}: the onnxruntime engine's search takes")):
            call(batch.input_ids, batch.attention_mask, **{name: value})
