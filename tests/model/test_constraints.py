"""generate(paper_decoding=True, constraints=...): phrases every translation must hold, met by dynamic beam allocation
(Post and Vilar 2018), against a second implementation written for the tests (helpers/reference_constrained.py:
plain Python, no cache, a hypothesis's standing read from its tokens)."""

import random

import pytest
import torch
from helpers.reference_constrained import constrained_search, holds
from helpers.reference_search import (
    DECAY,
    MODELS,
    Averaged,
    EndLikelierWithLength,
    decoded,
    paper_generate,
    random_model,
)
from helpers.tiny_models import EOS, PAD, padded_batch

from modeling_vaswani.constraints_vaswani import Progress, advance, allocate
from modeling_vaswani.decoding_vaswani import DecoderSteps

VOCAB = 61


@pytest.fixture(scope="module", params=list(MODELS))
def model(request):
    return random_model(**MODELS[request.param])


def random_constraints(rng: random.Random, sentences: int) -> list[list[list[int]]]:
    """0-2 phrases of 1-3 tokens a sentence, never the special ids (0-3)."""
    return [
        [[rng.randint(4, VOCAB - 1) for _ in range(rng.randint(1, 3))] for _ in range(rng.randint(0, 2))]
        for _ in range(sentences)
    ]


def constrained_cases(count: int, seed: int):
    rng = random.Random(seed)
    for _ in range(count):
        lengths = [rng.randint(2, 8) for _ in range(rng.choice([1, 2, 3]))]
        settings = {"num_beams": rng.choice([1, 2, 4, 5]), "length_penalty": rng.choice([0.0, 0.6, 1.0])}
        if settings["num_beams"] > 1 and rng.random() < 0.4:
            settings["num_return_sequences"] = rng.randint(1, settings["num_beams"])
        yield lengths, rng.randrange(10**6), settings, random_constraints(rng, len(lengths))


def reference_rows(model, input_ids, attention_mask, constraints, settings):
    """The reference's (tokens, score) for every returned row, in generate()'s order."""
    table = model.config.max_position_embeddings if model.config.position_embedding_type == "learned" else 10**6
    rows = []
    for row, keep, phrases in zip(input_ids, attention_mask, constraints, strict=True):
        source = row[keep.bool()].tolist()
        limit = min(len(source) + 50, table - 1)
        beams, returned = settings["num_beams"], settings.get("num_return_sequences", 1)
        rows += constrained_search(
            model, source, phrases, beams, settings["length_penalty"], limit, returned, EndLikelierWithLength()
        )
    return rows


# === Tracking and allocation, against their definitions ==============================================================


def test_a_phrase_is_met_exactly_when_the_hypothesis_holds_it():
    """Random phrases over 4 tokens (so that they overlap, repeat and begin inside one another) and random
    hypotheses: the tracked standing equals the one read from the tokens, after every token."""
    rng = random.Random(0)
    for _ in range(3000):
        phrases = [[rng.randint(0, 3) for _ in range(rng.randint(1, 4))] for _ in range(rng.randint(1, 3))]
        tokens, progress = [], Progress()
        for _ in range(rng.randint(0, 12)):
            tokens.append(rng.randint(0, 3))
            progress = advance(phrases, progress, tokens[-1])
            held = sum(1 << i for i, phrase in enumerate(phrases) if holds(tokens, phrase))
            assert progress.met == held, (phrases, tokens)


def test_allocation_gives_each_bank_its_places_and_the_rest_in_turns():
    scores = [-1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0]
    # 4 banks (0-3 tokens met), beam 4: a place each. Bank 3 has no candidate; its place goes, in turns from the
    # highest bank down, to bank 2's next.
    assert allocate(scores, [0, 0, 0, 1, 2, 2, 1], 4, 3) == [0, 3, 4, 5]
    # 3 banks, beam 5: places 1, 2, 2 (the highest banks get the remainder); bank 0 takes its likeliest only.
    assert allocate(scores, [0, 0, 0, 1, 1, 2, 2], 5, 2) == [0, 3, 4, 5, 6]
    # One bank: the k likeliest, as without constraints.
    assert allocate(scores, [0] * 7, 3, 0) == [0, 1, 2]


# === The search, against the reference ===============================================================================


@pytest.mark.filterwarnings("ignore:.*learned positions")
def test_tokens_and_scores_equal_the_references_and_every_phrase_is_held(model):
    compared = constrained = 0
    for lengths, seed, settings, constraints in constrained_cases(12, seed=71):
        input_ids, attention_mask = padded_batch(lengths, vocab_size=VOCAB, seed=seed)
        output = paper_generate(model, input_ids, attention_mask, constraints=constraints, **settings)
        expected = reference_rows(model, input_ids, attention_mask, constraints, settings)
        assert decoded(output) == [tokens for tokens, _ in expected], (settings, constraints)
        if settings["num_beams"] > 1:
            scores = [score for _, score in expected]
            assert output.sequences_scores.tolist() == pytest.approx(scores, abs=1e-4), (settings, constraints)
        returned = settings.get("num_return_sequences", 1)
        for row, tokens in enumerate(decoded(output)):
            phrases = constraints[row // returned]
            if row % returned == 0:  # the best: every phrase held (the limit of input length + 50 leaves room)
                assert all(holds(tokens, phrase) for phrase in phrases), (phrases, tokens)
            constrained += bool(phrases)
        compared += len(expected)
    assert compared >= 30 and constrained >= 10


def test_a_sentence_without_phrases_decodes_as_without_constraints(model):
    """In a batch where other sentences carry phrases, one without any gets the tokens and scores it gets with no
    constraints at all: its candidates are the 2k likeliest and its k live ones the likeliest of them."""
    input_ids, attention_mask = padded_batch([6, 4, 7], vocab_size=VOCAB, seed=72)
    for beams in (1, 4):
        free = paper_generate(model, input_ids, attention_mask, num_beams=beams)
        bound = paper_generate(model, input_ids, attention_mask, num_beams=beams, constraints=[[[9, 10]], [], [[11]]])
        assert decoded(bound)[1] == decoded(free)[1]
        if beams > 1:
            assert bound.sequences_scores[1].item() == pytest.approx(free.sequences_scores[1].item(), abs=1e-5)
        assert holds(decoded(bound)[0], [9, 10]) and holds(decoded(bound)[2], [11])


def test_constraints_go_with_a_target_prefix_an_ensemble_and_a_shrinking_batch(monkeypatch):
    """Prefixes kept and phrases held with an ensemble; the same tokens whether finished sentences leave the batch
    (without return_dict_in_generate) or not; the ensemble's search is the reference's over the averaged
    log-probabilities."""
    first, second = random_model(seed=31), random_model(seed=32)
    selected = []
    original = DecoderSteps.select
    monkeypatch.setattr(
        DecoderSteps, "select", lambda self, kept, k: selected.append(len(kept)) or original(self, kept, k)
    )
    input_ids, attention_mask = padded_batch([3, 8, 5, 6], vocab_size=VOCAB, seed=73)
    constraints = [[[20, 21]], [[30]], [], [[40], [41, 42]]]
    prefixes = [[12], [], [13, 14], []]
    # transformers' own </s> ramp (row-wise, so the batch may shrink; the tests' EndLikelierWithLength is not known
    # to be), and constraints, prefixes and an ensemble.
    settings = {"num_beams": 4, "constraints": constraints, "target_prefix": prefixes, "ensemble": [second]}
    settings["exponential_decay_length_penalty"] = DECAY
    batch = {"input_ids": input_ids, "attention_mask": attention_mask, "paper_decoding": True}
    recorded = first.generate(**batch, return_dict_in_generate=True, **settings)
    assert not selected  # recording carries every sentence to the end
    shrinking = first.generate(**batch, **settings)
    assert selected, "no sentence left the batch"
    assert torch.equal(shrinking, recorded.sequences)
    for tokens, phrases, prefix in zip(decoded(recorded), constraints, prefixes, strict=True):
        assert tokens[: len(prefix)] == prefix and all(holds(tokens, phrase) for phrase in phrases), tokens
    plain = {"num_beams": 4, "length_penalty": 0.6}  # the reference forces no prefix
    output = paper_generate(first, input_ids, attention_mask, constraints=constraints, ensemble=[second], **plain)
    expected = reference_rows(Averaged(first, second), input_ids, attention_mask, constraints, plain)
    assert decoded(output) == [tokens for tokens, _ in expected]


# === Refused, naming the sentence and the phrase =====================================================================

REFUSED = {
    "an id outside the vocabulary": ([[[5, VOCAB]], []], r"constraints\[0\]\[0\] is \[5, 61\]; expected token ids"),
    "a negative id": ([[], [[-1]]], r"constraints\[1\]\[0\] is \[-1\]; expected token ids from 0 to 60"),
    "an empty phrase": ([[[5], []], []], r"constraints\[0\]\[1\] is \[\]; expected a non-empty list"),
    "a phrase not a list": ([[5], []], r"constraints\[0\]\[0\] is 5; expected a non-empty list"),
    "the end of sentence": (
        [[[5, EOS]], []],
        r"constraints\[0\]\[0\] is \[5, 2\], which holds the special id\(s\) \[2\]",
    ),
    "the padding": ([[], [[PAD, 7]]], r"constraints\[1\]\[0\] is \[1, 7\], which holds the special id\(s\) \[1\]"),
    "one list too few": ([[[5]]], r"constraints has 1 entries; expected a list of 2 lists of phrases"),
    "more tokens than the limit leaves": ([[[5] * 30, [6] * 30], []], r"constraints\[0\] hold 60 tokens .*sentence 0"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_bad_constraints_are_refused_by_sentence_and_phrase(case):
    model = random_model(seed=31)
    input_ids, attention_mask = padded_batch([4, 3], vocab_size=VOCAB, seed=74)
    constraints, message = REFUSED[case]
    with pytest.raises(ValueError, match=message):
        model.generate(
            input_ids=input_ids, attention_mask=attention_mask, paper_decoding=True, constraints=constraints
        )


def test_constraints_need_the_papers_decoding_and_a_prefix_counts_against_the_room():
    model = random_model(seed=31)
    input_ids, attention_mask = padded_batch([4, 3], vocab_size=VOCAB, seed=74)
    with pytest.raises(ValueError, match="constraints need paper_decoding=True"):
        model.generate(input_ids=input_ids, attention_mask=attention_mask, constraints=[[[5]], []])
    with pytest.raises(ValueError, match=r"constraints\[1\] hold 3 tokens .* and its target prefix 2; sentence 1"):
        model.generate(
            input_ids=input_ids, attention_mask=attention_mask, paper_decoding=True, max_new_tokens=4,
            constraints=[[], [[5, 6, 7]]], target_prefix=[[], [8, 9]],
        )  # fmt: skip
    torch.manual_seed(0)
    fits = model.generate(
        input_ids=input_ids, attention_mask=attention_mask, paper_decoding=True, max_new_tokens=5,
        constraints=[[], [[5, 6, 7]]], target_prefix=[[], [8, 9]],
    )  # fmt: skip
    assert fits[1, 1:6].tolist() == [8, 9, 5, 6, 7] and EOS not in fits[1, 1:6].tolist()


# === Negative constraints (avoid), both decoding modes ===============================================================


def holds_anywhere(rows: list[list[int]], phrase: list[int]) -> bool:
    return any(holds(tokens, phrase) for tokens in rows)


@pytest.mark.parametrize("paper_decoding", [True, False], ids=["paper", "stock"])
def test_avoided_phrases_never_appear_and_other_sentences_are_untouched(paper_decoding):
    """The phrases each sentence's free translation holds (its two most frequent tokens, and a bigram) are avoided in
    that sentence only: its translation then holds none of them, and every other sentence's is as it was."""
    model = random_model(seed=31)
    input_ids, attention_mask = padded_batch([6, 4, 7], vocab_size=VOCAB, seed=75)
    settings = {"num_beams": 4, "max_new_tokens": 12, "exponential_decay_length_penalty": DECAY}
    batch = {"input_ids": input_ids, "attention_mask": attention_mask, "paper_decoding": paper_decoding}
    free = decoded(model.generate(**batch, return_dict_in_generate=True, **settings))
    content = [[t for t in tokens if t != EOS] for tokens in free]
    assert len(content[1]) >= 2
    avoid = [[], [[content[1][0]], content[1][:2]], []]
    output = decoded(model.generate(**batch, return_dict_in_generate=True, avoid=avoid, **settings))
    assert not holds(output[1], avoid[1][0]) and not holds(output[1], avoid[1][1]), (free[1], output[1])
    assert output[0] == free[0] and output[2] == free[2]


def test_avoiding_a_bigram_leaves_its_tokens_free_elsewhere():
    """[a, b] rules out b only right after a: a hand-made step check of the processor."""
    from modeling_vaswani.guidance_vaswani import AvoidPhrases

    scores = torch.zeros(4, 8)
    input_ids = torch.tensor([[0, 5], [0, 6], [0, 5], [0, 7]])  # two sentences, two rows each
    out = AvoidPhrases([[[5, 3]], [[7], [2, 4]]])(input_ids, scores)
    banned = (out == -float("inf")).nonzero().tolist()
    assert banned == [[0, 3], [2, 7], [3, 7]]  # row 0 ends with 5: 3 ruled out; sentence 1's rows: 7 everywhere


AVOID_REFUSED = {
    "the end of sentence": ([[[5, EOS]], []], None, r"avoid\[0\]\[0\] is \[5, 2\], which holds the end of sentence"),
    "an id outside the vocabulary": ([[], [[VOCAB]]], None, r"avoid\[1\]\[0\] is \[61\]; expected token ids"),
    "one list too many": ([[], [], []], None, r"avoid has 3 entries; expected a list of 2 lists"),
    "a phrase a required one holds": (
        [[[7, 8]], []],
        [[[6, 7, 8, 9]], []],
        r"avoid\[0\]\[0\] is \[7, 8\], which the required phrase \[6, 7, 8, 9\]",
    ),
}


@pytest.mark.parametrize("case", list(AVOID_REFUSED))
def test_bad_avoid_lists_are_refused_by_sentence_and_phrase(case):
    model = random_model(seed=31)
    input_ids, attention_mask = padded_batch([4, 3], vocab_size=VOCAB, seed=74)
    avoid, constraints, message = AVOID_REFUSED[case]
    with pytest.raises(ValueError, match=message):
        model.generate(
            input_ids=input_ids, attention_mask=attention_mask, paper_decoding=True, avoid=avoid,
            constraints=constraints,
        )  # fmt: skip
