"""Training on the device: bf16 autocast (the Trainer's --bf16) against float32 on the shipped Multi30k,
torch.compile of a training step against the same step eager, and the Trainer's own choice to compile.

- bf16: the `small` preset (vaswani-train's default model; tiny: the training tests' tiny model) trained by
  VaswaniTrainer with the same seed, data and batches twice, in float32 and with --bf16, for 300 steps of 4000-token
  batches (tiny: 12 of 400). Both losses must fall (by 1.0 nats; tiny: 0.3), and bf16's, the mean of its last 5
  logged values (tiny: 2), must be within 5% of float32's (MARGIN). The forward pass must compute in bfloat16 while
  the weights stay float32, and a step's attention must not be cuDNN's (which plans anew for every batch shape: the
  profiler counts the SDPA operators of one more step).
- compile: the same model (no dropout, so that both draw nothing at random) and the same batches; 3 Adam steps eager
  and compiled (torch.compile, inductor) from the same weights give the same losses to a relative 1e-4; the compile
  time and the step times after it are recorded. The CPU dry run compiles with the eager backend (dynamo's capture
  alone: inductor's C++ code generation takes a minute on a small CPU, AOTAutograd's tracing half again of dynamo's
  8 s there; the dry run proves the check's path, not the kernels).
- compile where it pays: VaswaniTrainer's own choice (training/step.py's compile_pays) with the steps it takes to repay
  set to the bf16 check's 300 (tiny: 12): the run compiles (inductor on CUDA), trains as the eager run does (final
  loss within MARGIN), and both runs' times are recorded. The CPU dry run forces the choice (the rule compiles on
  CUDA only) and captures with the eager backend.
"""

import copy
import time

import pytest
import torch
from helpers.gpu import IS_TINY, is_cuda, small_checkpoint, synchronize
from helpers.tiny_models import padded_batch
from helpers.training_setup import tokenized_slice
from speed.measure import operator_counts, sdpa_operators  # the speed benchmark's (benchmarks/speed/)
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from modeling_vaswani.toolkit.training import step as step_module
from modeling_vaswani.toolkit.training import trainer as trainer_module
from modeling_vaswani.toolkit.training.trainer import VaswaniTrainer, VaswaniTrainingArguments

pytestmark = pytest.mark.gpu

STEPS, LOGGING_STEPS, FINAL_WINDOW = (12, 3, 2) if IS_TINY else (300, 10, 5)
MAX_TOKENS = 400 if IS_TINY else 4000
PAIRS = 200 if IS_TINY else 29000  # tiny: a slice; else the whole of Multi30k's training set
FALL = 0.3 if IS_TINY else 1.0  # nats the loss must fall from its first logged value to its last ones
MARGIN = 0.05  # bf16's final loss within 5% of float32's
GENERATED = 8  # tokens an evaluation step's generation adds


@pytest.fixture(scope="module")
def checkpoint(device, tmp_path_factory):
    return small_checkpoint(tmp_path_factory.mktemp("small"))


@pytest.fixture(scope="module")
def train_dataset(checkpoint):
    return tokenized_slice(AutoTokenizer.from_pretrained(checkpoint), PAIRS)


def train(checkpoint, train_dataset, device: str, output_dir, bf16: bool, **settings) -> dict:
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForSeq2SeqLM.from_pretrained(checkpoint)
    args = VaswaniTrainingArguments(
        output_dir=str(output_dir),
        bf16=bf16,
        use_cpu=not is_cuda(device),
        max_steps=STEPS,
        max_tokens=MAX_TOKENS,
        warmup_steps=3 if IS_TINY else 100,
        learning_rate=1e-2 if IS_TINY else 2e-3,
        logging_steps=LOGGING_STEPS,
        save_strategy="no",
        predict_with_generate=True,  # for attention_kernels' evaluation step
        report_to=[],
        disable_tqdm=True,
        seed=0,
        **settings,
    )
    trainer = VaswaniTrainer(model=model, args=args, train_dataset=train_dataset, processing_class=tokenizer)
    dtypes = set()
    hook = model.lm_head.register_forward_hook(lambda module, inputs, output: dtypes.add(output.dtype))
    output = trainer.train()
    hook.remove()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return {
        "sdpa_kernels": attention_kernels(trainer, device),
        "losses": losses,
        "final": sum(losses[-FINAL_WINDOW:]) / len(losses[-FINAL_WINDOW:]),
        "logits_dtypes": sorted(str(dtype) for dtype in dtypes),
        "weight_dtypes": sorted({str(parameter.dtype) for parameter in model.parameters()}),
        "mixed_precision": trainer.accelerator.mixed_precision,
        "device": str(next(model.parameters()).device),
        "train_runtime_s": output.metrics.get("train_runtime"),
        "compiled": trainer._compiled is not None and trainer._compiled[1] is not trainer._compiled[0],
    }


def attention_kernels(trainer, device: str) -> dict[str, dict[str, int]]:
    """The SDPA operators, as torch's profiler counts them, of one more training step of `trainer` (forward and
    backward, under the context the Trainer computes its losses in) and of one evaluation step that generates."""
    batch = {name: tensor.to(device) for name, tensor in next(iter(trainer.get_train_dataloader())).items()}

    def training_step():
        with trainer.compute_loss_context_manager():
            loss = trainer.compute_loss(trainer.model, batch)
        loss.backward()

    def evaluation_step():  # generate() runs outside the loss's context, each step a new key length
        trainer.model.eval()
        trainer.prediction_step(trainer.model, batch, prediction_loss_only=False, max_new_tokens=GENERATED)
        trainer.model.train()

    return {
        "training": sdpa_operators(operator_counts(training_step)),
        "evaluation": sdpa_operators(operator_counts(evaluation_step)),
    }


def test_bf16_autocast_training_follows_float32(device, checkpoint, train_dataset, tmp_path, figures):
    float32 = train(checkpoint, train_dataset, device, tmp_path / "float32", bf16=False)
    bf16 = train(checkpoint, train_dataset, device, tmp_path / "bf16", bf16=True)
    difference = abs(bf16["final"] - float32["final"])
    figures.add(
        steps=STEPS,
        max_tokens=MAX_TOKENS,
        pairs=len(train_dataset),
        float32=float32,
        bf16=bf16,
        final_loss_difference=difference,
        margin=MARGIN * float32["final"],
    )
    for run in (float32, bf16):
        assert len(run["losses"]) == STEPS // LOGGING_STEPS
        assert all(map(torch.isfinite, torch.tensor(run["losses"])))
        assert run["final"] < run["losses"][0] - FALL, run["losses"]
        assert run["weight_dtypes"] == ["torch.float32"]
        assert torch.device(run["device"]).type == torch.device(device).type
    assert float32["logits_dtypes"] == ["torch.float32"] and bf16["logits_dtypes"] == ["torch.bfloat16"]
    assert bf16["mixed_precision"] == "bf16"
    for run in (float32, bf16):  # training and evaluation keep out cuDNN's attention: it plans anew for every shape
        for kernels in run["sdpa_kernels"].values():
            assert kernels and not any("cudnn" in op for op in kernels), run["sdpa_kernels"]
    assert difference <= MARGIN * float32["final"], (
        f"bf16's final loss {bf16['final']:.4f} is not within {MARGIN:.0%} of float32's {float32['final']:.4f}"
    )


COMPARED_STEPS = 3
TIMED_STEPS = 1 if IS_TINY else 10


def test_compiled_training_step_gives_the_eager_loss(device, checkpoint, figures):
    torch.manual_seed(0)
    model = AutoModelForSeq2SeqLM.from_pretrained(checkpoint, dropout=0.0).to(device).train()
    vocab_size = model.config.vocab_size
    lengths = [11, 7, 16, 9] if IS_TINY else [30, 22, 41, 17, 35, 28, 12, 39] * 8
    source, mask = padded_batch(lengths, vocab_size, seed=1)
    labels, label_mask = padded_batch([max(2, length - 3) for length in lengths], vocab_size, seed=2)
    batch = {
        "input_ids": source.to(device),
        "attention_mask": mask.to(device),
        "labels": labels.masked_fill(label_mask == 0, -100).to(device),
    }

    def run(net) -> tuple[list[float], float, float]:
        optimizer = torch.optim.Adam(net.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9)
        losses, times = [], []
        for _ in range(COMPARED_STEPS + TIMED_STEPS):
            synchronize(device)
            start = time.perf_counter()
            loss = net(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
            synchronize(device)
            times.append(time.perf_counter() - start)
        after_warmup = sorted(times[COMPARED_STEPS:])
        return losses[:COMPARED_STEPS], times[0], after_warmup[len(after_warmup) // 2]

    backend = "inductor" if is_cuda(device) or not IS_TINY else "eager"
    compiled_model = copy.deepcopy(model)
    eager, eager_first, eager_step = run(model)
    compiled, compile_first, compiled_step = run(torch.compile(compiled_model, backend=backend))
    differences = [abs(a - b) / max(1.0, abs(a)) for a, b in zip(eager, compiled, strict=True)]
    figures.add(
        backend=backend,
        eager_losses=eager,
        compiled_losses=compiled,
        max_relative_difference=max(differences),
        first_step_s={"eager": eager_first, "compiled (includes compiling)": compile_first},
        median_step_ms={"eager": 1000 * eager_step, "compiled": 1000 * compiled_step},
        batch_sentences=len(lengths),
    )
    assert max(differences) < 1e-4, f"compiled losses {compiled} differ from eager {eager}"


def test_a_run_whose_steps_repay_it_trains_compiled(device, checkpoint, train_dataset, tmp_path, figures, monkeypatch):
    """VaswaniTrainer's own choice to compile (training/step.py's compile_pays) with the steps it takes to repay set
    to this run's: on CUDA the rule itself chooses inductor, and the run must train as the eager one does (final loss
    within MARGIN). The CPU dry run forces the choice and captures with dynamo alone (the eager backend)."""
    if is_cuda(device):
        monkeypatch.setattr(step_module, "COMPILE_PAYS_AFTER_STEPS", STEPS)
    else:
        monkeypatch.setattr(trainer_module, "compile_pays", lambda where, steps: steps >= STEPS)
        monkeypatch.setattr(step_module, "COMPILE_BACKEND", "eager")
    torch.compiler.reset()
    eager = train(checkpoint, train_dataset, device, tmp_path / "eager", bf16=False, torch_compile=False)
    compiled = train(checkpoint, train_dataset, device, tmp_path / "compiled", bf16=False)
    figures.add(
        steps=STEPS,
        backend=step_module.COMPILE_BACKEND,
        train_runtime_s={
            "eager": eager["train_runtime_s"],
            "compiled (compiling included)": compiled["train_runtime_s"],
        },
        final_loss={"eager": eager["final"], "compiled": compiled["final"]},
    )
    assert compiled["compiled"] and not eager["compiled"]
    assert compiled["final"] < compiled["losses"][0] - FALL, compiled["losses"]
    assert abs(compiled["final"] - eager["final"]) <= MARGIN * eager["final"], (eager["losses"], compiled["losses"])
