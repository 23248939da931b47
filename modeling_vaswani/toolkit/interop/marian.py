"""MarianMT checkpoints (transformers' `MarianMTModel`, the OPUS-MT models) as Vaswani checkpoints, exactly.

MarianMT is the network of Section 3: post-LN layers, sinusoids of the paper's frequencies counted from position 0,
one embedding matrix shared by source, target and the pre-softmax linear, scaled by sqrt(d_model). It differs in
the layout of the sinusoids, which Marian writes in halves, [sin of every frequency | cos of every frequency], where
Section 3.5 interleaves them, PE(pos, 2i) = sin and PE(pos, 2i+1) = cos. Marian's residual stream is therefore ours
with its d_model axis permuted: permuting that axis in every matrix that reads the stream (embeddings' columns,
W^Q, W^K, W^V, FFN W1) or writes it (W^O, FFN W2, their biases, LayerNorm's weight and bias) gives a network that
computes the same logits (LayerNorm and the element-wise sums commute with a permutation, and the tied pre-softmax
linear sees the permuted embeddings on both sides of its product).

What else differs is a departure from the paper, carried over as the configuration option made for it:
`attention_bias` (Marian's projections have biases), `layer_norm_eps` 1e-5 (torch's default, which Marian keeps),
`activation_function` (usually swish) and `final_logits_bias` (Marian's bias on the logits, where it is not zero).
Anything else (separate vocabularies, untied or unscaled embeddings, pre-LN, a LayerNorm on the embeddings, a
position table that is not the sinusoids, unknown weights) is refused with the setting named, not guessed.

The load -> check -> convert -> save path, the layers' map of names and the departures shared with fairseq.py are
convert.py's; the other way (our model as a stock MarianMTModel folder) is marian_export.py.
"""

from pathlib import Path

import torch
from transformers import AutoConfig, AutoTokenizer, GenerationConfig, MarianMTModel
from transformers.utils import SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME, WEIGHTS_INDEX_NAME, WEIGHTS_NAME
from transformers.utils.hub import cached_file, get_checkpoint_shard_files

from ...configuration_vaswani import VaswaniConfig
from ...modeling_vaswani import VaswaniForConditionalGeneration, sinusoids
from ..checkpoints import open_weights, read_json
from .convert import (
    DECODER_LAYER,
    ENCODER_LAYER,
    READS,
    SHARED_DEPARTURES,
    ConversionError,
    convert_checkpoint,
    converted_model,
    layer_weight,
)
from .pickles import load_weights_only

# Settings that MarianConfig no longer declares but that older OPUS-MT config.json files carry, with the value under
# which transformers' MarianMTModel (which ignores them) computes what the weights were trained for.
LEGACY_SETTINGS = {
    "normalize_before": (False, "post-LN layers, LayerNorm(x + Sublayer(x)) (Section 3.1)"),
    "normalize_embedding": (False, "no LayerNorm on the embeddings (layernorm_embedding)"),
    "add_final_layer_norm": (False, "no LayerNorm after the last layer of a stack"),
    "static_position_embeddings": (True, "the fixed sinusoids of Section 3.5"),
}

TIED_KEYS = ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight")
POSITION_KEYS = ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight")


def halves_to_interleaved(d_model: int) -> torch.Tensor:
    """The permutation p of the d_model axis with interleaved[..., j] = halves[..., p[j]]: even dimension 2i takes
    frequency i's sine (halves column i), odd dimension 2i+1 its cosine (halves column ceil(d_model/2) + i)."""
    sines = (d_model + 1) // 2
    permutation = torch.empty(d_model, dtype=torch.long)
    permutation[0::2] = torch.arange(sines)
    permutation[1::2] = sines + torch.arange(d_model // 2)
    return permutation


def check_marian_config(config) -> None:
    """Refuses a configuration that is not the paper's network up to the departures this converter carries over."""
    if getattr(config, "model_type", None) != "marian":
        raise ConversionError(f"model_type is {getattr(config, 'model_type', None)!r}; expected 'marian' (MarianMT)")
    expected = {
        "share_encoder_decoder_embeddings": (True, "one vocabulary for source and target (Section 3.4)"),
        "tie_word_embeddings": (True, "the pre-softmax linear tied to the embeddings (Section 3.4)"),
        "scale_embedding": (True, "embeddings multiplied by sqrt(d_model) (Section 3.4)"),
        "decoder_vocab_size": (config.vocab_size, "the source vocabulary's size, one vocabulary (Section 3.4)"),
        "decoder_attention_heads": (config.encoder_attention_heads, "encoder_attention_heads, one h (Table 3)"),
        "decoder_ffn_dim": (config.encoder_ffn_dim, "encoder_ffn_dim, one d_ff (Table 3)"),
        **LEGACY_SETTINGS,
    }
    for name, (value, meaning) in expected.items():
        if getattr(config, name, value) != value:
            raise ConversionError(f"{name} is {getattr(config, name)!r}; expected {value!r}: {meaning}")
    if config.pad_token_id is None:
        raise ConversionError("pad_token_id is None; expected Marian's padding id, which also starts the decoder")


def vaswani_config(config, logits_bias: bool) -> VaswaniConfig:
    """The VaswaniConfig of a (checked) MarianConfig: its sizes, ids and dropout, and the departures it needs."""
    return VaswaniConfig(
        vocab_size=config.vocab_size,
        d_model=config.d_model,
        encoder_layers=config.encoder_layers,
        decoder_layers=config.decoder_layers,
        num_heads=config.encoder_attention_heads,
        d_ff=config.encoder_ffn_dim,
        activation_function=config.activation_function,
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        activation_dropout=config.activation_dropout,
        final_logits_bias=logits_bias,
        max_position_embeddings=config.max_position_embeddings,
        bos_token_id=None,  # Marian has none: the decoder starts with the padding id
        pad_token_id=config.pad_token_id,
        eos_token_id=config.eos_token_id,
        decoder_start_token_id=config.decoder_start_token_id,
        **SHARED_DEPARTURES,
    )


def check_ties_and_positions(state_dict: dict, d_model: int) -> None:
    """One embedding matrix everywhere (Section 3.4), and position tables that are the halves-layout sinusoids of
    Section 3.5's frequencies, position 0 first."""
    shared = state_dict["model.shared.weight"]
    for key in TIED_KEYS:
        if key in state_dict and not torch.equal(state_dict[key], shared):
            raise ConversionError(f"{key} differs from model.shared.weight; expected one tied embedding matrix")
    back = torch.argsort(halves_to_interleaved(d_model))
    for key in POSITION_KEYS:
        if key in state_dict:
            table = state_dict[key]
            expected = sinusoids(table.shape[0], d_model)[:, back].to(table)
            if not torch.allclose(table, expected, atol=1e-6, rtol=0):
                raise ConversionError(
                    f"{key} is not the sinusoid table; expected Section 3.5's sinusoids from position 0, "
                    "sines then cosines (the halves layout)"
                )


def convert_state_dict(state_dict: dict, d_model: int) -> dict:
    """Marian's weights under our names, the residual stream's axis permuted (see the module's docstring); the
    tied copies and position tables are checked and dropped, `final_logits_bias` becomes the LM head's bias."""
    check_ties_and_positions(state_dict, d_model)
    permutation = halves_to_interleaved(d_model)
    converted = {}
    for key, tensor in state_dict.items():
        if key in TIED_KEYS or key in POSITION_KEYS:
            continue
        if key == "model.shared.weight":
            converted[key] = tensor[:, permutation]
        elif key == "final_logits_bias":
            converted["lm_head.bias"] = tensor.reshape(-1)  # (1, vocab) in Marian; over tokens, not the stream
        else:
            name, new_tensor = _convert_layer_weight(key, tensor, permutation)
            converted[name] = new_tensor
    return converted


def _convert_layer_weight(key: str, tensor: torch.Tensor, permutation: torch.Tensor) -> tuple[str, torch.Tensor]:
    weight = layer_weight(key, "model.", ENCODER_LAYER, DECODER_LAYER)
    if weight is None:
        raise ConversionError(f"unknown weight {key}; expected only the weights of a MarianMTModel")
    stack, index, (name, role), kind = weight
    if role == READS:
        tensor = tensor[:, permutation] if kind == "weight" else tensor  # a bias is on the output side, not d_model
    else:
        tensor = tensor[permutation]  # rows of W^O and W2, their biases, LayerNorm's weight and bias
    return f"model.{stack}.layers.{index}.{name}.{kind}", tensor


def check_tokenizer(tokenizer, config) -> None:
    """The tokenizer must fit the model: one vocabulary, ids inside the embedding, the same padding and end ids."""
    if getattr(tokenizer, "separate_vocabs", False):
        raise ConversionError("the tokenizer has separate_vocabs=True; expected one vocabulary (Section 3.4)")
    if len(tokenizer) > config.vocab_size:
        raise ConversionError(
            f"the tokenizer has {len(tokenizer)} tokens; expected at most vocab_size ({config.vocab_size})"
        )
    for name in ("pad_token_id", "eos_token_id"):
        if getattr(tokenizer, name) != getattr(config, name):
            raise ConversionError(
                f"the tokenizer's {name} is {getattr(tokenizer, name)}; expected the model's, {getattr(config, name)}"
            )


def convert_marian(model: MarianMTModel, tokenizer) -> VaswaniForConditionalGeneration:
    """A VaswaniForConditionalGeneration computing exactly what `model` computes (float32 rounding aside), after
    the checks of `check_marian_config` and `check_tokenizer`. Its generation config is the paper's (Section 6.1)
    with Marian's tokens that are never generated (`bad_words_ids`: the padding id) and `forced_eos_token_id`."""
    check_marian_config(model.config)
    check_tokenizer(tokenizer, model.config)
    state_dict = {key: tensor.detach() for key, tensor in model.state_dict().items()}
    logits_bias = state_dict.get("final_logits_bias")
    has_logits_bias = logits_bias is not None and bool(logits_bias.any())  # a zero bias is the paper's: none
    if not has_logits_bias:
        state_dict.pop("final_logits_bias", None)
    weights = convert_state_dict(state_dict, model.config.d_model)
    converted = converted_model(
        vaswani_config(model.config, has_logits_bias), weights, "every weight of a MarianMTModel"
    )
    _carry_generation_settings(model.generation_config, converted.generation_config)
    return converted


def _carry_generation_settings(marian: GenerationConfig, ours: GenerationConfig) -> None:
    for name in ("bad_words_ids", "forced_eos_token_id"):
        if getattr(marian, name, None) is not None:
            setattr(ours, name, getattr(marian, name))


def load_marian(name_or_path: str, revision: str | None = None) -> tuple[MarianMTModel, object]:
    """A MarianMTModel and its tokenizer from a folder or Hub id, refusing a checkpoint whose weights do not all
    load: unreadable files, tensors of the wrong shape (`check_marian_weights`, before transformers' loader), unknown
    weights (which MarianMTModel would drop) or missing ones (left random)."""
    config = AutoConfig.from_pretrained(name_or_path, revision=revision)
    check_marian_config(config)
    check_marian_weights(config, marian_weight_shapes(name_or_path, revision), name_or_path)
    model, info = MarianMTModel.from_pretrained(
        name_or_path, revision=revision, output_loading_info=True, ignore_mismatched_sizes=True
    )
    missing = [key for key in info["missing_keys"] if key not in (*POSITION_KEYS, "final_logits_bias")]
    problems = {
        "unknown weights": sorted(info["unexpected_keys"]),
        "missing weights": sorted(missing),
        "weights of the wrong shape": sorted(_mismatch(key) for key in info["mismatched_keys"]),
    }
    for problem, keys in problems.items():
        if keys:
            raise ConversionError(
                f"{name_or_path} has {len(keys)} {problem} ({', '.join(keys[:5])}); "
                "expected exactly the weights of a MarianMTModel"
            )
    return model.eval(), AutoTokenizer.from_pretrained(name_or_path, revision=revision)


def _mismatch(key) -> str:
    """transformers' record of a tensor of the wrong shape, (name, stored shape, model's shape), as words."""
    if isinstance(key, tuple) and len(key) == 3:
        name, stored, expected = key
        return f"{name} is {tuple(stored)}, expected {tuple(expected)}"
    return str(key)


def marian_weight_files(name_or_path: str, revision: str | None = None) -> list[Path]:
    """The files MarianMTModel.from_pretrained reads the weights from, chosen as it chooses them: model.safetensors,
    else the shards of model.safetensors.index.json, else pytorch_model.bin (or the shards of its index). A Hub id's
    files are fetched into the cache, where from_pretrained then finds them."""
    folder = Path(name_or_path).expanduser()
    for name in (SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME, WEIGHTS_NAME, WEIGHTS_INDEX_NAME):
        if folder.is_dir():
            found = folder / name if (folder / name).is_file() else None
        else:
            found = cached_file(name_or_path, name, revision=revision, _raise_exceptions_for_missing_entries=False)
            found = Path(found) if found else None
        if found is None:
            continue
        if not name.endswith(".index.json"):
            return [found]
        if folder.is_dir():
            shards = sorted({folder / shard for shard in _index_map(found).values()})
        else:
            shards, _ = get_checkpoint_shard_files(name_or_path, str(found), revision=revision)
            shards = [Path(shard) for shard in shards]
        missing = [shard.name for shard in shards if not shard.is_file()]
        if missing:
            raise ConversionError(f"{found} names shards that are missing ({', '.join(missing[:5])}); expected all")
        return shards
    raise ConversionError(
        f"{name_or_path} has no weights; expected {SAFE_WEIGHTS_NAME} or {WEIGHTS_NAME} (or a sharded index) as "
        "MarianMTModel.save_pretrained writes them"
    )


def _index_map(index: Path) -> dict:
    names = read_json(index).get("weight_map")
    if not isinstance(names, dict) or not names:
        raise ConversionError(f"{index} has no weight_map naming tensors and their shards; expected the index")
    return names


def marian_weight_shapes(name_or_path: str, revision: str | None = None) -> dict[str, tuple[tuple[int, ...], Path]]:
    """Every stored tensor's shape and file, read without transformers' loader and without the tensors' data:
    safetensors headers (a truncated file is named), or a pytorch_model.bin read weights-only on the meta device (a
    pickle that needs code is refused, by name, and nothing in it is run)."""
    shapes = {}
    for path in marian_weight_files(name_or_path, revision):
        if path.suffix == ".safetensors":
            with open_weights(path) as weights:
                shapes.update({key: (tuple(weights.get_slice(key).get_shape()), path) for key in weights.keys()})
            continue
        state_dict = load_weights_only(
            path,
            ConversionError,
            expected=f"a MarianMTModel's {WEIGHTS_NAME}: a state dict of tensors, as torch.save writes it",
            remedy=(
                "If you trust its source, convert it to safetensors there "
                "(MarianMTModel.from_pretrained(folder, weights_only=False).save_pretrained(folder) writes "
                f"{SAFE_WEIGHTS_NAME}) and convert that"
            ),
            map_location="meta",
        )
        if not isinstance(state_dict, dict) or not all(isinstance(t, torch.Tensor) for t in state_dict.values()):
            raise ConversionError(f"{path} holds no state dict of tensors; expected a MarianMTModel's {WEIGHTS_NAME}")
        shapes.update({key: (tuple(tensor.shape), path) for key, tensor in state_dict.items()})
    return shapes


def check_marian_weights(config, shapes: dict[str, tuple[tuple[int, ...], Path]], name_or_path: str) -> None:
    """Every stored tensor of a MarianMTModel's must have the shape its config.json implies; the first that does not
    is refused by name, with both shapes and its file. (The model is built on the meta device, which costs nothing.)
    Tensors the model does not have are left to `load_marian`'s check after loading."""
    with torch.device("meta"):
        expected = MarianMTModel(config).state_dict()
    described = (
        f"{name_or_path}'s config.json (vocab_size {config.vocab_size}, d_model {config.d_model}, "
        f"encoder_ffn_dim {config.encoder_ffn_dim}, {config.encoder_layers}+{config.decoder_layers} layers, "
        f"max_position_embeddings {config.max_position_embeddings})"
    )
    for key, (shape, path) in shapes.items():
        if key in expected and tuple(expected[key].shape) != shape:
            raise ConversionError(
                f"{path}: tensor {key!r} is {shape} but {described} implies {tuple(expected[key].shape)}; expected "
                "the weights of the model its config describes"
            )


def convert_marian_checkpoint(
    name_or_path: str, output_dir: str | Path, revision: str | None = None
) -> VaswaniForConditionalGeneration:
    """`load_marian`, `convert_marian`, then the model and the tokenizer saved into `output_dir` (new, empty or an
    earlier converted model, replaced whole). Returns the converted model."""

    def load_and_convert():
        model, tokenizer = load_marian(name_or_path, revision)
        return convert_marian(model, tokenizer), tokenizer

    return convert_checkpoint(output_dir, load_and_convert, inputs=[name_or_path])
