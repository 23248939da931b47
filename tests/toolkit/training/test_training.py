"""The training recipe of Section 5 on Seq2SeqTrainer: defaults, Equation 3, token batches, averaging, saving."""

import json
import re
import time

import numpy as np
import pytest
import sacrebleu
import torch
from helpers.training_setup import tiny_checkpoint, tokenized_slice
from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer, EvalPrediction, Seq2SeqTrainer
from transformers.trainer_utils import get_last_checkpoint

from modeling_vaswani.toolkit.training.averaging import average_checkpoints
from modeling_vaswani.toolkit.training.presets import preset_config
from modeling_vaswani.toolkit.training.trainer import (
    VaswaniTrainer,
    VaswaniTrainingArguments,
    check_private_hooks,
    non_persistent_buffers,
)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("tiny"))


def make_trainer(checkpoint, output_dir, examples: int = 200, eval_dataset=None, **overrides) -> VaswaniTrainer:
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForSeq2SeqLM.from_pretrained(checkpoint)
    settings = dict(output_dir=str(output_dir), report_to=[], use_cpu=True, disable_tqdm=True, seed=0)
    args = VaswaniTrainingArguments(**{**settings, **overrides})
    train = tokenized_slice(tokenizer, examples)
    return VaswaniTrainer(
        model=model, args=args, train_dataset=train, eval_dataset=eval_dataset, processing_class=tokenizer
    )


def test_defaults_are_the_papers_recipe(tmp_path):
    args = VaswaniTrainingArguments(output_dir=str(tmp_path))
    assert (args.adam_beta1, args.adam_beta2, args.adam_epsilon) == (0.9, 0.98, 1e-9)  # Section 5.3
    assert args.warmup_steps == 4000 and args.paper_schedule  # Equation 3
    assert args.weight_decay == 0.0 and args.max_grad_norm == 0.0  # no decay, no clipping
    assert args.label_smoothing_factor == 0.1  # Section 5.4


def test_learning_rate_follows_equation_3(checkpoint, tmp_path):
    warmup, d_model = 10, 32
    trainer = make_trainer(checkpoint, tmp_path, warmup_steps=warmup, max_steps=40)
    trainer.create_optimizer_and_scheduler(num_training_steps=40)
    optimizer, scheduler = trainer.optimizer, trainer.lr_scheduler
    assert optimizer.defaults["betas"] == (0.9, 0.98) and optimizer.defaults["eps"] == 1e-9
    assert all(group["weight_decay"] == 0.0 for group in optimizer.param_groups)  # AdamW without decay: Adam
    for step in range(1, 41):  # the paper counts steps from 1
        expected = d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
        assert optimizer.param_groups[0]["lr"] == pytest.approx(expected, rel=1e-9), step
        optimizer.step()
        scheduler.step()


def test_the_trainer_leaves_its_callers_arguments_as_given(checkpoint, tmp_path):
    # One arguments object for two models of other widths: each Trainer follows Equation 3 with its own d_model, on
    # its own copy of the arguments, and the caller's learning_rate stays 0 ("take Equation 3's").
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    args = VaswaniTrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True, warmup_steps=4, max_steps=8)
    given = args.to_dict()
    for d_model in (32, 64):
        config = AutoConfig.from_pretrained(checkpoint, d_model=d_model, d_ff=2 * d_model)
        model = AutoModelForSeq2SeqLM.from_config(config)
        trainer = VaswaniTrainer(model=model, args=args, train_dataset=tokenized_slice(tokenizer, 16))
        assert args.to_dict() == given and args.learning_rate == 0
        trainer.create_optimizer_and_scheduler(num_training_steps=8)
        for step in range(1, 9):
            expected = d_model**-0.5 * min(step**-0.5, step * 4**-1.5)
            assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(expected, rel=1e-9), (d_model, step)
            trainer.optimizer.step()
            trainer.lr_scheduler.step()


def test_non_persistent_buffers_are_those_no_state_dict_holds(checkpoint):
    # What torch's private Module._non_persistent_buffers_set gives, against the public definition.
    model = AutoModelForSeq2SeqLM.from_pretrained(checkpoint)
    public = {name for name, _ in model.named_buffers()} - model.state_dict().keys()
    assert public and non_persistent_buffers(model) == public  # the sinusoid tables of Section 3.5


def test_explicit_peak_learning_rate_keeps_the_shape(checkpoint, tmp_path):
    trainer = make_trainer(checkpoint, tmp_path, warmup_steps=4, learning_rate=1e-3, max_steps=10)
    trainer.create_optimizer_and_scheduler(num_training_steps=10)
    rates = []
    for _ in range(8):
        rates.append(trainer.optimizer.param_groups[0]["lr"])
        trainer.optimizer.step()
        trainer.lr_scheduler.step()
    assert rates == pytest.approx([1e-3 * min(s / 4, (4 / s) ** 0.5) for s in range(1, 9)])
    assert max(rates) == pytest.approx(1e-3)


def test_token_budget_batches_through_the_trainer(checkpoint, tmp_path):
    trainer = make_trainer(checkpoint, tmp_path, examples=300, max_tokens=240)
    dataset = trainer.train_dataset
    # A column the model does not take is left out, as the Trainer leaves it out of its own batches (text would
    # make the collator fail).
    trainer.train_dataset = dataset.add_column("note", ["text"] * len(dataset))
    seen = []
    for batch in trainer.get_train_dataloader():
        assert set(batch) == {"input_ids", "attention_mask", "labels", "decoder_input_ids"}
        assert batch["input_ids"].numel() <= 240 and batch["labels"].numel() <= 240  # padded sizes
        assert torch.equal(batch["decoder_input_ids"][:, 1:], batch["labels"][:, :-1].clamp(min=1))
        seen.extend(int(n) for n in batch["attention_mask"].sum(-1))
    assert sorted(seen) == sorted(len(ids) for ids in dataset["input_ids"])  # every example once


def test_averaging_real_checkpoints_keeps_the_tie(tmp_path):
    for step, seed in ((1, 1), (2, 2)):
        tiny_checkpoint(tmp_path / f"checkpoint-{step}", seed=seed, lines=300)
    average_checkpoints([tmp_path / "checkpoint-1", tmp_path / "checkpoint-2"], tmp_path / "averaged")
    first, second, averaged = (
        AutoModelForSeq2SeqLM.from_pretrained(tmp_path / name) for name in ("checkpoint-1", "checkpoint-2", "averaged")
    )
    expected = (first.model.shared.weight.double() + second.model.shared.weight.double()) / 2
    assert torch.allclose(averaged.model.shared.weight.double(), expected, atol=1e-7)
    assert averaged.lm_head.weight is averaged.model.shared.weight
    layer = "model.decoder.layers.1.feed_forward.w2.weight"
    mean = (first.state_dict()[layer] + second.state_dict()[layer]) / 2
    assert torch.allclose(averaged.state_dict()[layer], mean, atol=1e-7)


def test_training_averages_the_last_checkpoints(checkpoint, tmp_path):
    trainer = make_trainer(checkpoint, tmp_path, max_steps=4, save_steps=1, average_last_checkpoints=3, max_tokens=200)
    trainer.train()
    weights = [
        AutoModelForSeq2SeqLM.from_pretrained(tmp_path / f"checkpoint-{step}").state_dict() for step in (2, 3, 4)
    ]
    averaged = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "averaged").state_dict()
    for name, tensor in averaged.items():
        assert torch.allclose(tensor, sum(w[name] for w in weights) / 3, atol=1e-6), name


def test_a_failed_save_leaves_no_checkpoint(checkpoint, tmp_path, monkeypatch):
    trainer = make_trainer(checkpoint, tmp_path, max_steps=2, save_steps=1, max_tokens=200)
    saves = {"count": 0}
    original = trainer._save_rng_state

    def fail_on_second_save(output_dir):
        saves["count"] += 1
        if saves["count"] == 2:
            raise RuntimeError("disk full")
        return original(output_dir)

    monkeypatch.setattr(trainer, "_save_rng_state", fail_on_second_save)
    with pytest.raises(RuntimeError, match="disk full"):
        trainer.train()
    assert (tmp_path / "checkpoint-1" / "trainer_state.json").exists()
    assert not (tmp_path / "checkpoint-2").exists()  # the half-written one stays under its temporary name
    assert get_last_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-1")


def test_the_best_checkpoint_is_named_where_it_ends_up(checkpoint, tmp_path):
    """The Trainer records the best checkpoint as the folder it wrote, the staging one: renamed, it must be named by
    its final path, in the Trainer's state and in the checkpoint's trainer_state.json (--load_best_model_at_end)."""
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    trainer = make_trainer(
        checkpoint, tmp_path, max_steps=2, save_steps=1, eval_steps=1, eval_strategy="steps", max_tokens=200,
        load_best_model_at_end=True, metric_for_best_model="loss", greater_is_better=False,
        predict_with_generate=False, eval_dataset=tokenized_slice(tokenizer, 4, split="validation"),
    )  # fmt: skip
    trainer.train()
    best = trainer.state.best_model_checkpoint
    assert best in (str(tmp_path / "checkpoint-1"), str(tmp_path / "checkpoint-2"))
    for step in (1, 2):
        saved = json.loads((tmp_path / f"checkpoint-{step}" / "trainer_state.json").read_text())
        assert saved["best_model_checkpoint"] in (str(tmp_path / "checkpoint-1"), str(tmp_path / "checkpoint-2"))


def test_each_training_run_starts_equation_3_afresh(checkpoint, tmp_path):
    trainer = make_trainer(checkpoint, tmp_path, max_steps=2, save_strategy="no", warmup_steps=4, max_tokens=200)
    trainer.train()
    first = trainer.lr_scheduler
    trainer.train()
    assert trainer.lr_scheduler is not first and trainer.lr_scheduler.last_epoch == 2  # not 4: a schedule anew


def test_a_changed_private_hook_of_the_trainer_fails_loudly(checkpoint, tmp_path, monkeypatch):
    check_private_hooks()  # the installed transformers: every overridden private method as expected

    class Gone(Seq2SeqTrainer):
        _load_from_checkpoint = None

    with pytest.raises(RuntimeError, match=r"Gone\._load_from_checkpoint has parameters None"):
        check_private_hooks(Gone)
    monkeypatch.setattr(Seq2SeqTrainer, "_save_checkpoint", lambda self, model, trial, metrics=None: None)
    with pytest.raises(RuntimeError, match=r"Seq2SeqTrainer\._save_checkpoint has parameters .*'metrics'"):
        make_trainer(checkpoint, tmp_path)  # checked as a VaswaniTrainer is built


def test_a_trainer_that_no_longer_saves_where_it_is_told_fails_loudly(checkpoint, tmp_path):
    trainer = make_trainer(checkpoint, tmp_path, max_steps=1, save_steps=1, max_tokens=200)
    trainer._get_output_dir = lambda trial: str(tmp_path)  # as if _save_checkpoint no longer asked VaswaniTrainer's
    with pytest.raises(RuntimeError, match="no longer writes where _get_output_dir says"):
        trainer.train()


def test_preset_config_takes_the_tokenizers_vocabulary(checkpoint):
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    config = preset_config("base", tokenizer)
    assert config.vocab_size == len(tokenizer) and config.d_model == 512
    assert (config.pad_token_id, config.eos_token_id) == (tokenizer.pad_token_id, tokenizer.eos_token_id)
    with pytest.raises(ValueError, match="huge"):
        preset_config("huge")


def test_averaging_without_checkpoints_is_refused(tmp_path):
    with pytest.raises(ValueError, match="save_strategy"):
        VaswaniTrainingArguments(output_dir=str(tmp_path), average_last_checkpoints=5, save_strategy="no")
    with pytest.raises(ValueError, match="save_total_limit"):
        VaswaniTrainingArguments(output_dir=str(tmp_path), average_last_checkpoints=5, save_total_limit=3)


def test_evaluation_translates_with_the_papers_decoding_and_scores_bleu(checkpoint, tmp_path):
    from modeling_vaswani.toolkit.training.recipe import validation_scores

    trainer = make_trainer(checkpoint, tmp_path, max_steps=1, per_device_eval_batch_size=4)
    tokenizer = trainer.processing_class
    trainer.compute_metrics = lambda prediction: validation_scores(prediction, tokenizer)
    calls = []
    generate = trainer.model.generate

    def recording_generate(*args, **kwargs):
        calls.append(kwargs.get("paper_decoding"))
        return generate(*args, **kwargs)

    trainer.model.generate = recording_generate
    metrics = trainer.evaluate(tokenized_slice(tokenizer, 6, split="validation"))
    assert calls and all(calls)  # every batch decoded as Section 6.1
    assert 0.0 <= metrics["eval_sacrebleu"] <= 100.0 and "eval_tokenized_bleu" in metrics
    assert 0.0 <= metrics["eval_chrf"] <= 100.0


def test_validation_scores_read_the_gathered_ids_up_to_the_padding(checkpoint):
    """compute_metrics on ids padded with -100 as the Trainer gathers them: BLEU and chrF of the decoded text, as
    sacrebleu scores that text itself."""
    from modeling_vaswani.toolkit.training.recipe import validation_scores

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)

    def gathered(texts):
        ids = tokenizer(texts)["input_ids"]
        width = max(len(row) for row in ids) + 2  # -100 after every row, as across batches of another width
        return np.array([row + [-100] * (width - len(row)) for row in ids])

    hypotheses = ["Ein Mann fährt Rad.", "Zwei Hunde spielen im Schnee.", "Ein Mädchen."]
    references = ["Ein Mann fährt ein Rad.", "Zwei Hunde spielen.", "Ein kleines Mädchen lacht."]
    scores = validation_scores(EvalPrediction(gathered(hypotheses), gathered(references)), tokenizer)

    def text(texts):  # what the ids stand for: the tokenizer's own decoding, without </s>
        return tokenizer.batch_decode(tokenizer(texts)["input_ids"], skip_special_tokens=True)

    hypotheses, references = text(hypotheses), text(references)
    assert set(scores) == {"sacrebleu", "tokenized_bleu", "chrf"}
    assert scores["sacrebleu"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references]).score)
    assert 0 < scores["chrf"] < 100
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hypotheses, [references]).score)


def test_no_time_limit_at_zero_minutes_and_negative_refused(checkpoint, tmp_path):
    trainer = make_trainer(checkpoint, tmp_path, max_steps=3, max_train_minutes=0, save_steps=100, max_tokens=200)
    trainer.train()
    assert trainer.state.global_step == 3  # a 0-minute budget would have stopped after the first step
    with pytest.raises(ValueError, match=r"max_train_minutes must be >= 0 \(0: no time limit\), got -1"):
        VaswaniTrainingArguments(output_dir=str(tmp_path), max_train_minutes=-1)


def test_time_budget_stops_training_and_saves_a_checkpoint(checkpoint, tmp_path):
    trainer = make_trainer(
        checkpoint, tmp_path, max_steps=100_000, max_train_minutes=0.05, save_steps=100_000, max_tokens=200
    )
    started = time.monotonic()
    trainer.train()
    assert time.monotonic() - started < 60
    step = trainer.state.global_step
    assert 0 < step < 100_000
    assert (tmp_path / f"checkpoint-{step}" / "model.safetensors").exists()  # saved where the budget ran out


@pytest.fixture
def no_model(monkeypatch):
    """The recipe with model building replaced by a failure, so that a refusal that comes late fails the test."""
    from modeling_vaswani.toolkit.training import recipe

    def build(*args, **kwargs):
        raise AssertionError("the model was built before the bad --max_tokens was refused")

    monkeypatch.setattr(recipe, "VaswaniForConditionalGeneration", build)
    monkeypatch.setattr(recipe, "train_model", build)
    return recipe


def test_an_example_over_the_token_budget_is_refused_by_its_line_before_the_model_is_built(
    checkpoint, tmp_path, no_model
):
    recipe = no_model
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    sentences = ["A dog.", "Two cats.", "A man in a blue shirt is riding a red bike down the long street.", "A bird."]
    long_ids, target_ids = (len(tokenizer(text)["input_ids"]) for text in (sentences[2], "Ein Mann."))
    (tmp_path / "train.en").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    (tmp_path / "train.de").write_text("Ein Hund.\nZwei Katzen.\nEin Mann.\nEin Vogel.\n", encoding="utf-8")
    rows = [json.dumps({"en": sentence, "de": "Ein Satz."}) for sentence in sentences]
    rows.insert(1, "")  # a blank line, which is no row: the long pair is row 3 but line 4
    (tmp_path / "train.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    common = ["--tokenizer_name_or_path", str(checkpoint), "--max_tokens", "10", "--use_cpu", "--report_to", "none"]
    texts = ["--train_source_file", str(tmp_path / "train.en"), "--train_target_file", str(tmp_path / "train.de")]
    with pytest.raises(ValueError) as refused:
        recipe.train_and_score(*recipe.parse_arguments([*common, *texts, "--output_dir", str(tmp_path / "a")]))
    assert str(refused.value).startswith(
        f"training example at line 3 of {tmp_path / 'train.en'} and {tmp_path / 'train.de'} has {long_ids} source "
        f"and {target_ids} target tokens (</s> included), more than --max_tokens 10"
    )
    assert f"Expected --max_tokens >= {long_ids}, or --max_length 10 to drop the pairs" in str(refused.value)
    table = ["--train_file", str(tmp_path / "train.jsonl")]
    with pytest.raises(ValueError, match=rf"^training example at .*train\.jsonl, line 4 has {long_ids} source"):
        recipe.train_and_score(*recipe.parse_arguments([*common, *table, "--output_dir", str(tmp_path / "b")]))
    dropped = ["--max_length", "10", "--output_dir", str(tmp_path / "c")]  # drops the long pair: on to the model
    with pytest.raises(AssertionError, match="the model was built"):
        recipe.train_and_score(*recipe.parse_arguments([*common, *texts, *dropped]))


def test_ablate_refuses_an_example_over_the_token_budget_before_any_line_is_trained(checkpoint, tmp_path, monkeypatch):
    from modeling_vaswani.toolkit.training import ablation

    monkeypatch.setattr(ablation, "train_line", lambda *_: pytest.fail("a line was trained before the refusal"))
    sentences = ["A dog.", "Two cats.", "A man in a blue shirt is riding a red bike down the long street.", "A bird."]
    for split in ("train", "dev"):
        (tmp_path / f"{split}.en").write_text("\n".join(sentences) + "\n", encoding="utf-8")
        (tmp_path / f"{split}.de").write_text("Ein Hund.\nZwei Katzen.\nEin Mann.\nEin Vogel.\n", encoding="utf-8")
    files = [f"--{split}_{side}_file" for split in ("train", "validation") for side in ("source", "target")]
    paths = [tmp_path / name for name in ("train.en", "train.de", "dev.en", "dev.de")]
    argv = ["--rows", "base", "--tokenizer_name_or_path", str(checkpoint), "--max_tokens", "10", "--use_cpu"]
    argv += [*(value for pair in zip(files, map(str, paths), strict=True) for value in pair)]
    with pytest.raises(ValueError, match=rf"^training example at line 3 of {tmp_path / 'train.en'} and .* Expected"):
        ablation.train_and_score_lines(*ablation.parse_arguments([*argv, "--output_dir", str(tmp_path / "ablation")]))


def test_continuing_from_another_models_checkpoint_is_refused_before_training(checkpoint, tmp_path):
    """A MarianMT checkpoint would train, then fail at the test set (its generate() has no paper decoding): refused
    at once, with the converter to use."""
    from transformers import MarianConfig, MarianMTModel

    from modeling_vaswani.toolkit.training import recipe

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    marian = MarianMTModel(MarianConfig(vocab_size=len(tokenizer), d_model=16, encoder_layers=1, decoder_layers=1,
                                        encoder_ffn_dim=32, decoder_ffn_dim=32, encoder_attention_heads=2,
                                        decoder_attention_heads=2, pad_token_id=tokenizer.pad_token_id,
                                        decoder_start_token_id=0))  # fmt: skip
    marian.save_pretrained(tmp_path / "marian")
    tokenizer.save_pretrained(tmp_path / "marian")
    argv = ["--model_name_or_path", str(tmp_path / "marian"), "--output_dir", str(tmp_path / "run"),
            "--max_train_samples", "50", "--report_to", "none", "--use_cpu"]  # fmt: skip
    told = "model_type is 'marian', expected 'vaswani' (a MarianMT model: `vaswani-convert marian"
    with pytest.raises(ValueError, match=re.escape(told)):
        recipe.train_and_score(*recipe.parse_arguments(argv))
    assert not list((tmp_path / "run").glob("checkpoint-*"))
