"""Issue 41, part 1, replayed through the commands' `main(argv)`: outputs recognised by what they hold, devices and
FIFOs never renamed over, a set of figures replaced as one, a model a killed run set aside restored for its reader,
and a second writer of one output refused by name. The mechanisms are toolkit/outputs/'s (tests/toolkit/
test_outputs.py); these are the cases a user meets."""

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from helpers.refusals import files, refused
from helpers.training_setup import TESTS

from modeling_vaswani.toolkit.cli import average, plot_attention, score, train_tokenizer, translate
from modeling_vaswani.toolkit.outputs import MARKER

FAST = ["--num_beams", "1", "--max_new_tokens", "4"]
ENV = {**os.environ, "PYTHONPATH": str(TESTS), "OMP_NUM_THREADS": "1"}


@pytest.fixture
def two(checkpoint, tmp_path):
    """Two checkpoints to average."""
    return [shutil.copytree(checkpoint, tmp_path / name) for name in ("checkpoint-1", "checkpoint-2")]


def hidden(folder) -> list[str]:
    return sorted(path.name for path in folder.iterdir() if path.name.startswith("."))


# ---------------------------------------------------------------------------------------------------------------------
# Known by content, not by names
# ---------------------------------------------------------------------------------------------------------------------


def test_average_into_another_hugging_face_model_is_refused_and_nothing_is_touched(two, tmp_path, capsys):
    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 768}))
    for name in ("model.safetensors", "tokenizer.json", "README.md"):
        (bert / name).write_text(f"the user's {name}")
    before = files(bert)
    error = refused(average.main, [*two, "--output", bert], capsys)
    assert error == (
        f"vaswani-average: error: output folder {bert} holds README.md, config.json, model.safetensors, "
        "tokenizer.json, which vaswani-average did not write; expected a new or empty folder, or an earlier output "
        "of vaswani-average (replaced whole): choose another --output"
    )
    assert files(bert) == before and hidden(tmp_path) == []


def test_average_replaces_its_own_earlier_output_and_an_older_versions(two, tmp_path, capsys):
    output = tmp_path / "averaged"
    for _ in range(2):
        average.main([str(path) for path in [*two, "--output", output]])
    assert json.loads((output / MARKER).read_text())["command"] == "vaswani-average"
    (output / MARKER).unlink()  # as versions before markers wrote it: known by its Vaswani config.json
    average.main([str(path) for path in [*two, "--output", output]])
    assert (output / MARKER).is_file() and hidden(tmp_path) == []
    (output / "notes.txt").write_text("mine")
    assert "holds notes.txt, which vaswani-average did not write" in refused(
        average.main, [*two, "--output", output], capsys
    )


def test_export_over_a_folder_of_the_users_config_and_vocabulary_is_refused(checkpoint, tmp_path, capsys):
    pytest.importorskip("ctranslate2")
    from modeling_vaswani.toolkit.cli import export_ctranslate2

    folder = tmp_path / "ct"
    folder.mkdir()
    (folder / "config.json").write_text('{"mine": true}')
    (folder / "vocab.json").write_text('{"a": 0}')
    before = files(folder)
    error = refused(export_ctranslate2.main, [checkpoint, folder], capsys)
    assert f"output folder {folder} holds config.json, vocab.json, which vaswani-export-ctranslate2 did not" in error
    assert error.endswith("choose another output folder")
    assert files(folder) == before


def test_train_tokenizer_over_a_users_tokenizer_is_refused_saying_how_to_go_on(tmp_path, capsys):
    corpus = tmp_path / "corpus.en"
    corpus.write_text("A man rides a bike.\nTwo dogs play in the snow.\n" * 20, encoding="utf-8")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "tokenizer.json").write_text("{}")
    (theirs / "vocab.json").write_text("{}")
    before = files(theirs)
    argv = ["--files", corpus, "--vocab_size", 300, "--output_dir"]
    error = refused(train_tokenizer.main, [*argv, theirs], capsys)
    assert (
        f"holds tokenizer.json, vocab.json, which vaswani-train-tokenizer did not write (it has no {MARKER}" in error
    )
    assert error.endswith("choose another --output_dir") and files(theirs) == before
    ours = tmp_path / "ours"
    for _ in range(2):  # its own earlier output is replaced
        train_tokenizer.main([str(argument) for argument in [*argv, ours]])
    assert json.loads((ours / MARKER).read_text())["command"] == "vaswani-train-tokenizer"


# ---------------------------------------------------------------------------------------------------------------------
# Devices and FIFOs written in place
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("main", [translate.main, score.main])
def test_dev_null_as_output_stays_a_character_device(checkpoint, source, main):
    before = os.stat("/dev/null")
    argv = ["--input", source, *FAST] if main is translate.main else ["--source", source, "--target", source]
    main([str(argument) for argument in [checkpoint, *argv, "--output", "/dev/null"]])
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)
    assert not [name for name in os.listdir("/dev") if name.startswith(".null.")]


def test_translate_into_a_fifo_feeds_its_reader(checkpoint, source, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text(encoding="utf-8")), daemon=True)
    reader.start()
    translate.main([str(checkpoint), "--input", str(source), "--output", str(fifo), *FAST])
    reader.join(timeout=30)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and len(received) == 1 and received[0].count("\n") == 2
    assert sorted(os.listdir(tmp_path)) == ["fifo", "input.en"]


# ---------------------------------------------------------------------------------------------------------------------
# A set of files replaced as one
# ---------------------------------------------------------------------------------------------------------------------

KILLED_PLOT = textwrap.dedent(
    """
    import os, signal, sys
    from matplotlib.figure import Figure
    from modeling_vaswani.toolkit.cli import plot_attention
    savefig = Figure.savefig
    def killed_after_the_first(self, *args, **kwargs):  # as a kill, or a full disk, after one figure of three
        savefig(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)
    Figure.savefig = killed_after_the_first
    plot_attention.main(sys.argv[1:])
    """
)


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_attention_maps_are_replaced_as_one_set_never_a_mix(checkpoint, tmp_path):
    maps = tmp_path / "maps"
    plot_attention.main([str(checkpoint), "A man.", "--layers", "0", "--output_dir", str(maps)])
    first = files(maps)
    argv = [str(checkpoint), "A man.", "--layers", "1", "--output_dir", str(maps)]
    killed = subprocess.run([sys.executable, "-c", KILLED_PLOT, *argv], env=ENV)
    assert killed.returncode == -signal.SIGKILL
    assert files(maps) == first  # the earlier set whole, none of the new run's figures
    plot_attention.main(argv)
    assert sorted(name for name in files(maps) if name != MARKER) == [
        f"{kind}_layer1.png" for kind in ("cross", "decoder", "encoder")
    ]  # the new set alone: layer 0's figures went with the set they belonged to
    assert hidden(tmp_path) == []


# ---------------------------------------------------------------------------------------------------------------------
# A model set aside by a killed run, and two writers at once
# ---------------------------------------------------------------------------------------------------------------------

KILLED_SWAP = textwrap.dedent(
    """
    import os, signal, sys
    import modeling_vaswani.toolkit.outputs.writers as outputs
    from modeling_vaswani.toolkit.cli import average
    rename = outputs.Path.rename
    def killed_after_setting_aside(self, target):  # the earlier model set aside, the new one not yet in place
        rename(self, target)
        if str(target).endswith(".old"):
            os.kill(os.getpid(), signal.SIGKILL)
    outputs.Path.rename = killed_after_setting_aside
    average.main(sys.argv[1:])
    """
)


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_a_reader_restores_a_model_a_killed_average_set_aside_and_says_so(two, source, tmp_path):
    output = tmp_path / "averaged"
    argv = [*map(str, two), "--output", str(output)]
    average.main(argv)
    killed = subprocess.run([sys.executable, "-c", KILLED_SWAP, *argv], env=ENV)
    assert killed.returncode == -signal.SIGKILL and not output.exists()
    reader = [sys.executable, "-m", "modeling_vaswani.toolkit.cli.translate", str(output), "--input", str(source)]
    captured = subprocess.run([*reader, *FAST], capture_output=True, text=True, env=ENV)  # what a user sees
    assert captured.returncode == 0 and captured.stdout.count("\n") == 2, captured.stderr
    assert (
        f"restored {output} from {tmp_path / '.averaged.old'}, where a run killed while replacing it"
        in captured.stderr
    )
    assert output.is_dir() and not (tmp_path / ".averaged.old").exists()


SLOW_AVERAGE = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from modeling_vaswani.toolkit.cli import average
    from modeling_vaswani.toolkit.training import averaging
    write = averaging._write_averaged_weights
    def slow(*args):
        write(*args)
        Path(sys.argv[1]).write_text("writing")
        time.sleep(3)
    averaging._write_averaged_weights = slow
    average.main(sys.argv[2:])
    """
)


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_a_second_average_into_the_same_output_is_refused_naming_the_first(two, tmp_path, capsys):
    output, started = tmp_path / "averaged", tmp_path / "started"
    argv = [*map(str, two), "--output", str(output)]
    first = subprocess.Popen([sys.executable, "-c", SLOW_AVERAGE, str(started), *argv], env=ENV)
    try:
        deadline = time.monotonic() + 120
        while not started.exists():
            assert first.poll() is None and time.monotonic() < deadline, "the first average did not start"
            time.sleep(0.05)
        error = refused(average.main, argv, capsys)
    finally:
        assert first.wait(timeout=120) == 0
    assert error == (
        f"vaswani-average: error: another vaswani-average (pid {first.pid}) is writing {output}; expected one "
        "writer at a time: wait for it to end, or write elsewhere"
    )
    assert (output / "model.safetensors").is_file() and hidden(tmp_path) == []


# ---------------------------------------------------------------------------------------------------------------------
# Issue 51: through the commands, what is the user's stays the user's
# ---------------------------------------------------------------------------------------------------------------------


def test_a_users_backup_named_like_a_set_aside_is_named_and_kept(two, checkpoint, source, tmp_path, capsys):
    output = tmp_path / "avg"
    average.main([*map(str, two), "--output", str(output)])
    shutil.copytree(output, tmp_path / ".avg.old")  # `cp -r avg .avg.old`
    (tmp_path / ".avg.old" / "mine.txt").write_text("mine")
    backup, before = files(tmp_path / ".avg.old"), files(output)
    error = refused(average.main, [*two, "--output", output], capsys)
    assert error.startswith(f"vaswani-average: error: {tmp_path / '.avg.old'} is in the way: vaswani-average sets ")
    assert files(tmp_path / ".avg.old") == backup and files(output) == before
    (tmp_path / "out.de").write_text("earlier\n")
    (tmp_path / ".out.de.old").mkdir()
    (tmp_path / ".out.de.old" / "mine.txt").write_text("mine")
    translate.main([str(checkpoint), "--input", str(source), "--output", str(tmp_path / "out.de"), *FAST])
    assert (tmp_path / ".out.de.old" / "mine.txt").read_text() == "mine"
    assert (tmp_path / "out.de").read_text().count("\n") == 2


def test_a_lock_that_is_a_link_is_refused_and_its_target_kept(checkpoint, source, tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / ".out.de.lock").symlink_to(victim)
    error = refused(translate.main, [checkpoint, "--input", source, "--output", tmp_path / "out.de", *FAST], capsys)
    assert error.startswith(
        f"vaswani-translate: error: {tmp_path / '.out.de.lock'} is a symbolic link, not a lock file of this package"
    )
    assert victim.read_text() == "precious\n" and not (tmp_path / "out.de").exists()


STDIN_AS_OUTPUT = textwrap.dedent(
    """
    import sys
    from modeling_vaswani.toolkit.cli import translate
    for name in ("/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"):
        try:
            translate.main([sys.argv[1], "--output", name, "--num_beams", "1", "--max_new_tokens", "4"])
        except SystemExit as exit:
            print("exit", exit.code)
    """
)


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-27): a fresh process loads torch
def test_standard_input_as_the_output_is_refused_whatever_names_it(checkpoint, source, tmp_path):
    before = source.read_bytes()
    with open(source) as stdin:  # `vaswani-translate MODEL --output /dev/stdin < in.en`
        run = subprocess.run(
            [sys.executable, "-c", STDIN_AS_OUTPUT, str(checkpoint)], stdin=stdin, capture_output=True, text=True,
            env=ENV,
        )  # fmt: skip
    assert run.stdout == "exit 2\n" * 3, run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("vaswani-translate: error:")]
    assert errors == [
        f"vaswani-translate: error: --output {name} is standard input, which the command reads; expected another "
        "file, since writing it would destroy that input"
        for name in ("/dev/stdin", "/dev/fd/0", "/proc/self/fd/0")
    ]
    assert source.read_bytes() == before


def test_an_input_under_another_name_is_refused_as_the_output_by_every_command(checkpoint, source, tmp_path, capsys):
    from modeling_vaswani.toolkit.cli import evaluate

    reference = tmp_path / "ref.de"
    reference.write_text("Ein Mann.\nZwei Hunde.\n")
    os.link(reference, tmp_path / "hard.de")
    before = reference.read_bytes()
    argv = [checkpoint, "--source", source, "--reference", reference, "--output", tmp_path / "hard.de"]
    assert f"--output {tmp_path / 'hard.de'} is also an input ({reference})" in refused(evaluate.main, argv, capsys)
    with open(source) as opened:  # `3<input.en`, then --output /dev/fd/3
        argv = [checkpoint, "--source", source, "--target", reference, "--output", f"/dev/fd/{opened.fileno()}"]
        assert "is also an input (" in refused(score.main, argv, capsys)
    assert reference.read_bytes() == before and source.read_text().count("\n") == 2


LOOPED = {
    "translate": lambda model, text, out: (translate.main, [model, "--input", text, "--output", out, *FAST]),
    "score": lambda model, text, out: (score.main, [model, "--source", text, "--target", text, "--output", out]),
    "average": lambda model, text, out: (average.main, [model, "--output", out]),
    "plot-attention": lambda model, text, out: (plot_attention.main, [model, "A man.", "--output_dir", out]),
    "train-tokenizer": lambda model, text, out: (
        train_tokenizer.main, ["--files", text, "--vocab_size", "300", "--output_dir", out]
    ),
}  # fmt: skip


@pytest.mark.parametrize("command", sorted(LOOPED))
def test_an_output_that_is_a_loop_of_links_is_one_line_from_every_command(
    command, checkpoint, source, tmp_path, capsys
):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    main, argv = LOOPED[command](checkpoint, source, tmp_path / "loop")
    error = refused(main, argv, capsys)
    assert error.endswith(
        f"error: {tmp_path / 'loop'} is a symbolic link that cannot be followed (its links form a loop); expected a "
        "file or folder to write, or a link to one"
    )


def test_a_damaged_marker_beside_the_users_notes_names_the_notes_first(two, tmp_path, capsys):
    output = tmp_path / "avg"
    average.main([*map(str, two), "--output", str(output)])
    (output / MARKER).write_text("{damaged")
    (output / "notes.txt").write_text("mine")
    error = refused(average.main, [*two, "--output", output], capsys)
    assert error.startswith(f"vaswani-average: error: output folder {output} holds notes.txt, ")
    assert f"(its {MARKER} is damaged" in error


AVERAGE_UNDER_UMASKS = textwrap.dedent(
    """
    import os, sys
    from modeling_vaswani.toolkit.cli import average
    for umask in (0o022, 0o077, 0o002):  # set after the import: the writer must see the umask of the moment
        os.umask(umask)
        average.main([*sys.argv[2:], "--output", f"{sys.argv[1]}/avg-{umask:o}"])
    """
)


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-27): a fresh process loads torch
def test_an_average_is_readable_as_the_umask_says(two, tmp_path):
    run = subprocess.run(
        [sys.executable, "-c", AVERAGE_UNDER_UMASKS, str(tmp_path), *map(str, two)], env=ENV, capture_output=True
    )
    assert run.returncode == 0, run.stderr
    for umask in (0o022, 0o077, 0o002):
        output = tmp_path / f"avg-{umask:o}"
        modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in output.iterdir()}
        assert "model.safetensors" in modes and stat.S_IMODE(output.stat().st_mode) == 0o777 & ~umask
        assert modes == dict.fromkeys(modes, 0o666 & ~umask), oct(umask)
