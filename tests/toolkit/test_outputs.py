"""The one atomic writer (toolkit/outputs.py) on real disks: a full tmpfs, a read-only one, and a writer killed with
SIGKILL in the middle of its work."""

import errno
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from helpers.small_disk import fill, small_disk

from modeling_vaswani.toolkit.outputs import (
    MODEL_OUTPUT,
    OutputError,
    atomic_text,
    check_output_folder,
    recover,
    staged_folder,
    write_text,
)


def leftovers(folder):
    return sorted(path.name for path in folder.iterdir() if path.name.startswith("."))


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


def test_new_files_and_folders_get_the_permissions_open_and_mkdir_give(tmp_path):
    write_text(tmp_path / "written", "x")
    with open(tmp_path / "opened", "w") as handle:
        handle.write("x")
    assert (tmp_path / "written").stat().st_mode == (tmp_path / "opened").stat().st_mode
    with staged_folder(tmp_path / "staged"):
        pass
    (tmp_path / "made").mkdir()
    assert (tmp_path / "staged").stat().st_mode == (tmp_path / "made").stat().st_mode


def test_a_killed_runs_leftovers_do_not_make_an_output_foreign(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    (tmp_path / "model" / ".model.safetensors.partial-x1").write_text("")
    (tmp_path / "model" / ".tmp-checkpoint-5").mkdir()
    assert check_output_folder(tmp_path / "model", MODEL_OUTPUT, "vaswani-average") == tmp_path / "model"


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
    with staged_folder(target) as staged:
        (staged / "config.json").write_text("{}")
    assert sorted(path.name for path in target.iterdir()) == ["config.json"]
    with pytest.raises(RuntimeError), staged_folder(target) as staged:
        (staged / "model.safetensors").write_bytes(b"partial")
        raise RuntimeError("interrupted")
    assert sorted(path.name for path in target.iterdir()) == ["config.json"] and leftovers(tmp_path) == []
    with staged_folder(target) as staged:
        (staged / "model.safetensors").write_bytes(b"whole")
    assert sorted(path.name for path in target.iterdir()) == ["model.safetensors"] and leftovers(tmp_path) == []


KILLED_WRITER = textwrap.dedent(
    """
    import os, signal, sys
    from modeling_vaswani.toolkit.outputs import staged_folder
    with staged_folder(sys.argv[1]) as staged:
        (staged / "model.safetensors").write_bytes(b"half")
        if sys.argv[2] == "before-rename":
            os.kill(os.getpid(), signal.SIGKILL)
        import modeling_vaswani.toolkit.outputs as outputs
        rename = outputs.Path.rename
        def killed_after_setting_aside(self, target):  # the earlier output set aside, the new one not yet in place
            rename(self, target)
            if str(target).endswith(".old"):
                os.kill(os.getpid(), signal.SIGKILL)
        outputs.Path.rename = killed_after_setting_aside
    """
)


@pytest.mark.parametrize("moment", ["before-rename", "after-setting-aside"])
def test_what_a_killed_writer_leaves_is_undone_by_the_next_run(tmp_path, moment):
    target = tmp_path / "model"
    target.mkdir()
    (target / "config.json").write_text("earlier")
    run = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(target), moment])
    assert run.returncode == -signal.SIGKILL
    assert leftovers(tmp_path)  # something was left: a partial folder, or the earlier output set aside
    recover(target)
    assert leftovers(tmp_path) == []
    assert (target / "config.json").read_text() == "earlier" and not (target / "model.safetensors").exists()


def test_only_the_commands_own_earlier_output_may_be_replaced(tmp_path):
    notes = tmp_path / "my_notes"
    notes.mkdir()
    (notes / "notes.txt").write_text("mine")
    (notes / "config.json").write_text("{}")
    with pytest.raises(OutputError, match=r"my_notes holds notes\.txt, which vaswani-average does not write"):
        check_output_folder(notes, MODEL_OUTPUT, "vaswani-average")
    (notes / "notes.txt").unlink()
    (notes / "runs").mkdir()
    with pytest.raises(OutputError, match=r"holds runs/"):
        check_output_folder(notes, MODEL_OUTPUT, "vaswani-average")
    (notes / "runs").rmdir()
    assert check_output_folder(notes, MODEL_OUTPUT, "vaswani-average") == notes  # an earlier model folder
    (tmp_path / "file").write_text("")
    with pytest.raises(OutputError, match="is a file"):
        check_output_folder(tmp_path / "file", MODEL_OUTPUT, "vaswani-average")


def test_a_read_only_or_too_small_disk_is_refused_before_any_work(tmp_path):
    with small_disk(tmp_path / "ro", "64k", read_only=True) as disk:
        with pytest.raises(OutputError, match="Read-only file system; expected a writable folder"):
            check_output_folder(disk / "model", MODEL_OUTPUT, "vaswani-average")
    with small_disk(tmp_path / "small", "64k") as disk:
        with pytest.raises(OutputError, match=r"needs about 1\.0 MB but .* has 0\.1 MB free"):
            check_output_folder(disk / "model", MODEL_OUTPUT, "vaswani-average", need_bytes=10**6)
    assert os.access(tmp_path, os.W_OK)
