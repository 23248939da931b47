"""Beyond Section 6.1: what guides the paper's search. Target prefixes (`TargetPrefix`, CTranslate2's
`target_prefix`, fairseq's prefix decoding), ensembles (`EnsembleSteps`, several models decoding as one) and phrases a
translation must not hold (`AvoidPhrases`); `check_phrase_lists`, the check of phrase lists that the phrases to hold
(constraints_vaswani.py) share. Payload: imports only torch, transformers and its siblings.
"""

import math
import numbers

import torch
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.generation import LogitsProcessor, LogitsProcessorList

from .compat_vaswani import CACHE
from .decoding_vaswani import DecoderSteps, FollowsTheBatch, KeepsLogProbabilities, eos_token_ids


class TargetPrefix(FollowsTheBatch, KeepsLogProbabilities, LogitsProcessor):
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


def is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def leaves_no_room(prefix_length: int, room: int) -> bool:
    """The target prefix's room rule, its one home: a prefix of `prefix_length` tokens in a translation that may have
    `room` tokens leaves nothing to generate (its output would be the prefix, cut)."""
    return prefix_length >= room


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
        if leaves_no_room(len(prefix), limit):
            raise ValueError(
                f"target_prefix[{number}] has {len(prefix)} tokens and sentence {number} may generate {limit}; "
                "expected a shorter prefix, leaving room for the rest of the translation"
            )
    return [list(prefix) for prefix in target_prefix]


def check_phrase_lists(value, name: str, vocab_size: int, sentences: int) -> list[list[list[int]]]:
    """Refuses `value` (`name`: "constraints" or "avoid") unless it is one list of phrases per sentence, each phrase a
    non-empty list of token ids of the vocabulary (an empty list for a sentence without any); each error names the
    sentence and the phrase."""
    if not isinstance(value, (list, tuple)) or len(value) != sentences:
        shown = f"{len(value)} entries" if isinstance(value, (list, tuple)) else repr(value)
        raise ValueError(
            f"{name} has {shown}; expected a list of {sentences} lists of phrases, one per sentence (each phrase a "
            "list of token ids; an empty list for a sentence without any)"
        )
    for number, phrases in enumerate(value):
        if not isinstance(phrases, (list, tuple)):
            raise ValueError(f"{name}[{number}] is {phrases!r}; expected a list of phrases (lists of token ids)")
        for place, phrase in enumerate(phrases):
            if not isinstance(phrase, (list, tuple)) or not phrase:
                raise ValueError(f"{name}[{number}][{place}] is {phrase!r}; expected a non-empty list of token ids")
            if not all(is_int(t) and 0 <= t < vocab_size for t in phrase):
                raise ValueError(
                    f"{name}[{number}][{place}] is {list(phrase)!r}; expected token ids from 0 to {vocab_size - 1}"
                )
    return [[list(phrase) for phrase in phrases] for phrases in value]


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


def with_processor(kwargs: dict, processor: LogitsProcessor) -> None:
    """generate()'s logits processors, `processor` (a `TargetPrefix`, `AvoidPhrases`) added."""
    processors = LogitsProcessorList(kwargs.get("logits_processor") or [])
    processors.append(processor)
    kwargs["logits_processor"] = processors


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


class AvoidPhrases(FollowsTheBatch, KeepsLogProbabilities, LogitsProcessor):
    """Phrases a sentence's translation must not hold (negative constraints): where a hypothesis ends with all but the
    last token of one, that last token is ruled out (-inf); a one-token phrase is ruled out everywhere. transformers'
    NoBadWordsLogitsProcessor does the same for every sentence of a batch alike; these are each sentence's own."""

    def __init__(self, phrases: list[list[list[int]]]):
        self.phrases = phrases

    def select(self, sentences: torch.Tensor) -> None:
        self.phrases = [self.phrases[s] for s in sentences.tolist()]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        rows_per_sentence = input_ids.shape[0] // len(self.phrases)  # beams (or returned sequences)
        banned = []
        for row, tokens in enumerate(input_ids.tolist()):
            for phrase in self.phrases[row // rows_per_sentence]:
                before = len(phrase) - 1
                if before == 0 or (len(tokens) >= before and tokens[-before:] == phrase[:-1]):
                    banned.append((row, phrase[-1]))
        if banned:
            rows, tokens = zip(*banned, strict=True)
            scores = scores.clone()
            scores[list(rows), list(tokens)] = -math.inf
        return scores


def check_avoid(avoid, model, sentences: int, constraints=None) -> list[list[list[int]]]:
    """`check_phrase_lists`, and refuses a phrase holding the end of sentence, or one that a required phrase of the
    sentence (`constraints`) holds."""
    avoided = check_phrase_lists(avoid, "avoid", model.config.vocab_size, sentences)
    ends = eos_token_ids(model.generation_config)
    for number, phrases in enumerate(avoided):
        for place, phrase in enumerate(phrases):
            if any(t in ends for t in phrase):
                raise ValueError(
                    f"avoid[{number}][{place}] is {phrase!r}, which holds the end of sentence {ends}: a "
                    "translation must end; expected phrases of words"
                )
            for required in constraints[number] if constraints is not None else []:
                if any(required[i : i + len(phrase)] == phrase for i in range(len(required))):
                    raise ValueError(
                        f"avoid[{number}][{place}] is {phrase!r}, which the required phrase {required} of the same "
                        "sentence holds: expected phrases to avoid that no required one holds"
                    )
    return avoided
