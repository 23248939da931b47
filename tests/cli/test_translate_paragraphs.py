"""vaswani-translate on paragraphs: a file, standard input redirected from a file, and a real pipe (streaming) give
one output line per input line, each the translations of its sentences translated one a line, joined with the line's
own spacing; empty lines stay empty; --no_split_sentences keeps the one-sentence-a-line behaviour; errors name the line
and the sentence's first words; the splitter's language comes from --source_lang, results.json or the tokenizer."""

import functools
import json
import select
import shutil
import subprocess

import pytest
from helpers.paragraphs import joined, paragraphs
from helpers.refusals import refused
from helpers.training_setup import command, run_command

from modeling_vaswani.toolkit.cli import translate as translate_command
from modeling_vaswani.toolkit.texts import one_line
from modeling_vaswani.toolkit.translation.alignment import parse_pharaoh, pharaoh, translate_aligned
from modeling_vaswani.toolkit.translation.engines import load_translator
from modeling_vaswani.toolkit.translation.translate import translate

OPTIONS = ["--max_new_tokens", "6"]
LONG = " ".join(["word"] * 80) + "."  # one sentence of more than 64 tokens
run = functools.partial(run_command, translate_command)  # run(argv, capsys)


@pytest.fixture(scope="module")
def loaded(checkpoint):
    return load_translator(str(checkpoint))


def one_a_line(loaded, sentences: list[str]) -> list[str]:
    """The reference: each sentence translated whole, one a line, in batches of one, as written to a file."""
    model, tokenizer = loaded
    found = translate(
        model, tokenizer, sentences, batch_size=1, split_sentences=False, max_new_tokens=6, progress=False
    )
    return [one_line(text) for text in found]  # as write_lines writes a generated line break


@pytest.fixture(scope="module")
def document(loaded):
    """Input lines (paragraphs, an empty and a blank line) and the output lines expected for them."""
    made = paragraphs(10, most=3, seed=1)
    lines = [joined(sentences, spacing) for sentences, spacing in made]
    references = iter(one_a_line(loaded, [sentence for sentences, _ in made for sentence in sentences]))
    expected = [joined([next(references) for _ in sentences], spacing) for sentences, spacing in made]
    lines[2:2], expected[2:2] = ["", " \t "], ["", ""]
    assert any(len(sentences) > 1 for sentences, _ in made)
    return lines, expected


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_a_file_gives_one_line_per_line_each_its_sentences_joined(checkpoint, document, tmp_path, capsys):
    lines, expected = document
    source, output = tmp_path / "in.en", tmp_path / "out.de"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, _, err = run([checkpoint, "--input", source, "--output", output, *OPTIONS], capsys)
    assert code == 0, err
    assert output.read_text(encoding="utf-8").split("\n") == [*expected, ""]
    # Standard input redirected from the file: read whole, the same lines.
    with source.open("rb") as stdin:
        result = subprocess.run(
            [*command("translate"), str(checkpoint), *OPTIONS], stdin=stdin, capture_output=True, timeout=300
        )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode("utf-8").split("\n") == [*expected, ""]


def read_line(process, timeout: float = 120.0) -> str:
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, f"no line within {timeout} s while the input was still open"
    return process.stdout.readline().decode("utf-8").removesuffix("\n")


def answered_in_a_pipe(checkpoint, lines: list[str], expected: list[str], *flags) -> None:
    """vaswani-translate reading a real pipe answers each line with its expected output line while the pipe is
    still open, and ends cleanly when it closes."""
    process = subprocess.Popen(
        [*command("translate"), str(checkpoint), *OPTIONS, *flags],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        for line, translation in zip(lines, expected, strict=True):
            process.stdin.write(line.encode("utf-8") + b"\n")
            process.stdin.flush()
            assert read_line(process) == translation, line
        process.stdin.close()
        assert process.wait(timeout=120) == 0, process.stderr.read().decode()
        assert process.stdout.read() == b""
    finally:
        process.kill()


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_a_pipe_answers_each_line_while_its_input_is_open(checkpoint, document):
    lines, expected = document
    answered_in_a_pipe(checkpoint, lines, expected)  # empty lines too: answered by an empty line


def test_no_split_sentences_translates_each_line_whole_and_refuses_an_empty_one(checkpoint, loaded, tmp_path, capsys):
    source = tmp_path / "in.en"
    line = "A man rides a bike.  Two dogs play in the snow."
    source.write_text(f"{line}\nA girl.\n", encoding="utf-8")
    code, out, err = run([checkpoint, "--input", source, "--no_split_sentences", *OPTIONS], capsys)
    assert code == 0, err
    assert out.split("\n") == [*one_a_line(loaded, [line, "A girl."]), ""]
    code, out, _ = run([checkpoint, "--input", source, *OPTIONS], capsys)
    # Split: the two sentences translated apart, and the two spaces between them kept.
    assert out.split("\n")[0] == "  ".join(one_a_line(loaded, ["A man rides a bike.", "Two dogs play in the snow."]))
    source.write_text("A man.\n\nA dog.\n", encoding="utf-8")
    code, out, err = run([checkpoint, "--input", source, "--no_split_sentences", *OPTIONS], capsys)
    assert code == 2 and out == ""
    assert f"{source}, one sentence a line: sentence 2 is empty; expected text to translate" in err
    code, _, err = run([checkpoint, "--input", source, "--no_split_sentences", "--source_lang", "de"], capsys)
    expected = (
        "--source_lang de chooses how texts are split into sentences; drop --source_lang or --no_split_sentences"
    )
    assert code == 2 and expected in err


def test_a_sentence_over_the_limit_is_refused_by_its_line_and_first_words(checkpoint, tmp_path, capsys):
    source = tmp_path / "in.en"
    source.write_text(f"A man sleeps.\n\nA dog runs. {LONG}\n", encoding="utf-8")
    code, out, err = run([checkpoint, "--input", source, "--max_input_tokens", 64, *OPTIONS], capsys)
    assert code == 2 and out == ""
    assert f"{source}: line 3, sentence 2 ('word word word word ...') is " in err
    assert "more than the limit of 64 (max_input_tokens; 1 sentence(s) over it, in lines [3])" in err


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_a_stream_answers_the_lines_before_a_bad_one(checkpoint, loaded):
    """In one write, so that one read returns the good lines and the bad one together; then a bad line arriving in a
    later read is named by its number in the whole input."""
    good = ["A man sleeps.  A dog runs.", "", "A girl sings."]
    first = one_a_line(loaded, ["A man sleeps.", "A dog runs."])
    expected = [f"{first[0]}  {first[1]}", "", *one_a_line(loaded, good[2:])]
    data = "".join(line + "\n" for line in [*good, f"A cat. {LONG}", "A bird."]).encode()
    arguments = [*command("translate"), str(checkpoint), "--max_input_tokens", "64", *OPTIONS]
    result = subprocess.run(arguments, input=data, capture_output=True, timeout=300)
    assert result.returncode == 2, result.stderr.decode()
    assert result.stdout.decode().split("\n") == [*expected, ""]
    assert "standard input: line 4, sentence 2 ('word word word word ...') is" in result.stderr.decode()

    process = subprocess.Popen(arguments, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        for line in good:
            process.stdin.write(line.encode() + b"\n")
            process.stdin.flush()
            read_line(process)
        process.stdin.write(f"{LONG} A cat.\n".encode())
        process.stdin.close()
        assert process.wait(timeout=120) == 2
        error = process.stderr.read().decode()
        assert "standard input: line 4, sentence 1 ('word word word word ...') is" in error, error
    finally:
        process.kill()


def test_nbest_lists_number_lines_and_refuse_a_paragraph(checkpoint, loaded, tmp_path, capsys):
    source = tmp_path / "in.en"
    source.write_text("A man rides a bike.\n\nTwo dogs play.\n", encoding="utf-8")
    code, out, err = run([checkpoint, "--input", source, "--nbest", 2, "--max_new_tokens", 4], capsys)
    assert code == 0, err
    assert [line.split(" ||| ")[0] for line in out.splitlines()] == ["0", "0", "2", "2"]  # line 2 is empty
    source.write_text("A man rides a bike.\nTwo dogs play. A cat sits.\n", encoding="utf-8")
    code, out, err = run([checkpoint, "--input", source, "--nbest", 2, "--max_new_tokens", 4], capsys)
    assert code == 2 and out == ""
    assert "line 2 holds 2 sentences (line 2, sentence 1 ('Two dogs play.') and 1 more)" in err
    assert "--no_split_sentences" in err
    argv = [checkpoint, "--input", source, "--nbest", 2, "--max_new_tokens", 4, "--no_split_sentences"]
    code, out, err = run(argv, capsys)
    assert code == 0 and [line.split(" ||| ")[0] for line in out.splitlines()] == ["0", "0", "1", "1"], err


GERMAN = "Das ist die sog. Lösung. Gut."  # German rules cut once, generic ones twice ("sog." ends nothing)


def test_the_language_comes_from_the_flag_then_results_json_then_the_tokenizer(checkpoint, loaded, tmp_path, capsys):
    german = " ".join(one_a_line(loaded, ["Das ist die sog. Lösung.", "Gut."]))
    generic = " ".join(one_a_line(loaded, ["Das ist die sog.", "Lösung.", "Gut."]))
    assert german != generic, "the two cuts must translate differently for the test to mean anything"
    source = tmp_path / "in.de"
    source.write_text(GERMAN + "\n", encoding="utf-8")

    def translated(model, *flags) -> str:
        code, out, err = run([model, "--input", source, *OPTIONS, *flags], capsys)
        assert code == 0, err
        return out.rstrip("\n")

    assert translated(checkpoint) == generic  # nothing recorded: generic rules
    assert translated(checkpoint, "--source_lang", "de") == german
    with_results = shutil.copytree(checkpoint, tmp_path / "with_results")
    results = {"test": {}, "test_set": {"source_lang": "de", "target_lang": "en"}}
    (with_results / "results.json").write_text(json.dumps(results))
    assert translated(with_results) == german
    assert translated(with_results, "--source_lang", "en") == generic  # the flag first
    recorded = shutil.copytree(checkpoint, tmp_path / "recorded")
    config = json.loads((recorded / "tokenizer_config.json").read_text())
    (recorded / "tokenizer_config.json").write_text(json.dumps({**config, "source_lang": "de"}))
    assert translated(recorded) == german
    (recorded / "results.json").write_text(json.dumps({**results, "test_set": {"source_lang": "en"}}))
    assert translated(recorded) == generic  # results.json before the tokenizer


# ---- --alignments: "translation ||| 0-0 1-2 ...", words of the input line and of the output line --------------------


def aligned_lines(loaded, lines: list[str]) -> list[str]:
    """The reference: the library's translations and alignments (tests/toolkit/translation/test_translate_aligned.py
    checks them against each sentence aligned alone), as Marian's --alignment writes them."""
    model, tokenizer = loaded
    found = translate_aligned(model, tokenizer, lines, max_new_tokens=6, progress=False)
    return [f"{line.text.replace(chr(10), ' ')} ||| {pharaoh(line.alignment)}" for line in found]


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_alignments_follow_each_line_from_a_file_and_a_pipe(checkpoint, loaded, document, tmp_path, capsys):
    lines, expected = document
    wanted = aligned_lines(loaded, lines)
    assert [line.rpartition(" ||| ")[0] for line in wanted] == expected  # the translations, as without the flag
    assert sum(len(line.rpartition(" ||| ")[2].split()) for line in wanted) > 10
    for line, output in zip(lines, wanted, strict=True):  # each pair names a word of the line and of its translation
        text, _, links = output.rpartition(" ||| ")
        assert all(s < len(line.split()) and t < len(text.split()) for s, t in parse_pharaoh(links))
    source, output = tmp_path / "in.en", tmp_path / "out.de"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, _, err = run([checkpoint, "--input", source, "--output", output, "--alignments", *OPTIONS], capsys)
    assert code == 0, err
    assert output.read_text(encoding="utf-8").split("\n") == [*wanted, ""]
    answered_in_a_pipe(checkpoint, lines, wanted, "--alignments")  # an empty line too: " ||| "


def test_alignments_are_refused_before_any_work_where_they_cannot_be_made(checkpoint, source, tmp_path, capsys):
    argv = [checkpoint, "--input", source, "--alignments", "--nbest", 2]
    error = refused(translate_command.main, argv, capsys, one_line=False)  # argparse's usage, then the line
    # Worded by the request's one check (translation/request.py), which names both flags as given.
    assert "--alignments with --nbest 2; alignments are of each input's one translation: drop --nbest or" in error
    # An export (only its marker file: the refusal comes before anything is read or loaded) and the engine flag.
    export = tmp_path / "ct2"
    export.mkdir()
    (export / "model.bin").write_bytes(b"")
    cases = {("--alignments",): "--alignments", ("--format", "html"): "--format html"}
    cases[("--format", "xml-inline")] = "--format xml-inline"
    for model, flags in ((export, []), (checkpoint, ["--engine", "ctranslate2"])):
        for options, named in cases.items():
            error = refused(translate_command.main, [model, "--input", source, *options, *flags], capsys)
            assert f"{named} need(s) the PyTorch model's attention weights" in error
            assert f"{model} runs on CTranslate2" in error and "give the checkpoint it was exported from" in error
            assert ("--format text" in error) == ("--format" in options)
