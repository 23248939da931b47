"""The memory of a training step at the paper's batch: Table 3's base and big with a 37000-token shared vocabulary
(the paper's En-De), 25,000 source and 25,000 target tokens a step (1,000 sentences of 25 + 25 tokens), bf16
autocast over float32 weights and Adam (what --bf16 trains with), dropout as the presets set it. The step runs as
one pass where it fits, else through gradient accumulation (2, 4, 8 passes): the first that fits is recorded with its
peak memory (torch's allocator: tensors; and what the allocator reserved), its step time and tokens a second.

Tiny: the tiny model at 20 sentences of 8 + 8 tokens, the process's peak resident memory on the CPU.
"""

import gc
import time

import pytest
import torch
from helpers.gpu import IS_TINY, is_cuda, synchronize
from speed.measure import PeakMemory  # the speed benchmark's (benchmarks/speed/)

from modeling_vaswani import VaswaniConfig, VaswaniForConditionalGeneration

pytestmark = pytest.mark.gpu

VOCABULARY = 37000
SENTENCES, LENGTH = (20, 8) if IS_TINY else (1000, 25)
ACCUMULATIONS = (1, 2, 4, 8)
TIMED_STEPS = 2


def config(model: str) -> VaswaniConfig:
    if IS_TINY:
        from helpers.tiny_models import tiny_config

        return tiny_config(**({"d_model": 64, "d_ff": 128} if model == "big" else {}))
    return getattr(VaswaniConfig, model)(vocab_size=VOCABULARY)


def batches(vocab_size: int, accumulation: int, device: str) -> list[dict]:
    generator = torch.Generator().manual_seed(0)
    size = SENTENCES // accumulation
    result = []
    for _ in range(accumulation):
        source = torch.randint(4, vocab_size, (size, LENGTH), generator=generator)
        labels = torch.randint(4, vocab_size, (size, LENGTH), generator=generator)
        source[:, -1] = labels[:, -1] = 2  # </s>
        result.append({"input_ids": source.to(device), "labels": labels.to(device)})
    return result


def training_step(model, optimizer, micro_batches, device: str):
    for batch in micro_batches:
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
            loss = model(**batch).loss / len(micro_batches)
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def measure(model, device: str, accumulation: int) -> dict:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    micro_batches = batches(model.config.vocab_size, accumulation, device)
    memory = PeakMemory(device).start()
    training_step(model, optimizer, micro_batches, device)  # the first step also creates Adam's state
    times = []
    for _ in range(TIMED_STEPS):
        synchronize(device)
        start = time.perf_counter()
        training_step(model, optimizer, micro_batches, device)
        synchronize(device)
        times.append(time.perf_counter() - start)
    step = min(times)
    figures = {
        "accumulation": accumulation,
        "peak_memory_mib": memory.peak_mib(whole=True),
        "step_s": step,
        "tokens_per_s": 2 * SENTENCES * LENGTH / step,
    }
    if is_cuda(device):
        figures["peak_reserved_mib"] = torch.cuda.max_memory_reserved(device) / 2**20
        figures["device_total_mib"] = torch.cuda.get_device_properties(device).total_memory / 2**20
    return figures


@pytest.mark.parametrize("model_name", ["base", "big"])
def test_peak_memory_at_the_papers_batch(device, model_name, figures):
    torch.manual_seed(0)
    with torch.device(device):
        model = VaswaniForConditionalGeneration(config(model_name)).train()
    figures.add(
        model=model_name,
        parameters=model.num_parameters(),
        tokens_per_step={"source": SENTENCES * LENGTH, "target": SENTENCES * LENGTH},
        dropout=model.config.dropout,
    )
    out_of_memory = []
    for accumulation in ACCUMULATIONS:
        try:
            result = measure(model, device, accumulation)
        except torch.OutOfMemoryError:
            result = None
        if result is None:  # out of the except block: its traceback no longer holds the failed pass's tensors
            out_of_memory.append(accumulation)
            model.zero_grad(set_to_none=True)
            gc.collect()
            if is_cuda(device):
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats(device)
            continue
        figures.add(**result, out_of_memory_at=out_of_memory)
        break
    else:
        figures.add(out_of_memory_at=out_of_memory)
        pytest.fail(f"{model_name}: out of memory even through {ACCUMULATIONS[-1]} accumulated passes")
    assert result["peak_memory_mib"] is None or result["peak_memory_mib"] > 0
