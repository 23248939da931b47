"""A time budget that plans the run instead of cutting it (`--max_train_minutes`).

Cut by the clock, a run on a slow or busy machine stopped wherever the minutes ran out: 413 steps of a schedule
planned for 4,000, still warming up, averaging checkpoints from its first minutes, 11.49 sacreBLEU, and nothing said.
Planned, it measures the machine first (a few training steps and one validation batch of a throwaway copy of the
model), then fits the whole schedule into the minutes: the number of steps, Equation 3's warmup, the checkpoints to
average and the evaluations, and says what the plan means. As the run trains, the plan is made again from the
speed measured (replanning.py); the clock still stops a run that falls behind its last plan, saying so.
"""

import copy
import itertools
import json
import logging
import math
import time
from dataclasses import dataclass
from importlib import resources

import torch
from transformers import IntervalStrategy

from ..threads import choose_threads, torch_threads
from .presets import MAIN_PRESET, PRESETS

logger = logging.getLogger(__name__)

# The main job's runs measured, kept as data beside this module (docs/results.md shows the same figures): a step
# budget with no time limit, which the warning below advises, and the planned runs, by steps, whose test2016
# sacreBLEU a plan of the main job expects.
MEASURED = json.loads(resources.files(__package__).joinpath("measurements.json").read_text(encoding="utf-8"))
STEP_BUDGET = MEASURED["step_budget"]
PLANNED_RUNS = tuple(sorted((run["steps"], run["sacrebleu"]) for run in MEASURED["planned"]))
CUT_BY_THE_CLOCK = MEASURED["cut_by_the_clock"]
# Validation sacreBLEU against training steps for each size the main job may train (presets.py), in the order a tie
# goes: the sizes a budget is fitted to when --preset and --max_steps are not given (`choose_size`).
CURVES = {size: tuple(map(tuple, curve["points"])) for size, curve in MEASURED["curves"]["sizes"].items()}
# Under USABLE_STEPS the job's scores fall steeply (the run cut by the clock), so a plan below it is announced as such.
USABLE_STEPS = 1200
USABLE_BLEU = 30  # of validation sacreBLEU a chosen size's curve expects: no warning (the small preset at 1,200 steps)
PROBE_STEPS, PROBE_WARMUP = 12, 3  # training steps timed after warm-up steps, on a copy of the model
# Of the budget the measuring may take: a short budget is measured on fewer steps (one warm-up and one timed step at
# least) and without the second thread count or the evaluation, rather than spent on measuring (issue 51: 80 s of
# measuring for a budget of 30 s). A third: fewer steps measure a step less well (a short plan then ends by the clock).
PROBE_SHARE = 1 / 3
MARGIN = 0.92  # of the budget planned: a plan that filled it exactly would be cut by the first slower minute
EVALUATION_SHARE = 0.1  # of the budget the evaluations during training may take: fewer than five where they need more


def describe_expected_score(steps: int) -> str:
    """The sentence saying what a planned run of `steps` steps is expected to score, from the planned runs measured
    (PLANNED_RUNS)."""
    measured = ", ".join(f"{runs:,} steps {bleu}" for runs, bleu in PLANNED_RUNS)
    below = [bleu for runs, bleu in PLANNED_RUNS if runs <= steps]
    above = [bleu for runs, bleu in PLANNED_RUNS if runs >= steps]
    if not below:
        guess = f"below {above[0]}"
    elif not above:
        guess = f"about {below[-1]} or more"
    else:
        low, high = sorted((below[-1], above[0]))
        guess = f"between {low} and {high}" if low != high else f"about {low}"
    return f"Expected: {guess} sacreBLEU on test2016 (the job's planned runs measured: {measured})"


def expected_bleu(size: str, steps: int) -> float:
    """The validation sacreBLEU `size`'s curve (CURVES) gives after `steps` steps: linear between its points, from 0
    at step 0, and its last point's beyond it (no gain is assumed where none was measured)."""
    points = ((0, 0.0), *CURVES[size])
    if steps >= points[-1][0]:
        return points[-1][1]
    (low, low_bleu), (high, high_bleu) = next(pair for pair in itertools.pairwise(points) if pair[1][0] > steps)
    return low_bleu + (high_bleu - low_bleu) * (steps - low) / (high - low)


def choose_size(steps: dict[str, int]) -> str:
    """Of the sizes `steps` holds (each with the steps the budget gives it on this machine), the one whose curve
    expects the most sacreBLEU: a smaller network trained for more of its steps where the budget is short. A tie goes
    to the earlier size of CURVES."""
    return max(steps, key=lambda size: (expected_bleu(size, steps[size]), -list(CURVES).index(size)))


def learning_rate_scale(size: str) -> float:
    """The peak learning rate of `size` against MAIN_PRESET's, whose training settings a run choosing its size was
    given: the rate the user set, or the preset's, is scaled as the presets' are."""
    return PRESETS[size]["training"]["learning_rate"] / PRESETS[MAIN_PRESET]["training"]["learning_rate"]


@dataclass
class Plan:
    """The schedule fitted into the budget, and what it was fitted from."""

    seconds_per_step: float
    evaluation_seconds: float  # one evaluation of the validation samples
    probe_seconds: float
    max_steps: int
    warmup_steps: int
    save_steps: int
    eval_steps: int | None
    threads: int  # the thread count that trained faster: the job's process trains on it
    fitted_to_budget: bool = True  # whether the budget set the steps (else the run's max_steps fit in it)
    other_threads: tuple[int, float] | None = None  # (threads, seconds a step) of the count measured and not chosen
    main_job: bool = False  # whether the run is the one PLANNED_RUNS measured, whose scores it may then expect
    probe_steps: int = PROBE_STEPS  # the steps timed on each thread count
    # The run as set (fit_schedule's reference): the most steps a plan made again as the run trains may grow back to
    # (replanning.py); None: the plan is not made again.
    reference: dict | None = None
    began: float | None = None  # time.monotonic() when the measuring began, where the budget's minutes began
    size: str | None = None  # the preset chosen by `choose_size`; None: the run's model, no choice made
    # Each size measured (its steps in the budget, its seconds a step) where the size was chosen
    sizes: dict[str, tuple[int, float]] | None = None
    learning_rate_scale: float = 1.0  # the chosen size's peak rate against the run's preset's (presets.py)

    def applied_to(self, args):
        """A copy of the training arguments `args` with the plan's steps, warmup, checkpoints and evaluations: what
        the trainer trains by (`VaswaniTrainer.follow`), so that Equation 3's peak, the optimizer and the scheduler
        follow the warmup and steps the plan ends with; where it plans no evaluation, none (the Trainer would
        evaluate at the end of a run evaluated by steps, unplanned: 7.7 s past a 4-minute plan of the main job).
        `args` is left as given."""
        planned = copy.copy(args)
        planned.max_steps, planned.warmup_steps = self.max_steps, self.warmup_steps
        planned.learning_rate = args.learning_rate * self.learning_rate_scale
        planned.save_steps = self.save_steps
        if self.eval_steps is not None:
            planned.eval_steps = self.eval_steps
        elif not (args.early_stopping_patience or args.load_best_model_at_end):  # which need the evaluations
            planned.eval_strategy = IntervalStrategy.NO  # none planned: not the Trainer's one at the end either
        return planned

    def describe(self, minutes: float, average: int) -> str:
        if not self.fitted_to_budget:
            return (
                f"time budget {minutes:g} minutes: this machine trains {1 / self.seconds_per_step:.2f} steps/s, so "
                f"the {self.max_steps:,} steps asked for fit in it; the run as it was set"
            )
        evaluations = "no evaluation" if self.eval_steps is None else f"an evaluation every {self.eval_steps} steps"
        if self.eval_steps is None and math.isinf(self.evaluation_seconds):
            evaluations += " (the measuring used its share of the budget before it could time one)"
        elif self.eval_steps is None and self.evaluation_seconds:
            evaluations += f" (one would take {self.evaluation_seconds:.0f} s, more than a tenth of the budget)"
        threads = self.threads
        measured = f"{self.probe_steps} steps"
        if self.other_threads is not None:
            other, seconds = self.other_threads
            measured += f" on each count; {other} thread{'s' * (other > 1)}: {1 / seconds:.2f} steps/s"
        return (
            self.describe_size()
            + f"time budget {minutes:g} minutes: this machine trains {1 / self.seconds_per_step:.2f} steps/s with "
            f"{threads} thread{'s' * (threads > 1)} (measured over {measured}; {self.probe_seconds:.0f} s in all), "
            f"so the plan is {self.max_steps:,} steps, warmup {self.warmup_steps}, a checkpoint every "
            f"{self.save_steps} steps and the last {average} averaged, {evaluations}."
            + (f" {describe_expected_score(self.max_steps)}" if self.main_job and self.size in (None, "small") else "")
        )

    def describe_size(self) -> str:
        """The sentence saying which size the budget chose and why; empty where none was chosen."""
        if self.sizes is None:
            return ""
        each = "; ".join(
            f"{size} {1 / seconds:.2f} steps/s, {steps:,} steps, {expected_bleu(size, steps):.1f}"
            for size, (steps, seconds) in self.sizes.items()
        )
        return (
            f"size: {self.size}, the one expected to translate best in this budget (this machine's speed of each "
            f"and the validation sacreBLEU its curve on Multi30k expects after the steps that fit: {each}; "
            f"docs/training.md). "
        )

    def shortfall(self) -> str | None:
        """The warning for a plan the budget cut too short to give a usable model, with what to do; None when it is
        not (a run asked for few steps, --max_steps, is no shortfall)."""
        if self.max_steps >= USABLE_STEPS or not self.fitted_to_budget:
            return None
        if self.size is not None and expected_bleu(self.size, self.max_steps) >= USABLE_BLEU:
            return None  # a smaller size was chosen for the budget, and its curve expects a usable model
        needed = math.ceil(USABLE_STEPS * self.seconds_per_step / 60 * 1.1)
        cut, steps = CUT_BY_THE_CLOCK, STEP_BUDGET["steps"]
        return (
            f"the time budget is too short for a usable model at this machine's {1 / self.seconds_per_step:.2f} "
            f"steps/s: {self.max_steps:,} steps are planned, and runs of the main job of fewer than "
            f"{USABLE_STEPS:,} steps scored far below the {STEP_BUDGET['sacrebleu']} of its {steps:,}-step run "
            f"({cut['steps']} steps: {cut['sacrebleu']}). Give it more time (--max_train_minutes {needed} or more), "
            f"or train a fixed number of steps whatever the time (--max_steps {steps} --max_train_minutes 0)"
        )


def fit_schedule(
    budget_seconds: float, seconds_per_step: float, evaluation_seconds: float, reference: dict, average: int
) -> tuple[int, int, int, int | None]:
    """(max_steps, warmup_steps, save_steps, eval_steps) that fit `budget_seconds`: the reference as it is where its
    max_steps fit; else as many steps as MARGIN of the time the evaluations leave allows, with the reference's
    spacing kept where it fits and shortened where it does not: a warmup of at most a sixth of the run, so that
    Equation 3 reaches its peak and decays; the averaged checkpoints within the last 30% of the run; five
    evaluations; and max_steps a multiple of save_steps, so that the last checkpoint is the end of the run."""
    evaluations = 0 if reference["eval_steps"] is None else 5
    if evaluations and evaluation_seconds > 0:  # a slow machine trains rather than evaluates
        evaluations = min(evaluations, int(EVALUATION_SHARE * budget_seconds / evaluation_seconds))
    evaluating = evaluations * evaluation_seconds if evaluations else 0.0  # none costs nothing, even untimed (inf)
    steps = int(MARGIN * (budget_seconds - evaluating) / seconds_per_step)
    if steps >= reference["max_steps"]:  # the budget does not bind: the run as it was set
        return reference["max_steps"], reference["warmup_steps"], reference["save_steps"], reference["eval_steps"]
    steps = max(1, steps)
    warmup = max(1, min(reference["warmup_steps"], steps // 6))
    save = max(1, min(reference["save_steps"], int(0.3 * steps / average)))
    steps = max(save, steps - steps % save)
    eval_steps = None if not evaluations else max(1, min(reference["eval_steps"], steps // evaluations))
    return steps, warmup, save, eval_steps


def cycled(dataloader):
    """The batches of `dataloader()` over and over: a small corpus may hold fewer batches than the probe takes."""
    while True:
        empty = True
        for batch in dataloader():
            empty = False
            yield batch
        if empty:
            raise ValueError("the training data holds no batch; expected training examples")


@dataclass
class Measured:
    """What `measure_machine` found: the thread count that trained faster, seconds a training step on it, seconds an
    evaluation (infinite where there was no time left to time one), seconds the measuring took, the thread count not
    chosen and its seconds a step, and the steps timed on each count."""

    threads: int
    step_seconds: float
    evaluation_seconds: float
    probe_seconds: float
    other_threads: tuple[int, float] | None
    probe_steps: int


def measure_machine(trainer, validation_batches: int, limit_seconds: float = math.inf, model=None) -> Measured:
    """PROBE_STEPS steps of a copy of the model on the run's own batches (after PROBE_WARMUP untimed ones) on each
    thread count `choose_threads` tries, and one validation batch translated as the evaluation does, on the faster
    count, times `validation_batches`; within `limit_seconds`, each thread count in its half: past it, no
    further step is taken once one warm-up and one timed step are done, and past the whole of it neither the second
    thread count nor the evaluation is tried. The run's model, optimizer and data order are untouched."""
    started = time.monotonic()
    used = lambda: time.monotonic() - started  # noqa: E731
    device = trainer.args.device
    # Under FSDP the Trainer leaves its model on the CPU until training starts: the copy goes where the steps run.
    model = copy.deepcopy(trainer.model if model is None else model).to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    batches = cycled(trainer.get_train_dataloader)
    counts = 2 if device.type == "cpu" and torch.get_num_threads() > 1 else 1
    timed = []

    def seconds_per_step() -> float:
        limit = limit_seconds * (len(timed) + 1) / counts  # each thread count its part of the measuring's share
        timings = []
        while len(timings) < PROBE_WARMUP + PROBE_STEPS and (len(timings) < 2 or used() < limit):
            batch = {key: value.to(device) for key, value in next(batches).items()}
            step_started = time.monotonic()
            model(**batch).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            timings.append(time.monotonic() - step_started)
        kept = sorted(timings[min(PROBE_WARMUP, len(timings) - 1) :])
        timed.append(len(kept))
        return kept[len(kept) // 2]  # the median: robust to one slow step

    has_time = lambda: used() < limit_seconds  # noqa: E731
    if device.type == "cpu":
        threads, step_seconds, other = choose_threads(seconds_per_step, has_time)
    else:  # the threads feed an accelerator here, and their count is not what makes a step slow
        threads, step_seconds, other = torch.get_num_threads(), seconds_per_step(), None
    evaluation_seconds = 0.0
    if trainer.eval_dataset is not None and validation_batches:
        evaluation_seconds = math.inf  # unless there is time left to time one
        if has_time():
            with torch_threads(threads):
                evaluation_seconds = time_evaluation(trainer, model, device) * validation_batches
    return Measured(threads, step_seconds, evaluation_seconds, time.monotonic() - started, other, min(timed))


def time_evaluation(trainer, model, device) -> float:
    """Seconds one validation batch takes to translate, as the evaluation does."""
    model.eval()
    batch = next(iter(trainer.get_eval_dataloader()))
    inputs = {key: batch[key].to(device) for key in ("input_ids", "attention_mask")}
    limit = int(batch["labels"].shape[1] * 1.5)  # about a trained model's length, not an untrained one's + 50
    generation_started = time.monotonic()
    with torch.no_grad():
        model.generate(**inputs, paper_decoding=trainer.args.paper_decoding, max_new_tokens=limit)
    return time.monotonic() - generation_started


def slowest_rank(timings: tuple[float, ...], device) -> list[float]:
    """`timings` (seconds) as the slowest rank measured them, each the largest over the ranks where training is
    distributed, so that every rank follows one plan."""
    measured = torch.tensor(timings, dtype=torch.float64, device=device)  # NCCL reduces only CUDA tensors
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.all_reduce(measured, op=torch.distributed.ReduceOp.MAX)
    return measured.tolist()


def plan_run(trainer, main_job: bool = False, sizes: dict | None = None) -> Plan:
    """Measures the machine with `trainer` (its model copied, its batches) within PROBE_SHARE of the budget and fits
    the schedule into it, logging the plan; warns loudly when the plan is too short for a usable model, and refuses
    (ValueError) a budget the measuring leaves no training step of. The run's own settings (the preset's, or the flags
    given) are the reference the plan scales down. Nothing of `trainer` or its arguments is changed: the plan is an
    input of the optimizer and the schedule (`VaswaniTrainer.follow`), and its thread count of the process.
    `main_job`: the run is the one PLANNED_RUNS measured (recipe.is_main_job), and the plan says what it is expected
    to score. `sizes`: the models (by preset name, each of CURVES) the budget may choose between (`choose_size`),
    each measured in its part of the measuring's share; the plan is made for the one chosen (Plan.size)."""
    began, args = time.monotonic(), trainer.args
    eval_batch = args.per_device_eval_batch_size * max(1, args.world_size)
    samples = len(trainer.eval_dataset) if trainer.eval_dataset is not None else 0
    validation_batches = math.ceil(samples / eval_batch) if args.eval_strategy != "no" else 0
    models = sizes or {None: trainer.model}
    share = PROBE_SHARE * 60 * args.max_train_minutes / len(models)
    probes = {size: measure_machine(trainer, validation_batches, share, model) for size, model in models.items()}
    timings = [(p.step_seconds, p.evaluation_seconds) for p in probes.values()]
    measured = slowest_rank((*(t for pair in timings for t in pair), time.monotonic() - began), args.device)
    seconds = {size: tuple(measured[2 * i : 2 * i + 2]) for i, size in enumerate(models)}
    probe_seconds = measured[-1]
    budget = 60 * args.max_train_minutes - probe_seconds
    reference = {
        "max_steps": args.max_steps if args.max_steps > 0 else STEP_BUDGET["steps"],
        "warmup_steps": int(args.warmup_steps),
        "save_steps": int(args.save_steps),
        "eval_steps": int(args.eval_steps or args.logging_steps) if validation_batches else None,
    }
    average = args.average_last_checkpoints or 1
    fits = {size: fit_schedule(max(budget, 0), *seconds[size], reference, average) for size in models}
    size = choose_size({size: fit[0] for size, fit in fits.items()}) if sizes else None
    probe, (seconds_per_step, evaluation_seconds) = probes[size], seconds[size]
    if budget < seconds_per_step:
        raise ValueError(
            f"--max_train_minutes {args.max_train_minutes:g} leaves no time to train: measuring this machine took "
            f"{probe_seconds:.0f} s ({probe.probe_steps} steps of {seconds_per_step:.2f} s); expected a budget of "
            f"more than {(probe_seconds + seconds_per_step) / 60:.2f} minutes (about "
            f"{math.ceil(USABLE_STEPS * seconds_per_step / 60 * 1.1)} for a usable model), or --max_steps N "
            "--max_train_minutes 0"
        )
    steps, warmup, save, eval_steps = fits[size]
    fitted = steps < reference["max_steps"]
    plan = Plan(
        seconds_per_step, evaluation_seconds, probe_seconds, steps, warmup, save, eval_steps, probe.threads, fitted,
        probe.other_threads, main_job, probe.probe_steps, reference, began, size,
        {each: (fits[each][0], seconds[each][0]) for each in models} if sizes else None,
        learning_rate_scale(size) if sizes else 1.0,
    )  # fmt: skip
    logger.warning("plan: %s", plan.describe(args.max_train_minutes, average))
    if plan.shortfall():
        logger.warning("\n%s\nWARNING: %s\n%s", "!" * 80, plan.shortfall(), "!" * 80)
    return plan
