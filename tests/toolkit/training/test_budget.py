"""The time budget plans the run (training/budget.py): the schedule fitted by hand-computed cases, the warning and
what it tells a user, and a real run planned on this machine that ends where its plan says, not where a clock cuts
it."""

import logging
import math
import re

import pytest
import torch
from helpers.training_setup import budgeted_trainer, tiny_checkpoint, tokenized_slice
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from modeling_vaswani.toolkit.training.budget import (
    USABLE_STEPS,
    Plan,
    choose_threads,
    describe_expected_score,
    fit_schedule,
    plan_run,
)
from modeling_vaswani.toolkit.training.recipe import is_main_job, parse_arguments
from modeling_vaswani.toolkit.training.trainer import VaswaniTrainingArguments

SMALL = {"max_steps": 4000, "warmup_steps": 400, "save_steps": 150, "eval_steps": 500}  # the small preset's


def test_a_quiet_machine_keeps_the_presets_spacing_and_ends_on_a_checkpoint():
    # 27 minutes, 0.6 s a step, 10 s an evaluation: 0.92 x (1620 - 5 x 10) / 0.6 = 2407.3 steps; warmup 400 (under
    # 2407 / 6); checkpoints every min(150, int(0.3 x 2407 / 5) = 144) = 144 steps; 2407 rounded down to 16 x 144.
    assert fit_schedule(27 * 60, 0.6, 10.0, SMALL, 5) == (2304, 400, 144, 460)


def test_a_busy_machine_gets_a_whole_schedule_in_fewer_steps():
    # 3.9 s a step, 30 s an evaluation: 0.92 x (1620 - 150) / 3.9 = 346.8 steps; warmup 346 // 6 = 57, so that
    # Equation 3 peaks and decays; checkpoints every int(0.3 x 346 / 5) = 20 steps, the last five within the last 30%;
    # 346 rounded down to 17 x 20; five evaluations, every 340 // 5 = 68 steps.
    steps, warmup, save, evaluations = fit_schedule(27 * 60, 3.9, 30.0, SMALL, 5)
    assert (steps, warmup, save, evaluations) == (340, 57, 20, 68)
    assert steps % save == 0 and 5 * save <= 0.3 * steps and warmup < steps // 5


def test_a_budget_that_does_not_bind_leaves_the_run_as_set():
    assert fit_schedule(27 * 60, 0.1, 5.0, SMALL, 5) == (4000, 400, 150, 500)
    without_evaluation = {**SMALL, "eval_steps": None}
    # 0.92 x 60 = 55.2 steps: warmup 55 // 6 = 9, checkpoints every int(0.3 x 55 / 2) = 8 steps, 55 rounded to 6 x 8
    assert fit_schedule(60, 1.0, 100.0, without_evaluation, 2) == (48, 9, 8, None)


def test_an_evaluation_the_measuring_had_no_time_to_time_is_left_out_of_the_plan():
    # The probe ran out of its share before timing one (infinite seconds): no evaluation, and the whole 60 s train, as
    # above (a ValueError before, 'cannot convert float NaN to integer': 0 evaluations x infinite seconds).
    assert fit_schedule(60, 1.0, math.inf, SMALL, 2) == (48, 9, 8, None)


def test_evaluations_that_would_take_more_than_a_tenth_of_the_budget_are_fewer_or_none():
    # 50 s an evaluation: a tenth of 1620 s holds int(162 / 50) = 3 of them; 0.92 x (1620 - 150) / 1.0 = 1352.4
    # steps; warmup 1352 // 6 = 225; checkpoints every int(0.3 x 1352 / 5) = 81 steps; 1352 rounded down to 16 x 81 =
    # 1296; an evaluation every 1296 // 3 = 432 steps.
    assert fit_schedule(27 * 60, 1.0, 50.0, SMALL, 5) == (1296, 225, 81, 432)
    # 200 s an evaluation, more than 162: none, and the whole budget trains: 0.92 x 1620 = 1490.4 steps; warmup 248;
    # checkpoints every int(0.3 x 1490 / 5) = 89; 1490 rounded down to 16 x 89 = 1424.
    assert fit_schedule(27 * 60, 1.0, 200.0, SMALL, 5) == (1424, 248, 89, None)
    told = Plan(1.0, 200.0, 20.0, 1424, 248, 89, None, 2).describe(27, 5)
    assert "no evaluation (one would take 200 s, more than a tenth of the budget)" in told


def test_a_plan_of_no_evaluation_leaves_out_the_trainers_one_at_the_end(tmp_path):
    """The Trainer evaluates at the last step of a run evaluated by steps; a plan that has no time for evaluations
    has none for that one either, unless early stopping needs them."""
    given = VaswaniTrainingArguments(output_dir=str(tmp_path), report_to=[], eval_strategy="steps", eval_steps=500)
    assert Plan(1.0, 200.0, 20.0, 1424, 248, 89, None, 2).applied_to(given).eval_strategy == "no"
    assert Plan(0.6, 10.0, 8.0, 2304, 400, 144, 460, 2).applied_to(given).eval_strategy == "steps"
    stopping = VaswaniTrainingArguments(
        output_dir=str(tmp_path), report_to=[], eval_strategy="steps", eval_steps=500, early_stopping_patience=2
    )
    assert Plan(1.0, 200.0, 20.0, 1424, 248, 89, None, 2).applied_to(stopping).eval_strategy == "steps"
    assert given.eval_strategy == "steps", "the arguments given are left as they were"


def test_a_busy_machine_trains_on_one_thread_where_that_is_faster(restore_threads):
    # 2026-11-26, two jobs on 2 cores: 3.3 s a step on 2 threads each, 0.89 s on one each.
    torch.set_num_threads(2)
    asked = []

    def seconds_per_step():  # what the probe would measure on the thread count torch is set to now
        asked.append(torch.get_num_threads())
        return 3.3 if torch.get_num_threads() > 1 else 0.89

    assert choose_threads(seconds_per_step) == (1, 0.89, (2, 3.3))
    assert asked == [2, 1]


def test_choosing_leaves_torchs_thread_count_as_it_was(restore_threads):
    """The choice is returned, not applied: the caller that owns the process sets it (recipe.train_model)."""
    torch.set_num_threads(2)
    assert choose_threads(lambda: 3.3 if torch.get_num_threads() > 1 else 0.89)[0] == 1
    assert torch.get_num_threads() == 2

    def failing():  # a step that fails on the second count: the count is set back all the same
        if torch.get_num_threads() == 1:
            raise RuntimeError("out of memory")
        return 1.0

    with pytest.raises(RuntimeError, match="out of memory"):
        choose_threads(failing)
    assert torch.get_num_threads() == 2


def test_a_quiet_machine_keeps_its_threads(restore_threads):
    torch.set_num_threads(2)
    assert choose_threads(lambda: 0.52 if torch.get_num_threads() > 1 else 0.9) == (2, 0.52, (1, 0.9))
    assert torch.get_num_threads() == 2
    torch.set_num_threads(1)  # one thread to begin with: nothing else to try
    asked = []
    assert choose_threads(lambda: asked.append(1) or 0.9) == (1, 0.9, None) and asked == [1]


def test_the_plan_says_what_it_is_expected_to_score_from_the_runs_measured():
    assert describe_expected_score(2272).startswith("Expected: about 38.44 sacreBLEU on test2016")
    assert describe_expected_score(1000).startswith("Expected: below 37.7 sacreBLEU")  # 1,760 steps scored 37.70
    assert describe_expected_score(2000).startswith("Expected: between 37.16 and 38.44 sacreBLEU")
    assert describe_expected_score(3000).startswith("Expected: about 38.44 or more")
    assert "1,760 steps 37.7, 1,776 steps 37.16, 2,272 steps 38.44" in describe_expected_score(1000)


def test_a_plan_too_short_warns_and_says_what_to_do():
    short = Plan(3.9, 30.0, 50.0, 340, 57, 20, 68, 1)
    message = short.shortfall()
    assert "340 steps" in message and "1,200" in message
    assert "--max_train_minutes 86" in message  # 1,200 steps x 3.9 s / 60 x 1.1 = 85.8 minutes
    assert "--max_steps 2684 --max_train_minutes 0" in message  # the step budget measured (measurements.json)
    assert Plan(0.6, 10.0, 8.0, 2304, 400, 144, 460, 2).shortfall() is None
    assert "2,304 steps" in Plan(0.6, 10.0, 8.0, 2304, 400, 144, 460, 2).describe(27, 5)
    asked = Plan(0.6, 10.0, 8.0, 30, 5, 10, 15, 2, fitted_to_budget=False)  # --max_steps 30, well within the budget
    assert asked.shortfall() is None and "the 30 steps asked for fit" in asked.describe(27, 2)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("tiny"))


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_a_planned_run_ends_at_its_planned_step_with_its_checkpoints(checkpoint, tmp_path, caplog, restore_threads):
    """18 seconds on this machine: the plan is made from measured steps, with the warmup, save and evaluation spacing
    fitted to them; the run ends where its last plan says (made again as it trains: the clock, a guard, does not cut
    it, which it did on a machine slower than its probe, load 18, 2026-11-27, before the plan was made again), the
    last checkpoint is that step. Where the planned steps are few, the warning is given, naming what to do."""
    trainer = budgeted_trainer(
        checkpoint, tmp_path, 400, max_train_minutes=0.3, max_steps=100_000, warmup_steps=400, save_steps=150,
        average_last_checkpoints=2,
    )  # fmt: skip
    given = trainer.args.to_dict()
    with caplog.at_level(logging.WARNING, logger="modeling_vaswani.toolkit.training"):
        plan = plan_run(trainer)
        assert trainer.args.to_dict() == given, "the plan is an input of the trainer, not a change to its arguments"
        args = plan.applied_to(trainer.args)
        torch.set_num_threads(plan.threads)  # as the job applies it
        assert plan.probe_seconds > 0 and plan.seconds_per_step > 0
        expected = max(1, int(0.92 * (18 - plan.probe_seconds) / plan.seconds_per_step))  # no evaluation in this run
        save = max(1, min(150, int(0.3 * expected / 2)))
        assert plan.max_steps == max(save, expected - expected % save) and plan.save_steps == save
        assert (args.max_steps, args.warmup_steps, args.save_steps) == (plan.max_steps, max(1, expected // 6), save)
        trainer.follow(plan)
        trainer.train()
    assert "plan: time budget 0.3 minutes" in caplog.text
    # a quiet host trains the tiny model at 100 steps/s and more (2026-11-30): 1,500 steps, no warning due
    warned = "WARNING: the time budget is too short" in caplog.text
    assert warned == (plan.max_steps < USABLE_STEPS), (plan.max_steps, warned)
    assert "max_train_minutes=0.3 reached" not in caplog.text, "ended by its plan, not cut by the clock"
    assert trainer.state.global_step == trainer.state.max_steps  # the last plan's end
    assert (tmp_path / f"checkpoint-{trainer.state.global_step}" / "model.safetensors").exists()
    assert (tmp_path / "averaged" / "model.safetensors").exists()


def test_a_corpus_of_fewer_batches_than_the_probe_is_measured_all_the_same(checkpoint, tmp_path):
    """Two batches of training data, the probe's 15 steps taken by going round them again."""
    trainer = budgeted_trainer(checkpoint, tmp_path, 12, max_train_minutes=5, max_steps=10)
    assert len(trainer.get_train_dataloader()) < 15
    plan = plan_run(trainer)
    assert plan.seconds_per_step > 0 and (plan.max_steps, plan.fitted_to_budget) == (10, False)


# --- issue 51, item 17: the measuring fits the budget; the expectation only for the main job ---


def test_the_measuring_takes_its_share_of_a_budget_shorter_than_a_whole_probe(checkpoint, tmp_path, restore_threads):
    """A budget of 15 steps' time, shorter than the whole measuring (15 steps on each thread count): the measuring
    may take a third of it, each thread count half of that (past it, no step is started once one warm-up and one
    timed step are done; past the third, neither a second thread count nor an evaluation is tried), so training gets
    the rest, not a plan of 1 step made after the budget was spent measuring (issue 51: --max_train_minutes 0.5, 80 s
    of measuring the main job's model)."""
    # Measured whole first, then on the faster thread count, as the job trains (restored after the test).
    whole = plan_run(budgeted_trainer(checkpoint, tmp_path, 400, max_train_minutes=60))
    torch.set_num_threads(whole.threads)
    step = whole.seconds_per_step
    plan = plan_run(budgeted_trainer(checkpoint, tmp_path, 400, max_train_minutes=15 * step / 60, max_steps=10**5))
    assert plan.probe_steps < 12, "stopped measuring at its share"
    assert plan.max_steps > 1 and plan.fitted_to_budget, plan


def test_a_budget_the_measuring_leaves_no_step_of_is_refused_naming_the_minimum(checkpoint, tmp_path, restore_threads):
    trainer = budgeted_trainer(checkpoint, tmp_path, 400, max_train_minutes=0.001, max_tokens=2000)  # 0.06 s
    refusal = r"--max_train_minutes 0.001 leaves no time to train: measuring this machine took \d+ s \(1 steps of "
    with pytest.raises(ValueError, match=refusal + r"[\d.]+ s\); expected a budget of more than [\d.]+ minutes"):
        plan_run(trainer)


def test_the_expected_score_is_said_of_the_main_job_alone(checkpoint, tmp_path, caplog, restore_threads):
    """The scores of PLANNED_RUNS were measured on the main job: a plan of any other run (here a tiny model on 400
    pairs) says nothing of them, and its warning blames the budget, not the machine."""
    # One thread: the probe's second count took 5.5 s a step of the tiny model on a busy host (load 18, 2026-11-27),
    # and measuring it left no time of the 12 s to train; the threads are not what this test is about.
    torch.set_num_threads(1)
    with caplog.at_level(logging.WARNING, logger="modeling_vaswani.toolkit.training.budget"):
        plan_run(budgeted_trainer(checkpoint, tmp_path, 400, max_train_minutes=0.2, max_steps=100_000))
    assert "plan: time budget 0.2 minutes" in caplog.text and "sacreBLEU" not in caplog.text
    assert "the time budget is too short for a usable model" in caplog.text
    assert "this machine is too slow" not in caplog.text
    told = Plan(0.6, 10.0, 8.0, 2304, 400, 144, 460, 2, main_job=True).describe(27, 5)
    assert "Expected: about 38.44 or more sacreBLEU on test2016" in told
    assert "Expected" not in Plan(0.6, 10.0, 8.0, 2304, 400, 144, 460, 2).describe(27, 5)


@pytest.mark.parametrize(
    ("argv", "main"),
    [
        ([], True),
        (["--learning_rate", "1e-3", "--max_train_minutes", "10"], True),  # training flags: the plan fits them
        (["--preset", "base"], False),
        (["--target_lang", "fr"], False),
        (["--vocab_size", "4000"], False),
        (["--max_train_samples", "1000"], False),
        (["--train_source_file", "a.en", "--train_target_file", "a.de"], False),
        (["--dataset_name", "wmt14", "--dataset_config_name", "de-en"], False),
        (["--test_file", "test.jsonl"], False),
    ],
)
def test_a_run_is_the_main_job_only_with_its_model_and_data(argv, main):
    assert is_main_job(*parse_arguments(argv)[:2]) is main


# --- issue 53, item 5: the plan is an input of the schedule ---


@pytest.mark.slow  # a real planned run of 18 s, on 2 busy cores (2026-11-27)
def test_a_planned_run_peaks_at_equation_3s_rate_for_the_planned_warmup(checkpoint, tmp_path, caplog, restore_threads):
    """A run given Equation 3's own peak (no --learning_rate) and a budget that shrinks its warmup of 4,000 steps
    follows Equation 3 with W, the planned warmup: d_model^-0.5 * min(step^-0.5, step * W^-1.5), which peaks at
    d_model^-0.5 * W^-0.5; the peak is computed from the warmup the plan ends with, not from the 4,000 the run was set
    with (before, a `base` run with --max_train_minutes peaked at 4,000's rate)."""
    from modeling_vaswani.toolkit.training.recipe import ModelArguments, train_model

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForSeq2SeqLM.from_pretrained(checkpoint)
    args = VaswaniTrainingArguments(
        output_dir=str(tmp_path), report_to=[], use_cpu=True, disable_tqdm=True, seed=0, max_tokens=200,
        max_train_minutes=0.3, max_steps=100_000, warmup_steps=4000, save_steps=100_000, logging_steps=1,
    )  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="modeling_vaswani.toolkit.training.budget"):
        trainer, _ = train_model(model, ModelArguments(), args, tokenizer, tokenized_slice(tokenizer, 400), None)
    warmup = int(re.search(r"warmup (\d+),", caplog.text).group(1))
    assert warmup < 4000
    assert model.config.d_model == 32
    # The Trainer logs at step N (counted from 1, as the paper counts) the rate step N was taken with.
    logged = [
        (entry["step"], entry["learning_rate"]) for entry in trainer.state.log_history if "learning_rate" in entry
    ]
    assert logged
    for step, rate in logged:
        assert rate == pytest.approx(32**-0.5 * min(step**-0.5, step * warmup**-1.5), rel=1e-6), (step, warmup)
    assert args.max_steps == 100_000 and args.warmup_steps == 4000, "the caller's arguments are left as given"
