"""Section 5 of the paper on transformers' Seq2SeqTrainer: the recipe as defaults, token-budget batches, averaging.

What the Trainer already does is used as it is (Adam, label smoothing, gradient accumulation, checkpoints, resume,
logging); written here by hand is only what it lacks: the exact lrate formula of Section 5.3 (the Trainer's
"inverse_sqrt" evaluates it one step late: its first update gets learning rate 0), batches by token budget
(Section 5.1), checkpoint averaging at the end of training (Section 6.1), and checkpoints written atomically (the
Trainer writes checkpoint-N in place, so a kill while saving leaves a folder that resuming would take as complete).
"""

import copy
import inspect
import logging
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import torch
import transformers
from torch.utils.data import DataLoader
from transformers import (
    DataCollatorForSeq2Seq,
    EarlyStoppingCallback,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    TrainerCallback,
)
from transformers.trainer_callback import ProgressCallback
from transformers.trainer_utils import HubStrategy, IntervalStrategy, SaveStrategy, rotate_checkpoints
from transformers.utils import SAFE_WEIGHTS_NAME

from ..checkpoints import find_checkpoints
from ..data.batching import TokenBudgetBatchSampler
from ..outputs import writing_into, writing_natively
from ..runtime import apply_process_settings
from . import step
from .averaging import average_checkpoints
from .replanning import FollowTheMachine
from .step import bf16_autocast, compile_pays, smoothed_cross_entropy, training_attention

logger = logging.getLogger(__name__)

# The Trainer's private methods VaswaniTrainer overrides, where transformers offers no public hook, with the parameters
# they have in transformers 5.23. An override of a method that was renamed or changed would be skipped or called
# wrongly without a word, so each is checked when a VaswaniTrainer is built (check_private_hooks).
PRIVATE_HOOKS = {
    # Where _save_checkpoint writes checkpoint-N: the one way to stage it under another name (atomic checkpoints).
    "_get_output_dir": ("self", "trial"),
    # The one place that both knows a checkpoint is being written and runs after its last file is written.
    "_save_checkpoint": ("self", "model", "trial"),
    # The one place that loads a resumed run's weights into the FSDP-prepared model (accelerate's loader fails).
    "_load_from_checkpoint": ("self", "resume_from_checkpoint", "model"),
}


def check_private_hooks(trainer_class: type = Seq2SeqTrainer) -> None:
    """Raises RuntimeError naming the member if a private method in PRIVATE_HOOKS is gone from `trainer_class` or
    has other parameters than VaswaniTrainer's override expects."""
    for name, expected in PRIVATE_HOOKS.items():
        member = getattr(trainer_class, name, None)
        found = tuple(inspect.signature(member).parameters) if callable(member) else None
        if found != expected:
            raise RuntimeError(
                f"transformers {transformers.__version__}: {trainer_class.__name__}.{name} has parameters {found} "
                f"(None: it is gone); VaswaniTrainer overrides it expecting {expected}, for want of a public hook. "
                "Adapt modeling_vaswani/toolkit/training/trainer.py to this transformers, or install one it supports"
            )


def paper_learning_rate(step: int, d_model: int, warmup_steps: int) -> float:
    """Equation 3: lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5), steps counted from 1."""
    return d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


@dataclass
class VaswaniTrainingArguments(Seq2SeqTrainingArguments):
    """Seq2SeqTrainingArguments with the paper's recipe as defaults (Sections 5.3, 5.4), plus three options."""

    adam_beta1: float = field(default=0.9, metadata={"help": "Adam beta1 (Section 5.3: 0.9)"})
    adam_beta2: float = field(default=0.98, metadata={"help": "Adam beta2 (Section 5.3: 0.98)"})
    adam_epsilon: float = field(default=1e-9, metadata={"help": "Adam epsilon (Section 5.3: 1e-9)"})
    weight_decay: float = field(default=0.0, metadata={"help": "no weight decay in the paper"})
    max_grad_norm: float = field(default=0.0, metadata={"help": "gradient clipping; the paper clips nothing (0)"})
    warmup_steps: float = field(default=4000, metadata={"help": "warmup_steps of Equation 3 (Section 5.3: 4000)"})
    label_smoothing_factor: float = field(default=0.1, metadata={"help": "epsilon_ls (Section 5.4: 0.1)"})
    learning_rate: float = field(
        default=0.0,
        metadata={
            "help": "peak learning rate, reached at the end of warmup; 0 (default) takes Equation 3's "
            "d_model^-0.5 * warmup_steps^-0.5"
        },
    )
    paper_schedule: bool = field(
        default=True,
        metadata={"help": "Equation 3's schedule; --no_paper_schedule gives --lr_scheduler_type back"},
    )
    max_tokens: int | None = field(
        default=None,
        metadata={
            "help": "batch by token budget (Section 5.1): at most this many padded source and target tokens per "
            "batch on each device (the paper: about 25000 per step over 8 GPUs); replaces per_device_train_batch_size"
        },
    )
    average_last_checkpoints: int = field(
        default=0,
        metadata={
            "help": "at the end of training, average the last N checkpoints into OUTPUT_DIR/averaged "
            "(Section 6.1: 5 for base, 20 for big); 0 turns it off"
        },
    )
    report_to: None | str | list[str] = field(
        default="tensorboard", metadata={"help": "where to log: loss, learning rate and BLEU go to TensorBoard"}
    )
    max_train_minutes: float | None = field(
        default=None,
        metadata={
            "help": "the time budget: the machine is measured, then the schedule (max_steps, Equation 3's warmup, "
            "the checkpoints averaged, the evaluations) fitted into this many minutes (--plan_time_budget); the "
            "clock stops a run that falls behind its plan, saving a checkpoint; 0 sets no time limit"
        },
    )
    plan_time_budget: bool = field(
        default=True,
        metadata={
            "help": "fit the schedule (steps, warmup, checkpoints, evaluations) into --max_train_minutes after "
            "measuring the machine (training/budget.py); false: the clock alone stops training where the minutes end, "
            "as a stock Trainer given the same time is stopped (for comparisons in equal time)"
        },
    )
    early_stopping_patience: int | None = field(
        default=None,
        metadata={
            "help": "stop after this many evaluations without a better --metric_for_best_model (default: validation "
            "sacreBLEU), and keep the best checkpoint as OUTPUT_DIR/best beside the averaged model; both are scored "
            "at the end"
        },
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "start afresh in an output_dir that holds checkpoint-N folders of an earlier run, deleting them "
            "(without it such a run is refused, so that averaging never takes an earlier run's checkpoints)"
        },
    )
    predict_with_generate: bool = field(
        default=True, metadata={"help": "evaluate by translating (BLEU), not by the loss alone"}
    )
    push_to_hub: bool = field(
        default=False,
        metadata={
            "help": "vaswani-train: push the final model (the folder it prints as model:) at the end, as vaswani-push "
            "does, to --hub_model_id (default: output_dir's name under the logged-in account)"
        },
    )
    hub_strategy: HubStrategy | str = field(
        default="end", metadata={"help": "end: the one push of the final model (no other value is taken)"}
    )
    paper_decoding: bool = field(
        default=True,
        metadata={"help": "evaluate with Section 6.1's beam search (beam 4, GNMT length penalty, input + 50)"},
    )
    torch_compile: bool | None = field(
        default=None,
        metadata={
            "help": "train through torch.compile: true always (transformers' compile of the model), false never; "
            "unset (the default), on CUDA where the run's steps repay the compilation (docs/gpu.md)",
            "nargs": "?",  # a bare --torch_compile is true, as transformers' flag is
            "const": True,
        },
    )

    def __post_init__(self):
        if self.early_stopping_patience is not None and self.metric_for_best_model is None:
            self.metric_for_best_model = "sacrebleu"  # before the Trainer's own checks: it sets greater_is_better
        launched = int(os.environ.get("WORLD_SIZE", "1"))  # torchrun's and accelerate launch's process count
        if launched > 1 and not torch.cuda.is_available():
            # The Trainer runs CPU processes as one run (gloo) only under use_cpu; without it each would train alone
            # on all the data and write the same output folder, told by one warning of transformers'.
            self.use_cpu = True
        super().__post_init__()
        if launched > 1 and self.world_size != launched:
            raise ValueError(
                f"launched as {launched} processes (WORLD_SIZE={launched}), but the Trainer would train on "
                f"{self.world_size} (parallel_mode {self.parallel_mode.value}): each process would train alone and "
                "write the same output folder; expected a launch the Trainer runs as one (docs/training.md)"
            )
        if self.early_stopping_patience is not None:
            if self.early_stopping_patience < 1:
                raise ValueError(f"early_stopping_patience must be >= 1, got {self.early_stopping_patience}")
            if self.eval_strategy == IntervalStrategy.NO or self.save_strategy == "no":
                raise ValueError(
                    f"early_stopping_patience={self.early_stopping_patience} stops on evaluations and keeps the best "
                    f"checkpoint, but eval_strategy is {self.eval_strategy.value!r} and save_strategy "
                    f"{SaveStrategy(self.save_strategy).value!r}: evaluate and save (--eval_strategy steps "
                    "--eval_steps N, --save_steps M)"
                )
        if self.average_last_checkpoints < 0:
            raise ValueError(f"average_last_checkpoints must be >= 0, got {self.average_last_checkpoints}")
        if self.average_last_checkpoints and self.save_strategy == "no":
            raise ValueError(
                f"average_last_checkpoints={self.average_last_checkpoints} needs checkpoints, but save_strategy is "
                "'no': save checkpoints (--save_steps N) or pass --average_last_checkpoints 0"
            )
        if self.average_last_checkpoints and self.save_total_limit is not None:
            if self.save_total_limit < self.average_last_checkpoints:
                raise ValueError(
                    f"save_total_limit ({self.save_total_limit}) keeps fewer checkpoints than "
                    f"average_last_checkpoints ({self.average_last_checkpoints}) needs"
                )
        if self.max_train_minutes is not None and self.max_train_minutes < 0:
            raise ValueError(f"max_train_minutes must be >= 0 (0: no time limit), got {self.max_train_minutes}")
        if self.dataloader_pin_memory and not torch.cuda.is_available():
            self.dataloader_pin_memory = False  # pinning needs a GPU; torch warns of it on every run without one
        if self.max_tokens is not None and self.max_tokens <= 0:
            raise ValueError(f"max_tokens must be positive, got {self.max_tokens}")
        if self.hub_strategy != HubStrategy.END:
            raise ValueError(
                f"--hub_strategy {self.hub_strategy.value}: pushes while training are not made here; "
                "vaswani-train --push_to_hub (or vaswani-push) pushes the final model once, at the end: "
                "expected --hub_strategy end"
            )


class AverageCheckpointsCallback(TrainerCallback):
    """Section 6.1: at the end of training, the last N checkpoints averaged into one model, OUTPUT_DIR/averaged."""

    def on_train_end(self, args, state, control, **kwargs):
        if args.average_last_checkpoints and state.is_world_process_zero:
            checkpoints = find_checkpoints(args.output_dir)[-args.average_last_checkpoints :]
            if not checkpoints:
                raise ValueError(f"no checkpoint-N folders in {args.output_dir} to average")
            if len(checkpoints) < args.average_last_checkpoints:
                logger.warning(
                    "averaging the %d checkpoints there are, not the %d asked for",
                    len(checkpoints),
                    args.average_last_checkpoints,
                )
            average_checkpoints(checkpoints, Path(args.output_dir) / "averaged")
            logger.info("averaged %s into %s", [c.name for c in checkpoints], Path(args.output_dir) / "averaged")


class SaveBestCallback(TrainerCallback):
    """Saves a checkpoint at each evaluation that improves on --metric_for_best_model, so that the best model is
    kept wherever the regular checkpoints fall (the Trainer then names it state.best_model_checkpoint and its
    rotation spares it); early stopping itself is transformers' EarlyStoppingCallback."""

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        name = args.metric_for_best_model
        value = (metrics or {}).get(name if name.startswith("eval_") else f"eval_{name}")
        if value is None:
            return control
        best = state.best_metric  # before this evaluation: the Trainer updates it after the callbacks
        if best is None or (value > best if args.greater_is_better else value < best):
            control.should_save = True
        return control


class TimeBudgetCallback(TrainerCallback):
    """Ends training after `max_train_minutes` of wall time and saves a checkpoint there (the Trainer has only
    step and epoch limits), so that a run fits a time budget on machines of any speed."""

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        if time.monotonic() - self.start >= 60 * args.max_train_minutes:
            logger.warning(
                "max_train_minutes=%s reached at step %d of the %d planned: the machine ran slower than when the "
                "run was planned (other work beside it?)",
                args.max_train_minutes,
                state.global_step,
                state.max_steps,
            )
            control.should_training_stop = True
            control.should_save = args.save_strategy != "no"
        return control


def with_equation_3_peak(args: VaswaniTrainingArguments, d_model: int) -> VaswaniTrainingArguments:
    """`args`, or where they ask for Equation 3's peak (--learning_rate 0 with the paper's schedule) a copy holding it:
    d_model^-0.5 * warmup_steps^-0.5, the rate at step = warmup_steps. The caller's arguments stay as given, reusable
    for another model or plan."""
    if not (args.paper_schedule and args.learning_rate == 0):
        return args
    peaked = copy.copy(args)
    peaked.learning_rate = paper_learning_rate(int(args.warmup_steps), d_model, args.warmup_steps)
    return peaked


class VaswaniTrainer(Seq2SeqTrainer):
    """Seq2SeqTrainer with Equation 3's schedule, token-budget batches and the paper's decoding for evaluation."""

    def __init__(self, model=None, args: VaswaniTrainingArguments = None, data_collator=None, **kwargs):
        if args.push_to_hub:
            raise ValueError(
                "push_to_hub: the Trainer's push uploads output_dir as it lies (logs, checkpoints, any file there); "
                "expected the final model pushed by vaswani-train --push_to_hub or vaswani-push (hub/push.py)"
            )
        check_private_hooks()
        apply_process_settings()  # for this process only; toolkit/runtime.py says why
        given, args = args, with_equation_3_peak(args, model.config.d_model)
        if args.learning_rate <= 0:
            raise ValueError(f"learning_rate must be positive, got {args.learning_rate}")
        if data_collator is None and kwargs.get("processing_class") is not None:
            # Builds decoder_input_ids from the labels: the Trainer pops labels before forward when smoothing.
            data_collator = DataCollatorForSeq2Seq(kwargs["processing_class"], model=model)
        if kwargs.get("compute_loss_func") is None and args.label_smoothing_factor:
            # Section 5.4's loss in one fused call, the LabelSmoother's value (training/step.py)
            kwargs["compute_loss_func"] = partial(smoothed_loss, epsilon=args.label_smoothing_factor)
        callbacks = list(kwargs.pop("callbacks", None) or [])
        if args.max_train_minutes:  # None or 0: no time limit
            callbacks.append(TimeBudgetCallback())
        if args.average_last_checkpoints:
            callbacks.append(AverageCheckpointsCallback())
        if args.early_stopping_patience is not None:
            callbacks += [SaveBestCallback(), EarlyStoppingCallback(args.early_stopping_patience)]
        super().__init__(model=model, args=args, data_collator=data_collator, callbacks=callbacks, **kwargs)
        self._equation_3_scheduler = None
        self._args_given = given
        self.bf16_autocast = False  # step.bf16_autocast around each loss where set (benchmarks/training_step.py)
        self._compiled = None  # (the model trained, its compiled forward or itself), chosen at the first step

    def follow(self, plan) -> None:
        """Trains by the time budget's `plan` (budget.plan_run): the arguments given with the plan's steps, warmup,
        checkpoints and evaluations (`Plan.applied_to`), Equation 3's peak from the planned warmup. Only before
        train() builds the optimizer and the schedule, which take the plan as their input; the one Trainer is kept
        (with its accelerator, which DeepSpeed lets a process build once). Under Equation 3, the plan is made again
        as the run trains (replanning.FollowTheMachine); a schedule that needs the total (--no_paper_schedule) keeps
        the first plan."""
        if self.optimizer is not None or self.lr_scheduler is not None:
            raise RuntimeError("a plan must be followed before train() builds the optimizer and the schedule")
        self.args = with_equation_3_peak(plan.applied_to(self._args_given), self.model.config.d_model)
        if plan.reference is not None and self.args.paper_schedule:  # Equation 3 needs no total: the end may move
            self.args.max_steps = plan.reference["max_steps"]  # the most it may move to; the plan's end is the state's
            bar = self.pop_callback(ProgressCallback)  # after the planner, so that its total is the planned end
            self.add_callback(FollowTheMachine(plan, self.args.average_last_checkpoints or 1, bar))
            if bar is not None:
                self.add_callback(bar)

    def train(self, *args, **kwargs):
        # Each run starts Equation 3 afresh (a resumed one then loads its scheduler's state), as the Trainer does with
        # the schedulers it makes; one given to the constructor (optimizers=...) is kept.
        if self.lr_scheduler is self._equation_3_scheduler:
            self.lr_scheduler = None
        return super().train(*args, **kwargs)

    def training_step(self, model, inputs, num_items_in_batch=None):
        # Identical to the Trainer's step, except that the forward is compiled where the steps left repay it.
        return super().training_step(self.compiled_for_training(model), inputs, num_items_in_batch)

    def compiled_for_training(self, model: torch.nn.Module) -> torch.nn.Module:
        """`model` through torch.compile (step.COMPILE_BACKEND) where --torch_compile is unset and the run's steps
        left repay it on its device (step.compile_pays), else `model`; chosen once, at the run's first step, when the
        Trainer knows the steps. The compiled module shares the model's parameters: checkpoints, evaluation and
        generation use the model as it is."""
        if self._compiled is None or self._compiled[0] is not model:
            steps = self.state.max_steps - self.state.global_step
            chosen = (
                self.args.torch_compile is None
                and not (self.is_deepspeed_enabled or self.is_fsdp_enabled)  # their engines compile by their own rules
                and compile_pays(self.args.device, steps)
            )
            if chosen:
                logger.warning(
                    "torch.compile: %d steps to train on %s, at least the %d that repay its compilation "
                    "(docs/gpu.md): compiling the training forward (--torch_compile false trains eager)",
                    steps,
                    self.args.device,
                    step.COMPILE_PAYS_AFTER_STEPS,
                )
            self._compiled = (model, torch.compile(model, backend=step.COMPILE_BACKEND) if chosen else model)
        return self._compiled[1]

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        if not self.args.paper_schedule:
            return super().create_scheduler(num_training_steps, optimizer)
        if self.lr_scheduler is None:
            warmup = self.args.warmup_steps

            def equation_3(update: int) -> float:
                # LambdaLR counts updates from 0; the paper's steps from 1. Relative to the peak learning rate.
                step = update + 1
                return min(step / warmup, math.sqrt(warmup / step))

            self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer or self.optimizer, equation_3)
            self._equation_3_scheduler = self.lr_scheduler
        return self.lr_scheduler

    def compute_loss_context_manager(self):
        # Around every forward the Trainer computes a loss with (training and evaluation): the autocast below, and on
        # CUDA the attention kernels that need no plan per batch shape (step.training_attention).
        stack = super().compute_loss_context_manager()
        stack.enter_context(training_attention(self.args.device))
        return stack

    def autocast_smart_context_manager(self, cache_enabled: bool | None = True):
        # The Trainer's own autocast is accelerate's, set by --bf16 when the accelerator is built; the probe's choice
        # comes after that, from steps measured on the run's own model and batches.
        if self.bf16_autocast:
            return bf16_autocast()
        return super().autocast_smart_context_manager(cache_enabled)

    def get_train_dataloader(self) -> DataLoader:
        if self.args.max_tokens is None:
            return super().get_train_dataloader()
        dataset = self.train_dataset
        if self.args.remove_unused_columns:
            # What the Trainer keeps of a dataset: the columns the model's forward takes, and the label columns.
            taken = {*inspect.signature(self.accelerator.unwrap_model(self.model).forward).parameters}
            taken |= {"label", "label_ids", *self.label_names}
            dataset = dataset.select_columns([name for name in dataset.column_names if name in taken])
        sampler = TokenBudgetBatchSampler.from_dataset(
            dataset,
            self.args.max_tokens,
            seed=self.args.data_seed if self.args.data_seed is not None else self.args.seed,
            num_replicas=self.args.world_size,
            rank=self.args.process_index,
        )
        loader = DataLoader(
            dataset,
            batch_sampler=sampler,
            collate_fn=self.data_collator,
            num_workers=self.args.dataloader_num_workers,
            pin_memory=self.args.dataloader_pin_memory,
        )
        prepared = self.accelerator.prepare(loader)
        # The sampler already gives each rank its own batches, the same number on every rank; accelerate's
        # BatchSamplerShard would shard them again, so it is made a pass-through (as the Trainer does for its
        # own rank-aware BatchRebalanceSampler).
        shard = getattr(prepared, "batch_sampler", None)
        if shard is not None and getattr(shard, "batch_sampler", None) is sampler:
            shard.num_processes, shard.process_index = 1, 0
        return prepared

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval", **gen_kwargs):
        gen_kwargs.setdefault("paper_decoding", self.args.paper_decoding)
        return super().evaluate(
            eval_dataset, ignore_keys=ignore_keys, metric_key_prefix=metric_key_prefix, **gen_kwargs
        )

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None, **gen_kwargs):
        # Seq2SeqTrainer.prediction_step writes every generate() default into model.generation_config (max_length 20
        # and 30 more), which every later checkpoint would carry and every generate() then warns about: keep ours.
        # generate() runs outside compute_loss_context_manager, yet under --bf16 accelerate's autocast wraps forward:
        # on CUDA its steps, a new key length each, are kept out of cuDNN's attention too (step.training_attention).
        kept = copy.deepcopy(self.model.generation_config)
        try:
            with training_attention(self.args.device):
                return super().prediction_step(
                    model, inputs, prediction_loss_only, ignore_keys=ignore_keys, **gen_kwargs
                )
        finally:
            self.model.generation_config = kept

    def predict(self, test_dataset, ignore_keys=None, metric_key_prefix: str = "test", **gen_kwargs):
        gen_kwargs.setdefault("paper_decoding", self.args.paper_decoding)
        return super().predict(
            test_dataset, ignore_keys=ignore_keys, metric_key_prefix=metric_key_prefix, **gen_kwargs
        )

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model=None):  # PRIVATE_HOOKS says why
        if self.is_fsdp_enabled and self.accelerator.is_fsdp2:
            return load_full_weights_into_fsdp2(model or self.model, resume_from_checkpoint)
        return super()._load_from_checkpoint(resume_from_checkpoint, model)

    def _get_output_dir(self, trial):  # PRIVATE_HOOKS says why
        return getattr(self, "_staging_dir", None) or super()._get_output_dir(trial)

    def _save_checkpoint(self, model, trial):  # PRIVATE_HOOKS says why
        """Writes checkpoint-N under OUTPUT_DIR/.tmp-checkpoint-N and renames it into place once complete."""
        run_dir = Path(super()._get_output_dir(trial))
        name = f"checkpoint-{self.state.global_step}"
        staging = run_dir / f".tmp-{name}"
        if self.args.should_save:  # left by a run killed while saving, before or after its rename
            for stale in run_dir.glob(".tmp-checkpoint-*"):
                shutil.rmtree(stale)
        self.accelerator.wait_for_everyone()
        self._staging_dir = str(staging)
        try:  # a full disk names the file of checkpoint-N it was writing, never the staging folder
            with writing_into(run_dir / name, staging / name), writing_natively(staging / name, SAFE_WEIGHTS_NAME):
                super()._save_checkpoint(model, trial)
        finally:
            self._staging_dir = None
        self.accelerator.wait_for_everyone()  # every rank has written its part (RNG states, sharded optimizers)
        renamed_best = self.state.best_model_checkpoint == str(staging / name)  # the Trainer names where it wrote
        if renamed_best:  # else --load_best_model_at_end would look for it there, and rotation would not spare it
            self.state.best_model_checkpoint = str(run_dir / name)
        if self.args.should_save:
            if not (staging / name / "trainer_state.json").is_file():  # the Trainer's last file of a checkpoint
                raise RuntimeError(
                    f"transformers {transformers.__version__} wrote no {staging / name / 'trainer_state.json'}: its "
                    "Trainer._save_checkpoint no longer writes where _get_output_dir says, which VaswaniTrainer "
                    "relies on to write checkpoints atomically; adapt modeling_vaswani/toolkit/training/trainer.py"
                )
            if renamed_best:
                self.state.save_to_json(str(staging / name / "trainer_state.json"))
            final = run_dir / name
            if final.exists():
                shutil.rmtree(final)
            os.replace(staging / name, final)
            shutil.rmtree(staging)
            rotate_checkpoints(str(run_dir), self.args.save_total_limit, self.state.best_model_checkpoint)
        self.accelerator.wait_for_everyone()


def smoothed_loss(outputs, labels, num_items_in_batch=None, *, epsilon: float):
    """The Trainer's compute_loss_func: Section 5.4's label-smoothed cross-entropy of the model's logits."""
    return smoothed_cross_entropy(outputs.logits, labels, epsilon, num_items_in_batch)


def load_full_weights_into_fsdp2(model: torch.nn.Module, checkpoint: str) -> None:
    """Loads a FULL_STATE_DICT checkpoint's model.safetensors into an FSDP2-sharded model, rank 0 reading and
    broadcasting. Written by hand because accelerate's load_fsdp_model fails on tied weights with torch 2.13:
    set_model_state_dict walks a module shared under several names (the stacks' embed_tokens and the LM head are
    model.shared) under its first name only, so the full state dict's other names raise KeyError while
    broadcasting, and without them its strict load_state_dict reports them missing. Here the other names are left
    out and the load is not strict; instead, every name it reports missing must be a tied alias."""
    from safetensors.torch import load_file
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    own_names = {name for name, _ in model.named_parameters()} | {name for name, _ in model.named_buffers()}
    state_dict = {}
    if torch.distributed.get_rank() == 0:
        weights = Path(checkpoint) / "model.safetensors"
        state_dict = {name: tensor for name, tensor in load_file(weights).items() if name in own_names}
        if missing := own_names - state_dict.keys() - non_persistent_buffers(model):
            raise ValueError(f"{weights} lacks {sorted(missing)}; expected the full weights a checkpoint holds")
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True, strict=False)
    result = set_model_state_dict(model, state_dict, options=options)
    aliases = {name for name in model.state_dict() if name not in own_names}
    if unloaded := set(result.missing_keys) - aliases:
        raise ValueError(f"resuming from {checkpoint} left {sorted(unloaded)} unloaded")


def non_persistent_buffers(model: torch.nn.Module) -> set[str]:
    """The names of `model`'s buffers registered with persistent=False, which no checkpoint holds. From torch's private
    Module._non_persistent_buffers_set: the public way (named buffers less the state dict's keys) would gather an FSDP
    model's state dict on rank 0 alone. Checked on a module of known buffers first; a change is an error."""
    probe = torch.nn.Module()
    probe.register_buffer("kept", torch.zeros(1))
    probe.register_buffer("dropped", torch.zeros(1), persistent=False)
    if getattr(probe, "_non_persistent_buffers_set", None) != {"dropped"}:
        raise RuntimeError(
            f"torch {torch.__version__}: Module._non_persistent_buffers_set no longer names a module's non-persistent "
            "buffers; adapt non_persistent_buffers in modeling_vaswani/toolkit/training/trainer.py to this torch"
        )
    return {
        f"{prefix}.{name}" if prefix else name
        for prefix, module in model.named_modules()
        for name in module._non_persistent_buffers_set
    }
