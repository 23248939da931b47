"""generate(paper_decoding=True), Section 6.1's search, against a second implementation written here.

The reference decodes one sentence at a time in plain Python: no cache, the whole decoder recomputed for every
hypothesis at every step, hypotheses ranked by log P(Y|X) / lp(Y) with GNMT's lp(Y) = ((5 + |Y|) / 6)^alpha. Its rules
are those `beam_search`'s docstring states: the 2k likeliest continuations (by log P) of the k live hypotheses; of
those, the ones among the first k that end (</s>, or the sentence's length limit) join the finished ones, and the k
likeliest that do not end live on; a sentence ends when no live hypothesis can beat its k-th best finished one, even
at its longest length allowed; with one beam, the likeliest token at each step.
"""

import inspect
import random

import pytest
import torch
from helpers.tiny_models import BOS, EOS, PAD, padded_batch, tiny_model
from transformers import GenerationMixin, LogitsProcessor, Pipeline
from transformers.generation import ExponentialDecayLengthPenalty, GenerateBeamEncoderDecoderOutput

from modeling_vaswani import VaswaniForConditionalGeneration, VaswaniTranslationPipeline
from modeling_vaswani.generation_vaswani import DecoderSteps, VaswaniGenerationMixin


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The reference runs hundreds of tiny forward passes, which a second thread only slows on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


RAMP = 0.6  # what </s> gains in logit for each token written: hypotheses end at several lengths


class EndLikelierWithLength(LogitsProcessor):
    """Raises </s> by RAMP per token written, then normalizes: the tiny random models would otherwise end at once or
    never, and GNMT's ranking decides only between hypotheses of different lengths."""

    def __call__(self, input_ids, scores):
        scores = scores.clone()
        scores[:, EOS] += RAMP * (input_ids.shape[1] - 1)
        return scores.log_softmax(-1)


def lp(length: int, alpha: float) -> float:
    return ((5 + length) / 6) ** alpha


@torch.no_grad()
def next_log_probs(model, source, outputs: list[list[int]], processor=None, on_logits=False) -> list[list[float]]:
    """log P(next token | source, output so far) for outputs of one length, as EndLikelierWithLength makes it (or
    `processor`, one of transformers' logits processors): the whole decoder input run again, no cache, the source
    repeated for each output."""
    start = model.config.decoder_start_token_id
    decoder_input_ids = torch.tensor([[start, *output] for output in outputs])
    logits = model(input_ids=torch.tensor([source] * len(outputs)), decoder_input_ids=decoder_input_ids).logits[:, -1]
    log_probs = torch.log_softmax(logits.double(), dim=-1)
    if processor is not None and on_logits:  # greedy search processes the logits, beam search log P
        return processor(decoder_input_ids, logits.double()).tolist()
    if processor is not None:
        return processor(decoder_input_ids, log_probs).tolist()
    log_probs[:, EOS] += RAMP * len(outputs[0])
    return torch.log_softmax(log_probs, dim=-1).tolist()


def reference_search(model, source: list[int], beams: int, alpha: float, limit: int, returned: int, processor=None):
    """Section 6.1's search over one sentence (no padding in `source`); `limit` counts output tokens, </s>
    included. Returns the `returned` best (output tokens, score), best first; greedy returns the score None."""
    if beams == 1:
        tokens = []
        while len(tokens) < limit and (not tokens or tokens[-1] != EOS):
            (scores,) = next_log_probs(model, source, [tokens], processor, on_logits=True)
            tokens.append(max(range(len(scores)), key=lambda token: (scores[token], -token)))
        return [(tokens, None)]

    live = [([], 0.0)]  # (output tokens, log P), likeliest first
    finished = []  # (output tokens, log P / lp), best first
    while live:
        continuations = []
        next_scores = next_log_probs(model, source, [tokens for tokens, _ in live], processor)
        for rank, ((tokens, log_p), scores) in enumerate(zip(live, next_scores, strict=True)):
            for token, token_log_p in enumerate(scores):
                continuations.append((log_p + token_log_p, rank, token, tokens + [token]))
        continuations.sort(key=lambda c: (-c[0], c[1], c[2]))
        live = []
        for place, (log_p, _, token, tokens) in enumerate(continuations[: 2 * beams]):
            if token == EOS or len(tokens) == limit:
                if place < beams:
                    finished.append((tokens, log_p / lp(len(tokens), alpha)))
            elif len(live) < beams:
                live.append((tokens, log_p))
        finished = sorted(finished, key=lambda f: -f[1])[:beams]
        if len(finished) == beams and live and live[0][1] / lp(limit, alpha) <= finished[-1][1]:
            break  # no live hypothesis can beat the k-th finished one, even at the longest length allowed
    return finished[:returned]


def random_model(seed: int, **overrides):
    """A tiny random model with a random logits bias (some tokens likelier than others); never the pad or start
    token, so that an output row's length is unambiguous."""
    model = tiny_model(seed=seed, final_logits_bias=True, **overrides)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        model.lm_head.bias.copy_(torch.randn(model.config.vocab_size, generator=generator))
        model.lm_head.bias[PAD] = model.lm_head.bias[BOS] = -30.0
    return model


MODELS = {
    "plain": dict(seed=31),
    "attention biases": dict(seed=32, attention_bias=True),
    "learned positions": dict(seed=33, position_embedding_type="learned", max_position_embeddings=12),
}


@pytest.fixture(scope="module", params=list(MODELS))
def model(request):
    return random_model(**MODELS[request.param])


def random_cases(count: int, seed: int):
    """(source lengths, generate() settings) drawn at random: batch sizes, padding, beams, alpha, caps, n-best."""
    rng = random.Random(seed)
    for _ in range(count):
        lengths = [rng.randint(2, 9) for _ in range(rng.choice([1, 2, 3]))]
        beams = rng.choice([1, 2, 4, 5])
        settings = {"num_beams": beams, "length_penalty": rng.choice([0.0, 0.6, 1.0])}
        if rng.random() < 0.3:
            settings["max_new_tokens"] = rng.randint(1, 8)
        elif rng.random() < 0.2:
            settings["max_length"] = rng.randint(2, 8)
        if beams > 1 and rng.random() < 0.5:
            settings["num_return_sequences"] = rng.randint(1, beams)
        yield lengths, rng.randrange(10**6), settings


def expected_output(model, input_ids, attention_mask, settings, alpha=None, processor=None):
    """What the reference decodes for each sentence of the batch, in generate()'s row order."""
    alpha = settings["length_penalty"] if alpha is None else alpha
    cap = settings.get("max_new_tokens", settings.get("max_length", 10**6) - 1)
    table = model.config.max_position_embeddings if model.config.position_embedding_type == "learned" else 10**6
    results = []
    for row, keep in zip(input_ids, attention_mask, strict=True):
        source = row[keep.bool()].tolist()
        limit = min(len(source) + 50, cap, table - 1)  # output tokens; the learned table also holds the start
        results += reference_search(
            model, source, settings["num_beams"], alpha, limit, settings.get("num_return_sequences", 1), processor
        )
    return results


def decoded(output) -> list[list[int]]:
    """Each row's output tokens: after the start token, up to and with </s>, without the padding."""
    rows = []
    for row in output.sequences[:, 1:].tolist():
        rows.append(row[: row.index(EOS) + 1] if EOS in row else [token for token in row if token != PAD])
    return rows


def run(model, lengths, seed, settings):
    input_ids, attention_mask = padded_batch(lengths, vocab_size=model.config.vocab_size, seed=seed)
    output = model.generate(
        input_ids=input_ids,
        attention_mask=attention_mask,
        paper_decoding=True,
        logits_processor=[EndLikelierWithLength()],
        return_dict_in_generate=True,
        output_scores=True,
        **settings,
    )
    return input_ids, attention_mask, output


@pytest.mark.filterwarnings("ignore:.*learned positions")
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


DECAY = (2, 1.6)  # generate()'s exponential_decay_length_penalty: </s> likelier with each token past the second


@pytest.mark.filterwarnings("ignore:.*learned positions")
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
    for module in ("generation_vaswani", "pipeline_vaswani"):
        source = inspect.getsource(__import__(f"modeling_vaswani.{module}", fromlist=["_"]))
        for name in dir(GenerationMixin) + dir(Pipeline):
            if name.startswith("_") and not name.startswith("__"):
                assert f".{name}(" not in source, f"{module}.py calls transformers' private {name}"
