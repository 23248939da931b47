"""benchmarks/training_step.py's `marian_stock` batches: what a stock Seq2SeqTrainer draws (quality.py's 64 sentences
in random order, padded to the longest of each), against the token batches the main job draws from the same pairs."""

import itertools

import torch
from helpers.training_setup import budgeted_trainer, tiny_checkpoint
from quality import BASELINE_BATCH
from training_step import padding, stock_batches
from transformers import AutoModelForSeq2SeqLM

PAIRS = 640  # 10 stock batches


def test_stock_batches_are_the_stock_trainers_and_pad_more_than_ours(tmp_path):
    checkpoint = tiny_checkpoint(tmp_path / "tiny")
    trainer = budgeted_trainer(checkpoint, tmp_path / "run", PAIRS, max_tokens=1500)
    stock = list(itertools.islice(stock_batches(trainer, AutoModelForSeq2SeqLM.from_pretrained(checkpoint)), 10))
    ours = list(trainer.get_train_dataloader())
    assert [len(batch["input_ids"]) for batch in stock] == [BASELINE_BATCH] * 10
    pad = trainer.processing_class.pad_token_id
    seen = set()
    for batch in stock:
        ids, mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
        assert torch.equal(ids.eq(pad), mask.eq(0))  # padded on the source side where the mask says so
        assert labels.eq(-100).any() and not labels.eq(pad).any()  # target padding is -100, as the loss skips it
        assert mask.sum(1).max() == ids.shape[1]  # to the longest of the batch, no further
        seen |= {tuple(row[row.ne(pad)].tolist()) for row in ids}
    assert len(seen) == PAIRS  # each pair once in the epoch, in random order
    lengths = [int(row.sum()) for batch in stock for row in batch["attention_mask"]]
    assert lengths != sorted(lengths) and lengths != sorted(lengths, reverse=True)
    assert padding(stock)["source"] > padding(ours)["source"] + 0.2  # the waste our length-sorted batches avoid
