"""The commands choose their threads (toolkit/threads.py) and warn of a collapsed model (translation/collapse.py): a
real untrained tiny checkpoint gives 20 different test2016 sentences one translation, and vaswani-translate and
vaswani-evaluate say so on standard error; the same model's translations made different by their target prefixes do
not warn. The commands run in this process (`main(argv)`) on real files."""

import pytest
import torch
from helpers.training_setup import run_command

from modeling_vaswani.toolkit.cli import evaluate, score, translate
from modeling_vaswani.toolkit.cli.arguments import chosen_threads
from modeling_vaswani.toolkit.data.corpora import multi30k_files, read_sentences
from modeling_vaswani.toolkit.threads import USER_SETTINGS, torch_threads

COLLAPSED = "got one and the same translation"


def written_test2016(folder, count: int = 20):
    """The first `count` lines of the shipped test2016, English and German, written into `folder`."""
    written = []
    for language, path in multi30k_files("test", languages=("en", "de")).items():
        written.append(folder / f"test.{language}")
        written[-1].write_text("\n".join(read_sentences(path)[:count]) + "\n", encoding="utf-8")
    return written


def test_translate_warns_when_most_inputs_got_one_translation(checkpoint, tmp_path, capsys):
    source, _ = written_test2016(tmp_path)
    output = tmp_path / "out.de"
    argv = [checkpoint, "--input", source, "--output", output, "--no_split_sentences", "--max_new_tokens", 8]
    code, _, err = run_command(translate, [*argv, "--threads", 1], capsys)
    translations = output.read_text(encoding="utf-8").splitlines()
    assert code == 0 and len(translations) == 20
    # The model's collapse, seen here without the rule: its most frequent translation is most of them.
    assert max(translations.count(each) for each in translations) > 10
    assert f"vaswani-translate: warning: 20 of 20 different inputs (100%) {COLLAPSED}" in err
    assert "Train it longer" in err and "measured faster" not in err  # --threads: nothing measured


def test_translate_does_not_warn_of_translations_that_differ(checkpoint, tmp_path, capsys):
    source, _ = written_test2016(tmp_path)
    prefixes = tmp_path / "prefixes.de"
    prefixes.write_text("".join(f"Satz {i}\n" for i in range(20)), encoding="utf-8")
    argv = [checkpoint, "--input", source, "--target_prefix", prefixes, "--no_split_sentences", "--threads", 1]
    code, out, err = run_command(translate, [*argv, "--max_new_tokens", 8], capsys)
    assert code == 0 and len(set(line[:40] for line in out.splitlines())) == 20
    assert COLLAPSED not in err


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-27): an untrained model runs to its length limit
def test_evaluate_warns_when_most_inputs_got_one_translation(checkpoint, tmp_path, capsys):
    source, reference = written_test2016(tmp_path)
    argv = [checkpoint, "--source", source, "--reference", reference, "--threads", 1]
    code, out, err = run_command(evaluate, argv, capsys)
    assert code == 0 and out.splitlines()[0].startswith("sacreBLEU ")
    assert f"vaswani-evaluate: warning: 20 of 20 different inputs (100%) {COLLAPSED}" in err


def test_a_command_measures_its_threads_unless_the_user_chose(checkpoint, tmp_path, capsys, monkeypatch):
    source, target = written_test2016(tmp_path, count=2)
    for setting in USER_SETTINGS:
        monkeypatch.delenv(setting, raising=False)
    with torch_threads(2):
        _, _, measured = run_command(score, [checkpoint, "--source", source, "--target", target], capsys)
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        _, _, fixed = run_command(score, [checkpoint, "--source", source, "--target", target], capsys)
        assert torch.get_num_threads() == 2  # the command's choice ends with it
    assert "vaswani-score: scoring on " in measured and "measured faster than" in measured
    assert "scoring on" not in fixed


def test_the_work_runs_on_the_count_chosen_and_torch_count_is_set_back(monkeypatch):
    for setting in USER_SETTINGS:
        monkeypatch.delenv(setting, raising=False)
    ran_on = []
    with torch_threads(2):
        with chosen_threads("vaswani-test", None, 1, "testing") as threads:
            ran_on.append(torch.get_num_threads())
        assert torch.get_num_threads() == 2
    assert ran_on == [1] and threads.reason == "--threads"
