"""--bf16 training on CPU, the path GPU users take (bf16 autocast over float32 master weights): runs end to end on
the tiny model, the loss falls, the weights stay float32 in memory and in the checkpoint, and the checkpoint loads and
translates."""

import pytest
import torch
from helpers.training_setup import tiny_checkpoint, tokenized_slice
from safetensors import safe_open
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from modeling_vaswani.toolkit.training.trainer import VaswaniTrainer, VaswaniTrainingArguments

STEPS = 40


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("tiny"))


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_bf16_training_on_cpu(checkpoint, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForSeq2SeqLM.from_pretrained(checkpoint)
    assert model.dtype == torch.float32
    args = VaswaniTrainingArguments(
        output_dir=str(tmp_path),
        bf16=True,
        use_cpu=True,
        max_steps=STEPS,
        max_tokens=400,
        warmup_steps=10,
        learning_rate=3e-3,
        logging_steps=5,
        save_steps=STEPS,
        report_to=[],
        disable_tqdm=True,
        seed=0,
    )
    trainer = VaswaniTrainer(
        model=model, args=args, train_dataset=tokenized_slice(tokenizer, 600), processing_class=tokenizer
    )
    assert trainer.accelerator.mixed_precision == "bf16"
    # What the forward pass computes in: bf16 under autocast, though the weights are float32.
    logits_dtypes = set()
    hook = model.lm_head.register_forward_hook(lambda module, inputs, output: logits_dtypes.add(output.dtype))
    trainer.train()
    hook.remove()
    assert logits_dtypes == {torch.bfloat16}

    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    print(f"bf16 training loss every 5 steps: {[round(loss, 3) for loss in losses]}")
    assert len(losses) == STEPS // 5 and all(map(torch.isfinite, torch.tensor(losses)))
    assert losses[-1] < losses[0] - 0.5  # from about ln(400 tokens) = 6.0 down
    assert {parameter.dtype for parameter in model.parameters()} == {torch.float32}

    saved = tmp_path / f"checkpoint-{STEPS}"
    with safe_open(saved / "model.safetensors", framework="pt") as weights:
        dtypes = {weights.get_slice(name).get_dtype() for name in weights.keys()}
    assert dtypes == {"F32"}
    reloaded = AutoModelForSeq2SeqLM.from_pretrained(saved)
    assert reloaded.dtype == torch.float32
    for name, tensor in reloaded.state_dict().items():
        assert torch.equal(tensor, model.state_dict()[name]), name
    batch = tokenizer(["A man is riding a bike.", "Two dogs play in the snow."], return_tensors="pt", padding=True)
    generated = reloaded.generate(**batch, max_new_tokens=10, num_beams=2)
    assert generated.shape[0] == 2 and generated.shape[1] > 1
    print("translations:", tokenizer.batch_decode(generated, skip_special_tokens=True))
