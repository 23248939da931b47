"""generate(target_prefix=...): each translation starts with its sentence's prefix, and the rest is what the paper's
search (test_paper_decoding.py's reference, one sentence at a time) finds with the prefix's tokens forced, their
log-probabilities kept in the score."""

import math
import random

import pytest
import torch
from helpers.reference_search import (
    DECAY,
    MODELS,
    EndLikelierWithLength,
    decoded,
    paper_generate,
    random_cases,
    random_model,
    reference_search,
)
from helpers.tiny_models import EOS, padded_batch
from transformers.generation import ExponentialDecayLengthPenalty, GenerateBeamEncoderDecoderOutput

from modeling_vaswani.decoding_vaswani import DecoderSteps


@pytest.fixture(scope="module", params=list(MODELS))
def model(request):
    return random_model(**MODELS[request.param])


class ForcedPrefix:
    """The reference's processor for one sentence: `inner`'s, then, while the prefix lasts, -inf for every token but
    the prefix's next one, which keeps its score."""

    def __init__(self, prefix: list[int], inner):
        self.prefix, self.inner = prefix, inner

    def __call__(self, decoder_input_ids, scores):
        scores = self.inner(decoder_input_ids, scores)
        step = decoder_input_ids.shape[1] - 1
        if step >= len(self.prefix):
            return scores
        forced = torch.full_like(scores, -math.inf)
        forced[:, self.prefix[step]] = scores[:, self.prefix[step]]
        return forced


def limits(model, input_ids, attention_mask, settings) -> list[int]:
    """Each sentence's output limit in tokens, as test_paper_decoding's expected_output computes it."""
    cap = settings.get("max_new_tokens", settings.get("max_length", 10**6) - 1)
    table = model.config.max_position_embeddings if model.config.position_embedding_type == "learned" else 10**6
    return [min(int(keep.sum()) + 50, cap, table - 1) for keep in attention_mask]


def cases(model, count: int, seed: int, more: tuple = ()):
    """random_cases' batches (with sentences of the lengths `more` added) and settings, with a random prefix (often
    none) for each sentence that fits its limit."""
    rng = random.Random(seed)
    for lengths, batch_seed, settings in random_cases(count, seed):
        lengths = [*lengths, *more]
        input_ids, attention_mask = padded_batch(lengths, vocab_size=model.config.vocab_size, seed=batch_seed)
        prefixes = []
        for limit in limits(model, input_ids, attention_mask, settings):
            length = min(rng.choice([0, 1, 2, 3]), limit - 1)
            prefixes.append([rng.randrange(4, model.config.vocab_size) for _ in range(length)])
        yield input_ids, attention_mask, prefixes, settings


def expected(model, input_ids, attention_mask, prefixes, settings, inner):
    results = []
    for row, keep, prefix, limit in zip(
        input_ids, attention_mask, prefixes, limits(model, input_ids, attention_mask, settings), strict=True
    ):
        results += reference_search(
            model, row[keep.bool()].tolist(), settings["num_beams"], settings["length_penalty"], limit,
            settings.get("num_return_sequences", 1), ForcedPrefix(prefix, inner),
        )  # fmt: skip
    return results


@pytest.mark.filterwarnings("ignore:.*learned positions")
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_prefixes_start_the_translations_and_the_rest_is_the_references(model):
    compared = prefixed = 0
    for input_ids, attention_mask, prefixes, settings in cases(model, 20, seed=51):
        output = paper_generate(model, input_ids, attention_mask, target_prefix=prefixes, **settings)
        reference = expected(model, input_ids, attention_mask, prefixes, settings, EndLikelierWithLength())
        assert decoded(output) == [tokens for tokens, _ in reference], (settings, prefixes)
        if settings["num_beams"] > 1:
            assert output.sequences_scores.tolist() == pytest.approx([score for _, score in reference], abs=1e-4)
        rows = len(reference) // len(prefixes)
        for number, (tokens, _) in enumerate(reference):
            prefix = prefixes[number // rows]
            assert tokens[: len(prefix)] == prefix
            prefixed += bool(prefix)
        compared += len(reference)
    assert compared >= 20 and prefixed >= 10


@pytest.mark.filterwarnings("ignore:.*learned positions")
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_prefixes_follow_their_sentences_as_the_batch_shrinks(model, monkeypatch):
    selected = []
    original = DecoderSteps.select
    monkeypatch.setattr(
        DecoderSteps, "select", lambda self, kept, k: selected.append(len(kept)) or original(self, kept, k)
    )
    inner = ExponentialDecayLengthPenalty(DECAY, EOS, input_ids_seq_length=1)  # as generate() builds it
    compared = 0
    for input_ids, attention_mask, prefixes, settings in cases(model, 15, seed=52, more=(9, 3)):
        sequences = model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            paper_decoding=True,
            exponential_decay_length_penalty=DECAY,
            target_prefix=prefixes,
            **settings,
        )
        reference = expected(model, input_ids, attention_mask, prefixes, settings, inner)
        got = decoded(GenerateBeamEncoderDecoderOutput(sequences=sequences))
        assert got == [tokens for tokens, _ in reference], (settings, prefixes)
        compared += len(reference)
    assert compared >= 15 and len(selected) >= 3, selected


def test_stock_generate_keeps_the_prefix_too():
    model = random_model(**MODELS["plain"])
    input_ids, attention_mask = padded_batch([4, 6, 3], seed=53)
    prefixes = [[7, 8], [], [9]]
    for beams in (1, 4):
        output = model.generate(
            input_ids=input_ids, attention_mask=attention_mask, num_beams=beams, max_new_tokens=6,
            target_prefix=prefixes,
        )  # fmt: skip
        plain = model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=beams, max_new_tokens=6)
        assert output[0, 1:3].tolist() == [7, 8] and output[2, 1].item() == 9
        # The sentence without a prefix decodes as without any.
        assert output[1][output[1].ne(1)].tolist() == plain[1][plain[1].ne(1)].tolist()


def test_bad_prefixes_are_refused_before_any_work():
    model = random_model(**MODELS["plain"])
    input_ids, attention_mask = padded_batch([4, 6], seed=54)
    batch = {"input_ids": input_ids, "attention_mask": attention_mask}
    with pytest.raises(ValueError, match="target_prefix has 1 entries; expected a list of 2 lists of token ids"):
        model.generate(**batch, paper_decoding=True, target_prefix=[[5]])
    with pytest.raises(ValueError, match=r"target_prefix\[1\] is \[5, 99\]; expected a list of token ids from 0"):
        model.generate(**batch, paper_decoding=True, target_prefix=[[5], [5, 99]])
    with pytest.raises(ValueError, match=r"target_prefix\[0\] has 3 tokens and sentence 0 may generate 3"):
        model.generate(**batch, paper_decoding=True, max_new_tokens=3, target_prefix=[[5, 6, 7], []])
    with pytest.raises(ValueError, match=r"target_prefix\[0\] has 20 tokens and sentence 0 may generate 19"):
        model.generate(**batch, num_beams=2, target_prefix=[[5] * 20, []])  # stock: max_length 20, the start counted
