"""benchmarks/real_text.py, the real-text benchmark, and the token-budget batches of `translate` it measures.

The benchmark's quick run on a tiny checkpoint: each worker's translations are what the library's `translate` gives
in this process, its BLEU and chrF what sacreBLEU gives on them, its token counts what the tokenizer counts, and the
"differs from paper" column what comparing the lists by hand gives. No timing is asserted.
"""

import json
import subprocess
import sys

import pytest
import sacrebleu
import torch
from helpers.tiny_models import tiny_model
from helpers.training_setup import REPO, tiny_checkpoint
from speed import real_text
from speed.models import ctranslate2_unavailable
from transformers import AutoTokenizer

from modeling_vaswani.toolkit.checkpoints import load_model_and_tokenizer
from modeling_vaswani.toolkit.translation.translate import InputError, length_batches, translate

SCRIPT = REPO / "benchmarks" / "real_text.py"


def test_length_batches_follow_the_budget_longest_first():
    lengths = [3, 9, 4, 9, 2, 5]
    batches = length_batches(lengths, max_tokens=18)
    assert batches == [[1, 3], [5, 2, 0], [4]]  # 2 x 9, then 3 x 5 (a 4th would make 4 x 5 > 18), then the rest
    assert all(len(batch) * max(lengths[i] for i in batch) <= 18 for batch in batches)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))  # nothing dropped
    assert length_batches(lengths, batch_size=4) == [[1, 3, 5, 2], [0, 4]]
    assert length_batches(lengths, batch_size=2, max_tokens=100) == [[1, 3], [5, 2], [0, 4]]


def test_a_sentence_over_the_token_budget_is_refused_not_cut():
    with pytest.raises(InputError, match=r"sentence 2 is 9 tokens long, more than --max_tokens 8"):
        length_batches([3, 9, 4], max_tokens=8)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("tiny"))


SENTENCES = ["A man rides a bike.", "Two dogs play in the snow.", "A girl.", "People walk down a busy city street."]


def test_token_batches_translate_as_one_sentence_at_a_time(checkpoint):
    model, tokenizer = load_model_and_tokenizer(str(checkpoint))
    torch.manual_seed(0)
    alone = translate(model, tokenizer, SENTENCES, batch_size=1, progress=False)
    assert translate(model, tokenizer, SENTENCES, max_tokens=45, progress=False) == alone
    assert translate(model, tokenizer, SENTENCES, max_tokens=200, progress=False) == alone


def test_translate_refuses_a_bad_budget():
    model = tiny_model()
    with pytest.raises(ValueError, match=r"max_tokens=0; expected an int of at least 1"):
        translate(model, None, ["a"], max_tokens=0)


def test_batch_specifications_are_checked():
    assert real_text.check_batch("tokens:2000") == "tokens:2000"
    for bad in ("32", "sentence:4", "tokens:0", "tokens:x"):
        with pytest.raises(ValueError, match="expected sentences:N or tokens:N"):
            real_text.check_batch(bad)


def test_the_table_gives_chrf_beside_sacrebleu_in_a_column_of_its_own():
    group = ("test2016", "paragraphs", "beam", "sentences:3")
    measured = {
        (*group, engine): [
            {"sentences_per_s": speed, "tokens_per_s": 10 * speed, "target_tokens": 40, "sacrebleu": 30.25,
             "paragraph_sacrebleu": 31.5, "chrf": chrf, "translations": ["Ein Mann."]}
        ]
        for engine, speed, chrf in (("pytorch-paper", 2.0, 55.5), ("marian", 4.0, 54.1))
    }  # fmt: skip
    measured[(*group, "ct2-float32")] = [{"error": "no ctranslate2"}]
    report = real_text.build_report(measured, [group], ["pytorch-paper", "marian", "ct2-float32"], 1, "m", None, 1)
    assert [row.get("chrf") for row in report["rows"]] == [55.5, 54.1, None]
    lines = [line for line in real_text.format_table(report).splitlines() if line.startswith("|")]
    header, _, *rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    assert all(len(row) == len(header) for row in rows), lines  # an error row fills every column too
    cells = {row[4]: dict(zip(header, row, strict=True)) for row in rows}
    assert (cells["pytorch-paper"]["sacreBLEU"], cells["pytorch-paper"]["chrF2"]) == ("30.25", "55.50")
    assert (cells["marian"]["text"], cells["marian"]["sacreBLEU, 3 a paragraph"]) == ("paragraphs", "31.50")
    assert (cells["marian"]["chrF2"], cells["marian"]["paper ÷ engine"]) == ("54.10", "0.50x")


def test_the_command_needs_a_model_or_a_training_budget():
    result = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 2 and "--model FOLDER" in result.stderr


@pytest.mark.slow
@pytest.mark.skipif(ctranslate2_unavailable("cpu") is not None, reason="ctranslate2 is not installed")
def test_quick_run_reports_what_each_engine_translates(checkpoint, tmp_path):
    output = tmp_path / "report.json"
    command = [
        sys.executable, str(SCRIPT), "--model", str(checkpoint), "--test_sets", "test2016",
        "--engines", "pytorch-paper", "marian", "ct2-float32", "--decodings", "beam",
        "--batches", "tokens:200", "--sentences", "7", "--threads", "1", "--json", str(output),
        "--layouts", "lines", "paragraphs",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(output.read_text())
    every = {(row["layout"], row["batch"], row["engine"]): row for row in report["rows"]}
    assert set(every) == {
        (layout, b, e)
        for layout in ("lines", "paragraphs")
        for b in ("tokens:200",)
        for e in ("pytorch-paper", "marian", "ct2-float32")
    }
    assert all("error" not in row for row in every.values()), every
    rows = {(batch, engine): row for (layout, batch, engine), row in every.items() if layout == "lines"}

    sources, references = real_text.test_set("test2016", 7)
    model, tokenizer = load_model_and_tokenizer(str(checkpoint))
    expected = translate(model, tokenizer, sources, max_tokens=200, progress=False, num_beams=4, split_sentences=False)
    reference_tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
    for (batch, engine), row in rows.items():
        translations = row["translations"]
        assert len(translations) == 7
        if engine == "pytorch-paper":
            assert translations == expected, batch  # the worker translates as the library does here
        paper = rows[(batch, "pytorch-paper")]["translations"]
        assert row["differs_from_paper"] == sum(a != b for a, b in zip(translations, paper, strict=True))
        assert row["sacrebleu"] == pytest.approx(sacrebleu.corpus_bleu(translations, [references]).score, abs=1e-6)
        assert row["chrf"] == pytest.approx(sacrebleu.corpus_chrf(translations, [references]).score, abs=1e-6)
        counted = sum(len(reference_tokenizer(t, add_special_tokens=False)["input_ids"]) for t in translations)
        assert row["target_tokens"] == counted
        assert row["tokens_per_s"] / row["sentences_per_s"] == pytest.approx(counted / 7)
        assert row["paper_speed_ratio"] == pytest.approx(
            rows[(batch, "pytorch-paper")]["sentences_per_s"] / row["sentences_per_s"]
        )
    assert report["machine"]["cpu_flags"] is not None and report["threads"] == 1
    joined = [" ".join(sources[start : start + 3]) for start in range(0, 7, 3)]  # 3, 3 and 1 sentences
    joined_references = [" ".join(references[start : start + 3]) for start in range(0, 7, 3)]
    for (layout, _, _), row in every.items():
        translations = row["translations"]
        own_joined = translations if layout == "paragraphs" else [
            " ".join(translations[start : start + 3]) for start in range(0, 7, 3)
        ]  # fmt: skip
        assert row["paragraph_sacrebleu"] == pytest.approx(
            sacrebleu.corpus_bleu(own_joined, [joined_references]).score, abs=1e-6
        )
        if layout == "paragraphs":
            assert len(translations) == 3
            counted = sum(len(reference_tokenizer(t, add_special_tokens=False)["input_ids"]) for t in translations)
            assert row["tokens_per_s"] / row["sentences_per_s"] == pytest.approx(counted / 7)  # the set's sentences
    assert every[("paragraphs", "tokens:200", "pytorch-paper")]["translations"] == translate(
        model, tokenizer, joined, max_tokens=200, progress=False, num_beams=4, split_sentences=True
    )
    table = result.stdout
    assert "| test2016 | lines | beam | tokens:200 | ct2-float32 |" in table and "| chrF2 | paper ÷ engine" in table
    assert "| test2016 | paragraphs | beam | tokens:200 | ct2-float32 |" in table


def test_paragraphs_join_three_sentences_and_full_stops_end_only_the_unended():
    sentences = ["A man.", "A dog runs", "Why?", "Go!", "Two cats  "]
    assert real_text.paragraphs(sentences) == ["A man. A dog runs Why?", "Go! Two cats  "]
    assert real_text.with_full_stops(sentences) == ["A man.", "A dog runs.", "Why?", "Go!", "Two cats."]
