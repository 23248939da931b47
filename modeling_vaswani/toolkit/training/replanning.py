"""The time budget's plan made again as the run trains, from the speed measured since the last time.

A plan made once is a guess of the whole run's speed from its first minutes: on a shared machine that then got faster,
the main job planned 704 steps at the 0.56 steps/s its probe measured, trained at 0.73 and ended after 18.5 of its 27
minutes (issue 53). Planned again every fortieth of its steps, the run takes more steps when the machine gets faster
and fewer when it slows, and ends within the last few percent of its budget.

Section 5.3's Equation 3 needs no total step count (its rate depends on the step and the warmup alone), so the end can
move while the schedule stays what it was. The warmup is the first plan's and is never changed mid-run: a new warmup
would make the rate jump (and, where Equation 3 sets the peak, the peak too). What follows the new end: the checkpoint
spacing, so that the last checkpoints, which Section 6.1 averages, lie within the end of the run, and the evaluations'.
"""

import dataclasses
import logging
import math
import time

from transformers import ProgressCallback, TrainerCallback

from .budget import MARGIN, Plan, slowest_rank

logger = logging.getLogger(__name__)

# The plan is made again every REPLANS-th of its steps: a machine that gets 4 times slower is seen within a tenth of
# the budget; each time on more steps than a few, whose mean is a speed.
REPLANS = 40


@dataclasses.dataclass
class Progress:
    """Where the run stands when it is planned again: its step, the seconds its budget has left, and what was measured
    since the last plan: seconds a training step (its logging included, evaluations and checkpoints not), seconds an
    evaluation, and seconds a checkpoint (the last one saved; 0 before the first); and the evaluations the run still
    has to make. Checkpoints are counted apart because they are not spread like steps: the ones averaged at the end
    come close together, and the last stretch of a run holds several (issue 53's end past its budget)."""

    step: int
    seconds_left: float
    seconds_per_step: float
    evaluation_seconds: float
    evaluations_left: int
    save_seconds: float = 0.0


def checkpoints_between(step: int, end: int, save_steps: int) -> int:
    """The checkpoints a run saves after `step` up to its `end`: every `save_steps`-th step, and the end itself."""
    return end // save_steps - step // save_steps + (1 if end > step and end % save_steps else 0)


def replan(plan: Plan, progress: Progress, evaluations: int, average: int) -> Plan:
    """`plan` made again at `progress.step`: as many more steps as MARGIN of the seconds left holds after the
    evaluations and checkpoints left, at the speed measured, at most the run as set (plan.reference) and none where no
    time is left (the run ends at this step); a checkpoint every min(the run's spacing, 30% of the run / `average`)
    steps, as fit_schedule spaces them, where all the `average` checkpoints averaged at the end are still ahead, else
    the spacing the averaged ones began with; `evaluations` evaluations spread over the run, the last at its end. The
    warmup is kept. Where the run as set fits, it is the plan, with its own spacing (the user's --save_steps and
    --eval_steps, as fit_schedule keeps them)."""
    left = progress.evaluations_left  # none left costs nothing, even where none was timed (infinite seconds)
    training = progress.seconds_left - (left * progress.evaluation_seconds if left else 0.0)
    step, held = progress.step, MARGIN * training

    def fits(end: int) -> bool:  # the steps to `end` and the checkpoints they save, in the time planned
        saves = checkpoints_between(step, end, checkpoint_spacing(plan, step, end, average))
        return (end - step) * progress.seconds_per_step + saves * progress.save_seconds <= held

    # The latest end that fits, by bisection: the checkpoints' spacing, and so their count, depends on the end.
    low, high = step, min(plan.reference["max_steps"], step + max(0, int(held / progress.seconds_per_step)))
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    end = low
    if end == plan.reference["max_steps"]:  # the budget does not bind: the run as it was set, as fit_schedule
        eval_steps = plan.reference["eval_steps"]
    else:
        eval_steps = None if plan.eval_steps is None else max(1, math.ceil(end / evaluations))
    save = checkpoint_spacing(plan, step, end, average)
    return dataclasses.replace(
        plan,
        seconds_per_step=progress.seconds_per_step,
        evaluation_seconds=progress.evaluation_seconds,
        max_steps=end,
        save_steps=save,
        eval_steps=eval_steps,
    )


def checkpoint_spacing(plan: Plan, step: int, end: int, average: int) -> int:
    """Steps between checkpoints for a run planned from `step` to `end` (replan)."""
    if end == plan.reference["max_steps"]:
        save = plan.reference["save_steps"]
    else:
        save = max(1, min(plan.reference["save_steps"], int(0.3 * end / average)))
    if end - (average - 1) * save <= step:  # the averaged checkpoints have begun: their spacing is kept
        return plan.save_steps
    return save


def describe_replan(before: Plan, after: Plan, progress: Progress, since: int) -> str:
    """The one line a plan made again is told in: old -> new steps, and the speed measured."""
    told = (
        f"plan again at step {progress.step}: {1 / progress.seconds_per_step:.2f} steps/s since step {since}, "
        f"{progress.seconds_left:.0f} s left, so {before.max_steps:,} -> {after.max_steps:,} steps"
    )
    if after.max_steps == progress.step:
        return told + ": the run ends here"
    told += f", a checkpoint every {after.save_steps} steps"
    if after.eval_steps is not None:
        told += f", an evaluation every {after.eval_steps}"
    if after.warmup_steps > after.max_steps / 6:
        told += f"; Equation 3's warmup kept at {after.warmup_steps}, more than a sixth of the run"
    return told


class FollowTheMachine(TrainerCallback):
    """Makes the trainer's plan again every REPLANS-th of its planned steps (`replan`) from the speed measured since
    the last time, and moves the run's end, checkpoints and evaluations (the TrainerState's max_steps, save_steps and
    eval_steps, which the Trainer's DefaultFlowCallback reads at each step) to it. By steps, not by the clock, so that
    every rank of a distributed run plans at the same step. The trainer's own max_steps is the run as set, the most
    a plan may grow to (VaswaniTrainer.follow)."""

    def __init__(self, plan: Plan, average: int, progress: ProgressCallback | None = None):
        self.plan, self.average = plan, average
        self.progress = progress  # the Trainer's progress bar, whose total follows the plan's end
        self.evaluations = 0 if plan.eval_steps is None else plan.max_steps // plan.eval_steps

    def on_train_begin(self, args, state, control, **kwargs):
        now = self.mark = time.monotonic()
        # The budget's minutes began with the measuring; whatever ran between it and training is spent too.
        began = self.plan.began if self.plan.began is not None else now - self.plan.probe_seconds
        self.budget_ends = began + 60 * args.max_train_minutes
        self.since, self.since_time, self.aside, self.evaluated = state.global_step, now, 0.0, 0
        self.last_evaluation = self.plan.evaluation_seconds  # the probe's, until the run times one
        self.last_save = 0.0  # until the run times one
        self.follow(self.plan, state)

    def follow(self, plan: Plan, state) -> None:
        self.plan, self.interval = plan, max(1, plan.max_steps // REPLANS)
        state.max_steps, state.save_steps = plan.max_steps, plan.save_steps
        if plan.eval_steps is not None:
            state.eval_steps = plan.eval_steps
        bar = getattr(self.progress, "training_bar", None)  # made at the training's start, on the main process only
        if bar is not None:
            bar.total = plan.max_steps
            bar.refresh()

    def set_aside(self) -> float:
        """Seconds since the step's end or what followed it, counted apart from the training steps'."""
        now = time.monotonic()
        seconds, self.mark = now - self.mark, now
        self.aside += seconds
        return seconds

    def on_evaluate(self, args, state, control, **kwargs):
        # The Trainer evaluates after the step's end, then saves its checkpoint
        self.last_evaluation = self.set_aside()
        self.evaluated += 1

    def on_save(self, args, state, control, **kwargs):
        self.last_save = self.set_aside()

    def on_step_end(self, args, state, control, **kwargs):
        now = self.mark = time.monotonic()
        if control.should_training_stop or state.global_step - self.since < self.interval:  # the end, or too soon
            return control
        step_seconds = (now - self.since_time - self.aside) / (state.global_step - self.since)
        step_seconds, evaluation_seconds, save_seconds, overdue = slowest_rank(
            (step_seconds, self.last_evaluation, self.last_save, now - self.budget_ends), args.device
        )
        progress = Progress(
            state.global_step, -overdue, step_seconds, evaluation_seconds,
            max(0, self.evaluations - self.evaluated), save_seconds,
        )  # fmt: skip
        planned = replan(self.plan, progress, self.evaluations, self.average)
        moved = abs(planned.max_steps - self.plan.max_steps) >= 0.01 * self.plan.max_steps
        told = describe_replan(self.plan, planned, progress, self.since)
        logger.log(logging.WARNING if moved or planned.max_steps == state.global_step else logging.INFO, "%s", told)
        self.since, self.since_time, self.aside = state.global_step, now, 0.0
        self.follow(planned, state)
        if planned.max_steps <= state.global_step:  # no time for another step: this one is the end, and saved
            control.should_training_stop = True
            control.should_save = args.save_strategy != "no"
        return control
