"""The training step's speed choices (training/step.py): the fused label-smoothed loss against a hand-written one and
against the Trainer's LabelSmoother after steps of training, and bfloat16 autocast chosen by its probe."""

import logging
import math
import time
from contextlib import contextmanager

import pytest
import torch
from helpers.training_setup import tiny_checkpoint, tokenized_slice
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from modeling_vaswani.toolkit.training import step as step_module
from modeling_vaswani.toolkit.training import trainer as trainer_module
from modeling_vaswani.toolkit.training.recipe import parse_arguments
from modeling_vaswani.toolkit.training.step import (
    BF16_MARGIN,
    COMPILE_PAYS_AFTER_STEPS,
    bf16_pays,
    compile_pays,
    cpu_has_bf16,
    probe_bf16,
    smoothed_cross_entropy,
    time_precisions,
)
from modeling_vaswani.toolkit.training.trainer import VaswaniTrainer, VaswaniTrainingArguments


def smoothed_nll_by_hand(logits: list, labels: list, epsilon: float) -> float:
    """Section 5.4 written out: each kept token's target distribution is (1 - eps) on its label plus eps spread over
    the V entries of the vocabulary; the loss is its cross-entropy with softmax(logits), averaged over kept tokens."""
    total, kept = 0.0, 0
    for row, label in zip(logits, labels, strict=True):
        if label == -100:
            continue
        top = max(row)
        log_norm = top + math.log(sum(math.exp(value - top) for value in row))
        log_p = [value - log_norm for value in row]
        target = [epsilon / len(row) + (1 - epsilon) * (index == label) for index in range(len(row))]
        total -= sum(q * lp for q, lp in zip(target, log_p, strict=True))
        kept += 1
    return total / kept


@st.composite
def logits_and_labels(draw):
    rows, vocabulary = draw(st.integers(1, 12)), draw(st.integers(2, 9))
    values = st.floats(-30, 30, allow_nan=False, width=32)
    logits = [draw(st.lists(values, min_size=vocabulary, max_size=vocabulary)) for _ in range(rows)]
    labels = draw(st.lists(st.integers(0, vocabulary - 1) | st.just(-100), min_size=rows, max_size=rows))
    if all(label == -100 for label in labels):
        labels[draw(st.integers(0, rows - 1))] = draw(st.integers(0, vocabulary - 1))
    return logits, labels


@settings(max_examples=60, deadline=None)
@given(logits_and_labels(), st.floats(0, 0.9))
def test_the_fused_loss_is_the_hand_written_label_smoothed_nll(case, epsilon):
    logits, labels = case
    fused = smoothed_cross_entropy(torch.tensor([logits]), torch.tensor([labels]), epsilon)
    assert float(fused) == pytest.approx(smoothed_nll_by_hand(logits, labels, epsilon), rel=1e-5, abs=1e-5)


def test_the_fused_loss_divides_by_the_count_it_is_given():
    """Gradient accumulation's count of tokens over the whole accumulated batch, not this part's."""
    logits, labels = [[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]], [2, 0]
    given = smoothed_cross_entropy(torch.tensor([logits]), torch.tensor([labels]), 0.1, num_items_in_batch=6)
    assert float(given) == pytest.approx(smoothed_nll_by_hand(logits, labels, 0.1) * 2 / 6, rel=1e-6)


def test_the_loss_is_float32_under_bf16_autocast():
    logits = torch.randn(2, 3, 11, dtype=torch.bfloat16, requires_grad=True)
    loss = smoothed_cross_entropy(logits, torch.tensor([[1, 2, -100], [4, 5, 6]]), 0.1)
    loss.backward()
    assert loss.dtype == torch.float32 and logits.grad.dtype == torch.bfloat16


@pytest.mark.parametrize("fast", [False, True])
def test_the_bf16_choice_follows_the_measured_steps(fast):
    """Steps that really take 1 ms in one precision and 100 ms in the other: the probe takes the faster."""
    calls = []

    def step(bf16: bool) -> None:
        calls.append(bf16)
        time.sleep(0.001 if bf16 == fast else 0.1)

    float32, bfloat16 = time_precisions(step, pairs=3)
    assert bf16_pays(float32, bfloat16) is fast
    assert calls.count(True) == calls.count(False) == 4  # an untimed pair, then 3 timed, alternating order
    assert calls[:2] == [True, False] and calls[2:4] == [False, True]


@pytest.mark.parametrize(("bfloat16", "pays"), [(1.0, False), (0.95, False), (0.89, True), (0.5, True), (1.5, False)])
def test_bfloat16_must_be_a_clear_gain(bfloat16, pays):
    assert BF16_MARGIN == 0.9 and bf16_pays(1.0, bfloat16) is pays


@pytest.mark.parametrize(
    ("flags", "expected"),
    [("fpu avx2 avx512f avx512_bf16 avx512_vnni", True), ("fpu amx_tile amx_bf16", True), ("fpu avx2 avx512f", False)],
)
def test_bf16_instructions_are_read_from_the_cpu_flags(tmp_path, flags, expected):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: some CPU\nflags\t\t: {flags}\n\nprocessor\t: 1\n")
    assert cpu_has_bf16(str(cpuinfo)) is expected
    assert cpu_has_bf16(str(tmp_path / "absent")) is False


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def train_split(checkpoint):
    return tokenized_slice(AutoTokenizer.from_pretrained(checkpoint), 96)


def trainer_of(checkpoint, train_split, output_dir, **settings) -> VaswaniTrainer:
    values = dict(
        output_dir=str(output_dir), report_to=[], use_cpu=True, disable_tqdm=True, seed=0, data_seed=0,
        max_tokens=300, max_steps=5, warmup_steps=3, learning_rate=1e-3, save_strategy="no", logging_steps=1,
    )  # fmt: skip
    return VaswaniTrainer(
        model=AutoModelForSeq2SeqLM.from_pretrained(checkpoint),
        args=VaswaniTrainingArguments(**{**values, **settings}),
        processing_class=AutoTokenizer.from_pretrained(checkpoint),
        train_dataset=train_split,
    )


def trained(trainer: VaswaniTrainer) -> tuple[dict, list[float]]:
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return {name: value.detach().clone() for name, value in trainer.model.state_dict().items()}, losses


@pytest.fixture(scope="module")
def plain_run(checkpoint, train_split, tmp_path_factory):
    """5 steps through the Trainer's own LabelSmoother: the path before the fused loss."""
    trainer = trainer_of(checkpoint, train_split, tmp_path_factory.mktemp("plain"))
    assert trainer.compute_loss_func is not None and trainer.label_smoother is not None
    trainer.compute_loss_func = None  # the Trainer then smooths with its LabelSmoother
    return trained(trainer)


@pytest.mark.slow  # over 5 s on 2 busy cores with its fixtures (2026-11-27)
def test_the_fused_loss_trains_to_the_label_smoothers_weights(checkpoint, train_split, plain_run, tmp_path):
    plain_weights, plain_losses = plain_run
    weights, losses = trained(trainer_of(checkpoint, train_split, tmp_path))
    assert losses == pytest.approx(plain_losses, rel=1e-5)
    start = AutoModelForSeq2SeqLM.from_pretrained(checkpoint).state_dict()
    for name, value in weights.items():
        assert not torch.equal(plain_weights[name], start[name]), f"{name} was not trained"
        torch.testing.assert_close(value, plain_weights[name], rtol=0, atol=1e-5, msg=name)


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-27)
def test_bf16_autocast_trains_near_float32s_weights(checkpoint, train_split, plain_run, tmp_path):
    """The autocast the probe may choose: not the same weights (it did run in bfloat16), but much nearer float32's
    than the training moved them, and a loss within 2% at every step."""
    trainer = trainer_of(checkpoint, train_split, tmp_path)
    trainer.bf16_autocast = True
    weights, losses = trained(trainer)
    plain_weights, plain_losses = plain_run
    assert losses == pytest.approx(plain_losses, rel=0.02)
    start = AutoModelForSeq2SeqLM.from_pretrained(checkpoint).state_dict()
    moved = sum(float((plain_weights[name] - start[name]).norm() ** 2) for name in weights) ** 0.5
    apart = sum(float((weights[name] - plain_weights[name]).norm() ** 2) for name in weights) ** 0.5
    assert 0 < apart < 0.1 * moved


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-27)
def test_the_probe_times_both_precisions_and_leaves_the_run_as_it_was(checkpoint, train_split, tmp_path, caplog):
    trainer = trainer_of(checkpoint, train_split, tmp_path)
    before = {name: value.clone() for name, value in trainer.model.state_dict().items()}
    with caplog.at_level(logging.WARNING, logger="modeling_vaswani.toolkit.training.step"):
        chosen = probe_bf16(trainer)
    assert trainer.model.state_dict().keys() == before.keys()
    assert all(torch.equal(value, before[name]) for name, value in trainer.model.state_dict().items())
    assert trainer.optimizer is None and trainer.bf16_autocast is False
    if cpu_has_bf16():
        assert "float32 and" in caplog.text and "under bfloat16 autocast: training in" in caplog.text
    else:  # emulated bfloat16 is never tried
        assert chosen is False and caplog.text == ""


def test_an_evaluations_generation_runs_under_the_training_attention(checkpoint, train_split, tmp_path, monkeypatch):
    """generate() runs outside compute_loss_context_manager; on CUDA it too must keep out of cuDNN's attention
    (tests/gpu's bf16 check counts the kernels there). Here: each of its forwards runs inside the rule's context."""
    entered = []

    @contextmanager
    def recorded(device):
        entered.append(device)
        yield

    monkeypatch.setattr(trainer_module, "training_attention", recorded)
    trainer = trainer_of(checkpoint, train_split, tmp_path, predict_with_generate=True)
    inside = []
    hook = trainer.model.register_forward_hook(lambda *_: inside.append(len(entered)))
    batch = next(iter(trainer.get_train_dataloader()))
    trainer.model.eval()
    _, generated, _ = trainer.prediction_step(trainer.model, batch, prediction_loss_only=False, max_new_tokens=4)
    hook.remove()
    assert generated is not None and generated.shape[0] == batch["input_ids"].shape[0]
    assert len(inside) > 2 and all(count >= 1 for count in inside), inside
    assert entered and all(device == trainer.args.device for device in entered)


@pytest.mark.parametrize(
    ("device", "steps", "pays"),
    [
        ("cpu", 10**6, False),
        ("cuda", 24_999, False),
        ("cuda", 25_000, True),
        ("cuda", 300_000, True),
        ("mps", 10**6, False),
    ],
)
def test_compilation_pays_on_cuda_from_the_measured_steps(device, steps, pays):
    """docs/gpu.md: compiling paid after some 14,000-25,000 steps on the H200; the compiled CPU step was slower."""
    assert COMPILE_PAYS_AFTER_STEPS == 25_000
    assert compile_pays(torch.device(device), steps) is pays


def compiled_run(checkpoint, train_split, output_dir, monkeypatch, **settings):
    """5 steps with compile_pays answering yes on the CPU (what it answers for a long run on CUDA), through a backend
    that records the graphs torch.compile hands it and runs them as captured."""
    asked, graphs = [], []

    def recording(graph, example_inputs):
        graphs.append(graph)
        return graph.forward

    monkeypatch.setattr(trainer_module, "compile_pays", lambda device, steps: asked.append((device, steps)) or True)
    monkeypatch.setattr(step_module, "COMPILE_BACKEND", recording)
    torch.compiler.reset()
    trainer = trainer_of(checkpoint, train_split, output_dir, **settings)
    return trainer, trained(trainer), asked, graphs


@pytest.mark.slow  # dynamo traces the model: over 5 s on 2 cores (2026-11-30)
def test_a_run_whose_steps_repay_it_trains_through_the_compiled_forward(
    checkpoint, train_split, tmp_path, monkeypatch, caplog
):
    eager_weights, eager_losses = trained(trainer_of(checkpoint, train_split, tmp_path / "eager"))
    with caplog.at_level(logging.WARNING, logger="modeling_vaswani.toolkit.training.trainer"):
        trainer, (weights, losses), asked, graphs = compiled_run(checkpoint, train_split, tmp_path, monkeypatch)
    assert asked == [(trainer.args.device, 5)]  # decided once, from the 5 steps the run had left
    assert graphs, "the training forward never reached torch.compile's backend"
    assert "compiling the training forward" in caplog.text
    assert losses == pytest.approx(eager_losses, rel=1e-5)
    assert weights.keys() == eager_weights.keys()  # the model itself was not wrapped: checkpoints keep their names
    for name, value in weights.items():
        torch.testing.assert_close(value, eager_weights[name], rtol=0, atol=1e-5, msg=name)


@pytest.mark.slow  # over 5 s on 2 cores (2026-11-30)
def test_torch_compile_false_trains_eager_whatever_the_steps(checkpoint, train_split, tmp_path, monkeypatch):
    _, (_, losses), asked, graphs = compiled_run(checkpoint, train_split, tmp_path, monkeypatch, torch_compile=False)
    assert len(losses) == 5 and graphs == [] and asked == []


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ([], None),
        (["--torch_compile", "false"], False),
        (["--torch_compile", "true"], True),
        (["--torch_compile"], True),
    ],
)
def test_torch_compile_is_left_to_the_run_unless_given(given, expected, tmp_path):
    _, _, args = parse_arguments(["--output_dir", str(tmp_path), "--report_to", "none", *given])
    assert args.torch_compile is expected
