"""Decoding as Section 6.1 of "Attention Is All You Need" (arXiv:1706.03762): `generate(..., paper_decoding=True)`.

"We used beam search with a beam size of 4 and length penalty alpha = 0.6 (GNMT, Wu et al. 2016) ... set the maximum
output length during inference to input length + 50, but terminate early when possible."

Payload: travels flat beside modeling_vaswani.py as remote code, so it imports only torch and transformers. The search
is this module's own loop (`paper_search`), which `generate` runs through its public `custom_generate` argument:
transformers prepares the inputs, the generation config, the logits processors and the stopping criteria, and the loop
calls the model's forward and reorders the cache through public methods only. transformers' beam search ranks
finished hypotheses by log P(Y|X) / |Y|^alpha, and none of its public hooks can change that into GNMT's ranking.
"""

import functools
import inspect
import math
import numbers

import torch
from torch import nn
from transformers import generation as stock
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.distributed.fsdp import is_fsdp_managed_module
from transformers.generation import (
    GenerateBeamEncoderDecoderOutput,
    GenerateEncoderDecoderOutput,
    GenerationConfig,
    GenerationMixin,
    GenerationMode,
    LogitsProcessor,
    LogitsProcessorList,
    StoppingCriteria,
    StoppingCriteriaList,
)
from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled
from transformers.masking_utils import create_causal_mask
from transformers.modeling_outputs import BaseModelOutput
from transformers.utils import logging

logger = logging.get_logger(__name__)

# transformers 5.24 renamed the cache argument of models' forward, of generate()'s model inputs and of its mask helpers
# from `past_key_values` to `cache` (5.23 knows only the old name): the name this transformers uses.
CACHE = "cache" if "cache" in inspect.signature(create_causal_mask).parameters else "past_key_values"


def output_cache(outputs):
    """The cache an output holds, under either name."""
    return outputs.get(CACHE)


def either_cache_name(forward):
    """A forward written with `past_key_values` that also takes it as `cache`, the name of transformers >= 5.24, under
    which the old name is deprecated as transformers' own models deprecate it (its `deprecate_kwarg`, which its
    common tests check)."""

    @functools.wraps(forward)
    def renamed(*args, cache=None, **kwargs):
        if cache is not None:
            kwargs["past_key_values"] = cache
        return forward(*args, **kwargs)

    if CACHE == "past_key_values":
        return renamed
    from transformers.utils.deprecation import deprecate_kwarg

    return deprecate_kwarg("past_key_values", version="5.40.0", new_name="cache")(renamed)


# What transformers' beam search gives a hypothesis that may not be chosen; kept so that scores and tokens are the same
# as those of the beam search this loop replaced.
EXCLUDED = -1.0e9


def gnmt_length_penalty(length: int | torch.Tensor, alpha: float) -> float | torch.Tensor:
    """Section 6.1, from GNMT (Wu et al. 2016): lp(Y) = ((5 + |Y|) / 6)^alpha.

    A finished hypothesis scores log P(Y|X) / lp(Y).
    """
    return ((5 + length) / 6) ** alpha


class MaxLengthPerSentence(StoppingCriteria):
    """Section 6.1: "maximum output length to input length + 50". transformers' max length is one number per call;
    this stops each sentence (and each of its beams) at its own limit."""

    def __init__(self, max_lengths: torch.Tensor):
        self.max_lengths = max_lengths  # per sentence, counting the decoder start token

    def select(self, sentences: torch.Tensor) -> None:
        """Keeps the limits of `sentences` only, as the search's batch shrinks to them."""
        self.max_lengths = self.max_lengths[sentences.to(self.max_lengths.device)]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs) -> torch.BoolTensor:
        rows_per_sentence = input_ids.shape[0] // self.max_lengths.shape[0]  # beams (or returned sequences)
        limits = self.max_lengths.to(input_ids.device).repeat_interleave(rows_per_sentence)
        return input_ids.shape[1] >= limits


class TargetPrefix(LogitsProcessor):
    """Each sentence's translation starts with given tokens (CTranslate2's `target_prefix`, fairseq's prefix
    decoding): while a sentence's prefix lasts, every token but the prefix's next one is ruled out (-inf), and that one
    keeps its log-probability, so a hypothesis scores log P(prefix and the rest | X) as `vaswani-score` does."""

    def __init__(self, prefixes: list[list[int]], device: torch.device):
        longest = max(map(len, prefixes), default=0)
        self.tokens = torch.tensor([p + [0] * (longest - len(p)) for p in prefixes], dtype=torch.long, device=device)
        self.lengths = torch.tensor([len(p) for p in prefixes], device=device)
        self.start = None  # the decoder's start length, read at the first step

    def select(self, sentences: torch.Tensor) -> None:
        """Keeps the prefixes of `sentences` only, as the search's batch shrinks to them."""
        self.tokens, self.lengths = self.tokens[sentences], self.lengths[sentences]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        self.start = input_ids.shape[1] if self.start is None else self.start
        step = input_ids.shape[1] - self.start
        if step >= self.tokens.shape[1]:
            return scores
        rows_per_sentence = input_ids.shape[0] // self.tokens.shape[0]  # beams (or returned sequences)
        forced = (self.lengths > step).repeat_interleave(rows_per_sentence)[:, None]
        token = self.tokens[:, step].repeat_interleave(rows_per_sentence)[:, None]
        only = torch.full_like(scores, -math.inf).scatter(1, token, scores.gather(1, token))
        return torch.where(forced, only, scores)


def check_no_empty_rows(attention_mask: torch.Tensor) -> None:
    """Refuses a source row that is all padding: the decoder would attend over nothing and still write a fluent
    sentence, a translation of no input."""
    empty = attention_mask.eq(0).all(dim=-1).nonzero().flatten().tolist()
    if empty:
        raise ValueError(
            f"attention_mask row {empty[0]} is all padding ({len(empty)} such row(s): {empty[:10]}); expected at "
            "least one source token in every row, since a row without one has nothing to translate"
        )


TRANSFORMERS_MAX_LENGTH = 20  # generate()'s max_length where neither the call nor a generation config sets one
# The generate() settings check_generate_inputs checks, with transformers' defaults where no config sets them.
CHECKED_SETTINGS = {
    "num_beams": 1,
    "num_return_sequences": 1,
    "length_penalty": None,
    "max_length": None,
    "max_new_tokens": None,
}


def generation_settings(model_generation_config: GenerationConfig, kwargs: dict) -> dict:
    """The values generate() decodes with for CHECKED_SETTINGS, in its order of precedence: a keyword argument, else
    the `generation_config` passed, else the model's, else transformers' default (None: unset)."""
    given = kwargs.get("generation_config")
    settings = {}
    for name, default in CHECKED_SETTINGS.items():
        sources = (kwargs.get(name), getattr(given, name, None), getattr(model_generation_config, name, None))
        settings[name] = next((value for value in sources if value is not None), default)
    return settings


def is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_generate_inputs(
    config, model_generation_config: GenerationConfig, kwargs: dict, input_ids, attention_mask, paper_decoding: bool
) -> dict:
    """Refuses, before any work, inputs that would otherwise fail deep inside the search (a division by zero, a
    reshape, an index or dtype error from torch) or decode silently into nonsense (a NaN length penalty): each error
    names the argument, the value given and what was expected. Both decoding modes call it. Returns the settings as
    `generation_settings` resolves them.

    `kwargs` are generate()'s keyword arguments (with `generation_config` when one is passed); `input_ids` may be None
    (stock generate() from `encoder_outputs`), `attention_mask` too.
    """
    settings = generation_settings(model_generation_config, kwargs)
    for name in ("num_beams", "num_return_sequences", "max_length", "max_new_tokens"):
        value, least = settings[name], 2 if name == "max_length" else 1
        if value is None:
            continue
        if not is_int(value):
            raise TypeError(f"{name}={value!r} is a {type(value).__name__}; expected an int of at least {least}")
        if value < least:
            why = " (it counts the decoder start token)" if name == "max_length" else ""
            raise ValueError(f"{name}={value!r}; expected an int of at least {least}{why}")
    num_beams, num_return_sequences = settings["num_beams"], settings["num_return_sequences"]
    if num_beams > 1 and num_return_sequences > num_beams:
        raise ValueError(
            f"num_return_sequences={num_return_sequences} with num_beams={num_beams}; expected at most num_beams, "
            "since beam search returns a sentence's finished hypotheses, num_beams of them at most"
        )
    alpha = settings["length_penalty"]
    if alpha is not None:
        if not isinstance(alpha, numbers.Real) or isinstance(alpha, bool):
            raise TypeError(f"length_penalty={alpha!r} is a {type(alpha).__name__}; expected a finite number")
        if not math.isfinite(alpha):
            raise ValueError(f"length_penalty={alpha!r}; expected a finite number")
        if paper_decoding and alpha < 0:
            raise ValueError(
                f"length_penalty={alpha!r} with paper_decoding; expected a finite number of at least 0 (GNMT's alpha: "
                "the search ends a sentence when no live hypothesis can beat its finished ones, a bound that holds "
                "only while the penalty grows with length). Stock generate() takes any finite value"
            )

    if input_ids is not None:
        if not isinstance(input_ids, torch.Tensor):
            raise TypeError(
                f"input_ids is a {type(input_ids).__name__}; expected a torch.Tensor of token ids, shape "
                "(batch, length)"
            )
        if input_ids.dtype not in (torch.int64, torch.int32):
            raise TypeError(
                f"input_ids has dtype {input_ids.dtype}; expected an integer tensor of token ids (torch.int64 or "
                "torch.int32)"
            )
        shape = tuple(input_ids.shape)
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids has shape {shape}; expected (batch, length), one row per sentence")
        if 0 in shape:
            raise ValueError(
                f"input_ids has shape {shape}; expected at least one row (sentence) and at least one token per row"
            )
        vocab_size = config.vocab_size
        outside = ((input_ids < 0) | (input_ids >= vocab_size)).nonzero()
        if outside.shape[0]:
            row, position = outside[0].tolist()
            raise ValueError(
                f"input_ids[{row}, {position}] is {int(input_ids[row, position])}, outside the vocabulary of "
                f"{vocab_size} ids (config.vocab_size); expected ids from 0 to {vocab_size - 1} "
                f"({outside.shape[0]} such id(s))"
            )
    if attention_mask is not None:
        if not isinstance(attention_mask, torch.Tensor):
            raise TypeError(f"attention_mask is a {type(attention_mask).__name__}; expected a torch.Tensor")
        if input_ids is not None and attention_mask.shape != input_ids.shape:
            raise ValueError(
                f"attention_mask has shape {tuple(attention_mask.shape)}; expected input_ids' shape "
                f"{tuple(input_ids.shape)}, one 1 or 0 per token"
            )
    if attention_mask is None and input_ids is not None and config.pad_token_id is not None:
        attention_mask = input_ids.ne(config.pad_token_id)
    if attention_mask is not None:
        check_no_empty_rows(attention_mask)
    return settings


def check_target_prefix(target_prefix, vocab_size: int, room: list[int]) -> list[list[int]]:
    """Refuses a `target_prefix` that is not one list of token ids per sentence (empty for none), or a prefix that
    leaves no room to go on within its sentence's `room` of new tokens (its output would be the prefix, cut)."""
    if not isinstance(target_prefix, (list, tuple)) or len(target_prefix) != len(room):
        shown = f"{len(target_prefix)} entries" if isinstance(target_prefix, (list, tuple)) else repr(target_prefix)
        raise ValueError(
            f"target_prefix has {shown}; expected a list of {len(room)} lists of token ids, one per sentence (an "
            "empty list for a sentence without one)"
        )
    for number, (prefix, limit) in enumerate(zip(target_prefix, room, strict=True)):
        if not isinstance(prefix, (list, tuple)) or not all(is_int(t) and 0 <= t < vocab_size for t in prefix):
            raise ValueError(
                f"target_prefix[{number}] is {prefix!r}; expected a list of token ids from 0 to {vocab_size - 1}"
            )
        if len(prefix) >= limit:
            raise ValueError(
                f"target_prefix[{number}] has {len(prefix)} tokens and sentence {number} may generate {limit}; "
                "expected a shorter prefix, leaving room for the rest of the translation"
            )
    return [list(prefix) for prefix in target_prefix]


def check_ensemble(model, ensemble, paper_decoding: bool) -> tuple:
    """The other models of an ensemble, refused unless the paper's decoding (this package's own loop) runs them and
    they read and write the same token ids as `model` (a vocabulary of the same size and the same special ids; the
    commands also check that the tokenizers are the same)."""
    if ensemble is None:
        return ()
    if not paper_decoding:
        raise ValueError("ensemble needs paper_decoding=True: transformers' own searches decode one model")
    if not isinstance(ensemble, (list, tuple)) or not ensemble:
        raise ValueError(f"ensemble={ensemble!r}; expected a non-empty list of the other models")
    for number, member in enumerate(ensemble):
        for name in ("vocab_size", "pad_token_id", "eos_token_id", "decoder_start_token_id"):
            ours, theirs = getattr(model.config, name), getattr(getattr(member, "config", None), name, None)
            if ours != theirs:
                raise ValueError(
                    f"ensemble[{number}] has {name} {theirs!r}, this model {ours!r}; expected models that share a "
                    "vocabulary"
                )
        if member.device != model.device:
            raise ValueError(f"ensemble[{number}] is on {member.device}, this model on {model.device}; expected one")
    return tuple(ensemble)


def with_target_prefix(kwargs: dict, target_prefix: list[list[int]], device: torch.device) -> None:
    """generate()'s logits processors, `TargetPrefix` added."""
    processors = LogitsProcessorList(kwargs.get("logits_processor") or [])
    processors.append(TargetPrefix(target_prefix, device))
    kwargs["logits_processor"] = processors


def paper_generation_config(config) -> GenerationConfig:
    """Section 6.1's decoding settings, the defaults of every Vaswani model's `generation_config`."""
    return GenerationConfig(
        num_beams=4,
        length_penalty=0.6,
        early_stopping=False,
        decoder_start_token_id=config.decoder_start_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
    )


OUTPUT_MARGIN = 50  # Section 6.1: "maximum output length to input length + 50"


def sentence_limits(config, attention_mask: torch.Tensor, max_new_tokens=None, max_length=None) -> torch.Tensor:
    """Section 6.1's "input length + 50" for each sentence, as a decoder length (the start token included), lowered
    to a `max_new_tokens` or `max_length` cap and to the end of a table of learned positions."""
    limits = 1 + attention_mask.sum(dim=-1) + OUTPUT_MARGIN
    if max_new_tokens is not None:
        limits = limits.clamp(max=1 + max_new_tokens)
    if max_length is not None:
        limits = limits.clamp(max=max_length)
    table = config.max_position_embeddings
    if config.position_embedding_type == "learned" and int(limits.max()) > table:
        # Learned positions (Table 3 row E) end with their table, so decoding stops there, as the CTranslate2
        # export's does, rather than failing mid-search.
        logger.warning(
            "paper_decoding: source length + 50 reaches past the %d learned positions; translations stop at %d tokens",
            table,
            table - 1,
        )
        limits = limits.clamp(max=table)
    return limits


def peers_unfinished(done: bool, synced_gpus: bool, device: torch.device) -> bool:
    """Whether to run another step. Under FSDP or ZeRO-3 every process must run the model's forward as often as the
    others (each forward gathers the sharded weights), so a process that has finished steps on until all have."""
    if not synced_gpus:
        return not done
    flag = torch.tensor(0.0 if done else 1.0, device=device)
    torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.SUM)
    return flag.item() > 0.0


class DecoderSteps:
    """The model's forward for each decoding step: the encoder output as one row per sentence (the k rows of a
    sentence's hypotheses attend over it together, see `kernels_vaswani.by_sentence`), the decoder's KV cache, and
    logits for the last position only."""

    def __init__(self, model, sentences: int, model_kwargs: dict):
        self.model = model
        self.use_cache = model_kwargs.get("use_cache", True)
        self.cache = model_kwargs.pop(CACHE, None)
        if self.cache is not None and not isinstance(self.cache, EncoderDecoderCache):
            raise TypeError(
                f"paper_decoding: past_key_values is a {type(self.cache).__name__}; expected an EncoderDecoderCache, "
                "whose self-attention part alone moves with the beams"
            )
        encoder_outputs = model_kwargs.pop("encoder_outputs")
        attention_mask = model_kwargs.pop("attention_mask", None)
        # generate() has repeated the encoder output and the source mask for every hypothesis (repeat_interleave:
        # rows s*k to s*k+k-1 for sentence s). One row of each per sentence is kept, so that its encoder-decoder keys
        # and values are computed, cached and read once.
        states = encoder_outputs.last_hidden_state
        repeats = states.shape[0] // sentences
        kept = states[::repeats]
        if states.shape[0] != sentences * repeats or not torch.equal(kept.repeat_interleave(repeats, dim=0), states):
            raise ValueError(
                f"paper_decoding: an encoder output of {states.shape[0]} rows for {sentences} sentences; expected "
                "each sentence's row repeated for its hypotheses, one after another, as transformers' generate() "
                "repeats it (a release that changes this needs paper_search changed)"
            )
        self.encoder_outputs = BaseModelOutput(
            last_hidden_state=kept,
            hidden_states=encoder_outputs.get("hidden_states"),
            attentions=encoder_outputs.get("attentions"),
        )
        self.attention_mask = None if attention_mask is None else attention_mask[::repeats]
        model_kwargs["logits_to_keep"] = 1
        self.model_kwargs = model_kwargs
        self.first = True

    def __call__(self, sequences: torch.LongTensor):
        """Runs the model on the hypotheses `sequences` (rows: sentence-major, as the cache holds them)."""
        inputs = self.model.prepare_inputs_for_generation(
            sequences,
            next_sequence_length=1 if self.use_cache and not self.first else None,
            **{CACHE: self.cache},
            attention_mask=self.attention_mask,
            encoder_outputs=self.encoder_outputs,
            is_first_iteration=self.first,
            **self.model_kwargs,
        )
        outputs = self.model(**inputs, return_dict=True)
        self.first = False
        if self.use_cache:
            self.cache = output_cache(outputs)
        return outputs

    def select(self, sentences: torch.Tensor, rows_per_sentence: int) -> None:
        """Keeps only `sentences` (indices into the batch as it is now) and their hypotheses' rows: the cache's rows
        (public `batch_select_indices`), the encoder output and the source mask."""
        rows = sentence_rows(sentences, rows_per_sentence)
        if self.cache is not None:
            self.cache.self_attention_cache.batch_select_indices(rows)
            self.cache.cross_attention_cache.batch_select_indices(sentences)
        self.encoder_outputs = BaseModelOutput(last_hidden_state=self.encoder_outputs.last_hidden_state[sentences])
        if self.attention_mask is not None:
            self.attention_mask = self.attention_mask[sentences]

    def reorder(self, beam_idx: torch.Tensor) -> None:
        """Moves the cached decoder self-attention to the chosen beams. The encoder-decoder attention's cache is left
        as it is: one row per sentence, and a beam only ever continues a beam of its own sentence."""
        if self.cache is not None:
            self.cache.self_attention_cache.reorder_cache(beam_idx)


class EnsembleSteps:
    """Several models decoding as one (an ensemble, as fairseq, Marian, OpenNMT and Sockeye decode): each its own
    `DecoderSteps` over the same hypotheses; at each step their next-token log-probabilities are averaged (Marian's
    way; fairseq averages probabilities), and the search ranks the average, renormalized, as one model's."""

    def __init__(self, members: list[DecoderSteps]):
        self.members = members
        self.encoder_outputs = members[0].encoder_outputs  # what `return_dict_in_generate` reports: the first's

    @classmethod
    def of(cls, first: DecoderSteps, others: list, source: torch.Tensor, attention_mask: torch.Tensor | None):
        """`first`, and a `DecoderSteps` for each model of `others` with its own encoding of `source`."""
        members = [first]
        for model in others:
            encoded = model.get_encoder()(input_ids=source, attention_mask=attention_mask, return_dict=True)
            cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
            kwargs = {"encoder_outputs": encoded, "attention_mask": attention_mask, CACHE: cache}
            members.append(DecoderSteps(model, source.shape[0], kwargs))
        return cls(members)

    @property
    def cache(self):
        return self.members[0].cache

    def __call__(self, sequences: torch.LongTensor):
        outputs = [member(sequences) for member in self.members]
        log_probs = [output.logits[:, -1:].float().log_softmax(dim=-1) for output in outputs]
        outputs[0].logits = torch.stack(log_probs).mean(dim=0)
        return outputs[0]

    def select(self, sentences: torch.Tensor, rows_per_sentence: int) -> None:
        for member in self.members:
            member.select(sentences, rows_per_sentence)

    def reorder(self, beam_idx: torch.Tensor) -> None:
        for member in self.members:
            member.reorder(beam_idx)


class Recorder:
    """What `return_dict_in_generate` asks for, step by step (as transformers' own searches record it)."""

    def __init__(self, config: GenerationConfig, encoder_outputs: BaseModelOutput):
        wanted = config.return_dict_in_generate
        self.scores = () if wanted and config.output_scores else None
        self.logits = () if wanted and config.output_logits else None
        self.decoder_attentions = () if wanted and config.output_attentions else None
        self.cross_attentions = () if wanted and config.output_attentions else None
        self.decoder_hidden_states = () if wanted and config.output_hidden_states else None
        self.encoder_attentions = encoder_outputs.get("attentions") if wanted and config.output_attentions else None
        self.encoder_hidden_states = (
            encoder_outputs.get("hidden_states") if wanted and config.output_hidden_states else None
        )

    def add(self, outputs, logits: torch.Tensor, scores: torch.Tensor) -> None:
        if self.scores is not None:
            self.scores += (scores.clone(),)
        if self.logits is not None:
            self.logits += (logits.clone(),)
        if self.decoder_attentions is not None:
            self.decoder_attentions += (outputs.decoder_attentions,)
            self.cross_attentions += (outputs.cross_attentions,)
        if self.decoder_hidden_states is not None:
            self.decoder_hidden_states += (outputs.decoder_hidden_states,)

    def fields(self) -> dict:
        return {
            "scores": self.scores,
            "logits": self.logits,
            "encoder_attentions": self.encoder_attentions,
            "encoder_hidden_states": self.encoder_hidden_states,
            "decoder_attentions": self.decoder_attentions,
            "cross_attentions": self.cross_attentions,
            "decoder_hidden_states": self.decoder_hidden_states,
        }


def eos_token_ids(config: GenerationConfig) -> list[int]:
    eos = config.eos_token_id
    return [] if eos is None else [eos] if isinstance(eos, int) else list(eos)


def fill_token_id(config: GenerationConfig) -> int:
    """What follows a finished hypothesis: the pad token (the first end-of-sentence token without one)."""
    if config.pad_token_id is not None:
        return config.pad_token_id
    eos = eos_token_ids(config)
    return eos[0] if eos else -1


SEARCHES = {
    GenerationMode.GREEDY_SEARCH,
    GenerationMode.SAMPLE,
    GenerationMode.BEAM_SEARCH,
    GenerationMode.BEAM_SAMPLE,
}


def paper_search(
    model,
    input_ids: torch.LongTensor,
    logits_processor: LogitsProcessorList,
    stopping_criteria: StoppingCriteriaList,
    generation_config: GenerationConfig,
    *,
    synced_gpus: bool = False,
    streamer=None,
    ensemble: tuple = (),
    source: tuple = (None, None),
    **model_kwargs,
):
    """Section 6.1's search, as `generate(custom_generate=paper_search)` calls it (`generate(paper_decoding=True)`
    adds the per-sentence length limit and runs it so).

    `input_ids` holds the decoder's start of every hypothesis, k rows per sentence (k = `num_beams`, or the returned
    sequences per sentence for one beam); `model_kwargs` holds generate()'s encoder output and cache. With one beam the
    search is greedy (or sampling), one hypothesis per row; with more it is `beam_search`. `ensemble`: other models
    decoding with this one (`EnsembleSteps`), each encoding `source` (input_ids, attention_mask) itself.
    """
    mode = generation_config.get_generation_mode()
    if mode not in SEARCHES:
        raise ValueError(
            f"paper_decoding: the generation settings ask for {mode.value}; expected greedy search, sampling, beam "
            "search or beam sampling (Section 6.1 is beam search)"
        )
    k = max(generation_config.num_beams, generation_config.num_return_sequences)
    if input_ids.shape[0] % k:
        raise ValueError(
            f"paper_decoding: {input_ids.shape[0]} decoder rows; expected a multiple of {k} (k per sentence)"
        )
    steps = DecoderSteps(model, input_ids.shape[0] // k, model_kwargs)
    if ensemble:
        steps = EnsembleSteps.of(steps, list(ensemble), *source)
    recorder = Recorder(generation_config, steps.encoder_outputs)
    shrinks = may_shrink(generation_config, logits_processor, stopping_criteria, synced_gpus, streamer)
    if generation_config.num_beams > 1:
        if streamer is not None:
            raise ValueError(
                "paper_decoding: a streamer needs num_beams=1; beam search's hypotheses change until the end"
            )
        return beam_search(
            input_ids, logits_processor, stopping_criteria, generation_config, steps, recorder, synced_gpus, shrinks
        )
    return greedy_search(
        input_ids, logits_processor, stopping_criteria, generation_config, steps, recorder, synced_gpus, streamer,
        shrinks,
    )  # fmt: skip


# transformers' logits processors and stopping criteria known to treat each row by itself: what one row becomes depends
# on that row's tokens and scores and on the step alone, with no state kept by place in the batch. Not those holding
# one row of something per sentence (the encoder's tokens of encoder_repetition_penalty and
# encoder_no_repeat_ngram_size, prefix_allowed_tokens_fn's sentence index), nor those pairing rows (classifier-free
# guidance) or keeping state (watermarks). Exact classes: a subclass may read what these do not.
ROW_WISE = (
    *(getattr(stock, name) for name in (
        "MinLengthLogitsProcessor", "MinNewTokensLengthLogitsProcessor", "TemperatureLogitsWarper",
        "RepetitionPenaltyLogitsProcessor", "TopKLogitsWarper", "TopPLogitsWarper", "MinPLogitsWarper",
        "TypicalLogitsWarper", "EpsilonLogitsWarper", "EtaLogitsWarper", "NoRepeatNGramLogitsProcessor",
        "NoBadWordsLogitsProcessor", "SequenceBiasLogitsProcessor", "ForcedBOSTokenLogitsProcessor",
        "ForcedEOSTokenLogitsProcessor", "InfNanRemoveLogitsProcessor", "ExponentialDecayLengthPenalty",
        "LogitNormalization", "SuppressTokensLogitsProcessor", "SuppressTokensAtBeginLogitsProcessor",
        "MaxLengthCriteria", "MaxTimeCriteria", "EosTokenCriteria", "StopStringCriteria",
    )),
)  # fmt: skip


def may_shrink(generation_config, logits_processor, stopping_criteria, synced_gpus: bool, streamer) -> bool:
    """Whether a sentence whose search is over may leave the batch (what CTranslate2 does), so that the steps after
    it compute only the sentences still searching. Its result is final by then, so no token changes; but a row's
    place in the batch changes, and only what is known not to depend on it may see the batch shrink: transformers'
    logits processors and stopping criteria of ROW_WISE and this module's length limit and target prefixes. Not
    under `return_dict_in_generate` (per-step scores, logits, attentions, hidden states and the returned cache hold
    every row), when streaming, or when stepping in lockstep with other processes."""
    if generation_config.return_dict_in_generate or synced_gpus or streamer is not None:
        return False
    ours = (TargetPrefix, MaxLengthPerSentence)
    return all(isinstance(each, ours) or type(each) in ROW_WISE for each in (*logits_processor, *stopping_criteria))


def sentence_rows(sentences: torch.Tensor, rows_per_sentence: int) -> torch.Tensor:
    """The rows of `sentences` in a batch of `rows_per_sentence` rows a sentence, one sentence after another."""
    offsets = torch.arange(rows_per_sentence, device=sentences.device)
    return (sentences[:, None] * rows_per_sentence + offsets).flatten()


def leave_batch(kept: torch.Tensor, rows_per_sentence: int, steps, stopping_criteria, logits_processor) -> None:
    """Shrinks the model's state, the length limits and the target prefixes to the sentences `kept` (indices into
    the batch as it is)."""
    steps.select(kept, rows_per_sentence)
    for criteria in (*stopping_criteria, *logits_processor):
        if isinstance(criteria, (MaxLengthPerSentence, TargetPrefix)):
            criteria.select(kept)


def greedy_search(
    input_ids, logits_processor, stopping_criteria, config, steps, recorder, synced_gpus, streamer, shrinks
):
    """One beam: one hypothesis per row and nothing to rank by length, so its likeliest next token (a sampled one
    under `do_sample`) at each step, as transformers' greedy search and sampling choose. A finished row is padded.

    Identical to transformers' greedy search except that, where `shrinks`, a sentence whose rows have all finished
    leaves the batch; its rows are set aside, padded as they would have been."""
    device = input_ids.device
    pad = torch.tensor(fill_token_id(config), device=device)
    pads_after_eos = any(hasattr(criteria, "eos_token_id") for criteria in stopping_criteria)
    shrinks = shrinks and pads_after_eos  # without an end token, a row past its length limit goes on generating
    rows_per_sentence = input_ids.shape[0] // steps.encoder_outputs.last_hidden_state.shape[0]
    active = torch.arange(input_ids.shape[0] // rows_per_sentence, device=device)  # sentences still in the batch
    output = None  # every row, once a sentence has left the batch
    unfinished = torch.ones(input_ids.shape[0], dtype=torch.long, device=device)
    done = False
    while peers_unfinished(done, synced_gpus, device):
        outputs = steps(input_ids)
        if synced_gpus and done:
            continue  # forward only, in step with the other processes
        logits = outputs.logits[:, -1].to(copy=True, dtype=torch.float32, device=device)
        scores = logits_processor(input_ids, logits)
        recorder.add(outputs, logits, scores)
        del outputs
        if config.do_sample:
            next_tokens = torch.multinomial(nn.functional.softmax(scores, dim=-1), num_samples=1).squeeze(1)
        else:
            next_tokens = torch.argmax(scores, dim=-1)
        if pads_after_eos:
            next_tokens = next_tokens * unfinished + pad * (1 - unfinished)
        input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
        unfinished = unfinished & ~stopping_criteria(input_ids, recorder.scores)
        if streamer is not None:
            streamer.put(next_tokens.cpu())
        done = bool(unfinished.max() == 0)
        if not shrinks or done:
            continue
        over = (unfinished.view(-1, rows_per_sentence) == 0).all(dim=1)
        if bool(over.any()):
            if output is None:
                output = torch.full((len(active) * rows_per_sentence, config.max_length), int(pad), device=device)
            leaving = sentence_rows(over.nonzero().flatten(), rows_per_sentence)
            output[sentence_rows(active[over], rows_per_sentence), : input_ids.shape[1]] = input_ids[leaving]
            kept = (~over).nonzero().flatten()
            leave_batch(kept, rows_per_sentence, steps, stopping_criteria, logits_processor)
            rows = sentence_rows(kept, rows_per_sentence)
            active, input_ids, unfinished = active[kept], input_ids[rows], unfinished[rows]
    if streamer is not None:
        streamer.end()
    if output is not None:
        output[sentence_rows(active, rows_per_sentence), : input_ids.shape[1]] = input_ids
        input_ids = output[:, : input_ids.shape[1]]
    if not config.return_dict_in_generate:
        return input_ids
    return GenerateEncoderDecoderOutput(sequences=input_ids, **recorder.fields(), **{CACHE: steps.cache})


def gather_beams(tensor: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """tensor[s, indices[s, j], ...] for every sentence s and chosen hypothesis j."""
    while indices.dim() < tensor.dim():
        indices = indices.unsqueeze(-1)
    return torch.take_along_dim(tensor, indices, dim=1)


def beam_search(input_ids, logits_processor, stopping_criteria, config, steps, recorder, synced_gpus, shrinks):
    """Section 6.1's beam search: k = `num_beams` live hypotheses per sentence; a finished one (ended by an
    end-of-sentence token or a stopping criterion, such as the length limit) scores log P(Y|X) / lp(Y), GNMT's
    penalty with alpha = `length_penalty`, |Y| counting its end token.

    At each step a sentence's 2k likeliest continuations (k more per extra end-of-sentence id) are ranked by
    log P; those of the first k that finish join the sentence's k best finished hypotheses, and the k likeliest that
    do not finish live on. A sentence's search ends when no live hypothesis can beat its k-th best finished one:
    log-probabilities only fall as a hypothesis grows and lp(Y) only grows (alpha >= 0), so the best a live one can
    reach is its log P now over lp at the longest length its sentence allows (tensor2tensor's bound, with each
    sentence's own limit). Ties go as torch.topk orders them. These are transformers' beam search's rules
    (`early_stopping` too), with GNMT's ranking in place of |Y|^alpha; the loop replaced one that hooked into that
    beam search, and gives its tokens and scores.

    Where `shrinks`, a sentence whose search has ended leaves the batch (as in CTranslate2): its finished hypotheses
    are final by then, and the steps after compute only the sentences still searching.
    """
    k = config.num_beams
    sentences, cur_len = input_ids.shape[0] // k, input_ids.shape[1]
    prompt_len, max_length, alpha = cur_len, config.max_length, config.length_penalty
    device = input_ids.device
    candidates = max(2, 1 + len(eos_token_ids(config))) * k  # enough for k live ones if k of them finish
    among_first_k = torch.arange(candidates, device=device) < k
    stops_when_full = config.early_stopping is True  # k finished hypotheses end a sentence, better or not

    running = torch.full((sentences, k, max_length), fill_token_id(config), dtype=torch.int64, device=device)
    running[:, :, :cur_len] = input_ids.view(sentences, k, cur_len)
    finished = running.clone()
    # The k copies of the start differ only in score: the first one alone continues at the first step.
    running_scores = torch.zeros((sentences, k), dtype=torch.float, device=device)
    running_scores[:, 1:] = EXCLUDED
    finished_scores = torch.full((sentences, k), EXCLUDED, dtype=torch.float, device=device)
    is_finished = torch.zeros((sentences, k), dtype=torch.bool, device=device)
    can_improve = torch.ones((sentences, 1), dtype=torch.bool, device=device)
    # Per hypothesis and step, the row (sentence * k + beam) it continued: `beam_indices` of generate's output.
    running_origins = torch.full((sentences, k, max_length - cur_len), -1, dtype=torch.int32, device=device)
    finished_origins = running_origins.clone()
    # The longest a sentence's hypotheses may grow: its own limit (Section 6.1's input + 50), where one is set.
    limits = [criteria.max_lengths for criteria in stopping_criteria if isinstance(criteria, MaxLengthPerSentence)]
    longest = limits[0].to(device).clamp(max=max_length)[:, None] if limits else torch.tensor([[max_length]])
    best_reachable_penalty = gnmt_length_penalty((longest - prompt_len).to(torch.float32), alpha)
    # The sentences still in the batch (their numbers in the whole batch), and the results of those that left it.
    active = torch.arange(sentences, device=device)
    results = None

    done = False
    while peers_unfinished(done, synced_gpus, device):
        hypotheses = running[:, :, :cur_len].reshape(-1, cur_len)
        outputs = steps(hypotheses)
        if synced_gpus and done:
            continue  # forward only, in step with the other processes
        logits = outputs.logits[:, -1, :].to(copy=True, dtype=torch.float32, device=device)
        log_probs = logits_processor(hypotheses, nn.functional.log_softmax(logits, dim=-1))
        recorder.add(outputs, logits, log_probs)
        del outputs

        # The 2k likeliest continuations of each sentence, over all its beams.
        searching = running.shape[0]
        totals = (log_probs.view(searching, k, -1) + running_scores[:, :, None]).view(searching, -1)
        if config.do_sample:
            chosen = torch.multinomial(nn.functional.softmax(totals, dim=-1), num_samples=candidates)
            chosen_scores = torch.gather(totals, 1, chosen)
        else:
            chosen_scores, chosen = torch.topk(totals, k=candidates)
        vocab_size = totals.shape[-1] // k
        beam = chosen // vocab_size
        extended = gather_beams(running, beam)
        extended[:, :, cur_len] = chosen % vocab_size
        extended_origins = gather_beams(running_origins, beam)
        extended_origins[:, :, cur_len - prompt_len] = beam + active[:, None] * k
        ends = stopping_criteria(extended[:, :, : cur_len + 1].reshape(searching * candidates, -1), recorder.scores)
        ends = ends.view(searching, candidates)

        # The k likeliest that do not end live on.
        live_scores = chosen_scores + ends.to(torch.float32) * EXCLUDED
        keep = torch.topk(live_scores, k=k)[1]
        running = gather_beams(extended, keep)
        running_scores = gather_beams(live_scores, keep)
        running_origins = gather_beams(extended_origins, keep)

        # Those of the first k that end compete, by GNMT's score, with the sentence's k best finished ones.
        finish_now = ends & among_first_k[None, :]
        finish_scores = chosen_scores / gnmt_length_penalty(cur_len + 1 - prompt_len, alpha)
        finish_scores += (torch.all(is_finished, dim=-1, keepdim=True) & stops_when_full).to(torch.float32) * EXCLUDED
        finish_scores += (~can_improve).to(torch.float32) * EXCLUDED
        finish_scores += (~finish_now) * EXCLUDED
        best = torch.topk(torch.cat((finished_scores, finish_scores), dim=1), k=k)[1]
        finished = gather_beams(torch.cat((finished, extended), dim=1), best)
        finished_scores = gather_beams(torch.cat((finished_scores, finish_scores), dim=1), best)
        finished_origins = gather_beams(torch.cat((finished_origins, extended_origins), dim=1), best)
        is_finished = gather_beams(torch.cat((is_finished, finish_now), dim=1), best)

        # The cache follows the chosen beams: rows numbered in the batch as it is now.
        steps.reorder((torch.arange(searching, device=device)[:, None] * k + gather_beams(beam, keep)).flatten())
        cur_len += 1

        best_reachable = running_scores[:, :1] / best_reachable_penalty
        worst_finished = torch.where(is_finished, torch.min(finished_scores, dim=1, keepdim=True)[0], EXCLUDED)
        can_improve = can_improve & torch.any(best_reachable > worst_finished, dim=-1, keepdim=True)
        full = torch.all(is_finished, dim=1) & stops_when_full
        if not shrinks:
            done = not (bool(torch.any(can_improve)) and not bool(torch.all(full)) and not bool(torch.all(ends)))
            continue
        # A sentence's search is over when none of its live hypotheses can win, k have finished under
        # early_stopping=True, or all its continuations ended (its length limit): its finished ones are final.
        over = ~can_improve[:, 0] | full | torch.all(ends, dim=1)
        if not bool(over.any()):
            continue
        if results is None:
            results = [finished.clone(), finished_scores.clone(), finished_origins.clone()]
        for result, tensor in zip(results, (finished, finished_scores, finished_origins), strict=True):
            result[active[over]] = tensor[over]
        kept = (~over).nonzero().flatten()
        done = len(kept) == 0
        if done:
            break
        leave_batch(kept, k, steps, stopping_criteria, logits_processor)
        active = active[kept]
        running, running_scores, running_origins = running[kept], running_scores[kept], running_origins[kept]
        finished, finished_scores, finished_origins = finished[kept], finished_scores[kept], finished_origins[kept]
        is_finished, can_improve = is_finished[kept], can_improve[kept]
        if best_reachable_penalty.shape[0] > 1:
            best_reachable_penalty = best_reachable_penalty[kept]

    if results is not None:  # every sentence has left the batch
        finished, finished_scores, finished_origins = results
    n = config.num_return_sequences
    sequences = finished[:, :n].reshape(sentences * n, -1)
    scores = finished_scores[:, :n].reshape(-1)
    origins = finished_origins[:, :n].reshape(sentences * n, -1)
    generated = int((origins + 1).bool().sum(dim=1).max())  # the longest returned hypothesis
    sequences, origins = sequences[:, : prompt_len + generated], origins[:, :generated]
    if not config.return_dict_in_generate:
        return sequences
    return GenerateBeamEncoderDecoderOutput(
        sequences=sequences,
        sequences_scores=scores if config.output_scores else None,
        beam_indices=origins,
        **recorder.fields(),
        **{CACHE: steps.cache},
    )


def default_synced_gpus(model) -> bool:
    """generate()'s own default: sharded weights (FSDP, ZeRO-3) over more than one process."""
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    world_size = torch.distributed.get_world_size() if distributed else 1
    return (is_deepspeed_zero3_enabled() or is_fsdp_managed_module(model)) and world_size > 1


class VaswaniGenerationMixin(GenerationMixin):
    """`generate(..., paper_decoding=True)`; without it, transformers' own `generate`.

    Named `...GenerationMixin`: transformers takes a model whose base class is so named for one that can generate."""

    def generate(self, *args, paper_decoding: bool = False, **kwargs):
        """`GenerationMixin.generate`, plus the decoding of Section 6.1 when `paper_decoding=True`:

        - beam search with the model's `generation_config.num_beams` (4) unless `num_beams` is passed;
        - hypotheses ranked by log P(Y|X) / lp(Y) with GNMT's lp(Y) = ((5 + |Y|) / 6)^alpha, alpha being
          `length_penalty` (generation_config: 0.6). Stock transformers divides by |Y|^alpha instead, which ranks
          hypotheses differently; that stays the behaviour without `paper_decoding`;
        - at most (source length + 50) output tokens per sentence, the source length counting non-padding tokens, or
          fewer where `max_new_tokens` or `max_length` (which counts the decoder start token) is smaller, or where
          learned positions end (a warning says so); the search over a sentence ends as soon as no live beam can beat
          its finished ones.

        Logits processors, stopping criteria, `num_return_sequences`, `do_sample`, `use_cache`, the cache
        implementation and `return_dict_in_generate` with its `output_*` flags apply as in `generate`; the search is
        `paper_search`, run through `generate(custom_generate=...)`. In both modes `check_generate_inputs` refuses,
        before any work, input_ids that are not an integer (batch, length) tensor with at least one row and token and
        ids within the vocabulary, an attention_mask of another shape, a source row that is all padding (its
        `attention_mask`, or its ids against the pad id, all zero), `num_beams` or `num_return_sequences` under 1 (or
        more sequences than beams), a length penalty that is not finite (or negative under `paper_decoding`), and
        `max_length` under 2 or `max_new_tokens` under 1.

        `ensemble` (with `paper_decoding`): other models that share this one's vocabulary, decoding with it, their
        next-token log-probabilities averaged at every step (`EnsembleSteps`).

        `target_prefix` (both modes): one list of token ids per sentence (empty for none) that its translation starts
        with (`TargetPrefix`); refused where it is not that, or leaves no room within the sentence's length limit.
        """
        input_ids = kwargs.get("input_ids", kwargs.get("inputs", args[0] if args else None))
        attention_mask = kwargs.get("attention_mask")
        given = {**kwargs, "generation_config": kwargs.get("generation_config", args[1] if len(args) > 1 else None)}
        settings = check_generate_inputs(
            self.config, self.generation_config, given, input_ids, attention_mask, paper_decoding
        )
        if attention_mask is None and input_ids is not None and self.config.pad_token_id is not None:
            attention_mask = input_ids.ne(self.config.pad_token_id)
        target_prefix = kwargs.pop("target_prefix", None)
        ensemble = check_ensemble(self, kwargs.pop("ensemble", None), paper_decoding)
        if not paper_decoding:
            if target_prefix is not None:
                new_tokens = settings["max_new_tokens"] or (settings["max_length"] or TRANSFORMERS_MAX_LENGTH) - 1
                room = [new_tokens] * (len(input_ids) if input_ids is not None else len(target_prefix))
                prefixes = check_target_prefix(target_prefix, self.config.vocab_size, room)
                with_target_prefix(kwargs, prefixes, self.device)
            return super().generate(*args, **kwargs)
        if input_ids is None:
            raise ValueError("paper_decoding needs input_ids to know each sentence's length")
        for other_search in ("custom_generate", "assistant_model"):
            if (value := kwargs.get(other_search)) is not None:
                shown = repr(value) if isinstance(value, str) else f"a {type(value).__name__}"
                raise ValueError(f"paper_decoding runs its own search; got {other_search}={shown} as well")
        limits = sentence_limits(
            self.config, attention_mask, kwargs.pop("max_new_tokens", None), kwargs.pop("max_length", None)
        )
        if target_prefix is not None:
            prefixes = check_target_prefix(target_prefix, self.config.vocab_size, (limits - 1).tolist())
            with_target_prefix(kwargs, prefixes, self.device)

        kwargs.pop("length_penalty", None)
        kwargs["num_beams"] = settings["num_beams"]
        if settings["num_beams"] > 1 and settings["length_penalty"] is not None:
            # Not passed to greedy search, which ranks nothing: generate() would warn that the penalty goes unused.
            kwargs["length_penalty"] = settings["length_penalty"]
        criteria = StoppingCriteriaList(kwargs.pop("stopping_criteria", None) or [])
        criteria.append(MaxLengthPerSentence(limits))
        if kwargs.get("stop_strings") is not None and kwargs.get("tokenizer") is not None:
            # generate() passes a `custom_generate` callable's call no tokenizer to build this criterion with.
            criteria.append(stock.StopStringCriteria(kwargs.pop("tokenizer"), kwargs.pop("stop_strings")))
        synced_gpus = kwargs.pop("synced_gpus", None)
        search = functools.partial(
            paper_search,
            synced_gpus=default_synced_gpus(self) if synced_gpus is None else synced_gpus,
            streamer=kwargs.get("streamer"),
            ensemble=ensemble,
            source=(input_ids, attention_mask),
        )
        return super().generate(
            *args, max_new_tokens=int(limits.max()) - 1, stopping_criteria=criteria, custom_generate=search, **kwargs
        )
