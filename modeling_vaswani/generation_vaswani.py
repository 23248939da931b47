"""Decoding as Section 6.1 of "Attention Is All You Need" (arXiv:1706.03762), on transformers' `generate`.

"We used beam search with a beam size of 4 and length penalty alpha = 0.6 (GNMT, Wu et al. 2016) ... set the maximum
output length during inference to input length + 50, but terminate early when possible."

Payload: travels flat beside modeling_vaswani.py as remote code, so it imports only torch and transformers. It hooks
into two private methods of transformers' beam search, the places where the length penalty enters. The penalty's
alpha reaches them through a context variable set for the one `generate` call (never through the model, which other
threads may be using), and `generate` refuses to return a paper-decoded result if beam search did not call both
hooks: a transformers release that renamed them would otherwise rank with its own |Y|^alpha, silently.
"""

import contextvars
from dataclasses import dataclass, field

import torch
from transformers.cache_utils import Cache, EncoderDecoderCache
from transformers.generation import GenerationConfig, GenerationMixin, StoppingCriteria, StoppingCriteriaList
from transformers.utils import logging

logger = logging.get_logger(__name__)


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

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs) -> torch.BoolTensor:
        rows_per_sentence = input_ids.shape[0] // self.max_lengths.shape[0]  # beams (or returned sequences)
        limits = self.max_lengths.to(input_ids.device).repeat_interleave(rows_per_sentence)
        return input_ids.shape[1] >= limits


def check_no_empty_rows(attention_mask: torch.Tensor) -> None:
    """Refuses a source row that is all padding: the decoder would attend over nothing and still write a fluent
    sentence, a translation of no input."""
    empty = attention_mask.eq(0).all(dim=-1).nonzero().flatten().tolist()
    if empty:
        raise ValueError(
            f"attention_mask row {empty[0]} is all padding ({len(empty)} such row(s): {empty[:10]}); expected at "
            "least one source token in every row, since a row without one has nothing to translate"
        )


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


@dataclass
class PaperRanking:
    """GNMT's ranking for one `generate(paper_decoding=True)` call: its alpha, and the beam search hooks that applied
    it (checked when the call ends)."""

    model: object
    alpha: float
    hooks_called: set[str] = field(default_factory=set)


# Set for the duration of one paper-decoding call, in its own thread (or task): a context variable, not an attribute
# of the model, so that concurrent calls on one model cannot see each other's ranking.
PAPER_RANKING: contextvars.ContextVar[PaperRanking | None] = contextvars.ContextVar("paper_ranking", default=None)
BEAM_SEARCH_HOOKS = frozenset({"_update_finished_beams", "_check_early_stop_heuristic"})


class VaswaniGenerationMixin(GenerationMixin):
    """`generate(..., paper_decoding=True)`, and beams that share their sentence's encoder output.

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

        In both modes a source row that is all padding (its `attention_mask`, or its ids against the pad id, all zero)
        raises a ValueError naming the row.
        """
        input_ids = kwargs.get("input_ids", args[0] if args else None)
        attention_mask = kwargs.get("attention_mask")
        if attention_mask is None and input_ids is not None and self.config.pad_token_id is not None:
            attention_mask = input_ids.ne(self.config.pad_token_id)
        if attention_mask is not None:
            check_no_empty_rows(attention_mask)
        if not paper_decoding:
            return super().generate(*args, **kwargs)
        if input_ids is None:
            raise ValueError("paper_decoding needs input_ids to know each sentence's length")
        limits = 1 + attention_mask.sum(dim=-1) + 50  # decoder lengths, the start token included
        max_new_tokens, max_length = kwargs.pop("max_new_tokens", None), kwargs.pop("max_length", None)
        if max_new_tokens is not None:
            limits = limits.clamp(max=1 + max_new_tokens)
        if max_length is not None:
            limits = limits.clamp(max=max_length)
        table = self.config.max_position_embeddings
        if self.config.position_embedding_type == "learned" and int(limits.max()) > table:
            # Learned positions (Table 3 row E) end with their table, so decoding stops there, as the CTranslate2
            # export's does, rather than failing mid-search.
            logger.warning(
                "paper_decoding: source length + 50 reaches past the %d learned positions; translations stop at %d "
                "tokens",
                table,
                table - 1,
            )
            limits = limits.clamp(max=table)

        generation_config = kwargs.get("generation_config") or self.generation_config
        alpha = kwargs.pop("length_penalty", generation_config.length_penalty)
        num_beams = kwargs.setdefault("num_beams", generation_config.num_beams)
        criteria = StoppingCriteriaList(kwargs.pop("stopping_criteria", None) or [])
        criteria.append(MaxLengthPerSentence(limits))
        ranking = PaperRanking(self, alpha)
        token = PAPER_RANKING.set(ranking)
        try:
            output = super().generate(
                *args,
                max_new_tokens=int(limits.max()) - 1,
                stopping_criteria=criteria,
                length_penalty=alpha,
                **kwargs,
            )
        finally:
            PAPER_RANKING.reset(token)
        if num_beams > 1 and ranking.hooks_called != BEAM_SEARCH_HOOKS:
            missing = sorted(BEAM_SEARCH_HOOKS - ranking.hooks_called)
            raise RuntimeError(
                f"paper_decoding: transformers' beam search did not call {', '.join(missing)}, where GNMT's length "
                "penalty (Section 6.1) replaces its own; this transformers release ranks hypotheses by |Y|^alpha "
                "instead. Use the transformers version this model was tested with (see its setup.py)."
            )
        return output

    def _paper_ranking(self, hook: str) -> PaperRanking | None:
        ranking = PAPER_RANKING.get()
        if ranking is None or ranking.model is not self:
            return None
        ranking.hooks_called.add(hook)
        return ranking

    # The two hooks of transformers' beam search (generation/utils.py) where the length penalty enters. Only under
    # paper_decoding: scores are divided by GNMT's lp here, and transformers' own |Y|^alpha is switched off (0).
    def _update_finished_beams(self, *, topk_log_probs, cur_len, decoder_prompt_len, length_penalty, **kwargs):
        if ranking := self._paper_ranking("_update_finished_beams"):
            output_length = cur_len + 1 - decoder_prompt_len  # |Y|, the end-of-sentence token included
            topk_log_probs = topk_log_probs / gnmt_length_penalty(output_length, ranking.alpha)
            length_penalty = 0.0
        return super()._update_finished_beams(
            topk_log_probs=topk_log_probs,
            cur_len=cur_len,
            decoder_prompt_len=decoder_prompt_len,
            length_penalty=length_penalty,
            **kwargs,
        )

    def _check_early_stop_heuristic(
        self, *, running_beam_scores, max_length, decoder_prompt_len, length_penalty, **kwargs
    ):
        if ranking := self._paper_ranking("_check_early_stop_heuristic"):
            # Log-probabilities only fall as a hypothesis grows while lp(Y) only grows, so the best any live beam can
            # still reach is its score now divided by lp at the maximum length (tensor2tensor's exact bound).
            running_beam_scores = running_beam_scores / gnmt_length_penalty(
                max_length - decoder_prompt_len, ranking.alpha
            )
            length_penalty = 0.0
        return GenerationMixin._check_early_stop_heuristic(
            running_beam_scores=running_beam_scores,
            max_length=max_length,
            decoder_prompt_len=decoder_prompt_len,
            length_penalty=length_penalty,
            **kwargs,
        )

    def _expand_inputs_for_generation(self, expand_size=1, is_encoder_decoder=False, input_ids=None, **model_kwargs):
        """generate() repeats every input once per beam (or returned sequence) of a sentence; the encoder output and
        its padding mask stay one per sentence, since the hypotheses of a sentence share them (MultiHeadAttention).

        Its encoder-decoder attention keys and values are then computed and read once per sentence, not once per beam.
        A returned `encoder_hidden_states` or `encoder_attentions` has one row per sentence accordingly.
        """
        shared = {key: model_kwargs.pop(key) for key in ("encoder_outputs", "attention_mask") if key in model_kwargs}
        input_ids, model_kwargs = super()._expand_inputs_for_generation(expand_size, False, input_ids, **model_kwargs)
        return input_ids, {**model_kwargs, **shared}

    def _reorder_cache(self, past_key_values: Cache, beam_idx: torch.LongTensor) -> Cache:
        """Beam search's reordering of the cache after each step, in which only the decoder's self-attention moves.

        A beam only ever continues a beam of its own sentence, and the encoder-decoder attention keys and values
        (Section 3.2.3) are the sentence's own: one row per sentence (see `_expand_inputs_for_generation`), or rows
        equal for its beams where the encoder output was repeated per beam. transformers' default indexes them by beam.
        """
        if isinstance(past_key_values, EncoderDecoderCache):
            past_key_values.self_attention_cache.reorder_cache(beam_idx)
        else:
            past_key_values.reorder_cache(beam_idx)
        return past_key_values
