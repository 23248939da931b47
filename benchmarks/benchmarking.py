"""Speed of this model next to transformers' MarianMTModel and CTranslate2, on the same weights and shapes.

Three implementations of one network (Table 3's base model by default, or its big one; random weights):
- `vaswani`: VaswaniForConditionalGeneration;
- `marian`: transformers' MarianMTModel configured the same way (ReLU, post-LN, static sinusoids, scaled and tied
  embeddings) and holding the same weights. Marian's attention projections always have biases: they are zero here.
  Two differences remain, neither of which changes the work done: Marian's sinusoid table puts sines in the first half
  of each vector and cosines in the second (ours interleaves them), and its LayerNorm epsilon is 1e-5 (ours 1e-6);
- `ctranslate2`: the Marian copy converted by CTranslate2's transformers converter (if ctranslate2 is installed).

Phases: `training` (forward + backward + Adam step), `greedy` and `beam` generation at batch 32 with exactly 32 new
tokens per sentence, `latency` (one sentence, greedy). Each implementation and phase runs in a process of its own
(the CLI started again with `--worker`), so that one cannot warm caches or fragment memory for another; each reports
the median of several timed repetitions after warm-up calls, and the peak memory the phase added. A matrix-multiply
loop in the same run gives the machine's ceiling. The whole list of processes runs in rounds (three by default), and
the ratios are medians of the ratios within each round, so that a shared machine's drifting load compares like with
like.
"""

import contextlib
import copy
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from modeling_vaswani import allocator_vaswani
from modeling_vaswani.allocator_vaswani import keep_freed_memory
from modeling_vaswani.configuration_vaswani import VaswaniConfig

IMPLEMENTATIONS = ("vaswani", "marian", "ctranslate2", "vaswani-ct2", "vaswani-ct2-int8")
# CTranslate2 folders and the compute type each runs in: converted from the Marian copy, and our own export
# (vaswani-export-ctranslate2's converter) in float32 and int8. The others are torch models.
CTRANSLATE2 = {"ctranslate2": None, "vaswani-ct2": None, "vaswani-ct2-int8": "int8"}
PEERS = ("marian", "ctranslate2", "vaswani-ct2", "vaswani-ct2-int8")
PHASES = ("training", "greedy", "beam", "latency")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
BEAMS = 4
WORKER_TIMEOUT_S = 3600


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


@dataclass(frozen=True)
class Repetitions:
    """Untimed warm-up calls and timed repetitions of each phase in each process (`matmul`: the ceiling's loop), and
    the rounds: how many times the whole list of processes runs, one implementation after another within a round."""

    warmup: dict = field(default_factory=lambda: {"matmul": 2, "training": 2, "greedy": 1, "beam": 1, "latency": 3})
    timed: dict = field(default_factory=lambda: {"matmul": 5, "training": 5, "greedy": 3, "beam": 2, "latency": 10})
    rounds: int = 3


FULL = Repetitions()
QUICK = Repetitions(
    warmup={"matmul": 1, "training": 1, "greedy": 1, "beam": 1, "latency": 1},
    timed={"matmul": 3, "training": 2, "greedy": 2, "beam": 2, "latency": 3},
    rounds=1,
)


# ---------------------------------------------------------------------------------------------------------------------
# Devices and dtypes
# ---------------------------------------------------------------------------------------------------------------------


def check_device(name: str) -> str:
    """`cpu`, `cuda` or `cuda:N`, usable on this machine; anything else is refused with the reason."""
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"unknown device {name!r}: expected cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"unsupported device {name!r}: expected cpu, cuda or cuda:N")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r}: CUDA is not available to this torch ({torch.__version__})")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise ValueError(f"device {name!r}: only {torch.cuda.device_count()} CUDA device(s) here")
    return name


def check_dtype(name: str) -> str:
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}: expected one of {', '.join(DTYPES)}")
    return name


def synchronize(device: str):
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


# ---------------------------------------------------------------------------------------------------------------------
# The models: ours, the Marian copy, the CTranslate2 conversion
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


def marian_config(config, vocab_size: int | None = None):
    """A MarianConfig computing what `config` (a VaswaniConfig) computes, special ids included."""
    from transformers import MarianConfig

    vocab_size = vocab_size or config.vocab_size
    return MarianConfig(
        vocab_size=vocab_size,
        decoder_vocab_size=vocab_size,
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
        max_position_embeddings=config.max_position_embeddings,
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        decoder_start_token_id=config.decoder_start_token_id,
        forced_eos_token_id=None,  # Marian's default forces token 0 at the length limit; ours forces nothing
    )


# Our module names -> Marian's, applied in order to each state-dict key.
MARIAN_NAMES = (
    ("self_attn_sublayer.norm.", "self_attn_layer_norm."),
    ("cross_attn_sublayer.norm.", "encoder_attn_layer_norm."),
    ("feed_forward_sublayer.norm.", "final_layer_norm."),
    ("cross_attn.", "encoder_attn."),
    (".w_q.", ".q_proj."),
    (".w_k.", ".k_proj."),
    (".w_v.", ".v_proj."),
    (".w_o.", ".out_proj."),
    ("feed_forward.w1.", "fc1."),
    ("feed_forward.w2.", "fc2."),
)
# What Marian has and we do not: attention biases and a logits bias (zero here), and its own sinusoid table.
ZEROED_IN_MARIAN = ("_proj.bias", "final_logits_bias")
MARIANS_OWN = ("embed_positions.weight",)


def marian_name(name: str) -> str:
    for ours, theirs in MARIAN_NAMES:
        name = name.replace(ours, theirs)
    return name


def marian_state_dict(model, marian) -> dict[str, torch.Tensor]:
    """`model`'s weights under `marian`'s names, complete: zeros where Marian has biases we lack.

    Refuses any weight of ours without a Marian counterpart and any Marian weight left unset, so that a renamed
    module on either side fails here instead of leaving random weights in the copy.
    """
    theirs = marian.state_dict()
    mapped = {marian_name(name): tensor for name, tensor in model.state_dict().items()}
    if unknown := sorted(set(mapped) - set(theirs)):
        raise KeyError(f"no MarianMTModel weight for {unknown[:5]} (of {len(unknown)})")
    for name in sorted(set(theirs) - set(mapped)):
        if name.endswith(ZEROED_IN_MARIAN):
            mapped[name] = torch.zeros_like(theirs[name])
        elif name.endswith(MARIANS_OWN):
            mapped[name] = theirs[name]
        else:
            raise KeyError(f"MarianMTModel weight {name} has no counterpart in {type(model).__name__}")
    return mapped


def marian_copy(model):
    """A MarianMTModel holding `model`'s weights (see the module docstring for the two differences left)."""
    from transformers import MarianMTModel

    marian = MarianMTModel(marian_config(model.config))
    marian.load_state_dict(marian_state_dict(model, marian))
    return marian.to(model.dtype).train(model.training)


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
        return "ctranslate2 is not installed (pip install -e '.[bench]')"
    device_type = device.partition(":")[0]
    if device_type == "cuda" and ctranslate2.get_cuda_device_count() == 0:
        return "this ctranslate2 build sees no CUDA device"
    if dtype not in ctranslate2.get_supported_compute_types(device_type):
        return f"CTranslate2 does not compute in {dtype} on this {device_type}"
    return None


def export_ours(model, folder: Path, quantization: str) -> Path:
    """Our model through vaswani-export-ctranslate2's converter, its tokens named as `export_ctranslate2` names the
    Marian copy's (`<s>`, `<pad>`, `</s>`, `<unk>`, t4, ...)."""
    from modeling_vaswani.toolkit.export_ctranslate2 import write_export

    names = ["<s>", "<pad>", "</s>", "<unk>", *(f"t{i}" for i in range(4, model.config.vocab_size))]
    target = folder / f"vaswani-ct2-{quantization}"
    write_export(model, names, target, quantization)
    return target


def prepare_models(shapes: Shapes, folder: Path, seed: int, with_ctranslate2: bool) -> dict[str, Path]:
    """Saves our model with random weights (`seed`), its Marian copy and, if asked, the CTranslate2 conversion of the
    copy and our own export in float32 and int8."""
    from modeling_vaswani.modeling_vaswani import VaswaniForConditionalGeneration

    torch.manual_seed(seed)
    model = VaswaniForConditionalGeneration(vaswani_config(shapes))
    folders = {"vaswani": folder / "vaswani", "marian": folder / "marian"}
    model.save_pretrained(folders["vaswani"])
    if with_ctranslate2:
        folders["vaswani-ct2"] = export_ours(model, folder, "float32")
        folders["vaswani-ct2-int8"] = export_ours(model, folder, "int8")
    marian = marian_copy(model)
    del model
    marian.save_pretrained(folders["marian"])
    if with_ctranslate2:
        folders["ctranslate2"] = export_ctranslate2(marian, folder)
    return folders


# ---------------------------------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------------------------------


def token_batch(batch: int, length: int, vocab_size: int, eos_token_id: int, seed: int) -> torch.Tensor:
    """Random ordinary tokens (ids >= 4, past the special ones), each row ending in </s> as a tokenizer would."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, vocab_size, (batch, length), generator=generator)
    ids[:, -1] = eos_token_id
    return ids


# ---------------------------------------------------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------------------------------------------------


def proc_status_kib(field_name: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise KeyError(field_name)


class PeakMemory:
    """Memory a phase adds at its peak, in MiB, over what the process held when the phase began.

    On CUDA: torch's allocator statistics (tensors only; None for CTranslate2, whose allocator torch does not see).
    On CPU: the resident set's high-water mark, which Linux resets on request (clear_refs 5); None elsewhere.
    """

    def __init__(self, device: str, torch_allocations: bool = True):
        self.device = device
        self.torch_allocations = torch_allocations
        self.baseline = None

    def start(self):
        if self.device.startswith("cuda"):
            if self.torch_allocations:
                synchronize(self.device)
                torch.cuda.reset_peak_memory_stats(self.device)
                self.baseline = torch.cuda.memory_allocated(self.device)
        elif os.path.exists("/proc/self/clear_refs"):
            with open("/proc/self/clear_refs", "w") as clear_refs:
                clear_refs.write("5")
            self.baseline = proc_status_kib("VmHWM") * 1024  # the resident set now, as the reset left it
        return self

    def peak_mib(self) -> float | None:
        if self.baseline is None:
            return None
        if self.device.startswith("cuda"):
            peak = torch.cuda.max_memory_allocated(self.device)
        else:
            peak = proc_status_kib("VmHWM") * 1024
        return (peak - self.baseline) / 2**20


def timed(call: Callable[[], object], warmup: int, repetitions: int, device: str) -> list[float]:
    """Seconds taken by each of `repetitions` calls, after `warmup` untimed ones."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repetitions):
        synchronize(device)
        start = time.perf_counter()
        call()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return times


def matmul_rate(device: str, dtype: str, warmup: int, repetitions: int) -> dict:
    """GFLOP/s of square matrix products (2 n^3 FLOPs each): the most this machine can give a transformer.

    On CPU, torch's own products (MKL for float32) and oneDNN's with a prepacked operand, the kernel behind
    inductor's CPU linears and what CTranslate2 uses on AMD CPUs: MKL runs its slower code paths on non-Intel CPUs
    (seen on an AMD EPYC: 91 GFLOP/s a core against oneDNN's 203). The ceiling is the faster of the two.
    """
    size = 8192 if device.startswith("cuda") else 2048
    a, b = (torch.randn(size, size, device=device, dtype=DTYPES[dtype]) for _ in range(2))
    rates = {"torch.matmul": gflops(size, timed(lambda: torch.matmul(a, b), warmup, repetitions, device))}
    if onednn := onednn_product(a, b):
        rates["oneDNN"] = gflops(size, timed(onednn, warmup, repetitions, device))
    return {"dtype": dtype, "size": size, "rates": rates, "gflops": max(rates.values())}


def gflops(size: int, times: list[float]) -> float:
    return 2 * size**3 / statistics.median(times) / 1e9


def onednn_product(a: torch.Tensor, b: torch.Tensor) -> Callable[[], torch.Tensor] | None:
    """a @ b through oneDNN (torch's private mkldnn ops), or None off CPU or where this torch lacks them."""
    from modeling_vaswani.kernels_vaswani import ONEDNN_LINEAR, onednn_linear

    if a.device.type != "cpu" or not ONEDNN_LINEAR:
        return None
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(b.t().contiguous(), a.shape[0])
        onednn_linear(a, packed)
    except RuntimeError:
        return None
    return lambda: onednn_linear(a, packed)


def forward_flops(shapes: Shapes, batch: int, source_length: int, target_length: int) -> int:
    """FLOPs of the matrix products of one teacher-forced forward pass (2 per multiply-add).

    Embedding lookups, norms, softmax and the other element-wise work are left out, as model FLOPs utilisation
    conventionally does. Attention counts the full score matrix, as the kernels compute it.
    """
    d, d_ff, layers = shapes.d_model, shapes.d_ff, shapes.layers
    per_source_token = layers * (8 * d * d + 4 * d * d_ff + 4 * source_length * d)  # encoder
    per_source_token += layers * 4 * d * d  # the decoder's cross-attention keys and values of the encoder output
    per_target_token = layers * (12 * d * d + 4 * d * d_ff + 4 * (target_length + source_length) * d)
    per_target_token += 2 * d * shapes.vocab_size  # the output layer
    return batch * (source_length * per_source_token + target_length * per_target_token)


def training_flops(shapes: Shapes) -> int:
    """Forward + backward: the backward pass does two products (input and weight gradients) per forward one."""
    return 3 * forward_flops(shapes, shapes.batch, shapes.source_length, shapes.target_length)


# ---------------------------------------------------------------------------------------------------------------------
# The phases, run in a worker process
# ---------------------------------------------------------------------------------------------------------------------


def load_torch_model(implementation: str, folder: Path, device: str):
    if implementation == "vaswani":
        from modeling_vaswani.modeling_vaswani import VaswaniForConditionalGeneration as model_class
    else:
        from transformers import MarianMTModel as model_class
    return model_class.from_pretrained(folder).to(device)


def training_call(model, shapes: Shapes, device: str, dtype: str) -> Callable[[], object]:
    """One optimizer step of Section 5.3 (Adam 0.9, 0.98, 1e-9), dropout on; bf16/fp16 as autocast over fp32 weights,
    which is what the Trainer's --bf16 does."""
    config = model.config
    source = token_batch(shapes.batch, shapes.source_length, config.vocab_size, config.eos_token_id, 1).to(device)
    labels = token_batch(shapes.batch, shapes.target_length, config.vocab_size, config.eos_token_id, 2).to(device)
    mask = torch.ones_like(source)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    autocast = contextlib.nullcontext()
    if dtype != "float32":
        autocast = torch.autocast(torch.device(device).type, DTYPES[dtype])
    model.train()

    def step():
        with autocast:
            loss = model(input_ids=source, attention_mask=mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def generation_call(model, shapes: Shapes, device: str, dtype: str, batch: int, beams: int) -> Callable[[], object]:
    """generate() with exactly `shapes.new_tokens` new tokens per sentence: </s> is suppressed until then.

    The suppression is one column set to -inf in place (`SuppressEndToken`), what CTranslate2's min_decoding_length
    does; transformers' own min_new_tokens would copy and rewrite the whole [batch x vocabulary] scores twice a step
    (its MinLength and MinNewTokensLength processors), a cost that translation, which sets no minimum, never pays:
    with it, the generation loop of both torch models measured a third slower here.
    """
    from transformers import GenerationConfig, LogitsProcessorList

    config = model.config
    model.to(DTYPES[dtype]).eval()
    source = token_batch(batch, shapes.source_length, config.vocab_size, config.eos_token_id, 1).to(device)
    mask = torch.ones_like(source)
    # Everything spelled out, so that both torch models run the same search whatever their own defaults.
    generation_config = GenerationConfig(
        num_beams=beams,
        do_sample=False,
        max_new_tokens=shapes.new_tokens,
        length_penalty=1.0,
        early_stopping=False,
        decoder_start_token_id=config.decoder_start_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
    )
    processors = LogitsProcessorList([SuppressEndToken(config.eos_token_id)])

    def generate():
        output = model.generate(
            input_ids=source, attention_mask=mask, generation_config=generation_config, logits_processor=processors
        )
        new = output[:, 1:]  # after the decoder start token
        if new.shape != (batch, shapes.new_tokens) or (new == config.eos_token_id).any():
            raise RuntimeError(f"expected exactly {shapes.new_tokens} new tokens per sentence, got {tuple(new.shape)}")
        return new

    return generate


class SuppressEndToken:
    """A logits processor giving </s> no chance: its column of the scores set to -inf in place."""

    def __init__(self, eos_token_id: int):
        self.eos_token_id = eos_token_id

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        scores[:, self.eos_token_id] = -math.inf
        return scores


def ctranslate2_call(folder: Path, shapes: Shapes, device: str, dtype: str, threads: int, batch: int, beams: int):
    """translate_batch with exactly `shapes.new_tokens` new tokens per sentence (min = max decoding length)."""
    import ctranslate2

    device_type, _, index = device.partition(":")
    translator = ctranslate2.Translator(
        str(folder),
        device=device_type,
        device_index=int(index or 0),
        compute_type=dtype,
        inter_threads=1,
        intra_threads=threads,
    )
    names = json.loads((Path(folder) / "shared_vocabulary.json").read_text())
    ids = token_batch(batch, shapes.source_length, len(names), names.index("</s>"), 1)
    source = [[names[i] for i in row] for row in ids.tolist()]

    def translate():
        results = translator.translate_batch(
            source,
            beam_size=beams,
            min_decoding_length=shapes.new_tokens,
            max_decoding_length=shapes.new_tokens,
        )
        lengths = {len(result.hypotheses[0]) for result in results}
        if len(results) != batch or lengths != {shapes.new_tokens}:
            raise RuntimeError(f"expected exactly {shapes.new_tokens} new tokens per sentence, got lengths {lengths}")
        return results

    return translate


def phase_call(spec: dict) -> tuple[Callable[[], object], int, dict]:
    """The call to time for `spec`, the tokens one call processes, and facts worth reporting about the setup."""
    shapes, device, dtype, phase = Shapes(**spec["shapes"]), spec["device"], spec["dtype"], spec["phase"]
    batch = 1 if phase == "latency" else shapes.batch
    beams = BEAMS if phase == "beam" else 1
    if phase == "training":
        tokens = shapes.batch * (shapes.source_length + shapes.target_length)
    else:
        tokens = batch * shapes.new_tokens
    if spec["implementation"] in CTRANSLATE2:
        compute_type = CTRANSLATE2[spec["implementation"]] or dtype
        call = ctranslate2_call(spec["folder"], shapes, device, compute_type, spec["threads"], batch, beams)
        return call, tokens, {"compute_type": compute_type}
    model = load_torch_model(spec["implementation"], spec["folder"], device)
    facts = {
        "attn_implementation": model.config._attn_implementation,
        "parameters": model.num_parameters(only_trainable=True),
    }
    if phase == "training":
        return training_call(model, shapes, device, dtype), tokens, facts
    return generation_call(model, shapes, device, dtype, batch, beams), tokens, facts


def run_phase(spec: dict) -> dict:
    """Runs one implementation's phase (or the matmul loop) as `spec` says; returns times, rates and peak memory."""
    torch.set_num_threads(spec["threads"])
    warmup, repetitions = spec["warmup"], spec["repetitions"]
    if spec["phase"] == "matmul":
        return matmul_rate(spec["device"], spec["dtype"], warmup, repetitions)
    call, tokens, facts = phase_call(spec)
    memory = PeakMemory(spec["device"], torch_allocations=spec["implementation"] not in CTRANSLATE2).start()
    times = timed(call, warmup, repetitions, spec["device"])
    median = statistics.median(times)
    result = {**facts, "times_s": times, "median_s": median, "peak_memory_mib": memory.peak_mib()}
    if spec["phase"] == "latency":
        result["ms_per_sentence"] = 1000 * median
    else:
        result["tokens_per_s"] = tokens / median
    return result


def worker_main(spec_json: str, output: str):
    """The `--worker` mode of the CLI: one phase, its result written as JSON to `output`.

    Every implementation's process keeps the memory it frees (see allocator_vaswani.py), so that the torch peers
    compare without page faults (CTranslate2 caches its own allocations whatever glibc does); with `plain` no
    process is set up: each runs as a user's own program would, where our model sets it by itself and MarianMT not."""
    spec = json.loads(spec_json)
    kept = None if spec.get("plain") else keep_freed_memory()
    result = run_phase(spec)
    result["keeps_freed_memory"] = kept or (
        spec["implementation"] == "vaswani" and allocator_vaswani.applied_by_default
    )
    Path(output).write_text(json.dumps(result))


# ---------------------------------------------------------------------------------------------------------------------
# The run: one process per implementation and phase
# ---------------------------------------------------------------------------------------------------------------------


def run_worker(script: Path, spec: dict, folder: Path) -> dict:
    """Runs `spec` in a fresh process of `script --worker`; a failure comes back as {"error": ...}."""
    output = folder / "result.json"
    output.unlink(missing_ok=True)
    command = [sys.executable, str(script), "--worker", json.dumps(spec), "--worker-output", str(output)]
    # OpenMP pools sized like torch's, so that CTranslate2 and torch use the same cores.
    env = {**os.environ, "OMP_NUM_THREADS": str(spec["threads"])}
    try:
        process = subprocess.run(command, capture_output=True, text=True, env=env, timeout=WORKER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {WORKER_TIMEOUT_S} s"}
    if process.returncode != 0:
        return {"error": process.stderr.strip().splitlines()[-1] if process.stderr.strip() else "no output"}
    return json.loads(output.read_text())


def skipped_reason(implementation: str, phase: str, device: str, dtype: str) -> str | None:
    if implementation not in CTRANSLATE2:
        return None
    if phase == "training":
        return "CTranslate2 is an inference engine"
    return ctranslate2_unavailable(device, CTRANSLATE2[implementation] or dtype)


def machine() -> dict:
    import transformers

    facts = {
        "cpu": cpu_name(),
        "cpu_flags": cpu_flags(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    try:
        import ctranslate2

        facts["ctranslate2"] = ctranslate2.__version__
    except ImportError:
        pass
    if torch.cuda.is_available():
        facts["gpu"] = torch.cuda.get_device_name()
    return facts


def cpu_name() -> str:
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


# The instruction sets that decide CPU matmul speed: hosts of the same name differ in them from one day to the next.
SIMD_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16")


def cpu_flags() -> list[str]:
    if not os.path.exists("/proc/cpuinfo"):
        return []
    with open("/proc/cpuinfo") as cpuinfo:
        flags = next((line.split(":", 1)[1].split() for line in cpuinfo if line.startswith("flags")), [])
    return [flag for flag in SIMD_FLAGS if flag in flags]


def run_benchmark(
    script: Path,
    device: str = "cpu",
    dtype: str = "float32",
    repetitions: Repetitions = FULL,
    implementations=IMPLEMENTATIONS,
    phases=PHASES,
    threads: int | None = None,
    shapes: Shapes = Shapes(),
    seed: int = 0,
    plain: bool = False,
    progress: Callable[[str], None] = print,
) -> dict:
    """Measures `phases` of `implementations` and the matmul ceiling, each in its own `script --worker` process.

    The list of processes runs `repetitions.rounds` times over. A shared machine drifts (other tenants' load, memory
    bandwidth) over minutes, more than implementations differ; within a round the implementations of a phase run one
    right after another, so each round gives a ratio of ours to each peer under the same conditions. Reported: the
    median over the rounds of each figure and of each ratio.
    """
    threads = threads or torch.get_num_threads()
    jobs = [("ceiling", "matmul", "float32")]
    if dtype != "float32":
        jobs.append(("ceiling", "matmul", dtype))
    jobs += [(implementation, phase, dtype) for phase in phases for implementation in implementations]
    jobs = [(round_number, *job) for round_number in range(repetitions.rounds) for job in jobs]
    rounds = [{} for _ in range(repetitions.rounds)]
    with tempfile.TemporaryDirectory(prefix="vaswani-benchmark-") as workdir:
        workdir = Path(workdir)
        with_ctranslate2 = bool(CTRANSLATE2.keys() & set(implementations)) and not ctranslate2_unavailable(device)
        progress(f"preparing the models (same random weights{', CTranslate2 conversion' * with_ctranslate2})")
        folders = prepare_models(shapes, workdir, seed, with_ctranslate2)
        for number, (round_number, implementation, phase, job_dtype) in enumerate(jobs, start=1):
            results = rounds[round_number]
            label = f"[{number}/{len(jobs)}] {implementation} {phase}" + (f" {job_dtype}" if phase == "matmul" else "")
            if reason := skipped_reason(implementation, phase, device, job_dtype):
                results.setdefault(implementation, {})[phase] = {"skipped": reason}
                if round_number == 0:
                    progress(f"{label}: skipped ({reason})")
                continue
            spec = {
                "implementation": implementation,
                "phase": phase,
                "device": device,
                "dtype": job_dtype,
                "threads": threads,
                "shapes": asdict(shapes),
                "folder": str(folders.get(implementation, "")),
                "warmup": repetitions.warmup[phase],
                "repetitions": repetitions.timed[phase],
                "plain": plain,
            }
            start = time.perf_counter()
            result = run_worker(script, spec, workdir)
            key = job_dtype if phase == "matmul" else phase
            results.setdefault(implementation, {})[key] = result
            progress(f"{label}: {summary(phase, result)} ({time.perf_counter() - start:.0f} s)")
    return {**report(rounds, shapes, device, dtype, threads, repetitions), "plain": plain}


def summary(phase: str, result: dict) -> str:
    if "error" in result:
        return f"FAILED: {result['error']}"
    if phase == "matmul":
        return ", ".join(f"{name} {rate:.1f} GFLOP/s" for name, rate in result["rates"].items())
    if phase == "latency":
        return f"{result['ms_per_sentence']:.1f} ms/sentence"
    return f"{result['tokens_per_s']:.1f} tokens/s"


def value(result: dict | None) -> float | None:
    """The phase's figure of merit: tokens/s for throughput, ms/sentence for latency; None if it did not run."""
    if not result:
        return None
    return result.get("tokens_per_s", result.get("ms_per_sentence"))


def combine(results: list[dict]) -> dict:
    """One measurement over the rounds: the first round's result with its figures replaced by their medians over
    the rounds, the largest peak memory, and each round's result under "rounds"; a failure or skip as it came."""
    first = results[0]
    if failed := next((result for result in results if "error" in result), None):
        return failed
    if len(results) == 1 or "skipped" in first:
        return first
    combined = {**first, "rounds": results}
    for name in ("median_s", "tokens_per_s", "ms_per_sentence", "gflops"):
        if name in first:
            combined[name] = statistics.median(result[name] for result in results)
    if "rates" in first:
        combined["rates"] = {
            name: statistics.median(result["rates"][name] for result in results) for name in first["rates"]
        }
    if "peak_memory_mib" in first:
        peaks = [result["peak_memory_mib"] for result in results if result["peak_memory_mib"] is not None]
        combined["peak_memory_mib"] = max(peaks, default=None)
    return combined


def report(
    rounds: list[dict], shapes: Shapes, device: str, dtype: str, threads: int, repetitions: Repetitions
) -> dict:
    """The results combined over the rounds, the ratios of ours to each peer (the median of each round's ratio)
    and the model FLOPs utilisation of training."""
    results = {
        implementation: {
            key: combine([round_results[implementation][key] for round_results in rounds]) for key in keys
        }
        for implementation, keys in rounds[0].items()
    }
    ceiling = results.pop("ceiling")
    ratios = {}
    for peer in PEERS:
        for phase in PHASES:
            per_round = []
            for round_results in rounds:
                ours = value(round_results.get("vaswani", {}).get(phase))
                theirs = value(round_results.get(peer, {}).get(phase))
                if ours and theirs:
                    per_round.append(ours / theirs)
            if per_round and len(per_round) == len(rounds):
                ratios.setdefault(f"vaswani/{peer}", {})[phase] = statistics.median(per_round)
    rate = ceiling.get(dtype, {}).get("gflops")
    for implementation in results.values():
        training = implementation.get("training", {})
        if rate and "tokens_per_s" in training:
            steps_per_s = training["tokens_per_s"] / (shapes.batch * (shapes.source_length + shapes.target_length))
            training["mfu"] = training_flops(shapes) * steps_per_s / (rate * 1e9)
    return {
        "machine": machine(),
        "device": device,
        "dtype": dtype,
        "threads": threads,
        "shapes": asdict(shapes),
        "repetitions": asdict(repetitions),
        "training_gflop_per_step": training_flops(shapes) / 1e9,
        "ceiling": ceiling,
        "results": results,
        "ratios": ratios,
        "ratio_meaning": "ours / theirs: > 1 is faster for tokens/s (training, greedy, beam); "
        "< 1 is faster for ms/sentence (latency)",
    }


# ---------------------------------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------------------------------

PHASE_LABELS = {
    "training": ("training", "tokens/s"),
    "greedy": ("greedy", "tokens/s"),
    "beam": (f"beam {BEAMS}", "tokens/s"),
    "latency": ("latency (batch 1)", "ms/sentence"),
}


def cell(number: float | None, digits: int = 1) -> str:
    return "-" if number is None or math.isnan(number) else f"{number:,.{digits}f}"


def ratio_cell(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def format_table(report: dict) -> str:
    results, shapes = report["results"], Shapes(**report["shapes"])
    implementations = [name for name in IMPLEMENTATIONS if name in results]
    peers = [name for name in PEERS if f"vaswani/{name}" in report["ratios"]]
    header = ["phase", "unit", *implementations, *(f"vaswani/{peer}" for peer in peers)]
    rows = []
    for phase in [phase for phase in PHASES if any(phase in results[name] for name in implementations)]:
        label, unit = PHASE_LABELS[phase]
        rows.append(
            [
                label,
                unit,
                *(cell(value(results[name].get(phase)), 2 if phase == "latency" else 1) for name in implementations),
                *(ratio_cell(report["ratios"][f"vaswani/{peer}"].get(phase)) for peer in peers),
            ]
        )
        rows.append(
            [
                "  peak memory",
                "MiB",
                *(cell(results[name].get(phase, {}).get("peak_memory_mib"), 0) for name in implementations),
            ]
        )
    widths = [max(len(row[i]) if i < len(row) else 0 for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(text.ljust(widths[0]) if i == 0 else text.rjust(widths[i]) for i, text in enumerate(row))
             for row in [header, *rows]]  # fmt: skip
    return "\n".join([*heading(report, shapes), *lines, *footer(report, results, implementations)])


def heading(report: dict, shapes: Shapes) -> list[str]:
    facts = report["machine"]
    processor = f"{facts['cpu']} ({facts['cpu_count']} CPUs)"
    if report["device"].startswith("cuda"):
        processor = f"{facts['gpu']}, {processor}"
    libraries = [name for name in ("torch", "transformers", "ctranslate2") if name in facts]
    versions = " · ".join(f"{name} {facts[name]}" for name in libraries)
    ceiling = "; ".join(
        f"{dtype} " + ", ".join(f"{name} {cell(rate)}" for name, rate in result.get("rates", {}).items())
        for dtype, result in report["ceiling"].items()
    )
    size = report["ceiling"].get("float32", {}).get("size", "?")
    if report.get("plain"):
        allocator = "plain processes, as a user's own program runs: the benchmark sets nothing; this model keeps the "
        allocator += "memory it frees by itself (modeling_vaswani/allocator_vaswani.py), MarianMT does not"
    else:
        allocator = (
            "every process keeps the memory it frees (glibc malloc settings: modeling_vaswani/allocator_vaswani.py)"
        )
    return [
        f"{report['device']} {report['dtype']}, {report['threads']} thread(s) · {processor} · {versions}",
        f"{shapes.layers}+{shapes.layers} layers, d_model {shapes.d_model}, {shapes.heads} heads, d_ff {shapes.d_ff}, "
        f"vocabulary {shapes.vocab_size}; the same random weights in each",
        f"training: batch {shapes.batch} x ({shapes.source_length} + {shapes.target_length}) tokens; generation: "
        f"batch {shapes.batch} x {shapes.source_length} source tokens, exactly {shapes.new_tokens} new tokens each; "
        "latency: one sentence, greedy",
        f"ceiling (GFLOP/s, {size}x{size} products): {ceiling}",
        allocator,
        "",
    ]


def footer(report: dict, results: dict, implementations: list[str]) -> list[str]:
    lines = [
        "",
        "vaswani/peer: ours / theirs; > 1 is faster for tokens/s, < 1 is faster for ms/sentence.",
        *(
            [f"each figure: the median over {rounds} rounds; each ratio: the median of the rounds' own ratios."]
            if (rounds := report["repetitions"]["rounds"]) > 1
            else []
        ),
        f"generation tokens/s: output tokens (sentences x {report['shapes']['new_tokens']}), not beam hypotheses.",
    ]
    utilisation = [
        f"{name} {100 * results[name]['training']['mfu']:.0f}%"
        for name in implementations
        if "mfu" in results[name].get("training", {})
    ]
    if utilisation:
        lines.append(
            f"training model FLOPs utilisation ({report['training_gflop_per_step']:.0f} GFLOP a step, of the "
            f"ceiling's {report['dtype']} rate): " + ", ".join(utilisation)
        )
    for name in implementations:
        for phase, result in results[name].items():
            if "skipped" in result or "error" in result:
                lines.append(f"{name} {phase}: {result.get('skipped') or 'FAILED: ' + result['error']}")
    return lines
