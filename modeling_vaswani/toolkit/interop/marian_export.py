"""A Vaswani checkpoint as a stock MarianMTModel folder: what `AutoModelForSeq2SeqLM.from_pretrained(folder)` loads
in plain transformers, without remote code and without this package, with its tokenizer and generation settings.

It is marian.py's conversion undone. MarianMT is the network of Section 3 with its residual stream's d_model axis in
the halves layout of its sinusoids ([sin | cos], where Section 3.5 interleaves them), so the inverse of
`halves_to_interleaved` is applied to every matrix that reads or writes the stream. Marian's own position tables are
the same frequencies in that layout. The MarianConfig written makes Marian compute this network: one vocabulary and
one matrix for both embeddings and the pre-softmax linear, scaled by sqrt(d_model) (Section 3.4), the configured
activation (ReLU, Equation 2), post-LN layers without a final norm (Section 3.1; MarianMTModel has no other layout),
static sinusoids; zero attention biases and a zero `final_logits_bias` where this model has none (MarianMT always has
them).

What Marian cannot say differently, by construction of transformers.models.marian.modeling_marian:
- LayerNorm's epsilon is torch's default, 1e-5 (`nn.LayerNorm(embed_dim)`), against this model's 1e-6: the effect is
  measured in docs/interop.md; a model whose epsilon is larger than 1e-5 is refused.
- the position table has `max_position_embeddings` rows and a longer sequence fails inside Marian's forward: the
  export writes `max_output_length` of this model's limit, the rows the longest accepted source's translation reaches.
- the generation config can hold beam 4 and alpha 0.6 but not GNMT's penalty (transformers divides by |Y|^alpha) nor
  Section 6.1's per-sentence limit of input length + 50: it holds the limit of the longest accepted source
  (`max_length`); a caller passes `max_new_tokens` = its batch's longest source + 50 for the paper's rule.

Refused, naming the setting, before any weight is read: what MarianMT cannot hold (`check_marian_exportable`).
"""

from pathlib import Path

import torch
from transformers import GenerationConfig, MarianConfig, MarianMTModel

from ...configuration_vaswani import VaswaniConfig
from ...modeling_vaswani import VaswaniForConditionalGeneration
from ...search_vaswani import max_output_length
from ..checkpoints import load_config, load_model_and_tokenizer, local_folder
from ..outputs import (
    TOKENIZER_OUTPUT,
    Output,
    check_output_folder,
    check_writable,
    released_on_failure,
    save_object,
    staged_folder,
)
from .convert import DECODER_LAYER, ENCODER_LAYER, READS, ConversionError, layer_weight
from .marian import POSITION_KEYS, TIED_KEYS, check_tokenizer, halves_to_interleaved

MARIAN_LAYER_NORM_EPS = 1e-5  # transformers' MarianEncoderLayer: nn.LayerNorm(embed_dim), torch's default

EXPORT_OUTPUT = (*TOKENIZER_OUTPUT, "config.json", "generation_config.json", "model.safetensors")
EXPORTED_MARIAN = Output("vaswani-export-marian", "output folder", names=EXPORT_OUTPUT)


def check_marian_exportable(config: VaswaniConfig) -> None:
    """Refuses, naming the field, a configuration MarianMT cannot compute. Every other field is carried over
    (sizes, activation, dropouts, special ids, biases as weights) or only initializes (init_std)."""
    head = config.d_model // config.num_heads
    if config.d_model % config.num_heads:
        raise ConversionError(
            f"num_heads is {config.num_heads}; expected a divisor of d_model ({config.d_model}): MarianMT's heads are "
            "d_model / h wide"
        )
    expected = {
        "position_embedding_type": ("sinusoidal", "MarianMT's positions are Section 3.5's fixed sinusoids, not a "
                                    "learned table (Table 3 row E)"),
        "tie_word_embeddings": (True, "MarianMT of one vocabulary shares one matrix between both embeddings and the "
                                "pre-softmax linear (Section 3.4)"),
        "d_k": (head, "MarianMT's queries and keys are d_model / h wide (Table 3 row B varies d_k)"),
        "d_v": (head, "MarianMT's values are d_model / h wide"),
    }  # fmt: skip
    for name, (value, meaning) in expected.items():
        if getattr(config, name) != value:
            raise ConversionError(f"{name} is {getattr(config, name)!r}; expected {value!r}: {meaning}")
    if config.layer_norm_eps > MARIAN_LAYER_NORM_EPS:
        raise ConversionError(
            f"layer_norm_eps is {config.layer_norm_eps!r}; expected at most {MARIAN_LAYER_NORM_EPS}: MarianMT's "
            "LayerNorm epsilon is fixed at 1e-5, which would change this model's outputs"
        )
    for name in ("pad_token_id", "decoder_start_token_id", "eos_token_id"):
        if not isinstance(getattr(config, name), int):
            raise ConversionError(
                f"{name} is {getattr(config, name)!r}; expected one token id: MarianMT pads, starts the decoder and "
                "ends a translation with one id each"
            )


def marian_config(config: VaswaniConfig) -> MarianConfig:
    """The MarianConfig of the network `config` describes (checked by `check_marian_exportable`)."""
    return MarianConfig(
        vocab_size=config.vocab_size,
        decoder_vocab_size=config.vocab_size,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        scale_embedding=True,
        d_model=config.d_model,
        encoder_layers=config.encoder_layers,
        decoder_layers=config.decoder_layers,
        encoder_attention_heads=config.num_heads,
        decoder_attention_heads=config.num_heads,
        encoder_ffn_dim=config.d_ff,
        decoder_ffn_dim=config.d_ff,
        activation_function=config.activation_function,
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        activation_dropout=config.activation_dropout,
        max_position_embeddings=max_output_length(config.max_position_embeddings),
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        decoder_start_token_id=config.decoder_start_token_id,
        forced_eos_token_id=None,  # MarianConfig's default forces a token at the length limit; ours forces none
    )


def marian_state_dict(state_dict: dict, d_model: int) -> dict:
    """marian.py's `convert_state_dict` undone: our weights under Marian's names, the residual stream's axis back in
    the halves layout, the LM head's bias as `final_logits_bias`. Tied copies are left out (Marian ties its own)."""
    inverse = torch.argsort(halves_to_interleaved(d_model))
    ours_to_marian = [
        {ours: (theirs, role) for theirs, (ours, role) in layer.items()} for layer in (ENCODER_LAYER, DECODER_LAYER)
    ]
    converted = {}
    for key, tensor in state_dict.items():
        if key in TIED_KEYS:
            continue
        if key == "model.shared.weight":
            converted[key] = tensor[:, inverse]
        elif key == "lm_head.bias":
            converted["final_logits_bias"] = tensor.reshape(1, -1)
        else:
            weight = layer_weight(key, "model.", *ours_to_marian)
            if weight is None:
                raise ConversionError(f"{key} has no MarianMTModel counterpart")
            stack, index, (name, role), kind = weight
            if role == READS:
                tensor = tensor[:, inverse] if kind == "weight" else tensor  # a bias is on the output side
            else:
                tensor = tensor[inverse]  # rows of W^O and W2, their biases, LayerNorm's weight and bias
            converted[f"model.{stack}.layers.{index}.{name}.{kind}"] = tensor
    return converted


def marian_generation_config(model: VaswaniForConditionalGeneration, marian: MarianConfig) -> GenerationConfig:
    """The model's generation settings (Section 6.1's beam 4 and alpha 0.6, its ids, any token it never generates)
    with the length limit of its longest accepted source, which is all a GenerationConfig can say of the paper's
    rule (see the module's docstring)."""
    settings = model.generation_config.to_diff_dict()
    settings.pop("transformers_version", None)
    return GenerationConfig(**{**settings, "max_length": marian.max_position_embeddings + 1})  # + the start token


def to_marian(model: VaswaniForConditionalGeneration) -> MarianMTModel:
    """A MarianMTModel holding `model`'s weights, computing what it computes up to LayerNorm's epsilon (Marian's
    1e-5; exactly where the model's is 1e-5), with the generation settings of `marian_generation_config`. Refuses
    what MarianMT cannot hold (`check_marian_exportable`)."""
    check_marian_exportable(model.config)
    config = marian_config(model.config)
    with torch.device("meta"):
        theirs = MarianMTModel(config).state_dict()
    weights = marian_state_dict({key: t.detach() for key, t in model.state_dict().items()}, model.config.d_model)
    for key in TIED_KEYS:
        weights[key] = weights["model.shared.weight"]
    for key in theirs.keys() - weights.keys():
        if not key.endswith("_proj.bias") and key not in (*POSITION_KEYS, "final_logits_bias"):
            raise ConversionError(f"MarianMTModel weight {key} has no counterpart in {type(model).__name__}")
        if key not in POSITION_KEYS:  # Marian computes its own sinusoids
            weights[key] = torch.zeros(theirs[key].shape, dtype=model.dtype)
    marian = MarianMTModel(config).to(model.dtype)
    missing, unexpected = marian.load_state_dict(weights, strict=False)
    if unexpected or set(missing) - set(POSITION_KEYS):
        raise ConversionError(f"MarianMTModel lacks {sorted(unexpected)[:5]} and left {sorted(missing)[:5]} unset")
    marian.generation_config = marian_generation_config(model, config)
    return marian.eval()


def save_marian(marian: MarianMTModel, tokenizer, folder: Path, weights: bool = True) -> None:
    """A Marian folder's files into `folder` (a staged folder of the outputs room): config.json,
    generation_config.json and the tokenizer, and model.safetensors unless `weights` is False (an ONNX export keeps
    its weights in its own files beside these)."""
    if weights:
        save_object(folder, marian)  # config.json and generation_config.json with the weights
    else:
        save_object(folder, marian.config)
        save_object(folder, marian.generation_config)
    save_object(folder, tokenizer)


def export_marian_model(model: VaswaniForConditionalGeneration, tokenizer, folder: Path, weights: bool = True) -> None:
    """The library's one call: `model` and its `tokenizer` checked (MarianMT can hold the model; the tokenizer's ids
    are inside its vocabulary, its padding and end ids the model's) and written as a stock MarianMTModel folder into
    `folder`, a staged folder of the outputs room (`save_marian`)."""
    check_marian_exportable(model.config)
    check_tokenizer(tokenizer, model.config)
    save_marian(to_marian(model), tokenizer, folder, weights)


@released_on_failure()  # a refusal after the output check leaves no lock in a process that goes on
def export_marian(name_or_path: str, output_dir: str | Path, revision: str | None = None) -> Path:
    """vaswani-export-marian: a Vaswani checkpoint folder or Hub id exported into `output_dir` (new, empty or an
    earlier export, replaced whole once the new one is complete), its configuration checked before its weights
    are read."""
    output_dir = Path(output_dir)
    check_output_folder(output_dir, EXPORTED_MARIAN, inputs=[name_or_path])
    folder = local_folder(name_or_path)
    config = load_config(folder) if folder else VaswaniConfig.from_pretrained(name_or_path, revision=revision)
    check_marian_exportable(config)
    model, tokenizer = load_model_and_tokenizer(name_or_path, revision=revision)
    check_tokenizer(tokenizer, model.config)
    check_writable(output_dir, need_bytes=model.num_parameters() * model.dtype.itemsize)
    with staged_folder(output_dir, EXPORTED_MARIAN) as staged:
        save_marian(to_marian(model), tokenizer, staged)
    return output_dir
