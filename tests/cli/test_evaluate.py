"""What vaswani-evaluate reports: sacreBLEU, tokenized BLEU, chrF2 and TER, each with its signature, then all of
them as one JSON line; checked against sacrebleu run here on the translations the command wrote and the references.

The command runs in this process through its `main(argv)`, on a real tiny checkpoint with a real tokenizer.
"""

import json

import pytest
import sacrebleu
from helpers.training_setup import tiny_checkpoint

from modeling_vaswani.toolkit.cli import evaluate as evaluate_command

SOURCES = ["A man rides a bike.", "Two dogs play in the snow.", "A girl in a red dress.", "A dog runs."]
REFERENCES = ["Ein Mann fährt Rad.", "Zwei Hunde spielen im Schnee.", "Ein Mädchen in einem roten Kleid.", "Ein Hund."]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("tiny"))


def evaluate(checkpoint, references: list[str], folder, capsys) -> tuple[list[str], list[str]]:
    """vaswani-evaluate on SOURCES against `references`: the lines it printed, and the translations it wrote."""
    folder.mkdir()
    source, reference, output = folder / "source.en", folder / "reference.de", folder / "output.de"
    source.write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    reference.write_text("\n".join(references) + "\n", encoding="utf-8")
    arguments = [checkpoint, "--source", source, "--reference", reference, "--output", output, "--batch_size", 2]
    evaluate_command.main([str(argument) for argument in arguments])
    return capsys.readouterr().out.splitlines(), output.read_text(encoding="utf-8").split("\n")[:-1]


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_evaluate_prints_bleu_chrf_and_ter_with_their_signatures(checkpoint, tmp_path, capsys):
    # An untrained model shares next to nothing with real references (sacreBLEU 0, TER 100): for scores that
    # compare something, half the references are its own translations of those sentences.
    _, translations = evaluate(checkpoint, REFERENCES, tmp_path / "first", capsys)
    references = translations[:2] + REFERENCES[2:]
    printed, hypotheses = evaluate(checkpoint, references, tmp_path / "scored", capsys)
    assert hypotheses == translations and len(hypotheses) == len(SOURCES)

    metrics = {"sacreBLEU": sacrebleu.BLEU(), "chrF2": sacrebleu.CHRF(), "TER": sacrebleu.TER()}
    expected = {name: metric.corpus_score(hypotheses, [references]).score for name, metric in metrics.items()}
    signatures = {name: str(metric.get_signature()) for name, metric in metrics.items()}
    assert all(0 < score < 100 for score in expected.values()), expected

    # The score lines, in this order, last before the JSON line.
    *_, sacrebleu_line, tokenized_line, chrf_line, ter_line, json_line = printed
    assert sacrebleu_line == f"sacreBLEU {expected['sacreBLEU']:.2f} ({signatures['sacreBLEU']})"
    assert tokenized_line.startswith("tokenized BLEU ")
    assert chrf_line == f"chrF2 {expected['chrF2']:.2f} ({signatures['chrF2']})"
    assert ter_line == f"TER {expected['TER']:.2f} ({signatures['TER']})"
    scores = json.loads(json_line)
    for name, key, signature in (("sacreBLEU", "sacrebleu", "signature"), ("chrF2", "chrf", "chrf_signature"),
                                 ("TER", "ter", "ter_signature")):  # fmt: skip
        assert scores[key] == pytest.approx(expected[name]) and scores[signature] == signatures[name], name
    assert f"{scores['tokenized_bleu']:.2f} ({scores['tokenized_bleu_signature']})" in tokenized_line


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_token_batches_score_the_same_translations(checkpoint, tmp_path, capsys):
    """--max_tokens batches by padded source tokens; the translations are those of batches of sentences, in order."""
    _, by_sentences = evaluate(checkpoint, REFERENCES, tmp_path / "sentences", capsys)
    folder = tmp_path / "tokens"
    folder.mkdir()
    (folder / "source.en").write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    (folder / "reference.de").write_text("\n".join(REFERENCES) + "\n", encoding="utf-8")
    arguments = [checkpoint, "--source", folder / "source.en", "--reference", folder / "reference.de"]
    evaluate_command.main([str(a) for a in [*arguments, "--output", folder / "output.de", "--max_tokens", 20]])
    assert (folder / "output.de").read_text(encoding="utf-8").split("\n")[:-1] == by_sentences
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:
        evaluate_command.main([str(a) for a in [*arguments, "--max_tokens", 3]])
    assert refused.value.code == 2 and "more than --max_tokens 3" in capsys.readouterr().err
