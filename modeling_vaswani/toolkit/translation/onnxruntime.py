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

import copy
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
from .request import ExportedModel

KINDS = [(part, kind) for part in ("decoder", "encoder") for kind in ("key", "value")]


def session(path: Path, threads: int | None, graph: bytes | None = None) -> "onnxruntime.InferenceSession":
    """An onnxruntime session on the CPU for the graph in `path` (or `graph`, made from it), or CheckpointError
    naming the file where onnxruntime cannot load it."""
    options = onnxruntime.SessionOptions()
    # onnxruntime's threads spin, waiting for work, after each run: here the search's PyTorch ops run between the
    # steps on the same cores, and the spinning slowed them 2-3x (benchmarks/real_text.py, docs/interop.md).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if threads:
        options.intra_op_num_threads = threads
    try:
        return onnxruntime.InferenceSession(graph or str(path), options, providers=["CPUExecutionProvider"])
    except Exception as error:  # onnxruntime's own error types (Fail, InvalidGraph, ...) share no base of theirs
        raise CheckpointError(
            f"{path}: onnxruntime {onnxruntime.__version__} cannot load it ({error}); expected a graph written by "
            "vaswani-export-onnx (export the checkpoint again?)"
        ) from error


SHORTLIST_WIDTH = "shortlist_width"  # the step graphs' input: how many tokens a row they rank (decoding.Shortlist)
SHORTLIST = ("shortlist_log_probs", "shortlist_tokens")


def step_graphs(path: Path) -> dict[bool, bytes]:
    """The merged decoder's two branches (interop/onnx.py's `merged_decoder`: True with a cache, False the first
    step) as graphs of their own, identical to the branches except:
    - no If node around them: onnxruntime copies every output of a branch out of its If at each run (0.6 of the
      decoder's 3.3 s on 300 test2016 lines, beam 4, 2,000-token batches);
    - each also gives each row's `shortlist_width` likeliest tokens and their log-probabilities (LogSoftmax, TopK,
      ONNX's ops), so a step may hand the search (rows, width) numbers rather than (rows, vocabulary).
    The export itself stays as transformers.js reads it; this is the engine's reading of it."""
    model = onnx.load(str(path))
    nodes = list(model.graph.node)
    if len(nodes) != 1 or nodes[0].op_type != "If":
        raise CheckpointError(
            f"{path}: a graph of {[node.op_type for node in nodes][:5]}; expected the merged decoder "
            "vaswani-export-onnx writes, one If node on use_cache_branch (export the checkpoint again?)"
        )
    merged, branches = nodes[0], {attribute.name: attribute.g for attribute in nodes[0].attribute}
    return {
        with_past: branch_graph(model, merged, branches[name])
        for with_past, name in ((True, "then_branch"), (False, "else_branch"))
    }


def branch_graph(model: "onnx.ModelProto", merged: "onnx.NodeProto", branch: "onnx.GraphProto") -> bytes:
    """One branch of the merged decoder as a model: its nodes, the outer inputs and weights it reads, its outputs
    under the If's names, and the shortlist after its logits."""
    renamed = dict(zip((output.name for output in branch.output), merged.output, strict=True))
    nodes = [copy_node(node, renamed) for node in branch.node]
    read = {name for node in nodes for name in node.input}
    logits = renamed[branch.output[0].name]
    nodes += [
        onnx.helper.make_node("LogSoftmax", [logits], ["shortlist/log_probs"], axis=-1),
        onnx.helper.make_node("TopK", ["shortlist/log_probs", SHORTLIST_WIDTH], list(SHORTLIST), axis=-1),
    ]
    outputs = list(model.graph.output)  # the If's outputs are the merged graph's
    outputs += [onnx.helper.make_tensor_value_info(SHORTLIST[0], onnx.TensorProto.FLOAT, None)]
    outputs += [onnx.helper.make_tensor_value_info(SHORTLIST[1], onnx.TensorProto.INT64, None)]
    inputs = [value for value in model.graph.input if value.name in read]
    inputs.append(onnx.helper.make_tensor_value_info(SHORTLIST_WIDTH, onnx.TensorProto.INT64, [1]))
    graph = onnx.helper.make_graph(
        nodes,
        f"{model.graph.name}/{branch.name}",
        inputs,
        outputs,
        [weight for weight in model.graph.initializer if weight.name in read] + list(branch.initializer),
        value_info=branch.value_info,
    )
    made = onnx.helper.make_model(graph, opset_imports=model.opset_import, ir_version=model.ir_version)
    return made.SerializeToString()


def copy_node(node: "onnx.NodeProto", renamed: dict[str, str]) -> "onnx.NodeProto":
    node = copy.deepcopy(node)
    node.input[:] = [renamed.get(name, name) for name in node.input]
    node.output[:] = [renamed.get(name, name) for name in node.output]
    return node


def rows_of(array: np.ndarray, rows: torch.Tensor) -> np.ndarray:
    """`array[rows]` by torch's index_select on the same memory: on every thread, where numpy's indexing takes one
    (the cache moves of 300 test2016 sentences at 2,000-token batches, beam 4: 0.33 against 0.57 s)."""
    return torch.from_numpy(array).index_select(0, rows).numpy()


class OnnxSteps:
    """The decoding loop's step object (as `decoding_vaswani.DecoderSteps` is for PyTorch): each call runs a step
    graph (`step_graphs`: the first step's, then the cached one's) on the hypotheses' last tokens with the cache,
    `reorder` moves the self-attention cache to the chosen beams, `select` keeps the sentences still searching. A
    step gives its rows' `shortlist` likeliest tokens (decoding_vaswani.Shortlist) where it is set, else the logits.
    The encoder output is one row a sentence (`encoder_outputs`, which the one-beam loop counts sentences by),
    repeated for its hypotheses at the first step and kept so until a sentence leaves; the encoder-decoder
    attention's keys and values, computed at the first step, are kept (the later steps' encoder presents are empty,
    interop/onnx.py's `merged_decoder`; an export that passed them through gives the same tensors)."""

    cache = None  # no PyTorch cache to return

    def __init__(self, steps: dict, states: np.ndarray, mask: np.ndarray, layers: int, shortlist: int | None):
        self.steps, self.layers = steps, layers
        self.encoder_outputs = BaseModelOutput(last_hidden_state=torch.from_numpy(states))
        self.mask = mask
        self.shortlist = shortlist
        self.width = np.array([shortlist or 1], dtype=np.int64)
        self.repeated = None  # the encoder feeds, repeated for the rows of a step
        self.past = None  # name -> array, KINDS a layer
        presents = [f"present.{layer}.{part}.{kind}" for layer in range(layers) for part, kind in KINDS]
        ranked = list(SHORTLIST) if shortlist else ["logits"]
        self.outputs = {False: ranked + presents, True: ranked + [name for name in presents if ".decoder." in name]}
        self.inputs = {cached: {value.name for value in steps[cached].get_inputs()} for cached in (False, True)}

    def encoder_feeds(self, rows: int) -> dict[str, np.ndarray]:
        """The encoder states and mask, one row a hypothesis: repeated when the rows change (the first step, a
        sentence leaving), not each step."""
        if self.repeated is None or len(self.repeated["encoder_hidden_states"]) != rows:
            states = self.encoder_outputs.last_hidden_state.numpy()
            repeats = rows // states.shape[0]
            self.repeated = {
                "encoder_attention_mask": np.repeat(self.mask, repeats, axis=0),
                "encoder_hidden_states": np.repeat(states, repeats, axis=0),
            }
        return self.repeated

    def __call__(self, sequences: torch.LongTensor) -> Seq2SeqLMOutput | Shortlist:
        rows, cached = sequences.shape[0], self.past is not None
        feeds = {**self.encoder_feeds(rows), SHORTLIST_WIDTH: self.width, **(self.past or {})}
        feeds["input_ids"] = sequences[:, -1:].numpy() if cached else sequences.numpy()
        feeds = {name: value for name, value in feeds.items() if name in self.inputs[cached]}
        names = self.outputs[cached]
        results = dict(zip(names, self.steps[cached].run(names, feeds), strict=True))
        self.past = {
            **(self.past or {}),
            **{name.replace("present", "past_key_values"): value for name, value in results.items() if "." in name},
        }
        if self.shortlist:
            log_probs, tokens = (torch.from_numpy(results[name][:, -1]) for name in SHORTLIST)
            return Shortlist(log_probs, tokens)
        return Seq2SeqLMOutput(logits=torch.from_numpy(results["logits"][:, -1:]))

    def reorder(self, rows: torch.Tensor) -> None:
        """The self-attention cache follows the chosen beams; the encoder-decoder one is the same for every row of a
        sentence, and a beam continues a beam of its own sentence."""
        for name in self.past:
            if ".decoder." in name:
                self.past[name] = rows_of(self.past[name], rows)

    def select(self, sentences: torch.Tensor, rows_per_sentence: int) -> None:
        rows = sentence_rows(sentences, rows_per_sentence)
        if self.past is not None:
            self.past = {name: rows_of(value, rows) for name, value in self.past.items()}
        self.encoder_outputs = BaseModelOutput(last_hidden_state=self.encoder_outputs.last_hidden_state[sentences])
        self.mask = self.mask[sentences.numpy()]
        self.repeated = None


class OnnxConfig:
    """What the translating code reads from a model's config: its input limit."""

    def __init__(self, max_position_embeddings: int):
        self.max_position_embeddings = max_position_embeddings


class OnnxRuntimeModel(ExportedModel):
    """An ONNX export behind the part of a model's interface that `translation.translate.translate` uses: `generate`
    and `generate_nbest` (ExportedModel's; `generate_checked_nbest` for a request checked already) on a padded batch
    of token ids, with Section 6.1's decoding (the payload's search, see the module's doc). The folder's files are
    checked first (`checkpoints.validate_onnx`, unless an `export` it gave is passed); `quantized` runs the int8
    variant (onnx/*_quantized.onnx). `threads`: onnxruntime's intra-op threads (None: its default, one a core)."""

    device = torch.device("cpu")
    engine = "onnxruntime"  # engines.OnnxRuntime holds it

    def __init__(
        self, folder: str | Path, export: OnnxExport | None = None, quantized: bool = False, threads: int | None = None
    ):
        self.export = export or validate_onnx(folder, quantized)
        settings, generation = self.export.settings, self.export.generation_config
        self.encoder = session(self.export.encoder, threads)
        self.steps = {
            cached: session(self.export.decoder, threads, graph)
            for cached, graph in step_graphs(self.export.decoder).items()
        }
        self.config = OnnxConfig(settings["max_position_embeddings"])
        self.position_rows = settings["position_rows"]
        self.layers = settings["decoder_layers"]
        self.vocab_size = settings["vocab_size"]
        self.generation_config = generation
        self.num_beams = generation.num_beams
        self.length_penalty = generation.length_penalty
        self.pad_token_id = generation.pad_token_id
        self.eos_token_id = generation.eos_token_id

    def eval(self) -> "OnnxRuntimeModel":
        return self

    def generate(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        paper_decoding: bool = True,
        num_beams: int | None = None,
        max_new_tokens: int | None = None,
        target_prefix: list[list[int]] | None = None,
    ) -> torch.Tensor:
        """The output token ids of each row (the decoder start token first, padded), as generate() returns them:
        the best of each sentence's search."""
        return self.search(input_ids, attention_mask, 1, paper_decoding, num_beams, max_new_tokens, target_prefix)[0]

    def generate_checked_nbest(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        nbest: int = 1,
        paper_decoding: bool = True,
        num_beams: int | None = None,
        max_new_tokens: int | None = None,
        target_prefix: list[list[int]] | None = None,
    ) -> list[list[tuple[list[int], float]]]:
        """Each row's `nbest` best hypotheses, best first: their output token ids (`</s>` included where generated)
        and the score the search ranked them by, log P(Y|X) / lp(Y) with GNMT's lp. `nbest` is not checked against
        the beam here: a translating entry's request was checked once by its front end
        (`request.TranslationRequest.check`), a direct call by `generate_nbest`."""
        sequences, scores = self.search(
            input_ids, attention_mask, nbest, paper_decoding, num_beams, max_new_tokens, target_prefix
        )  # fmt: skip
        rows = []
        for number in range(input_ids.shape[0]):
            hypotheses = []
            for index in range(number * nbest, (number + 1) * nbest):
                ids = sequences[index, 1:].tolist()
                ids = ids[: ids.index(self.eos_token_id) + 1] if self.eos_token_id in ids else ids
                hypotheses.append((ids, float(scores[index])))
            rows.append(hypotheses)
        return rows

    def search(self, input_ids, attention_mask, nbest, paper_decoding, num_beams, max_new_tokens, target_prefix):
        """The search's sequences (`nbest` a sentence, the start token first) and their scores (None greedy)."""
        if not paper_decoding:
            raise ValueError(
                "paper_decoding=False: the onnxruntime engine decodes as Section 6.1 (the payload's search, which "
                "ranks by GNMT's penalty); expected paper_decoding=True, or the checkpoint on the PyTorch engine for "
                "transformers' own generate()"
            )
        if attention_mask is None:
            attention_mask = input_ids.ne(self.pad_token_id)
        lengths = attention_mask.sum(dim=-1)
        if int(lengths.max()) > self.config.max_position_embeddings:
            raise ValueError(
                f"a source of {int(lengths.max())} tokens is longer than the export accepts "
                f"(max_position_embeddings {self.config.max_position_embeddings}); expected at most that many tokens"
            )
        beams = num_beams or self.num_beams
        limits = 1 + max_output_length(lengths, max_new_tokens or None)  # the start token counted, as generate()
        processors = LogitsProcessorList()
        if target_prefix is not None:
            prefixes = check_target_prefix(target_prefix, self.vocab_size, (limits - 1).tolist())
            processors.append(TargetPrefix(prefixes, self.device))
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
        # whole distribution where a target prefix rules tokens out (or the vocabulary is no wider).
        shortlist = TopK.of(config).candidates if beams > 1 else 1
        shortlist = None if processors or shortlist >= self.vocab_size else shortlist
        steps = OnnxSteps(self.steps, states, mask, self.layers, shortlist)
        rows = max(beams, nbest)
        start = torch.full((len(ids) * rows, 1), self.generation_config.decoder_start_token_id, dtype=torch.long)
        recorder = Recorder(GenerationConfig(), steps.encoder_outputs)  # nothing recorded step by step
        if beams == 1:
            sequences = greedy_search(start, processors, criteria, config, steps, recorder, False, None, True)
            return sequences, None
        config.output_scores = config.return_dict_in_generate = True  # the finished hypotheses' scores
        output = beam_search(start, processors, criteria, config, steps, recorder, False, True, TopK.of(config))
        return output.sequences, output.sequences_scores
