"""A Vaswani checkpoint as ONNX graphs (https://onnx.ai), in the layout the Hugging Face ONNX tools and transformers.js
read, and the folder that holds them.

The folder: onnx/encoder_model.onnx (input_ids, attention_mask -> last_hidden_state) and onnx/decoder_model_merged.onnx
(input_ids, encoder_attention_mask, encoder_hidden_states, past_key_values.N.{decoder,encoder}.{key,value},
use_cache_branch -> logits, present.N.{decoder,encoder}.{key,value}), the names optimum writes for Marian models and
transformers.js (src/models.js, session_config.js) feeds; with `quantize="int8"`, onnx/*_quantized.onnx beside them
(transformers.js's name for its q8 variant), onnxruntime's dynamic int8 weights. Beside onnx/: the stock MarianMT
export's config, generation settings and tokenizer (interop/marian_export.py: what transformers.js reads; its refusals
are this export's), and ONNX_FILE, the settings the onnxruntime engine reads (translation/onnxruntime.py) with each
file's size and SHA-256 and a digest of its own content, which the one opener checks (`checkpoints.validate_onnx`).

How: torch.onnx's dynamo exporter (torch.export) traces the model's own encoder and decoder, so the graphs compute
what the checkpoint computes (Equation 1 as `eager_attention_forward`, the portable form: no fused attention op that
onnxruntime-web may lack). The decoder is traced twice, without a cache (the first step: the encoder-decoder
attention's keys and values computed from encoder_hidden_states) and with one (every later step), and the two graphs
are merged under one If node on use_cache_branch, as optimum merges them (`merged_decoder`, written by hand: the
merge is optimum's, which cannot install beside this package, docs/interop.md). Each past input's shape is
[batch_size, heads, length, head width] with the heads and the width as numbers: transformers.js builds the first
step's empty cache from those shapes, a dimension named batch_size taken as the batch and any other name as 0.

onnx and onnxruntime are an optional extra: importing this module without them raises an ImportError that says how
to install them.
"""

import copy
import hashlib
import json
import tempfile
from pathlib import Path

import torch
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

from ...modeling_vaswani import VaswaniForConditionalGeneration, sinusoids
from ...search_vaswani import max_output_length
from ..checkpoints import (
    ONNX_DECODER,
    ONNX_ENCODER,
    ONNX_FILE,
    ONNX_FOLDER,
    SETTINGS_DIGEST,
    load_model_and_tokenizer,
    quantized_name,
    settings_digest,
)
from ..outputs import TOKENIZER_OUTPUT, Output, check_output_folder, check_writable, released_on_failure, staged_folder
from ..web import LISTING, PAGE_FILES, write_web_page
from .marian_export import check_marian_exportable, export_marian_model

try:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
except ImportError as error:
    raise ImportError(
        f"onnx or onnxruntime is not installed ({error}); the ONNX export and the onnxruntime engine need them: "
        "pip install modeling_vaswani[onnx]"
    ) from error

# What the export folder holds: an earlier export may be replaced, anything else is refused.
ONNX_OUTPUT = (*TOKENIZER_OUTPUT, ONNX_FOLDER, "config.json", "generation_config.json", ONNX_FILE)
ONNX_OUTPUT += (*PAGE_FILES, LISTING)  # with --web
EXPORTED = Output("vaswani-export-onnx", "output folder", None, ONNX_OUTPUT)
QUANTIZATIONS = ("int8",)
# Symbolic dimensions by optimum's names; transformers.js takes "batch_size" for the batch (see the module's doc).
BATCH, SOURCE = "batch_size", "encoder_sequence_length"
TARGET, PAST = "decoder_sequence_length", "past_sequence_length"
KINDS = [(part, kind) for part in ("decoder", "encoder") for kind in ("key", "value")]


class ExportError(ValueError):
    """A model or setting that the ONNX export refuses: the message names the setting and what was expected (what
    a stock Marian config cannot hold, which transformers.js reads, is refused by `check_marian_exportable`)."""


def position_rows(config) -> int:
    """The positions the graphs know: a translation (source + 50, Section 6.1) of the longest source accepted."""
    return max_output_length(config.max_position_embeddings)


def past_names(layers: int, prefix: str = "past_key_values") -> list[str]:
    return [f"{prefix}.{layer}.{part}.{kind}" for layer in range(layers) for part, kind in KINDS]


class EncoderGraph(torch.nn.Module):
    """The encoder stack (Section 3.1), input_ids and attention_mask in, its output out."""

    def __init__(self, model: VaswaniForConditionalGeneration):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model.model.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


class DecoderGraph(torch.nn.Module):
    """One decoding step of the whole decoder and the output layer: logits, and each layer's cache after it (its
    self-attention's keys and values, the new tokens' appended; its encoder-decoder attention's). `with_past`: the
    cache of the steps before is given (past_key_values, four tensors a layer as KINDS orders them)."""

    def __init__(self, model: VaswaniForConditionalGeneration, with_past: bool):
        super().__init__()
        self.model, self.with_past = model, with_past

    def forward(self, input_ids, encoder_attention_mask, encoder_hidden_states, past=()):
        config = self.model.config
        cache = EncoderDecoderCache(DynamicCache(config=config), DynamicCache(config=config))
        for layer in range(config.decoder_layers if self.with_past else 0):
            key, value, encoder_key, encoder_value = past[4 * layer : 4 * layer + 4]
            cache.self_attention_cache.update(key, value, layer)
            cache.cross_attention_cache.update(encoder_key, encoder_value, layer)
            cache.is_updated[layer] = True  # read, not computed again (decoding_vaswani.keys_and_values)
        outputs = self.model(
            attention_mask=encoder_attention_mask,
            encoder_outputs=(encoder_hidden_states,),
            decoder_input_ids=input_ids,
            past_key_values=cache,
            use_cache=True,
        )
        presents = []
        for layer in range(config.decoder_layers):
            for part in (cache.self_attention_cache, cache.cross_attention_cache):
                presents += [part.layers[layer].keys, part.layers[layer].values]
        return (outputs.logits, *presents)


def traced(module: torch.nn.Module, arguments: tuple, names: list[str], outputs: list[str], shapes: tuple):
    """`module` exported by torch.onnx's dynamo exporter, as a ModelProto with its weights."""
    program = torch.onnx.export(
        module.eval(), arguments, dynamo=True, input_names=names, output_names=outputs, dynamic_shapes=shapes,
        verbose=False,
    )  # fmt: skip
    return program.model_proto


def encoder_model(model: VaswaniForConditionalGeneration) -> "onnx.ModelProto":
    ids = torch.full((3, 5), model.config.eos_token_id)  # batch and length over 1: torch.export fixes 0 and 1
    shapes = ({0: BATCH, 1: SOURCE}, {0: BATCH, 1: SOURCE})
    return traced(EncoderGraph(model), (ids, torch.ones_like(ids)), ["input_ids", "attention_mask"],
                  ["last_hidden_state"], shapes)  # fmt: skip


def decoder_models(model: VaswaniForConditionalGeneration) -> tuple["onnx.ModelProto", "onnx.ModelProto"]:
    """The decoder without a cache and with one, on examples whose every dynamic size is over 1."""
    config = model.config
    batch, source, target, past = 3, 5, 2, 4
    head = config.d_model // config.num_heads
    ids = torch.full((batch, target), config.eos_token_id)
    mask = torch.ones((batch, source), dtype=torch.int64)
    states = torch.zeros((batch, source, config.d_model))
    inputs = ["input_ids", "encoder_attention_mask", "encoder_hidden_states"]
    outputs = ["logits", *past_names(config.decoder_layers, "present")]
    shapes = ({0: BATCH, 1: TARGET}, {0: BATCH, 1: SOURCE}, {0: BATCH, 1: SOURCE})
    first = traced(DecoderGraph(model, with_past=False), (ids, mask, states), inputs, outputs, shapes)
    cache = [
        torch.zeros((batch, config.num_heads, past if part == "decoder" else source, head))
        for _ in range(config.decoder_layers)
        for part, _ in KINDS
    ]
    cache_shapes = tuple({0: BATCH, 2: PAST if part == "decoder" else SOURCE} for _ in cache[::4] for part, _ in KINDS)
    names = [*inputs, *past_names(config.decoder_layers)]
    later = traced(DecoderGraph(model, with_past=True), (ids, mask, states, tuple(cache)), names, outputs,
                   (*shapes, cache_shapes))  # fmt: skip
    return first, later


def merged_decoder(first: "onnx.ModelProto", later: "onnx.ModelProto", layers: int) -> "onnx.ModelProto":
    """One graph with both decoders as the branches of an If node on use_cache_branch (a bool of shape [1]): false
    runs `first`, true `later`. The encoder-decoder attention's keys and values do not change while decoding, so the
    later branch gives an empty constant for each encoder present, as optimum's merge gives one for the outputs its
    decoder with past lacks (shape [0, heads, 1, width]); its readers (transformers.js, translation/onnxruntime.py)
    keep the first step's. Passing the pasts through instead cost a copy of the whole encoder cache a step. The
    weights are stored once, in the outer graph."""
    initializers, by_content = [], {}

    def branch(model: "onnx.ModelProto", prefix: str) -> "onnx.GraphProto":
        graph = onnx.GraphProto()
        graph.CopyFrom(model.graph)
        renamed = {}
        for tensor in graph.initializer:
            key = (tensor.data_type, tuple(tensor.dims), hashlib.sha256(tensor.SerializeToString()).hexdigest())
            if key not in by_content:
                by_content[key] = f"{prefix}{tensor.name}"
                shared = onnx.TensorProto()
                shared.CopyFrom(tensor)
                shared.name = by_content[key]
                initializers.append(shared)
            renamed[tensor.name] = by_content[key]
        del graph.initializer[:]
        outer = {value.name for value in graph.input}
        for node in graph.node:  # every value made inside the branch gets the branch's prefix: one name, one value
            for index, name in enumerate(node.input):
                node.input[index] = renamed.get(name, name)
            for index, name in enumerate(node.output):
                if name and name not in outer:
                    renamed[name] = f"{prefix}{name}"
                    node.output[index] = renamed[name]
        for value in graph.output:
            value.name = renamed.get(value.name, value.name)
        del graph.input[:]
        del graph.value_info[:]
        graph.name = prefix.strip("/")
        return graph

    no_cache, with_cache = branch(first, "first/"), branch(later, "later/")
    encoder_presents = {name for name in past_names(layers, "present") if ".encoder." in name}
    for value in with_cache.output:
        if value.name.startswith("later/present.") and value.name[len("later/") :] in encoder_presents:
            dims = [each.dim_value for each in value.type.tensor_type.shape.dim]  # [batch, heads, source, width]
            empty = onnx.helper.make_tensor("empty", value.type.tensor_type.elem_type, [0, dims[1], 1, dims[3]], [])
            traced_name, value.name = value.name, value.name + "/empty"
            kept = [node for node in with_cache.node if list(node.output) != [traced_name]]  # the exporter's copy
            del with_cache.node[:]
            with_cache.node.extend([*kept, onnx.helper.make_node("Constant", [], [value.name], value=empty)])
    use_cache = onnx.helper.make_tensor_value_info("use_cache_branch", onnx.TensorProto.BOOL, [1])
    outputs = [value.name.split("/", 1)[1] for value in no_cache.output]
    node = onnx.helper.make_node(
        "If", ["use_cache_branch"], outputs, then_branch=with_cache, else_branch=no_cache, name="use_cache_branch"
    )
    graph = onnx.helper.make_graph(
        [node], "decoder_model_merged", [*later.graph.input, use_cache], list(first.graph.output), initializers
    )
    merged = onnx.helper.make_model(graph, opset_imports=later.opset_import, ir_version=later.ir_version)
    for value in merged.graph.output:  # present.N.decoder's length is past + new in one branch, new in the other
        if value.name.startswith("present.") and ".decoder." in value.name:
            value.type.tensor_type.shape.dim[2].Clear()
            value.type.tensor_type.shape.dim[2].dim_param = "present_sequence_length"
    return merged


def named_dimensions(model: "onnx.ModelProto") -> "onnx.ModelProto":
    """Every symbolic dimension of the inputs and outputs by optimum's names (the exporter renames some after its
    own symbols): the batch BATCH, a source length SOURCE, a decoder length TARGET, a past PAST."""
    for value in (*model.graph.input, *model.graph.output):
        dims = value.type.tensor_type.shape.dim
        if not dims or value.name == "use_cache_branch":
            continue
        dims[0].dim_param = BATCH
        if value.name in ("input_ids", "attention_mask") and model.graph.name != "decoder_model_merged":
            dims[1].dim_param = SOURCE
        elif value.name in ("encoder_attention_mask", "encoder_hidden_states", "last_hidden_state"):
            dims[1].dim_param = SOURCE
        elif value.name in ("input_ids", "logits"):
            dims[1].dim_param = TARGET
        elif ".encoder." in value.name:
            dims[2].dim_param = SOURCE
        elif value.name.startswith("past_key_values."):
            dims[2].dim_param = PAST
    return model


def write_onnx(
    model: VaswaniForConditionalGeneration, tokenizer, output_dir: Path, quantize: str | None = None, **facts
) -> None:
    """Into `output_dir` (a staged folder of the outputs room): onnx/ (the encoder and the merged decoder, checked by
    `onnx.checker`; with `quantize` their int8 variants), the stock MarianMT export's config.json,
    generation_config.json and tokenizer (interop/marian_export.py), and ONNX_FILE (with `facts`): the settings,
    every other file's size and SHA-256, and its own content's digest (`checkpoints.settings_digest`)."""
    check_marian_exportable(model.config)
    model = copy.deepcopy(model).eval()  # the caller's model keeps its attention and its table
    model.set_attn_implementation("eager")  # Equation 1 as plain ONNX operators (see the module's doc)
    rows = position_rows(model.config)
    for stack in (model.model.encoder, model.model.decoder):
        # torch.export keeps PositionalEncoding's lookup, which ends with its table: the table the graphs hold
        # reaches every position that the longest source accepted (max_position_embeddings tokens) and its
        # translation (Section 6.1's source + 50) may take, as the CTranslate2 export's does.
        stack.positional_encoding.table = sinusoids(rows, model.config.d_model)
    folder = Path(output_dir) / ONNX_FOLDER
    folder.mkdir()
    encoder = encoder_model(model)
    encoder.graph.name = "encoder_model"
    first, later = decoder_models(model)
    layers = model.config.decoder_layers
    graphs = {ONNX_ENCODER: encoder, ONNX_DECODER: merged_decoder(first, later, layers)}
    if quantize == "int8":
        # Each decoder is quantized before the merge: the quantizer leaves alone the weights that a branch of an If
        # reads from the graph around it, where the merge puts them.
        graphs[quantized_name(ONNX_ENCODER)] = quantized(encoder)
        graphs[quantized_name(ONNX_DECODER)] = merged_decoder(quantized(first), quantized(later), layers)
    for name, graph in graphs.items():
        graph = named_dimensions(graph)
        onnx.checker.check_model(graph, full_check=True)
        onnx.save(graph, folder / name)
    export_marian_model(model, tokenizer, output_dir, weights=False)
    # Every file written, the graphs and the Marian files beside them, so that the opener names any one changed.
    written = sorted(path for path in Path(output_dir).rglob("*") if path.is_file())
    files = {path.relative_to(output_dir).as_posix(): recorded(path) for path in written}
    config = model.config
    settings = {
        **facts,
        "quantized": quantize,
        "max_position_embeddings": config.max_position_embeddings,
        "position_rows": rows,
        "vocab_size": config.vocab_size,
        "decoder_layers": config.decoder_layers,
        "num_heads": config.num_heads,
        "head_width": config.d_model // config.num_heads,
        "d_model": config.d_model,
        "files": files,
    }
    settings[SETTINGS_DIGEST] = settings_digest(settings)
    (Path(output_dir) / ONNX_FILE).write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")


def quantized(model: "onnx.ModelProto") -> "onnx.ModelProto":
    """`model` with onnxruntime's dynamic int8 weights (`quantize_dynamic`, which reads and writes files)."""
    with tempfile.TemporaryDirectory() as scratch:
        source, target = Path(scratch, "float32.onnx"), Path(scratch, "int8.onnx")
        onnx.save(model, source)
        quantize_dynamic(source, target, weight_type=QuantType.QInt8)
        return onnx.load(target)


def recorded(path: Path) -> dict:
    """A file's size and SHA-256, which the opener checks (`checkpoints.validate_onnx`)."""
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return {"bytes": path.stat().st_size, "sha256": digest.hexdigest()}


@released_on_failure()  # a refusal after the output check leaves no lock in a process that goes on
def export_onnx(
    name_or_path: str,
    output_dir: str | Path,
    quantize: str | None = None,
    revision: str | None = None,
    web: bool = False,
) -> Path:
    """Exports a Vaswani checkpoint (folder or Hub id) into `output_dir` (new, empty or an earlier export, replaced
    whole once the new one is complete): `write_onnx`'s files, and with `web` the browser page beside them
    (toolkit/web)."""
    output_dir = Path(output_dir)
    if quantize is not None and quantize not in QUANTIZATIONS:
        raise ExportError(f"quantize {quantize!r} is unknown; expected one of {', '.join(QUANTIZATIONS)}")
    check_output_folder(output_dir, EXPORTED, inputs=[name_or_path])
    model, tokenizer = load_model_and_tokenizer(name_or_path, revision=revision)
    if not isinstance(model, VaswaniForConditionalGeneration):
        raise ExportError(f"{name_or_path} holds a {type(model).__name__}; expected a Vaswani checkpoint")
    check_marian_exportable(model.config)
    # Both decoders' weights pass through memory at once, the merged file holds them once (the variant a quarter)
    weights = 4 * sum(p.numel() for p in model.parameters())
    check_writable(output_dir, need_bytes=weights + (weights // 4 if quantize else 0))
    with staged_folder(output_dir, EXPORTED) as staged:
        write_onnx(model, tokenizer, staged, quantize, exported_from=str(name_or_path))
        if web:
            write_web_page(staged)
    return output_dir
