"""--early_stopping_patience: training stops after N evaluations without a better validation score, and the best
checkpoint is kept wherever the regular checkpoints fall."""

import pytest
from helpers.training_setup import tiny_checkpoint, tokenized_slice
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from modeling_vaswani.toolkit.training.trainer import VaswaniTrainer, VaswaniTrainingArguments


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("tiny"))


def test_training_stops_after_the_patience_and_keeps_the_best_checkpoint(checkpoint, tmp_path):
    scores = iter([10.0, 30.0, 20.0, 25.0, 29.0, 99.0, 99.0])  # validation sacreBLEU, one per evaluation
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    args = VaswaniTrainingArguments(
        output_dir=str(tmp_path), report_to=[], use_cpu=True, disable_tqdm=True, seed=0, max_steps=100,
        max_tokens=200, eval_strategy="steps", eval_steps=2, save_steps=3, save_total_limit=2,
        early_stopping_patience=3, predict_with_generate=False,
    )  # fmt: skip
    assert args.metric_for_best_model == "sacrebleu" and args.greater_is_better
    trainer = VaswaniTrainer(
        model=AutoModelForSeq2SeqLM.from_pretrained(checkpoint),
        args=args,
        train_dataset=tokenized_slice(tokenizer, 200),
        eval_dataset=tokenized_slice(tokenizer, 4, split="validation"),
        processing_class=tokenizer,
        compute_metrics=lambda prediction: {"sacrebleu": next(scores)},
    )
    trainer.train()
    # Evaluations at steps 2, 4, 6, 8, 10: the best (30.0) at step 4, then three without a better one.
    assert trainer.state.global_step == 10
    assert trainer.state.best_metric == 30.0
    assert trainer.state.best_model_checkpoint == str(tmp_path / "checkpoint-4")  # saved for being the best
    kept = sorted(path.name for path in tmp_path.glob("checkpoint-*"))
    assert "checkpoint-4" in kept and "checkpoint-9" in kept  # the rotation spares the best


def test_early_stopping_without_evaluations_is_refused(tmp_path):
    with pytest.raises(ValueError, match="early_stopping_patience=2 stops on evaluations.*eval_strategy is 'no'"):
        VaswaniTrainingArguments(output_dir=str(tmp_path), early_stopping_patience=2)
    with pytest.raises(ValueError, match="early_stopping_patience must be >= 1, got 0"):
        VaswaniTrainingArguments(
            output_dir=str(tmp_path), early_stopping_patience=0, eval_strategy="steps", eval_steps=5
        )
