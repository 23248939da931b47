"""The plan made again as the run trains (training/replanning.py): the arithmetic against values worked by hand, and
real runs of a tiny model on a machine whose speed changes mid-run (a forward hook that waits, in the probe and in
training alike), which end within the last few percent of their budget, their averaged checkpoints the run's last."""

import logging
import math
import re
import time
from pathlib import Path

import pytest
import torch
from helpers.training_setup import budgeted_trainer, tiny_checkpoint
from hypothesis import given
from hypothesis import strategies as st
from transformers import AutoModelForSeq2SeqLM, ProgressCallback, TrainerCallback, TrainerState

from modeling_vaswani.toolkit.checkpoints import find_checkpoints
from modeling_vaswani.toolkit.training.budget import Plan, fit_schedule, plan_run
from modeling_vaswani.toolkit.training.replanning import (
    FollowTheMachine,
    Progress,
    checkpoints_between,
    describe_replan,
    replan,
)

SMALL = {"max_steps": 4000, "warmup_steps": 400, "save_steps": 150, "eval_steps": 500}  # the small preset's
# A first plan of 700 steps, fitted as fit_schedule fits them: warmup 700 // 6 = 116, checkpoints every
# int(0.3 x 700 / 5) = 42 steps, five evaluations every 140.
FIRST = Plan(0.6, 20.0, 30.0, 700, 116, 42, 140, 2, reference=SMALL)


def test_a_machine_that_got_faster_gets_more_steps_and_the_spacing_of_the_new_end():
    # At step 126, 1,210 s left, 0.5 s a step, five evaluations of 20 s left: 0.92 x (1210 - 100) / 0.5 = 2042.4 more
    # steps, so 2,168; checkpoints every int(0.3 x 2168 / 5) = 130 (the five averaged, 1,648 to 2,168, all ahead);
    # evaluations every ceil(2168 / 5) = 434; the warmup kept.
    planned = replan(FIRST, Progress(126, 1210.0, 0.5, 20.0, 5), evaluations=5, average=5)
    assert (planned.max_steps, planned.warmup_steps, planned.save_steps, planned.eval_steps) == (2168, 116, 130, 434)
    assert (planned.seconds_per_step, planned.evaluation_seconds) == (0.5, 20.0)
    told = describe_replan(FIRST, planned, Progress(126, 1210.0, 0.5, 20.0, 5), since=84)
    assert told == (
        "plan again at step 126: 2.00 steps/s since step 84, 1210 s left, so 700 -> 2,168 steps, a checkpoint every "
        "130 steps, an evaluation every 434"
    )


def test_the_progress_bar_shows_the_end_of_every_new_plan(checkpoint, tmp_path):
    """The quiet main job of 2026-11-29 grew from 2,550 to 2,651 steps, and its bar, made with the first plan's
    total, lost it ("2651it"): the bar the trainer shows is the one whose total each plan sets."""
    trainer = budgeted_trainer(checkpoint, tmp_path, 40, disable_tqdm=False, max_train_minutes=1, max_steps=10**5)
    trainer.follow(FIRST)
    planner = next(each for each in trainer.callback_handler.callbacks if isinstance(each, FollowTheMachine))
    bar = next(each for each in trainer.callback_handler.callbacks if isinstance(each, ProgressCallback))
    state = TrainerState(max_steps=FIRST.max_steps)
    bar.on_train_begin(trainer.args, state, trainer.control)
    planned = replan(FIRST, Progress(126, 1210.0, 0.5, 20.0, 5), evaluations=5, average=5)  # 2,168 steps, above
    planner.follow(planned, state)
    assert (state.max_steps, bar.training_bar.total) == (2168, 2168)
    planner.follow(replan(planned, Progress(300, 100.0, 2.0, 20.0, 0), evaluations=5, average=5), state)
    assert bar.training_bar.total == state.max_steps < 2168
    bar.training_bar.close()


def test_a_machine_that_slowed_gets_fewer_steps_and_says_the_warmup_is_kept():
    # 610 s left, 2 s a step, five evaluations of 30 s: 0.92 x (610 - 150) / 2 = 211.6 more steps, so 337;
    # checkpoints every int(0.3 x 337 / 5) = 20 (the averaged from 257 on, ahead); evaluations every ceil(67.4) = 68.
    progress = Progress(126, 610.0, 2.0, 30.0, 5)
    planned = replan(FIRST, progress, evaluations=5, average=5)
    assert (planned.max_steps, planned.warmup_steps, planned.save_steps, planned.eval_steps) == (337, 116, 20, 68)
    told = describe_replan(FIRST, planned, progress, since=84)
    assert "0.50 steps/s since step 84, 610 s left, so 700 -> 337 steps" in told
    assert told.endswith("Equation 3's warmup kept at 116, more than a sixth of the run")  # 116 > 337 / 6 = 56.2


def test_the_averaged_checkpoints_keep_their_spacing_once_they_have_begun():
    # At step 630 of 700 (a checkpoint, 15 x 42), 101 s left at 1 s a step, no evaluation left: 0.92 x 101 = 92.9
    # more steps, so 722; the new end's spacing, int(0.3 x 722 / 5) = 43, would put the averaged from 722 - 4 x 43 =
    # 550 on, already passed: the spacing they began with, 42, is kept (672, 714 and 722 the last three).
    planned = replan(FIRST, Progress(630, 101.0, 1.0, 20.0, 0), evaluations=5, average=5)
    assert (planned.max_steps, planned.save_steps, planned.eval_steps) == (722, 42, 145)  # ceil(722 / 5)


def test_no_time_left_ends_the_run_at_this_step():
    progress = Progress(630, -5.0, 1.0, 20.0, 1)
    planned = replan(FIRST, progress, evaluations=5, average=5)
    assert (planned.max_steps, planned.save_steps) == (630, 42)
    assert describe_replan(FIRST, planned, progress, since=612).endswith("so 700 -> 630 steps: the run ends here")


def test_a_plan_grows_at_most_to_the_run_as_set():
    # 10,000 s at 0.1 s a step would hold 91,080 more steps: the run as set, 4,000, with its own checkpoints and
    # evaluations (150 and 500, as fit_schedule keeps them: a user's --save_steps and --eval_steps), not the budget's
    # rules (int(0.3 x 4000 / 5) = 240 would also give 150; evaluations every 4000 / 5 = 800 would not).
    planned = replan(FIRST, Progress(126, 10_000.0, 0.1, 20.0, 5), evaluations=5, average=5)
    assert (planned.max_steps, planned.save_steps, planned.eval_steps) == (4000, 150, 500)


def test_a_run_as_set_that_fits_keeps_the_users_checkpoint_steps():
    # The command tests' main job: --max_steps 30 --save_steps 10 --eval_steps 15, averaging 2, on a fast machine:
    # the run as set fits, so its checkpoints stay at 10, 20, 30 (int(0.3 x 30 / 2) = 4 would have moved them).
    as_set = {"max_steps": 30, "warmup_steps": 10, "save_steps": 10, "eval_steps": 15}
    first = Plan(0.6, 1.0, 5.0, 30, 10, 10, 15, 1, reference=as_set)
    planned = replan(first, Progress(1, 1000.0, 0.5, 1.0, 2), evaluations=2, average=2)
    assert (planned.max_steps, planned.save_steps, planned.eval_steps) == (30, 10, 15)


def test_no_evaluation_costs_nothing_even_where_none_was_timed():
    # The probe had no time to time an evaluation (infinite seconds) and the run has none: 0.92 x 610 / 2 = 280.6
    # more steps, so 406; checkpoints every int(0.3 x 406 / 5) = 24.
    unevaluated = Plan(0.6, math.inf, 30.0, 700, 116, 42, None, 2, reference={**SMALL, "eval_steps": None})
    planned = replan(unevaluated, Progress(126, 610.0, 2.0, math.inf, 0), evaluations=0, average=5)
    assert (planned.max_steps, planned.save_steps, planned.eval_steps) == (406, 24, None)


@given(st.integers(0, 500), st.integers(0, 500), st.integers(1, 60))
def test_checkpoints_between_counts_every_spaced_step_and_the_end(step, length, save_steps):
    end = step + length
    counted = sum(1 for at in range(step + 1, end + 1) if at % save_steps == 0 or at == end)
    assert checkpoints_between(step, end, save_steps) == counted


@given(
    step=st.integers(0, 3000),
    seconds_left=st.floats(-50.0, 5000.0),
    seconds_per_step=st.floats(0.01, 5.0),
    save_seconds=st.floats(0.0, 60.0),
    evaluations_left=st.integers(0, 5),
)
def test_a_plan_leaves_time_for_its_checkpoints(step, seconds_left, seconds_per_step, save_seconds, evaluations_left):
    """The steps planned, the checkpoints they save (each as long as the last one timed) and the evaluations left fit
    the seconds left; checkpoints that take no time plan as many steps as the budget holds; slower ones never more."""
    progress = Progress(step, seconds_left, seconds_per_step, 20.0, evaluations_left, save_seconds)
    planned = replan(FIRST, progress, evaluations=5, average=5)
    free = replan(FIRST, Progress(step, seconds_left, seconds_per_step, 20.0, evaluations_left, 0.0), 5, 5)
    steps = planned.max_steps - step
    assert 0 <= steps and planned.max_steps <= free.max_steps <= SMALL["max_steps"]
    if steps:
        saves = checkpoints_between(step, planned.max_steps, planned.save_steps)
        assert steps * seconds_per_step + saves * save_seconds + evaluations_left * 20.0 <= seconds_left
    budget = seconds_left - evaluations_left * 20.0
    if free.max_steps < SMALL["max_steps"]:  # where the budget binds, it is filled up to MARGIN
        assert free.max_steps - step == max(0, int(0.92 * budget / seconds_per_step))


def test_the_replan_line_in_training_md_is_what_a_replan_prints_for_its_inputs():
    """The page's first plan (27 minutes, 0.6 s a step, 10 s an evaluation, 80 s of measuring, the small preset's
    schedule), planned again at its 54th step after 54 steps of 0.45 s."""
    training_md = (Path(__file__).parents[3] / "docs/training.md").read_text(encoding="utf-8")
    first = Plan(0.6, 10.0, 80.0, *fit_schedule(27 * 60 - 80, 0.6, 10.0, SMALL, 5), 2, reference=SMALL)
    progress = Progress(54, 27 * 60 - 80 - 54 * 0.45, 0.45, 10.0, 5)
    (shown,) = re.findall(r"```text\n(plan again .*?)```", training_md, re.DOTALL)
    told = describe_replan(first, replan(first, progress, evaluations=5, average=5), progress, since=0)
    assert " ".join(shown.split()) == told


# --- real runs on a machine whose speed changes ---


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("tiny"))


class Clock(TrainerCallback):
    """When training's last step ended."""

    def on_step_end(self, args, state, control, **kwargs):
        self.ended = time.monotonic()


def changing_machine(model, before: float, after: float, at: int) -> TrainerCallback:
    """A machine whose speed changes at training step `at`: each forward of `model` (and of the probe's copy of it,
    which copies the hook) waits `before` seconds until then, `after` from then on."""
    delay = [before]
    model.register_forward_pre_hook(lambda module, inputs: time.sleep(delay[0]))

    class Change(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == at:
                delay[0] = after

    return Change()


class SlowSaves(TrainerCallback):
    """A disk on which each checkpoint takes `seconds` more to save."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def on_save(self, args, state, control, **kwargs):
        time.sleep(self.seconds)


def planned_run(checkpoint, output_dir, caplog, before: float, after: float, at: int, minutes: float, saves=0.0):
    """A run of the tiny model planned for `minutes` and trained on a machine that changes speed at step `at`, each
    checkpoint `saves` seconds slower: (the first plan, the trainer after training, the clock of its steps)."""
    model = AutoModelForSeq2SeqLM.from_pretrained(checkpoint)
    clock = Clock()
    callbacks = [changing_machine(model, before, after, at), SlowSaves(saves), clock]  # before the planner's
    trainer = budgeted_trainer(
        checkpoint, output_dir, 400, model=model, callbacks=callbacks,
        max_train_minutes=minutes, max_steps=100_000, warmup_steps=400, save_steps=100_000, average_last_checkpoints=2,
    )  # fmt: skip
    # One thread: the second count the probe would time runs several times slower on a shared, busy host (2 s a step
    # against 0.1, 2026-11-27, load 12 on 2 cores), which is not what these runs measure.
    torch.set_num_threads(1)
    with caplog.at_level(logging.INFO, logger="modeling_vaswani.toolkit.training"):
        plan = plan_run(trainer)
        trainer.follow(plan)
        trainer.train()
    return plan, trainer, clock


def assert_ends_in_its_budget_with_the_last_checkpoints_averaged(plan, trainer, clock, minutes, caplog, save=0.0):
    spent = clock.ended - plan.began  # the budget's minutes begin with the measuring
    # In its last few percent, never past; a run whose checkpoints take `save` seconds keeps one's time for its last
    # (12 s with 1 s saves: 10.8-10.9 s quiet, 9.9 s under CI's load, 2026-11-30).
    assert 0.85 * 60 * minutes - save <= spent <= 60 * minutes, (spent, minutes)
    assert "max_train_minutes=" not in caplog.text, "ended by its plan, not cut by the clock"
    steps = trainer.state.global_step
    averaged = [int(path.name.split("-")[1]) for path in find_checkpoints(trainer.args.output_dir)[-2:]]
    assert averaged[-1] == steps, "the last checkpoint is the end of the run"
    assert averaged[0] >= 0.7 * steps, f"the averaged checkpoints {averaged} lie within the last 30% of {steps} steps"
    assert (Path(trainer.args.output_dir) / "averaged" / "model.safetensors").exists()


@pytest.mark.slow  # a real run of 12 s (2026-11-27)
def test_a_run_whose_machine_slows_down_takes_fewer_steps_and_ends_within_its_budget(
    checkpoint, tmp_path, caplog, restore_threads
):
    # 0.02 s a step at first: the plan is then a few hundred steps, planned again every few (on a quiet host the tiny
    # model's 110 steps/s planned 1,110, again every 27, and the slowed steps spent the budget before step 27).
    plan, trainer, clock = planned_run(checkpoint, tmp_path, caplog, before=0.02, after=0.6, at=5, minutes=0.2)
    assert trainer.state.global_step < plan.max_steps, (trainer.state.global_step, plan.max_steps)
    assert re.search(r"plan again at step \d+: [\d.]+ steps/s since step \d+, \d+ s left, so [\d,]+ -> ", caplog.text)
    assert_ends_in_its_budget_with_the_last_checkpoints_averaged(plan, trainer, clock, 0.2, caplog)


@pytest.mark.slow  # a real run of 12 s (2026-11-27)
def test_a_run_whose_machine_gets_faster_takes_more_steps_and_ends_within_its_budget(
    checkpoint, tmp_path, caplog, restore_threads
):
    plan, trainer, clock = planned_run(checkpoint, tmp_path, caplog, before=0.5, after=0.0, at=5, minutes=0.2)
    assert trainer.state.global_step > plan.max_steps, (trainer.state.global_step, plan.max_steps)
    assert_ends_in_its_budget_with_the_last_checkpoints_averaged(plan, trainer, clock, 0.2, caplog)


@pytest.mark.slow  # a real run of 12 s (2026-11-30)
def test_a_run_whose_checkpoints_are_slow_leaves_time_for_them_and_ends_within_its_budget(
    checkpoint, tmp_path, caplog, restore_threads
):
    # Checkpoints of 1 s, some eight a run, timed apart from the steps and counted ahead (replan): counted twice, or
    # planned as if their spacing did not move with the end, the run ended after 7.7 of its 12 s (2026-11-30).
    plan, trainer, clock = planned_run(
        checkpoint, tmp_path, caplog, before=0.0, after=0.0, at=0, minutes=0.2, saves=1.0
    )
    assert_ends_in_its_budget_with_the_last_checkpoints_averaged(plan, trainer, clock, 0.2, caplog, save=1.0)
