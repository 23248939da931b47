"""Scoring given translations (evaluation/scoring.py, vaswani-score) against log-probabilities computed here one
target token at a time, each pair on its own."""

import functools
import math
import os

import pytest
import torch
from helpers.training_setup import run_command, tiny_checkpoint

from modeling_vaswani.toolkit.cli import score as score_command
from modeling_vaswani.toolkit.translation.engines import load_translator
from modeling_vaswani.toolkit.translation.scoring import SentenceScore, perplexity, score
from modeling_vaswani.toolkit.translation.translate import InputError

SOURCES = ["A man rides a bike.", "Two dogs play in the snow near a big red house.", "A girl.", "People walk."]
TARGETS = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee.", "Ein Mädchen singt ein Lied im Park.", "Leute."]


@torch.no_grad()
def one_token_at_a_time(model, tokenizer, source: str, target: str) -> list[float]:
    """log P of each target token (</s> last), each from a pass over the start token and the tokens before it alone."""
    source_ids = torch.tensor([tokenizer(source)["input_ids"]])
    target_ids = tokenizer(text_target=target)["input_ids"]
    assert target_ids[-1] == tokenizer.eos_token_id
    read = [model.config.decoder_start_token_id]
    log_probs = []
    for token in target_ids:
        logits = model(input_ids=source_ids, decoder_input_ids=torch.tensor([read])).logits[0, -1]
        log_probs.append(float(torch.log_softmax(logits.double(), dim=-1)[token]))
        read.append(token)
    return log_probs


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_each_token_scores_its_log_probability_given_the_source_and_the_tokens_before(loaded):
    model, tokenizer = loaded
    # Batches of 3 mix lengths: padding on both sides must change nothing.
    for scores in (
        score(model, tokenizer, SOURCES, TARGETS, batch_size=3, progress=False),
        score(model, tokenizer, SOURCES, TARGETS, max_tokens=30, progress=False),
        score(model, tokenizer, SOURCES, TARGETS, batch_size=1, progress=False),
    ):
        for source, target, scored in zip(SOURCES, TARGETS, scores, strict=True):
            expected = one_token_at_a_time(model, tokenizer, source, target)
            assert scored.log_probs == pytest.approx(expected, abs=1e-4)
            assert scored.tokens == tokenizer.convert_ids_to_tokens(tokenizer(text_target=target)["input_ids"])
            assert scored.tokens[-1] == "</s>"
            assert scored.total == pytest.approx(sum(expected), abs=1e-3)
            assert scored.mean == pytest.approx(sum(expected) / len(expected), abs=1e-4)


def test_perplexity_is_exp_of_the_mean_negative_log_probability_over_all_tokens():
    scores = [SentenceScore(["a", "</s>"], [-1.0, -2.0]), SentenceScore(["</s>"], [-0.5])]
    assert perplexity(scores) == pytest.approx(math.exp(3.5 / 3))


def test_bad_pairs_are_refused_before_any_is_scored(loaded):
    model, tokenizer = loaded
    with pytest.raises(ValueError, match="2 source sentences and 1 targets"):
        score(model, tokenizer, SOURCES[:2], TARGETS[:1], progress=False)
    with pytest.raises(InputError, match="target sentence 2 is empty; expected a translation to score"):
        score(model, tokenizer, SOURCES[:2], ["Ein Mann.", " "], progress=False)
    with pytest.raises(InputError, match="target sentence 1 is .* tokens long, more than the limit of 5"):
        score(model, tokenizer, ["A."], ["Ein Mann fährt ein rotes Fahrrad."], max_input_tokens=5, progress=False)
    with pytest.raises(InputError, match="more than --max_tokens 4"):
        score(model, tokenizer, ["A."], ["Ein Mann fährt ein rotes Fahrrad."], max_tokens=4, progress=False)
    with pytest.raises(ValueError, match="batch_size=0; expected an int of at least 1"):
        score(model, tokenizer, SOURCES, TARGETS, batch_size=0, progress=False)


run = functools.partial(run_command, score_command)  # run(argv, capsys)


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_the_command_writes_one_line_a_pair_in_input_order(checkpoint, loaded, tmp_path, capsys):
    model, tokenizer = loaded
    (tmp_path / "s.en").write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    (tmp_path / "t.de").write_text("\n".join(TARGETS) + "\n", encoding="utf-8")
    files = ["--source", tmp_path / "s.en", "--target", tmp_path / "t.de"]
    code, out, err = run([checkpoint, *files, "--per_token", "--max_tokens", 40], capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == len(SOURCES)
    all_log_probs = []
    for line, source, target in zip(lines, SOURCES, TARGETS, strict=True):
        total, mean, per_token, tokens = line.split("\t")
        expected = one_token_at_a_time(model, tokenizer, source, target)
        all_log_probs += expected
        assert float(total) == pytest.approx(sum(expected), abs=1e-3)
        assert float(mean) == pytest.approx(sum(expected) / len(expected), abs=1e-3)
        assert [float(p) for p in per_token.split()] == pytest.approx(expected, abs=1e-3)
        assert tokens.split() == tokenizer.convert_ids_to_tokens(tokenizer(text_target=target)["input_ids"])
    expected_perplexity = math.exp(-sum(all_log_probs) / len(all_log_probs))
    assert f"4 sentences, {len(all_log_probs)} target tokens, perplexity {expected_perplexity:.3f}" in err
    code, out, err = run([checkpoint, *files, "--output", tmp_path / "scores.tsv"], capsys)
    assert code == 0 and out == "", err
    written = (tmp_path / "scores.tsv").read_text(encoding="utf-8").splitlines()
    assert [line.split("\t") for line in written] == [line.split("\t")[:2] for line in lines]

    (tmp_path / "short.de").write_text("\n".join(TARGETS[:3]) + "\n", encoding="utf-8")
    code, out, err = run([checkpoint, "--source", tmp_path / "s.en", "--target", tmp_path / "short.de"], capsys)
    assert code == 2 and out == ""
    assert "vaswani-score: error: --source" in err and "has 4 lines but --target" in err and "has 3" in err
    code, _, err = run([checkpoint, *files, "--max_tokens", 0], capsys)
    assert code == 2 and "--max_tokens: expected a whole number >= 1, got '0'" in err


@torch.no_grad()
def next_token_log_probs(model, tokenizer, source: str, target: str) -> torch.Tensor:
    """log P over the vocabulary at each target position, each from a pass over the tokens before it alone."""
    source_ids = torch.tensor([tokenizer(source)["input_ids"]])
    read = [model.config.decoder_start_token_id]
    rows = []
    for token in tokenizer(text_target=target)["input_ids"]:
        logits = model(input_ids=source_ids, decoder_input_ids=torch.tensor([read])).logits[0, -1]
        rows.append(torch.log_softmax(logits.double(), dim=-1))
        read.append(token)
    return torch.stack(rows)


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_an_ensemble_scores_the_renormalized_mean_of_its_models_log_probabilities(loaded, tmp_path):
    model, tokenizer = loaded
    other, _ = load_translator(str(tiny_checkpoint(tmp_path / "seed1", seed=1)))  # the same tokenizer, other weights
    scores = score(model, tokenizer, SOURCES, TARGETS, batch_size=3, progress=False, ensemble=[other])
    for source, target, scored in zip(SOURCES, TARGETS, scores, strict=True):
        mean = (
            next_token_log_probs(model, tokenizer, source, target)
            + next_token_log_probs(other, tokenizer, source, target)
        ) / 2
        ids = torch.tensor(tokenizer(text_target=target)["input_ids"])
        expected = mean.log_softmax(-1).gather(-1, ids[:, None])[:, 0]
        assert scored.log_probs == pytest.approx(expected.tolist(), abs=1e-4)
        alone = one_token_at_a_time(model, tokenizer, source, target)
        assert scored.log_probs != pytest.approx(alone, abs=1e-3)  # the second model counts


def test_the_command_reads_pipes_as_files(checkpoint, loaded, tmp_path, capsys):
    """`<(command)` in a shell is a pipe named /dev/fd/N: read as a file is."""
    read, write = os.pipe()
    with os.fdopen(write, "w", encoding="utf-8") as pipe:
        pipe.write("\n".join(TARGETS) + "\n")
    (tmp_path / "s.en").write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    code, out, err = run([checkpoint, "--source", tmp_path / "s.en", "--target", f"/dev/fd/{read}"], capsys)
    os.close(read)
    assert code == 0, err
    assert len(out.splitlines()) == len(TARGETS)
    code, _, err = run([checkpoint, "--source", tmp_path, "--target", tmp_path / "s.en"], capsys)
    assert code == 2 and f"vaswani-score: error: {tmp_path}: is a folder; expected a file" in err
