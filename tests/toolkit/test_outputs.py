"""The one atomic writer (toolkit/outputs/) on real disks: a full tmpfs, a read-only one, and a writer killed with
SIGKILL in the middle of its work; outputs known by their marker, devices and FIFOs written in place, one writer per
output, and what a killed run set aside restored for a reader."""

import errno
import json
import logging
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from fnmatch import fnmatch
from pathlib import Path

import pytest
import torch
from helpers.small_disk import fill, small_disk
from helpers.tiny_models import tiny_model
from helpers.training_setup import TESTS
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from transformers import PreTrainedTokenizerFast

from modeling_vaswani.toolkit.outputs import (
    AVERAGED,
    MARKER,
    MODEL_OUTPUT,
    TRAINED_TOKENIZER,
    Output,
    OutputError,
    atomic_text,
    check_not_input,
    check_output_file,
    check_output_folder,
    check_owned,
    check_working_folder,
    claim,
    recover,
    release,
    released_on_failure,
    resolve_output,
    restore_set_aside,
    save_figure,
    save_into,
    save_pretrained,
    staged_folder,
    write_text,
    writing,
    writing_natively,
)

OURS = Output("vaswani-test", "--output")
ENV = {**os.environ, "PYTHONPATH": str(TESTS)}
# Names a model folder of ours holds, each matching one of MODEL_OUTPUT's patterns.
MODEL_OUTPUT_NAMES = [
    name for name in ("config.json", "model.safetensors", "tokenizer.json", "vocab.json", "merges.txt", "results.json",
                      "generation_config.json", "modeling_vaswani.py", "test.hyp.de", "spiece.model")
    if any(fnmatch(name, pattern) for pattern in MODEL_OUTPUT)
]  # fmt: skip


def leftovers(folder):
    return sorted(path.name for path in folder.iterdir() if path.name.startswith("."))


def listing(folder):
    return sorted(path.name for path in folder.iterdir() if path.name != MARKER)


def contents(folder):
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def written(folder, **files):
    """`folder` written whole by OURS, holding `files` (name: text)."""
    with staged_folder(folder, OURS) as staged:
        for name, text in files.items():
            (staged / name).write_text(text)
    return folder


def test_a_file_is_replaced_only_when_complete(tmp_path):
    target = tmp_path / "out.de"
    target.write_text("earlier\n", encoding="utf-8")
    with pytest.raises(RuntimeError, match="half-way"), atomic_text(target) as handle:
        handle.write("new first line\n")
        raise RuntimeError("half-way")
    assert target.read_text(encoding="utf-8") == "earlier\n" and leftovers(tmp_path) == []
    write_text(target, "new\n")
    assert target.read_text(encoding="utf-8") == "new\n" and leftovers(tmp_path) == []


def test_a_file_is_written_through_a_symbolic_link_as_open_would(tmp_path):
    (tmp_path / "data").mkdir()
    target = tmp_path / "data" / "out.de"
    target.write_text("earlier\n", encoding="utf-8")
    (tmp_path / "link.de").symlink_to(target)
    write_text(tmp_path / "link.de", "new\n")
    assert (tmp_path / "link.de").is_symlink() and target.read_text(encoding="utf-8") == "new\n"
    assert leftovers(tmp_path) == [] and leftovers(tmp_path / "data") == []
    (tmp_path / "dangling.de").symlink_to(tmp_path / "data" / "new.de")  # as open(path, "w"): the target is made
    write_text(tmp_path / "dangling.de", "made\n")
    assert (tmp_path / "dangling.de").is_symlink() and (tmp_path / "data" / "new.de").read_text() == "made\n"


def test_links_are_followed_for_folders_too_and_a_loop_is_refused_in_one_line(tmp_path):
    real = written(tmp_path / "real", **{"a.txt": "earlier"})
    (tmp_path / "link").symlink_to(real)
    written(tmp_path / "link", **{"b.txt": "new"})
    assert (tmp_path / "link").is_symlink() and listing(real) == ["b.txt"] and leftovers(tmp_path) == []
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(OutputError, match="loop is a symbolic link that cannot be followed"):
        check_output_file(tmp_path / "loop")
    with pytest.raises(OutputError, match="loop is a symbolic link that cannot be followed"):
        check_output_folder(tmp_path / "loop", OURS)


def test_new_files_and_folders_get_the_permissions_open_and_mkdir_give(tmp_path):
    write_text(tmp_path / "written", "x")
    with open(tmp_path / "opened", "w") as handle:
        handle.write("x")
    assert (tmp_path / "written").stat().st_mode == (tmp_path / "opened").stat().st_mode
    with staged_folder(tmp_path / "staged", OURS):
        pass
    (tmp_path / "made").mkdir()
    assert (tmp_path / "staged").stat().st_mode == (tmp_path / "made").stat().st_mode
    assert (tmp_path / "staged" / MARKER).stat().st_mode == (tmp_path / "opened").stat().st_mode


def test_a_killed_runs_leftovers_do_not_make_an_output_foreign(tmp_path):
    model = written(tmp_path / "model", **{"config.json": "{}"})
    (model / ".model.safetensors.partial-x1").write_text("")
    (model / ".tmp-checkpoint-5").mkdir()
    (model / ".results.json.lock").write_text("python (pid 1)")
    assert check_output_folder(model, OURS) == model
    release(model)


def test_a_full_disk_fails_with_enospc_and_keeps_the_earlier_file(tmp_path):
    with small_disk(tmp_path / "disk", "64k") as disk:
        target = disk / "out.de"
        target.write_text("earlier\n", encoding="utf-8")
        fill(disk, leave_bytes=8192)
        with pytest.raises(OSError) as raised, atomic_text(target) as handle:
            for _ in range(1000):
                handle.write("x" * 1000 + "\n")
        assert raised.value.errno == errno.ENOSPC
        assert target.read_text(encoding="utf-8") == "earlier\n"
        assert leftovers(disk) == []  # the partial file is gone, and its space with it


def test_a_folder_is_replaced_whole_or_not_at_all(tmp_path):
    target = tmp_path / "model"
    with staged_folder(target, OURS) as staged:
        (staged / "config.json").write_text("{}")
    assert listing(target) == ["config.json"]
    with pytest.raises(RuntimeError), staged_folder(target, OURS) as staged:
        (staged / "model.safetensors").write_bytes(b"partial")
        raise RuntimeError("interrupted")
    assert listing(target) == ["config.json"] and leftovers(tmp_path) == []
    with staged_folder(target, OURS) as staged:
        (staged / "model.safetensors").write_bytes(b"whole")
    assert listing(target) == ["model.safetensors"] and leftovers(tmp_path) == []


def test_a_set_of_files_on_a_disk_that_fills_midway_stays_the_earlier_set(tmp_path):
    with small_disk(tmp_path / "disk", "256k") as disk:
        target = written(disk / "maps", **{f"encoder_layer{n}.png": "earlier" for n in range(3)})
        before = contents(target)
        with pytest.raises(OSError) as raised, staged_folder(target, OURS) as staged:
            for n in range(3):
                (staged / f"encoder_layer{n}.png").write_bytes(b"x" * 100_000)  # the third does not fit
        assert raised.value.errno == errno.ENOSPC
        assert contents(target) == before and leftovers(disk) == []


def test_a_failure_names_the_file_the_writer_was_writing_not_the_last_one_on_disk(tmp_path):
    """Two files into one staged folder, the second by a library that names no file and deletes what it could not
    write (safetensors on a full disk): the file named is the one `writing` declares, not the first file, the last
    one left on disk (which the guess by what is on disk named)."""
    numpy = pytest.importorskip("numpy")
    from safetensors.numpy import save_file

    with small_disk(tmp_path / "disk", "256k") as disk:
        target = disk / "model"
        with pytest.raises(OSError) as raised, staged_folder(target, OURS) as staged:
            for name, values in (("first.safetensors", 1_000), ("second.safetensors", 100_000)):
                if name == "second.safetensors":
                    fill(disk, leave_bytes=8192)
                with writing(staged / name) as path:
                    save_file({"weight": numpy.zeros(values, dtype=numpy.float32)}, str(path))
        assert raised.value.errno == errno.ENOSPC
        assert raised.value.filename == str(target / "second.safetensors")
        assert sorted(path.name for path in disk.iterdir()) == ["filler"]


def test_each_of_two_outputs_written_at_once_names_its_own_failure(tmp_path):
    """Two outputs written at once (a translation and its scores), the second failing: the failure names the second
    output, whichever was opened last or written to last."""
    with small_disk(tmp_path / "disk", "64k") as disk:
        first, second = disk / "out.de", disk / "out.scores"
        with pytest.raises(OSError) as raised, atomic_text(first) as one, atomic_text(second) as two:
            one.write("x" * 1000)
            one.flush()
            fill(disk, leave_bytes=0)
            for _ in range(100):
                two.write("y" * 1000 + "\n")
                two.flush()
        assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(second)
        assert sorted(path.name for path in disk.iterdir()) == ["filler"]


def failing_in(written: Path, name: str) -> int:
    """Free bytes for a disk on which a write of the folder `written` again fails in its file `name`: room for every
    other file (tmpfs gives whole pages) and the output's lock file, and for half of `name`."""
    pages = {path.name: -(-path.stat().st_size // 4096) * 4096 for path in written.iterdir()}
    return sum(pages.values()) - pages[name] // 2 + 4096


def test_a_models_failure_in_its_weights_names_them_not_the_configuration_written_before(tmp_path):
    """save_pretrained writes config.json and generation_config.json, then the weights by safetensors, which names no
    file and deletes what it could not write: the failure names model.safetensors (the last file on disk, which the
    writer named before the weights were declared, is generation_config.json)."""
    model = tiny_model()
    plain = tmp_path / "plain"
    model.save_pretrained(plain)
    with small_disk(tmp_path / "disk", "1m") as disk:
        fill(disk, leave_bytes=failing_in(plain, "model.safetensors"))
        with pytest.raises(OSError) as raised:
            save_pretrained(disk / "model", OURS, model)
        assert raised.value.errno == errno.ENOSPC
        assert raised.value.filename == str(disk / "model" / "model.safetensors")
        assert "(os error 28)" in str(raised.value.__cause__.__cause__)  # safetensors' words: the weights failed
        assert sorted(path.name for path in disk.iterdir()) == ["filler"]


def test_a_python_files_failure_in_a_native_writers_call_names_that_file_not_the_declared_one(tmp_path):
    """A save declared as writing weights.safetensors natively fails earlier, in a JSON file it writes through
    Python's own file object: the failure names that file (left partial, the last on disk), not the weights."""
    with small_disk(tmp_path / "disk", "64k") as disk:
        target = disk / "model"
        with pytest.raises(OSError) as raised, staged_folder(target, OURS) as staged:
            fill(disk, leave_bytes=8192)
            with writing_natively(staged, "weights.safetensors"):
                (staged / "config.json").write_text("x" * 100_000)
        assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(target / "config.json")


def test_a_tokenizers_failure_in_tokenizer_json_names_it(tmp_path):
    """A fast tokenizer's save writes tokenizer.json by tokenizers (Rust), whose failure names no file."""
    words = {f"word{n}": n for n in range(3000)}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(words, unk_token="word0")))
    plain = tmp_path / "plain"
    tokenizer.save_pretrained(plain)
    with small_disk(tmp_path / "disk", "1m") as disk:
        (disk / "tokenizer").mkdir()
        fill(disk, leave_bytes=failing_in(plain, "tokenizer.json"))
        with pytest.raises(OSError) as raised:
            save_into(disk / "tokenizer", tokenizer)
        assert raised.value.errno == errno.ENOSPC
        assert raised.value.filename == str(disk / "tokenizer" / "tokenizer.json")
        assert "(os error 28)" in str(raised.value.__cause__.__cause__)  # tokenizers' words: the native write failed
        assert sorted(path.name for path in disk.iterdir()) == ["filler", "tokenizer"]


def test_a_figures_failure_names_the_png(tmp_path):
    """matplotlib writes through its own file object, which names no file on a full disk."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 8))
    figure.add_subplot().imshow(torch.rand(400, 400).numpy())
    with small_disk(tmp_path / "disk", "256k") as disk:
        fill(disk, leave_bytes=16384)
        with pytest.raises(OSError) as raised:
            save_figure(figure, disk / "attention.png", dpi=100)
        assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(disk / "attention.png")
        assert sorted(path.name for path in disk.iterdir()) == ["filler"]


def test_a_ctranslate2_exports_failure_in_model_bin_names_it(tmp_path):
    """CTranslate2's converter writes config.json and the vocabulary, then model.bin, through file objects that name
    no file on a full disk."""
    pytest.importorskip("ctranslate2")
    from modeling_vaswani.toolkit.interop.ctranslate2 import write_export

    model, vocabulary = tiny_model(), [f"token{n}" for n in range(61)]
    plain = tmp_path / "plain"
    plain.mkdir()
    write_export(model, vocabulary, plain, "float32")
    with small_disk(tmp_path / "disk", "1m") as disk:
        fill(disk, leave_bytes=failing_in(plain, "model.bin"))
        with pytest.raises(OSError) as raised, staged_folder(disk / "export", OURS) as staged:
            write_export(model, vocabulary, staged, "float32")
        assert raised.value.errno == errno.ENOSPC
        assert raised.value.filename == str(disk / "export" / "model.bin")
        assert sorted(path.name for path in disk.iterdir()) == ["filler"]


KILLED_WRITER = textwrap.dedent(
    """
    import os, signal, sys
    from modeling_vaswani.toolkit.outputs import Output, staged_folder
    with staged_folder(sys.argv[1], Output("vaswani-test", "--output")) as staged:
        (staged / "model.safetensors").write_bytes(b"half")
        if sys.argv[2] == "before-rename":
            os.kill(os.getpid(), signal.SIGKILL)
        import modeling_vaswani.toolkit.outputs.writers as outputs
        rename = outputs.Path.rename
        def killed_after_setting_aside(self, target):  # the earlier output set aside, the new one not yet in place
            rename(self, target)
            if str(target).endswith(".old"):
                os.kill(os.getpid(), signal.SIGKILL)
        if sys.argv[2] == "after-setting-aside":
            outputs.Path.rename = killed_after_setting_aside
        if sys.argv[2] == "while-deleting":  # the new output in place, the earlier one half deleted
            outputs.shutil.rmtree = lambda path, *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL)
    """
)


def killed_writer(target, moment):
    run = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(target), moment])
    assert run.returncode == -signal.SIGKILL


@pytest.mark.parametrize("moment", ["before-rename", "after-setting-aside"])
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_what_a_killed_writer_leaves_is_undone_by_the_next_run(tmp_path, moment):
    target = written(tmp_path / "model", **{"config.json": "earlier"})
    killed_writer(target, moment)
    assert leftovers(tmp_path)  # something was left: a partial folder, or the earlier output set aside
    recover(target)
    assert leftovers(tmp_path) == []
    assert (target / "config.json").read_text() == "earlier" and not (target / "model.safetensors").exists()


# ---------------------------------------------------------------------------------------------------------------------
# Known by its content: the marker
# ---------------------------------------------------------------------------------------------------------------------


def test_only_the_commands_own_earlier_output_may_be_replaced(tmp_path):
    model = written(tmp_path / "model", **{"config.json": "{}"})
    assert json.loads((model / MARKER).read_text()) == {"command": "vaswani-test", "files": ["config.json"]}
    assert check_output_folder(model, OURS) == model  # its own: replaced
    release(model)
    (model / "notes.txt").write_text("mine")
    (model / "runs").mkdir()
    with pytest.raises(OutputError) as raised:
        check_output_folder(model, OURS)
    assert str(raised.value) == (
        f"output folder {model} holds notes.txt, runs/, which vaswani-test did not write; expected a new or empty "
        "folder, or an earlier output of vaswani-test (replaced whole): choose another --output"
    )
    with pytest.raises(OutputError, match=r"holds notes\.txt, runs/"), staged_folder(model, OURS):
        pass  # a caller that did not check is refused too, before anything is touched
    assert listing(model) == ["config.json", "notes.txt", "runs"]
    (tmp_path / "file").write_text("")
    with pytest.raises(OutputError, match="is a file"):
        check_output_folder(tmp_path / "file", OURS)


def test_names_alone_never_make_an_output_the_commands(tmp_path):
    """A folder of exactly the names the command writes, but not written by it, is refused whole."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (theirs / name).write_text("theirs")
    with pytest.raises(
        OutputError, match=r"holds config\.json, model\.safetensors, tokenizer\.json, which vaswani-test"
    ):
        check_output_folder(theirs, OURS)
    forged = ({"command": "vaswani-test"}, {"command": "vaswani-test", "files": [["config.json"]]})
    for marker in ("not json", json.dumps(["vaswani-test"]), *map(json.dumps, forged)):
        (theirs / MARKER).write_text(marker)  # a marker that is not one counts for nothing
        with pytest.raises(OutputError, match="which vaswani-test did not write"):
            check_output_folder(theirs, OURS)
    assert contents(theirs)["config.json"] == b"theirs"


def test_another_commands_output_is_named_as_such(tmp_path):
    model = written(tmp_path / "model", **{"config.json": "{}"})
    other = Output("vaswani-other", "output folder")
    with pytest.raises(OutputError, match=r"\(it is an output of vaswani-test\); .*: choose another output folder"):
        check_output_folder(model, other)


def test_an_older_versions_output_is_known_only_by_content_only_this_package_writes(tmp_path):
    older = tmp_path / "older"
    older.mkdir()
    for name in ("model.safetensors", "tokenizer.json", "results.json", "test.hyp.de"):
        (older / name).write_text("")
    (older / "config.json").write_text(json.dumps({"model_type": "vaswani"}))
    assert check_output_folder(older, AVERAGED) == older  # an averaged model as versions before markers wrote it
    release(older)
    (older / "README.md").write_text("a card")  # none of ours wrote one
    with pytest.raises(OutputError, match=r"holds README\.md, config\.json, .*which vaswani-average did not write;"):
        check_output_folder(older, AVERAGED)
    (older / "README.md").unlink()
    (older / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(OutputError, match="which vaswani-average did not write"):
        check_output_folder(older, AVERAGED)
    (older / "config.json").write_text("{")
    with pytest.raises(OutputError, match="which vaswani-average did not write"):
        check_output_folder(older, AVERAGED)
    tokenizer = tmp_path / "tokenizer"  # anyone's tokenizer.json looks like ours: refused, saying how to go on
    tokenizer.mkdir()
    (tokenizer / "tokenizer.json").write_text("{}")
    with pytest.raises(OutputError, match=f"it has no {MARKER}: if an older version of vaswani-train-tokenizer"):
        check_output_folder(tokenizer, TRAINED_TOKENIZER)


FILE_INTO = "import sys\nfrom modeling_vaswani.toolkit.outputs import write_text\nwrite_text(sys.argv[1], 'x')\n"


def test_files_this_process_adds_join_the_marker_and_another_process_files_do_not(tmp_path):
    from modeling_vaswani.toolkit.outputs import save_into

    class Tokenizer:
        def save_pretrained(self, folder):
            (folder / "tokenizer.json").write_text("{}")

    model = written(tmp_path / "model", **{"model.safetensors": ""})
    write_text(model / "results.json", "{}")  # as vaswani-train adds its results beside its averaged model
    save_into(model, Tokenizer())
    assert json.loads((model / MARKER).read_text())["files"] == ["model.safetensors", "results.json", "tokenizer.json"]
    assert check_output_folder(model, OURS) == model
    release(model)
    subprocess.run([sys.executable, "-c", FILE_INTO, str(model / "mine.de")], check=True, env=ENV)  # a user's
    with pytest.raises(OutputError, match=r"holds mine\.de, which vaswani-test did not write"):
        check_output_folder(model, OURS)


def test_a_working_folder_is_checked_by_the_names_its_command_writes(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoint-5").mkdir(parents=True)
    (run / ".run.partial-1").mkdir()
    assert check_working_folder(run, ("checkpoint-*/",), "vaswani-train") == run
    release(run)
    (run / "thesis.tex").write_text("mine")
    with pytest.raises(OutputError, match=r"holds thesis\.tex, which vaswani-train does not write"):
        check_working_folder(run, ("checkpoint-*/",), "vaswani-train")


def test_a_read_only_or_too_small_disk_is_refused_before_any_work(tmp_path):
    with small_disk(tmp_path / "ro", "64k", read_only=True) as disk:
        with pytest.raises(OutputError, match="Read-only file system; expected a writable folder"):
            check_output_folder(disk / "model", AVERAGED)
    with small_disk(tmp_path / "small", "64k") as disk:
        with pytest.raises(OutputError, match=r"needs about 1\.0 MB but .* has 0\.1 MB free"):
            check_output_folder(disk / "model", AVERAGED, need_bytes=10**6)
        assert leftovers(disk) == []  # no lock left behind by a refusal
    assert os.access(tmp_path, os.W_OK)


# ---------------------------------------------------------------------------------------------------------------------
# Devices, FIFOs, sockets, descriptors: written in place, never renamed over
# ---------------------------------------------------------------------------------------------------------------------


def test_dev_null_stays_a_character_device(tmp_path):
    before = os.stat("/dev/null")
    assert stat.S_ISCHR(before.st_mode)
    check_output_file("/dev/null")
    write_text("/dev/null", "translations\n")
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)
    assert not [name for name in os.listdir("/dev") if name.startswith(".null.")]


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_a_character_device_of_our_own_is_written_in_place(tmp_path):
    """A /dev/null of our own in tmp_path (the real one is tested above): root may rename over it, so it is where the
    old writer did its damage."""
    device = tmp_path / "null"
    os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    check_output_file(device)
    write_text(device, "translations\n")
    assert stat.S_ISCHR(os.stat(device).st_mode) and os.listdir(tmp_path) == ["null"]


def test_a_fifo_is_written_in_place_and_its_reader_gets_the_text(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()), daemon=True)
    reader.start()
    check_output_file(fifo)
    writer = threading.Thread(target=write_text, args=(fifo, "a line\n"), daemon=True)
    writer.start()
    writer.join(timeout=10)
    reader.join(timeout=10)  # where the FIFO was renamed over, its reader waits on forever (a daemon thread)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and received == ["a line\n"] and os.listdir(tmp_path) == ["fifo"]


def test_a_socket_is_never_renamed_over(tmp_path):
    path = tmp_path / "socket"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    try:
        with pytest.raises(OutputError, match="socket is a socket; expected a file, a device or a FIFO to write"):
            check_output_file(path)  # refused before the work
        with pytest.raises(OSError) as raised:
            write_text(path, "text")  # a socket cannot be opened as a file: named, and left as it is
        assert raised.value.filename == str(path)
        assert stat.S_ISSOCK(os.stat(path).st_mode) and os.listdir(tmp_path) == ["socket"]
    finally:
        server.close()


HOLDER_EXITS = textwrap.dedent(
    """
    import os, sys
    from modeling_vaswani.toolkit.outputs import check_output_file
    check_output_file(sys.argv[1], command="vaswani-test")  # its lock held until the process ends
    child = os.fork()
    if child == 0:
        sys.exit(0)  # the child's copy of the held locks is not its own to give back
    os.waitpid(child, 0)
    print(sorted(os.listdir(os.path.dirname(sys.argv[1]))))
    """
)


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-27): a fresh process imports transformers
def test_a_lock_held_until_the_process_ends_is_given_back_at_its_exit_not_at_a_forked_childs(tmp_path):
    target = tmp_path / "out.de"
    run = subprocess.run([sys.executable, "-c", HOLDER_EXITS, str(target)], capture_output=True, text=True, env=ENV)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == str([".out.de.lock"])  # still there after the child ended
    assert os.listdir(tmp_path) == []  # given back when the holder exited


STDOUT_WRITER = "from modeling_vaswani.toolkit.outputs import write_text\nwrite_text('/dev/stdout', 'through\\n')\n"


@pytest.mark.parametrize("into", ["pipe", "file"])
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_dev_stdout_is_written_in_place_into_a_pipe_or_a_file(tmp_path, into):
    if into == "pipe":
        run = subprocess.run([sys.executable, "-c", STDOUT_WRITER], capture_output=True, text=True, env=ENV)
        assert run.returncode == 0 and run.stdout == "through\n", run.stderr
        return
    log = tmp_path / "log.txt"
    with open(log, "w") as handle:  # `> log.txt`, which another program may follow (tail -f) by its inode
        subprocess.run([sys.executable, "-c", STDOUT_WRITER], stdout=handle, check=True, env=ENV)
        inode = os.fstat(handle.fileno()).st_ino
    assert log.read_text() == "through\n" and log.stat().st_ino == inode and os.listdir(tmp_path) == ["log.txt"]


# ---------------------------------------------------------------------------------------------------------------------
# One writer per output
# ---------------------------------------------------------------------------------------------------------------------

HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from modeling_vaswani.toolkit.outputs import Output, staged_folder
    with staged_folder(sys.argv[1], Output("vaswani-first", "--output")) as staged:
        (staged / "model.safetensors").write_text("first")
        Path(sys.argv[2]).write_text("writing")
        time.sleep(float(sys.argv[3]))
    """
)


def holder(target, signal_file, seconds):
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(target), str(signal_file), str(seconds)], env=ENV)
    deadline = time.monotonic() + 60
    while not signal_file.exists():
        assert process.poll() is None and time.monotonic() < deadline, "the first writer did not start"
        time.sleep(0.05)
    return process


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_a_second_writer_is_refused_naming_the_first_and_the_first_finishes_whole(tmp_path):
    target = tmp_path / "model"
    first = holder(target, tmp_path / "started", 3)
    try:
        expected = f"another vaswani-first (pid {first.pid}) is writing {target}; expected one writer at a time"
        for attempt in (
            lambda: check_output_folder(target, OURS),
            lambda: written(target, **{"x": ""}),
            lambda: recover(target),
            lambda: check_output_file(target),
        ):
            with pytest.raises(OutputError, match=expected.replace("(", r"\(").replace(")", r"\)")):
                attempt()
    finally:
        assert first.wait(timeout=60) == 0
    assert listing(target) == ["model.safetensors"] and (target / "model.safetensors").read_text() == "first"
    assert leftovers(tmp_path) == []  # the lock file goes with its writer


def test_a_lock_left_by_a_killed_writer_blocks_nobody(tmp_path):
    target = tmp_path / "model"
    first = holder(target, tmp_path / "started", 60)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=60)
    assert ".model.lock" in leftovers(tmp_path)  # its file stays; its lock went with the process
    written(target, **{"config.json": "second"})
    assert listing(target) == ["config.json"] and leftovers(tmp_path) == []


def test_a_claim_is_held_from_the_check_to_the_end_of_the_write(tmp_path):
    target = tmp_path / "out.de"
    check_output_file(target)
    assert (tmp_path / ".out.de.lock").read_text().endswith(f"(pid {os.getpid()})\n")
    assert claim(target) is False  # this process holds it already
    write_text(target, "x")
    assert leftovers(tmp_path) == []  # released with the write


# ---------------------------------------------------------------------------------------------------------------------
# A reader that finds an output set aside
# ---------------------------------------------------------------------------------------------------------------------


def test_a_reader_restores_an_output_a_killed_run_set_aside_and_says_so(tmp_path, caplog):
    target = written(tmp_path / "model", **{"config.json": "earlier"})
    killed_writer(target, "after-setting-aside")
    assert not target.exists() and (tmp_path / ".model.old").is_dir()
    with caplog.at_level(logging.WARNING, logger="modeling_vaswani.toolkit.outputs"):
        restore_set_aside(target)
    assert f"restored {target} from {tmp_path / '.model.old'}, where a run killed while replacing it" in caplog.text
    assert (target / "config.json").read_text() == "earlier"
    assert leftovers(tmp_path) == []


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-27): a killed writer, a fresh process
def test_a_reader_is_told_how_to_restore_what_it_cannot_restore(tmp_path):
    with small_disk(tmp_path / "disk", "64k") as disk:
        killed_writer(written(disk / "model", **{"config.json": "earlier"}), "after-setting-aside")
        remounted = subprocess.run(["mount", "-o", "remount,ro", str(disk)], capture_output=True)
        if remounted.returncode != 0:
            pytest.skip(f"cannot remount read-only: {remounted.stderr.decode().strip()}")
        with pytest.raises(OutputError) as raised:
            restore_set_aside(disk / "model")
        assert str(raised.value) == (
            f"{disk / 'model'} is missing: a run killed while replacing it left the earlier one as "
            f"{disk / '.model.old'}, which cannot be restored here (Read-only file system); rename "
            f"{disk / '.model.old'} to {disk / 'model'} to restore it"
        )


def test_a_reader_touches_nothing_when_the_output_is_there(tmp_path, monkeypatch):
    target = written(tmp_path / "model", **{"config.json": "{}"})
    (tmp_path / ".model.partial-x").mkdir()  # perhaps a live writer's: not a reader's to remove
    restore_set_aside(target)
    restore_set_aside(tmp_path / "user" / "hub-model")  # a Hub id: nothing there at all
    monkeypatch.chdir(target)
    for name in (".", "/"):  # `vaswani-translate .` in a model folder: no name to put aside, nothing to restore
        restore_set_aside(name)
    assert leftovers(tmp_path) == [".model.partial-x"]


def test_model_output_names_no_readme(tmp_path):
    """No command of ours writes a README.md into a model folder: one there is a user's (or a Hub card)."""
    assert "README.md" not in MODEL_OUTPUT


# ---------------------------------------------------------------------------------------------------------------------
# Issue 51: only what the package itself set aside is removed or restored (item 1)
# ---------------------------------------------------------------------------------------------------------------------


def test_a_users_copy_named_like_a_set_aside_is_refused_by_name_and_kept(tmp_path):
    target = written(tmp_path / "model", **{"config.json": "earlier"})
    shutil.copytree(target, tmp_path / ".model.old")  # `cp -r model .model.old`: a backup
    (tmp_path / ".model.old" / "mine.txt").write_text("mine")
    backup = contents(tmp_path / ".model.old")
    for attempt in (lambda: check_output_folder(target, OURS), lambda: written(target, **{"config.json": "new"})):
        with pytest.raises(OutputError, match=r"\.model\.old is in the way: vaswani-test sets .* move or delete"):
            attempt()
    assert contents(tmp_path / ".model.old") == backup and (target / "config.json").read_text() == "earlier"
    write_text(tmp_path / "out.de", "x")  # a file is replaced in one rename: a `.out.de.old` is never its business
    (tmp_path / ".out.de.old").mkdir()
    (tmp_path / ".out.de.old" / "mine.txt").write_text("mine")
    write_text(tmp_path / "out.de", "y")
    assert (tmp_path / ".out.de.old" / "mine.txt").read_text() == "mine"


def test_a_set_aside_that_is_a_link_to_the_users_folder_is_never_followed_nor_restored(tmp_path):
    users = tmp_path / "users"
    users.mkdir()
    (users / "thesis.tex").write_text("years of work")
    (tmp_path / ".model.old").symlink_to(users)
    restore_set_aside(tmp_path / "model")  # a reader: "model" missing beside a .model.old no run of ours made
    assert not (tmp_path / "model").exists() and (tmp_path / ".model.old").is_symlink()
    written(tmp_path / "model", **{"config.json": "first"})  # a new output needs no set-aside: written
    with pytest.raises(OutputError, match=r"\.model\.old is in the way"):
        written(tmp_path / "model", **{"config.json": "second"})
    assert (users / "thesis.tex").read_text() == "years of work" and (tmp_path / ".model.old").is_symlink()


def test_a_killed_runs_record_undoes_only_the_very_folder_it_made(tmp_path):
    target = written(tmp_path / "model", **{"config.json": "earlier"})
    killed_writer(target, "after-setting-aside")
    (tmp_path / ".model.old").rename(target)  # the user restored it by hand, then made a copy of their own there
    shutil.copytree(target, tmp_path / ".model.old")
    partial = next(name for name in leftovers(tmp_path) if ".partial-" in name)
    recover(target)  # the partial it recorded goes; the copy, another inode, stays
    assert not (tmp_path / partial).exists() and (tmp_path / ".model.old" / "config.json").read_text() == "earlier"
    assert (target / "config.json").read_text() == "earlier"


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-27): a killed writer, a fresh process
def test_a_backup_made_after_a_run_killed_while_deleting_is_never_taken_for_its_leftover(tmp_path):
    target = written(tmp_path / "model", **{"config.json": "earlier"})
    killed_writer(target, "while-deleting")
    assert (target / "model.safetensors").read_text() == "half"  # the new output is in place
    assert not (tmp_path / ".model.old").exists()  # the earlier one left under a name of its own, recorded
    for name in leftovers(tmp_path):
        if ".partial-" in name:
            shutil.rmtree(tmp_path / name)  # the user cleans up by hand, then backs the model up
    shutil.copytree(target, tmp_path / ".model.old")
    recover(target)
    assert (tmp_path / ".model.old" / "model.safetensors").read_text() == "half"
    assert leftovers(tmp_path) == [".model.old"]


@pytest.mark.parametrize("kind", ["symlink", "fifo", "folder"])
def test_a_partial_name_someone_else_made_is_left_alone(tmp_path, kind):
    target = tmp_path / "out.de"
    foreign = tmp_path / ".out.de.partial-abcd1234"
    {"symlink": lambda: foreign.symlink_to(tmp_path / "victim"), "fifo": lambda: os.mkfifo(foreign),
     "folder": foreign.mkdir}[kind]()  # fmt: skip
    (tmp_path / "victim").write_text("precious")
    write_text(target, "x")
    recover(target)
    assert os.path.lexists(foreign) and (tmp_path / "victim").read_text() == "precious"


# ---------------------------------------------------------------------------------------------------------------------
# Issue 51: what the package opens beside an output is never followed through a link (item 2)
# ---------------------------------------------------------------------------------------------------------------------


def lock_made_by_someone_else(lock, kind, victim):
    if kind == "symlink":
        lock.symlink_to(victim)
    elif kind == "hard link":
        os.link(victim, lock)
    elif kind == "fifo":
        os.mkfifo(lock)
    elif kind == "folder":
        lock.mkdir()
        (lock / "inside.txt").write_text("mine")
    else:
        lock.write_text("my notes about out.de\n")


@pytest.mark.parametrize("kind", ["symlink", "hard link", "fifo", "folder", "other content"])
def test_a_lock_name_that_is_not_a_lock_file_of_ours_is_refused_by_name_and_left(tmp_path, kind):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    lock = tmp_path / ".out.de.lock"
    lock_made_by_someone_else(lock, kind, victim)
    for attempt in (lambda: check_output_file(tmp_path / "out.de"), lambda: write_text(tmp_path / "out.de", "x")):
        with pytest.raises(OutputError, match=f"{lock} is .*, not a lock file of this package"):
            attempt()
    assert victim.read_text() == "precious" and os.path.lexists(lock) and not (tmp_path / "out.de").exists()


def test_a_marker_that_is_a_fifo_is_read_as_damaged_never_waited_on(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    os.mkfifo(folder / MARKER)  # reading it would wait for a writer that never comes
    with pytest.raises(OutputError, match=f"its {MARKER} is damaged"):
        check_output_folder(folder, OURS)


# ---------------------------------------------------------------------------------------------------------------------
# Issue 51: an output is never an input, by inode (item 3), and its path is resolved once (item 13)
# ---------------------------------------------------------------------------------------------------------------------


def test_an_output_that_is_an_input_under_another_name_is_refused(tmp_path):
    source = tmp_path / "in.en"
    source.write_text("A man.\n")
    os.link(source, tmp_path / "hard.en")
    (tmp_path / "soft.en").symlink_to(source)
    for name in ("hard.en", "soft.en"):
        with pytest.raises(OutputError, match=f"--output {tmp_path / name} is also an input \\({source}\\)"):
            check_not_input(tmp_path / name, [None, source])
    with open(source) as opened:  # /dev/fd/N of a file given by path (`3<in.en`)
        with pytest.raises(OutputError, match="is also an input"):
            check_not_input(f"/dev/fd/{opened.fileno()}", [source])
    check_not_input(tmp_path / "other.de", [source])  # nothing there yet
    check_not_input("/dev/null", ["/dev/null"])  # a device loses nothing read from it


def test_a_folder_output_holding_an_input_is_refused(tmp_path):
    (tmp_path / "run" / "checkpoint-1").mkdir(parents=True)
    (tmp_path / "elsewhere").symlink_to(tmp_path / "run" / "checkpoint-1")
    with pytest.raises(OutputError, match=f"--output {tmp_path / 'run'} holds an input"):
        check_output_folder(tmp_path / "run", OURS, inputs=[tmp_path / "elsewhere"])
    assert leftovers(tmp_path) == []
    check_not_input(tmp_path / "run", [tmp_path / "run" / "user" / "hub-model"])  # a Hub id, not a file in it


STDIN_CHECK = textwrap.dedent(
    """
    import os, sys
    from modeling_vaswani.toolkit.outputs import OutputError, check_not_input
    for stdin, *names in ((sys.argv[1], "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0", sys.argv[1]),
                          (os.devnull, "/dev/stdin")):
        os.dup2(os.open(stdin, os.O_RDONLY), 0)  # `< in.en`, then `< /dev/null`
        for name in names:
            try:
                check_not_input(name, [], reads_stdin=True)
                print("allowed", name)
            except OutputError as error:
                print(error)
    """
)


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-27): a fresh process imports transformers
def test_standard_input_is_refused_as_an_output_whatever_names_it(tmp_path):
    source = tmp_path / "in.en"
    source.write_text("A man.\n")
    run = subprocess.run([sys.executable, "-c", STDIN_CHECK, str(source)], capture_output=True, text=True, env=ENV)
    refusals = [
        f"--output {name} is standard input, which the command reads; expected another file, since writing it would "
        "destroy that input"
        for name in ("/dev/stdin", "/dev/fd/0", "/proc/self/fd/0", str(source))
    ]
    # /dev/null (as a terminal) is read and written at once: writing it destroys nothing read from it
    assert run.stdout.splitlines() == [*refusals, "allowed /dev/stdin"], run.stderr
    assert source.read_text() == "A man.\n"


def test_a_loop_of_links_is_one_refusal_from_every_check(tmp_path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    for name in ("loop", "a"):
        path = tmp_path / name
        for check in (
            resolve_output,
            lambda path: check_not_input(path, [tmp_path / "in.en"]),
            check_output_file,
            lambda path: check_output_folder(path, OURS),
            lambda path: write_text(path, "x"),
        ):
            with pytest.raises(OutputError, match=f"^{path} is a symbolic link that cannot be followed \\(its links"):
                check(path)


# ---------------------------------------------------------------------------------------------------------------------
# Issue 51: a refusal names first what the command never writes (item 14)
# ---------------------------------------------------------------------------------------------------------------------


@given(st.lists(st.sampled_from(MODEL_OUTPUT_NAMES), min_size=0, max_size=12, unique=True))
def test_a_users_file_is_named_first_among_a_damaged_outputs_files(model_files):
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        for name in [*model_files, "notes.txt"]:
            (folder / name).write_text("x")
        (folder / MARKER).write_text("{damaged")
        with pytest.raises(OutputError) as raised:
            check_owned(folder, AVERAGED)
        assert str(raised.value).startswith(f"output folder {folder} holds notes.txt")
        assert f"(its {MARKER} is damaged" in str(raised.value)


# ---------------------------------------------------------------------------------------------------------------------
# Issue 51: names beside an output fit, whatever the output's name (hostile names for items 1 and 2)
# ---------------------------------------------------------------------------------------------------------------------


def fit(name: str) -> str:
    """`name` cut, by characters, to the 255 bytes a file name may have."""
    while len(os.fsencode(name)) > 255:
        name = name[:-1]
    return name


NAMES = st.builds(
    lambda text, padding: fit(text + "é" * padding),  # up to the longest names, in two-byte characters too
    st.text(st.characters(blacklist_characters="/\0", blacklist_categories=("Cs",)), min_size=1),
    st.sampled_from([0, 60, 120, 130, 200]),
).filter(lambda name: name not in (".", ".."))


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-27): 200 examples, each four writes
@given(NAMES)
def test_any_name_an_output_may_have_is_written_replaced_and_leaves_nothing(name):
    with tempfile.TemporaryDirectory() as folder:
        files, models = Path(folder) / "files", Path(folder) / "models"
        files.mkdir()
        for text in ("first", "second"):
            write_text(files / name, text)
            written(models / name, **{"config.json": text})
        assert (files / name).read_text() == "second" and (models / name / "config.json").read_text() == "second"
        assert os.listdir(files) == [name] and os.listdir(models) == [name]


def test_the_longest_names_keep_their_locks_apart(tmp_path):
    first, second = "a" * 254 + "1", "a" * 254 + "2"
    check_output_file(tmp_path / first)
    check_output_file(tmp_path / second)  # a lock of its own, not the first one's
    locks = [name for name in leftovers(tmp_path) if name.endswith(".lock")]
    assert len(locks) == 2 and all(len(os.fsencode(lock)) <= 255 for lock in locks)
    release(tmp_path / first)
    release(tmp_path / second)


# ---------------------------------------------------------------------------------------------------------------------
# Issue 51: what is written takes the umask's mode, whatever wrote it (item 20)
# ---------------------------------------------------------------------------------------------------------------------

MODES = textwrap.dedent(
    """
    import json, os, shutil, stat, sys
    from pathlib import Path
    import torch
    from safetensors.torch import save_file
    from tokenizers import Tokenizer, models
    from modeling_vaswani.toolkit.outputs import Output, move_files_into, staged_folder, write_text
    for umask in (0o022, 0o077, 0o002):
        os.umask(umask)  # after the import: the writer must see the umask of the moment
        root = Path(sys.argv[1]) / oct(umask)
        root.mkdir()
        with open(root / "opened", "w"):
            pass
        (root / "made").mkdir()
        private = root / "private"
        private.write_text("0600")
        private.chmod(0o600)
        with staged_folder(root / "out", Output("vaswani-test", "--output")) as staged:
            save_file({"w": torch.zeros(1)}, staged / "model.safetensors")
            Tokenizer(models.BPE()).save(str(staged / "tokenizer.json"))
            shutil.copy2(private, staged / "copied")
            (staged / "sub").mkdir(mode=0o700)
            (staged / "sub" / "inner").write_text("x")
        write_text(root / "text", "x")
        (root / "moving").mkdir()
        save_file({"w": torch.zeros(1)}, root / "moving" / "model.safetensors")
        (root / "into").mkdir()
        move_files_into(root / "moving", root / "into")
    top = Path(sys.argv[1])
    print(json.dumps({str(path.relative_to(top)): stat.S_IMODE(path.stat().st_mode) for path in top.rglob("*")}))
    """
)


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-27): a fresh process imports torch
def test_every_file_and_folder_written_takes_the_mode_the_umask_gives(tmp_path):
    run = subprocess.run([sys.executable, "-c", MODES, str(tmp_path)], capture_output=True, text=True, env=ENV)
    assert run.returncode == 0, run.stderr
    every = json.loads(run.stdout)
    for umask in (0o022, 0o077, 0o002):
        modes = {name.split("/", 1)[1]: mode for name, mode in every.items() if name.startswith(f"{oct(umask)}/")}
        file_mode, folder_mode = modes.pop("opened"), modes.pop("made")
        assert (file_mode, folder_mode) == (0o666 & ~umask, 0o777 & ~umask)  # what open() and mkdir() give
        modes.pop("private")
        folders = {"out", "out/sub", "into"}
        assert modes == {name: folder_mode if name in folders else file_mode for name in modes}, oct(umask)
        assert set(modes) >= {"out/model.safetensors", "out/tokenizer.json", "out/copied", "out/sub/inner", "text",
                              "into/model.safetensors", f"out/{MARKER}"}  # fmt: skip


# --- a library call refused after its output check gives its lock back (helper B's finding, issue 54 round) ---

OTHER_WRITER = "import sys\nfrom modeling_vaswani.toolkit.outputs import claim\nprint(claim(sys.argv[1], 'other'))\n"


def test_a_refusal_after_the_output_check_gives_back_the_lock_it_took_and_keeps_one_held_before(tmp_path):
    """Inside released_on_failure, a check takes the folder's lock, then the work is refused: the lock file is gone
    and another process can take it at once (before: held, and its file left, until this process ended); a lock this
    process held before the block stays held; where the block succeeds its lock stays for the write to end."""
    kept, target = tmp_path / "kept", tmp_path / "model"
    check_output_folder(kept, OURS)
    with pytest.raises(ValueError, match="refused"), released_on_failure():
        check_output_folder(target, OURS)
        check_output_folder(kept, OURS)  # held already: not this block's to give back
        assert (tmp_path / ".model.lock").exists()
        raise ValueError("refused after the check")
    assert sorted(os.listdir(tmp_path)) == [".kept.lock"]
    other = subprocess.run([sys.executable, "-c", OTHER_WRITER, str(target)], capture_output=True, text=True, env=ENV)
    assert other.stdout.strip() == "True", other.stderr  # the other writer took it
    with released_on_failure():
        check_output_folder(target, OURS)
    assert (tmp_path / ".model.lock").exists(), "a check that is not refused keeps its lock for the write"
    release(target)
    release(kept)


def test_an_export_refused_after_its_output_check_leaves_no_lock(tmp_path):
    """vaswani-export-marian's library call on a checkpoint with learned positions (row E, which Marian cannot hold):
    refused after the output folder was checked and locked; nothing of the output remains, not even its lock."""
    from modeling_vaswani import VaswaniConfig, VaswaniForConditionalGeneration
    from modeling_vaswani.toolkit.interop.convert import ConversionError
    from modeling_vaswani.toolkit.interop.marian_export import export_marian

    config = VaswaniConfig(vocab_size=40, d_model=16, d_ff=32, num_heads=2, encoder_layers=1, decoder_layers=1,
                           position_embedding_type="learned")  # fmt: skip
    VaswaniForConditionalGeneration(config).save_pretrained(tmp_path / "checkpoint")
    with pytest.raises(ConversionError, match="position"):
        export_marian(str(tmp_path / "checkpoint"), tmp_path / "marian")
    assert sorted(os.listdir(tmp_path)) == ["checkpoint"]
