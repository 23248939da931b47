"""benchmarks/data_scale.py at a small N: the synthetic corpora look like WMT news by length, both formats load as the
job loads them, and every stage of the job's preparation reports its time and memory. Timing is not asserted."""

import json
import statistics
from itertools import islice

import data_scale
import pytest

from modeling_vaswani.toolkit.training.recipe import DataArguments, load_data

pytestmark = pytest.mark.slow  # prepares data and trains in subprocesses


def test_synthetic_pairs_have_wmt_like_lengths():
    pairs = list(islice(data_scale.synthetic_pairs(2000, seed=1), 2000))
    for side in range(2):
        words = statistics.mean(len(pair[side].split()) for pair in pairs)
        assert 20 <= words <= 35, words  # WMT14 En-De news: about 25-30 words a side
    assert pairs == list(data_scale.synthetic_pairs(2000, seed=1))  # seeded: the same corpus every run


def test_text_and_parquet_corpora_load_as_the_same_pairs(tmp_path):
    text = data_scale.write_corpus(120, tmp_path / "text", "text")
    parquet = data_scale.write_corpus(120, tmp_path / "parquet", "parquet", shard_pairs=50)
    assert len(list((parquet / "data").glob("train-*.parquet"))) == 3
    from_text = load_data(
        DataArguments(train_source_file=str(text / "train.en"), train_target_file=str(text / "train.de"))
    )
    from_parquet = load_data(DataArguments(dataset_name=str(parquet)))
    assert from_text["train"]["translation"] == from_parquet["train"]["translation"]
    assert len(from_text["train"]) == 120


# The whole benchmark on text at two sizes (the growth exponents); on parquet at one (its loading is the difference,
# and test_text_and_parquet_corpora_load_as_the_same_pairs holds it to text's pairs): half a run less in CI.
@pytest.mark.parametrize("form, counts", [("text", ("300", "600")), ("parquet", ("300",))])
def test_every_stage_is_measured(tmp_path, form, counts, capsys):
    output = tmp_path / "scale.json"
    flags = ["--vocab_size", "400", "--steps", "2", "--max_tokens", "300", "--model", "small"]
    data_scale.main(["--pairs", *counts, "--format", form, "--workdir", str(tmp_path), *flags, "--json", str(output)])
    report = json.loads(output.read_text())
    assert set(report["runs"]) == set(counts)
    for count, run in report["runs"].items():
        assert run["pairs_kept"] == int(count) and run["batches"] > 0
        for stage in data_scale.STAGES:
            assert run[stage]["seconds"] > 0 and run[stage]["peak_mib"] > 100, (count, stage)
    exponents = report["exponents"].values()
    assert all(isinstance(exponent, float) if len(counts) > 1 else exponent is None for exponent in exponents)
    # The second run is vaswani-train itself, which refuses to finish unless it reused the prepared tokenizer.
    assert set(report["reruns"]) == set(counts) and all(seconds > 0 for seconds in report["reruns"].values())
    assert report["machine"]["cpu_flags"] == data_scale.machine()["cpu_flags"]
    table = capsys.readouterr().out
    assert all(stage in table for stage in data_scale.STAGES) and "again" in table
    assert "exponent" in table


def test_growth_exponent_is_the_log_log_slope():
    runs = {n: {stage: {"seconds": 0.5 * n**1.5} for stage in data_scale.STAGES} for n in (10, 100, 1000)}
    assert data_scale.growth_exponents(runs)["load"] == pytest.approx(1.5)
    assert data_scale.growth_exponents({10: runs[10]})["load"] is None
