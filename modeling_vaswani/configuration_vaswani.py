"""Configuration of the Transformer of Vaswani et al. 2017, "Attention Is All You Need" (arXiv:1706.03762).

Payload: `save_pretrained` copies this file flat into checkpoints as remote code, so it imports only transformers.
"""

import sys

from transformers import PreTrainedConfig
from transformers.activations import ACT2FN


def registered_pipeline_tasks() -> set[str]:
    """The pipeline tasks registered in this process, transformers' own and those a package added."""
    pipelines = sys.modules.get("transformers.pipelines")  # never imported: nobody can have registered a task
    return set(pipelines.PIPELINE_REGISTRY.get_supported_tasks()) if pipelines else set()


class VaswaniConfig(PreTrainedConfig):
    r"""
    The hyperparameters of Table 3 of the paper. Defaults are the base model; `VaswaniConfig.big()` is the big one.

    | field | paper | base | big |
    | --- | --- | --- | --- |
    | `encoder_layers`, `decoder_layers` | N | 6 | 6 |
    | `d_model` | d_model | 512 | 1024 |
    | `d_ff` | d_ff | 2048 | 4096 |
    | `num_heads` | h | 8 | 16 |
    | `d_k`, `d_v` (derived: d_model / h) | d_k, d_v | 64 | 64 |
    | `dropout` | P_drop | 0.1 | 0.3 |

    Args:
        vocab_size: one vocabulary shared by source and target (Section 5.1: about 37000 BPE tokens for EN-DE).
        d_model: width of every sublayer output and of the embeddings (Section 3.1).
        encoder_layers, decoder_layers: N, the number of identical layers in each stack (Section 3.1).
        num_heads: h, the number of attention heads (Section 3.2.2).
        d_ff: inner width of the position-wise feed-forward networks (Section 3.3).
        activation_function: the FFN non-linearity; the paper's is ReLU, max(0, x) (Equation 2).
        dropout: P_drop, applied to each sublayer output and to the embedding sums (Section 5.4).
        attention_dropout: dropout on the attention weights; not in the paper (0.0), tensor2tensor has it.
        activation_dropout: dropout after the FFN activation; not in the paper (0.0), tensor2tensor has it.
        attention_bias: add biases to W^Q, W^K, W^V, W^O. The paper's formulas and tensor2tensor have none.
        layer_norm_eps: LayerNorm epsilon; the paper gives none, 1e-6 is tensor2tensor's.
        max_position_embeddings: rows of the precomputed sinusoid table; longer inputs are encoded on the fly.
        pad_token_id, bos_token_id, eos_token_id, decoder_start_token_id: special tokens; the decoder input is the
            target shifted right by one position, starting with `decoder_start_token_id` (Section 3.1).
        tie_word_embeddings: share one matrix between both embeddings and the pre-softmax linear (Section 3.4).
    """

    model_type = "vaswani"
    keys_to_ignore_at_inference = ["past_key_values"]
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
    d_ff: int = 2048
    activation_function: str = "relu"
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    attention_bias: bool = False
    layer_norm_eps: float = 1e-6
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
        # A checkpoint declares its translation pipeline as remote code (`custom_pipelines`), and transformers'
        # pipeline() then demands trust_remote_code for the task, even where the package is installed and registered
        # its own class for it. A declared task that is registered in this process is therefore not loaded from the
        # checkpoint; where nothing registered it (no package), the declaration stays and the checkpoint's copy serves.
        declared = kwargs.pop("custom_pipelines", None) or {}
        registered = registered_pipeline_tasks()
        remote = {task: spec for task, spec in declared.items() if task not in registered}
        if remote:
            kwargs["custom_pipelines"] = remote
        super().__post_init__(**kwargs)
        self._check()

    @property
    def d_k(self) -> int:
        """Section 3.2.2: d_k = d_v = d_model / h."""
        return self.d_model // self.num_heads

    d_v = d_k
    head_dim = d_k  # the name transformers' cache classes look for

    @classmethod
    def base(cls, **overrides) -> "VaswaniConfig":
        """Table 3, "base": N 6, d_model 512, d_ff 2048, h 8, P_drop 0.1 (63.0M parameters with 37000 tokens)."""
        return cls(**overrides)

    @classmethod
    def big(cls, **overrides) -> "VaswaniConfig":
        """Table 3, "big": N 6, d_model 1024, d_ff 4096, h 16, P_drop 0.3 (214.2M parameters with 37000 tokens)."""
        return cls(**{"d_model": 1024, "d_ff": 4096, "num_heads": 16, "dropout": 0.3, **overrides})

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
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads}): "
                "Section 3.2.2 splits d_model into h heads of d_k = d_model / h"
            )
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {value!r}")
        if not self.layer_norm_eps > 0:
            raise ValueError(f"layer_norm_eps must be positive, got {self.layer_norm_eps!r}")
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
