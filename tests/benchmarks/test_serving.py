"""benchmarks/serving.py, the load test of vaswani-serve, run as a user runs it on a tiny checkpoint: every request
answered, the translations those of the library's translate() in this process, both measurements over the same
requests, the concurrent one in fewer batches than requests. No timing is asserted."""

import json
import subprocess
import sys

import pytest
from helpers.training_setup import REPO, tiny_checkpoint
from speed import real_text

from modeling_vaswani.toolkit.checkpoints import load_model_and_tokenizer
from modeling_vaswani.toolkit.evaluation.translate import translate

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

SCRIPT = REPO / "benchmarks" / "serving.py"


@pytest.mark.slow  # a minute: the tiny untrained model's translations run to their length limit
def test_the_load_test_measures_the_servers_real_answers(tmp_path):
    checkpoint = tiny_checkpoint(tmp_path / "tiny")
    report_file = tmp_path / "serving.json"
    command = [sys.executable, str(SCRIPT), "--model", str(checkpoint), "--requests", "12", "--clients", "4"]
    result = subprocess.run(
        [*command, "--json", str(report_file)], capture_output=True, text=True, cwd=tmp_path, timeout=900
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(report_file.read_text())

    model, tokenizer = load_model_and_tokenizer(str(checkpoint))
    sentences, _ = real_text.test_set("test2016", 12)
    expected = translate(model, tokenizer, sentences, batch_size=1, progress=False)
    alone, together = report["one_client"], report["many_clients"]
    assert alone["translations"] == expected and together["translations"] == expected
    assert report["translations_differing"] == 0
    assert (alone["clients"], together["clients"]) == (1, 4)
    assert alone["requests"] == together["requests"] == 12 and alone["errors"] == together["errors"] == 0
    assert alone["batches"] == 12  # one client at a time: a batch a request
    assert together["batches"] < 12  # requests arriving together shared batches
    assert report["throughput_ratio"] == pytest.approx(together["requests_per_s"] / alone["requests_per_s"])
    assert "| 4 | 12 |" in result.stdout and "cpu_flags" in report["machine"]


def test_a_folder_without_a_checkpoint_is_refused(tmp_path):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--model", str(tmp_path)], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 2 and "no config.json" in result.stderr
