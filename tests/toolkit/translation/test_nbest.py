"""n-best lists (evaluation/translate.py's translate_nbest, vaswani-translate --nbest): each hypothesis's score is its
log-probability, summed here from the model's forward pass, over the length penalty the search ranked by."""

import pytest
import torch
from helpers.reference_search import random_model
from helpers.tiny_models import EOS, padded_batch
from helpers.training_setup import tiny_checkpoint

from modeling_vaswani.toolkit.cli import translate as translate_command
from modeling_vaswani.toolkit.translation.engines import load_translator
from modeling_vaswani.toolkit.translation.translate import pytorch_nbest, translate, translate_nbest

ALPHA = 0.6
LENGTHS = [7, 5, 9, 3, 12, 6]
LIMIT = 20  # max_new_tokens


def ending_model():
    """A random tiny model (helpers/reference_search.py's: never the pad or start token) whose logits favour </s>, so
    that hypotheses end at several lengths within a few steps."""
    model = random_model(seed=2)
    with torch.no_grad():
        model.lm_head.bias[EOS] = 3.0
    return model


def output_ids(row: list[int]) -> list[int]:
    """A returned sequence without its start token, up to its first </s>, or all of it where it reached the limit
    (this model never writes the pad token, so a row without </s> is a hypothesis of the limit's length)."""
    row = row[1:]
    if EOS not in row:
        assert len(row) == LIMIT, row
        return row
    return row[: row.index(EOS) + 1]


@torch.no_grad()
def log_probability(model, source: torch.Tensor, output: list[int]) -> float:
    decoder_input = torch.tensor([[model.config.decoder_start_token_id, *output[:-1]]])
    logits = model(input_ids=source[None], decoder_input_ids=decoder_input).logits[0].double()
    return float(logits.log_softmax(-1).gather(-1, torch.tensor(output)[:, None]).sum())


@pytest.mark.parametrize("paper_decoding", [True, False], ids=["paper", "stock"])
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_each_score_is_the_log_probability_over_the_length_penalty(paper_decoding):
    model = ending_model()
    ids, mask = padded_batch(LENGTHS, seed=2)
    settings = {"num_beams": 4, "length_penalty": ALPHA, "max_new_tokens": LIMIT}
    if not paper_decoding:
        settings["early_stopping"] = True
    rows = pytorch_nbest(model, {"input_ids": ids, "attention_mask": mask}, 3, paper_decoding, settings)
    best = model.generate(input_ids=ids, attention_mask=mask, paper_decoding=paper_decoding, **settings)
    lengths = set()
    for row, (hypotheses, first) in enumerate(zip(rows, best.tolist(), strict=True)):
        assert len(hypotheses) == 3
        outputs = [output_ids(sequence) for sequence, _ in hypotheses]
        assert outputs[0] == output_ids(first)  # the best is what generate() returns
        assert len({tuple(output) for output in outputs}) == 3
        scores = [score for _, score in hypotheses]
        assert scores == sorted(scores, reverse=True)
        for output, score in zip(outputs, scores, strict=True):
            n = len(output)  # |Y| counts </s>
            penalty = ((5 + n) / 6) ** ALPHA if paper_decoding else n**ALPHA  # GNMT's (Section 6.1), or |Y|^alpha
            source = ids[row][mask[row].bool()]
            assert score == pytest.approx(log_probability(model, source, output) / penalty, abs=1e-4)
            lengths.add(n)
    assert len(lengths) > 2, lengths  # hypotheses of several lengths: the penalty mattered


def test_bad_nbest_is_refused_before_any_work():
    model = ending_model()
    tokenizer = None  # never reached: the settings are refused first
    with pytest.raises(ValueError, match="nbest=5 with num_beams=4; expected beam search"):
        translate_nbest(model, tokenizer, ["a"], 5, num_beams=4)
    with pytest.raises(ValueError, match="nbest=1 with num_beams=1; expected beam search"):
        translate_nbest(model, tokenizer, ["a"], 1, num_beams=1)
    with pytest.raises(ValueError, match="nbest=0; expected an int of at least 1"):
        translate_nbest(model, tokenizer, ["a"], 0)


def test_the_command_writes_moses_nbest_lists_whose_first_is_the_translation(tmp_path, capsys):
    checkpoint = tiny_checkpoint(tmp_path / "tiny")
    model, tokenizer = load_translator(str(checkpoint))
    sentences = ["A man rides a bike.", "Two dogs play in the snow.", "A girl."]
    (tmp_path / "in.en").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    argv = [str(checkpoint), "--input", str(tmp_path / "in.en"), "--nbest", "3", "--max_new_tokens", "8"]
    translate_command.main(argv)
    # DeepSpeed, where installed, may announce its accelerator on this process's standard output when something first
    # imports it; the command's own process writes only the lists (checked through a pipe in test_translate_options).
    lines = [line for line in capsys.readouterr().out.splitlines() if " ||| " in line]
    assert len(lines) == 9
    fields = [line.split(" ||| ") for line in lines]
    assert [int(number) for number, _, _ in fields] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    firsts = [text for number, text, _ in fields[::3]]
    assert firsts == translate(model, tokenizer, sentences, max_new_tokens=8, progress=False)
    expected = translate_nbest(model, tokenizer, sentences, 3, max_new_tokens=8, progress=False)
    assert [float(score) for _, _, score in fields] == pytest.approx([h.score for n in expected for h in n], abs=1e-4)
