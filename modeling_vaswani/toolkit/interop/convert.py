"""The converters' one path, load -> check -> convert -> save (`convert_checkpoint`), and what their sources share.

Each source (marian.py, fairseq.py) writes only its reading: its loader, its checks, its configuration and the map of
its weights' names. What the two share is here: the layer modules' names (transformers' MarianMTModel keeps fairseq's,
`ENCODER_LAYER`, `DECODER_LAYER`), the departures both carry over (`SHARED_DEPARTURES`), the building of the model from
converted weights (`converted_model`) and the saving into a checked output folder.
"""

import re
from collections.abc import Callable, Iterable
from pathlib import Path

from ...configuration_vaswani import VaswaniConfig
from ...modeling_vaswani import VaswaniForConditionalGeneration
from ..outputs import CONVERTED, check_output_folder, released_on_failure, save_pretrained


class ConversionError(ValueError):
    """A checkpoint that does not fit the paper's network up to the recorded departures; the message names why."""


# What both sources depart from the paper in: attention projections with biases, and LayerNorm at torch's default
# epsilon (MarianMT's and fairseq's nn.LayerNorm(d_model) keep it; tensor2tensor's, the configuration's, is 1e-6).
SHARED_DEPARTURES = {"attention_bias": True, "layer_norm_eps": 1e-5}

READS, WRITES = "reads", "writes"  # how a module meets the residual stream: its input, or its output, is d_model
ENCODER_LAYER = {  # the source's module in a layer -> ours, and which side of it is the residual stream
    "self_attn.q_proj": ("self_attn.w_q", READS),
    "self_attn.k_proj": ("self_attn.w_k", READS),
    "self_attn.v_proj": ("self_attn.w_v", READS),
    "self_attn.out_proj": ("self_attn.w_o", WRITES),
    "self_attn_layer_norm": ("self_attn_sublayer.norm", WRITES),
    "fc1": ("feed_forward.w1", READS),
    "fc2": ("feed_forward.w2", WRITES),
    "final_layer_norm": ("feed_forward_sublayer.norm", WRITES),
}
DECODER_LAYER = {
    **ENCODER_LAYER,
    "encoder_attn.q_proj": ("cross_attn.w_q", READS),
    "encoder_attn.k_proj": ("cross_attn.w_k", READS),  # reads the encoder's output, the encoder's residual stream
    "encoder_attn.v_proj": ("cross_attn.w_v", READS),
    "encoder_attn.out_proj": ("cross_attn.w_o", WRITES),
    "encoder_attn_layer_norm": ("cross_attn_sublayer.norm", WRITES),
}
LAYER_KEY = r"(encoder|decoder)\.layers\.(\d+)\.(.+)\.(weight|bias)"  # a layer's weight: stack, index, module, kind


def layer_weight(key: str, prefix: str, encoder: dict, decoder: dict) -> tuple[str, str, object, str] | None:
    """(stack, index, the stack's map's entry for the module, kind) of a layer's weight named `key` (`prefix` then
    LAYER_KEY), or None when `key` is not one of the modules `encoder` (or `decoder`) maps."""
    match = re.fullmatch(re.escape(prefix) + LAYER_KEY, key)
    modules = (encoder if match.group(1) == "encoder" else decoder) if match else {}
    if not match or match.group(3) not in modules:
        return None
    stack, index, module, kind = match.groups()
    return stack, index, modules[module], kind


def departures(config: VaswaniConfig) -> dict:
    """The departures from the paper's options that a converted configuration sets, by name."""
    paper = VaswaniConfig()
    names = ("attention_bias", "layer_norm_eps", "activation_function", "final_logits_bias", "position_embedding_type")
    return {name: getattr(config, name) for name in names if getattr(config, name) != getattr(paper, name)}


def converted_model(config: VaswaniConfig, weights: dict, expected: str) -> VaswaniForConditionalGeneration:
    """The model of `config` holding `weights` (our names; the tied copies are filled in here), every weight
    accounted for: weights of the wrong shape, missing or left over are refused, saying what was `expected`."""
    model = VaswaniForConditionalGeneration(config)
    weights.update({target: weights[source] for target, source in model._tied_weights_keys.items()})
    try:
        missing, unexpected = model.load_state_dict(weights, strict=False)
    except RuntimeError as error:  # weights of the wrong shape
        raise ConversionError(f"{error}; expected the shapes of the checkpoint's own settings") from None
    if missing or unexpected:
        raise ConversionError(
            f"the checkpoint lacks {sorted(missing)[:5]} (and has {sorted(unexpected)[:5]} left over); expected "
            f"{expected}"
        )
    return model.eval()


@released_on_failure()  # a refusal after the output check leaves no lock in a process that goes on
def convert_checkpoint(
    output_dir: str | Path, load_and_convert: Callable[[], tuple], inputs: Iterable[str | Path] = ()
) -> VaswaniForConditionalGeneration:
    """The output folder checked (new, empty or an earlier converted model, replaced whole, and none of the source's
    `inputs`) before any work, then `load_and_convert()` (the source's reading, checks and conversion: the model and
    its tokenizer), both saved into `output_dir`. Returns the model."""
    check_output_folder(output_dir, CONVERTED, inputs=inputs)
    model, tokenizer = load_and_convert()
    save_pretrained(output_dir, CONVERTED, model, tokenizer)
    return model
