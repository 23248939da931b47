"""One opener for everything a command loads (issue 41, part 3): CTranslate2 exports checked as checkpoints are, every
file named when missing or damaged; model_type checked by every command that reads a checkpoint and by the config
class itself; an unreadable file or folder named as such, by its own name; a pointer from transformers' removed
translation task to this package's.

The commands run through their `main(argv)`, as the console scripts call them; what needs another process (remote
code, a user who may not read a file) runs in one.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest
from helpers.refusals import refused
from helpers.training_setup import REPO, TESTS, free_port, tiny_checkpoint

from modeling_vaswani import VaswaniConfig, VaswaniForConditionalGeneration
from modeling_vaswani.toolkit.cli import (
    average,
    evaluate,
    export_ctranslate2,
    export_marian,
    plot_attention,
    push,
    score,
    serve,
    train,
    translate,
)

FAST = ["--num_beams", "1", "--max_new_tokens", "4"]


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("texts")
    (folder / "in.en").write_text("A man rides a bike.\nTwo dogs play.\n", encoding="utf-8")
    (folder / "in.de").write_text("Ein Mann fährt Rad.\nZwei Hunde spielen.\n", encoding="utf-8")
    return folder


# ---------------------------------------------------------------------------------------------------------------------
# CTranslate2 exports, validated like checkpoints
# ---------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def export(checkpoint, tmp_path_factory):
    pytest.importorskip("ctranslate2")
    folder = tmp_path_factory.mktemp("export") / "ct2"
    export_ctranslate2.main([str(checkpoint), str(folder)])
    return folder


@pytest.fixture(scope="module")
def other_tokenizer(tmp_path_factory):
    """The tokenizer.json of another model of the same vocabulary size (En-Fr): the same shapes, other tokens."""
    return tiny_checkpoint(tmp_path_factory.mktemp("en-fr"), lines=500, languages=("en", "fr")) / "tokenizer.json"


def edit_json(path, change):
    path.write_text(json.dumps(change(json.loads(path.read_text(encoding="utf-8")))), encoding="utf-8")


def cut(path, keep=0.5):
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


# Each damage, and what the error must say of it ({f} is the damaged export folder).
DAMAGES = {
    # the four of the issue
    "truncated model.bin": (lambda f, _: cut(f / "model.bin"), "{f}/model.bin is cut short"),
    "no shared_vocabulary.json": (
        lambda f, _: (f / "shared_vocabulary.json").unlink(),
        "export {f} lacks shared_vocabulary.json; expected every file vaswani-export-ctranslate2 writes",
    ),
    "corrupt vaswani_ctranslate2.json": (
        lambda f, _: (f / "vaswani_ctranslate2.json").write_text('{"quantiz'),
        "{f}/vaswani_ctranslate2.json is not valid JSON",
    ),
    "short vocabulary": (
        lambda f, _: edit_json(f / "shared_vocabulary.json", lambda tokens: tokens[:-10]),
        "{f}/shared_vocabulary.json has 390 tokens but {f}/model.bin's embedding matrix has 400 rows",
    ),
    # and beyond them
    "no model.bin, no tokenizer": (
        lambda f, _: [(f / name).unlink() for name in ("model.bin", "tokenizer.json", "tokenizer_config.json")],
        "export {f} lacks model.bin, tokenizer.json;",
    ),
    "long vocabulary": (
        lambda f, _: edit_json(f / "shared_vocabulary.json", lambda tokens: [*tokens, "extra"]),
        "{f}/shared_vocabulary.json has 401 tokens but {f}/model.bin's embedding matrix has 400 rows",
    ),
    "model.bin written over by a longer one": (
        lambda f, _: (f / "model.bin").write_bytes((f / "model.bin").read_bytes() + b"\0" * 100),
        "{f}/model.bin has 100 bytes past the end its headers describe",
    ),
    "model.bin that is no CTranslate2 file": (
        lambda f, _: (f / "model.bin").write_bytes(b"\x06\0\0\0\xff\xff" + b"\xff" * 64),
        "{f}/model.bin is cut short",
    ),
    "settings without position_rows": (
        lambda f, _: edit_json(f / "vaswani_ctranslate2.json", lambda s: {**s, "position_rows": None}),
        "{f}/vaswani_ctranslate2.json: position_rows=None; expected an int of at least 1",
    ),
    "settings that are an array": (
        lambda f, _: (f / "vaswani_ctranslate2.json").write_text("[1, 2]"),
        "{f}/vaswani_ctranslate2.json holds a list; expected a JSON object",
    ),
    "vocabulary that is an object": (
        lambda f, _: (f / "shared_vocabulary.json").write_text('{"a": 1}'),
        "{f}/shared_vocabulary.json holds a dict; expected a JSON array",
    ),
    "end token not in the vocabulary": (
        lambda f, _: edit_json(f / "config.json", lambda c: {**c, "eos_token": "<end>"}),
        "{f}/config.json: eos_token '<end>' is not in shared_vocabulary.json",
    ),
    "truncated generation_config.json": (
        lambda f, _: cut(f / "generation_config.json"),
        "{f}/generation_config.json is not valid JSON",
    ),
    "padding id outside the vocabulary": (
        lambda f, _: edit_json(f / "generation_config.json", lambda g: {**g, "pad_token_id": 400}),
        "{f}/generation_config.json: pad_token_id is 400; expected an id of the vocabulary (400 tokens)",
    ),
    "the tokenizer of another model": (
        lambda f, other: shutil.copyfile(other, f / "tokenizer.json"),
        "{f}: the tokenizer is not the one of shared_vocabulary.json: id ",
    ),
}


def no_ctranslate2(monkeypatch):
    """CTranslate2 may not read a folder the checks refuse: its Translator fails the test if it is ever built."""
    import ctranslate2

    def translator(*args, **kwargs):
        raise AssertionError("CTranslate2 was given the folder before the checks refused it")

    monkeypatch.setattr(ctranslate2, "Translator", translator)


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("command", ["translate", "score", "serve", "evaluate"])
def test_a_damaged_export_is_named_in_one_line_by_every_command(
    export, other_tokenizer, texts, tmp_path, capsys, monkeypatch, command, damage
):
    folder = shutil.copytree(export, tmp_path / "ct2")
    make, message = DAMAGES[damage]
    make(folder, other_tokenizer)
    no_ctranslate2(monkeypatch)
    main, argv = {
        "translate": (translate.main, ["--input", texts / "in.en", "--output", tmp_path / "out.de", *FAST]),
        "score": (score.main, ["--source", texts / "in.en", "--target", texts / "in.de"]),
        "serve": (serve.main, ["--port", free_port()]),
        "evaluate": (evaluate.main, ["--source", texts / "in.en", "--reference", texts / "in.de"]),
    }[command]
    error = refused(main, [folder, *argv], capsys)
    assert error.startswith(f"vaswani-{command}: error: ") and message.format(f=folder) in error, error
    assert not (tmp_path / "out.de").exists()


def test_a_whole_export_still_passes_the_checks_and_translates(export, texts, capsys):
    translate.main([str(export), "--input", str(texts / "in.en"), *FAST])
    assert len(capsys.readouterr().out.splitlines()) == 2


# ---------------------------------------------------------------------------------------------------------------------
# model_type: every command that reads a checkpoint, and the config class itself
# ---------------------------------------------------------------------------------------------------------------------


def with_model_type(checkpoint, folder, model_type):
    copy = shutil.copytree(checkpoint, folder)
    edit_json(copy / "config.json", lambda config: {**config, "model_type": model_type})
    return copy


# Each command's main and its arguments after the checkpoint (T: the test's folder, X: the texts' folder).
COMMANDS = {
    "translate": (translate.main, lambda T, X: ["--input", X / "in.en", *FAST]),
    "evaluate": (evaluate.main, lambda T, X: ["--source", X / "in.en", "--reference", X / "in.de"]),
    "score": (score.main, lambda T, X: ["--source", X / "in.en", "--target", X / "in.de"]),
    "serve": (serve.main, lambda T, X: ["--port", free_port()]),
    "plot-attention": (plot_attention.main, lambda T, X: ["A man.", "--output_dir", T / "maps"]),
    "export-ctranslate2": (export_ctranslate2.main, lambda T, X: [T / "ct2"]),
    "export-marian": (export_marian.main, lambda T, X: [T / "marian"]),
    "push": (push.main, lambda T, X: ["user/never-pushed", "--no_results"]),
    "average": (average.main, lambda T, X: [T / "other", "--output", T / "averaged"]),
    "train": (train.main, lambda T, X: ["--output_dir", T / "run"]),
}


@pytest.mark.parametrize("model_type", ["vaswanii", "bart"])
@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_that_reads_a_checkpoint_names_its_model_type(
    checkpoint, texts, tmp_path, capsys, command, model_type
):
    """A typo of "vaswani" (a type transformers does not know: it would ask to run the folder's code) and another
    model's type (one it knows: it would build that model from our weights), each named before any work."""
    folder = with_model_type(checkpoint, tmp_path / "model", model_type)
    shutil.copytree(checkpoint, tmp_path / "other")  # average's second checkpoint: a good one
    main, rest = COMMANDS[command]
    before = ["--model_name_or_path"] if command == "train" else []
    error = refused(main, [*before, folder, *rest(tmp_path, texts)], capsys)
    expected = f"{folder / 'config.json'} is not a Vaswani config: model_type is {model_type!r}, expected 'vaswani'"
    assert error == f"vaswani-{command}: error: {expected}"
    assert not {"averaged", "ct2", "marian", "maps", "run"} & {path.name for path in tmp_path.iterdir()}


def test_the_config_class_names_a_foreign_model_type_in_the_python_api(checkpoint, tmp_path):
    """Where this package's code first runs for such a folder, its config class refuses it, naming both types;
    transformers' own loaders only warn, and build the model from whatever config.json holds."""
    folder = with_model_type(checkpoint, tmp_path / "typo", "vaswanii")
    expected = "model_type is 'vaswanii', but VaswaniConfig is the configuration of model_type 'vaswani'"
    for load in (VaswaniForConditionalGeneration.from_pretrained, VaswaniConfig.from_pretrained):
        with pytest.raises(ValueError, match=expected):
            load(folder)
    with pytest.raises(ValueError, match="model_type is 'bart'"):
        VaswaniConfig.from_dict({**VaswaniConfig().to_dict(), "model_type": "bart"})
    assert VaswaniConfig.from_dict(VaswaniConfig(d_model=64, num_heads=4).to_dict()).d_model == 64  # its own: fine


# The folder's copy of the config class, run as remote code (trust_remote_code=True), with the package importable or
# not: the same refusal, naming the type.
REMOTE = """
import json, sys
if sys.argv[2] == "without":
    sys.modules["modeling_vaswani"] = None
else:
    import modeling_vaswani
from transformers import AutoModelForSeq2SeqLM
try:
    AutoModelForSeq2SeqLM.from_pretrained(sys.argv[1], trust_remote_code=True)
    print(json.dumps(None))
except ValueError as error:
    print(json.dumps(str(error)))
"""


@pytest.mark.parametrize("package", ["with", "without"])
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_the_checkpoints_own_code_names_a_foreign_model_type(checkpoint, tmp_path, package):
    folder = with_model_type(checkpoint, tmp_path / "typo", "vaswanii")
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules"), "HF_HUB_OFFLINE": "1"}
    run = subprocess.run(
        [sys.executable, "-c", REMOTE, folder, package], capture_output=True, text=True, env=env, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    error = json.loads(run.stdout.strip().splitlines()[-1])
    assert (
        error and "model_type is 'vaswanii', but VaswaniConfig is the configuration of model_type 'vaswani'" in error
    )


# A Hub repository whose config.json names another type, uploaded as it is, then translated: the command's exit code
# and last line of standard error, without and with --trust_remote_code.
HUB = """
import contextlib, io, json, sys
from huggingface_hub import HfApi
from modeling_vaswani.toolkit.cli import translate
repo, folder, source = sys.argv[1:4]
HfApi().create_repo(repo)
HfApi().upload_folder(repo_id=repo, folder_path=folder)
outcomes = []
for extra in ([], ["--trust_remote_code"]):
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        try:
            translate.main([repo, "--input", source, "--num_beams", "1", "--max_new_tokens", "4", *extra])
            code = 0
        except SystemExit as exit:
            code = exit.code
    outcomes.append([code, stderr.getvalue().strip().splitlines()[-1]])
print(json.dumps(outcomes))
"""


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_a_hub_model_of_another_type_is_named_before_transformers_asks_to_run_its_code(
    checkpoint, texts, hub_env, tmp_path
):
    from helpers.hub_server import run_client

    folder = with_model_type(checkpoint, tmp_path / "typo", "vaswanii")
    env = {**hub_env, "HF_MODULES_CACHE": str(tmp_path / "modules")}
    outcomes = run_client(HUB, env, "user/typo-type", folder, texts / "in.en", timeout=300)
    expected = "user/typo-type (Hub): its config.json is not a Vaswani config: model_type is 'vaswanii', expected"
    assert outcomes == [[2, f"vaswani-translate: error: {expected} 'vaswani'"]] * 2


# ---------------------------------------------------------------------------------------------------------------------
# Permission errors, named as such with the right file
# ---------------------------------------------------------------------------------------------------------------------

# Root reads any file: the cases run as root without the capabilities that let it (CAP_DAC_OVERRIDE and
# CAP_DAC_READ_SEARCH), so that a file's mode binds it as it binds its owner, which it is; as another user, plainly.
CAPABILITIES = "-dac_override,-dac_read_search"
UNPRIVILEGED = ["setpriv", "--bounding-set", CAPABILITIES, "--inh-caps", CAPABILITIES, "--"]

# Each case: a command's main run on one folder, in one process; its exit code and last line of stderr.
CASES = """
import contextlib, io, json, sys
from modeling_vaswani.toolkit.cli import average, push, translate
mains = {"translate": translate.main, "average": average.main, "push": push.main}
outcomes = []
for name, argv in json.loads(sys.argv[1]):
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        try:
            mains[name](argv)
            code = 0
        except SystemExit as exit:
            code = exit.code
    outcomes.append([code, (stderr.getvalue().strip().splitlines() or [""])[-1]])
print(json.dumps(outcomes))
"""


def unprivileged(command: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return command
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: root reads any file, so no permission can be denied")
    probe = subprocess.run([*UNPRIVILEGED, "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"setpriv cannot drop root's capabilities here: {probe.stderr.decode().strip()}")
    return [*UNPRIVILEGED, *command]


def sharded(checkpoint, folder):
    copy = shutil.copytree(checkpoint, folder)
    model = VaswaniForConditionalGeneration.from_pretrained(copy)
    (copy / "model.safetensors").unlink()
    model.save_pretrained(copy, max_shard_size="100KB")
    return copy


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_unreadable_files_and_folders_are_named_as_permission_denied(checkpoint, export, texts, tmp_path):
    # (what is made unreadable, its mode, the command, the path the error must name)
    cases = []
    for name in (
        "model.safetensors",
        "config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
    ):
        folder = shutil.copytree(checkpoint, tmp_path / f"file-{name}")
        cases.append((folder / name, 0o000, "translate", folder / name))
    shards = sharded(checkpoint, tmp_path / "sharded")
    shard = sorted(shards.glob("model-*-of-*.safetensors"))[-1]
    cases.append((shard, 0o000, "average", shard))
    for mode in (0o000, 0o600, 0o300):  # nothing; no execute (entering); no read (listing)
        folder = shutil.copytree(checkpoint, tmp_path / f"folder-{mode:o}")
        cases.append((folder, mode, "translate", folder))
    exported = shutil.copytree(export, tmp_path / "ct2-file")
    cases.append((exported / "model.bin", 0o000, "translate", exported / "model.bin"))
    exported_folder = shutil.copytree(export, tmp_path / "ct2-folder")
    cases.append((exported_folder, 0o000, "translate", exported_folder))
    pushed = shutil.copytree(checkpoint, tmp_path / "push-file")
    cases.append((pushed / "model.safetensors", 0o000, "push", pushed / "model.safetensors"))

    runs = []
    for path, _, command, _ in cases:
        folder = path if path.is_dir() else path.parent
        argv = {
            "translate": [str(folder), "--input", str(texts / "in.en"), *FAST],
            "average": [str(checkpoint), str(folder), "--output", str(tmp_path / "averaged")],
            "push": [str(folder), "user/never-pushed", "--no_results"],
        }[command]
        runs.append([command, argv])
    for path, mode, _, _ in cases:
        path.chmod(mode)
    try:
        env = {**os.environ, "PYTHONPATH": str(TESTS), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
        run = subprocess.run(
            unprivileged([sys.executable, "-c", CASES, json.dumps(runs)]),
            capture_output=True, text=True, env=env, cwd=REPO, timeout=600,
        )  # fmt: skip
    finally:
        for path, _, _, _ in cases:
            path.chmod(0o755 if path.is_dir() else 0o644)
    assert run.returncode == 0, run.stderr[-3000:]
    for (path, mode, command, named), (code, line) in zip(cases, json.loads(run.stdout.splitlines()[-1]), strict=True):
        assert code == 2, (path, mode, line)
        assert f"vaswani-{command}: error: {named}: permission denied (Permission denied" in line, (path, mode, line)


# ---------------------------------------------------------------------------------------------------------------------
# transformers' removed translation task: a pointer to this package's
# ---------------------------------------------------------------------------------------------------------------------

PIPELINE = """
import json, sys
import modeling_vaswani
from transformers import pipeline
try:
    pipeline("translation", model=sys.argv[1])
    print(json.dumps(None))
except KeyError as error:
    print(json.dumps(str(error)))
"""


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_the_removed_translation_task_is_refused_before_any_registration_and_the_docs_point_to_ours(checkpoint):
    """transformers 5 refuses "translation" before it consults registered tasks or the model's config (a check this
    package cannot reach): every place that shows this package's pipeline says so and names "vaswani-translation".
    Should transformers take the name back, this test says so."""
    run = subprocess.run([sys.executable, "-c", PIPELINE, checkpoint], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "has been removed" in json.loads(run.stdout.strip().splitlines()[-1])
    pointer = 'pipeline("translation")'
    places = [
        REPO / "README.md",
        REPO / "docs" / "hub.md",
        REPO / "docs" / "decoding.md",
        REPO / "modeling_vaswani" / "toolkit" / "hub" / "model_card.md",
    ]
    for place in places:
        text = " ".join(place.read_text(encoding="utf-8").split())
        assert pointer in text and "vaswani-translation" in text, place
        after = text[text.index(pointer) :][:300]
        assert "removed" in after and "vaswani-translation" in after, (place, after)
