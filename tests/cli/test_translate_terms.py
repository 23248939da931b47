"""vaswani-translate --constraints, --avoid (one line per input line, phrases separated by tabs, fairseq's format) and
--glossary (source term TAB target term): the output is the library's translate with the same terms; files that do
not fit the input, a CTranslate2 export and the options terms cannot go with are refused before any model loads."""

import functools

import pytest
from helpers.refusals import refused
from helpers.training_setup import TINY_PAIRS, run_command

from modeling_vaswani.toolkit.cli import translate as translate_command
from modeling_vaswani.toolkit.translation.alignment import pharaoh, translate_aligned
from modeling_vaswani.toolkit.translation.engines import load_translator
from modeling_vaswani.toolkit.translation.terminology import Glossary
from modeling_vaswani.toolkit.translation.translate import translate

OPTIONS = ["--max_new_tokens", "12"]
run = functools.partial(run_command, translate_command)  # run(argv, capsys)
LINES = [source for source, _ in TINY_PAIRS]


@pytest.fixture
def files(tmp_path):
    source = tmp_path / "in.en"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("Fahrrad\nHunde\tim Schnee\n\n", encoding="utf-8")
    avoid = tmp_path / "avoid.txt"
    avoid.write_text("\n\nsingt\n", encoding="utf-8")
    glossary = tmp_path / "glossary.tsv"
    glossary.write_text("girl\tFrau\n", encoding="utf-8")
    return source, constraints, avoid, glossary


def test_the_files_terms_are_the_librarys(trained, files, tmp_path, capsys):
    source, constraints, avoid, glossary = files
    argv = [trained, "--input", source, "--constraints", constraints, "--avoid", avoid, "--glossary", glossary]
    code, out, err = run([*argv, *OPTIONS], capsys)
    assert code == 0, err
    model, tokenizer = load_translator(str(trained))
    expected = translate(
        model, tokenizer, LINES, constraints=[["Fahrrad"], ["Hunde", "im Schnee"], []], avoid=[[], [], ["singt"]],
        glossary=Glossary({"girl": "Frau"}), max_new_tokens=12, progress=False,
    )  # fmt: skip
    assert out.split("\n") == [*expected, ""]
    lines = out.split("\n")
    assert "Fahrrad" in lines[0] and "Hunde" in lines[1] and "im Schnee" in lines[1]
    assert "Frau" in lines[2] and "singt" not in lines[2]


def test_alignments_are_those_of_the_translations_that_meet_the_terms(trained, files, capsys):
    """--alignments with terminology (refused by the command before issue 52, answered by vaswani-serve): each line
    is the terminology's translation, " ||| " and that translation's word alignment, as the library gives them."""
    source, constraints, avoid, glossary = files
    argv = [trained, "--input", source, "--constraints", constraints, "--avoid", avoid, "--glossary", glossary]
    code, out, err = run([*argv, "--alignments", *OPTIONS], capsys)
    assert code == 0, err
    model, tokenizer = load_translator(str(trained))
    aligned = translate_aligned(
        model, tokenizer, LINES, constraints=[["Fahrrad"], ["Hunde", "im Schnee"], []], avoid=[[], [], ["singt"]],
        glossary=Glossary({"girl": "Frau"}), max_new_tokens=12, progress=False,
    )  # fmt: skip
    assert out.split("\n") == [*(f"{line.text} ||| {pharaoh(line.alignment)}" for line in aligned), ""]
    assert "Fahrrad" in aligned[0].text and "singt" not in aligned[2].text and all(line.alignment for line in aligned)


def test_phrases_to_avoid_hold_without_the_papers_decoding_too(trained, files, capsys):
    """Negative constraints are for both decoding modes (issue 44): the command's greedy or transformers' beam search
    keeps them out as the library does."""
    source, _, avoid, _ = files
    for beams in (1, 2):
        argv = [trained, "--input", source, "--avoid", avoid, "--no_paper_decoding", "--num_beams", beams, *OPTIONS]
        code, out, err = run(argv, capsys)
        assert code == 0, err
        model, tokenizer = load_translator(str(trained))
        free = translate(
            model, tokenizer, LINES, paper_decoding=False, num_beams=beams, max_new_tokens=12, progress=False
        )
        assert "singt" in free[2]  # so that keeping it out is the avoid file's doing
        expected = translate(
            model, tokenizer, LINES, avoid=[[], [], ["singt"]], paper_decoding=False, num_beams=beams,
            max_new_tokens=12, progress=False,
        )  # fmt: skip
        assert out.split("\n") == [*expected, ""] and "singt" not in out


def test_n_best_lists_hold_the_constraints(trained, files, capsys):
    source, constraints, _, _ = files
    code, out, err = run([trained, "--input", source, "--constraints", constraints, "--nbest", 2, *OPTIONS], capsys)
    assert code == 0, err
    rows = [line.split(" ||| ") for line in out.strip().split("\n")]
    assert [row[0] for row in rows] == ["0", "0", "1", "1", "2", "2"]
    assert all("Fahrrad" in row[1] for row in rows[:2]) and all("im Schnee" in row[1] for row in rows[2:4])


def test_terms_that_cannot_be_used_are_refused_before_any_model_loads(trained, files, tmp_path, capsys):
    source, constraints, avoid, glossary = files
    short = tmp_path / "short.txt"
    short.write_text("Fahrrad\n", encoding="utf-8")
    for flag in ("--constraints", "--avoid"):
        error = refused(translate_command.main, [trained, "--input", source, flag, short], capsys)
        assert f"{flag} {short} has 1 lines; expected 3, one per input line" in error
    broken = tmp_path / "broken.tsv"
    broken.write_text("girl Frau\n", encoding="utf-8")
    error = refused(translate_command.main, [trained, "--input", source, "--glossary", broken], capsys)
    assert f"{broken}, line 1: 'girl Frau'; expected a source term, one tab and a target term" in error
    export = tmp_path / "ct2"
    export.mkdir()
    (export / "model.bin").write_bytes(b"")  # only the marker: the refusal comes before anything is read
    for model, flags in ((export, []), (trained, ["--engine", "ctranslate2"])):
        for option, path in (("--constraints", constraints), ("--avoid", avoid), ("--glossary", glossary)):
            error = refused(translate_command.main, [model, "--input", source, option, path, *flags], capsys)
            assert (
                f"{option} need(s) the paper's search with lexical constraints; {model} runs on CTranslate2" in error
            )
    for option, path in (("--constraints", constraints), ("--glossary", glossary)):
        argv = [trained, "--input", source, option, path, "--avoid", avoid, "--no_paper_decoding"]
        error = refused(translate_command.main, argv, capsys, one_line=False)
        assert f"{option} need(s) the paper's decoding (its own beam search meets them); drop --no_paper_" in error
    error = refused(
        translate_command.main, [trained, "--input", source, "--glossary", glossary, "--format", "xml-inline"],
        capsys, one_line=False,
    )  # fmt: skip
    assert "drop --glossary or give --format text" in error
