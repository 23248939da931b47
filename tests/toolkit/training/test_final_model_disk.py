"""A full disk while vaswani-train saves its final model (`recipe.save_final_model`) is told as the one OSError the
outputs room gives every writer: "No space left on device" naming the file of the output folder it was writing,
never the hidden staging folder, and never a library's own exception (safetensors' SafetensorError), which the
command's error shell would print as a traceback."""

import errno
import os

import pytest
from helpers.small_disk import fill, small_disk
from helpers.training_setup import tiny_checkpoint, tokenized_slice
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from modeling_vaswani.toolkit.outputs import writing_into
from modeling_vaswani.toolkit.training.recipe import save_final_model
from modeling_vaswani.toolkit.training.trainer import VaswaniTrainer, VaswaniTrainingArguments

PAGE = 4096  # a tmpfs stores a file in whole pages


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("tiny"), lines=500)


def trainer_into(checkpoint, output_dir) -> VaswaniTrainer:
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    arguments = VaswaniTrainingArguments(output_dir=str(output_dir), report_to=[], use_cpu=True, save_strategy="no")
    model = AutoModelForSeq2SeqLM.from_pretrained(checkpoint)
    return VaswaniTrainer(
        model=model, args=arguments, train_dataset=tokenized_slice(tokenizer, 8), processing_class=tokenizer
    )


def on_disk(folder, leaving=()) -> int:
    """What the files of `folder` take on a tmpfs, those named in `leaving` left out."""
    files = [path for path in folder.iterdir() if path.name not in leaving]
    return sum(-(-path.stat().st_size // PAGE) * PAGE for path in files)


def test_a_full_disk_while_saving_the_final_weights_names_them(checkpoint, tmp_path):
    with small_disk(tmp_path / "disk", "1m") as disk:
        trainer = trainer_into(checkpoint, disk / "run")
        fill(disk, leave_bytes=250_000)  # room for the configurations and the remote code, not for the weights
        with pytest.raises(OSError) as raised:
            save_final_model(trainer, disk / "run")
    assert raised.value.errno == errno.ENOSPC
    assert raised.value.filename == str(disk / "run" / "model.safetensors")
    assert "(os error 28)" in str(raised.value.__cause__.__cause__)  # safetensors' own failure, told as an OSError


def test_a_full_disk_after_the_weights_names_the_file_that_failed(checkpoint, tmp_path):
    """The weights are whole on disk: the failure is a later file of the same Trainer save (the tokenizer's), which
    its writer leaves partial, never the declared weights."""
    measured = tmp_path / "measured"
    trainer_into(checkpoint, measured).save_model(str(measured))
    room = on_disk(measured, leaving=("tokenizer.json", "training_args.bin")) + 2 * PAGE  # not the whole tokenizer
    assert (measured / "tokenizer.json").stat().st_size > 3 * PAGE  # else `room` would hold it
    with small_disk(tmp_path / "disk", "1m") as disk:
        trainer = trainer_into(checkpoint, disk / "run")
        fill(disk, leave_bytes=room)
        with pytest.raises(OSError) as raised:
            save_final_model(trainer, disk / "run")
    assert raised.value.errno == errno.ENOSPC
    assert raised.value.filename == str(disk / "run" / "tokenizer.json")


def test_writing_into_names_the_file_as_the_user_will_find_it(tmp_path):
    with small_disk(tmp_path / "disk", "64k") as disk:
        staged = disk / ".output.partial"
        staged.mkdir()
        with pytest.raises(OSError) as raised, writing_into(disk / "output", staged):
            with open(staged / "part.txt", "wb") as handle:  # Python's file object names no file on a full disk
                handle.write(os.urandom(128 * 1024))
    assert raised.value.errno == errno.ENOSPC
    assert raised.value.filename == str(disk / "output" / "part.txt")
