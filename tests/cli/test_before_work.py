"""Issue 41, parts 4 and 5, as a user meets them: everything that can be checked before a model loads is refused
before it loads; a stream answers every good line before a bad one; a full disk names the file it stopped; vaswani-
train's flags are finite numbers and known flags, its corpora refused by file and line, and its own early-stopped
output overwritable. Commands run through their `main(argv)` as the console scripts call them, or as processes where
a real pipe is the point; full disks are real tmpfs mounts."""

import errno
import json
import shutil
import subprocess
import time

import pytest
from helpers import refusals
from helpers.small_disk import fill, small_disk
from helpers.training_setup import command, free_port

from modeling_vaswani.toolkit.cli import (
    ablate,
    average,
    export_ctranslate2,
    plot_attention,
    score,
    train,
    train_tokenizer,
    translate,
)
from modeling_vaswani.toolkit.cli.shell import ENVIRONMENT_ERRNOS
from modeling_vaswani.toolkit.data.corpora import MULTI30K_DIR, read_sentences
from modeling_vaswani.toolkit.translation.engines import load_translator
from modeling_vaswani.toolkit.translation.translate import translate as translate_sentences

FAST = ["--num_beams", "1", "--max_new_tokens", "4"]
NO_SPACE = ENVIRONMENT_ERRNOS[errno.ENOSPC]


@pytest.fixture
def unloadable(checkpoint, tmp_path):
    """A model folder whose weights are garbage: loading it fails, saying so; a refusal that names something else
    came before any model was loaded."""
    folder = shutil.copytree(checkpoint, tmp_path / "unloadable")
    (folder / "model.safetensors").write_bytes(b"\0garbage" * 1000)
    return folder


def refused(main, argv, capsys) -> str:
    """The refusal, the last line on stderr: argparse prints its usage line before a usage error."""
    return refusals.refused(main, argv, capsys, one_line=False)


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "input.en"
    path.write_text("A man rides a bike.\nTwo dogs play.\nA girl.\n", encoding="utf-8")
    return path


def assert_no_model_was_loaded(error: str, unloadable) -> None:
    assert "model.safetensors" not in error and str(unloadable) not in error, error


# ---------------------------------------------------------------------------------------------------------------------
# Part 5: refused before any model loads
# ---------------------------------------------------------------------------------------------------------------------


def test_a_target_prefix_file_with_too_few_lines_is_refused_before_the_model_loads(
    unloadable, source, tmp_path, capsys
):
    prefixes = tmp_path / "prefixes.de"
    prefixes.write_text("Ein Mann\n\n", encoding="utf-8")
    error = refused(translate.main, [unloadable, "--input", source, "--target_prefix", prefixes], capsys)
    assert error == (
        f"vaswani-translate: error: --target_prefix {prefixes} has 2 lines; expected 3, one per input line (an "
        "empty line for none)"
    )
    assert_no_model_was_loaded(error, unloadable)


@pytest.mark.parametrize("fault", ["missing", "folder", "latin-1", "empty", "prefix not UTF-8", "prefix missing"])
def test_an_input_that_cannot_be_read_is_refused_before_the_model_loads(unloadable, source, tmp_path, capsys, fault):
    argv = [unloadable, "--input", source]
    if fault == "missing":
        argv[2] = tmp_path / "no-such.en"
    elif fault == "folder":
        argv[2] = tmp_path
    elif fault == "latin-1":
        source.write_bytes("Grüße.\n".encode("latin-1"))
    elif fault == "empty":
        source.write_bytes(b"")
    elif fault == "prefix not UTF-8":
        (tmp_path / "prefixes.de").write_bytes(b"\xff\n\n\n")
        argv += ["--target_prefix", tmp_path / "prefixes.de"]
    else:
        argv += ["--target_prefix", tmp_path / "no-such.de"]
    error = refused(translate.main, argv, capsys)
    assert_no_model_was_loaded(error, unloadable)
    assert {
        "missing": f"{tmp_path / 'no-such.en'}",
        "folder": f"{tmp_path}: is a folder; expected a file",
        "latin-1": f"{source}, line 1: not valid UTF-8",
        "empty": f"{source} is empty; expected one sentence per line",
        "prefix not UTF-8": f"{tmp_path / 'prefixes.de'}, line 1: not valid UTF-8",
        "prefix missing": f"{tmp_path / 'no-such.de'}",
    }[fault] in error


def test_stdin_from_a_file_is_checked_before_the_model_loads(unloadable, tmp_path):
    (tmp_path / "in.en").write_bytes(b"A man.\n\xff\n")
    with open(tmp_path / "in.en", "rb") as stdin:
        result = subprocess.run([*command("translate"), str(unloadable)], stdin=stdin, capture_output=True, text=True)
    assert result.returncode == 2, result.stderr
    assert "standard input, line 2: not valid UTF-8" in result.stderr
    assert_no_model_was_loaded(result.stderr, unloadable)


@pytest.mark.parametrize("main", [translate.main, score.main])
def test_a_missing_model_of_an_ensemble_is_refused_before_the_first_loads(unloadable, source, tmp_path, capsys, main):
    missing = tmp_path / "runs-b" / "averaged"
    files = ["--input", source] if main is translate.main else ["--source", source, "--target", source]
    error = refused(main, [unloadable, missing, *files], capsys)
    assert f"model folder {missing} does not exist" in error
    assert_no_model_was_loaded(error, unloadable)


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_serve_finds_every_model_before_the_first_loads(unloadable, tmp_path):
    pytest.importorskip("fastapi")
    missing = tmp_path / "runs-b" / "averaged"
    done = subprocess.run(
        [*command("serve"), str(unloadable), str(missing), "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert f"model folder {missing} does not exist" in done.stderr.strip().splitlines()[-1], done.stderr
    assert_no_model_was_loaded(done.stderr, unloadable)


def test_a_damaged_second_model_of_an_ensemble_is_named_before_the_first_loads(checkpoint, source, tmp_path, capsys):
    first = shutil.copytree(checkpoint, tmp_path / "first")
    config = json.loads((first / "config.json").read_text())
    (first / "config.json").write_text(json.dumps({**config, "d_ff": 96}))  # its opener would name this
    second = shutil.copytree(checkpoint, tmp_path / "second")
    data = (second / "model.safetensors").read_bytes()
    (second / "model.safetensors").write_bytes(data[: len(data) // 2])
    error = refused(translate.main, [first, second, "--input", source], capsys)
    assert f"{second / 'model.safetensors'} is not a readable safetensors file" in error


# ---------------------------------------------------------------------------------------------------------------------
# Part 5: a stream answers every good line before a bad one, however the lines arrived
# ---------------------------------------------------------------------------------------------------------------------

LINES = ["A man rides a bike.", "Two dogs play in the snow.", "A girl."]


@pytest.mark.parametrize(
    ("bad", "told"),
    [
        (b"", "standard input, one sentence a line: sentence 3 is empty; expected text to translate"),
        (b"   ", "standard input, one sentence a line: sentence 3 is empty; expected text to translate"),
        (b"\xff\xfe", "standard input, line 3: not valid UTF-8"),
        (b"A\x00B", "standard input, line 3: holds a NUL character"),
        (" ".join(["word"] * 80).encode(), "standard input, one sentence a line: sentence 3 is"),
    ],
    ids=["empty", "blank", "not UTF-8", "NUL", "too long"],
)
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_lines_that_arrive_with_a_bad_one_are_answered_before_the_refusal(checkpoint, bad, told):
    """All of it in one write, so that one read returns the good lines and the bad one together. One sentence a line
    (--no_split_sentences), where an empty line is a bad one; with sentence splitting:
    tests/cli/test_translate_paragraphs.py."""
    model, tokenizer = load_translator(str(checkpoint))
    expected = translate_sentences(model, tokenizer, LINES[:2], batch_size=1, max_new_tokens=6, progress=False)
    data = b"".join(line.encode() + b"\n" for line in LINES[:2]) + bad + b"\n" + LINES[2].encode() + b"\n"
    flags = ["--max_new_tokens", "6", "--max_input_tokens", "40", "--no_split_sentences"]
    process = subprocess.Popen(
        [*command("translate"), str(checkpoint), *flags],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = process.communicate(data, timeout=300)
    assert process.returncode == 2, err.decode()
    assert out.decode().splitlines() == expected, err.decode()
    assert told in err.decode(), err.decode()


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_an_nbest_stream_numbers_the_good_lines_before_a_bad_one(checkpoint):
    data = f"{LINES[0]}\n{LINES[1]}\n\n".encode()  # the empty line is the bad one, one sentence a line
    result = subprocess.run(
        [*command("translate"), str(checkpoint), "--nbest", "2", "--max_new_tokens", "4", "--no_split_sentences"],
        input=data,
        capture_output=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr.decode()
    ids = [line.split(" ||| ")[0] for line in result.stdout.decode().splitlines()]
    assert ids == ["0", "0", "1", "1"]


# ---------------------------------------------------------------------------------------------------------------------
# Part 5: a full disk names the file it stopped, and the earlier output stays whole
# ---------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "val.en"
    path.write_text("\n".join(read_sentences(MULTI30K_DIR / "val.en.gz")) + "\n", encoding="utf-8")
    return path


def test_train_tokenizer_on_a_full_disk_names_the_file_and_keeps_the_earlier_tokenizer(corpus, tmp_path, capsys):
    with small_disk(tmp_path / "disk", "1m") as disk:
        output = disk / "tok"
        train_tokenizer.main(["--files", str(corpus), "--vocab_size", "300", "--output_dir", str(output)])
        earlier = {path.name: path.read_bytes() for path in output.iterdir()}
        fill(disk, leave_bytes=20_000)
        error = refused(
            train_tokenizer.main, ["--files", corpus, "--vocab_size", "3000", "--output_dir", output], capsys
        )
        assert (
            error
            == f"vaswani-train-tokenizer: error: {output / 'tokenizer.json'}: {NO_SPACE} (No space left on device)"
        )
        assert {path.name: path.read_bytes() for path in output.iterdir()} == earlier
        assert sorted(path.name for path in disk.iterdir()) == ["filler", "tok"]


def test_an_export_on_a_full_disk_names_the_file(checkpoint, tmp_path, capsys):
    pytest.importorskip("ctranslate2")
    weights = (checkpoint / "model.safetensors").stat().st_size
    with small_disk(tmp_path / "disk", "1m") as disk:
        fill(disk, leave_bytes=weights + 8192)  # room enough for the check before the work, not for the export
        error = refused(export_ctranslate2.main, [checkpoint, disk / "ct2"], capsys)
        assert (
            error
            == f"vaswani-export-ctranslate2: error: {disk / 'ct2' / 'model.bin'}: {NO_SPACE} (No space left on device)"
        )
        assert sorted(path.name for path in disk.iterdir()) == ["filler"]


def test_plots_and_averages_on_a_full_disk_name_the_output_file_not_a_hidden_one(checkpoint, tmp_path, capsys):
    with small_disk(tmp_path / "disk", "1m") as disk:
        fill(disk, leave_bytes=4096)
        error = refused(plot_attention.main, [checkpoint, "A man.", "--output_dir", disk / "maps"], capsys)
        assert error.startswith(f"vaswani-plot-attention: error: {disk / 'maps'}/") and "_layer" in error, error
        assert error.endswith(f".png: {NO_SPACE} (No space left on device)"), error
        (disk / "filler").unlink()
        second = shutil.copytree(checkpoint, tmp_path / "second")
        fill(disk, leave_bytes=(checkpoint / "model.safetensors").stat().st_size + 4096)
        error = refused(average.main, [checkpoint, second, "--output", disk / "averaged"], capsys)
        assert f"error: {disk / 'averaged'}/" in error and ".partial-" not in error and NO_SPACE in error, error
        assert sorted(path.name for path in disk.iterdir()) == ["filler"]


# ---------------------------------------------------------------------------------------------------------------------
# Part 4: vaswani-train's flags
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("main", [train.main, ablate.main])
@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--max_train_minutes", "nan"),
        ("--max_train_minutes", "inf"),
        ("--learning_rate", "NaN"),
        ("--dropout", "-inf"),
        ("--label_smoothing_factor", "1e400"),
        ("--length_penalty", "infinity"),
        ("--warmup_steps", "nan"),
    ],
)
def test_a_float_flag_that_is_not_a_finite_number_is_a_usage_error(tmp_path, capsys, main, flag, value):
    """Refused while parsing, before any file is looked at (the training file named here does not exist)."""
    started = time.monotonic()
    argv = ["--output_dir", tmp_path / "run", "--train_source_file", tmp_path / "none.en", f"{flag}={value}"]
    if main is ablate.main:
        argv += ["--rows", "base"]
    error = refused(main, argv, capsys)
    assert f"error: argument {flag}" in error, error
    assert error.endswith(f": expected a finite number, got {value!r}"), error
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("main", [train.main, ablate.main])
def test_an_unknown_flag_is_a_usage_error_naming_it(tmp_path, capsys, main):
    argv = ["--output_dir", tmp_path / "run", "--no_such_flag", "3", "--max_stepz", "10"]
    if main is ablate.main:
        argv += ["--rows", "base"]
    error = refused(main, argv, capsys)
    assert error.endswith("error: unrecognized arguments: --no_such_flag 3 --max_stepz 10"), error
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("name", "content", "where"),
    [
        (
            "train.jsonl",
            '{"en": "A dog.", "de": "Ein Hund."}\n{"en": "c", "de": \n',
            "line 2, column 19: not valid JSON",
        ),
        (
            "train.jsonl",
            '{"en": "A dog.", "de": "Ein Hund."}\n["c", "d"]\n',
            'line 2: the row is ["c", "d"], an array',
        ),
        ("train.csv", "en,de\na,b\nc,d,e\n", "line 3: 3 fields; expected 2"),
        ("train.jsonl", "", "holds no rows; expected translation pairs"),
        ("train.csv", "en,de\n", "holds only its header (line 1)"),
    ],
    ids=["json syntax", "array row", "extra column", "empty", "header only"],
)
def test_train_refuses_a_bad_train_file_by_line_with_exit_2(tmp_path, capsys, name, content, where):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    error = refused(train.main, ["--output_dir", tmp_path / "run", "--train_file", path], capsys)
    assert error.startswith(f"vaswani-train: error: {path}") and where in error, error
