"""A second implementation of Section 6.1's search, written for the tests: one sentence at a time in plain Python, no
cache, the whole decoder recomputed for every hypothesis at every step, hypotheses ranked by log P(Y|X) / lp(Y) with
GNMT's lp(Y) = ((5 + |Y|) / 6)^alpha. Its rules are those `beam_search`'s and `TopK`'s docstrings state: the 2k
likeliest continuations (by log P) of the k live hypotheses; of those, the ones among the first k that end (</s>, or
the sentence's length limit) join the finished ones, and the k likeliest that do not end live on; a sentence ends
when no live hypothesis can beat its k-th best finished one, even at its longest length allowed; with one beam, the
likeliest token at each step. Also the tiny random models and random cases the paper-decoding tests run it on."""

import random
from types import SimpleNamespace

import torch
from transformers import LogitsProcessor

from helpers.tiny_models import BOS, EOS, PAD, tiny_model
from modeling_vaswani.decoding_vaswani import KeepsLogProbabilities

RAMP = 0.6  # what </s> gains in logit for each token written: hypotheses end at several lengths


class EndLikelierWithLength(KeepsLogProbabilities, LogitsProcessor):
    """Raises </s> by RAMP per token written, then normalizes (so its scores stay log-probabilities): the tiny random
    models would otherwise end at once or never, and GNMT's ranking decides only between hypotheses of different
    lengths."""

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


class Averaged:
    """The reference's model: the mean of the members' log-softmax, computed here in float64 (the search normalizes
    it again, as generate() does)."""

    def __init__(self, *models):
        self.models, self.config = models, models[0].config

    @torch.no_grad()
    def __call__(self, input_ids, decoder_input_ids):
        log_probs = [
            model(input_ids=input_ids, decoder_input_ids=decoder_input_ids).logits.double().log_softmax(-1)
            for model in self.models
        ]
        return SimpleNamespace(logits=torch.stack(log_probs).mean(dim=0))


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


def paper_generate(model, input_ids, attention_mask, **settings):
    """generate() under the paper's decoding as the tests hold it against the reference: `EndLikelierWithLength` on the
    logits (ties are rare and endings likely), scores returned."""
    return model.generate(
        input_ids=input_ids,
        attention_mask=attention_mask,
        paper_decoding=True,
        logits_processor=[EndLikelierWithLength()],
        return_dict_in_generate=True,
        output_scores=True,
        **settings,
    )


def decoded(output) -> list[list[int]]:
    """Each row's output tokens: after the start token, up to and with </s>, without the padding."""
    rows = []
    for row in output.sequences[:, 1:].tolist():
        rows.append(row[: row.index(EOS) + 1] if EOS in row else [token for token in row if token != PAD])
    return rows


DECAY = (2, 1.6)  # generate()'s exponential_decay_length_penalty: </s> likelier with each token past the second
