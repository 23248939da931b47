"""The networks the speed benchmark compares, one set of random weights in all: the shapes, our model, its MarianMT
copy (the package's MarianMT export, interop/marian_export.py's `to_marian`), CTranslate2's conversion of that copy
and our own CTranslate2 export."""

import copy
from dataclasses import dataclass
from pathlib import Path

import torch

from modeling_vaswani.configuration_vaswani import VaswaniConfig

IMPLEMENTATIONS = ("vaswani", "marian", "ctranslate2", "vaswani-ct2", "vaswani-ct2-int8")

# CTranslate2 folders and the compute type each runs in: converted from the Marian copy, and our own export
# (vaswani-export-ctranslate2's converter) in float32 and int8. The others are torch models.
CTRANSLATE2 = {"ctranslate2": None, "vaswani-ct2": None, "vaswani-ct2-int8": "int8"}

PEERS = ("marian", "ctranslate2", "vaswani-ct2", "vaswani-ct2-int8")


BASE = VaswaniConfig.base()  # Table 3's shapes live in the configuration


@dataclass(frozen=True)
class Shapes:
    """The network (the paper's base model with a 32000-token vocabulary) and the batches of the four phases."""

    vocab_size: int = 32000
    d_model: int = BASE.d_model
    layers: int = BASE.encoder_layers  # in each stack
    heads: int = BASE.num_heads
    d_ff: int = BASE.d_ff
    batch: int = 32  # training and generation
    source_length: int = 32
    target_length: int = 32  # training
    new_tokens: int = 32  # generation and latency


MODELS = ("base", "big")


def model_shapes(model: str = "base", batch: int = 32) -> Shapes:
    """Table 3's `base` or `big` network (the configuration's presets) at `batch` sentences for training and
    generation. The CPU comparison uses the base model at batch 32; a GPU needs larger batches to be kept busy."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}: expected one of {', '.join(MODELS)}")
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    config = getattr(VaswaniConfig, model)()
    return Shapes(
        d_model=config.d_model, layers=config.encoder_layers, heads=config.num_heads, d_ff=config.d_ff, batch=batch
    )


# ---------------------------------------------------------------------------------------------------------------------
# The models: ours, the Marian copy, the CTranslate2 conversions
# ---------------------------------------------------------------------------------------------------------------------


def vaswani_config(shapes: Shapes):
    return VaswaniConfig(
        vocab_size=shapes.vocab_size,
        d_model=shapes.d_model,
        encoder_layers=shapes.layers,
        decoder_layers=shapes.layers,
        num_heads=shapes.heads,
        d_ff=shapes.d_ff,
    )


def word_level_tokenizer(names: list[str]):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocabulary = {name: index for index, name in enumerate(names)}
    backend = Tokenizer(models.WordLevel(vocabulary, unk_token="<unk>"))
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def export_ctranslate2(marian, folder: Path) -> Path:
    """Converts `marian` with CTranslate2's transformers converter (float32 weights); the result holds exactly its
    weights, the same token ids naming the same rows.

    The converter always drops the last vocabulary row, taking it for the `<pad>` that the transformers port of
    Marian models appends (CTranslate2 starts decoding from a zero embedding instead). So the exported copy gets one
    extra zero row, named `<pad>`, which the converter drops. The vocabulary is our special tokens at their ids
    (`<s>` 0, pad 1, renamed `<blank>` to leave `<pad>` to the extra row, `</s>` 2, `<unk>` 3), then t4, t5, ...
    """
    from ctranslate2.converters import TransformersConverter
    from transformers import MarianMTModel

    config = copy.deepcopy(marian.config)
    vocab_size = config.vocab_size
    config.vocab_size = config.decoder_vocab_size = vocab_size + 1
    padded = MarianMTModel(config)
    state = marian.state_dict()
    for name, tensor in padded.state_dict().items():
        if tensor.shape != state[name].shape:  # one longer along the vocabulary: the copy's values, then a zero
            grown = torch.zeros_like(tensor)
            grown[tuple(map(slice, state[name].shape))] = state[name]
            state[name] = grown
    padded.load_state_dict(state)
    names = ["<s>", "<blank>", "</s>", "<unk>", *(f"t{i}" for i in range(4, vocab_size)), "<pad>"]
    source = folder / "marian-for-ctranslate2"
    padded.save_pretrained(source)
    word_level_tokenizer(names).save_pretrained(source)
    target = folder / "ctranslate2"
    TransformersConverter(str(source)).convert(str(target), quantization="float32", force=True)
    return target


def ctranslate2_unavailable(device: str, dtype: str = "float32") -> str | None:
    """Why CTranslate2 cannot run on `device` in `dtype`, or None if it can."""
    try:
        import ctranslate2
    except ImportError:
        return "ctranslate2 is not installed (pip install -e '.[ctranslate2]')"
    device_type = device.partition(":")[0]
    if device_type == "cuda" and ctranslate2.get_cuda_device_count() == 0:
        return "this ctranslate2 build sees no CUDA device"
    if dtype not in ctranslate2.get_supported_compute_types(device_type):
        return f"CTranslate2 does not compute in {dtype} on this {device_type}"
    return None


def export_ours(model, folder: Path, quantization: str) -> Path:
    """Our model through vaswani-export-ctranslate2's converter, its tokens named as `export_ctranslate2` names the
    Marian copy's (`<s>`, `<pad>`, `</s>`, `<unk>`, t4, ...)."""
    from modeling_vaswani.toolkit.interop.ctranslate2 import write_export

    names = ["<s>", "<pad>", "</s>", "<unk>", *(f"t{i}" for i in range(4, model.config.vocab_size))]
    target = folder / f"vaswani-ct2-{quantization}"
    # A copy: CTranslate2's int8 quantization scales the arrays it is given in place, and the exporter's share memory
    # with the model's weights, so the Marian copy made after it would hold those scaled weights, not ours.
    write_export(copy.deepcopy(model), names, target, quantization)
    return target


def prepare_models(shapes: Shapes, folder: Path, seed: int, with_ctranslate2: bool) -> dict[str, Path]:
    """Saves our model with random weights (`seed`), its Marian copy and, if asked, the CTranslate2 conversion of the
    copy and our own export in float32 and int8."""
    from modeling_vaswani.modeling_vaswani import VaswaniForConditionalGeneration
    from modeling_vaswani.toolkit.interop.marian_export import to_marian

    torch.manual_seed(seed)
    model = VaswaniForConditionalGeneration(vaswani_config(shapes))
    folders = {"vaswani": folder / "vaswani", "marian": folder / "marian"}
    model.save_pretrained(folders["vaswani"])
    if with_ctranslate2:
        folders["vaswani-ct2"] = export_ours(model, folder, "float32")
        folders["vaswani-ct2-int8"] = export_ours(model, folder, "int8")
    marian = to_marian(model)
    del model
    marian.save_pretrained(folders["marian"])
    if with_ctranslate2:
        folders["ctranslate2"] = export_ctranslate2(marian, folder)
    return folders


def load_torch_model(implementation: str, folder: Path, device: str):
    if implementation == "vaswani":
        from modeling_vaswani.modeling_vaswani import VaswaniForConditionalGeneration as model_class
    else:
        from transformers import MarianMTModel as model_class
    return model_class.from_pretrained(folder).to(device)


# ---------------------------------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------------------------------


def token_batch(batch: int, length: int, vocab_size: int, eos_token_id: int, seed: int) -> torch.Tensor:
    """Random ordinary tokens (ids >= 4, past the special ones), each row ending in </s> as a tokenizer would."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, vocab_size, (batch, length), generator=generator)
    ids[:, -1] = eos_token_id
    return ids
