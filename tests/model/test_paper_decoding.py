"""generate(paper_decoding=True), Section 6.1's search, against a second implementation written for the tests
(helpers/reference_search.py: one sentence at a time in plain Python, no cache)."""

import inspect

import pytest
import torch
from helpers.reference_search import (
    DECAY,
    MODELS,
    EndLikelierWithLength,
    decoded,
    expected_output,
    paper_generate,
    random_cases,
    random_model,
)
from helpers.tiny_models import EOS, PAD, padded_batch
from transformers import GenerationConfig, GenerationMixin, Pipeline
from transformers import generation as stock
from transformers.generation import ExponentialDecayLengthPenalty, GenerateBeamEncoderDecoderOutput

from modeling_vaswani import VaswaniForConditionalGeneration, VaswaniTranslationPipeline, generation_vaswani
from modeling_vaswani.decoding_vaswani import DecoderSteps, Recorder, scores_only_fall
from modeling_vaswani.generation_vaswani import VaswaniGenerationMixin


@pytest.fixture(scope="module", params=list(MODELS))
def model(request):
    return random_model(**MODELS[request.param])


def run(model, lengths, seed, settings):
    input_ids, attention_mask = padded_batch(lengths, vocab_size=model.config.vocab_size, seed=seed)
    return input_ids, attention_mask, paper_generate(model, input_ids, attention_mask, **settings)


@pytest.mark.filterwarnings("ignore:.*learned positions")
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_tokens_and_scores_equal_the_references(model):
    compared, lengths_ended = 0, set()
    for lengths, seed, settings in random_cases(25, seed=34):
        input_ids, attention_mask, output = run(model, lengths, seed, settings)
        expected = expected_output(model, input_ids, attention_mask, settings)
        assert decoded(output) == [tokens for tokens, _ in expected], settings
        if settings["num_beams"] > 1:
            assert output.sequences_scores.tolist() == pytest.approx([score for _, score in expected], abs=1e-4)
        compared += len(expected)
        lengths_ended |= {len(tokens) for tokens, _ in expected if tokens[-1] == EOS}
    assert compared >= 20 and len(lengths_ended) >= 3, "hypotheses must end at several lengths for ranking to matter"


@pytest.mark.filterwarnings("ignore:.*learned positions")
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_sentences_leave_the_batch_when_their_search_ends_and_tokens_stay_the_references(model, monkeypatch):
    """Without return_dict_in_generate and with transformers' own processors, a sentence whose search is over leaves
    the batch (DecoderSteps.select): the tokens are still the reference's, sentence by sentence."""
    selected = []
    original = DecoderSteps.select
    monkeypatch.setattr(
        DecoderSteps, "select", lambda self, kept, k: selected.append(len(kept)) or original(self, kept, k)
    )
    processor = ExponentialDecayLengthPenalty(DECAY, EOS, input_ids_seq_length=1)  # as generate() builds it
    compared = 0
    for lengths, seed, settings in random_cases(25, seed=39):
        lengths = [*lengths, 9, 3]  # sentences enough to end at different steps
        input_ids, attention_mask = padded_batch(lengths, vocab_size=model.config.vocab_size, seed=seed)
        sequences = model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            paper_decoding=True,
            exponential_decay_length_penalty=DECAY,
            **settings,
        )
        expected = expected_output(model, input_ids, attention_mask, settings, processor=processor)
        assert decoded(GenerateBeamEncoderDecoderOutput(sequences=sequences)) == [t for t, _ in expected], settings
        compared += len(expected)
    assert compared >= 75 and len(selected) >= 8, selected  # sentences did leave the batch, in many cases
    assert min(selected) >= 1


@pytest.mark.filterwarnings("ignore:.*learned positions")
def test_a_sentence_whose_returned_hypotheses_are_final_leaves_early_with_the_references_tokens_and_scores(
    model, monkeypatch
):
    """A shrinking search (the exported engines', and generate()'s without return_dict_in_generate) ends a sentence
    once its n returned hypotheses are final: tokens and scores stay the reference's (the whole search, one sentence
    at a time), and n = 1 of beam 4 hands the decoder fewer rows than n = 4 on the same inputs (the same before)."""
    monkeypatch.setattr(generation_vaswani, "may_shrink", lambda *arguments: True)
    # Scores kept for the finished hypotheses only (as the exported engines keep them): nothing recorded step by step.
    monkeypatch.setattr(generation_vaswani, "Recorder", lambda config, encoder: Recorder(GenerationConfig(), encoder))
    rows = []
    original = DecoderSteps.__call__
    monkeypatch.setattr(DecoderSteps, "__call__", lambda self, ids: rows.append(ids.shape[0]) or original(self, ids))
    compared, work = 0, {1: 0, 4: 0}
    for lengths, seed, settings in random_cases(20, seed=40):
        lengths = [*lengths, 9, 3]
        input_ids, attention_mask = padded_batch(lengths, vocab_size=model.config.vocab_size, seed=seed)
        for n in sorted({settings.get("num_return_sequences", 1), 1, 4} if settings["num_beams"] == 4 else {0}):
            cased = {**settings, "num_return_sequences": n} if n else settings
            rows.clear()
            output = paper_generate(model, input_ids, attention_mask, **cased)
            expected = expected_output(model, input_ids, attention_mask, cased)
            assert decoded(output) == [tokens for tokens, _ in expected], cased
            if cased["num_beams"] > 1:
                assert output.sequences_scores.tolist() == pytest.approx([score for _, score in expected], abs=1e-4)
            compared += len(expected)
            work[n] = work.get(n, 0) + sum(rows)
    assert compared >= 60
    assert work[1] < work[4], work


def test_only_processors_that_keep_scores_at_most_zero_let_a_sentence_leave_early():
    """The early stop rests on scores that only fall: each of transformers' processors checked on log-probabilities
    (are its scores at most 0?) must agree with `scores_only_fall`, and an unknown processor counts as one that may
    add to a score."""
    log_probs = torch.log_softmax(torch.randn(3, 12, generator=torch.Generator().manual_seed(41)), dim=-1)
    ids = torch.tensor([[0, 5, 7, 5], [0, 2, 3, 4], [0, 9, 9, 9]])
    processors = [
        stock.MinLengthLogitsProcessor(10, EOS),
        stock.RepetitionPenaltyLogitsProcessor(1.5),
        stock.TemperatureLogitsWarper(0.7),
        stock.NoRepeatNGramLogitsProcessor(2),
        stock.ForcedEOSTokenLogitsProcessor(4, EOS),
        stock.SuppressTokensLogitsProcessor([3, 4]),
        stock.ExponentialDecayLengthPenalty((1, 3.0), EOS, 1),
        stock.SequenceBiasLogitsProcessor({(5,): 4.0}),
    ]
    for processor in processors:
        at_most_zero = bool((processor(ids, log_probs.clone()) <= 0).all())
        assert scores_only_fall([processor]) == at_most_zero, type(processor).__name__
    assert not scores_only_fall([stock.LogitsProcessor()])  # a processor of unknown kind
    assert scores_only_fall([EndLikelierWithLength()]) and scores_only_fall([])


def test_the_comparison_detects_a_wrong_alpha():
    """The same comparison, the reference given another alpha: it must disagree somewhere, or the test above could
    not tell GNMT's alpha from any other."""
    model = random_model(**MODELS["plain"])
    disagreements = 0
    for lengths, seed, settings in random_cases(10, seed=35):
        if settings["num_beams"] == 1 or settings["length_penalty"] == 0.0:
            continue
        input_ids, attention_mask, output = run(model, lengths, seed, settings)
        wrong = expected_output(model, input_ids, attention_mask, settings, alpha=settings["length_penalty"] / 2)
        disagreements += decoded(output) != [tokens for tokens, _ in wrong]
    assert disagreements > 0


def test_the_paper_ranks_otherwise_than_stock_beam_search():
    """Stock generate() (|Y|^alpha, its own stopping) on the same inputs gives other translations somewhere: the
    paper's decoding is not transformers' beam search under another name."""
    model = random_model(**MODELS["plain"])
    input_ids, attention_mask = padded_batch([3, 5, 7, 4, 6, 8], seed=36)
    settings = {"length_penalty": 1.0, "logits_processor": [EndLikelierWithLength()]}
    stock = model.generate(
        input_ids=input_ids, attention_mask=attention_mask, num_beams=4, max_new_tokens=40, **settings
    )
    paper = model.generate(input_ids=input_ids, attention_mask=attention_mask, paper_decoding=True, **settings)
    assert [row[row.ne(PAD)].tolist() for row in stock] != [row[row.ne(PAD)].tolist() for row in paper]


def test_beams_share_their_sentences_encoder_keys_and_values():
    """One row of encoder-decoder attention keys and values per sentence, never reordered; the decoder's
    self-attention cache holds one row per hypothesis."""
    model = random_model(**MODELS["plain"])
    input_ids, attention_mask = padded_batch([4, 9, 6], seed=37)
    output = model.generate(
        input_ids=input_ids, attention_mask=attention_mask, paper_decoding=True, return_dict_in_generate=True
    )
    cache = output.past_key_values
    with torch.no_grad():
        encoder_output = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    for layer, cached in zip(model.model.decoder.layers, cache.cross_attention_cache.layers, strict=True):
        keys = layer.cross_attn.w_k(encoder_output).view(3, input_ids.shape[1], model.config.num_heads, -1)
        torch.testing.assert_close(cached.keys, keys.transpose(1, 2))
    assert all(len(layer.keys) == 3 * 4 for layer in cache.self_attention_cache.layers)


def test_settings_the_search_cannot_honour_are_refused():
    model = random_model(**MODELS["plain"])
    input_ids, attention_mask = padded_batch([4, 5], seed=38)
    batch = {"input_ids": input_ids, "attention_mask": attention_mask}
    with pytest.raises(ValueError, match="ask for group_beam_search; expected greedy search"):
        model.generate(**batch, paper_decoding=True, num_beam_groups=2, diversity_penalty=0.5)
    with pytest.raises(ValueError, match="got custom_generate='some/repo' as well"):
        model.generate(**batch, paper_decoding=True, custom_generate="some/repo")


def test_the_payload_overrides_no_private_method_of_transformers():
    """transformers' private methods change between releases without notice: the paper's decoding and the pipeline
    override only public methods and the pipeline hooks that transformers documents for subclasses."""
    for ours, theirs, allowed in (
        (VaswaniGenerationMixin, GenerationMixin, set()),
        (VaswaniTranslationPipeline, Pipeline, {"_sanitize_parameters", "_forward"}),
    ):
        overridden = {
            name
            for name, value in vars(ours).items()
            if name.startswith("_") and not name.startswith("__") and callable(value) and hasattr(theirs, name)
        }
        assert overridden <= allowed, f"{ours.__name__} overrides {sorted(overridden - allowed)}"
    # transformers' beam search calls a model's `_reorder_cache` where there is one, instead of the cache's own.
    assert not hasattr(VaswaniForConditionalGeneration, "_reorder_cache")
    searching = ("generation", "search", "decoding", "guidance", "constraints", "pipeline")
    for module in (f"{name}_vaswani" for name in searching):
        source = inspect.getsource(__import__(f"modeling_vaswani.{module}", fromlist=["_"]))
        for name in dir(GenerationMixin) + dir(Pipeline):
            if name.startswith("_") and not name.startswith("__"):
                assert f".{name}(" not in source, f"{module}.py calls transformers' private {name}"
