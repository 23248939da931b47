"""A folder written by vaswani-export-onnx, run by onnxruntime (https://onnxruntime.ai) behind the part of a model's
interface that `translation.translate.translate` uses.

Decoding is the payload's own: Section 6.1's beam search (`search_vaswani.beam_search`, beam 4, GNMT's length
penalty, at most source length + 50 tokens a sentence, a sentence whose search is over leaving the batch) and the
one-beam loop (`decoding_vaswani.greedy_search`) call a step object at each step; `OnnxSteps` is that object, each
step one run of onnx/decoder_model_merged.onnx with the cache the step before returned. So the search, its ranking
and its stopping are the ones PyTorch runs, and only the network's arithmetic is onnxruntime's.

onnxruntime is an optional extra: importing this module without it raises an ImportError that says how to install
it.
"""

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

try:
    import onnxruntime
except ImportError as error:
    raise ImportError(
        f"onnxruntime is not installed ({error}); the onnxruntime engine needs it: pip install modeling_vaswani[onnx]"
    ) from error
import numpy as np
import onnx
import torch
from transformers import GenerationConfig
from transformers.generation import EosTokenCriteria, LogitsProcessorList, StoppingCriteriaList
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqLMOutput

from ...decoding_vaswani import Recorder, Shortlist, greedy_search, sentence_rows
from ...guidance_vaswani import TargetPrefix, check_target_prefix
from ...search_vaswani import MaxLengthPerSentence, TopK, beam_search, max_output_length
from ..checkpoints import CheckpointError, OnnxExport, validate_onnx
from .arguments import optional_count
from .request import EXPORTED_OPTIONS, ExportedModel

KINDS = [(part, kind) for part in ("decoder", "encoder") for kind in ("key", "value")]


def session(path: Path, graph: bytes | None = None) -> "onnxruntime.InferenceSession":
    """An onnxruntime session on the CPU for the graph in `path` (or `graph`, made from it), or CheckpointError
    naming the file where onnxruntime cannot load it. One thread: the engine runs a search a thread, several at once
    (`OnnxRuntimeModel`), where a pool of onnxruntime's own would share each step (and, spinning between steps,
    slowed the search's PyTorch operations 2-3x: benchmarks/real_text.py, docs/interop.md)."""
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    try:
        return onnxruntime.InferenceSession(graph or str(path), options, providers=["CPUExecutionProvider"])
    except Exception as error:  # onnxruntime's own error types (Fail, InvalidGraph, ...) share no base of theirs
        raise CheckpointError(
            f"{path}: onnxruntime {onnxruntime.__version__} cannot load it ({error}); expected a graph written by "
            "vaswani-export-onnx (export the checkpoint again?)"
        ) from error


SHORTLIST_WIDTH = "shortlist_width"  # step_graph's input: how many tokens a row it ranks (decoding_vaswani.Shortlist)
NORMALIZED = "shortlist_normalized"  # step_graph's input: the shortlist's log-probabilities (else the logits)
SHORTLIST = ("shortlist_log_probs", "shortlist_tokens")


def block_width(vocab_size: int) -> int | None:
    """The width of the blocks `step_graph` ranks a row's tokens by first: the smallest divisor of the vocabulary
    from 32 to 128 (8,000 tokens: blocks of 32), None where it has none (its TopK then ranks whole rows)."""
    return next((width for width in range(32, 129) if vocab_size % width == 0 and vocab_size > width), None)


def widest_shortlist(vocab_size: int) -> int:
    """The most tokens a row `step_graph` can rank: one a block where there are blocks, else all but one (a
    shortlist as wide as the vocabulary is the logits)."""
    width = block_width(vocab_size)
    return vocab_size // width if width else vocab_size - 1


def int64_constant(name: str, value) -> "onnx.NodeProto":
    """An ONNX Constant node giving `value` as an int64 tensor named `name` (shapes, axes, indices)."""
    tensor = onnx.numpy_helper.from_array(np.array(value, dtype=np.int64), name)
    return onnx.helper.make_node("Constant", [], [name], value=tensor)


def shortlist_nodes(vocab_size: int, normalized: bool = True, outputs: tuple[str, str] = SHORTLIST) -> list:
    """ONNX nodes giving each row's `shortlist_width` likeliest tokens (`outputs`: values, tokens) from `logits`
    (rows, positions, vocabulary), with their log-probabilities where `normalized` (LogSoftmax first), else their
    logits (the same tokens: log-softmax only shifts a row). Then a TopK in two stages where the vocabulary divides
    into blocks (`block_width`): the k likeliest tokens lie in the k blocks whose maxima are highest (a token outside
    them is below k block maxima), so the blocks are ranked by their maxima, and only those k blocks' tokens ranked one
    by one: the same k values as one TopK over the row, in a third of the time (444 rows of 8,000 tokens, k 8, one
    thread: 10.9 against 17.4 ms with the LogSoftmax), since onnxruntime's TopK over a long row is slow and its
    ReduceMax fast. Written here as no library offers it (onnxruntime has no such kernel; the ONNX operators are
    public)."""
    prefix = f"shortlist/{'log_probs' if normalized else 'logits'}/"
    node = onnx.helper.make_node
    ranked = f"{prefix}ranked" if normalized else "logits"
    first = [node("LogSoftmax", ["logits"], [ranked], axis=-1)] if normalized else []
    block = block_width(vocab_size)
    if block is None:
        return [*first, node("TopK", [ranked, SHORTLIST_WIDTH], list(outputs))]

    def constant(name: str, value) -> onnx.NodeProto:
        return int64_constant(f"{prefix}{name}", value)

    def name(*names: str) -> list[str]:
        return [f"{prefix}{each}" for each in names]

    return [
        *first,
        constant("blocks", [0, 0, vocab_size // block, block]),
        constant("last", [-1]),
        constant("across", [1, 1, 1, block]),
        constant("flat", [0, 0, -1]),
        constant("block", block),
        node("Reshape", [ranked, *name("blocks")], name("by_block")),
        node("ReduceMax", name("by_block", "last"), name("maxima"), keepdims=0),
        node("TopK", [*name("maxima"), SHORTLIST_WIDTH], name("_", "best_blocks")),
        node("Unsqueeze", name("best_blocks", "last"), name("best_blocks_")),
        node("Expand", name("best_blocks_", "across"), name("gather")),
        node("GatherElements", name("by_block", "gather"), name("in_blocks"), axis=2),
        node("Reshape", name("in_blocks", "flat"), name("candidates")),
        node("TopK", [*name("candidates"), SHORTLIST_WIDTH], [outputs[0], *name("place")]),
        node("Div", name("place", "block"), name("nth_block")),
        node("Mod", name("place", "block"), name("within")),
        node("GatherElements", name("best_blocks", "nth_block"), name("its_block"), axis=2),
        node("Mul", name("its_block", "block"), name("block_start")),
        node("Add", name("block_start", "within"), [outputs[1]]),
    ]


def shortlist_switch(vocab_size: int) -> onnx.NodeProto:
    """An If on the `NORMALIZED` input between the two `shortlist_nodes`: greedy search reads only each row's
    likeliest token, which the logits rank as log-softmax does (its argmax over the logits, decoding_vaswani's
    next_token), so its steps skip the LogSoftmax over the vocabulary (7% of a greedy step at 36 rows of 8,000
    tokens); onnxruntime runs every node of a graph whatever outputs are asked, so the branch is chosen by a flag."""

    def branch(normalized: bool) -> onnx.GraphProto:
        outputs = tuple(f"shortlist/{'log_probs' if normalized else 'logits'}/{name}" for name in ("values", "tokens"))
        return onnx.helper.make_graph(
            shortlist_nodes(vocab_size, normalized, outputs),
            f"shortlist_{'log_probs' if normalized else 'logits'}",
            [],
            [
                onnx.helper.make_tensor_value_info(outputs[0], onnx.TensorProto.FLOAT, None),
                onnx.helper.make_tensor_value_info(outputs[1], onnx.TensorProto.INT64, None),
            ],
        )

    return onnx.helper.make_node(
        "If", [NORMALIZED], list(SHORTLIST), then_branch=branch(True), else_branch=branch(False)
    )


def grouped_cross_attention(branch: "onnx.GraphProto", path: Path, layers: int, heads: int) -> None:
    """Rewrites the merged decoder's cached branch (one new token a row) so that its encoder-decoder attention
    (Section 3.2.3) reads keys and values of one row a sentence, past_key_values.N.encoder.* (sentences, heads,
    source, width), for b = rows / sentences consecutive rows of each (a sentence's hypotheses): identical to the
    export's except that Equation 1's two products take a sentence's b queries as one matrix, (b, width) by its
    (width, source) keys, where the export takes b products of one query by the same keys repeated b times. b = 1 is
    the export's own computation. A beam search's cross-attention cache is then a quarter as large: four times less
    to copy when sentences leave, and the products cost less (300 test2016 lines, beam 4: docs/interop.md).

    The export's pattern (a Transpose of the keys into a MatMul with the queries, the weights into a MatMul with the
    values) is found by the inputs' names; a graph without it exactly once a layer is refused, naming the file, so
    that a change in torch.onnx's output fails here rather than computing something else."""
    node = onnx.helper.make_node
    consumers = {}
    for each in branch.node:
        for name in each.input:
            consumers.setdefault(name, []).append(each)

    def only(name: str, op: str) -> onnx.NodeProto:
        found = [each for each in consumers.get(name, []) if each.op_type == op]
        if len(found) != 1:
            raise CheckpointError(
                f"{path}: {len(found)} {op} nodes read {name} where the export's encoder-decoder attention has one; "
                "expected the merged decoder vaswani-export-onnx writes (export the checkpoint again?)"
            )
        return found[0]

    # (rows, heads, 1, x) <-> (sentences, b, heads, x): the same memory; 0 keeps the input's last dimension.
    shared = [
        node("Shape", ["past_key_values.0.encoder.key"], ["grouped/sentences"], end=1),
        int64_constant("grouped/rest", [-1, heads, 0]),
        node("Concat", ["grouped/sentences", "grouped/rest"], ["grouped/by_sentence"], axis=0),
        int64_constant("grouped/by_row", [-1, heads, 1, 0]),
    ]
    before, after = {}, {}  # id(a node) -> the nodes that go just before it, or just after it
    for layer in range(layers):
        scores = only(only(f"past_key_values.{layer}.encoder.key", "Transpose").output[0], "MatMul")
        mixed = only(f"past_key_values.{layer}.encoder.value", "MatMul")
        for product in (scores, mixed):
            prefix = f"grouped/{layer}/{product.name}/"
            by_row_in, by_row_out = product.input[0], product.output[0]
            product.input[0], product.output[0] = f"{prefix}in", f"{prefix}out"
            before[id(product)] = [
                node("Reshape", [by_row_in, "grouped/by_sentence"], [f"{prefix}in_by_sentence"]),
                node("Transpose", [f"{prefix}in_by_sentence"], [f"{prefix}in"], perm=[0, 2, 1, 3]),
            ]
            after[id(product)] = [
                node("Transpose", [f"{prefix}out"], [f"{prefix}out_by_sentence"], perm=[0, 2, 1, 3]),
                node("Reshape", [f"{prefix}out_by_sentence", "grouped/by_row"], [by_row_out]),
            ]
    nodes = list(shared)
    for each in branch.node:
        nodes += [*before.get(id(each), []), each, *after.get(id(each), [])]
    del branch.node[:]
    branch.node.extend(nodes)


def step_graph(path: Path, settings: dict) -> bytes:
    """The merged decoder as the engine runs it, for the export's `settings` (vaswani_onnx.json): identical to the
    export's except that its cached branch attends over one row of encoder keys and values a sentence
    (`grouped_cross_attention`), and that it also gives each row's
    `shortlist_width` likeliest next tokens and their log-probabilities, or their logits where `NORMALIZED` is false
    (`shortlist_switch` on its logits), so that a step may hand the search (rows, width) numbers rather than (rows,
    vocabulary): the logits' copy out of the If and the session, and the search's log-softmax and top-k over them,
    were a quarter of a translation's time (4.63 -> 4.16 s, 300 test2016 lines, beam 4, 2,000-token batches). The
    export itself stays as transformers.js reads it; one session, so the weights are held once (the two branches as
    graphs of their own were as fast and held the decoder's weights twice: +177 MB for a base-sized decoder of 194
    MB)."""
    model = onnx.load(str(path))
    if "logits" not in [output.name for output in model.graph.output]:
        raise CheckpointError(
            f"{path}: a graph without a logits output; expected the merged decoder vaswani-export-onnx writes "
            "(export the checkpoint again?)"
        )
    cached = [node for node in model.graph.node if node.op_type == "If" and list(node.input) == ["use_cache_branch"]]
    if len(cached) != 1:
        raise CheckpointError(
            f"{path}: {len(cached)} If nodes on use_cache_branch; expected the merged decoder vaswani-export-onnx "
            "writes (export the checkpoint again?)"
        )
    branch = next(attribute.g for attribute in cached[0].attribute if attribute.name == "then_branch")
    grouped_cross_attention(branch, path, settings["decoder_layers"], settings["num_heads"])
    model.graph.node.append(shortlist_switch(settings["vocab_size"]))
    model.graph.input.extend([
        onnx.helper.make_tensor_value_info(SHORTLIST_WIDTH, onnx.TensorProto.INT64, [1]),
        onnx.helper.make_tensor_value_info(NORMALIZED, onnx.TensorProto.BOOL, [1]),
    ])  # fmt: skip
    model.graph.output.extend([
        onnx.helper.make_tensor_value_info(SHORTLIST[0], onnx.TensorProto.FLOAT, None),
        onnx.helper.make_tensor_value_info(SHORTLIST[1], onnx.TensorProto.INT64, None),
    ])  # fmt: skip
    return model.SerializeToString()


def rows_of(array: np.ndarray, rows: torch.Tensor) -> np.ndarray:
    """`array[rows]` by torch's index_select on the same memory: on every thread, where numpy's indexing takes one
    (the cache moves of 300 test2016 sentences at 2,000-token batches, beam 4: 0.33 against 0.57 s)."""
    return torch.from_numpy(array).index_select(0, rows).numpy()


class OnnxSteps:
    """The decoding loop's step object (as `decoding_vaswani.DecoderSteps` is for PyTorch): each call runs the merged
    decoder (`step_graph`) on the hypotheses' last tokens with the cache, `reorder` moves the self-attention cache to
    the chosen beams, `select` keeps the sentences still searching. A step gives its rows' `shortlist` likeliest
    tokens (decoding_vaswani.Shortlist) where that is set, with their log-probabilities where `normalized` (a beam
    ranks by them; greedy search reads only the tokens), else the logits. The encoder output is one row a sentence
    (`encoder_outputs`, which the one-beam loop counts sentences by); the first step computes a sentence's alike rows
    once (`computed_rows`), and the encoder-decoder attention's keys and values it computes are kept one row a
    sentence, as the step graph's cached branch reads them (`grouped_cross_attention`; the later steps' encoder
    presents are empty, interop/onnx.py's `merged_decoder`)."""

    cache = None  # no PyTorch cache to return

    def __init__(
        self,
        decoder,
        states: np.ndarray,
        mask: np.ndarray,
        layers: int,
        shape,
        shortlist: int | None,
        normalized: bool,
    ):
        self.decoder, self.layers, self.heads, self.width = decoder, layers, *shape
        self.encoder_outputs = BaseModelOutput(last_hidden_state=torch.from_numpy(states))
        self.mask = mask
        self.shortlist = shortlist
        self.shortlist_width = np.array([shortlist or 1], dtype=np.int64)
        self.normalized = np.array([normalized])
        self.row_mask = None  # the encoder mask, one row a computed row of the step
        self.past = None  # name -> array, KINDS a layer
        self.order = None  # the rows the self-attention cache is to take before the next step
        presents = [f"present.{layer}.{part}.{kind}" for layer in range(layers) for part, kind in KINDS]
        ranked = list(SHORTLIST) if shortlist else ["logits"]
        self.outputs = {False: ranked + presents, True: ranked + [name for name in presents if ".decoder." in name]}

    def encoder_feeds(self, rows: int, cached: bool) -> dict[str, np.ndarray]:
        """The encoder mask, one row a computed row: repeated when the rows change (the first step, a sentence
        leaving), not each step; the encoder states, which only the first step reads (the cached branch attends over
        the keys and values computed from them), one row a computed row there and one a sentence after."""
        states = self.encoder_outputs.last_hidden_state.numpy()
        if self.row_mask is None or len(self.row_mask) != rows:
            self.row_mask = np.repeat(self.mask, rows // len(self.mask), axis=0)
        if not cached and rows != len(states):
            states = np.repeat(states, rows // len(states), axis=0)
        return {"encoder_attention_mask": self.row_mask, "encoder_hidden_states": states}

    def follow(self) -> None:
        """Takes the self-attention cache's rows that `reorder` and `select` have asked since the last step."""
        if self.order is not None:
            self.past.update(
                {name: rows_of(value, self.order) for name, value in self.past.items() if ".decoder." in name}
            )
            self.order = None

    def computed_rows(self, sequences: torch.LongTensor) -> tuple[torch.LongTensor, int]:
        """The rows a step computes, and how many rows each stands for: at a search's start a sentence's hypotheses
        are alike (the start token, a beam's k copies of it), computed once and repeated; after it, every row's last
        token."""
        if self.past is not None:
            return sequences[:, -1:], 1
        each = sequences.shape[0] // len(self.mask)  # a sentence's hypotheses, consecutive rows
        alike = each > 1 and bool((sequences.view(len(self.mask), each, -1) == sequences[::each, None]).all())
        return (sequences[::each].contiguous(), each) if alike else (sequences, 1)

    def __call__(self, sequences: torch.LongTensor) -> Seq2SeqLMOutput | Shortlist:
        sentences, cached = len(self.mask), self.past is not None
        ids, repeats = self.computed_rows(sequences)
        if cached:
            self.follow()
        feeds = {**self.encoder_feeds(len(ids), cached), "use_cache_branch": np.array([cached])}
        feeds["input_ids"], feeds[SHORTLIST_WIDTH], feeds[NORMALIZED] = (
            ids.numpy(),
            self.shortlist_width,
            self.normalized,
        )
        if cached:
            feeds.update(self.past)
        else:
            empty = np.zeros((len(ids), self.heads, 0, self.width), dtype=np.float32)
            feeds.update({f"past_key_values.{layer}.{p}.{k}": empty for layer in range(self.layers) for p, k in KINDS})
            self.past = {}
        names = self.outputs[cached]
        results = dict(zip(names, self.decoder.run(names, feeds), strict=True))
        for name in (name for name in names if name.startswith("present.")):
            value = results[name]
            if ".encoder." in name and len(value) != sentences:  # the first step's, computed a row: one a sentence
                value = np.ascontiguousarray(value[:: len(value) // sentences])
            elif ".decoder." in name and repeats > 1:
                value = np.repeat(value, repeats, axis=0)
            self.past[name.replace("present", "past_key_values")] = value
        if self.shortlist:
            values, tokens = (
                torch.from_numpy(results[name][:, -1]).repeat_interleave(repeats, 0) for name in SHORTLIST
            )
            return Shortlist(values if self.normalized[0] else None, tokens)
        return Seq2SeqLMOutput(logits=torch.from_numpy(results["logits"][:, -1:]).repeat_interleave(repeats, 0))

    def reorder(self, rows: torch.Tensor) -> None:
        """The self-attention cache follows the chosen beams; the encoder-decoder one is the same for every row of a
        sentence, and a beam continues a beam of its own sentence. The rows are taken at the next step (`follow`), so
        that a step whose sentences also leave (`select`) moves that cache once."""
        self.order = rows if self.order is None else self.order[rows]

    def select(self, sentences: torch.Tensor, rows_per_sentence: int) -> None:
        if self.past is not None:
            self.reorder(sentence_rows(sentences, rows_per_sentence))
            self.past.update(
                {name: rows_of(value, sentences) for name, value in self.past.items() if ".encoder." in name}
            )
        self.encoder_outputs = BaseModelOutput(last_hidden_state=self.encoder_outputs.last_hidden_state[sentences])
        self.mask = self.mask[sentences.numpy()]
        self.row_mask = None


class OnnxConfig:
    """What the translating code reads from a model's config: its input limit."""

    def __init__(self, max_position_embeddings: int):
        self.max_position_embeddings = max_position_embeddings


class OnnxRuntimeModel(ExportedModel):
    """An ONNX export behind the part of a model's interface that `translation.translate.translate` uses: `generate`
    and `generate_nbest` (ExportedModel's, over `generate_checked_nbest`, for a request checked already) on a padded
    batch of token ids, with Section 6.1's decoding (the payload's search, see the module's doc). The folder's files
    are checked first (`checkpoints.validate_onnx`, unless an `export` it gave is passed); `quantized` runs the int8
    variant (onnx/*_quantized.onnx). `threads`: how many searches run at once, each over its share of a batch's
    sentences and on one onnxruntime thread (None: torch's thread count at each call, `searches`). One thread a search,
    where onnxruntime's threads would share each step, lets one search's Python work run beside another's network:
    300 test2016 lines, beam 4, 2,000-token batches, 2 cores: 4.22-4.35 -> 3.49-3.57 s, greedy 0.91 -> 0.85 s; a
    single sentence's search ran as fast on one thread as on two (5.48 against 5.46 s for 60 sentences, beam 4): the
    same translations (docs/interop.md). The searches are the model's own pool's (`pool`), shared by every call, so
    that a caller with the next batch ready (`batches_in_flight`: translate's loop, several server requests) keeps
    every search busy while a batch's slowest share ends."""

    device = torch.device("cpu")
    engine = "onnxruntime"  # engines.OnnxRuntime holds it
    options = (*EXPORTED_OPTIONS, "searches")  # how many searches a batch is dealt to (`nbest_hypotheses`)

    def __init__(
        self, folder: str | Path, export: OnnxExport | None = None, quantized: bool = False, threads: int | None = None
    ):
        self.export = export or validate_onnx(folder, quantized)
        settings, generation = self.export.settings, self.export.generation_config
        self.threads = threads
        self.pools, self.pools_lock = {}, threading.Lock()  # `pool`
        self.encoder = session(self.export.encoder)
        self.decoder = session(self.export.decoder, step_graph(self.export.decoder, settings))
        self.config = OnnxConfig(settings["max_position_embeddings"])
        self.position_rows = settings["position_rows"]
        self.layers, self.shape = settings["decoder_layers"], (settings["num_heads"], settings["head_width"])
        self.vocab_size = settings["vocab_size"]
        self.generation_config = generation
        self.num_beams = generation.num_beams
        self.length_penalty = generation.length_penalty
        self.pad_token_id = generation.pad_token_id
        self.eos_token_id = generation.eos_token_id

    def eval(self) -> "OnnxRuntimeModel":
        return self

    @property
    def searches(self) -> int:
        """How many searches a batch is dealt to: `threads`, else torch's thread count when the batch comes (which a
        command's --threads, or its measured choice, sets)."""
        return self.threads or torch.get_num_threads()

    def nbest_hypotheses(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        nbest: int = 1,
        paper_decoding: bool = True,
        num_beams: int | None = None,
        max_new_tokens: int | None = None,
        target_prefix: list[list[int]] | None = None,
        searches: int | None = None,
    ) -> list[list[tuple[list[int], float | None]]]:
        """Each row's `nbest` best hypotheses, best first: their output token ids (`</s>` included where generated)
        and the score the search ranked them by, log P(Y|X) / lp(Y) with GNMT's lp (None greedy: one hypothesis a
        sentence, nothing ranked). `nbest` is not checked against
        the beam here: a translating entry's request was checked once by its front end
        (`request.TranslationRequest.check`), a direct call by `generate_nbest`.

        The sentences are dealt to `searches` searches (None: the model's `searches`; translate's loop asks 1 for a
        batch that others follow, `translate.each_generated`), every n-th to each (a batch comes sorted by length, so
        each gets its share of long and short ones), each given only the columns its own sentences use; they run on
        the model's pool (`pool`) where it has several searches."""
        if not paper_decoding:
            raise ValueError(
                "paper_decoding=False: the onnxruntime engine decodes as Section 6.1 (the payload's search, which "
                "ranks by GNMT's penalty); expected paper_decoding=True, or the checkpoint on the PyTorch engine for "
                "transformers' own generate()"
            )
        if attention_mask is None:
            attention_mask = input_ids.ne(self.pad_token_id)
        source_lengths = attention_mask.sum(dim=-1)
        longest = int(source_lengths.max())
        if longest > self.config.max_position_embeddings:
            raise ValueError(
                f"a source of {longest} tokens is longer than the export accepts (max_position_embeddings "
                f"{self.config.max_position_embeddings}); expected at most that many tokens"
            )
        limits = 1 + max_output_length(source_lengths, max_new_tokens or None)  # the start token counted
        if target_prefix is not None:
            target_prefix = check_target_prefix(target_prefix, self.vocab_size, (limits - 1).tolist())
        threads = self.searches
        searches = optional_count("searches", searches) or threads
        shares = [list(range(first, len(input_ids), searches)) for first in range(searches)]
        shares = [share for share in shares if share]

        def search(share: list[int]):
            # The share's columns up to the last any of its sentences uses: its own padding, whichever side it is on.
            width = int(attention_mask[share].any(dim=0).nonzero().max()) + 1
            prefixes = None if target_prefix is None else [target_prefix[row] for row in share]
            ids, mask = input_ids[share, :width], attention_mask[share, :width]
            return self.hypotheses(ids, mask, nbest, num_beams, limits[share], prefixes)

        if threads == 1 and searches == 1:
            return search(shares[0])
        rows = [None] * len(input_ids)
        pool = self.pool(threads)
        for share, found in zip(shares, [pool.submit(search, share) for share in shares], strict=True):
            for row, hypotheses in zip(share, found.result(), strict=True):
                rows[row] = hypotheses
        return rows

    def pool(self, searches: int) -> ThreadPoolExecutor:
        """The model's `searches` threads, made once for each count a call asks and shared by every call since:
        one call's shares wait behind another's rather than run beside them on the same cores."""
        with self.pools_lock:
            if searches not in self.pools:
                self.pools[searches] = ThreadPoolExecutor(searches, thread_name_prefix="onnxruntime-search")
            return self.pools[searches]

    @property
    def batches_in_flight(self) -> int:
        """How many batches a caller may hand over at once (translate's loop, `translate.each_generated`): two a
        search where several run, one running and one waiting, so that a search that ends a batch takes the next at
        once; a batch that as many follow is run whole by one search (its steps larger than its shares' would be),
        the last ones dealt to every search, so that none waits at the end for the slowest."""
        return 2 * self.searches if self.searches > 1 else 1

    def hypotheses(self, input_ids, attention_mask, nbest, num_beams, limits, target_prefix):
        """`nbest_hypotheses` of one search: `limits`, each sentence's longest output (the start token counted);
        `target_prefix`, checked already."""
        sequences, scores = self.search(input_ids, attention_mask, nbest, num_beams, limits, target_prefix)
        rows = []
        for number in range(input_ids.shape[0]):
            hypotheses = []
            for index in range(number * nbest, (number + 1) * nbest):
                ids = sequences[index, 1:].tolist()
                ids = ids[: ids.index(self.eos_token_id) + 1] if self.eos_token_id in ids else ids
                hypotheses.append((ids, None if scores is None else float(scores[index])))
            rows.append(hypotheses)
        return rows

    def search(self, input_ids, attention_mask, nbest, num_beams, limits, target_prefix):
        """The search's sequences (`nbest` a sentence, the start token first) and their scores (None greedy)."""
        beams = num_beams or self.num_beams
        processors = LogitsProcessorList()
        if target_prefix is not None:
            processors.append(TargetPrefix(target_prefix, self.device))
        criteria = StoppingCriteriaList([MaxLengthPerSentence(limits), EosTokenCriteria(self.eos_token_id)])
        ids, mask = input_ids.numpy().astype(np.int64), attention_mask.numpy().astype(np.int64)
        states = self.encoder.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        config = GenerationConfig(
            num_beams=beams,
            num_return_sequences=nbest,
            length_penalty=self.length_penalty if beams > 1 else None,  # greedy ranks nothing
            early_stopping=False,
            max_length=int(limits.max()),
            pad_token_id=self.pad_token_id,
            eos_token_id=self.eos_token_id,
        )
        # Each row's likeliest tokens, as many as the beam's candidates a sentence (TopK.of: 2k), greedy's first; the
        # whole distribution where a target prefix rules tokens out, or the step graph ranks fewer (widest_shortlist).
        selection = TopK.of(config)
        shortlist = selection.candidates if beams > 1 else 1
        shortlist = None if processors or shortlist > widest_shortlist(self.vocab_size) else shortlist
        steps = OnnxSteps(self.decoder, states, mask, self.layers, self.shape, shortlist, beams > 1)
        rows = max(beams, nbest)
        start = torch.full((len(ids) * rows, 1), self.generation_config.decoder_start_token_id, dtype=torch.long)
        recorder = Recorder(GenerationConfig(), steps.encoder_outputs)  # nothing recorded step by step
        if beams == 1:
            sequences = greedy_search(start, processors, criteria, config, steps, recorder, False, None, True)
            return sequences, None
        config.output_scores = config.return_dict_in_generate = True  # the finished hypotheses' scores
        output = beam_search(start, processors, criteria, config, steps, recorder, False, True, selection)
        return output.sequences, output.sequences_scores
