"""Decoding as Section 6.1 of "Attention Is All You Need" (arXiv:1706.03762): `generate(..., paper_decoding=True)`.

"We used beam search with a beam size of 4 and length penalty alpha = 0.6 (GNMT, Wu et al. 2016) ... set the maximum
output length during inference to input length + 50, but terminate early when possible."

This module is the glue: generate()'s input checks (both decoding modes) and `paper_search`, which runs the search of
search_vaswani.py (or the one-beam loop of decoding_vaswani.py), with guidance_vaswani.py's target prefixes,
ensembles and phrases to avoid, and constraints_vaswani.py's phrases to hold. Payload: travels flat beside
modeling_vaswani.py as remote code, so it imports only torch, transformers and its siblings. `generate` runs
`paper_search` through its public `custom_generate` argument: transformers prepares the inputs, the generation
config, the logits processors and the stopping criteria, and the loop calls the model's forward and reorders the
cache through public methods only. transformers' beam search ranks finished hypotheses by log P(Y|X) / |Y|^alpha, and
none of its public hooks can change that into GNMT's ranking.
"""

import copy
import functools
import math
import numbers

import torch
from transformers import generation as stock
from transformers.generation import (
    GenerationConfig,
    GenerationMixin,
    GenerationMode,
    LogitsProcessorList,
    StoppingCriteriaList,
)

from .constraints_vaswani import DynamicBeamAllocation, check_constraints
from .decoding_vaswani import DecoderSteps, Recorder, default_synced_gpus, eos_token_ids, greedy_search, may_shrink
from .guidance_vaswani import (
    AvoidPhrases,
    EnsembleSteps,
    TargetPrefix,
    check_avoid,
    check_ensemble,
    check_target_prefix,
    is_int,
    with_processor,
)
from .search_vaswani import MaxLengthPerSentence, TopK, beam_search, sentence_limits


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


def stock_output_length(max_new_tokens=None, max_length=None) -> int:
    """The tokens a sentence may generate without the paper's decoding, as transformers' generate() limits them:
    `max_new_tokens`, else `max_length` (which counts the decoder start token), else transformers' default."""
    return max_new_tokens or (max_length or TRANSFORMERS_MAX_LENGTH) - 1


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


def check_generate_inputs(
    config, model_generation_config: GenerationConfig, kwargs: dict, input_ids, attention_mask, paper_decoding: bool
) -> dict:
    """Refuses, before any work, inputs that would otherwise fail deep inside the search (a division by zero, a
    reshape, an index or dtype error from torch) or decode silently into nonsense (a NaN length penalty): each error
    names the argument, the value given and what was expected. Both decoding modes call it. Returns the settings as
    `generation_settings` resolves them.

    Only what transformers leaves unchecked: `GenerationConfig.validate`, which generate() runs on the config it
    resolves before any work, refuses more sequences than beams (both modes; the paper's search passes both on).
    These run here rather than in `paper_search`, the `custom_generate` callable that receives the resolved config:
    generate() encodes the source and repeats it num_beams times before it calls that callable, so a bad num_beams or
    id would fail there unnamed, and stock generate() calls no callable of ours.

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
    constraints: list | None = None,
    ranking_alpha: float | None = None,
    **model_kwargs,
):
    """Section 6.1's search, as `generate(custom_generate=paper_search)` calls it (`generate(paper_decoding=True)`
    adds the per-sentence length limit and runs it so).

    `input_ids` holds the decoder's start of every hypothesis, k rows per sentence (k = `num_beams`, or the returned
    sequences per sentence for one beam); `model_kwargs` holds generate()'s encoder output and cache. With one beam the
    search is greedy (or sampling), one hypothesis per row; with more it is `beam_search`, selecting by `TopK`; with
    `constraints` (phrases to hold, one list a sentence) it is `beam_search` selecting by `DynamicBeamAllocation`,
    with one beam too. `ensemble`: other models decoding with this one (`EnsembleSteps`), each encoding `source`
    (input_ids, attention_mask) itself.
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
    if constraints is not None:  # the search that can allocate its beam, with one beam too
        if generation_config.num_beams == 1:  # it ranks finished hypotheses, which generate() gives greedy search none
            generation_config = copy.deepcopy(generation_config)
            generation_config.length_penalty = ranking_alpha
        selection = DynamicBeamAllocation(constraints, TopK.of(generation_config), eos_token_ids(generation_config))
    elif generation_config.num_beams > 1:
        if streamer is not None:
            raise ValueError(
                "paper_decoding: a streamer needs num_beams=1; beam search's hypotheses change until the end"
            )
        selection = TopK.of(generation_config)
    else:
        return greedy_search(
            input_ids, logits_processor, stopping_criteria, generation_config, steps, recorder, synced_gpus, streamer,
            shrinks,
        )  # fmt: skip
    return beam_search(
        input_ids, logits_processor, stopping_criteria, generation_config, steps, recorder, synced_gpus, shrinks,
        selection,
    )  # fmt: skip


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
        `attention_mask`, or its ids against the pad id, all zero), `num_beams` or `num_return_sequences` under 1, a
        length penalty that is not finite (or negative under `paper_decoding`), and `max_length` under 2 or
        `max_new_tokens` under 1; transformers' own check refuses more sequences than beams.

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
        constraints, avoid = kwargs.pop("constraints", None), kwargs.pop("avoid", None)
        if constraints is not None and not paper_decoding:
            raise ValueError(
                "constraints need paper_decoding=True: transformers 5 removed its constrained beam search, and this "
                "package's own search (Section 6.1's) is the one that meets them"
            )
        rows = len(input_ids) if input_ids is not None else None
        if not paper_decoding:
            if target_prefix is not None:
                new_tokens = stock_output_length(settings["max_new_tokens"], settings["max_length"])
                room = [new_tokens] * (len(input_ids) if input_ids is not None else len(target_prefix))
                prefixes = check_target_prefix(target_prefix, self.config.vocab_size, room)
                with_processor(kwargs, TargetPrefix(prefixes, self.device))
            if avoid is not None:
                with_processor(kwargs, AvoidPhrases(check_avoid(avoid, self, rows or len(avoid))))
            return super().generate(*args, **kwargs)
        if input_ids is None:
            raise ValueError("paper_decoding needs input_ids to know each sentence's length")
        for other_search in ("custom_generate", "assistant_model"):
            if (value := kwargs.get(other_search)) is not None:
                shown = repr(value) if isinstance(value, str) else f"a {type(value).__name__}"
                raise ValueError(f"paper_decoding runs its own search; got {other_search}={shown} as well")
        kwargs.pop("max_new_tokens", None), kwargs.pop("max_length", None)  # caps resolved as generate() resolves them
        limits = sentence_limits(self.config, attention_mask, settings["max_new_tokens"], settings["max_length"])
        prefixes = None
        if target_prefix is not None:
            prefixes = check_target_prefix(target_prefix, self.config.vocab_size, (limits - 1).tolist())
            with_processor(kwargs, TargetPrefix(prefixes, self.device))
        if constraints is not None:
            constraints = check_constraints(constraints, self.config, (limits - 1).tolist(), prefixes)
        if avoid is not None:
            with_processor(kwargs, AvoidPhrases(check_avoid(avoid, self, rows, constraints)))

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
            constraints=constraints,
            # Not named length_penalty: generate() hands a custom_generate callable the arguments its signature names
            ranking_alpha=settings["length_penalty"],
        )
        return super().generate(
            *args, max_new_tokens=int(limits.max()) - 1, stopping_criteria=criteria, custom_generate=search, **kwargs
        )
