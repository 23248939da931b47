"""Real multi-process training: two CPU processes over gloo, launched with torchrun and with accelerate launch."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil  # comes with accelerate
import pytest
import torch
from helpers.launching import environment
from helpers.training_setup import REPO, TESTS, tiny_checkpoint
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM

pytestmark = pytest.mark.slow  # several processes over gloo


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("tiny"))


def run(command, cwd):
    result = subprocess.run(command, cwd=cwd, env=environment(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    return result


def max_difference(first: dict, second: dict) -> float:
    assert first.keys() == second.keys()
    return max((first[name].double() - second[name].double()).abs().max().item() for name in first)


def test_two_processes_match_one_with_accumulation_under_sgd(checkpoint, tmp_path):
    """2 ranks x 1 batch each == 1 process x 2 accumulated batches: the same global batches (the token-budget
    sampler deals batch i to rank i mod 2), so the same updates up to floating-point summation order.

    Under plain SGD (no momentum, constant learning rate), which is linear in the gradient: with Adam a gradient
    scaled by the world size would give the same update and pass. The control, the one-process run with the learning
    rate doubled, is exactly what a gradient doubled by a world-size error gives under SGD; it must be far outside
    the tolerance, which shows the comparison can see a factor of 2."""
    two, one = tmp_path / "two", tmp_path / "one"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    ddp_train = str(TESTS / "helpers" / "ddp_train.py")
    run([*torchrun, ddp_train, str(checkpoint), str(two), "1", "--learning_rates", "0.5"], tmp_path)
    alone_command = [sys.executable, ddp_train, str(checkpoint), str(one), "2"]
    run([*alone_command, "--learning_rates", "0.5", "1"], tmp_path)

    rank0 = torch.load(two / "weights-rank0-lr0.5.pt")
    rank1 = torch.load(two / "weights-rank1-lr0.5.pt")
    assert all(torch.equal(rank0[name], rank1[name]) for name in rank0)  # DDP kept the replicas identical
    alone = torch.load(one / "weights-rank0-lr0.5.pt")
    doubled = torch.load(one / "weights-rank0-lr1.pt")
    initial = load_file(checkpoint / "model.safetensors")
    update = max_difference(
        {name: initial[name] for name in alone if name in initial},
        {name: alone[name] for name in alone if name in initial},
    )
    difference, control = max_difference(rank0, alone), max_difference(rank0, doubled)
    print(
        f"max |w| difference after 6 SGD steps: 2 ranks vs 1 process x 2 accumulated {difference:.3g}; "
        f"vs the same with the learning rate doubled {control:.3g}; largest update {update:.3g}"
    )
    two_result = json.loads((two / "result.json").read_text())["0.5"]
    one_result = json.loads((one / "result.json").read_text())["0.5"]
    for result in (two_result, one_result):
        assert result["optimizer"] == "SGD" and result["momentum"] == 0 and result["learning_rates"] == [0.5]
    assert two_result["world_size"] == 2 and one_result["world_size"] == 1
    assert two_result["batches_per_rank"] * 2 == one_result["batches_per_rank"]
    assert difference < 1e-6
    assert control > 1e-2 and update > 1e-2  # 4 orders of magnitude above the tolerance
    print(f"loss after 6 steps: 2 processes {two_result['loss']:.6f}, 1 process {one_result['loss']:.6f}")
    assert two_result["loss"] == pytest.approx(one_result["loss"], rel=1e-6)


def launch_training(output_dir: Path, flags: list, cwd: Path, **popen) -> subprocess.Popen:
    """vaswani-train as users run it on several devices: `accelerate launch --multi_gpu` (torchrun underneath),
    here 2 CPU processes over gloo (--use_cpu). `accelerate launch --cpu --num_processes 2` would not do: without an
    MPI hostfile it starts one process."""
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
    launch += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "0"]
    command = [*launch, "--no_python", "vaswani-train", "--output_dir", str(output_dir), *map(str, flags)]
    return subprocess.Popen(command, cwd=cwd, env=environment(), text=True, **popen)


def finish(process: subprocess.Popen) -> str:
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stdout[-3000:] + stderr[-6000:]
    return stdout + stderr


def kill_process_tree(process: subprocess.Popen) -> None:
    """SIGKILL to the launcher and every process under it, as a crashed machine or `kill -9` of the job would do.
    torchrun starts each worker in a session of its own, so killing the launcher's process group is not enough."""
    root = psutil.Process(process.pid)
    tree = [root, *root.children(recursive=True)]
    for member in tree:
        try:
            member.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(tree, timeout=30)
    process.wait(timeout=30)


def steps(folder: Path) -> list[int]:
    return sorted(int(path.name.split("-")[1]) for path in folder.glob("checkpoint-*"))


def test_killed_ddp_run_resumes_to_the_weights_of_an_uninterrupted_one_and_averages(checkpoint, tmp_path):
    """2 ranks through accelerate launch + vaswani-train, checkpoints every 6 steps, dropout on (each rank's RNG
    must be restored), a new epoch (a new data order) after the kill. The whole job is SIGKILLed once a
    checkpoint exists and resumed from its last complete checkpoint: the final weights and the averaged model are
    those of an uninterrupted run. At the end rank 0, and only rank 0, averages the last 2 checkpoints."""
    flags = [
        "--model_name_or_path", checkpoint, "--max_steps", 30, "--save_steps", 6, "--max_tokens", 300,
        "--max_train_samples", 300, "--warmup_steps", 5, "--learning_rate", 3e-3, "--logging_steps", 6,
        "--average_last_checkpoints", 2, "--test_split", "none", "--validation_split", "none", "--report_to", "none",
        "--disable_tqdm", "true", "--seed", 3, "--use_cpu",
    ]  # fmt: skip
    straight_dir, killed_dir = tmp_path / "straight", tmp_path / "killed"
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    # The uninterrupted run also scores the test split at the end, on rank 0, with the averaged model.
    scored = [*flags, "--test_split", "test", "--max_eval_samples", 8]
    straight_log = finish(launch_training(straight_dir, scored, tmp_path, **pipes))
    assert "sacreBLEU" in straight_log and (straight_dir / "averaged" / "results.json").exists()

    with open(tmp_path / "killed.log", "w") as log:
        process = launch_training(killed_dir, flags, tmp_path, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 240
        while not (killed_dir / "checkpoint-6").exists() and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.02)
        assert process.poll() is None, (
            "the run ended before the kill: " + (tmp_path / "killed.log").read_text()[-3000:]
        )
        kill_process_tree(process)
    complete = steps(killed_dir)
    assert complete and complete[-1] < 30, f"the kill came too late: {complete}"  # it died mid-run
    for step in complete:  # whatever moment the kill hit, no checkpoint folder is half-written
        folder = killed_dir / f"checkpoint-{step}"
        for name in ("trainer_state.json", "model.safetensors", "optimizer.pt", "rng_state_0.pth", "rng_state_1.pth"):
            assert (folder / name).exists(), f"{folder.name} lacks {name}"
    resumed_log = finish(
        launch_training(
            killed_dir,
            [*flags, "--resume_from_checkpoint", killed_dir / f"checkpoint-{complete[-1]}"],
            tmp_path,
            **pipes,
        )
    )

    straight = load_file(straight_dir / "model.safetensors")
    resumed = load_file(killed_dir / "model.safetensors")
    difference = max_difference(straight, resumed)
    print(f"killed after checkpoint-{complete[-1]}, resumed: max |w| diff from an uninterrupted run {difference:.3g}")
    assert difference < 1e-6, f"resumed run differs from the uninterrupted one by {difference}"

    for folder, log in ((straight_dir, straight_log), (killed_dir, resumed_log)):
        assert steps(folder) == [6, 12, 18, 24, 30]
        state = json.loads((folder / "checkpoint-30" / "trainer_state.json").read_text())
        # 25 batches a rank an epoch: the part after any resume point (<= 24) crosses into the second epoch.
        assert state["global_step"] == 30 and state["epoch"] > 1
        last_two = [load_file(folder / f"checkpoint-{step}" / "model.safetensors") for step in (24, 30)]
        averaged = load_file(folder / "averaged" / "model.safetensors")
        # As average_checkpoints computes it: in float64, rounded back to float32.
        mean = {name: ((last_two[0][name].double() + last_two[1][name].double()) / 2).float() for name in averaged}
        averaging_error = max_difference(averaged, mean)
        assert averaging_error < 1e-7, averaging_error
        assert max_difference(averaged, last_two[1]) > 1e-4  # an average, not a copy of the last checkpoint
        assert log.count("averaged ['checkpoint-24', 'checkpoint-30'] into") == 1  # rank 0 only
        leftovers = [path.name for path in folder.iterdir() if path.name.startswith(".")]
        assert not leftovers, f"half-written folders left behind: {leftovers}"
        assert AutoModelForSeq2SeqLM.from_pretrained(folder / "averaged") is not None
    print(f"averaged = mean of checkpoints 24 and 30 to {averaging_error:.3g}")
    assert (
        max_difference(
            load_file(straight_dir / "averaged" / "model.safetensors"),
            load_file(killed_dir / "averaged" / "model.safetensors"),
        )
        < 1e-6
    )


@pytest.mark.parametrize("name", ["ddp", "fsdp", "deepspeed_zero2"])
def test_shipped_accelerate_configs_load(name):
    from accelerate.commands.config.config_args import load_config_from_file

    import modeling_vaswani.modeling_vaswani as modeling

    config = load_config_from_file(str(REPO / "configs" / "accelerate" / f"{name}.yaml"))
    expected = {"ddp": "MULTI_GPU", "fsdp": "FSDP", "deepspeed_zero2": "DEEPSPEED"}[name]
    assert config.distributed_type.value == expected and config.mixed_precision == "bf16"
    if name == "fsdp":
        for layer in config.fsdp_config["fsdp_transformer_layer_cls_to_wrap"].split(","):
            assert hasattr(modeling, layer), f"{layer} is not a layer class of the model"
    if name == "deepspeed_zero2":
        assert config.deepspeed_config["zero_stage"] == 2


LAUNCHED_ARGUMENTS = """
import json, sys
from modeling_vaswani.toolkit.training.trainer import VaswaniTrainingArguments
args = VaswaniTrainingArguments(output_dir=sys.argv[1], report_to=[])
print(json.dumps({"rank": args.process_index, "world": args.world_size, "mode": args.parallel_mode.value}))
"""


def test_a_torchrun_without_use_cpu_on_a_machine_without_gpus_is_one_run(tmp_path):
    """`torchrun --nproc_per_node 2 vaswani-train ...` as docs/training.md gives it, on a CPU-only machine: without
    --use_cpu the Trainer saw one process in each (each training alone on all the data into the same folder, told by
    one warning); the arguments now make the two one run over gloo."""
    script = tmp_path / "launched.py"
    script.write_text(LAUNCHED_ARGUMENTS)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    result = run([*torchrun, str(script), str(tmp_path / "out")], tmp_path)
    seen = sorted(json.loads(line)["rank"] for line in result.stdout.splitlines() if line.startswith("{"))
    worlds = {json.loads(line)["world"] for line in result.stdout.splitlines() if line.startswith("{")}
    modes = {json.loads(line)["mode"] for line in result.stdout.splitlines() if line.startswith("{")}
    assert seen == [0, 1] and worlds == {2} and modes == {"distributed"}, result.stdout
