"""A Vaswani checkpoint as a CTranslate2 model (https://opennmt.net/CTranslate2), exactly, and that model run.

CTranslate2 is the runtime people serve translation with on CPUs (OPUS-MT deployments, Argos, LibreTranslate), with
int8 weights. `VaswaniConverter` is a converter of CTranslate2's documented API (`ctranslate2.converters.Converter`):
it fills a `TransformerSpec` with our weights, and CTranslate2 validates, quantizes and saves it. What the spec is
told, and why:
- post-LN layers (`pre_norm=False`, no final norm), the configured activation (ReLU, Equation 2), the configured
  LayerNorm epsilon (`layer_norm_epsilon`: CTranslate2 assumes 1e-5 for a norm with a bias unless told);
- the attention projections' biases only where the model has them (`attention_bias`); W^Q, W^K, W^V fused as
  CTranslate2 computes them; d_k = d_v as the spec's `head_dim` (the spec has one width for both: d_k != d_v is
  refused);
- the embeddings scaled by sqrt(d_model) (Section 3.4), and one matrix for both embeddings and the pre-softmax linear:
  CTranslate2 saves equal variables once (`optimize` aliases them), so model.bin holds it once; the logits bias where
  `final_logits_bias` is set;
- the position table stored as a weight: Section 3.5's interleaved sinusoids (`sinusoids()`; CTranslate2's built-in
  sinusoids are in halves, [sin | cos]), or the learned table of Table 3 row E. CTranslate2 refuses a position past
  the table with a RuntimeError in the middle of a batch, so `CTranslate2Model` refuses such input up front;
- the decoder starts from `decoder_start_token_id`'s token, as `generate()` does.

The folder also holds the tokenizer and the generation settings (num_beams, length_penalty), so that it translates on
its own: `CTranslate2Model(folder)` with `AutoTokenizer.from_pretrained(folder)`, as vaswani-translate loads it.

How the exported folder is run and decoded: translation/ctranslate2.py.

CTranslate2 is an optional extra: importing this module without it raises an ImportError that says how to install it.
"""

import json
from collections.abc import Sequence
from pathlib import Path

import torch

from ...modeling_vaswani import VaswaniForConditionalGeneration, sinusoids
from ...search_vaswani import max_output_length
from ..checkpoints import load_model_and_tokenizer
from ..outputs import (
    TOKENIZER_OUTPUT,
    Output,
    check_output_folder,
    check_writable,
    older_output,
    released_on_failure,
    save_object,
    staged_folder,
)

# isort: off
# translation.ctranslate2 first: its ImportError says how to install CTranslate2
from ..translation.ctranslate2 import EXPORT_FILE
from ctranslate2.converters import Converter
from ctranslate2.specs import common_spec, transformer_spec

# isort: on

# What the export folder holds: an earlier export may be replaced, anything else is refused.
EXPORT_OUTPUT = (
    *TOKENIZER_OUTPUT,
    "model.bin",
    "config.json",
    "shared_vocabulary.json",
    "shared_vocabulary.txt",
    "generation_config.json",
    EXPORT_FILE,
)
# Known by its marker; an export of a version before markers by EXPORT_FILE, which only this package writes.
EXPORTED = Output(
    "vaswani-export-ctranslate2",
    "output folder",
    older_output(lambda folder: (folder / EXPORT_FILE).is_file(), EXPORT_OUTPUT),
    EXPORT_OUTPUT,
)

QUANTIZATIONS = ("float32", "int8", "int8_float32", "int8_bfloat16", "float16", "bfloat16")
ACTIVATIONS = {  # transformers' names (config.activation_function) -> CTranslate2's
    "relu": common_spec.Activation.RELU,
    "gelu": common_spec.Activation.GELU,
    "gelu_new": common_spec.Activation.GELUTanh,
    "gelu_pytorch_tanh": common_spec.Activation.GELUTanh,
    "silu": common_spec.Activation.SWISH,
    "swish": common_spec.Activation.SWISH,
    "sigmoid": common_spec.Activation.Sigmoid,
    "tanh": common_spec.Activation.Tanh,
}


class ExportError(ValueError):
    """A model or output folder that the export refuses: the message names the setting and what was expected."""


# ---------------------------------------------------------------------------------------------------------------------
# The converter
# ---------------------------------------------------------------------------------------------------------------------


def position_table(model: VaswaniForConditionalGeneration, stack) -> torch.Tensor:
    """The rows CTranslate2 adds to the scaled embeddings: the learned table, or Section 3.5's sinusoids for every
    position a translation of the longest source the commands accept (max_position_embeddings tokens) may reach
    (`max_output_length`, Section 6.1's source length + 50), so that no such sentence runs out of positions."""
    config = model.config
    if config.position_embedding_type == "learned":
        return copied(stack.positional_encoding.weight)
    return sinusoids(max_output_length(config.max_position_embeddings), config.d_model)


def check_exportable(config) -> None:
    """Refuses what a TransformerSpec cannot express."""
    if config.d_k != config.d_v:
        raise ExportError(
            f"d_k ({config.d_k}) differs from d_v ({config.d_v}); CTranslate2's attention has one head width for "
            "queries, keys and values, so the export expects d_k == d_v"
        )
    if config.activation_function not in ACTIVATIONS:
        raise ExportError(
            f"activation_function {config.activation_function!r} has no CTranslate2 equivalent; expected one of "
            f"{sorted(ACTIVATIONS)}"
        )
    if not config.tie_word_embeddings:
        raise ExportError("tie_word_embeddings is False; the export expects one shared matrix (Section 3.4)")


class VaswaniConverter(Converter):
    """CTranslate2's converter API over a loaded `VaswaniForConditionalGeneration` and its vocabulary (token names in
    id order, as CTranslate2 names tokens): `VaswaniConverter(model, names).convert(folder, quantization="int8")`.
    Weights in any dtype: `convert`'s quantization casts them (float32 exactly)."""

    def __init__(self, model: VaswaniForConditionalGeneration, vocabulary: Sequence[str], unk_token: str = "<unk>"):
        check_exportable(model.config)
        if len(vocabulary) != model.config.vocab_size:
            raise ExportError(
                f"the vocabulary has {len(vocabulary)} tokens but the model's vocab_size is "
                f"{model.config.vocab_size}; expected one name per row of the embedding matrix"
            )
        self.model = model
        self.vocabulary = list(vocabulary)
        self.unk_token = unk_token  # CTranslate2 names it in its config; our byte-level BPE never produces it

    def _load(self) -> transformer_spec.TransformerSpec:
        config = self.model.config
        layout = {
            "num_heads": config.num_heads,
            "pre_norm": False,
            "activation": ACTIVATIONS[config.activation_function],
            # None where d_k = d_model / h, CTranslate2's own default (Table 3 rows A-C vary it)
            "head_dim": None if config.d_k * config.num_heads == config.d_model else config.d_k,
        }
        spec = transformer_spec.TransformerSpec(
            transformer_spec.TransformerEncoderSpec(config.encoder_layers, **layout),
            transformer_spec.TransformerDecoderSpec(config.decoder_layers, **layout),
        )
        model = self.model.model
        set_stack(spec.encoder, model.encoder, position_table(self.model, model.encoder))
        set_stack(spec.decoder, model.decoder, position_table(self.model, model.decoder))
        set_linear(spec.decoder.projection, self.model.lm_head)
        spec.register_source_vocabulary(self.vocabulary)
        spec.register_target_vocabulary(self.vocabulary)
        self._set_config(spec.config)
        return spec

    def _set_config(self, spec_config) -> None:
        config, names = self.model.config, self.vocabulary
        spec_config.layer_norm_epsilon = config.layer_norm_eps
        spec_config.bos_token = names[config.bos_token_id]
        spec_config.eos_token = names[config.eos_token_id]
        spec_config.decoder_start_token = names[config.decoder_start_token_id]
        spec_config.unk_token = self.unk_token


def set_stack(spec, stack, positions: torch.Tensor) -> None:
    """Embeddings (times sqrt(d_model)), positions and layers of one stack."""
    embeddings = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    embeddings.weight = copied(stack.embed_tokens.weight)
    spec.scale_embeddings = stack.embed_scale
    spec.position_encodings.encodings = positions
    for layer_spec, layer in zip(spec.layer, stack.layers, strict=True):
        set_attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_sublayer, fused_kv=False)
        if hasattr(layer, "cross_attn"):
            set_attention(layer_spec.attention, layer.cross_attn, layer.cross_attn_sublayer, fused_kv=True)
        set_linear(layer_spec.ffn.linear_0, layer.feed_forward.w1)
        set_linear(layer_spec.ffn.linear_1, layer.feed_forward.w2)
        set_norm(layer_spec.ffn.layer_norm, layer.feed_forward_sublayer)


def set_attention(spec, attention, sublayer, fused_kv: bool) -> None:
    """CTranslate2's self-attention is [W^Q W^K W^V] fused then W^O; its encoder-decoder attention W^Q, [W^K W^V],
    W^O. The post-LN norm of the sublayer sits in the attention's spec."""
    projections = [attention.w_q, attention.w_k, attention.w_v]
    groups = [projections[:1], projections[1:]] if fused_kv else [projections]
    for linear_spec, group in zip(spec.linear[: len(groups)], groups, strict=True):
        linear_spec.weight = torch.cat([linear.weight for linear in group])
        if group[0].bias is not None:
            linear_spec.bias = torch.cat([linear.bias for linear in group])
    set_linear(spec.linear[-1], attention.w_o)
    set_norm(spec.layer_norm, sublayer)


def set_linear(spec, linear) -> None:
    spec.weight = copied(linear.weight)
    if linear.bias is not None:
        spec.bias = copied(linear.bias)


def set_norm(spec, sublayer) -> None:
    spec.gamma = copied(sublayer.norm.weight)
    spec.beta = copied(sublayer.norm.bias)


def copied(tensor: torch.Tensor) -> torch.Tensor:
    """A copy for the spec: CTranslate2's quantization scales the arrays it is given in place (model_spec.py), and
    the model's own weights must come out of an int8 export as they went in."""
    return tensor.detach().clone()


# ---------------------------------------------------------------------------------------------------------------------
# The export: a checkpoint folder or Hub id in, a folder that translates on its own out
# ---------------------------------------------------------------------------------------------------------------------


@released_on_failure()  # a refusal after the output check leaves no lock in a process that goes on
def export_ctranslate2(
    name_or_path: str, output_dir: str | Path, quantization: str = "float32", revision: str | None = None
) -> Path:
    """Exports a Vaswani checkpoint (folder or Hub id) into `output_dir` (new, empty or an earlier export, replaced
    whole once the new one is complete): CTranslate2's model.bin, config.json and shared_vocabulary.json, with
    `quantization` (one of QUANTIZATIONS; float32 is exact), plus the tokenizer, generation_config.json and
    EXPORT_FILE."""

    output_dir = Path(output_dir)
    if quantization not in QUANTIZATIONS:
        raise ExportError(f"quantization {quantization!r} is unknown; expected one of {', '.join(QUANTIZATIONS)}")
    check_output_folder(output_dir, EXPORTED, inputs=[name_or_path])
    model, tokenizer = load_model_and_tokenizer(name_or_path, revision=revision)
    bytes_per_weight = 4 if quantization == "float32" else 2 if quantization in ("float16", "bfloat16") else 1
    check_writable(output_dir, need_bytes=bytes_per_weight * sum(p.numel() for p in model.parameters()))
    if not isinstance(model, VaswaniForConditionalGeneration):
        raise ExportError(f"{name_or_path} holds a {type(model).__name__}; expected a Vaswani checkpoint")
    if len(tokenizer) != model.config.vocab_size:
        raise ExportError(
            f"{name_or_path}: the tokenizer has {len(tokenizer)} tokens but the model's vocab_size is "
            f"{model.config.vocab_size}; expected a tokenizer for every row of the embedding matrix"
        )
    vocabulary = tokenizer.convert_ids_to_tokens(list(range(model.config.vocab_size)))
    unk_token = tokenizer.unk_token or "<unk>"
    with staged_folder(output_dir, EXPORTED) as staged:
        write_export(model, vocabulary, staged, quantization, unk_token, exported_from=str(name_or_path))
        save_object(staged, tokenizer)
    return output_dir


def write_export(
    model: VaswaniForConditionalGeneration,
    vocabulary: Sequence[str],
    output_dir: Path,
    quantization: str,
    unk_token: str = "<unk>",
    **facts,
) -> None:
    """The CTranslate2 model, generation_config.json and EXPORT_FILE (with `facts`) in `output_dir`."""
    # force: CTranslate2 refuses any existing folder, where an empty one is allowed here.
    converter = VaswaniConverter(model, vocabulary, unk_token)
    converter.convert(str(output_dir), quantization=quantization, force=True)
    model.generation_config.save_pretrained(output_dir)
    settings = {
        **facts,
        "quantization": quantization,
        "max_position_embeddings": model.config.max_position_embeddings,
        "position_rows": len(position_table(model, model.model.encoder)),
        "position_embedding_type": model.config.position_embedding_type,
    }
    (Path(output_dir) / EXPORT_FILE).write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
