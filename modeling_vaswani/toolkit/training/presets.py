"""The training presets: "small", this project's, for the shipped Multi30k on a CPU in under half an hour, and
Table 3's "base" and "big", whose shapes live in the configuration (VaswaniConfig.base, VaswaniConfig.big)."""

from functools import partial

from ...configuration_vaswani import VaswaniConfig


def table_3_training(row: str) -> dict:
    """Table 3's training settings of `row` (train steps, eps_ls: `VaswaniConfig.table3_training_arguments`), and
    Section 5.1's shared vocabulary of about 37000 tokens, the configuration's default."""
    return {"vocab_size": VaswaniConfig.vocab_size, **VaswaniConfig.table3_training_arguments(row)}


MAIN_PRESET = "small"  # vaswani-train's without --preset; the time budget may choose a smaller size (budget.py)

# Why each preset's settings are what they are: docs/training.md ("Where the recipe departs from the paper").
SMALL = {
    "config": partial(
        VaswaniConfig.base,
        d_model=256,
        encoder_layers=3,
        decoder_layers=3,
        num_heads=4,
        d_ff=1024,
        dropout=0.0,
        init_std=0.02,
    ),
    "training": {  # the vocabulary: ModelArguments' default (8000)
        "max_tokens": 1500,
        "max_steps": 4000,
        "max_train_minutes": 27,
        "warmup_steps": 400,
        "learning_rate": 2e-3,
        "save_steps": 150,
        "average_last_checkpoints": 5,
        "logging_steps": 50,
        "length_penalty": 1.0,
        # Validation loss and BLEU on the training curves, on 300 sentences: a few seconds every 500 steps.
        "eval_strategy": "steps",
        "eval_steps": 500,
        "max_validation_samples": 300,
    },
}

PRESETS = {
    "small": SMALL,
    # Identical to "small" except a quarter of its width, for budgets too short for "small" (budget.choose_size, from
    # the curves in measurements.json): 2.4x its steps a second (2-core EPYC, 2026-11-28).
    "tiny": {
        "config": partial(SMALL["config"], d_model=128, d_ff=512),
        # A smaller model takes a larger step (Equation 3's peak grows as d_model^-0.5).
        "training": {**SMALL["training"], "learning_rate": 3e-3},
    },
    "base": {
        "config": VaswaniConfig.base,
        "training": {
            **table_3_training("base"),
            "warmup_steps": 4000,
            "save_steps": 1500,
            "average_last_checkpoints": 5,
            "eval_strategy": "steps",
            "eval_steps": 6000,
        },
    },
    "big": {
        "config": VaswaniConfig.big,
        "training": {
            **table_3_training("big"),
            "warmup_steps": 4000,
            "save_steps": 600,
            "average_last_checkpoints": 20,
            "eval_strategy": "steps",
            "eval_steps": 6000,
        },
    },
}


def preset_config(preset: str, tokenizer=None, **overrides) -> VaswaniConfig:
    """The preset's VaswaniConfig, its vocabulary and special ids taken from `tokenizer` when given."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; expected one of {sorted(PRESETS)}")
    values = {}
    if tokenizer is not None:
        values.update(
            vocab_size=len(tokenizer),
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            decoder_start_token_id=tokenizer.bos_token_id,
        )
    return PRESETS[preset]["config"](**{**values, **overrides})


def preset_overrides(dropout: float | None) -> dict:
    """What a run changes in its preset's configuration: P_drop, when --dropout is given (None: the preset's)."""
    return {} if dropout is None else {"dropout": dropout}
