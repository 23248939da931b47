import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from helpers.training_setup import REPO, tiny_checkpoint
from helpers.training_setup import command as run_command
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from modeling_vaswani.toolkit.checkpoints import CheckpointError, find_checkpoints
from modeling_vaswani.toolkit.cli import average as average_command
from modeling_vaswani.toolkit.outputs import AVERAGED, MARKER, staged_folder
from modeling_vaswani.toolkit.training import averaging
from modeling_vaswani.toolkit.training.averaging import average_checkpoints

MODEL_FILES = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "modeling_x.py"]
TRAINER_FILES = ["optimizer.pt", "scheduler.pt", "scaler.pt", "rng_state.pth", "rng_state_1.pth", "trainer_state.json"]
TRAINER_FILES += ["training_args.bin", "pytorch_model.bin"]


def make_checkpoint(folder: Path, tensors: dict, shards: list[list[str]] | None = None, tag: str = "") -> Path:
    """A Trainer-like checkpoint folder; `shards` lists the keys of each shard file, else one model.safetensors."""
    folder.mkdir(parents=True)
    if shards is None:
        save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    else:
        weight_map = {}
        for number, keys in enumerate(shards, start=1):
            name = f"model-{number:05d}-of-{len(shards):05d}.safetensors"
            save_file({key: tensors[key] for key in keys}, folder / name, metadata={"format": "pt"})
            weight_map.update(dict.fromkeys(keys, name))
        index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    for name in MODEL_FILES + TRAINER_FILES:
        (folder / name).write_text(f"{name} of {tag or folder.name}")
    # One tokenizer in every checkpoint (averaging requires it), each file still telling which checkpoint it came from.
    vocabulary = {"model": {"type": "BPE", "vocab": {"<pad>": 0, "a": 1}, "merges": []}}
    (folder / "tokenizer.json").write_text(
        json.dumps({**vocabulary, "from": f"tokenizer.json of {tag or folder.name}"})
    )
    return folder


def weights(step: float) -> dict:
    return {
        "encoder.weight": torch.full((2, 3), step, dtype=torch.float32),
        "decoder.weight": torch.full((4,), step, dtype=torch.bfloat16),
        "position_ids": torch.arange(5),
    }


@pytest.fixture
def three_checkpoints(tmp_path):
    return [make_checkpoint(tmp_path / f"checkpoint-{step}", weights(step)) for step in (1, 2, 3)]


def test_mean_of_one_two_three_is_two_in_each_dtype(three_checkpoints, tmp_path):
    output = average_checkpoints(three_checkpoints, tmp_path / "averaged")
    averaged = load_file(output / "model.safetensors")
    assert torch.equal(averaged["encoder.weight"], torch.full((2, 3), 2.0))
    assert averaged["decoder.weight"].dtype == torch.bfloat16
    assert torch.equal(averaged["decoder.weight"], torch.full((4,), 2.0, dtype=torch.bfloat16))
    assert torch.equal(averaged["position_ids"], torch.arange(5)), "integer tensors are kept, not averaged"
    with safe_open(output / "model.safetensors", framework="pt") as file:
        assert file.metadata() == {"format": "pt"}


def test_mean_matches_hand_computation_with_single_rounding(tmp_path):
    generator = torch.Generator().manual_seed(0)
    values = [torch.randn(8, 8, generator=generator) for _ in range(5)]
    folders = [
        make_checkpoint(tmp_path / f"checkpoint-{i}", {"w": v.to(torch.bfloat16), "f": v})
        for i, v in enumerate(values)
    ]
    averaged = load_file(average_checkpoints(folders, tmp_path / "out") / "model.safetensors")
    expected = torch.stack([v.to(torch.bfloat16).double() for v in values]).mean(0).to(torch.bfloat16)
    assert torch.equal(averaged["w"], expected)
    assert torch.allclose(averaged["f"], torch.stack(values).mean(0), atol=1e-6)


def test_sharded_checkpoints_keep_layout_and_index(tmp_path):
    shards = [["encoder.weight"], ["decoder.weight", "position_ids"]]
    folders = [make_checkpoint(tmp_path / f"checkpoint-{s}", weights(s), shards) for s in (2, 4)]
    output = average_checkpoints(folders, tmp_path / "out")
    index = json.loads((output / "model.safetensors.index.json").read_text())
    assert index == json.loads((folders[-1] / "model.safetensors.index.json").read_text())
    assert sorted(p.name for p in output.glob("*.safetensors")) == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ]
    first, second = (load_file(output / f"model-0000{n}-of-00002.safetensors") for n in (1, 2))
    assert set(first) == {"encoder.weight"} and set(second) == {"decoder.weight", "position_ids"}
    assert torch.equal(first["encoder.weight"], torch.full((2, 3), 3.0))
    assert torch.equal(second["decoder.weight"], torch.full((4,), 3.0, dtype=torch.bfloat16))


def test_layout_follows_last_checkpoint_when_layouts_differ(tmp_path):
    sharded = make_checkpoint(
        tmp_path / "checkpoint-1", weights(1), [["encoder.weight"], ["decoder.weight", "position_ids"]]
    )
    single = make_checkpoint(tmp_path / "checkpoint-2", weights(3))
    output = average_checkpoints([sharded, single], tmp_path / "out")
    assert sorted(p.name for p in output.glob("model*.safetensors*")) == ["model.safetensors"]
    assert torch.equal(load_file(output / "model.safetensors")["encoder.weight"], torch.full((2, 3), 2.0))


def test_model_files_of_last_checkpoint_copied_and_trainer_state_skipped(three_checkpoints, tmp_path):
    output = average_checkpoints(three_checkpoints, tmp_path / "out")
    assert sorted(p.name for p in output.iterdir()) == sorted(MODEL_FILES + ["model.safetensors", MARKER])
    assert (output / "config.json").read_text() == "config.json of checkpoint-3"


def test_find_checkpoints_sorts_numerically_and_ignores_other_entries(tmp_path):
    for name in ("checkpoint-10", "checkpoint-9", "checkpoint-100", "checkpoint-x", "runs", "checkpoint-5.tmp"):
        (tmp_path / name).mkdir()
    (tmp_path / "checkpoint-7").write_text("a file, not a checkpoint")
    assert [p.name for p in find_checkpoints(tmp_path)] == ["checkpoint-9", "checkpoint-10", "checkpoint-100"]
    assert [p.name for p in find_checkpoints(tmp_path, last=2)] == ["checkpoint-10", "checkpoint-100"]


@pytest.mark.parametrize(("last", "message"), [(4, "last 4 checkpoints but .* has only 3"), (0, "got 0")])
def test_find_checkpoints_errors(tmp_path, last, message):
    for step in (1, 2, 3):
        (tmp_path / f"checkpoint-{step}").mkdir()
    with pytest.raises(ValueError, match=message):
        find_checkpoints(tmp_path, last=last)


def test_find_checkpoints_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        find_checkpoints(tmp_path / "nowhere")


def test_mismatched_keys_name_the_key_and_checkpoints(tmp_path):
    first = make_checkpoint(tmp_path / "checkpoint-1", weights(1))
    second = make_checkpoint(tmp_path / "checkpoint-2", {**weights(2), "extra.bias": torch.zeros(1)})
    with pytest.raises(ValueError, match=r"'extra.bias' is in .*checkpoint-2 but not in .*checkpoint-1"):
        average_checkpoints([first, second], tmp_path / "out")


def test_mismatched_shape_names_the_key_and_checkpoints(tmp_path):
    first = make_checkpoint(tmp_path / "checkpoint-1", {**weights(1), "encoder.weight": torch.zeros(3, 2)})
    second = make_checkpoint(tmp_path / "checkpoint-2", weights(2))
    with pytest.raises(ValueError, match=r"'encoder.weight' is \(3, 2\) .*checkpoint-1 but \(2, 3\) .*checkpoint-2"):
        average_checkpoints([first, second], tmp_path / "out")


def test_differing_integer_tensors_are_an_error(tmp_path):
    first = make_checkpoint(tmp_path / "checkpoint-1", {**weights(1), "position_ids": torch.arange(5) + 1})
    second = make_checkpoint(tmp_path / "checkpoint-2", weights(2))
    with pytest.raises(ValueError, match="non-floating-point tensor 'position_ids' differs"):
        average_checkpoints([first, second], tmp_path / "out")


def test_other_argument_errors(three_checkpoints, tmp_path):
    with pytest.raises(ValueError, match="no checkpoints"):
        average_checkpoints([], tmp_path / "out")
    with pytest.raises(ValueError, match="is also an input; expected another folder"):
        average_checkpoints(three_checkpoints, three_checkpoints[-1])
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="has no weights: expected model.safetensors or model.safetensors.index"):
        average_checkpoints([tmp_path / "empty"], tmp_path / "out")


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(".out."))


def existing_output(parent: Path) -> Path:
    """An earlier output of vaswani-average (written, and so marked, by it)."""
    with staged_folder(parent / "out", AVERAGED) as staged:
        (staged / "results.json").write_text("previous average")
    return parent / "out"


def names(output: Path) -> list[str]:
    return [p.name for p in output.iterdir() if p.name != MARKER]


def test_failure_midway_leaves_existing_output_untouched(tmp_path):
    first = make_checkpoint(tmp_path / "checkpoint-1", weights(1))
    second = make_checkpoint(tmp_path / "checkpoint-2", {**weights(2), "decoder.weight": torch.zeros(5)})
    output = existing_output(tmp_path)
    with pytest.raises(ValueError, match="decoder.weight"):
        average_checkpoints([first, second], output)
    assert names(output) == ["results.json"]
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("failing", ["save_file", "_copy_model_files"])
def test_writer_failure_removes_staging_folder(three_checkpoints, tmp_path, monkeypatch, failing):
    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(averaging, failing, fail)
    output = existing_output(tmp_path)
    with pytest.raises(OSError, match="disk full"):
        average_checkpoints(three_checkpoints, output)
    assert (output / "results.json").read_text() == "previous average"
    assert leftovers(tmp_path) == []


def test_failed_rename_restores_existing_output(three_checkpoints, tmp_path, monkeypatch):
    output = existing_output(tmp_path)
    rename = Path.rename

    def fail_for_staging(self, target):
        if self.name.startswith(".out.partial-"):
            raise OSError("rename failed")
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", fail_for_staging)
    with pytest.raises(OSError, match="rename failed"):
        average_checkpoints(three_checkpoints, output)
    assert names(output) == ["results.json"]
    assert leftovers(tmp_path) == []


def test_existing_output_is_replaced_entirely(three_checkpoints, tmp_path):
    output = existing_output(tmp_path)
    average_checkpoints(three_checkpoints, output)
    assert not (output / "results.json").exists() and (output / "model.safetensors").is_file()
    assert leftovers(tmp_path) == []


def run_script(*arguments):
    command = [*run_command("average"), *map(str, arguments)]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)


@pytest.fixture
def script_main():
    """The script's `main`, run in this process: a subprocess costs seconds of imports, so only one test pays it."""
    return average_command.main


@pytest.fixture(scope="module")
def vaswani_checkpoints(tmp_path_factory):
    """Three checkpoints of one tiny Vaswani model (the command averages only those), their floating-point weights
    those of the first times 1, 2 and 3; and the first's shared embedding matrix."""
    root = tmp_path_factory.mktemp("run")
    base = tiny_checkpoint(root / "base", lines=300)
    weights = load_file(base / "model.safetensors")
    folders = []
    for step in (1, 2, 3):
        folder = shutil.copytree(base, root / f"checkpoint-{step}")
        scaled = {key: value * step if value.is_floating_point() else value for key, value in weights.items()}
        save_file(scaled, folder / "model.safetensors", metadata={"format": "pt"})
        folders.append(folder)
    shutil.rmtree(base)
    return folders, weights["model.shared.weight"]


def averaged_embeddings(folder):
    return load_file(folder / "model.safetensors")["model.shared.weight"]


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_cli_with_training_output_dir(vaswani_checkpoints, tmp_path):
    (first, *_), shared = vaswani_checkpoints
    result = run_script("--output_dir_of_training", first.parent, "--last", 2, "--output", tmp_path / "last2")
    assert result.returncode == 0, result.stderr
    assert "averaged 2 checkpoints" in result.stdout and "checkpoint-1" not in result.stdout
    assert torch.allclose(averaged_embeddings(tmp_path / "last2"), shared * 2.5, rtol=1e-6, atol=0)


def test_cli_with_explicit_folders(vaswani_checkpoints, tmp_path, script_main, capsys):
    folders, shared = vaswani_checkpoints
    script_main([*map(str, folders[:2]), "--output", str(tmp_path / "first2")])
    assert "averaged 2 checkpoints" in capsys.readouterr().out
    assert torch.allclose(averaged_embeddings(tmp_path / "first2"), shared * 1.5, rtol=1e-6, atol=0)


def test_cli_refuses_a_checkpoint_of_another_model_type_naming_it(vaswani_checkpoints, tmp_path, script_main, capsys):
    """The command averages Vaswani checkpoints only: one whose config.json names another model_type (a typo here)
    is refused by the checkpoint opener, before anything is written."""
    folders, _ = vaswani_checkpoints
    typo = shutil.copytree(folders[1], tmp_path / "typo")
    config = json.loads((typo / "config.json").read_text())
    (typo / "config.json").write_text(json.dumps({**config, "model_type": "vaswanii"}))
    with pytest.raises(SystemExit) as exit_info:
        script_main([str(folders[0]), str(typo), "--output", str(tmp_path / "out")])
    error = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert f"{typo / 'config.json'} is not a Vaswani config: model_type is 'vaswanii', expected 'vaswani'" in error
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ([], "either checkpoint folders or --output_dir_of_training"),
        (["checkpoint-1", "--output_dir_of_training", "runs", "--last", "2"], "not both"),
        (["--output_dir_of_training", "runs"], "needs --last N"),
        (["checkpoint-1", "--last", "2"], "--last only applies"),
    ],
)
def test_cli_rejects_ambiguous_arguments(tmp_path, script_main, capsys, arguments, message):
    with pytest.raises(SystemExit) as exit_info:
        script_main([*arguments, "--output", str(tmp_path / "out")])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
