"""Run by test_distributed.py, under torchrun (2 CPU processes over gloo) and alone: trains the tiny checkpoint with
token-budget batches, then writes each rank's final weights and (rank 0) the final model's loss on held-out sentences.

    python ddp_train.py CHECKPOINT OUTPUT_DIR ACCUMULATION [--optim sgd] [--learning_rates 0.5 1.0] [--max_steps 6]

Plain SGD (no momentum, constant learning rate) by default: its update is linear in the gradient, so a gradient
scaled by the world size (or by 1 / world size) shows in the weights. Adam's would not: Adam divides the gradient by
its own running magnitude, and a constant factor cancels.
"""

import argparse
import json
from pathlib import Path

import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from helpers.training_setup import tokenized_slice
from modeling_vaswani.toolkit.training.trainer import VaswaniTrainer, VaswaniTrainingArguments

parser = argparse.ArgumentParser()
parser.add_argument("checkpoint")
parser.add_argument("output_dir", type=Path)
parser.add_argument("accumulation", type=int)
parser.add_argument("--optim", default="sgd")
# One run per learning rate, each from the checkpoint's weights (the controls cost no second start-up).
parser.add_argument("--learning_rates", type=float, nargs="+", default=[0.5])
parser.add_argument("--max_steps", type=int, default=6)
options = parser.parse_args()

tokenizer = AutoTokenizer.from_pretrained(options.checkpoint)
train_dataset = tokenized_slice(tokenizer, 400)
held_out = tokenized_slice(tokenizer, 16, split="validation")
result = {}
for learning_rate in options.learning_rates:
    # No dropout: one process and two would draw different masks.
    model = AutoModelForSeq2SeqLM.from_pretrained(options.checkpoint, dropout=0.0)
    args = VaswaniTrainingArguments(
        output_dir=str(options.output_dir),
        max_steps=options.max_steps,
        max_tokens=300,
        gradient_accumulation_steps=options.accumulation,
        optim=options.optim,
        learning_rate=learning_rate,
        paper_schedule=False,
        lr_scheduler_type="constant",
        warmup_steps=0,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    trainer = VaswaniTrainer(model=model, args=args, train_dataset=train_dataset, processing_class=tokenizer)
    trainer.train()

    weights = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    torch.save(weights, options.output_dir / f"weights-rank{args.process_index}-lr{learning_rate:g}.pt")
    if args.process_index == 0:
        batch = trainer.data_collator([held_out[i] for i in range(16)])
        model.eval()
        with torch.no_grad():
            loss = model(**batch).loss.item()
        optimizer = getattr(trainer.optimizer, "optimizer", trainer.optimizer)  # accelerate wraps it
        result[f"{learning_rate:g}"] = {
            "loss": loss,
            "world_size": args.world_size,
            "batches_per_rank": len(trainer.get_train_dataloader()),
            "optimizer": type(optimizer).__name__,
            "momentum": optimizer.param_groups[0].get("momentum"),
            "learning_rates": sorted({group["lr"] for group in optimizer.param_groups}),
        }
if result:
    (options.output_dir / "result.json").write_text(json.dumps(result))
