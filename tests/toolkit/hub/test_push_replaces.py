"""A push replaces the model (issue 41, part 2): whatever an earlier push left in the repository, from_pretrained on it
loads the model pushed last, and the commit that pushed it deleted the earlier model's files in the same commit.

Against the project's Hub server with the real clients, in this process (the `hub` fixture points them at it).
"""

import json

import pytest
from helpers.hub_server import Repo
from helpers.training_setup import RESULTS, tiny_checkpoint
from huggingface_hub import CommitOperationAdd, HfApi
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from modeling_vaswani import VaswaniForConditionalGeneration
from modeling_vaswani.toolkit.hub.push import PushRaced, push_checkpoint, stale_files


def push_then_load(repo_id: str, folders: list, revision: str | None = None) -> dict:
    """Pushes each folder in turn to one repository (push_checkpoint, the function behind vaswani-push), then loads
    the repository as a user would: the shared embedding matrix's first row and the repository's files."""
    for folder in folders:
        push_checkpoint(folder, repo_id, revision=revision)
    model = AutoModelForSeq2SeqLM.from_pretrained(repo_id, revision=revision)
    return {
        "row": model.model.shared.weight[0, :4].tolist(),
        "files": sorted(HfApi().list_repo_files(repo_id, revision=revision)),
    }


def first_row(folder) -> list[float]:
    return VaswaniForConditionalGeneration.from_pretrained(folder).model.shared.weight[0, :4].tolist()


def layout(folder, max_shard_size: str | None, seed: int, root):
    """A tiny checkpoint with results.json, its weights saved in one file or in shards of at most `max_shard_size`."""
    folder = tiny_checkpoint(root / folder, seed=seed)
    (folder / "results.json").write_text(json.dumps(RESULTS))
    if max_shard_size is not None:
        model = VaswaniForConditionalGeneration.from_pretrained(folder)
        (folder / "model.safetensors").unlink()
        model.save_pretrained(folder, max_shard_size=max_shard_size)
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("layouts")
    made = {
        "single": layout("single", None, 0, root),
        "three shards": layout("three", "100KB", 1, root),
        "five shards": layout("five", "60KB", 2, root),
    }
    shards = {name: sorted(p.name for p in folder.glob("model-*.safetensors")) for name, folder in made.items()}
    assert len(shards["three shards"]) != len(shards["five shards"]) and len(shards["three shards"]) > 1, shards
    assert len({tuple(first_row(folder)) for folder in made.values()}) == 3, "three different models"
    return made


def weight_files(files: list[str]) -> list[str]:
    return [name for name in files if name.endswith((".safetensors", ".index.json", ".bin"))]


@pytest.mark.parametrize(
    "order",
    [
        ("single", "three shards"),
        ("three shards", "single"),
        ("three shards", "five shards"),
        ("five shards", "three shards"),
    ],
    ids=["single then sharded", "sharded then single", "three then five shards", "five then three shards"],
)
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_a_push_over_another_layout_loads_the_new_model_and_deletes_the_old_files_in_its_commit(
    hub, folders, order
):  # fmt: skip
    repo_id = "user/layout-" + "-".join(name.replace(" ", "") for name in order)
    first, second = (folders[name] for name in order)
    # The second model pushed twice: the repeat changes nothing, so makes no commit (and deletes nothing).
    out = push_then_load(repo_id, [first, second, second])
    assert out["row"] == pytest.approx(first_row(second), abs=0), "from_pretrained loaded another push's weights"
    assert weight_files(out["files"]) == sorted(weight_files([p.name for p in second.iterdir()]))
    old = set(weight_files([p.name for p in first.iterdir()])) - {p.name for p in second.iterdir()}
    commits = [entry for entry in hub.commit_log if entry["repo_id"] == repo_id]
    assert len(commits) == 2, "one commit a push that changes something"
    last = commits[-1]
    assert sorted(last["deleted"]) == sorted(old) and old, "the old files go in the commit that adds the new ones"
    assert set(last["files"]) >= set(weight_files([p.name for p in second.iterdir()])) - set(
        weight_files([p.name for p in first.iterdir()])
    )


# Another client's files in the repository first: an earlier model in other formats and a stale tokenizer file,
# beside a user's own files, at the top level and in a subfolder; then the push.
OTHERS = ["pytorch_model.bin", "model.fp16.safetensors", "tf_model.h5", "added_tokens.json", "notes.md",
          "images/curve.png", "last-checkpoint/model.safetensors"]  # fmt: skip


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_a_push_deletes_every_stale_model_file_and_keeps_the_users_files(hub, folders):
    repo_id, api = "user/others-first", HfApi()
    api.create_repo(repo_id)
    contents = {"added_tokens.json": json.dumps({"<extra>": 400}).encode()}
    others = [CommitOperationAdd(name, contents.get(name, b"\0" * 64)) for name in OTHERS]
    api.create_commit(repo_id, others, commit_message="others")
    push_checkpoint(folders["single"], repo_id)
    files = set(api.list_repo_files(repo_id))
    assert not files & {"pytorch_model.bin", "model.fp16.safetensors", "tf_model.h5", "added_tokens.json"}, files
    assert {"notes.md", "images/curve.png", "last-checkpoint/model.safetensors", "model.safetensors"} <= files
    assert len(AutoTokenizer.from_pretrained(repo_id)) == 400, "a stale added_tokens.json would have grown it"
    row = AutoModelForSeq2SeqLM.from_pretrained(repo_id).model.shared.weight[0, :4].tolist()
    assert row == pytest.approx(first_row(folders["single"]), abs=0)


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_a_branch_push_replaces_the_branchs_model_and_leaves_main(hub, folders):
    repo_id = "user/layout-branch"
    push_then_load(repo_id, [folders["single"]])
    out = push_then_load(repo_id, [folders["three shards"]], revision="dev")
    assert out["row"] == pytest.approx(first_row(folders["three shards"]), abs=0)
    assert "model.safetensors" not in out["files"]
    repo = Repo(hub.root, "model", repo_id)
    assert "model.safetensors" in repo.commit(hub.head(repo_id))["tree"], "main keeps its model"


# The repository changes between the push's look at it and its commit (another push, racing: the server lets another
# client's commit land first): the commit names the state it computed its deletions on, and the Hub refuses it rather
# than deleting from a state it never saw.
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_a_push_that_races_another_is_refused_and_changes_nothing(hub, folders):
    hub.overtake("user/layout-raced")
    with pytest.raises(PushRaced, match="another push changed the repository"):
        push_checkpoint(folders["single"], "user/layout-raced")
    assert sorted(HfApi().list_repo_files("user/layout-raced")) == [".gitattributes", "raced.txt"]


def test_stale_files_are_the_top_level_model_files_the_push_lacks():
    remote = [
        ".gitattributes",
        "README.md",
        "config.json",
        "model.safetensors",
        "model-00001-of-00002.safetensors",
        "model.safetensors.index.json",
        "pytorch_model.bin.index.json",
        "pytorch_model-00002-of-00002.bin",
        "training_args.bin",
        "flax_model.msgpack",
        "tokenizer.model",
        "spiece.model",
        "merges.txt",
        "chat_template.jinja",
        "results.json",
        "modeling_vaswani.py",
        "notes.md",
        "runs/model.safetensors",
    ]
    pushed = {"README.md", "config.json", "model.safetensors", "tokenizer.json", "modeling_vaswani.py"}
    assert stale_files(remote, pushed) == [
        "chat_template.jinja",
        "flax_model.msgpack",
        "merges.txt",
        "model-00001-of-00002.safetensors",
        "model.safetensors.index.json",
        "pytorch_model-00002-of-00002.bin",
        "pytorch_model.bin.index.json",
        "results.json",
        "spiece.model",
        "tokenizer.model",
    ]
