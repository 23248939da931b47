"""The vaswani-* commands end to end on the shipped data: train, resume after SIGKILL, translate, plot, score."""

import json
import os
import signal
import subprocess
import time

import pytest
import sacrebleu
import torch
from helpers.training_setup import command, run_command, tiny_checkpoint
from safetensors.torch import load_file
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from modeling_vaswani.toolkit.cli import plot_attention, train, translate
from modeling_vaswani.toolkit.data.corpora import multi30k_files, read_sentences

pytestmark = pytest.mark.slow  # trains, kills and resumes the main job end to end


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("tiny"))


def script(name: str, *arguments, cwd, check=True, **kwargs):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [*command(name), *map(str, arguments)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        **kwargs,
    )
    if check:
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    return result


def test_main_job_end_to_end(main_job, tmp_path, capsys):
    """vaswani-train as a user runs it, in a process of its own from an empty folder (tokenizer trained there, small
    preset; the session's one run, by the installed wheel's console script: tests/helpers/wheel.py's MAIN_JOB), then
    vaswani-translate from standard input as a user pipes it; vaswani-translate on files and vaswani-plot-attention
    run in this process (the error shell's process settings are the same; tests/cli/test_runtime_applied.py)."""
    work, trained = main_job
    run = work / "runs" / "small"  # the small preset's default output_dir
    assert "sacreBLEU" in trained.stdout and "tokenized BLEU" in trained.stdout
    # No library warning a user cannot act on: DeepSpeed's guess of the accelerator, torch's pin_memory without a GPU.
    for warning in ("Setting accelerator to CPU", "pin_memory"):
        assert warning not in trained.stderr, warning
    model_dir = run / "averaged"
    assert json.loads((model_dir / "generation_config.json").read_text())["length_penalty"] == 1.0  # the preset's
    # The languages, recorded in the tokenizer's configuration of every folder (the splitter's language).
    for folder in (model_dir, run / "checkpoint-30"):
        config = json.loads((folder / "tokenizer_config.json").read_text())
        assert (config["source_lang"], config["target_lang"]) == ("en", "de"), folder
    # Evaluating by translating during training leaves the model's generation settings as they were (transformers'
    # Seq2SeqTrainer writes every generate() default into them, max_length 20 among them).
    for folder in (model_dir, run / "checkpoint-30"):
        assert "max_length" not in json.loads((folder / "generation_config.json").read_text()), folder
    results = json.loads((model_dir / "results.json").read_text())
    assert results["test"]["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert results["test_set"]["dataset_split"] == "test_2016_flickr"  # what vaswani-push's card names
    assert (run / "training_curves.png").stat().st_size > 10_000
    assert len((model_dir / "test.hyp.de").read_text().splitlines()) == 24
    # chrF and TER beside BLEU, each with its signature, as sacrebleu scores the job's translations of test2016's
    # first 24 sentences (--max_eval_samples); printed too, after the BLEU lines.
    hypotheses = (model_dir / "test.hyp.de").read_text(encoding="utf-8").split("\n")[:-1]
    references = read_sentences(multi30k_files("test")["de"])[:24]
    for name, metric, label in (("chrf", sacrebleu.CHRF(), "chrF2"), ("ter", sacrebleu.TER(), "TER")):
        expected = metric.corpus_score(hypotheses, [references]).score
        assert results["test"][name] == pytest.approx(expected), name
        assert results["test"][f"{name}_signature"] == str(metric.get_signature())
        assert f"\n{label} {expected:.2f} ({metric.get_signature()})\n" in trained.stdout
    tags = set()
    for events in (run / "runs").rglob("events.out.tfevents.*"):
        accumulator = EventAccumulator(str(events))
        accumulator.Reload()
        tags.update(accumulator.Tags()["scalars"])
    # The preset evaluates during training (here every 15 steps): validation loss and BLEU reach the curves too.
    expected_tags = {"train/loss", "train/learning_rate", "eval/loss", "eval/sacrebleu", "eval/chrf", "test/sacrebleu"}
    assert expected_tags | {"test/chrf"} <= tags, tags
    averaged = load_file(model_dir / "model.safetensors")
    last_two = [load_file(run / f"checkpoint-{step}" / "model.safetensors") for step in (20, 30)]
    assert all(torch.allclose(averaged[k], (last_two[0][k] + last_two[1][k]) / 2, atol=1e-6) for k in averaged)

    sentences = "A man rides a bike.\nTwo dogs play in the snow.\nA girl in a red dress.\n"
    (tmp_path / "input.en").write_text(sentences)
    code, _, err = run_command(
        translate, [model_dir, "--input", tmp_path / "input.en", "--output", tmp_path / "out.de"], capsys
    )
    assert code == 0, err
    assert len((tmp_path / "out.de").read_text().splitlines()) == 3
    piped = script("translate", model_dir, "--num_beams", 2, cwd=tmp_path, input=sentences)
    assert len(piped.stdout.splitlines()) == 3

    code, plotted, err = run_command(
        plot_attention,
        [model_dir, "A man rides a bike.", "--layers", 0, "--heads", 0, 1, "--output_dir", tmp_path / "maps"],
        capsys,
    )
    assert code == 0, err
    files = sorted(path.name for path in (tmp_path / "maps").glob("*.png"))
    assert files == sorted(f"{kind}_layer0.png" for kind in ("encoder", "decoder", "cross"))  # heads 0 and 1 in each
    assert len(plotted.splitlines()) == 3


def test_bad_input_is_refused_with_a_clear_message(tmp_path, checkpoint, capsys):
    (tmp_path / "input.en").write_text("A man.\n\nA dog.\n")
    source = [checkpoint, "--input", tmp_path / "input.en"]
    code, _, err = run_command(translate, [*source, "--no_split_sentences"], capsys)
    assert code != 0 and "sentence 2 is empty" in err  # one sentence a line: no empty one
    code, out, err = run_command(translate, [*source, "--max_new_tokens", 4], capsys)
    assert code == 0, err
    assert out.count("\n") == 3 and out.split("\n")[1] == ""  # split: an empty line stays one
    (tmp_path / "short.de").write_text("Ein Mann.\n")
    (tmp_path / "long.en").write_text("A man.\nA dog.\n")
    code, _, err = run_command(
        train, [
            "--model_name_or_path", checkpoint, "--output_dir", tmp_path / "run",
            "--train_source_file", tmp_path / "long.en", "--train_target_file", tmp_path / "short.de",
        ], capsys,
    )  # fmt: skip
    assert code != 0
    assert "long.en" in err and "short.de" in err and "2" in err


def test_resume_after_sigkill_loses_only_the_steps_since_the_last_checkpoint(checkpoint, tmp_path):
    flags = [
        "--model_name_or_path", checkpoint, "--max_steps", 150, "--save_steps", 25, "--max_tokens", 800,
        "--max_train_samples", 3000, "--warmup_steps", 20, "--learning_rate", 3e-3, "--logging_steps", 25,
        "--test_split", "none", "--validation_split", "none", "--report_to", "none", "--disable_tqdm", "true",
        "--seed", 3,
    ]  # fmt: skip
    script("train", "--output_dir", tmp_path / "straight", *flags, cwd=tmp_path)

    killed_dir = tmp_path / "killed"
    process = subprocess.Popen(
        [*command("train"), "--output_dir", str(killed_dir), *map(str, flags)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    deadline = time.monotonic() + 240
    while not (killed_dir / "checkpoint-50").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL
    complete = sorted(killed_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    assert complete and not (killed_dir / "checkpoint-150").exists()  # it died mid-run
    for folder in complete:  # whatever moment the kill hit, no checkpoint folder is half-written
        assert (folder / "trainer_state.json").exists() and (folder / "model.safetensors").exists()

    # As a kill between a checkpoint's rename and its staging folder's removal leaves it: the resumed run, which
    # never saves that step again, still removes it.
    (killed_dir / f".tmp-{complete[-1].name}").mkdir(exist_ok=True)
    script("train", "--output_dir", killed_dir, "--resume_from_checkpoint", complete[-1], *flags, cwd=tmp_path)
    assert not [path.name for path in killed_dir.iterdir() if path.name.startswith(".")]
    straight = load_file(tmp_path / "straight" / "model.safetensors")
    resumed = load_file(killed_dir / "model.safetensors")
    difference = max((straight[k] - resumed[k]).abs().max().item() for k in straight)
    assert difference < 1e-6, f"resumed run differs from the uninterrupted one by {difference}"
