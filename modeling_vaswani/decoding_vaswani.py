"""The decoding loop around Section 6.1's search (search_vaswani.py), as fairseq's fairseq/sequence_generator.py runs
its fairseq/search.py: the model's forward at each step (`DecoderSteps`) and the decoder's KV cache (`decoder_cache`,
and `keys_and_values`, which the model's attention layers read and write it through), what
`return_dict_in_generate` records (`Recorder`), multi-GPU lock-step (`peers_unfinished`), the rules by which a
sentence whose search is over leaves the batch (`may_shrink`, `leave_batch`), and the one-beam loop
(`greedy_search`), a speed path beside transformers' own.

Payload: imports only torch, transformers and its siblings.
"""

from typing import NamedTuple

import torch
from torch import nn
from transformers import generation as stock
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.distributed.fsdp import is_fsdp_managed_module
from transformers.generation import GenerateEncoderDecoderOutput, GenerationConfig
from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled
from transformers.modeling_outputs import BaseModelOutput

from .compat_vaswani import CACHE, output_cache


class FollowsTheBatch:
    """A logits processor or stopping criterion that holds one row of something per sentence and follows the batch as
    it shrinks: `select(sentences)` keeps the rows of `sentences` only (the per-sentence length limit, target
    prefixes)."""

    def select(self, sentences: torch.Tensor) -> None:
        raise NotImplementedError


class KeepsLogProbabilities:
    """A logits processor whose scores stay at most 0 where its input's are (it rules tokens out, or normalizes
    again): a hypothesis's score then only falls as it grows (`scores_only_fall`)."""


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


def decoder_cache(config, past_key_values, use_cache: bool | None):
    """The decoder's KV cache: `past_key_values`, or a new one where the call uses a cache and brings none; and its
    self-attention part, the one the causal mask counts (None without an `EncoderDecoderCache`)."""
    if use_cache and past_key_values is None:
        past_key_values = EncoderDecoderCache(DynamicCache(config=config), DynamicCache(config=config))
    if not isinstance(past_key_values, EncoderDecoderCache):
        return past_key_values, None
    return past_key_values, past_key_values.self_attention_cache


def keys_and_values(past_key_values, layer_idx: int, is_cross_attention: bool, project):
    """An attention layer's keys and values (`project()` computes them from its input) through the decoder's KV
    cache: self-attention's appended to those of the tokens before; encoder-decoder attention's computed at the first
    step and read from the cache after, as the encoder output they attend over (Section 3.2.3) does not change while
    decoding."""
    cache = past_key_values
    if isinstance(past_key_values, EncoderDecoderCache):
        cache = past_key_values.cross_attention_cache if is_cross_attention else past_key_values.self_attention_cache
    if is_cross_attention and cache is not None and past_key_values.is_updated.get(layer_idx):
        return cache.layers[layer_idx].keys, cache.layers[layer_idx].values
    key, value = project()
    if cache is None:
        return key, value
    key, value = cache.update(key, value, layer_idx)
    if is_cross_attention:
        past_key_values.is_updated[layer_idx] = True
    return key, value


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

    @property
    def records(self) -> bool:
        """Whether anything is recorded step by step."""
        wanted = (self.scores, self.logits, self.decoder_attentions, self.decoder_hidden_states)
        return any(each is not None for each in wanted)

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


class Shortlist(NamedTuple):
    """A step's output where the step object ranked each row's next tokens itself (the onnxruntime engine's graphs
    do, translation/onnxruntime.py): the `width` likeliest, best first, their `log_probs` and `tokens`, each
    (rows, width). Section 6.1's beam keeps a sentence's 2k likeliest continuations of its k hypotheses, and each of
    them is among its own row's 2k likeliest, so a shortlist that wide gives the search the candidates the whole
    vocabulary gives (`search_vaswani.TopK.propose_shortlist`; ties at its edge aside), and greedy search its first.
    Only where nothing reads the whole distribution (`shortlisted`). `log_probs` is None where the step ranked the
    logits and gave no values (greedy search reads the first token alone, as `next_token` takes the logits' argmax)."""

    log_probs: torch.Tensor | None
    tokens: torch.Tensor


def shortlisted(outputs, logits_processor, recorder: Recorder, config: GenerationConfig) -> bool:
    """Whether a step gave a `Shortlist`; ValueError where the decoding needs the whole distribution."""
    if not isinstance(outputs, Shortlist):
        return False
    if len(logits_processor) or recorder.records or config.do_sample:
        raise ValueError(
            "a step gave a Shortlist of its rows' likeliest tokens where the decoding reads the whole distribution "
            f"(logits processors {[type(each).__name__ for each in logits_processor]}, recording "
            f"{recorder.records}, do_sample {config.do_sample}); expected full logits from the step object"
        )
    return True


def eos_token_ids(config: GenerationConfig) -> list[int]:
    eos = config.eos_token_id
    return [] if eos is None else [eos] if isinstance(eos, int) else list(eos)


def fill_token_id(config: GenerationConfig) -> int:
    """What follows a finished hypothesis: the pad token (the first end-of-sentence token without one)."""
    if config.pad_token_id is not None:
        return config.pad_token_id
    eos = eos_token_ids(config)
    return eos[0] if eos else -1


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

# Those of transformers' processors that keep log-probabilities at most 0: they rule tokens out (-inf), force one (0),
# scale by a positive factor or normalize again. Not SequenceBiasLogitsProcessor or ExponentialDecayLengthPenalty,
# which may add to a score.
KEEP_LOG_PROBABILITIES = tuple(getattr(stock, name) for name in (
    "MinLengthLogitsProcessor", "MinNewTokensLengthLogitsProcessor", "TemperatureLogitsWarper",
    "RepetitionPenaltyLogitsProcessor", "TopKLogitsWarper", "TopPLogitsWarper", "MinPLogitsWarper",
    "TypicalLogitsWarper", "EpsilonLogitsWarper", "EtaLogitsWarper", "NoRepeatNGramLogitsProcessor",
    "NoBadWordsLogitsProcessor", "ForcedBOSTokenLogitsProcessor", "ForcedEOSTokenLogitsProcessor",
    "LogitNormalization", "SuppressTokensLogitsProcessor", "SuppressTokensAtBeginLogitsProcessor",
))  # fmt: skip


def scores_only_fall(logits_processor) -> bool:
    """Whether every step's scores are at most 0 (log-probabilities, after `logits_processor`), so that no hypothesis
    can score more later than now: what lets a search end a sentence as soon as its results are final."""
    keep = (
        isinstance(each, KeepsLogProbabilities) or type(each) in KEEP_LOG_PROBABILITIES for each in logits_processor
    )
    return all(keep)


def may_shrink(generation_config, logits_processor, stopping_criteria, synced_gpus: bool, streamer) -> bool:
    """Whether a sentence whose search is over may leave the batch (what CTranslate2 does), so that the steps after
    it compute only the sentences still searching. Its result is final by then, so no token changes; but a row's
    place in the batch changes, and only what is known not to depend on it may see the batch shrink: transformers'
    logits processors and stopping criteria of ROW_WISE and this package's `FollowsTheBatch` ones. Not
    under `return_dict_in_generate` (per-step scores, logits, attentions, hidden states and the returned cache hold
    every row), when streaming, or when stepping in lockstep with other processes."""
    if generation_config.return_dict_in_generate or synced_gpus or streamer is not None:
        return False
    every = (*logits_processor, *stopping_criteria)
    return all(isinstance(each, FollowsTheBatch) or type(each) in ROW_WISE for each in every)


def sentence_rows(sentences: torch.Tensor, rows_per_sentence: int) -> torch.Tensor:
    """The rows of `sentences` in a batch of `rows_per_sentence` rows a sentence, one sentence after another."""
    offsets = torch.arange(rows_per_sentence, device=sentences.device)
    return (sentences[:, None] * rows_per_sentence + offsets).flatten()


def leave_batch(kept: torch.Tensor, rows_per_sentence: int, steps, stopping_criteria, logits_processor) -> None:
    """Shrinks the model's state and what follows the batch (the length limits, the target prefixes) to the
    sentences `kept` (indices into the batch as it is)."""
    steps.select(kept, rows_per_sentence)
    for criteria in (*stopping_criteria, *logits_processor):
        if isinstance(criteria, FollowsTheBatch):
            criteria.select(kept)


def next_token(outputs, input_ids, logits_processor, recorder: Recorder, config, device) -> torch.Tensor:
    """Each row's likeliest next token from the step's logits (a sampled one under `do_sample`), recorded."""
    logits = outputs.logits[:, -1].to(copy=True, dtype=torch.float32, device=device)
    scores = logits_processor(input_ids, logits)
    recorder.add(outputs, logits, scores)
    if config.do_sample:
        return torch.multinomial(nn.functional.softmax(scores, dim=-1), num_samples=1).squeeze(1)
    return torch.argmax(scores, dim=-1)


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
        if shortlisted(outputs, logits_processor, recorder, config):
            next_tokens = outputs.tokens[:, 0].to(device)
        else:
            next_tokens = next_token(outputs, input_ids, logits_processor, recorder, config, device)
        del outputs
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


def default_synced_gpus(model) -> bool:
    """generate()'s own default: sharded weights (FSDP, ZeRO-3) over more than one process."""
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    world_size = torch.distributed.get_world_size() if distributed else 1
    return (is_deepspeed_zero3_enabled() or is_fsdp_managed_module(model)) and world_size > 1
