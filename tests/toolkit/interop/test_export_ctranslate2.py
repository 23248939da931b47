"""The CTranslate2 export (toolkit/interop/ctranslate2.py) and its runtime (toolkit/translation/ctranslate2.py) against
the PyTorch model, and the commands that run it.

Tiny random models compare at the token-id level (token names t4, t5, ... for a vocabulary without a tokenizer); the
commands run on a tiny model with a BPE tokenizer trained on Multi30k (training_setup.tiny_checkpoint).
"""

import json
import shutil
import subprocess
import sys

import pytest
import torch
from helpers.request_checks import OTHER_OPTIONS, counted_checks, other_options_are_refused
from helpers.tiny_models import EOS, padded_batch, tiny_model
from helpers.training_setup import command, run_command, tiny_checkpoint

ctranslate2 = pytest.importorskip("ctranslate2")

from modeling_vaswani.toolkit.cli import evaluate, export_ctranslate2, translate  # noqa: E402
from modeling_vaswani.toolkit.interop.ctranslate2 import ExportError, VaswaniConverter, write_export  # noqa: E402
from modeling_vaswani.toolkit.translation.ctranslate2 import EXPORT_FILE, CTranslate2Model  # noqa: E402
from modeling_vaswani.toolkit.translation.engines import load_translator  # noqa: E402
from modeling_vaswani.toolkit.translation.errors import RequestError  # noqa: E402
from modeling_vaswani.toolkit.translation.scoring import score  # noqa: E402
from modeling_vaswani.toolkit.translation.translate import input_token_limit, pytorch_nbest, translate_nbest  # noqa: E402
from modeling_vaswani.toolkit.translation.translate import translate as translate_sentences  # noqa: E402


def names(vocab_size: int = 61) -> list[str]:
    """Token names for tiny_models' ids: its special tokens, then t4, t5, ..."""
    return ["<s>", "<pad>", "</s>", "<unk>", *(f"t{i}" for i in range(4, vocab_size))]


NAMES = names()
ALPHA = 0.6  # Section 6.1's length penalty
LENGTHS = [7, 5, 9, 3, 12, 6]
CONFIGURATIONS = {  # each setting the export must carry over
    "paper": {},
    "biases": {"attention_bias": True, "final_logits_bias": True},
    "learned positions, eps 0.1": {"position_embedding_type": "learned", "layer_norm_eps": 0.1},
    "d_k 16 != d_model / h": {"d_k": 16, "d_v": 16},
}


def randomized(model, eos_bias: float | None = None):
    """Every bias and LayerNorm parameter drawn at random (initialization leaves them 0 and 1, where one put in the
    wrong place would go unseen); with `eos_bias`, a logits bias that makes </s> likely, so hypotheses end early."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                parameter.normal_(1.0 if name.endswith("norm.weight") else 0.0, 0.3)
        if eos_bias is not None:
            model.lm_head.bias[EOS] = eos_bias
    return model


def exported(model, folder, quantization: str = "float32") -> CTranslate2Model:
    write_export(model, names(model.config.vocab_size), folder, quantization)
    return CTranslate2Model(folder)


def sources(ids, mask) -> list[list[str]]:
    return [[NAMES[i] for i in row[keep.bool()].tolist()] for row, keep in zip(ids, mask, strict=True)]


def output_ids(row: torch.Tensor) -> list[int]:
    """generate()'s output without the start token, up to its first </s>."""
    row = row[1:].tolist()
    return row[: row.index(EOS) + 1] if EOS in row else row


def token_log_probs(model, source: torch.Tensor, output: list[int]) -> torch.Tensor:
    """log P(y_t | y_<t, x) of each output token, from the model's forward pass."""
    decoder_input = torch.tensor([[model.config.decoder_start_token_id, *output[:-1]]])
    with torch.no_grad():
        logits = model(input_ids=source[None], decoder_input_ids=decoder_input).logits[0]
    return logits.log_softmax(-1).gather(-1, torch.tensor(output)[:, None])[:, 0]


@pytest.mark.parametrize("overrides", CONFIGURATIONS.values(), ids=CONFIGURATIONS.keys())
def test_greedy_tokens_and_token_scores_are_ours(tmp_path, overrides):
    model = randomized(tiny_model(seed=1, **overrides))
    engine = exported(model, tmp_path / "ct2")
    ids, mask = padded_batch(LENGTHS, seed=1)
    ours = model.generate(input_ids=ids, attention_mask=mask, num_beams=1, do_sample=False, max_new_tokens=12)
    theirs = engine.generate(ids, mask, paper_decoding=False, num_beams=1, max_new_tokens=12)
    assert [output_ids(row) for row in ours] == theirs

    # CTranslate2's log-probabilities of our tokens (score_batch appends </s> itself), against our forward pass.
    outputs = [output_ids(row) for row in ours]
    targets = [[NAMES[i] for i in output if i != EOS] for output in outputs]
    scored = engine.translator.score_batch(sources(ids, mask), targets)
    differences = []
    for row, (result, target) in enumerate(zip(scored, targets, strict=True)):
        full = [NAMES.index(name) for name in target] + [EOS]
        ours_scores = token_log_probs(model, ids[row][mask[row].bool()], full)
        differences.append((torch.tensor(result.log_probs) - ours_scores).abs().max().item())
    assert max(differences) < 1e-4, differences


@pytest.mark.parametrize("overrides", [{}, {"attention_bias": True}], ids=["paper", "attention biases"])
def test_beam_4_tokens_and_scores_are_ours(tmp_path, overrides):
    """CTranslate2's beam search ranks by log P / |Y|^alpha and stops once beam_size hypotheses have finished, as
    transformers' beam search does with early_stopping=True: on the same settings, the same tokens and scores."""
    model = randomized(tiny_model(seed=2, final_logits_bias=True, **overrides), eos_bias=2.5)
    engine = exported(model, tmp_path / "ct2")
    ids, mask = padded_batch(LENGTHS, seed=2)
    ours = model.generate(
        input_ids=ids,
        attention_mask=mask,
        num_beams=4,
        early_stopping=True,
        length_penalty=ALPHA,
        max_new_tokens=20,
        return_dict_in_generate=True,
        output_scores=True,
    )
    theirs = engine.generate(ids, mask, paper_decoding=False, num_beams=4, max_new_tokens=20)
    our_ids = [output_ids(row) for row in ours.sequences]
    assert our_ids == theirs
    if not overrides:  # </s> at several lengths: the ranking mattered (the other random model writes one sentence)
        assert len({len(output) for output in our_ids}) > 2, our_ids
    results = engine.translator.translate_batch(
        sources(ids, mask), beam_size=4, length_penalty=ALPHA, max_decoding_length=20, min_decoding_length=0,
        return_end_token=True, return_scores=True,
    )  # fmt: skip
    scores = torch.tensor([result.scores[0] for result in results])
    assert (scores - ours.sequences_scores).abs().max() < 1e-4


def test_paper_decoding_gives_our_tokens(tmp_path):
    """generate(paper_decoding=True) against the exported folder's paper decoding, one sentence a call (so that the
    source + 50 limit is each sentence's own): GNMT's ranking over the hypotheses CTranslate2 returns picks ours.
    What can differ: ours decodes on while a live beam can still beat the finished ones; CTranslate2 stops once
    4 have finished. No sentence here needs the longer search."""
    model = randomized(tiny_model(seed=2, final_logits_bias=True), eos_bias=2.5)
    model.generation_config.length_penalty = ALPHA
    engine = exported(model, tmp_path / "ct2")
    assert engine.length_penalty == ALPHA and engine.num_beams == 4  # the generation settings travelled
    ids, mask = padded_batch(LENGTHS * 2, seed=2)
    ours, theirs = [], []
    for row, keep in zip(ids, mask, strict=True):
        source = row[keep.bool()][None]
        ours.append(output_ids(model.generate(input_ids=source, paper_decoding=True)[0]))
        theirs.append(engine.generate(source)[0])
    assert ours == theirs
    assert len({len(output) for output in ours}) > 2, ours


@pytest.mark.parametrize("quantization", ["int8", "int8_float32", "int8_bfloat16", "float16", "bfloat16"])
def test_quantized_exports_load_and_translate(tmp_path, quantization):
    model = randomized(tiny_model(seed=4, vocab_size=2000))
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    float32 = exported(model, tmp_path / "float32")
    engine = exported(model, tmp_path / quantization, quantization)
    # CTranslate2 quantizes the arrays it is given in place: the model's own weights must come out untouched.
    changed = [name for name, tensor in model.state_dict().items() if not torch.equal(tensor, before[name])]
    assert not changed, changed
    ids, mask = padded_batch(LENGTHS, vocab_size=61, seed=4)
    outputs = engine.generate(ids, mask, num_beams=4, max_new_tokens=8)
    assert [len(output) for output in outputs] and all(0 < len(output) <= 8 for output in outputs)
    smaller = (tmp_path / quantization / "model.bin").stat().st_size < (
        tmp_path / "float32" / "model.bin"
    ).stat().st_size
    assert smaller and float32.generate(ids, mask, max_new_tokens=8)


def test_the_shared_matrix_is_saved_once(tmp_path):
    """Section 3.4's one matrix (both embeddings and the pre-softmax linear) and the one sinusoid table (both stacks)
    are each stored once in model.bin: CTranslate2 aliases equal variables."""
    model = tiny_model(seed=5, vocab_size=4000)
    exported(model, tmp_path / "ct2")
    unique = sum(parameter.numel() for parameter in model.parameters())  # tied: counted once
    rows = json.loads((tmp_path / "ct2" / EXPORT_FILE).read_text())["position_rows"]
    expected = 4 * (unique + rows * model.config.d_model)
    size = (tmp_path / "ct2" / "model.bin").stat().st_size
    matrix = 4 * model.config.vocab_size * model.config.d_model
    assert expected <= size < expected + matrix // 4, (size, expected, matrix)


def test_what_the_export_cannot_express_is_refused(tmp_path):
    with pytest.raises(ExportError, match=r"d_k \(16\) differs from d_v \(8\)"):
        VaswaniConverter(tiny_model(d_k=16, d_v=8), NAMES)
    with pytest.raises(ExportError, match="activation_function 'relu6' has no CTranslate2 equivalent"):
        VaswaniConverter(tiny_model(activation_function="relu6"), NAMES)
    with pytest.raises(ExportError, match="the vocabulary has 60 tokens but the model's vocab_size is 61"):
        VaswaniConverter(tiny_model(), NAMES[:-1])


def test_positions_past_the_table_are_refused_before_ctranslate2_fails(tmp_path):
    model = tiny_model(position_embedding_type="learned", max_position_embeddings=16)
    engine = exported(model, tmp_path / "ct2")
    assert engine.position_rows == 16
    ids, mask = padded_batch([17], seed=6)
    with pytest.raises(ValueError, match=r"a source of 17 tokens is longer than the exported position table \(16"):
        engine.generate(ids, mask)
    with pytest.raises(ValueError, match=r"--max_input_tokens 20 is more than .* position table holds \(16 positions"):
        input_token_limit(engine, 20)
    ids, mask = padded_batch([16], seed=6)
    (output,) = engine.generate(ids, mask, num_beams=1)  # source + 50 would pass the table: decoding stops at it
    assert len(output) <= 16
    sinusoids = exported(tiny_model(max_position_embeddings=16), tmp_path / "sinusoids")
    assert sinusoids.position_rows == 16 + 50  # the paper's limit for the longest source the commands accept


# ---------------------------------------------------------------------------------------------------------------------
# The commands, on a model with a real tokenizer
# ---------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def export_folder(checkpoint, tmp_path_factory):
    """Exported by the script, as a user runs it; then the checkpoint is out of reach (moved)."""
    folder = tmp_path_factory.mktemp("export") / "ct2"
    result = subprocess.run(
        [*command("export_ctranslate2"), str(checkpoint), str(folder)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"exported {checkpoint} (float32) into {folder}" in result.stdout
    return folder


SENTENCES = ["A man rides a bike.", "Two dogs play in the snow.", "A girl."]


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_the_exported_folder_translates_on_its_own(checkpoint, export_folder, tmp_path):
    moved = tmp_path / "moved"
    shutil.copytree(export_folder, moved)
    engine, tokenizer = load_translator(str(moved))
    assert isinstance(engine, CTranslate2Model)
    model, checkpoint_tokenizer = load_translator(str(checkpoint))
    assert tokenizer.get_vocab() == checkpoint_tokenizer.get_vocab()
    # One sentence a batch: each its own source + 50 limit, which an untrained model reaches.
    ours = translate_sentences(model, tokenizer, SENTENCES, batch_size=1, progress=False)
    theirs = translate_sentences(engine, tokenizer, SENTENCES, batch_size=1, progress=False)
    assert ours == theirs


def test_translate_runs_an_exported_folder_with_the_usual_checks(export_folder, checkpoint, tmp_path, capsys):
    source = tmp_path / "input.en"
    source.write_text("\n".join(SENTENCES) + "\n")
    code, _, err = run_command(translate, [export_folder, "--input", source, "--output", tmp_path / "out.de"], capsys)
    assert code == 0, err
    assert len((tmp_path / "out.de").read_text().splitlines()) == 3
    code, _, err = run_command(translate, [export_folder, "--input", source, "--engine", "ctranslate2"], capsys)
    assert code == 0, err

    (tmp_path / "empty_line.en").write_text("A man.\n\nA dog.\n")  # refused one sentence a line, else kept empty
    argv = [export_folder, "--input", tmp_path / "empty_line.en", "--no_split_sentences"]
    code, _, err = run_command(translate, argv, capsys)
    assert code == 2 and "sentence 2 is empty" in err
    code, out, err = run_command(translate, [export_folder, "--input", tmp_path / "empty_line.en"], capsys)
    assert code == 0 and out.count("\n") == 3 and out.split("\n")[1] == "", err
    code, _, err = run_command(translate, [export_folder, "--input", source, "--output", source], capsys)
    assert code == 2 and "is also an input" in err
    code, _, err = run_command(translate, [export_folder, "--input", source, "--max_input_tokens", 2000], capsys)
    assert code == 2 and "more than the exported model's position table holds (1074 positions)" in err
    code, _, err = run_command(translate, [export_folder, "--input", source, "--engine", "pytorch"], capsys)
    assert code == 2 and "holds a CTranslate2 export (model.bin); run it with --engine ctranslate2" in err
    code, _, err = run_command(translate, [checkpoint, "--input", source, "--engine", "ctranslate2"], capsys)
    assert code == 2 and "holds no CTranslate2 model" in err


def test_evaluate_scores_an_exported_folder(export_folder, tmp_path, capsys):
    source, reference = tmp_path / "test.en", tmp_path / "test.de"
    source.write_text("\n".join(SENTENCES) + "\n")
    reference.write_text("Ein Mann fährt Rad.\nZwei Hunde spielen im Schnee.\nEin Mädchen.\n")
    arguments = [export_folder, "--source", source, "--reference", reference]
    code, out, err = run_command(evaluate, [*arguments, "--output", tmp_path / "hyp.de"], capsys)
    assert code == 0, err
    assert "sacreBLEU" in out and len((tmp_path / "hyp.de").read_text().splitlines()) == 3
    code, _, err = run_command(evaluate, [*arguments, "--output", reference], capsys)
    assert code == 2 and "is also an input" in err


def test_the_export_refuses_a_folder_holding_other_files(checkpoint, tmp_path, capsys):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    code, _, err = run_command(export_ctranslate2, [checkpoint, tmp_path / "taken"], capsys)
    assert code == 2 and "holds notes.txt, which vaswani-export-ctranslate2 did not write" in err
    code, _, err = run_command(export_ctranslate2, [checkpoint, tmp_path / "out", "--quantization", "int4"], capsys)
    assert code == 2 and "quantization 'int4' is unknown" in err


def test_without_ctranslate2_the_package_works_and_the_export_says_how_to_install_it(checkpoint, tmp_path):
    program = (
        "import sys; sys.modules['ctranslate2'] = None\n"  # what `import ctranslate2` does where it is not installed
        "import modeling_vaswani.toolkit.cli.translate, modeling_vaswani.toolkit.cli.evaluate\n"
        "from modeling_vaswani.toolkit.cli.export_ctranslate2 import main\n"
        f"main([{str(checkpoint)!r}, {str(tmp_path / 'out')!r}])\n"
    )
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "pip install modeling_vaswani[ctranslate2]" in result.stderr


def test_ctranslate2_scores_translations_as_pytorch_does(checkpoint, export_folder):
    """CTranslate2's score_batch behind `scoring.score` gives each token the log-probability PyTorch gives it."""
    engine, tokenizer = load_translator(str(export_folder))
    model, _ = load_translator(str(checkpoint))
    targets = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee und ein Mann schaut zu.", "Ein Mädchen."]
    ours = score(model, tokenizer, SENTENCES, targets, batch_size=2, progress=False)
    theirs = score(engine, tokenizer, SENTENCES, targets, batch_size=2, progress=False)
    for mine, its in zip(ours, theirs, strict=True):
        assert its.tokens == mine.tokens and its.tokens[-1] == "</s>"
        assert its.log_probs == pytest.approx(mine.log_probs, abs=1e-4)


def test_an_nbest_list_is_checked_once_and_a_direct_call_past_the_beam_is_refused(export_folder, monkeypatch):
    """translate_nbest's request is checked once, by its front end, and the engine runs it as checked (on 491cfca
    generate_nbest checked it a second time); a direct generate_nbest call, which no front end checked, is checked
    once by the request's own rule and refused past the beam, naming nbest and the beam."""
    engine, tokenizer = load_translator(str(export_folder))
    checks = counted_checks(monkeypatch)
    lists = translate_nbest(engine, tokenizer, SENTENCES[:2], 2, max_new_tokens=4, progress=False)
    assert checks == ["TranslationRequest"]
    batch = tokenizer(SENTENCES[:2], return_tensors="pt", padding=True)
    direct = engine.generate_nbest(batch.input_ids, batch.attention_mask, 2, max_new_tokens=4)
    assert checks == ["TranslationRequest"] * 2
    texts = [[tokenizer.decode(ids, skip_special_tokens=True) for ids, _ in row] for row in direct]
    assert texts == [[hypothesis.text for hypothesis in row] for row in lists]
    with pytest.raises(RequestError, match=r"^nbest=5 with num_beams=4; expected beam search") as refusal:
        engine.generate_nbest(batch.input_ids, batch.attention_mask, 5)  # the folder's beam
    assert refusal.value.field == "nbest" and engine.num_beams == 4
    with pytest.raises(RequestError, match=r"^nbest=1 with num_beams=1; expected beam search"):
        engine.generate_nbest(batch.input_ids, batch.attention_mask, 1, num_beams=1)  # no beam search: as requests


@pytest.mark.parametrize("paper_decoding", [False, True], ids=["stock", "paper"])
def test_nbest_lists_are_ours(tmp_path, paper_decoding):
    """The n best hypotheses and their scores: CTranslate2's (re-ranked by GNMT's penalty under the paper's decoding)
    are generate()'s."""
    model = randomized(tiny_model(seed=2, final_logits_bias=True), eos_bias=2.5)
    engine = exported(model, tmp_path / "ct2")
    ids, mask = padded_batch(LENGTHS, seed=2)
    settings = {"num_beams": 4, "max_new_tokens": 20}
    extra = {} if paper_decoding else {"early_stopping": True}
    ours = pytorch_nbest(model, {"input_ids": ids, "attention_mask": mask}, 3, paper_decoding, {**settings, **extra})
    theirs = engine.generate_nbest(ids, mask, 3, paper_decoding=paper_decoding, **settings)
    for our_row, their_row in zip(ours, theirs, strict=True):
        assert [output_ids(torch.tensor(sequence)) for sequence, _ in our_row] == [output for output, _ in their_row]
        assert [score for _, score in our_row] == pytest.approx([score for _, score in their_row], abs=1e-4)


@pytest.mark.parametrize("paper_decoding", [False, True], ids=["stock", "paper"])
def test_target_prefixes_start_the_hypotheses_and_scores_count_them(tmp_path, paper_decoding):
    """CTranslate2's target_prefix: every hypothesis starts with its row's prefix and is scored as generate() scores,
    log P(Y|X) of the whole translation over the length penalty (CTranslate2 leaves the prefix's log-probability out;
    the engine adds it back). Rows without a prefix decode as without any. Where the searches differ: CTranslate2
    does not end a translation right after its prefix, so its hypotheses for prefixed rows may be others."""
    model = randomized(tiny_model(seed=2, final_logits_bias=True), eos_bias=2.5)
    engine = exported(model, tmp_path / "ct2")
    ids, mask = padded_batch(LENGTHS, seed=2)
    prefixes = [[7, 8], [], [9], [10, 11, 12], [], [5]]
    settings = {"num_beams": 4, "max_new_tokens": 20}
    alone = engine.generate_nbest(ids, mask, 2, paper_decoding=paper_decoding, **settings)
    theirs = engine.generate_nbest(ids, mask, 2, paper_decoding=paper_decoding, target_prefix=prefixes, **settings)
    for row, (prefix, hypotheses) in enumerate(zip(prefixes, theirs, strict=True)):
        if not prefix:
            assert [output for output, _ in hypotheses] == [output for output, _ in alone[row]]
            assert [s for _, s in hypotheses] == pytest.approx([s for _, s in alone[row]], abs=1e-4)
        for output, hypothesis_score in hypotheses:
            assert output[: len(prefix)] == prefix
            n = len(output)
            penalty = ((5 + n) / 6) ** ALPHA if paper_decoding else n**ALPHA
            log_p = token_log_probs(model, ids[row][mask[row].bool()], output).sum().item()
            assert hypothesis_score == pytest.approx(log_p / penalty, abs=1e-4), (row, output)


@pytest.mark.parametrize("options", OTHER_OPTIONS, ids=lambda options: ",".join(options))
def test_generate_options_the_search_does_not_take_are_refused_by_name(export_folder, options):
    """As the onnxruntime engine's (the one check is ExportedModel's): before it, a TypeError from the call."""
    engine, tokenizer = load_translator(str(export_folder))
    other_options_are_refused(engine, tokenizer, SENTENCES[:2], options)
