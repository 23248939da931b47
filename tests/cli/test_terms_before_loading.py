"""vaswani-translate refuses, before any model loads (issue 51, items 15 and 16), terms that clash and a --source_lang
that is no language code, naming the file, line and phrase or the value. "Before any model loads" is shown with a
model folder whose weights are cut short: loading them would fail first, with another error."""

import functools
import logging
import shutil

import pytest
from helpers.refusals import refused
from helpers.training_setup import run_command

from modeling_vaswani.toolkit.cli import translate as translate_command
from modeling_vaswani.toolkit.data import sentences

run = functools.partial(run_command, translate_command)


@pytest.fixture(scope="module")
def damaged(checkpoint, tmp_path_factory):
    """The checkpoint with its weights cut to half: its tokenizer loads, its model does not."""
    folder = tmp_path_factory.mktemp("damaged") / "model"
    shutil.copytree(checkpoint, folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    return folder


def write(folder, name: str, text: str):
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def files(tmp_path):
    source = write(tmp_path, "in.en", "A man rides a bike.\nTwo dogs play in the snow.\nA girl sings.\n")
    return tmp_path, source


def test_a_phrase_to_avoid_inside_a_constraint_is_named_by_both_files_lines(damaged, files, capsys):
    folder, source = files
    constraints = write(folder, "c.txt", "\nHunde im Schnee\n\n")
    avoid = write(folder, "a.txt", "\nSpiel\tSchnee\n\n")
    error = refused(
        translate_command.main, [damaged, "--input", source, "--constraints", constraints, "--avoid", avoid], capsys
    )  # fmt: skip
    assert (
        f"--avoid {avoid}, line 2 holds 'Schnee', which 'Hunde im Schnee' holds, a phrase of --constraints "
        f"{constraints}, line 2 for the same input" in error
    )
    assert "safetensors" not in error and "[" not in error  # not the weights, no token ids


def test_a_phrase_to_avoid_inside_a_glossary_term_is_named_by_the_glossary_file(damaged, files, capsys):
    folder, source = files
    glossary = write(folder, "g.tsv", "girl\tdie Frau\n")
    avoid = write(folder, "a.txt", "\n\nFrau\n")
    argv = [damaged, "--input", source, "--glossary", glossary, "--avoid", avoid]
    error = refused(translate_command.main, argv, capsys)
    assert (
        f"--avoid {avoid}, line 3 holds 'Frau', which 'die Frau' holds, a target term of --glossary {glossary}"
        in error
    )


def test_constraints_for_a_line_of_two_sentences_or_none_are_refused_before_loading(damaged, files, capsys):
    folder, _ = files
    source = write(folder, "two.en", "A man rides. A dog runs.\n\n")
    for lines, said in (("Fahrrad\n\n", "line 1, which holds 2 sentences"), ("\nHund\n", "line 2, which is empty")):
        constraints = write(folder, "c.txt", lines)
        argv = [damaged, "--input", source, "--constraints", constraints, "--source_lang", "en"]
        error = refused(translate_command.main, argv, capsys)
        assert f"--constraints {constraints}, line" in error and said in error, error


@pytest.mark.parametrize("value", ["", " ", "../../etc/passwd", "English", "de/en"])
def test_a_source_lang_that_is_no_language_code_is_refused_before_loading(damaged, files, capsys, value):
    _, source = files
    error = refused(translate_command.main, [damaged, "--input", source, "--source_lang", value], capsys)
    assert f"--source_lang={value!r} is not a language code; expected an ISO 639 code" in error


def test_a_code_without_rules_is_said_once_and_the_lines_translated(checkpoint, files, capsys, caplog, monkeypatch):
    monkeypatch.setattr(sentences, "_told_borrowed", set())
    caplog.set_level(logging.WARNING, logger=sentences.__name__)
    _, source = files
    code, out, err = run([checkpoint, "--input", source, "--source_lang", "xx", "--max_new_tokens", "3"], capsys)
    assert code == 0, err
    assert len(out.splitlines()) == 3
    assert caplog.text.count("sentencex has no sentence rules of its own for 'xx'") == 1, caplog.text


@pytest.mark.parametrize("value", ["", "../../etc/passwd"])
def test_vaswani_serve_refuses_it_before_loading_too(damaged, capsys, value):
    from modeling_vaswani.toolkit.cli import serve as serve_command

    error = refused(serve_command.main, [damaged, "--source_lang", value], capsys)
    assert f"--source_lang={value!r} is not a language code" in error
