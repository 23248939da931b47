"""vaswani-translate's --target_prefix and --max_tokens (and translate()'s target_prefixes and max_tokens) on a
model with a real tokenizer."""

import functools
import select
import subprocess

import pytest
from helpers.training_setup import command, run_command, tiny_checkpoint

from modeling_vaswani.toolkit.cli import translate as translate_command
from modeling_vaswani.toolkit.translation.translate import InputError, translate

SENTENCES = [
    "A man rides a bike.",
    "Two dogs play in the snow near a big red house with a garden.",
    "A girl.",
    "People walk down a busy street in the city.",
    "A cat sleeps.",
]


run = functools.partial(run_command, translate_command)  # run(argv, capsys)


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_token_batches_translate_as_batches_of_one_in_input_order(loaded, checkpoint, tmp_path, capsys):
    model, tokenizer = loaded
    one_by_one = translate(model, tokenizer, SENTENCES, batch_size=1, max_new_tokens=10, progress=False)
    assert translate(model, tokenizer, SENTENCES, max_tokens=40, max_new_tokens=10, progress=False) == one_by_one
    (tmp_path / "in.en").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    code, out, err = run(
        [checkpoint, "--input", tmp_path / "in.en", "--max_tokens", 40, "--max_new_tokens", 10], capsys
    )
    assert code == 0, err
    assert out.splitlines() == one_by_one
    code, out, err = run([checkpoint, "--input", tmp_path / "in.en", "--max_tokens", 3], capsys)
    assert code == 2 and out == ""
    # The longest sentence, named by its line and first words (each line is split into sentences).
    assert "line 2, sentence 1 ('Two dogs play in ...') is" in err and "more than --max_tokens 3" in err


def test_target_prefixes_start_their_translations(loaded, checkpoint, tmp_path, capsys):
    model, tokenizer = loaded
    prefixes = ["Ein Mann", "", "Ein Mädchen", "", "Eine"]
    plain = translate(model, tokenizer, SENTENCES, max_new_tokens=10, progress=False)
    prefixed = translate(model, tokenizer, SENTENCES, max_new_tokens=10, target_prefixes=prefixes, progress=False)
    for prefix, with_prefix, without in zip(prefixes, prefixed, plain, strict=True):
        assert with_prefix.startswith(prefix) if prefix else with_prefix == without
    (tmp_path / "in.en").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    (tmp_path / "prefixes.de").write_text("\n".join(prefixes) + "\n", encoding="utf-8")
    argv = [checkpoint, "--input", tmp_path / "in.en", "--target_prefix", tmp_path / "prefixes.de"]
    code, out, err = run([*argv, "--max_new_tokens", 10], capsys)
    assert code == 0, err
    assert out.splitlines() == prefixed

    (tmp_path / "short.de").write_text("Ein Mann\n\n", encoding="utf-8")
    code, out, err = run([checkpoint, "--input", tmp_path / "in.en", "--target_prefix", tmp_path / "short.de"], capsys)
    assert code == 2 and out == ""
    assert "--target_prefix" in err and "has 2 lines; expected 5, one per input line" in err
    with pytest.raises(InputError, match="target_prefixes is 1 prefixes; expected a list of 5"):
        translate(model, tokenizer, SENTENCES, target_prefixes=["Ein"], progress=False)
    code, out, err = run([*argv, "--max_new_tokens", 1], capsys)
    assert code == 2 and "target prefix 1 is 2 tokens long and its translation may have 1" in err


def read_line(process, timeout: float = 120.0) -> str:
    """The next line the process writes, or a failure if none comes within `timeout` seconds."""
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, f"no translation within {timeout} s while the input was still open"
    return process.stdout.readline().decode("utf-8").rstrip("\n")


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_a_pipe_gets_each_translation_before_its_input_ends(loaded, checkpoint):
    model, tokenizer = loaded
    expected = translate(model, tokenizer, SENTENCES[:2], batch_size=1, max_new_tokens=8, progress=False)
    # One sentence a line, where an empty line is refused (tests/cli/test_translate_paragraphs.py: a pipe whose lines
    # are split into sentences, empty lines answered with empty lines).
    process = subprocess.Popen(
        [*command("translate"), str(checkpoint), "--max_new_tokens", "8", "--no_split_sentences"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        for sentence, translation in zip(SENTENCES[:2], expected, strict=True):
            process.stdin.write(sentence.encode("utf-8") + b"\n")
            process.stdin.flush()
            assert read_line(process) == translation  # the input is still open
        process.stdin.write(b"\n")  # an empty line ends the run with its error, after the lines before it
        process.stdin.close()
        assert process.wait(timeout=120) == 2
        error = process.stderr.read().decode("utf-8")
        assert "standard input, one sentence a line, counting from line 3: sentence 1 is empty" in error, error
    finally:
        process.kill()


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_an_empty_pipe_is_refused(checkpoint):
    result = subprocess.run([*command("translate"), str(checkpoint)], input=b"", capture_output=True, timeout=120)
    assert result.returncode == 2 and result.stdout == b""
    assert b"vaswani-translate: error: standard input is empty; expected one sentence per line" in result.stderr


def test_an_ensemble_of_a_checkpoint_with_itself_translates_as_the_checkpoint(loaded, checkpoint, tmp_path, capsys):
    model, tokenizer = loaded
    (tmp_path / "in.en").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    code, out, err = run([checkpoint, checkpoint, "--input", tmp_path / "in.en", "--max_new_tokens", 8], capsys)
    assert code == 0, err
    assert out.splitlines() == translate(model, tokenizer, SENTENCES, max_new_tokens=8, progress=False)

    other = tiny_checkpoint(tmp_path / "other", lines=300)  # another vocabulary
    code, out, err = run([checkpoint, other, "--input", tmp_path / "in.en"], capsys)
    assert code == 2 and out == ""
    assert f"{other} and {checkpoint} have different tokenizers" in err
    code, _, err = run([checkpoint, checkpoint, "--input", tmp_path / "in.en", "--no_paper_decoding"], capsys)
    assert code == 2 and "an ensemble (several models) decodes with the paper's decoding" in err
