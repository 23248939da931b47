"""What a push uploads, deletes and says (issue 51, items 4 and 19): the model's files alone, every other file named
and refused unless --include adds it, the list printed; a re-push deletes the earlier push's files that the new model
lacks and no other; a push overtaken by another is refused in one line saying to push again.

Against the project's Hub server on 127.0.0.1 (real HTTP), the command run in this process.
"""

import json
import os
import shutil
import string
import tempfile
from dataclasses import replace
from fnmatch import fnmatch
from pathlib import Path

import huggingface_hub
import pytest
from helpers.hub_server import Repo
from helpers.training_setup import checkpoint_with_results
from hypothesis import given
from hypothesis import strategies as st

import modeling_vaswani
from modeling_vaswani import VaswaniForConditionalGeneration
from modeling_vaswani.toolkit.checkpoints import CheckpointError, validate_checkpoint
from modeling_vaswani.toolkit.cli import push as push_command
from modeling_vaswani.toolkit.hub.push import files_to_push, push_checkpoint, stale_files


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return checkpoint_with_results(tmp_path_factory.mktemp("push-files") / "averaged")


@pytest.fixture(scope="module")
def model_checkpoint(model):
    return validate_checkpoint(model)


@pytest.fixture
def folder(model, tmp_path):
    return shutil.copytree(model, tmp_path / "averaged")


def push(argv, capsys) -> tuple[int, list[str], list[str]]:
    """vaswani-push ARGV: (exit code, stdout lines, stderr lines)."""
    try:
        push_command.main([str(arg) for arg in argv])
        code = 0
    except SystemExit as exit:
        code = exit.code
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def repo_files(hub_server, repo_id: str, branch: str = "main") -> set[str]:
    repo = Repo(hub_server.root, "model", repo_id)
    return set(repo.commit(hub_server.head(repo_id, branch))["tree"])


def test_a_users_secrets_and_log_are_refused_by_name_before_any_request(folder, hub, capsys):
    (folder / "secrets.txt").write_text("HF_TOKEN=hf_abc\n")
    (folder / "train.log").write_text("step 1 loss 9.2\n")
    requests = len(hub.request_log)
    code, out, err = push([folder, "user/secrets"], capsys)
    assert code == 2 and len(err) == 1, err
    assert "secrets.txt, train.log" in err[0] and str(folder) in err[0] and "--include" in err[0], err
    assert hub.request_log[requests:] == [], "nothing may reach the Hub before the folder is checked"


def test_weights_the_opener_does_not_read_are_refused_not_pushed_beside_the_model(folder, hub, capsys):
    """A stale pytorch_model.bin or another safetensors file beside model.safetensors: transformers could load either
    from the repository, so neither goes up unnamed."""
    (folder / "pytorch_model.bin").write_bytes(b"old weights")
    (folder / "model.fp16.safetensors").write_bytes(b"old weights")
    code, out, err = push([folder, "user/stale-weights"], capsys)
    assert code == 2 and "holds model.fp16.safetensors, pytorch_model.bin, which are not the model's files" in err[0]


def test_included_files_are_pushed_and_every_pushed_file_is_printed(folder, hub, capsys):
    (folder / "notes.md").write_text("trained on a laptop\n")
    (folder / "images").mkdir()
    (folder / "images" / "curve.png").write_bytes(b"\x89PNG\r\n")
    (folder / ".env").write_text("SECRET=1\n")  # hidden: stays local, as subfolders do unless included
    code, out, err = push([folder, "user/included", "--include", "notes.md", "--include", "images/*.png"], capsys)
    assert code == 0, err
    assert out[-1] == f"{hub.url}/user/included"
    printed = {line.removeprefix("pushing ") for line in out[:-1]}
    files = repo_files(hub, "user/included")
    assert printed == files - {".gitattributes"}, "the list printed is what the repository holds"
    assert {"notes.md", "images/curve.png", "model.safetensors", "tokenizer.json", "results.json"} <= files
    assert ".env" not in files and ".vaswani-output.json" not in files


def test_a_trainer_checkpoint_pushes_its_model_and_leaves_its_training_state(folder, hub, capsys):
    state = ["optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json", "training_args.bin"]
    for name in state:
        (folder / name).write_bytes(b"state")
    code, out, err = push([folder, "user/trainer-checkpoint"], capsys)
    assert code == 0, err
    assert not repo_files(hub, "user/trainer-checkpoint") & set(state)
    assert {f"left out {name} (the Trainer's training state, not the model's)" for name in state} <= set(out)


def test_the_files_the_marker_names_are_the_models_and_nothing_beside_them(folder, hub, capsys):
    (folder / "test.hyp.de").write_text("Ein Hund.\n")
    (folder / "scratch.txt").write_text("mine\n")
    names = [path.name for path in folder.iterdir() if path.name != "scratch.txt"]
    (folder / ".vaswani-output.json").write_text(json.dumps({"command": "vaswani-average", "files": names}))
    code, out, err = push([folder, "user/marked"], capsys)
    assert code == 2 and "holds scratch.txt, which is not the model's files" in err[0], err
    (folder / "scratch.txt").unlink()
    code, out, err = push([folder, "user/marked"], capsys)
    assert code == 0, err
    assert "test.hyp.de" in repo_files(hub, "user/marked")


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("missing.md", "--include missing.md matches no file in it"),
        ("../id_rsa", "--include ../id_rsa names "),
        ("link-to-key", "outside it"),
        ("README.md", "--include names README.md, which the push writes itself"),
    ],
)
def test_an_include_naming_no_file_of_the_folder_or_one_the_push_writes_is_refused(
    folder, hub, capsys, pattern, message
):
    (folder / "README.md").write_text("my card\n")
    (folder.parent / "id_rsa").write_text("PRIVATE KEY\n")
    (folder / "link-to-key").symlink_to(folder.parent / "id_rsa")
    code, out, err = push([folder, "user/bad-include", "--include", pattern], capsys)
    assert code == 2 and message in err[0], err


def test_a_symlink_to_a_file_outside_is_named_like_any_other_file(folder, tmp_path, hub, capsys):
    (tmp_path / "id_rsa").write_text("PRIVATE KEY\n")
    (folder / "notes.md").symlink_to(tmp_path / "id_rsa")
    code, out, err = push([folder, "user/symlink"], capsys)
    assert code == 2 and "holds notes.md, which is not the model's files" in err[0], err


def sharded(folder: Path) -> Path:
    model = VaswaniForConditionalGeneration.from_pretrained(folder)
    (folder / "model.safetensors").unlink()
    model.save_pretrained(folder, max_shard_size="100KB")
    return folder


def test_a_repush_deletes_the_earlier_models_files_it_lacks_and_no_file_added_by_hand(folder, model, hub, capsys):
    sharded(folder)
    shards = {path.name for path in folder.glob("model-*.safetensors")} | {"model.safetensors.index.json"}
    push_checkpoint(folder, "user/repush")
    # By hand, beside the first model: a half-precision copy, a tokenizer file and notes of the user's own.
    api = huggingface_hub.HfApi()
    added = ["model.fp16.safetensors", "added_tokens.json", "eval/notes.md"]
    api.create_commit(
        "user/repush", [huggingface_hub.CommitOperationAdd(name, b"{}") for name in added], commit_message="by hand"
    )
    code, out, err = push([model, "user/repush"], capsys)
    assert code == 0, err
    files = repo_files(hub, "user/repush")
    assert set(added) <= files, "files added by hand stay"
    assert not files & shards, "the first push's files that the second lacks go"
    gone = sorted(line.split(" ")[1] for line in out if line.startswith("deleting "))
    assert gone == sorted(shards) == sorted(hub.commit_log[-1]["deleted"]), "deleted in the commit, and said"


def test_a_push_overtaken_by_another_is_refused_in_one_line_saying_to_push_again(folder, hub, capsys):
    code, out, err = push([folder, "user/raced"], capsys)
    assert code == 0, err
    before = repo_files(hub, "user/raced")
    (folder / "results.json").write_text((folder / "results.json").read_text().replace("26.6049", "26.7"))
    hub.overtake("user/raced")
    code, out, err = push([folder, "user/raced"], capsys)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("vaswani-push: error: user/raced (main): another push changed the repository"), err
    assert err[0].endswith("push again"), err
    assert repo_files(hub, "user/raced") == before | {"raced.txt"}, "nothing of the overtaken push was committed"


names = st.text(string.ascii_letters + string.digits + "-_.", min_size=1, max_size=20).filter(
    lambda name: not name.startswith(".")
)
# A model folder's files by name, written out here: the model's, what a tokenizer writes, this package's code.
MODEL = {"config.json", "generation_config.json", "results.json", "README.md", "model.safetensors"}
MODEL |= {"vaswani_push.json"}  # a repository's snapshot pushed again: its list is the push's own, replaced
TOKENIZER = {"tokenizer.json", "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json"}
TOKENIZER |= {"added_tokens.json", "chat_template.jinja", "chat_template.json"}
CODE = {path.name for path in Path(modeling_vaswani.__file__).parent.glob("*_vaswani.py")}
TRAINING_STATE = {"optimizer.pt", "scheduler.pt", "scaler.pt", "trainer_state.json", "training_args.bin"}


@given(extra=st.sets(names, min_size=1, max_size=5))
def test_every_file_beside_the_models_is_named_in_the_refusal(model_checkpoint, extra):
    """Whatever names lie beside the model: a name that is no model's file is named in the refusal; with none such,
    the push goes on and uploads the model's files alone."""
    with tempfile.TemporaryDirectory() as root:
        folder = shutil.copytree(model_checkpoint.folder, Path(root) / "averaged", copy_function=os.link)
        for name in extra - {path.name for path in folder.iterdir()}:
            (folder / name).write_bytes(b"x")
        others = {
            name
            for name in extra
            if name not in MODEL | TOKENIZER | CODE | TRAINING_STATE and not fnmatch(name, "rng_state*.pth")
        }
        try:
            files, _ = files_to_push(replace(model_checkpoint, folder=folder))
        except CheckpointError as error:
            listed = str(error).split(" holds ", 1)[1].split(", which ", 1)[0].split(", ")
            assert set(listed) == others, (listed, others)
        else:
            assert not others and set(files) <= MODEL | TOKENIZER, files


@given(
    remote=st.sets(names, max_size=12),
    pushed=st.sets(names, max_size=12),
    earlier=st.sets(names, max_size=12),
)
def test_a_repush_deletes_exactly_the_earlier_files_the_new_model_lacks(remote, pushed, earlier):
    deleted = set(stale_files(sorted(remote), pushed, sorted(earlier)))
    for name in remote:
        assert (name in deleted) == (name in earlier and name not in pushed), name
    assert deleted <= remote
