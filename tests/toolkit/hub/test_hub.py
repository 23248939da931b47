"""Sharing on the Hub, end to end against the project's Hub server with the real clients: vaswani-push in this
process, the pulls (and a push killed mid-upload) in fresh ones.

A tiny checkpoint is pushed with vaswani-push, then pulled where the package is not importable (the repository's
remote code) and where it is; both must reproduce the local model's weights, generate() output and pipeline text
exactly. vaswani-train --push_to_hub's model, pulled the same way: tests/toolkit/hub/test_train_push.py.
"""

import contextlib
import hashlib
import io
import json
import shutil
import signal
import subprocess
import sys
import time

import pytest
from helpers.hub_server import Repo, point_clients_at, run_client
from helpers.pulls import PULL_WITHOUT_PACKAGE, SENTENCES, local_generate, local_translations, weight_digests
from helpers.training_setup import checkpoint_with_results
from safetensors.torch import load_file, save_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

import modeling_vaswani  # noqa: F401  (registers the model and the pipeline in this process)
from modeling_vaswani.remote_code_vaswani import PAYLOAD_FILES
from modeling_vaswani.toolkit.checkpoints import validate_checkpoint
from modeling_vaswani.toolkit.cli import push as push_command
from modeling_vaswani.toolkit.hub.push import render_model_card

pytestmark = pytest.mark.slow  # pushes and pulls through subprocesses

REPO_ID = "user/vaswani-tiny"
EXPECTED_FILES = {
    ".gitattributes",
    "README.md",
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "results.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "vaswani_push.json",  # what the push uploaded, for the next push to replace
    *PAYLOAD_FILES,  # the model's code, the pipeline's, and what they import
}


@pytest.fixture(scope="module")
def env(hub_server, tmp_path_factory):
    env = hub_server.client_env(tmp_path_factory.mktemp("hf_home"))
    env.update(OMP_NUM_THREADS="1", HF_MODULES_CACHE=str(tmp_path_factory.mktemp("modules")))
    return env


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return checkpoint_with_results(tmp_path_factory.mktemp("tiny") / "averaged")


@pytest.fixture(scope="module")
def push(hub_server, tmp_path_factory):
    """vaswani-push run in this process against the Hub server (its clients pointed there for the module): the
    command's standard output."""
    with pytest.MonkeyPatch.context() as patch:
        point_clients_at(hub_server, patch, tmp_path_factory.mktemp("hub-cache"))

        def run(*arguments) -> str:
            with contextlib.redirect_stdout(io.StringIO()) as out:
                push_command.main([str(argument) for argument in arguments])
            return out.getvalue()

        yield run


@pytest.fixture(scope="module")
def pushed(checkpoint, push):
    """The checkpoint pushed to REPO_ID's main with vaswani-push, as a private repository; the command's output."""
    return push(checkpoint, REPO_ID, "--private")


def test_push_then_pull_without_the_package(hub_server, checkpoint, pushed, env):
    assert pushed.strip().splitlines()[-1] == f"{hub_server.url}/{REPO_ID}"
    assert Repo(hub_server.root, "model", REPO_ID).meta()["private"] is True
    remote = run_client(PULL_WITHOUT_PACKAGE, env, REPO_ID, json.dumps(SENTENCES), "pipeline", timeout=180)
    assert set(remote["files"]) == EXPECTED_FILES
    assert remote["config"]["auto_map"]["AutoModelForSeq2SeqLM"] == "modeling_vaswani.VaswaniForConditionalGeneration"
    assert remote["config"]["custom_pipelines"]["vaswani-translation"]["impl"] == (
        "pipeline_vaswani.VaswaniTranslationPipeline"
    )
    assert all(module.startswith("transformers_modules.") for module in remote["modules"]), remote["modules"]
    assert remote["card"] == render_model_card(validate_checkpoint(checkpoint), REPO_ID)
    local = AutoModelForSeq2SeqLM.from_pretrained(checkpoint)
    assert remote["weights"] == weight_digests(local)
    assert remote["generated"] == local_generate(checkpoint)
    assert remote["translations"] == local_translations(checkpoint)


# Loads the same repository where the package is installed: its own classes, no trust_remote_code needed.
PULL_WITH_PACKAGE = """
import hashlib, json, sys
import modeling_vaswani
from huggingface_hub import hf_hub_download
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

repo, revisions, sentences = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])

def digest(revision):
    model = AutoModelForSeq2SeqLM.from_pretrained(repo, revision=revision)
    return type(model).__module__, hashlib.sha256(model.model.shared.weight.detach().numpy().tobytes()).hexdigest()

def error(call, *args, **kwargs):
    try:
        call(*args, **kwargs)
    except Exception as exception:
        return type(exception).__name__
    return None

translator = pipeline("vaswani-translation", model=repo, revision="dev")
print(json.dumps({
    "models": [digest(revision) for revision in revisions],
    "tokenizer": AutoTokenizer.from_pretrained(repo, revision="dev")(sentences)["input_ids"],
    "pipeline": type(translator).__module__,
    "translations": translator(sentences, batch_size=2),
    "missing_repo": error(AutoModelForSeq2SeqLM.from_pretrained, "user/no-such-model"),
    "missing_revision": error(AutoModelForSeq2SeqLM.from_pretrained, repo, revision="no-such-branch"),
    "missing_file": error(hf_hub_download, repo, "no-such-file.json"),
    "missing_repo_download": error(hf_hub_download, "user/no-such-model", "config.json"),
    "missing_revision_download": error(hf_hub_download, repo, "config.json", revision="no-such-branch"),
}))
"""


def shared_embedding_digest(folder) -> str:
    return hashlib.sha256(load_file(folder / "model.safetensors")["model.shared.weight"].numpy().tobytes()).hexdigest()


def test_branch_push_loads_by_branch_and_commit_with_the_package(hub_server, checkpoint, pushed, push, env, tmp_path):
    retrained = checkpoint_with_results(tmp_path / "retrained", seed=1)
    push(retrained, REPO_ID, "--revision", "dev", "--commit_message", "Retrained")
    main, dev = hub_server.head(REPO_ID), hub_server.head(REPO_ID, "dev")
    assert Repo(hub_server.root, "model", REPO_ID).commit(dev)["summary"] == "Retrained"
    revisions = [None, "main", "dev", dev, main[:10]]  # the default, branches, a commit id and a short one
    out = run_client(PULL_WITH_PACKAGE, env, REPO_ID, json.dumps(revisions), json.dumps(SENTENCES), timeout=180)

    first, second = shared_embedding_digest(checkpoint), shared_embedding_digest(retrained)
    assert first != second
    assert out["models"] == [["modeling_vaswani.modeling_vaswani", d] for d in (first, first, second, second, first)]
    assert out["tokenizer"] == AutoTokenizer.from_pretrained(retrained)(SENTENCES)["input_ids"]
    # With the package installed, its registration wins: the payload's pipeline with sentences split (issue 42).
    assert out["pipeline"] == "modeling_vaswani.toolkit.translation.pipeline"
    assert out["translations"] == local_translations(retrained)
    assert out["missing_repo"] == out["missing_revision"] == "OSError"  # transformers' error for a missing model
    assert out["missing_file"] == "RemoteEntryNotFoundError"
    assert out["missing_repo_download"] == "RepositoryNotFoundError"
    assert out["missing_revision_download"] == "RevisionNotFoundError"


# push_checkpoint, killed while the weights are half uploaded: a raw PUT of half the bytes, then SIGKILL.
KILLED_MID_UPLOAD = """
import os, signal, socket, sys
from urllib.parse import urlsplit
import huggingface_hub.lfs
from modeling_vaswani.toolkit.hub.push import push_checkpoint

def half_then_killed(operation, upload_url):
    with operation.as_file() as file:
        data = file.read()
    url = urlsplit(upload_url)
    connection = socket.create_connection((url.hostname, url.port))
    head = f"PUT {url.path} HTTP/1.1\\r\\nHost: {url.netloc}\\r\\nContent-Length: {len(data)}\\r\\n\\r\\n"
    connection.sendall(head.encode() + data[: len(data) // 2])
    os.kill(os.getpid(), signal.SIGKILL)

huggingface_hub.lfs._upload_single_part = half_then_killed
push_checkpoint(sys.argv[1], sys.argv[2], revision=sys.argv[3])
"""


def wait_until(condition, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_killed_push_keeps_the_last_commit_and_a_retry_uploads_only_the_changed_file(
    hub_server, checkpoint, pushed, push, env, tmp_path
):
    """The checkpoint with new weights, pushed to a new branch "retry" (made from main, which holds the old ones)."""
    hub = Repo(hub_server.root, "model", REPO_ID)
    changed = tmp_path / "changed"
    shutil.copytree(checkpoint, changed)
    weights = load_file(changed / "model.safetensors")
    weights["model.shared.weight"] += 0.01
    save_file(weights, changed / "model.safetensors", metadata={"format": "pt"})
    new_weights = hashlib.sha256((changed / "model.safetensors").read_bytes()).hexdigest()

    requests = len(hub_server.request_log)
    killed = subprocess.run([sys.executable, "-c", KILLED_MID_UPLOAD, changed, REPO_ID, "retry"], env=env, timeout=120)
    assert killed.returncode == -signal.SIGKILL
    half_put = ("PUT", f"/lfs-objects/models/{REPO_ID}/{new_weights}")
    wait_until(lambda: half_put in hub_server.request_log[requests:])  # the server's thread may not have run yet
    assert hub_server.head(REPO_ID, "retry") == hub_server.head(REPO_ID), "the branch was made, nothing committed"
    size = (changed / "model.safetensors").stat().st_size
    assert new_weights not in hub_server.lfs_uploads(REPO_ID) and not hub.has_lfs(new_weights, size)

    push(changed, REPO_ID, "--revision", "retry")
    assert hub_server.uploaded_paths(REPO_ID)[-1] == ["model.safetensors"]
    assert hub_server.lfs_uploads(REPO_ID)[-1] == new_weights
    tree = hub.commit(hub_server.head(REPO_ID, "retry"))["tree"]
    assert tree["model.safetensors"]["lfs"]["oid"] == new_weights
    assert hub.commit(hub_server.head(REPO_ID))["tree"]["model.safetensors"] != tree["model.safetensors"], "main kept"


# vaswani-push run on each folder in turn, in one process: its exit code and what it printed to stderr.
REFUSED = """
import contextlib, io, json, runpy, sys
script, repo, folders = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
outcomes = []
for folder in folders:
    sys.argv, stderr = [script, folder, repo], io.StringIO()
    with contextlib.redirect_stderr(stderr):
        try:
            runpy.run_module(script, run_name="__main__")
        except SystemExit as exit:
            outcomes.append([exit.code, stderr.getvalue().strip().splitlines()[-1]])
print(json.dumps(outcomes))
"""


def broken_copies(checkpoint, root) -> dict:
    """Copies of the checkpoint, each with one fault, by the message expected for it."""
    faults = {
        "has no config.json": lambda folder: (folder / "config.json").unlink(),
        "has no weights: expected model.safetensors": lambda folder: (folder / "model.safetensors").unlink(),
        "the tokenizer has 400 tokens but config.json's vocab_size is 512": lambda folder: edit_config(
            folder, vocab_size=512
        ),
        "has no results.json": lambda folder: (folder / "results.json").unlink(),
    }
    folders = {}
    for number, (message, fault) in enumerate(faults.items()):
        folders[message] = shutil.copytree(checkpoint, root / f"broken-{number}")
        fault(folders[message])
    return folders


def edit_config(folder, **values):
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **values}))


def test_invalid_checkpoints_are_refused_before_any_request(hub_server, checkpoint, env, tmp_path):
    folders = broken_copies(checkpoint, tmp_path)
    requests = len(hub_server.request_log)
    folder_list = json.dumps([str(f) for f in folders.values()])
    outcomes = run_client(REFUSED, env, "modeling_vaswani.toolkit.cli.push", "user/never-created", folder_list)
    assert hub_server.request_log[requests:] == [], "nothing may reach the Hub before the folder is checked"
    for (message, folder), (code, error) in zip(folders.items(), outcomes, strict=True):
        assert code == 2 and message in error and str(folder) in error, error
