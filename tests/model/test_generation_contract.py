"""transformers' generation contract, checked on this model's generate() in both decoding modes.

transformers checks its models' generate() with `GenerationTesterMixin` (tests/generation/test_utils.py in its
repository), which its sdist does not ship (tests/helpers/transformers_tests.py puts an empty stand-in in its place).
These are our own tests of what it checks that applies to an encoder-decoder: each search with and without the cache,
`return_dict_in_generate` and its `output_*` outputs, several returned sequences, stopping criteria and logits
processors, under `paper_decoding=True` (Section 6.1's own search) and False (transformers' searches). The expected
values come from references written here: a greedy loop over the model's plain forward without a cache, the cache-off
run, log-probabilities recomputed by teacher forcing, and the model's own encoder.

What of the mixin does not apply here, and why:
- decoder-only checks (left padding, generating from `inputs_embeds`, the prompt kept in the output, the static cache
  from `inputs_embeds`): this model is an encoder-decoder, whose output starts from the decoder start token.
- group beam search, constrained beam search, contrastive search, DoLa: transformers 5 moved them to Hub
  `custom_generate` repositories (network and `trust_remote_code`); the paper's decoding refuses them (tested here).
- head masking: the model's forward takes no `head_mask` (transformers 5 removed head masks).
- static cache and compiled decoding steps: tests/model/test_generation.py (test_static_cache,
  test_decoding_steps_compile_as_one_graph).
- quantized (optimum-quanto) and offloaded caches, model parallelism over several accelerators, flash attention: need
  packages or hardware this suite does not have; nothing of this model's decoding depends on them.
- eager vs sdpa attention: the model has one attention path (modeling_vaswani.py), no `attn_implementation` to compare.
- watermarking, speculative-sampling helpers, integration tests on Hub checkpoints: transformers' own code and models.
- assisted decoding and prompt lookup under `paper_decoding`: the paper's search is beam search over one model; it
  refuses them (tested here; they are tested in stock generate() below).
"""

import re

import pytest
import torch
from helpers.tiny_models import BOS, EOS, PAD, padded_batch, tiny_model
from tokenizers import Tokenizer, models
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    MaxLengthCriteria,
    PreTrainedTokenizerFast,
    StoppingCriteria,
)
from transformers.cache_utils import EncoderDecoderCache
from transformers.generation import (
    BaseStreamer,
    GenerateBeamEncoderDecoderOutput,
    GenerateEncoderDecoderOutput,
    NoBadWordsLogitsProcessor,
    NoRepeatNGramLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    SuppressTokensLogitsProcessor,
)

NEW = 4  # new tokens per call (the mixin's max_new_tokens is 3; one more gives the cache a step past the first)
ALPHA = 0.6
MODES = pytest.mark.parametrize("paper_decoding", [False, True], ids=["stock", "paper"])
SEARCHES = {
    "greedy": {"num_beams": 1},
    "sample": {"num_beams": 1, "do_sample": True, "num_return_sequences": 2},
    "beam": {"num_beams": 2, "num_return_sequences": 2},
    "beam_sample": {"num_beams": 2, "do_sample": True},
}
EACH_SEARCH = pytest.mark.parametrize("search", list(SEARCHES))
ALL_OUTPUTS = {
    "return_dict_in_generate": True,
    "output_scores": True,
    "output_logits": True,
    "output_attentions": True,
    "output_hidden_states": True,
}


@pytest.fixture(scope="module")
def model():
    return tiny_model(seed=21)


@pytest.fixture(scope="module")
def batch():
    input_ids, attention_mask = padded_batch([6, 3], seed=22)
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def generate(model, batch, paper_decoding, seed=23, **settings):
    """generate() for NEW tokens (unless `max_length` is given) with </s> suppressed, so that every row runs its full
    length, as the mixin's eos_token_id=None does (`bad_words_ids` would not: generate() drops </s> from it)."""
    settings = {"suppress_tokens": [EOS], **settings}
    if "max_length" not in settings:
        settings.setdefault("max_new_tokens", NEW)
    torch.manual_seed(seed)
    return model.generate(**batch, paper_decoding=paper_decoding, **settings)


@torch.no_grad()
def forward_loop(model, batch, steps=NEW, processors=(), stop_token=-1):
    """Greedy search written for the tests: the model's plain forward over the whole decoder input at every step, no
    cache; the likeliest token after `processors`. A row that writes `stop_token` stops there and is padded after, and
    the loop ends early once every row has. Returns the sequences, the processed scores and the logits of each step."""
    processors = LogitsProcessorList([SuppressTokensLogitsProcessor([EOS]), *processors])
    sequences = torch.full((batch["input_ids"].shape[0], 1), model.config.decoder_start_token_id)
    stopped = torch.zeros(sequences.shape[0], dtype=torch.bool)
    scores, logits = [], []
    for _ in range(steps):
        step_logits = model(**batch, decoder_input_ids=sequences).logits[:, -1].float()
        step_scores = processors(sequences, step_logits.clone())
        token = torch.where(stopped, PAD, step_scores.argmax(dim=-1))
        sequences = torch.cat([sequences, token[:, None]], dim=1)
        scores.append(step_scores)
        logits.append(step_logits)
        stopped |= token.eq(stop_token)
        if bool(stopped.all()):
            break
    return sequences, scores, logits


def assert_steps_close(actual, expected):
    assert len(actual) == len(expected)
    for step, (got, want) in enumerate(zip(actual, expected, strict=True)):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4, msg=f"step {step}")


# --- Each search with and without the cache


@MODES
@EACH_SEARCH
def test_the_cache_changes_no_token_score_or_logit(model, batch, paper_decoding, search):
    """The mixin compares each search's outputs with `use_cache` on and off: here the cache-off run is the reference,
    tokens, per-step scores and logits, beam indices and sequence scores."""
    settings = {**SEARCHES[search], "return_dict_in_generate": True, "output_scores": True, "output_logits": True}
    cached = generate(model, batch, paper_decoding, use_cache=True, **settings)
    uncached = generate(model, batch, paper_decoding, use_cache=False, **settings)
    assert torch.equal(cached.sequences, uncached.sequences)
    assert_steps_close(cached.scores, uncached.scores)
    assert_steps_close(cached.logits, uncached.logits)
    if settings["num_beams"] > 1:
        assert torch.equal(cached.beam_indices, uncached.beam_indices)
        torch.testing.assert_close(cached.sequences_scores, uncached.sequences_scores)


# --- Greedy search against a loop written here


@MODES
@pytest.mark.parametrize("use_cache", [True, False], ids=["cache", "no_cache"])
def test_greedy_search_equals_a_plain_forward_loop(model, batch, paper_decoding, use_cache):
    """Tokens, processed scores and raw logits of every step equal the loop's, with the mixin's logits processors
    (repetition penalty, banned words) and one more (no repeated bigram) honoured as the loop applies them."""
    processors = [RepetitionPenaltyLogitsProcessor(1.3), NoRepeatNGramLogitsProcessor(2)]
    processors.append(NoBadWordsLogitsProcessor([[7], [11, 12]], eos_token_id=None))
    expected, scores, logits = forward_loop(model, batch, processors=processors)
    output = generate(
        model,
        batch,
        paper_decoding,
        num_beams=1,
        use_cache=use_cache,
        repetition_penalty=1.3,
        no_repeat_ngram_size=2,
        bad_words_ids=[[7], [11, 12]],
        return_dict_in_generate=True,
        output_scores=True,
        output_logits=True,
    )
    assert output.sequences.tolist() == expected.tolist()
    assert_steps_close(output.scores, scores)
    assert_steps_close(output.logits, logits)


# --- Beam search: per-step scores, beam indices and sequence scores


@torch.no_grad()
def teacher_forced(model, batch, sequences, rows_per_sentence):
    """log P(each token | source, tokens before it) of `sequences`, from one plain forward pass."""
    sources = {name: tensor.repeat_interleave(rows_per_sentence, dim=0) for name, tensor in batch.items()}
    logits = model(**sources, decoder_input_ids=sequences[:, :-1]).logits.double()
    return logits.log_softmax(dim=-1).gather(-1, sequences[:, 1:, None])[..., 0]


@MODES
def test_beam_search_scores_and_beam_indices_give_each_tokens_log_probability(model, batch, paper_decoding):
    """`compute_transition_scores` (transformers' reading of `scores` through `beam_indices`) gives, for each returned
    hypothesis, the log-probability teacher forcing gives each of its tokens; their sum over the length penalty
    (GNMT's with `paper_decoding`, |Y|^alpha without) is `sequences_scores`, best first."""
    beams = 3
    output = generate(
        model,
        batch,
        paper_decoding,
        num_beams=beams,
        num_return_sequences=beams,
        length_penalty=ALPHA,
        return_dict_in_generate=True,
        output_scores=True,
    )
    transition = model.compute_transition_scores(output.sequences, output.scores, output.beam_indices)
    expected = teacher_forced(model, batch, output.sequences, beams)
    torch.testing.assert_close(transition.double(), expected, atol=1e-4, rtol=1e-4)
    penalty = ((5 + NEW) / 6) ** ALPHA if paper_decoding else NEW**ALPHA
    torch.testing.assert_close(output.sequences_scores.double(), expected.sum(-1) / penalty, atol=1e-4, rtol=1e-4)
    by_sentence = output.sequences_scores.view(-1, beams)
    assert (by_sentence[:, :-1] >= by_sentence[:, 1:]).all()
    assert len({tuple(row) for row in output.sequences.tolist()}) == len(output.sequences)  # distinct hypotheses


# --- return_dict_in_generate: types and shapes


def shapes(tensors) -> list:
    return [tuple(tensor.shape) for tensor in tensors]


def check_outputs(output, config, batch, rows: int, use_cache: bool):
    """The mixin's `_check_outputs` for an encoder-decoder: `rows` is the decoder's batch (sentences times beams, or
    times returned sequences without beams); the encoder's outputs have one row per sentence."""
    sentences, source_length = batch["input_ids"].shape
    heads, width, vocab = config.num_heads, config.d_model, config.vocab_size
    steps = output.sequences.shape[1] - 1
    assert steps == NEW
    for name in ("scores", "logits"):
        assert isinstance(getattr(output, name), tuple)
        assert shapes(getattr(output, name)) == [(rows, vocab)] * steps, name
    assert isinstance(output.encoder_attentions, tuple) and isinstance(output.encoder_hidden_states, tuple)
    assert (
        shapes(output.encoder_attentions) == [(sentences, heads, source_length, source_length)] * config.encoder_layers
    )
    assert shapes(output.encoder_hidden_states) == [(sentences, source_length, width)] * (config.encoder_layers + 1)
    for name in ("decoder_attentions", "cross_attentions", "decoder_hidden_states"):
        assert isinstance(getattr(output, name), tuple) and len(getattr(output, name)) == steps, name
    for step in range(steps):
        queries = 1 if use_cache else step + 1  # with the cache, each step runs the newest position only
        layers = config.decoder_layers
        assert shapes(output.decoder_attentions[step]) == [(rows, heads, queries, step + 1)] * layers
        assert shapes(output.cross_attentions[step]) == [(rows, heads, queries, source_length)] * layers
        assert shapes(output.decoder_hidden_states[step]) == [(rows, queries, width)] * (layers + 1)
    cache = output.get("cache", output.get("past_key_values"))
    if not use_cache:
        assert cache is None
        return
    assert isinstance(cache, EncoderDecoderCache)
    decoder_cache = cache.self_attention_cache.layers
    assert [tuple(layer.keys.shape) for layer in decoder_cache] == [(rows, heads, steps, width // heads)] * layers
    assert [tuple(layer.values.shape) for layer in decoder_cache] == [(rows, heads, steps, width // heads)] * layers


@MODES
@EACH_SEARCH
@pytest.mark.parametrize("use_cache", [True, False], ids=["cache", "no_cache"])
def test_dict_outputs_have_the_contracts_types_and_shapes(model, batch, paper_decoding, search, use_cache):
    settings = SEARCHES[search]
    output = generate(model, batch, paper_decoding, use_cache=use_cache, **settings, **ALL_OUTPUTS)
    beams, returned = settings["num_beams"], settings.get("num_return_sequences", 1)
    expected_type = GenerateBeamEncoderDecoderOutput if beams > 1 else GenerateEncoderDecoderOutput
    assert type(output) is expected_type
    sentences = batch["input_ids"].shape[0]
    assert output.sequences.shape == (sentences * returned, NEW + 1)
    check_outputs(output, model.config, batch, rows=sentences * max(beams, returned), use_cache=use_cache)
    # The encoder's outputs are the encoder's, on the sentences as given.
    with torch.no_grad():
        encoded = model.get_encoder()(**batch, output_hidden_states=True, output_attentions=True)
    assert_steps_close(output.encoder_hidden_states, encoded.hidden_states)
    assert_steps_close(output.encoder_attentions, encoded.attentions)
    if beams > 1:
        assert output.beam_indices.shape == (sentences * returned, NEW)


# --- Several returned sequences


@MODES
def test_returned_samples_are_each_sentences_own(model, batch, paper_decoding):
    """Sampling from the likeliest token only: each sentence's returned sequences, one after another, are its greedy
    translation (the loop's), so every row was decoded from its own sentence."""
    returned = 3
    output = generate(
        model, batch, paper_decoding, num_beams=1, do_sample=True, top_k=1, num_return_sequences=returned
    )
    expected, _, _ = forward_loop(model, batch)
    assert output.tolist() == expected.repeat_interleave(returned, dim=0).tolist()


@MODES
def test_the_first_of_several_beams_is_the_one_returned_alone(model, batch, paper_decoding):
    alone = generate(model, batch, paper_decoding, num_beams=3)
    several = generate(model, batch, paper_decoding, num_beams=3, num_return_sequences=3)
    assert several.shape[0] == 3 * alone.shape[0]
    assert torch.equal(several[::3], alone)


# --- Stopping criteria


class StopAtLength(StoppingCriteria):
    """The mixin's custom criterion: every row is done once the decoder holds `length` tokens (a bool for all)."""

    def __init__(self, length: int):
        self.length = length

    def __call__(self, input_ids, scores, **kwargs) -> bool:
        return input_ids.shape[-1] >= self.length


class StopAfterToken(StoppingCriteria):
    """A row is done once it has written `token` (one answer per row)."""

    def __init__(self, token: int):
        self.token = token

    def __call__(self, input_ids, scores, **kwargs) -> torch.BoolTensor:
        return input_ids[:, -1].eq(self.token)


def word_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """A tokenizer whose token i is the word "w<i>", for stop strings (StopStringCriteria reads its vocabulary).
    Token 3 is "abcdef", the text StopStringCriteria tokenizes to find what a token adds to a string."""
    vocab = {f"w{i}": i for i in range(vocab_size)} | {"abcdef": 3}
    del vocab["w3"]
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="abcdef")))


@MODES
@EACH_SEARCH
@pytest.mark.parametrize("limit", [{"max_length": 3}, {"max_new_tokens": 2}, {"stopping_criteria": [StopAtLength(3)]}])
def test_a_length_limit_ends_every_row(model, batch, paper_decoding, search, limit):
    settings = {**SEARCHES[search], **limit}
    output = generate(model, batch, paper_decoding, **settings)
    assert output.shape == (batch["input_ids"].shape[0] * settings.get("num_return_sequences", 1), 3)


@MODES
def test_a_custom_max_length_criterion_takes_precedence_over_the_configured_one(model, batch, paper_decoding):
    output = generate(
        model, batch, paper_decoding, num_beams=1, max_new_tokens=6, stopping_criteria=[MaxLengthCriteria(4)]
    )
    assert output.shape == (batch["input_ids"].shape[0], 4)


def stop_after(token: int, how: str, vocab_size: int) -> dict:
    """generate()'s settings that end a row after `token`: a stopping criterion of ours, or a stop string."""
    if how == "criterion":
        return {"stopping_criteria": [StopAfterToken(token)]}
    return {"stop_strings": [f"w{token}"], "tokenizer": word_tokenizer(vocab_size)}


STOP_HOW = pytest.mark.parametrize("how", ["criterion", "stop_string"])


@MODES
@STOP_HOW
def test_a_row_stops_after_its_stop_token_and_the_others_go_on(model, batch, paper_decoding, how):
    """Greedy: the token the first sentence writes second ends that row there (a criterion of ours, or a stop string);
    the expected rows are the loop's, each cut after its first such token."""
    free, _, _ = forward_loop(model, batch)
    token = int(free[0, 2])
    assert token not in free[1].tolist(), "the other sentence must go on for the test to mean anything"
    expected, _, _ = forward_loop(model, batch, stop_token=token)
    output = generate(model, batch, paper_decoding, num_beams=1, **stop_after(token, how, model.config.vocab_size))
    assert output.tolist() == expected.tolist()


@MODES
@STOP_HOW
@pytest.mark.parametrize("do_sample", [False, True], ids=["beam", "beam_sample"])
def test_beam_hypotheses_end_at_their_stop_token(model, batch, paper_decoding, do_sample, how):
    """With beams, a hypothesis that writes the stop token is finished: what follows it is padding only."""
    free = generate(model, batch, paper_decoding, num_beams=3, num_return_sequences=3, do_sample=do_sample)
    token = int(free[0, 2])
    output = generate(
        model,
        batch,
        paper_decoding,
        num_beams=3,
        num_return_sequences=3,
        do_sample=do_sample,
        **stop_after(token, how, model.config.vocab_size),
    )
    ended = 0
    for row in output.tolist():
        if token in row[1:]:
            after = row[row.index(token, 1) + 1 :]
            assert set(after) <= {PAD}, row
            ended += 1
    assert ended, "some hypothesis must write the stop token for the test to mean anything"


# --- Logits processors with beams and sampling


class ForceThenBan(LogitsProcessor):
    """Forces `first` as the first token, and rules `banned` out everywhere."""

    def __init__(self, first: int, banned: int):
        self.first, self.banned = first, banned

    def __call__(self, input_ids, scores):
        scores = scores.clone()
        scores[:, self.banned] = -float("inf")
        if input_ids.shape[1] == 1:
            kept = scores[:, self.first].clone()
            scores[:] = -float("inf")
            scores[:, self.first] = kept
        return scores


@MODES
@EACH_SEARCH
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_logits_processors_are_honoured(model, batch, paper_decoding, search):
    """A custom processor (forced first token, one banned token) and generate()'s own (`bad_words_ids`, a bigram not
    to repeat) hold in every returned row."""
    free = generate(model, batch, paper_decoding, **SEARCHES[search], max_new_tokens=6)
    banned, word = int(free[0, 1]), int(free[-1, 2])  # tokens the search writes when left free
    first = next(token for token in range(4, 61) if token not in (banned, word))
    output = generate(
        model,
        batch,
        paper_decoding,
        **SEARCHES[search],
        max_new_tokens=6,
        logits_processor=[ForceThenBan(first, banned)],
        bad_words_ids=[[word]],
        no_repeat_ngram_size=2,
    )
    assert output[:, 1].eq(first).all()
    assert not output.eq(banned).any() and not output.eq(word).any()
    for row in output.tolist():
        bigrams = list(zip(row[1:], row[2:], strict=False))
        assert len(set(bigrams)) == len(bigrams), row


# --- What each mode refuses, and stock generate()'s other searches

PAPER_REFUSES = {
    "contrastive": ({"num_beams": 1, "penalty_alpha": 0.6, "top_k": 4}, "ask for contrastive_search"),
    "group_beams": ({"num_beams": 2, "num_beam_groups": 2, "diversity_penalty": 1.0}, "ask for group_beam_search"),
    "constraints": ({"num_beams": 2, "force_words_ids": [[5]]}, "ask for constrained_beam_search"),
    "dola": ({"num_beams": 1, "dola_layers": "low"}, "ask for dola_generation"),
    "prompt_lookup": ({"num_beams": 1, "prompt_lookup_num_tokens": 2}, "ask for assisted_generation"),
    "assistant": ({"num_beams": 1, "assistant_model": "model"}, "runs its own search; got assistant_model="),
    "custom_generate": ({"custom_generate": "x/y"}, "runs its own search; got custom_generate='x/y'"),
    "streamer_with_beams": ({"num_beams": 2, "streamer": "streamer"}, "a streamer needs num_beams=1"),
}


@pytest.mark.parametrize("case", list(PAPER_REFUSES))
def test_the_paper_decoding_refuses_what_it_does_not_support(model, batch, case):
    settings, message = PAPER_REFUSES[case]
    stand_ins = {"model": model, "streamer": Streamer()}
    settings = {
        name: stand_ins.get(value, value) if isinstance(value, str) else value for name, value in settings.items()
    }
    with pytest.raises(ValueError, match=re.escape(message)):
        generate(model, batch, True, **settings)


class Streamer(BaseStreamer):
    def put(self, value):
        pass

    def end(self):
        pass


def test_the_paper_decoding_refuses_to_start_without_input_ids(model):
    """Stock generate() starts from the start token alone (below); the paper's limits need each source's length."""
    with pytest.raises(ValueError, match="paper_decoding needs input_ids"):
        model.generate(paper_decoding=True, max_new_tokens=NEW)


@MODES
def test_several_greedy_sequences_are_refused(model, batch, paper_decoding):
    with pytest.raises(ValueError, match="num_return_sequences"):
        generate(model, batch, paper_decoding, num_beams=1, num_return_sequences=2)


@pytest.mark.parametrize("helper", ["assistant_model", "prompt_lookup_num_tokens"])
def test_stock_assisted_decoding_gives_the_greedy_tokens(model, batch, helper):
    """The mixin's assisted decoding and prompt lookup checks (one sentence, as transformers allows): the same tokens
    as the loop's greedy search."""
    one = {name: tensor[:1] for name, tensor in batch.items()}
    expected, _, _ = forward_loop(model, one)
    settings = {"assistant_model": model} if helper == "assistant_model" else {"prompt_lookup_num_tokens": 2}
    assert generate(model, one, False, num_beams=1, **settings).tolist() == expected.tolist()


def test_stock_generate_without_input_ids_starts_from_the_start_token(model):
    """The mixin's `test_generate_without_input_ids`: the encoder reads the start token alone."""
    output = model.generate(max_new_tokens=NEW, num_beams=1, suppress_tokens=[EOS])
    source = {"input_ids": torch.tensor([[BOS]]), "attention_mask": torch.ones(1, 1, dtype=torch.long)}
    assert output.tolist() == forward_loop(model, source)[0].tolist()


def test_stock_generate_continues_from_a_returned_cache(model, batch):
    """The mixin's `test_generate_continue_from_past_key_values`: NEW - 1 tokens, then one more from the returned cache
    and tokens, give what NEW tokens at once give."""
    at_once = generate(model, batch, False, num_beams=1)
    first = generate(model, batch, False, num_beams=1, max_new_tokens=NEW - 1, return_dict_in_generate=True)
    cache = first.get("cache", first.get("past_key_values"))
    name = "cache" if "cache" in first else "past_key_values"
    rest = generate(
        model, batch, False, num_beams=1, max_new_tokens=1, decoder_input_ids=first.sequences, **{name: cache}
    )
    assert rest.tolist() == at_once.tolist()
