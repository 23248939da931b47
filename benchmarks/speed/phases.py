"""The phases, each run in a worker process of its own: a training step, greedy and beam generation, and batch-1
latency. Generation and latency measure the per-step cost at fixed length: exactly `Shapes.new_tokens` new tokens a
sentence, </s> suppressed until then, in every implementation, so that each does the same work; not the paper's
decoding of real text, which stops at </s> (or source length + 50)."""

import contextlib
import json
import math
import statistics
from collections.abc import Callable
from pathlib import Path

import torch

from modeling_vaswani.toolkit.runtime import apply_process_settings

from .measure import DTYPES, PeakMemory, matmul_rate, timed
from .models import CTRANSLATE2, Shapes, load_torch_model, token_batch

PHASES = ("training", "greedy", "beam", "latency")

BEAMS = 4


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
    """The `--worker` mode of the command: one phase, its result written as JSON to `output`.

    Every process starts as the vaswani-* commands do, with `apply_process_settings()` (toolkit/runtime.py: glibc's
    malloc keeps the memory it frees, unless the environment opts out), MarianMT's and CTranslate2's too, so that the
    torch peers compare without page faults (CTranslate2 caches its own allocations whatever glibc does). With
    `plain` nothing is called: each process gets what a user's own program gets without calling
    `keep_freed_memory()`, glibc's defaults. `keeps_freed_memory` in the result: whether the setting applied."""
    spec = json.loads(spec_json)
    kept = False if spec.get("plain") else apply_process_settings()
    result = run_phase(spec)
    result["keeps_freed_memory"] = kept
    Path(output).write_text(json.dumps(result))
