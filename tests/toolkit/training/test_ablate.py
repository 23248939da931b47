"""vaswani-ablate: lines of Table 3 trained as changes to a preset, with one budget, scored with Table 3's columns.

References: Table 3's own configurations (VaswaniConfig.table3), models built here with the shapes each line must
have, the dev perplexity recomputed here sentence by sentence from each saved model, and the saved training arguments.
"""

import json
import math
from functools import partial

import pytest
import sacrebleu
import torch
from transformers import AutoTokenizer

from modeling_vaswani import VaswaniConfig, VaswaniForConditionalGeneration
from modeling_vaswani.configuration_vaswani import TABLE_3
from modeling_vaswani.toolkit.cli.ablate import main
from modeling_vaswani.toolkit.data.corpora import load_multi30k
from modeling_vaswani.toolkit.evaluation.metrics import bleu
from modeling_vaswani.toolkit.training import ablation
from modeling_vaswani.toolkit.training.ablation import check_lines, line_config, parse_line
from modeling_vaswani.toolkit.training.presets import PRESETS
from modeling_vaswani.toolkit.translation.translate import translate

STEPS, DEV = 4, 8
SMALL = {"d_model": 256, "encoder_layers": 3, "decoder_layers": 3, "num_heads": 4, "d_ff": 1024}
# What each requested line must be on the small preset (the docstring of toolkit/training/ablation.py); its eps_ls.
ROWS = {
    "base": ({}, 0.1),
    "B:d_k=32": ({"d_k": 32, "d_v": 64}, 0.1),  # d_k halved, d_v kept
    "D:eps_ls=0.0": ({}, 0.0),  # the base model, trained without label smoothing
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("ablation")
    main(
        ["--rows", *ROWS, "--output_dir", str(output_dir), "--max_steps", str(STEPS), "--warmup_steps", "2",
         "--max_tokens", "500", "--max_train_samples", "300", "--vocab_size", "1000", "--max_eval_samples", str(DEV),
         "--report_to", "none", "--disable_tqdm", "true"]
    )  # fmt: skip
    return output_dir


def table(run) -> dict[str, dict[str, str]]:
    """ablation.md's table: row name -> column -> cell."""
    lines = [line for line in (run / "ablation.md").read_text().splitlines() if line.startswith("|")]
    header, _, *rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    return {cells[0]: dict(zip(header, cells, strict=True)) for cells in rows}


def test_a_row_per_line_a_folder_per_row_and_a_figure(run):
    assert list(table(run)) == list(ROWS)
    for result in json.loads((run / "ablation.json").read_text()):
        assert (run / result["folder"] / "model.safetensors").is_file()
        assert not list((run / result["folder"]).glob("checkpoint-*"))  # Table 3: the last model, no averaging
    png = (run / "ablation.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000


def test_parameters_are_those_of_the_lines_built_here(run):
    tokenizer = AutoTokenizer.from_pretrained(run / "tokenizer")
    for row, (shapes, _) in ROWS.items():
        saved = VaswaniConfig.from_pretrained(run / row.replace(":", "_"))
        for name, value in {**SMALL, **shapes}.items():
            assert getattr(saved, name) == value, (row, name)
        with torch.device("meta"):
            model = VaswaniForConditionalGeneration(VaswaniConfig(vocab_size=len(tokenizer), **{**SMALL, **shapes}))
        expected = sum(parameter.numel() for parameter in model.parameters())
        assert table(run)[row]["params"] == f"{expected:,}", row


def test_perplexity_is_exp_of_the_dev_nll_recomputed_from_the_saved_model(run):
    """Plain NLL per target token (</s> included), one sentence at a time: no label smoothing, no padding."""
    tokenizer = AutoTokenizer.from_pretrained(run / "tokenizer")
    pairs = load_multi30k("validation").select(range(DEV))["translation"]
    results = {result["row"]: result for result in json.loads((run / "ablation.json").read_text())}
    for row in ROWS:
        model = VaswaniForConditionalGeneration.from_pretrained(run / results[row]["folder"]).eval()
        nll, tokens = 0.0, 0
        for pair in pairs:
            source = tokenizer(pair["en"], return_tensors="pt").input_ids
            labels = tokenizer(text_target=pair["de"])["input_ids"]
            decoder_input = torch.tensor([[model.config.decoder_start_token_id, *labels[:-1]]])
            with torch.no_grad():
                logits = model(input_ids=source, decoder_input_ids=decoder_input).logits[0]
            nll -= torch.log_softmax(logits.double(), dim=-1)[range(len(labels)), labels].sum().item()
            tokens += len(labels)
        assert results[row]["dev_tokens"] == tokens
        assert results[row]["dev_perplexity"] == pytest.approx(math.exp(nll / tokens), rel=1e-4), row
        assert table(run)[row]["dev PPL"] == f"{results[row]['dev_perplexity']:.2f}"


def test_bleu_is_the_papers_decoding_of_the_saved_model(run):
    tokenizer = AutoTokenizer.from_pretrained(run / "tokenizer")
    pairs = load_multi30k("validation").select(range(DEV))["translation"]
    model = VaswaniForConditionalGeneration.from_pretrained(run / "B_d_k=32").eval()
    hypotheses = translate(model, tokenizer, [pair["en"] for pair in pairs], paper_decoding=True, progress=False)
    assert (run / "B_d_k=32" / "validation.hyp.de").read_text().splitlines() == hypotheses
    scores = bleu(hypotheses, [pair["de"] for pair in pairs])
    assert table(run)["B:d_k=32"]["dev BLEU"] == f"{scores['tokenized_bleu']:.2f}"
    assert table(run)["B:d_k=32"]["dev sacreBLEU"] == f"{scores['sacrebleu']:.2f}"
    # Beside BLEU in its results.json, chrF and TER as sacrebleu computes them on the same translations.
    results = json.loads((run / "B_d_k=32" / "results.json").read_text())
    references = [pair["de"] for pair in pairs]
    for name, metric in (("chrf", sacrebleu.CHRF()), ("ter", sacrebleu.TER())):
        assert results[f"dev_{name}"] == pytest.approx(metric.corpus_score(hypotheses, [references]).score), name
        assert results[f"{name}_signature"] == str(metric.get_signature())


def test_every_row_has_the_same_budget_and_tokenizer_and_its_own_eps_ls(run):
    shared = json.loads((run / "tokenizer" / "tokenizer.json").read_text())["model"]  # vocabulary and merges
    for row, (_, eps_ls) in ROWS.items():
        folder = run / row.replace(":", "_")
        arguments = torch.load(folder / "training_args.bin", weights_only=False)
        assert (arguments.max_steps, arguments.max_train_minutes, arguments.max_tokens) == (STEPS, None, 500), row
        assert arguments.label_smoothing_factor == eps_ls, row  # row D's eps_ls reaches the Trainer
        assert json.loads((folder / "results.json").read_text())["steps"] == STEPS
        assert table(run)[row]["steps"] == str(STEPS) and table(run)[row]["eps_ls"] == str(eps_ls)
        assert json.loads((folder / "tokenizer.json").read_text())["model"] == shared


# === Lines of Table 3 on presets =====================================================================================


def spec(row: str, values: dict) -> str:
    return ":".join([row, ",".join(f"{name}={value}" for name, value in values.items())]).rstrip(":")


@pytest.mark.parametrize(
    "row, values", [(row, line) for row, lines in TABLE_3.items() for line in lines], ids=lambda x: str(x)
)
def test_lines_on_the_base_preset_are_table_3s(row, values):
    values = {name: value for name, value in values.items() if name != "max_steps"}  # the budget, not a change
    config = line_config(parse_line(spec(row, values)), "base")
    assert config.to_dict() == VaswaniConfig.table3(row, **values).to_dict()


@pytest.mark.parametrize(
    "name, expected",
    [
        ("A:h=1", {"num_heads": 1, "d_k": 256, "d_v": 256}),
        ("A:h=32", {"num_heads": 32, "d_k": 8, "d_v": 8}),
        ("B:d_k=16", {"d_k": 16, "d_v": 64}),
        ("C:N=2", {"encoder_layers": 1, "decoder_layers": 1}),  # a third of the preset's 3
        ("C:N=8", {"encoder_layers": 4, "decoder_layers": 4}),
        ("C:d_model=256", {"d_model": 128, "d_k": 32, "d_v": 32}),  # half the width, h kept
        ("C:d_model=1024", {"d_model": 512, "d_k": 128, "d_v": 128}),
        ("C:d_ff=4096", {"d_ff": 2048}),
        ("D:P_drop=0.2", {"dropout": 0.2}),
        ("E", {"position_embedding_type": "learned"}),
        ("big", {"d_model": 512, "d_ff": 2048, "num_heads": 8, "d_k": 64, "d_v": 64, "dropout": 0.3}),
    ],
)
def test_lines_on_the_small_preset(name, expected):
    config = line_config(parse_line(name), "small")
    small = {**SMALL, "d_k": 64, "d_v": 64, "dropout": 0.1, "position_embedding_type": "sinusoidal"}
    assert {field: getattr(config, field) for field in small} == {**small, **expected}


def test_every_line_has_the_papers_dropout_whatever_the_presets():
    assert PRESETS["small"]["config"]().dropout == 0.0  # the small preset's own, for its half-hour budget
    assert line_config(parse_line("base"), "small").dropout == 0.1  # Table 3's base
    assert line_config(parse_line("base"), "small", dropout=0.25).dropout == 0.25  # --dropout replaces base's
    assert line_config(parse_line("D:P_drop=0.0"), "small", dropout=0.25).dropout == 0.0  # (D) as written


def test_a_ratio_that_gives_no_whole_number_is_refused(monkeypatch):
    monkeypatch.setitem(PRESETS, "five", {"config": partial(VaswaniConfig.base, encoder_layers=5, decoder_layers=5)})
    with pytest.raises(ValueError, match=r"row 'C:N=2': encoder_layers 2 is 2/6 of base's.* 5 .* 1\.66667"):
        check_lines(["C:N=2"], "five", None, 0.1)


@pytest.mark.parametrize(
    "arguments, words",
    [
        (["--rows", "F"], ["row 'F'", "Table 3 has no row 'F'"]),
        (["--rows", "base", "A:h"], ["row 'A:h'", "'h' is no NAME=VALUE", "A:h=1"]),
        (["--rows", "A:heads=1"], ["row 'A:heads=1'", "'heads' is no column of Table 3", "P_drop"]),
        (["--rows", "B:d_k=64"], ["row 'B:d_k=64'", "d_k=64", "d_k=16 | d_k=32", "none"]),
        (["--rows", "big:max_steps=300000"], ["'max_steps' is no column", "--max_steps"]),
        (["--rows", "A:h=1", "A:num_heads=1"], ["'A:h=1' and 'A:num_heads=1'", "same model"]),
        (["--rows", "base", "A:h=4"], ["'base' and 'A:h=4'", "small preset"]),
        (["--rows", "base", "--preset", "huge"], ["unknown preset 'huge'", "small"]),
        (["--rows", "base", "--model_name_or_path", "x"], ["--model_name_or_path x", "from scratch"]),
        (["--rows", "base", "--average_last_checkpoints", "5"], ["--average_last_checkpoints 5", "averaging"]),
        (["--rows", "base", "--no_paper_decoding"], ["--no_paper_decoding", "beam search"]),
    ],
)
def test_refused_before_any_data_is_loaded(arguments, words, monkeypatch, tmp_path):
    monkeypatch.setattr(ablation, "load_data", lambda *_: pytest.fail("data loaded before the refusal"))
    with pytest.raises(ValueError) as error:
        ablation.train_and_score_lines(*ablation.parse_arguments([*arguments, "--output_dir", str(tmp_path)]))
    for word in words:
        assert word in str(error.value)


def test_data_without_a_dev_set_is_refused(tmp_path):
    for language in ("en", "de"):
        (tmp_path / f"train.{language}").write_text("a b c\n")
    files = ["--train_source_file", str(tmp_path / "train.en"), "--train_target_file", str(tmp_path / "train.de")]
    with pytest.raises(ValueError, match="no 'validation' split to score.*Table 3 scores a dev set"):
        ablation.train_and_score_lines(
            *ablation.parse_arguments(["--rows", "base", "--output_dir", str(tmp_path / "run"), *files])
        )
