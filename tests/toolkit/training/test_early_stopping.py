"""--early_stopping_patience: training stops after N evaluations without a better validation score, and the best
checkpoint is kept wherever the regular checkpoints fall."""

import json

import pytest
import torch
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


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_the_recipe_keeps_the_best_checkpoint_beside_the_average_and_scores_both(checkpoint, tmp_path, capsys):
    """vaswani-train --early_stopping_patience on the shipped data: an untrained model's validation sacreBLEU does not
    improve on its first, so training stops at the second evaluation; the best is step 2's checkpoint."""
    from safetensors.torch import load_file

    from modeling_vaswani.toolkit.cli import train as train_command

    output = tmp_path / "run"
    train_command.main([
        "--output_dir", str(output), "--tokenizer_name_or_path", str(checkpoint), "--max_train_samples", "300",
        "--max_eval_samples", "6", "--max_validation_samples", "6", "--max_steps", "40", "--max_tokens", "400",
        "--eval_steps", "2", "--save_steps", "3", "--average_last_checkpoints", "2", "--early_stopping_patience", "1",
        "--report_to", "none", "--disable_tqdm", "true", "--use_cpu",
    ])  # fmt: skip
    printed = capsys.readouterr().out
    results = json.loads((output / "averaged" / "results.json").read_text())
    assert results["train"]["step"] == 4, results["train"]  # evaluations at 2 and 4: no better score at 4
    best = results["best"]
    assert (best["step"], best["metric"], best["checkpoint"]) == (2, "sacrebleu", str(output / "checkpoint-2"))
    assert set(best["test"]) >= {"sacrebleu", "chrf", "ter"} and set(results["test"]) >= {"sacrebleu", "chrf"}
    kept = load_file(output / "best" / "model.safetensors")
    saved = load_file(output / "checkpoint-2" / "model.safetensors")
    assert kept.keys() == saved.keys() and all(torch.equal(kept[key], saved[key]) for key in kept)
    assert json.loads((output / "best" / "results.json").read_text())["test"] == best["test"]
    assert (output / "best" / "tokenizer.json").is_file() and (output / "best" / "test.hyp.de").is_file()
    assert f"best checkpoint: {output / 'best'} (step 2, validation sacrebleu" in printed
    assert printed.strip().splitlines()[-1] == f"model: {output / 'averaged'}"

    # The same command's early-stopped output is its own: refused for its checkpoints alone, and started afresh over
    # with --overwrite_output_dir, which deletes what the earlier run decided (its checkpoints, average and best).
    from modeling_vaswani.toolkit.training.recipe import ModelArguments, check_output_and_resume

    again = {"output_dir": str(output), "report_to": [], "use_cpu": True}
    with pytest.raises(ValueError, match=r"holds checkpoints of an earlier run \(checkpoint-2, checkpoint-3"):
        check_output_and_resume(ModelArguments(), VaswaniTrainingArguments(**again))
    check_output_and_resume(ModelArguments(), VaswaniTrainingArguments(**again, overwrite_output_dir=True))
    assert not list(output.glob("checkpoint-*")) and not (output / "best").exists()
    assert not (output / "averaged").exists()
