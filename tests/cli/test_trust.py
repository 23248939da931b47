"""Issue 28, replayed: what a hostile but realistic user met below the commands' own checks, each case now a clear
error (exit 2, one line naming the value) that loses nothing. The commands run through their `main(argv)` as the
console scripts call it; full and read-only disks are real tmpfs mounts, killed runs are killed with SIGKILL.
(Converter, training-data and `generate()` cases live beside their rooms' tests.)"""

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest
import torch
from helpers.refusals import files, refused
from helpers.small_disk import fill, small_disk
from helpers.training_setup import TESTS, tiny_checkpoint
from safetensors.torch import load_file, save_file

from modeling_vaswani.toolkit.cli import average, export_ctranslate2, export_marian, plot_attention, train, translate
from modeling_vaswani.toolkit.cli.shell import ENVIRONMENT_ERRNOS

FAST = ["--num_beams", "1", "--max_new_tokens", "4"]


@pytest.fixture
def copy(checkpoint, tmp_path):
    return shutil.copytree(checkpoint, tmp_path / "model")


# ---------------------------------------------------------------------------------------------------------------------
# Data loss and silent corruption
# ---------------------------------------------------------------------------------------------------------------------


def test_average_into_a_folder_of_the_users_files_is_refused_and_they_stay(copy, tmp_path, capsys):
    notes = tmp_path / "my_notes"
    notes.mkdir()
    (notes / "notes.txt").write_text("mine")
    (notes / "plan.md").write_text("also mine")
    before = files(notes)
    second = shutil.copytree(copy, tmp_path / "model-2")
    error = refused(average.main, [copy, second, "--output", notes], capsys)
    assert error == (
        f"vaswani-average: error: output folder {notes} holds notes.txt, plan.md, which vaswani-average did not "
        "write; expected a new or empty folder, or an earlier output of vaswani-average (replaced whole): choose "
        "another --output"
    )
    assert files(notes) == before


def test_average_of_checkpoints_with_different_vocabularies_is_refused(tmp_path, capsys):
    german = tiny_checkpoint(tmp_path / "en-de", lines=500)
    french = tiny_checkpoint(tmp_path / "en-fr", lines=500, languages=("en", "fr"))
    assert json.loads((german / "config.json").read_text())["vocab_size"] == 400
    assert json.loads((french / "config.json").read_text())["vocab_size"] == 400  # the same shapes
    error = refused(average.main, [german, french, "--output", tmp_path / "averaged"], capsys)
    assert f"{german} and {french} have different tokenizers: id " in error
    assert "expected checkpoints of one model (one vocabulary)" in error
    assert not (tmp_path / "averaged").exists()


def test_translate_output_on_a_disk_too_small_is_refused_before_work_and_the_earlier_file_stays(
    checkpoint, source, tmp_path, capsys
):
    with small_disk(tmp_path / "disk", "64k") as disk:
        output = disk / "out.de"
        output.write_text("earlier translation\n", encoding="utf-8")
        fill(disk, leave_bytes=0)
        error = refused(translate.main, [checkpoint, "--input", source, "--output", output, *FAST], capsys)
        assert f"--output {output}" not in error and f"{output} needs about" in error and "free" in error
        assert output.read_text(encoding="utf-8") == "earlier translation\n"
        assert sorted(path.name for path in disk.iterdir()) == ["filler", "out.de"]


DISK_FULL_WHILE_WRITING = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from modeling_vaswani.toolkit.cli import translate
    from helpers.small_disk import fill
    # Full only once the translations are done: the disk's room is checked before the work, so take it away after.
    write = translate.write
    def write_on_a_full_disk(translations, output):
        fill(Path(output).parent, leave_bytes=0)
        write(translations * 2000, output)
    translate.write = write_on_a_full_disk
    translate.main(sys.argv[1:])
    """
)


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_a_disk_that_fills_while_translate_writes_keeps_the_earlier_file_and_says_so(checkpoint, source, tmp_path):
    with small_disk(tmp_path / "disk", "256k") as disk:
        output = disk / "out.de"
        output.write_text("earlier translation\n", encoding="utf-8")
        argv = [str(checkpoint), "--input", str(source), "--output", str(output), *FAST]
        env = {**os.environ, "PYTHONPATH": str(TESTS), "OMP_NUM_THREADS": "1"}
        run = subprocess.run(
            [sys.executable, "-c", DISK_FULL_WHILE_WRITING, *argv], capture_output=True, text=True, env=env
        )
        assert run.returncode == 2, run.stderr
        assert "Traceback" not in run.stderr
        assert f"vaswani-translate: error: {output}: {ENVIRONMENT_ERRNOS[errno.ENOSPC]}" in run.stderr
        assert output.read_text(encoding="utf-8") == "earlier translation\n"
        assert sorted(path.name for path in disk.iterdir()) == ["filler", "out.de"]


KILLED_EXPORT = textwrap.dedent(
    """
    import os, signal, sys
    from modeling_vaswani.toolkit.interop import ctranslate2
    convert = ctranslate2.VaswaniConverter.convert
    def killed_after_model_bin(self, output_dir, **options):  # as a kill, or a full disk, half-way would
        convert(self, output_dir, **options)
        os.kill(os.getpid(), signal.SIGKILL)
    ctranslate2.VaswaniConverter.convert = killed_after_model_bin
    ctranslate2.export_ctranslate2(sys.argv[1], sys.argv[2])
    """
)


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_a_killed_export_leaves_no_half_written_folder_and_the_rerun_completes(checkpoint, tmp_path, capsys):
    pytest.importorskip("ctranslate2")
    output = tmp_path / "ct2"
    killed = subprocess.run([sys.executable, "-c", KILLED_EXPORT, str(checkpoint), str(output)])
    assert killed.returncode == -signal.SIGKILL
    assert not output.exists()  # the half-written export is under its hidden name only, beside its lock file
    left = sorted(path.name for path in tmp_path.iterdir())  # (whose lock the kernel released with the process)
    assert len(left) == 2 and left[0] == ".ct2.lock" and left[1].startswith(".ct2.partial-")
    export_ctranslate2.main([str(checkpoint), str(output)])
    assert sorted(path.name for path in tmp_path.iterdir()) == ["ct2"]
    assert {"model.bin", "config.json", "tokenizer.json", "vaswani_ctranslate2.json"} <= set(files(output))
    export_ctranslate2.main([str(checkpoint), str(output)])  # an earlier export of its own is replaced
    (output / "notes.txt").write_text("mine")
    error = refused(export_ctranslate2.main, [checkpoint, output], capsys)
    assert "holds notes.txt, which vaswani-export-ctranslate2 did not write" in error


# ---------------------------------------------------------------------------------------------------------------------
# One checkpoint opener: every command that opens a folder meets the same checks
# ---------------------------------------------------------------------------------------------------------------------


def set_config(folder, **values):
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **values}))


@pytest.mark.parametrize(
    "main", [translate.main, export_ctranslate2.main, export_marian.main, plot_attention.main, average.main]
)
def test_a_config_that_disagrees_with_its_tensors_is_named_by_every_command(copy, source, tmp_path, capsys, main):
    set_config(copy, d_ff=96)
    argv = {
        translate.main: ["--input", source, *FAST],
        export_ctranslate2.main: [tmp_path / "ct2"],
        export_marian.main: [tmp_path / "marian"],
        plot_attention.main: ["A man.", "--output_dir", tmp_path / "maps"],
        average.main: [copy, "--output", tmp_path / "averaged"],  # the same checkpoint twice is refused first
    }[main]
    if main is average.main:
        argv[0] = shutil.copytree(copy, tmp_path / "model-2")
    error = refused(main, [copy, *argv], capsys)
    assert f"{copy / 'model.safetensors'}: tensor 'model." in error  # averaging checks each, the first first
    assert "layers.0.feed_forward.w1.bias' is (64,) but config.json (vocab_size 400, d_model 32, d_ff 96," in error
    assert error.endswith("implies (96,)")


def test_a_tokenizer_config_without_its_tokenizer_json_is_named(copy, source, capsys):
    (copy / "tokenizer.json").unlink()
    error = refused(translate.main, [copy, "--input", source, *FAST], capsys)
    assert "tokenizer.json is missing beside tokenizer_config.json" in error and "sentencepiece" not in error


def test_a_model_of_another_type_is_refused_before_it_is_built(copy, source, capsys):
    set_config(copy, model_type="bart")
    error = refused(translate.main, [copy, "--input", source, *FAST], capsys)
    assert "is not a Vaswani config: model_type is 'bart', expected 'vaswani'" in error


def test_an_output_on_a_read_only_disk_is_refused_before_translating(checkpoint, source, tmp_path, capsys):
    with small_disk(tmp_path / "ro", "64k", read_only=True) as disk:
        error = refused(translate.main, [checkpoint, "--input", source, "--output", disk / "out.de", *FAST], capsys)
    assert error.endswith(f"{disk}: Read-only file system; expected a writable folder")


def resumable(copy):
    (copy / "trainer_state.json").write_text("{}")
    torch.save({"state": {}, "param_groups": [{"lr": 1.0, "params": [0]}]}, copy / "optimizer.pt")
    return copy


@pytest.mark.parametrize("damaged", ["model.safetensors", "optimizer.pt"])
def test_resuming_from_a_truncated_checkpoint_names_the_file_before_loading_data(copy, tmp_path, capsys, damaged):
    checkpoint = resumable(copy)
    data = (checkpoint / damaged).read_bytes()
    (checkpoint / damaged).write_bytes(data[: len(data) // 2])
    argv = [
        "--output_dir",
        tmp_path / "run",
        "--model_name_or_path",
        checkpoint,
        "--resume_from_checkpoint",
        checkpoint,
    ]
    error = refused(train.main, argv, capsys)
    assert f"{checkpoint / damaged} is not a readable" in error and "truncated" in error


def test_train_refusals_exit_2_with_one_line(tmp_path, capsys):
    earlier = tmp_path / "run" / "checkpoint-500"
    earlier.mkdir(parents=True)
    error = refused(train.main, ["--output_dir", tmp_path / "run"], capsys)
    assert error.startswith("vaswani-train: error: output_dir") and "checkpoint-500" in error
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "thesis.tex").write_text("mine")
    (tmp_path / "home" / "photos").mkdir()
    error = refused(train.main, ["--output_dir", tmp_path / "home"], capsys)
    assert f"output folder {tmp_path / 'home'} holds photos/, thesis.tex, which vaswani-train does not write" in error


@pytest.mark.parametrize(
    "room, failed", [(250_000, "model.safetensors"), (600_000, "optimizer.pt")], ids=["weights", "optimizer"]
)
def test_a_full_disk_during_a_checkpoint_save_says_no_space_left(checkpoint, tmp_path, room, failed):
    from helpers.training_setup import tokenized_slice
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from modeling_vaswani.toolkit.training.trainer import VaswaniTrainer, VaswaniTrainingArguments

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForSeq2SeqLM.from_pretrained(checkpoint)
    with small_disk(tmp_path / "disk", "1m") as disk:
        fill(disk, leave_bytes=room)  # safetensors' weights fail (and are deleted), or torch.save's optimizer state
        arguments = VaswaniTrainingArguments(
            output_dir=str(disk / "run"), max_steps=1, save_strategy="steps", save_steps=1, report_to=[],
            per_device_train_batch_size=4, use_cpu=True,
        )  # fmt: skip
        trainer = VaswaniTrainer(
            model=model, args=arguments, train_dataset=tokenized_slice(tokenizer, 8), processing_class=tokenizer
        )
        with pytest.raises(OSError) as raised:
            trainer.train()
        # The outputs room's one failure (`writing_into`): the file of checkpoint-1 it was writing, as the user will
        # find it, where this said "no space left while saving a checkpoint" and named the hidden .tmp-checkpoint-1.
        assert raised.value.errno == 28 and raised.value.filename == str(disk / "run" / "checkpoint-1" / failed)
        assert not (disk / "run" / "checkpoint-1").exists()


def test_weights_stay_whole_after_every_refusal(copy, tmp_path, capsys):
    """The refusals above happen before anything is written: the checkpoints they name are untouched."""
    before = load_file(copy / "model.safetensors")
    second = shutil.copytree(copy, tmp_path / "second")
    save_file({"other": torch.zeros(1)}, second / "extra.safetensors")
    refused(average.main, [copy, second, "--output", copy], capsys)
    after = load_file(copy / "model.safetensors")
    assert before.keys() == after.keys() and all(torch.equal(before[key], after[key]) for key in before)
