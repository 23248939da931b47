"""vaswani-train --push_to_hub (issue 51, item 4 at another surface): the final model pushed as vaswani-push pushes it,
its files alone and each printed, never the Trainer's push of the whole output_dir; a repository id, login or
hub_strategy that could not be honoured refused before any work.

Against the project's Hub server on 127.0.0.1 (real HTTP), the command run in this process; the pushed model pulled
in a fresh process where the package cannot be imported, as a user without it loads it.
"""

import json
import string

import huggingface_hub
import pytest
from helpers.hub_server import Repo, run_client
from helpers.pulls import PULL_WITHOUT_PACKAGE, SENTENCES, local_generate, local_translations, weight_digests
from helpers.training_setup import run_command, tiny_checkpoint
from hypothesis import given
from hypothesis import strategies as st
from transformers import AutoModelForSeq2SeqLM

from modeling_vaswani.remote_code_vaswani import PAYLOAD_FILES
from modeling_vaswani.toolkit.cli import ablate as ablate_command
from modeling_vaswani.toolkit.cli import train as train_command
from modeling_vaswani.toolkit.training.trainer import VaswaniTrainer, VaswaniTrainingArguments

# What the averaged model of a run with a test split is, as the checkpoint opener and the folder's marker know it
# (the test split's translations are the run's output beside the model), and what every push adds.
MODEL_FILES = {
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "results.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "test.hyp.de",
}
PUSH_FILES = {"README.md", "vaswani_push.json", *PAYLOAD_FILES}
# A short run that leaves in output_dir everything the Trainer's push would have uploaded: TensorBoard logs (runs/),
# checkpoints with optimizer state, the curves, the training arguments.
RUN = [
    "--max_steps", 2, "--save_steps", 1, "--logging_steps", 1, "--average_last_checkpoints", 2,
    "--max_train_samples", 60, "--max_eval_samples", 3, "--validation_split", "none", "--max_tokens", 600,
    "--report_to", "tensorboard", "--disable_tqdm", "true", "--use_cpu", "--seed", 0,
]  # fmt: skip


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("train-push"), lines=300)


def repo_files(hub_server, repo_id: str, branch: str = "main") -> set[str]:
    return set(Repo(hub_server.root, "model", repo_id).commit(hub_server.head(repo_id, branch))["tree"])


def pushed_lines(out: str) -> set[str]:
    return {line.removeprefix("pushing ") for line in out.splitlines() if line.startswith("pushing ")}


@pytest.mark.slow  # trains two steps, averages, translates, pushes and pulls: over 5 s on 2 busy cores
def test_push_to_hub_pushes_the_final_model_alone_and_prints_it_and_it_loads_without_the_package(
    checkpoint, hub, hub_env, tmp_path, capsys
):  # fmt: skip
    output = tmp_path / "run"
    argv = ["--model_name_or_path", checkpoint, "--output_dir", output, *RUN]
    code, out, err = run_command(train_command, [*argv, "--push_to_hub", "--hub_model_id", "user/train-push"], capsys)
    assert code == 0, err
    # What the Trainer's push would have taken lies in output_dir.
    assert (output / "runs").is_dir() and (output / "training_curves.png").is_file()
    assert (output / "checkpoint-2" / "optimizer.pt").is_file() and (output / "training_args.bin").is_file()
    files = repo_files(hub, "user/train-push")
    assert files - {".gitattributes"} == MODEL_FILES | PUSH_FILES
    assert pushed_lines(out) == MODEL_FILES | PUSH_FILES
    assert hub.head("user/train-push") and len(hub.uploaded_paths("user/train-push")) == 1, "one commit, at the end"
    assert out.strip().splitlines()[-1].endswith("/user/train-push")

    remote = run_client(
        PULL_WITHOUT_PACKAGE, hub_env, "user/train-push", json.dumps(SENTENCES), "pipeline", timeout=180
    )
    assert all(module.startswith("transformers_modules.") for module in remote["modules"]), remote["modules"]
    assert remote["config"]["auto_map"]["AutoModelForSeq2SeqLM"] == "modeling_vaswani.VaswaniForConditionalGeneration"
    final = output / "averaged"  # what --push_to_hub pushes, as vaswani-push does
    assert remote["weights"] == weight_digests(AutoModelForSeq2SeqLM.from_pretrained(final))
    assert remote["weights"] != weight_digests(AutoModelForSeq2SeqLM.from_pretrained(checkpoint)), "it trained"
    assert remote["generated"] == local_generate(final)
    assert remote["translations"] == local_translations(final)


@pytest.mark.slow  # trains, averages, translates and pushes twice
def test_the_default_id_revision_and_privacy_are_the_trainers_and_a_second_run_replaces(
    checkpoint, hub, tmp_path, capsys
):  # fmt: skip
    output = tmp_path / "run"
    argv = ["--model_name_or_path", checkpoint, "--output_dir", output, *RUN, "--push_to_hub"]
    code, out, err = run_command(train_command, [*argv, "--hub_private_repo", "true", "--hub_revision", "a"], capsys)
    assert code == 0, err
    assert repo_files(hub, "user/run", "a") - {".gitattributes"} == MODEL_FILES | PUSH_FILES  # output_dir's name
    assert Repo(hub.root, "model", "user/run").meta().get("private") is True
    # Again into the same folder, without the test split: the earlier model's results and translations go.
    again = [*argv, "--overwrite_output_dir", "--test_split", "none", "--hub_revision", "a"]
    code, out, err = run_command(train_command, again, capsys)
    assert code == 0, err
    assert (
        repo_files(hub, "user/run", "a") - {".gitattributes"}
        == MODEL_FILES - {"results.json", "test.hyp.de"} | PUSH_FILES
    )
    assert {"deleting results.json (the earlier model's; this one does not have it)"} <= set(out.splitlines())


def test_push_to_hub_without_averaging_is_refused_before_any_work(checkpoint, hub, tmp_path, capsys):
    requests = len(hub.request_log)
    argv = ["--model_name_or_path", checkpoint, "--output_dir", tmp_path / "run", *RUN, "--push_to_hub"]
    code, out, err = run_command(train_command, [*argv, "--average_last_checkpoints", 0], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "--average_last_checkpoints 0" in err and "output_dir itself" in err
    assert not (tmp_path / "run").exists() and len(hub.request_log) == requests


BAD_IDS = ["user/x/y", "user/../x", "user/--x", "us er/x", "user/x.", "-user/x", "user/" + "x" * 97, "user/x?"]


@pytest.mark.parametrize("repo_id", BAD_IDS)
def test_a_bad_hub_model_id_is_refused_before_any_work(repo_id, checkpoint, hub, tmp_path, capsys):
    requests = len(hub.request_log)
    argv = ["--model_name_or_path", checkpoint, "--output_dir", tmp_path / "run", *RUN, "--push_to_hub"]
    code, out, err = run_command(train_command, [*argv, f"--hub_model_id={repo_id}"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert repr(repo_id) in err and "expected user/name" in err
    assert not (tmp_path / "run").exists() and len(hub.request_log) == requests


# Characters a Hub repository name never holds (the Hub allows letters, digits, '-', '_' and '.').
FOREIGN = sorted(set(string.printable) - set(string.ascii_letters + string.digits + "-_./"))


@given(name=st.text(string.ascii_letters, min_size=1, max_size=8), bad=st.sampled_from(FOREIGN), at=st.integers(0, 8))
def test_an_id_with_any_character_the_hub_refuses_is_refused_before_training(name, bad, at, tmp_path_factory):
    output = tmp_path_factory.mktemp("bad-id") / "run"
    repo_id = f"user/{name[:at]}{bad}{name[at:]}"
    with pytest.raises(SystemExit) as exit:
        train_command.main(["--output_dir", str(output), "--push_to_hub", f"--hub_model_id={repo_id}", "--use_cpu"])
    assert exit.value.code == 2 and not output.exists()


@pytest.mark.parametrize("strategy", ["every_save", "checkpoint", "all_checkpoints"])
def test_a_hub_strategy_of_pushes_while_training_is_refused_before_any_work(strategy, checkpoint, tmp_path, capsys):
    argv = ["--model_name_or_path", checkpoint, "--output_dir", tmp_path / "run", *RUN, "--push_to_hub"]
    code, out, err = run_command(train_command, [*argv, "--hub_strategy", strategy], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"--hub_strategy {strategy}" in err and "pushes the final model once, at the end" in err
    assert not (tmp_path / "run").exists()


def test_without_a_login_push_to_hub_is_refused_before_any_work(checkpoint, hub, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "no-tokens"))
    argv = ["--model_name_or_path", checkpoint, "--output_dir", tmp_path / "run", *RUN, "--push_to_hub"]
    code, out, err = run_command(train_command, argv, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "log" in err, err
    assert not (tmp_path / "run").exists()


def test_the_trainer_itself_never_pushes(checkpoint, hub, tmp_path):
    args = VaswaniTrainingArguments(
        output_dir=str(tmp_path), push_to_hub=True, hub_model_id="user/never", use_cpu=True
    )
    requests = len(hub.request_log)
    with pytest.raises(ValueError, match="the Trainer's push uploads output_dir as it lies"):
        VaswaniTrainer(model=None, args=args)
    assert len(hub.request_log) == requests


def test_ablate_refuses_push_to_hub_before_any_line_is_trained(tmp_path, capsys):
    code, out, err = run_command(
        ablate_command, ["--rows", "base", "--output_dir", tmp_path / "ablate", "--push_to_hub"], capsys
    )
    assert code == 2 and "--push_to_hub" in err and "vaswani-push" in err, err
    assert not (tmp_path / "ablate").exists()
