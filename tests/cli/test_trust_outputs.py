"""Issue 41, part 1, replayed through the commands' `main(argv)`: outputs recognised by what they hold, devices and
FIFOs never renamed over, a set of figures replaced as one, a model a killed run set aside restored for its reader,
and a second writer of one output refused by name. The mechanisms are toolkit/outputs.py's (tests/toolkit/
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
    import modeling_vaswani.toolkit.outputs as outputs
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
