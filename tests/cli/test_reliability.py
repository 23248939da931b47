"""Bad inputs refused early and clearly (issue 19): every command and public function behind translate, evaluate,
average, push, plot-attention and train-tokenizer names the bad value and what was expected, before any work starts;
no stale or half-written state is left behind.

The commands run in this process through their `main(argv)` (argparse errors exit with code 2 and print to
stderr), on a real tiny checkpoint with a real tokenizer; pushes go to the project's local Hub server.
"""

import gzip
import io
import json
import os
import shutil
import signal
import subprocess
import sys

import huggingface_hub
import pytest
import torch
from helpers.tiny_models import PAD, padded_batch, tiny_model
from helpers.training_setup import RESULTS, TINY, checkpoint_with_results, tiny_checkpoint
from safetensors.torch import load_file, save_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from modeling_vaswani import VaswaniForConditionalGeneration
from modeling_vaswani.toolkit.checkpoints import CheckpointError
from modeling_vaswani.toolkit.cli import average as average_command
from modeling_vaswani.toolkit.cli import evaluate as evaluate_command
from modeling_vaswani.toolkit.cli import plot_attention as plot_command
from modeling_vaswani.toolkit.cli import push as push_command
from modeling_vaswani.toolkit.cli import train_tokenizer as train_tokenizer_command
from modeling_vaswani.toolkit.cli import translate as translate_command
from modeling_vaswani.toolkit.data.corpora import multi30k_files, read_sentences
from modeling_vaswani.toolkit.data.tokenizer import train_tokenizer
from modeling_vaswani.toolkit.hub.push import push_checkpoint
from modeling_vaswani.toolkit.training.averaging import average_checkpoints
from modeling_vaswani.toolkit.training.presets import preset_config
from modeling_vaswani.toolkit.translation.translate import InputError, translate

# Decoding kept short: these tests are about what happens before and around it.
FAST = ["--num_beams", "1", "--max_new_tokens", "4"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("tiny"))


@pytest.fixture
def copy(checkpoint, tmp_path):
    """A copy of the checkpoint, free to break."""
    return shutil.copytree(checkpoint, tmp_path / "model")


def refused(main, argv, capsys) -> str:
    """What `main(argv)` printed as its error; it must exit with argparse's code 2, having translated nothing."""
    with pytest.raises(SystemExit) as exit_info:
        main([str(argument) for argument in argv])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert "translating" not in err, "the refusal came after the translation had started"
    return err.strip().splitlines()[-1]


def truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


# ---------------------------------------------------------------------------------------------------------------------
# 1. A push checks every tensor's shape against config.json, before any request
# ---------------------------------------------------------------------------------------------------------------------


@pytest.fixture
def hub(hub_server, monkeypatch):
    """The push client, in this process, pointed at the local Hub server; returns a function listing the requests
    that reached the server since."""
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", hub_server.url)
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    start = len(hub_server.request_log)
    return lambda: hub_server.request_log[start:]


def model_weights(folder, config) -> None:
    """Replaces the folder's weights with those of an untrained model of `config`."""
    VaswaniForConditionalGeneration(config).save_pretrained(folder / "other")
    shutil.move(folder / "other" / "model.safetensors", folder / "model.safetensors")
    shutil.rmtree(folder / "other")


@pytest.fixture(scope="module")
def vocab_300(tmp_path_factory):
    """A checkpoint whose config.json and tokenizer agree on 300 tokens, over weights of 8000 rows."""
    folder = tmp_path_factory.mktemp("vocab300")
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(read_sentences(multi30k_files("train")["en"])[:1000]) + "\n", encoding="utf-8")
    tokenizer = train_tokenizer([corpus], vocab_size=300)
    corpus.unlink()
    tokenizer.save_pretrained(folder)
    config = preset_config("small", tokenizer, **TINY)
    config.save_pretrained(folder)
    model_weights(folder, preset_config("small", tokenizer, **{**TINY, "vocab_size": 8000}))
    (folder / "results.json").write_text(json.dumps(RESULTS))
    return folder


def test_push_refuses_a_config_that_does_not_fit_its_weights_before_any_request(vocab_300, hub):
    assert json.loads((vocab_300 / "config.json").read_text())["vocab_size"] == 300
    with pytest.raises(CheckpointError) as error:
        push_checkpoint(vocab_300, "user/vocab-300")
    message = str(error.value)
    assert str(vocab_300 / "model.safetensors") in message
    assert "tensor 'model.shared.weight' is (8000, 32) but config.json (vocab_size 300" in message
    assert message.endswith("implies (300, 32)")
    assert hub() == [], "nothing may reach the Hub before the weights are checked"


@pytest.fixture(scope="module")
def pushable(tmp_path_factory):
    return checkpoint_with_results(tmp_path_factory.mktemp("pushable") / "averaged")


@pytest.mark.parametrize(
    ("layers", "message"),
    [
        (
            {"encoder_layers": 3},
            r"model.safetensors: tensor 'model.encoder.layers.2.\S+' \(\d+(, \d+)*,?\) is no tensor of the model "
            r"config.json \(vocab_size 400, d_model 32, d_ff 64, num_heads 4, d_k 8, d_v 8, 2\+2 layers\) describes$",
        ),
        (
            {"decoder_layers": 1},
            r"the weights lack \d+ tensor\(s\) of the model config.json .*, such as \['model.decoder.layers.1",
        ),
    ],
)
def test_push_refuses_weights_with_more_or_fewer_layers_than_the_config(pushable, tmp_path, hub, layers, message):
    folder = shutil.copytree(pushable, tmp_path / "averaged")
    model_weights(folder, preset_config("small", AutoTokenizer.from_pretrained(folder), **{**TINY, **layers}))
    with pytest.raises(CheckpointError, match=message):
        push_checkpoint(folder, "user/layers")
    assert hub() == []


def test_push_refuses_truncated_weights_and_a_bad_repo_id_before_any_request(pushable, tmp_path, hub):
    folder = shutil.copytree(pushable, tmp_path / "averaged")
    with pytest.raises(CheckpointError, match="'user//x' is not a Hub repository id .*; expected user/name"):
        push_checkpoint(folder, "user//x")
    truncate(folder / "model.safetensors")
    with pytest.raises(CheckpointError, match=f"{folder / 'model.safetensors'} is not a readable safetensors file"):
        push_checkpoint(folder, "user/truncated")
    assert hub() == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--template", "no-such-template.md"], "model card template no-such-template.md not found"),
        (["--dataset_name", " "], "--dataset_name is empty; expected a value for the model card"),
        (["--dataset", ""], "--dataset is empty"),
    ],
)
def test_push_command_refuses_bad_flags_before_any_request(pushable, hub, capsys, argv, message):
    assert message in refused(push_command.main, [pushable, "user/flags", *argv], capsys)
    assert hub() == []


# ---------------------------------------------------------------------------------------------------------------------
# 2. Input split on "\n" only, as training data is; input that is not text refused naming its line
# ---------------------------------------------------------------------------------------------------------------------

STRAY_CR = b"A man\rrides a bike.\nTwo dogs play in the snow.\n"


def stdin_bytes(monkeypatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def test_translate_keeps_a_stray_carriage_return_inside_its_line(checkpoint, tmp_path, capsys, monkeypatch):
    source, output = tmp_path / "input.en", tmp_path / "output.de"
    source.write_bytes(STRAY_CR)
    translate_command.main([str(checkpoint), "--input", str(source), "--output", str(output), *FAST])
    assert len(output.read_bytes().split(b"\n")) == 3  # two lines, each ended by "\n"
    stdin_bytes(monkeypatch, STRAY_CR)
    capsys.readouterr()
    translate_command.main([str(checkpoint), *FAST])
    assert capsys.readouterr().out.count("\n") == 2


def test_evaluate_keeps_a_stray_carriage_return_inside_its_line(checkpoint, tmp_path, capsys):
    source, reference, output = tmp_path / "input.en", tmp_path / "reference.de", tmp_path / "output.de"
    source.write_bytes(STRAY_CR)
    reference.write_text("Ein Mann fährt Rad.\nZwei Hunde spielen im Schnee.\n", encoding="utf-8")
    evaluate_command.main([str(checkpoint), "--source", str(source), "--reference", str(reference)] + [
        "--output", str(output), "--batch_size", "2"])  # fmt: skip
    assert output.read_text(encoding="utf-8").count("\n") == 2


@pytest.mark.parametrize(
    ("data", "message", "flags"),
    [
        (
            b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
            "standard input, line 1: not valid UTF-8 (invalid start byte at byte 0",
            [],
        ),
        (
            b"A man.\n\xff\xfe\x00\x01\n",
            "standard input, line 2: not valid UTF-8 (invalid start byte at byte 0 of the line, byte 7 of the input)",
            [],
        ),
        (
            "A man.\n".encode("utf-16-le"),
            "standard input, line 1: holds a NUL character (byte 1 of the input); expected UTF-8 text",
            [],
        ),
        (b"", "standard input is empty; expected one sentence per line", []),
        (  # one sentence a line: an empty line is refused (split into sentences, it gives an empty line)
            b"A man.\n\nA dog.\n",
            "standard input, one sentence a line: sentence 2 is empty; expected text to translate",
            ["--no_split_sentences"],
        ),
    ],
)
def test_translate_refuses_stdin_that_is_not_text_naming_the_line(
    checkpoint, capsys, monkeypatch, data, message, flags
):
    stdin_bytes(monkeypatch, data)
    assert message in refused(translate_command.main, [checkpoint, *flags], capsys)


def test_translate_reads_gzip_and_names_the_file_and_line_of_bad_bytes(checkpoint, tmp_path, capsys):
    source = tmp_path / "input.en.gz"
    source.write_bytes(gzip.compress(b"A man.\nA dog \xe9.\n"))
    assert f"{source}, line 2: not valid UTF-8" in refused(
        translate_command.main, [checkpoint, "--input", source], capsys
    )


# ---------------------------------------------------------------------------------------------------------------------
# 3. generate refuses a row that is all padding, alone or in a batch, in both decoding modes
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("paper_decoding", [True, False])
@pytest.mark.parametrize("with_mask", [True, False])
def test_generate_refuses_an_all_padding_row(paper_decoding, with_mask):
    model = tiny_model()
    ids, mask = padded_batch([5, 3, 4])
    ids[1], mask[1] = PAD, 0
    for rows in ([1], [0, 1, 2]):  # alone, and among real sentences
        inputs = {"input_ids": ids[rows], **({"attention_mask": mask[rows]} if with_mask else {})}
        row = rows.index(1)
        with pytest.raises(
            ValueError, match=rf"attention_mask row {row} is all padding \(1 such row\(s\): \[{row}\]\)"
        ):
            model.generate(**inputs, paper_decoding=paper_decoding, max_new_tokens=3)
    assert model.generate(input_ids=ids[[0, 2]], attention_mask=mask[[0, 2]], max_new_tokens=3).shape[0] == 2


# ---------------------------------------------------------------------------------------------------------------------
# 4. Output paths checked before any sentence is translated
# ---------------------------------------------------------------------------------------------------------------------


@pytest.fixture
def two_lines(tmp_path):
    path = tmp_path / "input.en"
    path.write_text("A man rides a bike.\nTwo dogs play.\n", encoding="utf-8")
    return path


def test_output_into_a_missing_folder_is_refused_before_translating(checkpoint, two_lines, tmp_path, capsys):
    output = tmp_path / "missing" / "output.de"
    expected = f"--output {output}: the folder {output.parent} does not exist; expected a file in an existing folder"
    assert expected in refused(translate_command.main, [checkpoint, "--input", two_lines, "--output", output], capsys)
    assert expected in refused(evaluate_command.main, [checkpoint, "--output", output], capsys)
    assert not output.parent.exists()


def test_output_that_is_an_input_or_a_folder_is_refused(checkpoint, two_lines, tmp_path, capsys):
    error = refused(translate_command.main, [checkpoint, "--input", two_lines, "--output", two_lines], capsys)
    assert f"--output {two_lines} is also an input" in error
    assert two_lines.read_text(encoding="utf-8") == "A man rides a bike.\nTwo dogs play.\n", "the input survives"
    reference = tmp_path / "reference.de"
    reference.write_text("Ein Mann.\nZwei Hunde.\n", encoding="utf-8")
    argv = [checkpoint, "--source", two_lines, "--reference", reference, "--output", reference]
    assert f"--output {reference} is also an input" in refused(evaluate_command.main, argv, capsys)
    argv = [checkpoint, "--input", two_lines, "--output", tmp_path]
    assert f"--output {tmp_path} is a folder; expected the path of a file" in refused(
        translate_command.main, argv, capsys
    )


# ---------------------------------------------------------------------------------------------------------------------
# 5. A damaged weight file is named (translate, average; push above)
# ---------------------------------------------------------------------------------------------------------------------


def test_translate_names_a_truncated_weight_file(copy, two_lines, capsys):
    truncate(copy / "model.safetensors")
    error = refused(translate_command.main, [copy, "--input", two_lines], capsys)
    assert (
        f"{copy / 'model.safetensors'} is not a readable safetensors file (Error while deserializing header" in error
    )


# ---------------------------------------------------------------------------------------------------------------------
# 7. Over-long inputs refused, naming the line, its length and the limit
# ---------------------------------------------------------------------------------------------------------------------


def test_a_sentence_over_the_limit_is_refused_before_translating(copy, tmp_path, capsys):
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 64}))
    long = " ".join(["A man rides a bike."] * 40)
    length = len(AutoTokenizer.from_pretrained(copy)(long)["input_ids"])
    source = tmp_path / "input.en"
    source.write_text(f"A dog.\n{long}\nA cat.\n{long}\n", encoding="utf-8")
    # One sentence a line: each line of 40 sentences is one sentence over the limit (split into sentences, each of
    # its sentences is short: tests/cli/test_translate_paragraphs.py has the limit on a split line).
    whole = "--no_split_sentences"
    expected = (
        f"{source}, one sentence a line: sentence 2 is {length} tokens long, more than the limit of 64 "
        "(max_input_tokens; 2 sentence(s) over it: [2, 4]); expected shorter sentences"
    )
    assert expected in refused(translate_command.main, [copy, "--input", source, whole], capsys)
    argv = [copy, "--input", source, "--max_input_tokens", length - 1, whole]
    assert f"more than the limit of {length - 1} (max_input_tokens" in refused(translate_command.main, argv, capsys)
    translate_command.main([str(copy), "--input", str(source), "--max_input_tokens", str(length), whole, *FAST])
    assert capsys.readouterr().out.count("\n") == 4
    translate_command.main([str(copy), "--input", str(source), *FAST])  # split: 40 short sentences a line
    assert capsys.readouterr().out.count("\n") == 4


def test_translate_function_refuses_what_it_cannot_translate(checkpoint):
    model, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(checkpoint), AutoTokenizer.from_pretrained(checkpoint)
    whole = {"split_sentences": False}  # one sentence a line
    cases = [
        ("A man.", {}, InputError, "sentences is a str; expected a list of sentences"),
        ("A man.", whole, InputError, "sentences is a str; expected a list of sentences"),
        (["A man.", None], whole, InputError, "sentence 2 is a NoneType; expected a str"),
        (["A man.", None], {}, InputError, "line 2 is a NoneType; expected a str"),
        (["A man.", " "], whole, InputError, "sentence 2 is empty"),
        (["A man."], whole | {"max_input_tokens": 2}, InputError, r"^sentence 1 is \d+ tokens long, more than"),
        (
            ["A man."],
            {"max_input_tokens": 2},
            InputError,
            r"line 1, sentence 1 \('A man.'\) is \d+ tokens long, more than the limit of 2",
        ),
        (
            ["A man."],
            {"max_input_tokens": 0},
            ValueError,
            r"max_input_tokens=0; expected an int of at least 1 \(or None\)",
        ),
        (["A man."], {"batch_size": 0}, ValueError, r"batch_size=0; expected an int of at least 1"),
        (["A man."], {"batch_size": 2.5}, ValueError, r"batch_size=2.5; expected an int of at least 1"),
        (["A man."], {"max_tokens": True}, ValueError, r"max_tokens=True; expected an int of at least 1"),
    ]
    for sentences, options, error, message in cases:
        with pytest.raises(error, match=message):
            translate(model, tokenizer, sentences, progress=False, **options)


# ---------------------------------------------------------------------------------------------------------------------
# 8. Every command's bad values, named with what was expected, before any work
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--batch_size", "--num_beams", "--max_new_tokens", "--max_input_tokens"])
@pytest.mark.parametrize("value", ["0", "-3", "two"])
def test_translate_refuses_counts_below_one(checkpoint, two_lines, capsys, flag, value):
    error = refused(translate_command.main, [checkpoint, "--input", two_lines, flag, value], capsys)
    assert f"argument {flag}: expected a whole number >= 1, got '{value}'" in error


@pytest.mark.parametrize("flag", ["--batch_size", "--max_input_tokens"])
def test_evaluate_refuses_counts_below_one(checkpoint, capsys, flag):
    assert f"argument {flag}: expected a whole number >= 1, got '0'" in refused(
        evaluate_command.main, [checkpoint, flag, "0"], capsys
    )


@pytest.mark.parametrize(
    ("languages", "message"),
    [
        (["--target_lang", "en"], "--source_lang and --target_lang are both 'en'; expected two languages"),
        (["--target_lang", "cs"], "argument --target_lang: invalid choice: 'cs'"),
    ],
)
def test_evaluate_refuses_a_language_pair_the_shipped_test_set_lacks(checkpoint, capsys, languages, message):
    assert message in refused(evaluate_command.main, [checkpoint, *languages], capsys)


def broken_model(folder, fault):
    """The model argument for each kind of broken model, made under `folder` (a copy of the checkpoint)."""
    if fault == "missing":
        return folder.parent / "nothing" / "averaged"
    if fault == "missing_hub_like":  # made relative: the form of a Hub id (user/model), but user/ is a local folder
        return folder.parent / "nothing"
    if fault == "file":
        return folder / "config.json"
    (folder / {"no_config": "config.json", "no_tokenizer": "tokenizer.json"}[fault]).unlink()
    if fault == "no_tokenizer":
        (folder / "tokenizer_config.json").unlink()
    return folder


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ("missing", "model folder {model} does not exist; expected a checkpoint folder or a Hub id (user/model)"),
        ("missing_hub_like", "model folder {model} does not exist"),
        ("file", "model {model} is a file; expected a checkpoint folder or a Hub id"),
        ("no_config", "model folder {model} has no config.json; expected a checkpoint written by save_pretrained"),
        ("no_tokenizer", "model folder {model} has no tokenizer; expected tokenizer.json or tokenizer_config.json"),
    ],
)
@pytest.mark.parametrize("main", [translate_command.main, evaluate_command.main, plot_command.main])
def test_commands_refuse_a_model_that_is_not_there(copy, two_lines, capsys, monkeypatch, fault, message, main):
    monkeypatch.chdir(copy.parent.parent)
    model = broken_model(copy, fault)
    model = model.relative_to(copy.parent.parent) if fault == "missing_hub_like" else model
    argv = {translate_command.main: ["--input", two_lines], plot_command.main: ["A man."]}.get(main, [])
    assert message.format(model=model) in refused(main, [model, *argv], capsys)


def test_translate_refuses_a_revision_for_a_local_folder_and_a_missing_input(checkpoint, tmp_path, capsys):
    error = refused(translate_command.main, [checkpoint, "--revision", "dev"], capsys)
    assert f"--revision dev applies to Hub ids; {checkpoint} is a local folder" in error
    missing = tmp_path / "missing.en"
    assert f"data file not found: '{missing}'" in refused(
        translate_command.main, [checkpoint, "--input", missing], capsys
    )
    empty = tmp_path / "empty.en"
    empty.write_text("")
    assert f"{empty} is empty; expected one sentence per line" in refused(
        translate_command.main, [checkpoint, "--input", empty], capsys
    )


def test_evaluate_refuses_missing_or_misaligned_files(checkpoint, two_lines, tmp_path, capsys):
    reference = tmp_path / "reference.de"
    reference.write_text("Ein Mann.\n", encoding="utf-8")
    error = refused(evaluate_command.main, [checkpoint, "--source", two_lines, "--reference", reference], capsys)
    assert f"{two_lines} has 2 sentences but {reference} has 1; expected one reference per source sentence" in error
    missing = tmp_path / "missing.de"
    error = refused(evaluate_command.main, [checkpoint, "--source", two_lines, "--reference", missing], capsys)
    assert f"data file not found: '{missing}'" in error
    assert "give --source and --reference together" in refused(
        evaluate_command.main, [checkpoint, "--source", two_lines], capsys
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--layers", "2"], "--layers 2: the model's encoder attention has layers 0 to 1"),
        (["--layers", "-1"], "--layers -1: the model's encoder attention has layers 0 to 1"),
        (["--kinds", "cross", "--layers", "5"], "--layers 5: the model's cross attention has layers 0 to 1"),
        (["--heads", "4"], "--heads 4: the model's layers have heads 0 to 3"),
        (["--heads", "0", "-2"], "--heads -2: the model's layers have heads 0 to 3"),
        (["--kinds", "self"], "argument --kinds: invalid choice: 'self'"),
    ],
)
def test_plot_attention_refuses_layers_and_heads_the_model_lacks(checkpoint, tmp_path, capsys, argv, message):
    output = tmp_path / "maps"
    assert message in refused(plot_command.main, [checkpoint, "A man.", "--output_dir", output, *argv], capsys)
    assert not output.exists()


def test_plot_attention_refuses_an_empty_sentence_and_a_file_as_output_dir(checkpoint, tmp_path, capsys):
    output = tmp_path / "maps"
    error = refused(plot_command.main, [checkpoint, " ", "--output_dir", output], capsys)
    assert "sentence 1 is empty; expected text to translate" in error and not output.exists()
    output.write_text("not a folder")
    error = refused(plot_command.main, [checkpoint, "A man.", "--output_dir", output], capsys)
    assert f"output folder {output} is a file; expected a new folder or an earlier output of vaswani-plot" in error


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--vocab_size", "100"], "vocab_size=100; expected an int of at least 260"),
        (["--min_frequency", "0"], "min_frequency=0; expected an int of at least 1"),
        (["--output_dir", "{file}"], "output folder {file} is a file; expected a new folder or an earlier output of"),
    ],
)
def test_train_tokenizer_refuses_bad_values_before_training(tmp_path, capsys, argv, message):
    corpus, file = tmp_path / "corpus.en", tmp_path / "a-file"
    corpus.write_text("A man rides a bike.\n" * 20, encoding="utf-8")
    file.write_text("")
    argv = ["--files", corpus, "--output_dir", tmp_path / "tokenizer", *[a.format(file=file) for a in argv]]
    assert message.format(file=file) in refused(train_tokenizer_command.main, argv, capsys)
    assert not (tmp_path / "tokenizer").exists()
    missing = tmp_path / "missing.en"
    argv = ["--files", missing, "--output_dir", tmp_path / "tokenizer"]
    assert f"tokenizer training file not found: '{missing}'" in refused(train_tokenizer_command.main, argv, capsys)


# ---------------------------------------------------------------------------------------------------------------------
# 5 and 6. Averaging: damaged weights named, stale state of a killed run cleaned up or restored, bad values refused
# ---------------------------------------------------------------------------------------------------------------------


def make_checkpoint(folder, step: float):
    folder.mkdir(parents=True)
    save_file({"w": torch.full((2, 3), float(step))}, folder / "model.safetensors", metadata={"format": "pt"})
    (folder / "config.json").write_text("{}")
    return folder


@pytest.fixture
def run(tmp_path):
    """A training output_dir with checkpoint-1 to checkpoint-3."""
    for step in (1, 2, 3):
        make_checkpoint(tmp_path / "run" / f"checkpoint-{step}", step)
    return tmp_path / "run"


def checkpoints(run):
    return [run / f"checkpoint-{step}" for step in (1, 2, 3)]


def hidden(parent) -> list[str]:
    return sorted(path.name for path in parent.iterdir() if path.name.startswith("."))


KILLED_AVERAGE = """
import os, signal, sys
from pathlib import Path
import modeling_vaswani.toolkit.outputs.writers as outputs
from modeling_vaswani.toolkit.training import averaging
moment, output, *checkpoints = sys.argv[1:]
def kill(*_):
    os.kill(os.getpid(), signal.SIGKILL)
if moment == "writing":
    save = averaging.save_file
    averaging.save_file = lambda *args, **kwargs: kill(save(*args, **kwargs))
elif moment == "set-aside":
    rename = outputs.Path.rename
    def renamed(self, target):
        rename(self, target)
        if str(target).endswith(".old"):
            kill()
    outputs.Path.rename = renamed
else:  # deleting the earlier output, once the new one is in place
    outputs.shutil.rmtree = lambda path, *args, **kwargs: kill(Path(path, "config.json").unlink())
averaging.average_checkpoints(checkpoints, output)
"""


def killed_average(moment: str, run, output) -> None:
    """vaswani-average's library call killed (SIGKILL) at `moment`: what a real killed run leaves, and records."""
    argv = [sys.executable, "-c", KILLED_AVERAGE, moment, str(output), *map(str, checkpoints(run))]
    assert subprocess.run(argv, env={**os.environ, "OMP_NUM_THREADS": "1"}).returncode == -signal.SIGKILL


def test_average_removes_the_staging_folders_a_killed_run_left(run, tmp_path):
    killed_average("writing", run, tmp_path / "averaged")
    assert any(".averaged.partial-" in name for name in hidden(tmp_path))
    make_checkpoint(tmp_path / ".averaged.partial-x1y2z3", 9)  # no run of ours recorded it: someone else's
    (tmp_path / ".other.tmp-keep").mkdir()  # another output's: not ours to remove
    output = average_checkpoints(checkpoints(run), tmp_path / "averaged")
    assert hidden(tmp_path) == [".averaged.partial-x1y2z3", ".other.tmp-keep"]
    assert (output / "config.json").is_file()


def test_average_restores_an_output_a_killed_swap_left_aside_even_when_it_then_fails(run, tmp_path):
    """Killed between the swap's two renames: the earlier output only under its hidden name, beside the staging."""
    average_checkpoints(checkpoints(run)[:1], tmp_path / "averaged")  # an earlier output of its own
    killed_average("set-aside", run, tmp_path / "averaged")
    assert not (tmp_path / "averaged").exists() and (tmp_path / ".averaged.old").is_dir()
    broken = make_checkpoint(tmp_path / "broken", 0)
    save_file({"v": torch.zeros(1)}, broken / "model.safetensors")
    with pytest.raises(ValueError, match="checkpoints differ in their tensors"):
        average_checkpoints([*checkpoints(run), broken], tmp_path / "averaged")
    assert hidden(tmp_path) == []
    restored = tmp_path / "averaged" / "model.safetensors"
    assert torch.equal(load_file(restored)["w"], torch.full((2, 3), 1.0))


def test_average_deletes_an_old_output_a_run_killed_while_deleting_it_left(run, tmp_path):
    average_checkpoints(checkpoints(run)[:1], tmp_path / "averaged")  # an earlier output of its own
    killed_average("deleting", run, tmp_path / "averaged")
    half_deleted = [name for name in hidden(tmp_path) if name.startswith(".averaged.partial-")]
    assert len(half_deleted) == 1 and not (tmp_path / half_deleted[0] / "config.json").exists()
    assert not (tmp_path / ".averaged.old").exists()  # moved to a name of its own before it was deleted
    average_checkpoints(checkpoints(run), tmp_path / "averaged")
    assert hidden(tmp_path) == []
    assert torch.equal(load_file(tmp_path / "averaged" / "model.safetensors")["w"], torch.full((2, 3), 2.0))


def test_average_refuses_an_output_holding_folders(run):
    with pytest.raises(ValueError, match=f"--output {run} holds an input"):
        average_checkpoints(checkpoints(run)[1:], run)
    assert [path.name for path in checkpoints(run) if path.is_dir()] == [
        "checkpoint-1",
        "checkpoint-2",
        "checkpoint-3",
    ]


def shard(folder):
    """The checkpoint's weights as an index and one shard."""
    (folder / "model.safetensors").rename(folder / "model-00001-of-00001.safetensors")
    index = {"metadata": {}, "weight_map": {"w": "model-00001-of-00001.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))


@pytest.mark.parametrize(
    ("fault", "error", "message"),
    [
        ("twice", ValueError, "checkpoint {c} is given twice; expected each once"),
        ("missing", FileNotFoundError, "checkpoint {c}-missing is not a folder; expected a checkpoint-<step> folder"),
        ("truncated", ValueError, "{c}/model.safetensors is not a readable safetensors file"),
        ("truncated_shard", ValueError, "{c}/model-00001-of-00001.safetensors is not a readable safetensors file"),
        (
            "missing_shard",
            ValueError,
            r"{c} lacks 1 of the 1 shards in model.safetensors.index.json: \['model-00001-of-00001.safetensors'\]",
        ),
        ("bad_index", ValueError, "{c}/model.safetensors.index.json is not valid JSON"),
        ("empty_index", ValueError, "{c}/model.safetensors.index.json has no weight_map"),
    ],
)
def test_average_names_the_bad_checkpoint_before_writing(run, tmp_path, fault, error, message):
    folders, last = checkpoints(run), checkpoints(run)[-1]
    if fault == "twice":
        folders.append(last)
    elif fault == "missing":
        folders.append(last.with_name(last.name + "-missing"))
    elif fault == "truncated":
        truncate(last / "model.safetensors")
    else:
        shard(last)
        index = last / "model.safetensors.index.json"
        {
            "truncated_shard": lambda: truncate(last / "model-00001-of-00001.safetensors"),
            "missing_shard": lambda: (last / "model-00001-of-00001.safetensors").unlink(),
            "bad_index": lambda: index.write_text("{"),
            "empty_index": lambda: index.write_text("{}"),
        }[fault]()
    with pytest.raises(error, match=message.format(c=last).replace("(", r"\(")):
        average_checkpoints(folders, tmp_path / "averaged")
    assert not (tmp_path / "averaged").exists() and hidden(tmp_path) == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--output_dir_of_training", "{run}", "--last", "0"],
            "argument --last: expected a whole number >= 1, got '0'",
        ),
        (
            ["--output_dir_of_training", "{run}", "--last", "4"],
            "asked for the last 4 checkpoints but {run} has only 3",
        ),
        (["--output_dir_of_training", "{run}-x", "--last", "1"], "training output directory {run}-x does not exist"),
        (["{run}/checkpoint-1", "{run}/checkpoint-1"], "checkpoint {run}/checkpoint-1 is given twice"),
    ],
)
def test_average_command_refuses_bad_values(run, tmp_path, capsys, argv, message):
    argv = [argument.format(run=run) for argument in argv] + ["--output", str(tmp_path / "averaged")]
    assert message.format(run=run) in refused(average_command.main, argv, capsys)


# vaswani-train: an output_dir with an earlier run's checkpoints, and resume targets, are checked before any data
# is loaded (load_data is replaced by a failure, so a check that comes late fails these tests).


@pytest.fixture
def no_data_loading(monkeypatch):
    from modeling_vaswani.toolkit.training import recipe

    def load_data(*args, **kwargs):
        raise AssertionError("data was loaded before the bad argument was refused")

    monkeypatch.setattr(recipe, "load_data", load_data)
    return recipe


def _checkpoint(folder, config):
    folder.mkdir(parents=True)
    config.save_pretrained(folder)
    (folder / "trainer_state.json").write_text("{}")
    return folder


def test_a_run_into_earlier_checkpoints_is_refused_unless_resumed_or_overwritten(no_data_loading, tmp_path):
    recipe = no_data_loading
    earlier = _checkpoint(tmp_path / "run" / "checkpoint-500", recipe.preset_config("small"))
    (tmp_path / "run" / "averaged").mkdir()
    flags = ["--output_dir", str(tmp_path / "run")]
    with pytest.raises(
        ValueError, match=r"holds checkpoints of an earlier run \(checkpoint-500\).*--overwrite_output_dir"
    ):
        recipe.train_and_score(*recipe.parse_arguments(flags))
    assert earlier.is_dir()
    model_args, _, training_args = recipe.parse_arguments([*flags, "--overwrite_output_dir"])
    recipe.check_output_and_resume(model_args, training_args)
    assert not earlier.exists() and not (tmp_path / "run" / "averaged").exists()


def test_a_missing_resume_target_is_refused_before_data_loading(no_data_loading, tmp_path):
    recipe = no_data_loading
    missing = tmp_path / "run" / "checkpoint-7"
    with pytest.raises(FileNotFoundError, match=r"checkpoint-7' is not a checkpoint: expected a checkpoint-N folder"):
        recipe.train_and_score(
            *recipe.parse_arguments(["--output_dir", str(tmp_path / "run"), "--resume_from_checkpoint", str(missing)])
        )


def test_resuming_another_model_size_names_the_differences(no_data_loading, tmp_path):
    recipe = no_data_loading
    small = _checkpoint(tmp_path / "run" / "checkpoint-100", recipe.preset_config("small"))
    flags = ["--output_dir", str(tmp_path / "run"), "--resume_from_checkpoint", str(small), "--preset", "base"]
    with pytest.raises(
        ValueError, match=r"holds another model than --preset base builds: d_model=256 \(this run: 512\)"
    ):
        recipe.train_and_score(*recipe.parse_arguments(flags))


def test_training_text_holding_nul_is_refused_with_file_and_line(tmp_path):
    from modeling_vaswani.toolkit.data.corpora import load_text_pairs

    source = tmp_path / "train.en"
    source.write_bytes(b"A man.\n" + "Two dogs.\n".encode("utf-16-le"))
    (tmp_path / "train.de").write_text("Ein Mann.\nZwei Hunde.\n", encoding="utf-8")
    refused = r"train\.en, line 2: holds a NUL character \(byte 8 of the input\); expected UTF-8"  # 7 + "T"
    with pytest.raises(ValueError, match=refused):
        load_text_pairs(source, tmp_path / "train.de", "en", "de")
