"""benchmarks/quality.py shortened (4,000 training pairs, the fewest that fill the 8000-token vocabulary; 0.3 minutes
of training each; 10 sentences of each set): both runs are trained, stopped by the budget and scored, the baseline
is the stock model (configured as opus-mt checkpoints are) and tokenizer the issue names, and the table says what
the JSON holds. BLEU of so short a training is not asserted."""

import contextlib
import io
import json
import re
from pathlib import Path

import pytest
import quality
from transformers import AutoTokenizer, MarianMTModel

pytestmark = pytest.mark.slow  # trains both contenders in subprocesses

BUDGET_MINUTES = 0.3


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("quality")
    flags = ["--max_train_samples", "4000", "--max_eval_samples", "10", "--budget_minutes", str(BUDGET_MINUTES)]
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        report = quality.main([*flags, "--output_dir", str(output_dir)])
    return {"report": report, "printed": printed.getvalue(), "output_dir": output_dir}


def table_row(printed: str, label: str) -> list[str]:
    rows = [line for line in printed.splitlines() if line.startswith(f"| {label} |")]
    assert len(rows) == 1, (label, printed)
    return [cell.strip() for cell in rows[0].strip("|").split("|")][1:]


def test_table_has_both_runs_side_by_side(run):
    printed = run["printed"]
    assert "| ours (vaswani-train) | baseline (MarianMT + Seq2SeqTrainer) |" in printed
    for name in ("validation", "test2016"):
        for metric in ("sacreBLEU", "chrF2"):
            ours, baseline, difference = table_row(printed, f"{name} {metric}")
            assert 0 <= float(ours) <= 100 and 0 <= float(baseline) <= 100
            assert float(difference) == pytest.approx(float(ours) - float(baseline), abs=0.011)
        scores = run["report"]["ours"]["scores"][name]
        assert table_row(printed, f"{name} chrF2")[0] == f"{scores['chrf']:.2f}"
    ours, baseline, _ = table_row(printed, "steps reached")
    assert int(ours) > 0 and int(baseline) > 0
    ours, baseline, ratio = table_row(printed, "steps/s")
    assert float(ratio.lstrip("x")) == pytest.approx(float(ours) / float(baseline), rel=0.002, abs=0.001)
    assert all(float(minutes) >= BUDGET_MINUTES for minutes in table_row(printed, "training minutes")[:2])


def test_host_and_files(run):
    report, output_dir = run["report"], run["output_dir"]
    facts = quality.machine()
    assert f"Host: {facts['cpu']}" in run["printed"] and " ".join(facts["cpu_flags"]) in run["printed"]
    assert (output_dir / "quality.md").read_text() in run["printed"]
    saved = json.loads((output_dir / "quality.json").read_text())
    assert saved == json.loads(json.dumps(report))
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", saved["date"])
    assert saved["comparison"]["step_rate_ratio"] == pytest.approx(
        saved["ours"]["steps_per_second"] / saved["baseline"]["steps_per_second"]
    )
    for run_report in (saved["ours"], saved["baseline"]):
        assert set(run_report["scores"]) == {"validation", "test2016"}
        assert all("nrefs:1" in scores["signature"] for scores in run_report["scores"].values())
        for scores in run_report["scores"].values():
            assert scores["chrf_signature"].startswith("nrefs:1|case:mixed|eff:yes|nc:6|nw:0|")
            assert scores["ter_signature"].startswith("nrefs:1|case:lc|tok:tercom|")
    assert saved["comparison"]["chrf_difference"]["test2016"] == pytest.approx(
        saved["ours"]["scores"]["test2016"]["chrf"] - saved["baseline"]["scores"]["test2016"]["chrf"]
    )


def test_ours_is_the_default_job_scored_as_it_scores(run):
    ours = run["report"]["ours"]
    assert ours["command"][:2] == ["vaswani-train", "--output_dir"]
    assert ours["command"][3:5] == ["--max_train_minutes", str(BUDGET_MINUTES)]
    assert ours["model_dir"].endswith("averaged")
    # The job's own test2016 score, from its results.json, is what the benchmark's scoring of its model gives.
    assert ours["scores"]["test2016"]["sacrebleu"] == pytest.approx(ours["job_test2016"], abs=1e-6)
    results = json.loads((Path(ours["model_dir"]) / "results.json").read_text())
    assert ours["scores"]["test2016"]["chrf"] == pytest.approx(results["test"]["chrf"], abs=1e-6)


def test_baseline_is_stock_marian_with_a_byte_level_bpe(run):
    folder = run["report"]["baseline"]["model_dir"]
    model = MarianMTModel.from_pretrained(folder)
    config = model.config
    assert (config.d_model, config.encoder_layers, config.decoder_layers) == (256, 3, 3)
    assert (config.encoder_attention_heads, config.decoder_attention_heads) == (4, 4)
    assert (config.encoder_ffn_dim, config.decoder_ffn_dim) == (1024, 1024)
    assert config.scale_embedding is True  # as opus-mt checkpoints are configured
    shared = model.get_input_embeddings().weight
    assert model.model.encoder.embed_tokens.weight is shared and model.model.decoder.embed_tokens.weight is shared
    assert model.lm_head.weight is shared
    tokenizer = AutoTokenizer.from_pretrained(folder)
    backend = json.loads(tokenizer.backend_tokenizer.to_str())
    assert backend["model"]["type"] == "BPE" and backend["pre_tokenizer"]["type"] == "ByteLevel"
    assert len(tokenizer) == config.vocab_size == quality.BASELINE_VOCAB_SIZE
    ids = tokenizer("A man rides a bike.")["input_ids"]
    assert ids[-1] == tokenizer.eos_token_id == config.eos_token_id
    assert tokenizer.decode(ids, skip_special_tokens=True) == "A man rides a bike."


def test_the_budget_stopped_both_trainings(run):
    report = run["report"]
    state = json.loads((run["output_dir"] / "baseline" / "trainer_state.json").read_text())
    assert 0 < state["global_step"] == report["baseline"]["steps"] < state["max_steps"] == quality.BASELINE_MAX_STEPS
    assert 0 < report["ours"]["steps"] < report["ours"]["max_steps"]
    for side in ("ours", "baseline"):
        assert report[side]["training_minutes"] >= BUDGET_MINUTES and report[side]["stopped_by"] == "time budget"
    assert table_row(run["printed"], "stopped by")[:2] == ["time budget", "time budget"]
