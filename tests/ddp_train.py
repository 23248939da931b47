"""Run by test_distributed.py, under torchrun (2 CPU processes over gloo) and alone: trains the tiny checkpoint with
token-budget batches, then writes each rank's final weights and the final model's loss on held-out sentences."""

import json
import sys
from pathlib import Path

import torch
from training_setup import tokenized_slice
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from modeling_vaswani.toolkit.training import VaswaniTrainer, VaswaniTrainingArguments

checkpoint, output_dir, accumulation = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
tokenizer = AutoTokenizer.from_pretrained(checkpoint)
# No dropout: one process and two would draw different masks.
model = AutoModelForSeq2SeqLM.from_pretrained(checkpoint, dropout=0.0)
args = VaswaniTrainingArguments(
    output_dir=str(output_dir),
    max_steps=6,
    max_tokens=300,
    gradient_accumulation_steps=accumulation,
    warmup_steps=2,
    learning_rate=3e-3,
    report_to=[],
    save_strategy="no",
    use_cpu=True,
    disable_tqdm=True,
    seed=0,
)
trainer = VaswaniTrainer(
    model=model, args=args, train_dataset=tokenized_slice(tokenizer, 400), processing_class=tokenizer
)
trainer.train()

rank = args.process_index
torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, output_dir / f"weights-rank{rank}.pt")
if rank == 0:
    held_out = tokenized_slice(tokenizer, 16, split="validation")
    batch = trainer.data_collator([held_out[i] for i in range(16)])
    model.eval()
    with torch.no_grad():
        loss = model(**batch).loss.item()
    result = {"loss": loss, "world_size": args.world_size, "batches_per_rank": len(trainer.get_train_dataloader())}
    (output_dir / "result.json").write_text(json.dumps(result))
