"""On the device the model computes what it computes on the CPU (float32, TF32 off): logits within 1e-4 for the eager
and SDPA attention functions, with padding on both sides, and through the beam-grouped encoder-decoder attention
(`kernels_vaswani.by_sentence`, which the paper's decoding uses: a sentence's k hypotheses attend over its one row of
encoder output); greedy, beam-4 and paper decoding give the CPU's tokens; and generation runs in bfloat16.

Token comparisons allow one thing: a near tie, where the two devices' float32 rounding (within the logits'
tolerance) may order two candidates differently. A sentence that differs counts as tied only if, at its first
differing token, the CPU's own scores of the two tokens are within 2e-4 (greedy), or if the two searches' final
hypotheses score within 2e-4 (beam search); every other difference fails the check.
"""

import contextlib
import copy

import pytest
import torch
from helpers.gpu import IS_TINY, TOLERANCE, equivalence_config, source_lengths
from helpers.tiny_models import PAD, padded_batch

from modeling_vaswani import VaswaniForConditionalGeneration

pytestmark = pytest.mark.gpu

IMPLEMENTATIONS = ["eager", "sdpa"]
BEAMS = 4  # hypotheses a sentence in the grouped attention, as the paper's beam search holds them
NEW_TOKENS = 6 if IS_TINY else 32
TIE = 2 * TOLERANCE  # two devices each within TOLERANCE of the exact value can order candidates this close apart


def build(implementation: str = "sdpa", seed: int = 0) -> VaswaniForConditionalGeneration:
    torch.manual_seed(seed)
    return VaswaniForConditionalGeneration(equivalence_config(attn_implementation=implementation)).eval()


def moved(model, device: str, dtype=torch.float32):
    return copy.deepcopy(model).to(device=device, dtype=dtype)


def source_batch(config) -> tuple[torch.Tensor, torch.Tensor]:
    return padded_batch(source_lengths(), config.vocab_size, seed=1)


def largest_difference(one: torch.Tensor, other: torch.Tensor) -> float:
    return (one.detach().float().cpu() - other.detach().float().cpu()).abs().max().item()


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_logits_match_the_cpu(device, implementation, figures):
    """Teacher-forced logits of a padded batch (padded sources, padded targets) on the device and on the CPU."""
    model = build(implementation)
    source, source_mask = source_batch(model.config)
    target_lengths = [max(2, length // 2 + 3) for length in source_lengths()]
    target, target_mask = padded_batch(target_lengths, model.config.vocab_size, seed=2)
    inputs = dict(input_ids=source, attention_mask=source_mask, decoder_input_ids=target)
    inputs["decoder_attention_mask"] = target_mask
    with torch.no_grad():
        expected = model(**inputs).logits
        on_device = moved(model, device)
        logits = on_device(**{name: tensor.to(device) for name, tensor in inputs.items()}).logits
    difference = largest_difference(logits, expected)
    padded = int((source_mask == 0).sum() + (target_mask == 0).sum())
    figures.add(
        attention=on_device.config._attn_implementation,
        max_abs_difference=difference,
        largest_logit=expected.abs().max().item(),
        padded_positions=padded,
        tolerance=TOLERANCE,
    )
    assert padded > 0
    assert difference < TOLERANCE, f"logits on {device} differ from the CPU's by {difference:.3g}"


@pytest.mark.parametrize("queries", [1, 5], ids=["one-query", "five-queries"])
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_beam_grouped_cross_attention_matches_the_cpu(device, implementation, queries, figures):
    """k = 4 decoder rows a sentence over that sentence's single (padded) row of encoder output, as the paper's
    decoding runs it: the same logits on the device as on the CPU, and as the encoder output repeated for each row."""
    model = build(implementation)
    source, source_mask = source_batch(model.config)
    sentences = len(source)
    generator = torch.Generator().manual_seed(3)
    decoder_ids = torch.randint(4, model.config.vocab_size, (sentences * BEAMS, queries), generator=generator)
    with torch.no_grad():
        encoded = model.model.encoder(input_ids=source, attention_mask=source_mask).last_hidden_state

        def logits(net, where: str, repeat: bool) -> torch.Tensor:
            states, mask = encoded, source_mask
            if repeat:
                states, mask = states.repeat_interleave(BEAMS, 0), mask.repeat_interleave(BEAMS, 0)
            output = net(
                encoder_outputs=(states.to(where),),
                attention_mask=mask.to(where),
                decoder_input_ids=decoder_ids.to(where),
                use_cache=False,
            )
            return output.logits

        expected = logits(model, "cpu", repeat=False)
        on_device = moved(model, device)
        grouped = logits(on_device, device, repeat=False)
        repeated = logits(on_device, device, repeat=True)
    against_cpu, against_repeated = largest_difference(grouped, expected), largest_difference(grouped, repeated)
    figures.add(
        attention=on_device.config._attn_implementation,
        sentences=sentences,
        rows=sentences * BEAMS,
        max_abs_difference_from_cpu=against_cpu,
        max_abs_difference_from_repeated=against_repeated,
        tolerance=TOLERANCE,
    )
    assert grouped.shape == (sentences * BEAMS, queries, model.config.vocab_size)
    assert against_cpu < TOLERANCE, f"grouped attention on {device} differs from the CPU's by {against_cpu:.3g}"
    assert against_repeated < TOLERANCE, f"grouped differs from repeated rows by {against_repeated:.3g}"


DECODINGS = {
    "greedy": dict(num_beams=1, do_sample=False),
    "beam4": dict(num_beams=4, do_sample=False),  # transformers' own beam search, length penalty 0.6
    "paper": dict(paper_decoding=True),  # Section 6.1, through the grouped encoder-decoder attention
}


def rows(sequences: torch.Tensor) -> list[list[int]]:
    """Each generated row without the padding after its end."""
    result = []
    for row in sequences.tolist():
        while len(row) > 1 and row[-1] == PAD:
            row.pop()
        result.append(row)
    return result


@pytest.mark.parametrize("decoding", list(DECODINGS))
def test_generated_tokens_match_the_cpu(device, decoding, figures):
    model = build()
    source, source_mask = source_batch(model.config)
    settings = dict(max_new_tokens=NEW_TOKENS, output_scores=True, return_dict_in_generate=True, **DECODINGS[decoding])
    with torch.no_grad():
        expected = model.generate(input_ids=source, attention_mask=source_mask, **settings)
        generated = moved(model, device).generate(
            input_ids=source.to(device), attention_mask=source_mask.to(device), **settings
        )
    expected_rows, generated_rows = rows(expected.sequences), rows(generated.sequences.cpu())
    identical, ties, mismatches = 0, [], []
    largest_score_difference = 0.0
    for i, (cpu_row, device_row) in enumerate(zip(expected_rows, generated_rows, strict=True)):
        if decoding == "greedy":
            steps = min(len(cpu_row), len(device_row)) - 1
            for step in range(steps if cpu_row == device_row else 0):
                largest_score_difference = max(
                    largest_score_difference,
                    largest_difference(generated.scores[step][i], expected.scores[step][i]),
                )
        elif cpu_row == device_row:
            largest_score_difference = max(
                largest_score_difference,
                largest_difference(generated.sequences_scores[i], expected.sequences_scores[i]),
            )
        if cpu_row == device_row:
            identical += 1
            continue
        if decoding == "greedy":
            position = next(
                (p for p, (a, b) in enumerate(zip(cpu_row, device_row, strict=False)) if a != b),
                min(len(cpu_row), len(device_row)),
            )
            if position >= min(len(cpu_row), len(device_row)):
                mismatches.append({"sentence": i, "why": "one ends where the other goes on"})
                continue
            scores = expected.scores[position - 1][i]
            margin = (scores[cpu_row[position]] - scores[device_row[position]]).item()
            entry = {"sentence": i, "position": position, "cpu_margin": margin}
        else:
            margin = abs(expected.sequences_scores[i].item() - generated.sequences_scores[i].item())
            entry = {"sentence": i, "score_difference": margin}
        (ties if margin <= TIE else mismatches).append(entry)
    figures.add(
        decoding=decoding,
        sentences=len(expected_rows),
        identical=identical,
        near_ties=ties,
        mismatches=mismatches,
        new_tokens=NEW_TOKENS,
        max_score_difference_when_identical=largest_score_difference,
    )
    assert not mismatches, f"{decoding}: tokens on {device} differ from the CPU's beyond a near tie: {mismatches}"
    assert largest_score_difference < TOLERANCE


@pytest.mark.parametrize("precision", ["bf16-weights", "bf16-autocast"])
def test_generate_in_bfloat16(device, precision, figures):
    """generate() with weights cast to bfloat16 (as the speed benchmark serves) and under bf16 autocast over float32
    weights (as the Trainer's --bf16 evaluates): greedy and the paper's beam search run and give tokens of the
    vocabulary; their agreement with float32 on the same device, and the logits' largest difference, are recorded
    (bfloat16 keeps 8 bits of mantissa: not equality, a sanity bound of 0.5 on logits of magnitude about 1-5)."""
    model = build()
    source, source_mask = source_batch(model.config)
    source, source_mask = source.to(device), source_mask.to(device)
    reference = moved(model, device)
    if precision == "bf16-weights":
        net, context = moved(model, device, torch.bfloat16), contextlib.nullcontext
    else:
        net = reference
        context = lambda: torch.autocast(torch.device(device).type, dtype=torch.bfloat16)  # noqa: E731
    results = {}
    with torch.no_grad():
        decoder_ids = torch.full((len(source), 1), model.config.decoder_start_token_id, device=device)
        exact = reference(input_ids=source, attention_mask=source_mask, decoder_input_ids=decoder_ids).logits
        with context():
            approximate = net(input_ids=source, attention_mask=source_mask, decoder_input_ids=decoder_ids).logits
        for decoding in ("greedy", "paper"):
            settings = dict(max_new_tokens=NEW_TOKENS, return_dict_in_generate=True, output_scores=True)
            settings.update(DECODINGS[decoding])
            float32 = reference.generate(input_ids=source, attention_mask=source_mask, **settings)
            with context():
                output = net.generate(input_ids=source, attention_mask=source_mask, **settings)
            sequences = output.sequences
            assert sequences.shape[0] == len(source) and sequences.shape[1] > 1
            assert int(sequences.min()) >= 0 and int(sequences.max()) < model.config.vocab_size
            if getattr(output, "sequences_scores", None) is not None:  # beam search's
                assert torch.isfinite(output.sequences_scores).all()
            same = sum(a == b for a, b in zip(rows(sequences.cpu()), rows(float32.sequences.cpu()), strict=True))
            results[decoding] = {"sentences_identical_to_float32": same, "sentences": len(source)}
    difference = largest_difference(approximate, exact)
    figures.add(
        precision=precision,
        logits_dtype=str(approximate.dtype),
        max_abs_logit_difference_from_float32=difference,
        **results,
    )
    assert approximate.dtype == torch.bfloat16
    assert torch.isfinite(approximate).all() and difference < 0.5
