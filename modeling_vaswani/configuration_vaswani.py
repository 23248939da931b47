"""Configuration of the Transformer of Vaswani et al. 2017, "Attention Is All You Need" (arXiv:1706.03762).

Payload: `save_pretrained` copies this file flat into checkpoints as remote code, so it imports only transformers and
its siblings.
"""

import dataclasses

from transformers import PreTrainedConfig
from transformers.activations import ACT2FN
from transformers.modeling_outputs import Seq2SeqLMOutput

from .remote_code_vaswani import TRANSLATION_TASK

# Whether this file runs as the installed package's module, not as a checkpoint's copy loaded as remote code (a module
# of transformers_modules): the package's __init__, which runs before any of its modules can be used, registers the
# package's own pipeline for TRANSLATION_TASK. Known from the module's own name, not from what the process imported.
INSTALLED = __package__ == "modeling_vaswani"

POSITION_EMBEDDING_TYPES = ("sinusoidal", "learned")

# Table 3 of the paper, row by row: each line's changes to the base model (a blank cell is base's value), in this
# configuration's field names. N is encoder_layers and decoder_layers; eps_ls and "train steps" are training settings,
# named as Seq2SeqTrainingArguments names them (label_smoothing_factor, max_steps).
TABLE_3 = {
    "base": ({},),
    "A": (
        {"num_heads": 1, "d_k": 512, "d_v": 512},
        {"num_heads": 4, "d_k": 128, "d_v": 128},
        {"num_heads": 16, "d_k": 32, "d_v": 32},
        {"num_heads": 32, "d_k": 16, "d_v": 16},
    ),
    "B": ({"d_k": 16}, {"d_k": 32}),
    "C": (
        {"encoder_layers": 2, "decoder_layers": 2},
        {"encoder_layers": 4, "decoder_layers": 4},
        {"encoder_layers": 8, "decoder_layers": 8},
        {"d_model": 256, "d_k": 32, "d_v": 32},
        {"d_model": 1024, "d_k": 128, "d_v": 128},
        {"d_ff": 1024},
        {"d_ff": 4096},
    ),
    "D": ({"dropout": 0.0}, {"dropout": 0.2}, {"label_smoothing_factor": 0.0}, {"label_smoothing_factor": 0.2}),
    "E": ({"position_embedding_type": "learned"},),
    "big": ({"d_model": 1024, "d_ff": 4096, "num_heads": 16, "dropout": 0.3, "max_steps": 300_000},),
}
TABLE_3_TRAINING = {"label_smoothing_factor": 0.1, "max_steps": 100_000}  # base's eps_ls and train steps
TABLE_3_COLUMNS = {name for lines in TABLE_3.values() for line in lines for name in line}


class VaswaniConfig(PreTrainedConfig):
    r"""
    The hyperparameters of Table 3 of the paper. Defaults are the base model; `VaswaniConfig.big()` is the big one.

    | field | paper | base | big |
    | --- | --- | --- | --- |
    | `encoder_layers`, `decoder_layers` | N | 6 | 6 |
    | `d_model` | d_model | 512 | 1024 |
    | `d_ff` | d_ff | 2048 | 4096 |
    | `num_heads` | h | 8 | 16 |
    | `d_k`, `d_v` (default d_model / h) | d_k, d_v | 64 | 64 |
    | `dropout` | P_drop | 0.1 | 0.3 |
    | `position_embedding_type` | sinusoids or learned (row E) | sinusoidal | sinusoidal |

    `VaswaniConfig.table3(row, ...)` builds any row of Table 3 (see there).

    Args:
        vocab_size: one vocabulary shared by source and target (Section 5.1: about 37000 BPE tokens for EN-DE).
        d_model: width of every sublayer output and of the embeddings (Section 3.1).
        encoder_layers, decoder_layers: N, the number of identical layers in each stack (Section 3.1).
        num_heads: h, the number of attention heads (Section 3.2.2).
        d_k, d_v: the width of each head's queries and keys (d_k) and of its values (d_v); W^Q, W^K map d_model to
            h*d_k, W^V to h*d_v, W^O maps h*d_v back to d_model (Section 3.2.2). None (the default) means
            d_model / h, the paper's choice, resolved when the configuration is made; Table 3 rows (A)-(C) vary them,
            (B) d_k alone.
        d_ff: inner width of the position-wise feed-forward networks (Section 3.3).
        activation_function: the FFN non-linearity; the paper's is ReLU, max(0, x) (Equation 2).
        dropout: P_drop, applied to each sublayer output and to the embedding sums (Section 5.4).
        attention_dropout: dropout on the attention weights; not in the paper (0.0), tensor2tensor has it.
        activation_dropout: dropout after the FFN activation; not in the paper (0.0), tensor2tensor has it.
        attention_bias: add biases to W^Q, W^K, W^V, W^O. The paper's formulas and tensor2tensor have none.
        final_logits_bias: add a learned bias to the logits, the pre-softmax linear's own (the matrix stays shared).
            Not in the paper (Section 3.4 shares the matrix and adds nothing); MarianMT checkpoints have one
            (`final_logits_bias`), which their exact conversion needs (toolkit/interop/marian.py).
        layer_norm_eps: LayerNorm epsilon; the paper gives none, 1e-6 is tensor2tensor's.
        init_std: the paper gives no initialization. None (the default) is tensor2tensor's: embeddings
            N(0, d_model^-0.5), linear weights Xavier-uniform. A number draws every embedding and linear weight from
            N(0, init_std) instead, as BERT, BART and MarianMT do with 0.02 (the small preset's choice: it learns
            faster in a short run, see toolkit/training/presets.py).
        position_embedding_type: "sinusoidal", the fixed encodings of Section 3.5, or "learned", a trained table per
            stack (Table 3 row E; Section 3.5 reports nearly identical results).
        max_position_embeddings: rows of the precomputed sinusoid table (longer inputs are encoded on the fly), or of
            the learned table (the longest input it can encode).
        pad_token_id, bos_token_id, eos_token_id, decoder_start_token_id: special tokens; the decoder input is the
            target shifted right by one position, starting with `decoder_start_token_id` (Section 3.1).
        tie_word_embeddings: share one matrix between both embeddings and the pre-softmax linear (Section 3.4).
    """

    model_type = "vaswani"
    # The Trainer drops these output fields from the logits it gathers in evaluation: the cache, named as this
    # transformers' output class names it (`cache` from 5.24, `past_key_values` before).
    keys_to_ignore_at_inference = [
        field.name for field in dataclasses.fields(Seq2SeqLMOutput) if field.name in ("cache", "past_key_values")
    ]
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "num_heads",
        "num_hidden_layers": "encoder_layers",
    }

    vocab_size: int = 37000
    d_model: int = 512
    encoder_layers: int = 6
    decoder_layers: int = 6
    num_heads: int = 8
    d_k: int | None = None
    d_v: int | None = None
    d_ff: int = 2048
    activation_function: str = "relu"
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    attention_bias: bool = False
    final_logits_bias: bool = False
    layer_norm_eps: float = 1e-6
    init_std: float | None = None
    position_embedding_type: str = "sinusoidal"
    max_position_embeddings: int = 1024
    # fairseq's order. Not pad 0: transformers' beam search takes a pad id of 0 for "none" and pads with eos.
    bos_token_id: int | None = 0
    pad_token_id: int | None = 1
    eos_token_id: int | None = 2
    decoder_start_token_id: int | None = 0
    tie_word_embeddings: bool = True
    use_cache: bool = True
    is_encoder_decoder: bool = True

    def __post_init__(self, **kwargs):
        # A checkpoint declares its translation pipeline as remote code (`custom_pipelines`, for pipeline(...,
        # trust_remote_code=True) where the package is not installed), and transformers' pipeline() demands
        # trust_remote_code for every declared task. transformers loads a checkpoint's config with the installed
        # package's class whenever the package is imported (a registered class wins over remote code): that class
        # drops the declaration of the package's own task, which the package's registered pipeline serves. A
        # checkpoint's copy, loaded as remote code, keeps it; other declared tasks are kept by both.
        declared = kwargs.pop("custom_pipelines", None) or {}
        remote = {task: spec for task, spec in declared.items() if not (INSTALLED and task == TRANSLATION_TASK)}
        if remote:
            kwargs["custom_pipelines"] = remote
        # The first of this package's code that runs for a config.json naming another model_type, wherever it loads
        # from (the package, or a checkpoint's copy run as remote code): transformers only warns, and builds this
        # model from another's configuration (or from a typo's).
        model_type = kwargs.pop("model_type", self.model_type)
        if model_type != self.model_type:
            raise ValueError(
                f"the configuration's model_type is {model_type!r}, but {type(self).__name__} is the configuration of "
                f'model_type {self.model_type!r}; expected config.json to say "model_type": "{self.model_type}" '
                "(a typo, or another model's configuration?)"
            )
        super().__post_init__(**kwargs)
        self._check()
        # Section 3.2.2: "d_k = d_v = d_model / h" unless given (checkpoints written before these fields lack them).
        self.d_k = self.d_model // self.num_heads if self.d_k is None else self.d_k
        self.d_v = self.d_model // self.num_heads if self.d_v is None else self.d_v

    @property
    def head_dim(self) -> int:
        """d_k, under the name transformers' cache classes look for."""
        return self.d_k

    @classmethod
    def base(cls, **overrides) -> "VaswaniConfig":
        """Table 3's "base" line (N 6, d_model 512, d_ff 2048, h 8, P_drop 0.1; 63.0M parameters with 37000 tokens),
        `overrides` over it (any field, Table 3's columns included)."""
        return cls._table3_model(TABLE_3["base"][0], overrides)

    @classmethod
    def big(cls, **overrides) -> "VaswaniConfig":
        """Table 3's "big" line (N 6, d_model 1024, d_ff 4096, h 16, P_drop 0.3; 214.2M parameters with 37000 tokens),
        `overrides` over it (any field, Table 3's columns included: big EN-FR's P_drop 0.1 is `big(dropout=0.1)`)."""
        return cls._table3_model(TABLE_3["big"][0], overrides)

    @classmethod
    def table3(cls, row: str, **values) -> "VaswaniConfig":
        """The model of one line of Table 3: `row` is "base", "A" to "E" or "big", `values` pick the line.

        `table3("A", num_heads=1)`, `table3("B", d_k=16)`, `table3("C", d_model=256)`, `table3("C", encoder_layers=2)`
        (N sets both stacks), `table3("D", dropout=0.2)`, `table3("E")`, `table3("big")`: any of a line's values names
        it. Values of Table 3's columns that the row does not have are refused; other fields (vocab_size, special
        token ids, ...) are passed on as overrides, as `base(**overrides)` takes them. The row's training settings
        (eps_ls of row D, the train steps of big) are `table3_training_arguments(row, **values)`.

        Table 3 states no vocabulary. Its parameter column fits one shared vocabulary of about 41,000 tokens for base,
        (B) and (C), and about 36,000 for big, none for both (tests/model/test_table3.py); Section 5.1 gives about
        37,000.
        """
        line = cls._table3_line(row, values)
        return cls._table3_model(line, {name: value for name, value in values.items() if name not in TABLE_3_COLUMNS})

    @classmethod
    def _table3_model(cls, line: dict, overrides: dict) -> "VaswaniConfig":
        """The model of a line of Table 3 (its training settings left out), `overrides` over it."""
        return cls(**{**{name: value for name, value in line.items() if name not in TABLE_3_TRAINING}, **overrides})

    @classmethod
    def table3_training_arguments(cls, row: str, **values) -> dict:
        """The Seq2SeqTrainingArguments of a line of Table 3 (`table3`'s arguments): label_smoothing_factor (eps_ls,
        Section 5.4) and max_steps (100K, big 300K). `vaswani-train --label_smoothing_factor 0.2` and the like."""
        line = cls._table3_line(row, values)
        return {name: line.get(name, default) for name, default in TABLE_3_TRAINING.items()}

    @staticmethod
    def _table3_line(row: str, values: dict) -> dict:
        if row not in TABLE_3:
            raise ValueError(f"Table 3 has no row {row!r}; its rows are {', '.join(map(repr, TABLE_3))}")
        chosen = {name: value for name, value in values.items() if name in TABLE_3_COLUMNS}
        lines = [line for line in TABLE_3[row] if chosen.items() <= line.items()]
        if len(lines) != 1:
            table = " | ".join(", ".join(f"{name}={value!r}" for name, value in line.items()) for line in TABLE_3[row])
            given = ", ".join(f"{name}={value!r}" for name, value in chosen.items()) or "no value"
            raise ValueError(
                f"Table 3 row {row!r} has {len(TABLE_3[row])} line(s): {table or 'base'}; "
                f"{given} names {'none' if not lines else 'more than one'} of them"
            )
        return lines[0]

    def _check(self):
        for name in (
            "vocab_size",
            "d_model",
            "encoder_layers",
            "decoder_layers",
            "num_heads",
            "d_ff",
            "max_position_embeddings",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for name in ("d_k", "d_v"):
            value = getattr(self, name)
            if value is None and self.d_model % self.num_heads:
                raise ValueError(
                    f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads}) when {name} is not "
                    f"given: Section 3.2.2 splits d_model into h heads of {name} = d_model / h"
                )
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
                raise ValueError(f"{name} must be a positive integer or None (d_model / num_heads), got {value!r}")
        if self.position_embedding_type not in POSITION_EMBEDDING_TYPES:
            raise ValueError(
                f"position_embedding_type {self.position_embedding_type!r} is unknown; expected one of "
                f"{POSITION_EMBEDDING_TYPES} (Section 3.5's sinusoids, or Table 3 row E's learned table)"
            )
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {value!r}")
        for name in ("attention_bias", "final_logits_bias"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if not self.layer_norm_eps > 0:
            raise ValueError(f"layer_norm_eps must be positive, got {self.layer_norm_eps!r}")
        if self.init_std is not None and (
            not isinstance(self.init_std, (int, float)) or isinstance(self.init_std, bool) or not self.init_std > 0
        ):
            raise ValueError(f"init_std must be a positive number or None (tensor2tensor init), got {self.init_std!r}")
        if self.activation_function not in ACT2FN:
            raise ValueError(
                f"activation_function {self.activation_function!r} is unknown; expected one of {sorted(ACT2FN)}"
            )
        for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
            value = getattr(self, name)
            for token_id in value if isinstance(value, (list, tuple)) else [value]:
                if token_id is not None and not 0 <= token_id < self.vocab_size:
                    raise ValueError(
                        f"{name} ({token_id}) is outside the vocabulary: "
                        f"expected 0 <= id < vocab_size ({self.vocab_size})"
                    )


__all__ = ["VaswaniConfig"]
