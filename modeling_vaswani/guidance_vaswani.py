"""Beyond Section 6.1: what guides the paper's search without changing its rules. Target prefixes (`TargetPrefix`,
CTranslate2's `target_prefix`, fairseq's prefix decoding) and ensembles (`EnsembleSteps`, several models decoding as
one); lexical constraints will live here too. Payload: imports only torch, transformers and its siblings.
"""

import math
import numbers

import torch
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.generation import LogitsProcessor, LogitsProcessorList

from .compat_vaswani import CACHE
from .decoding_vaswani import DecoderSteps, FollowsTheBatch


class TargetPrefix(FollowsTheBatch, LogitsProcessor):
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


# === Lexical constraints =============================================================================================
# Dynamic beam allocation, Post and Vilar 2018 ("Fast Lexically Constrained Decoding with Dynamic Beam Allocation for
# Neural Machine Translation", NAACL), for phrases met in any order as Hu et al. 2019 track them (a hypothesis's
# progress through the phrases it may be writing). Written by hand: no library on the registry offers it for a
# search it does not own.


class Progress(tuple):
    """Where one hypothesis stands against its sentence's phrases: `met`, a bitmask of the phrases it has written
    whole, and `partial`, the (phrase, tokens matched) pairs its last tokens have begun (all of one length)."""

    __slots__ = ()

    def __new__(cls, met: int = 0, partial: tuple = ()):
        return super().__new__(cls, (met, partial))

    @property
    def met(self) -> int:
        return self[0]

    @property
    def partial(self) -> tuple:
        return self[1]


def advance(phrases: list[list[int]], progress: Progress, token: int) -> Progress:
    """`progress` after `token`: a begun phrase whose next token it is goes on (and is met when it ends); if none does,
    the begun phrases are abandoned and `token` may begin unmet ones afresh (Hu et al.'s reset to the trie's root)."""
    met = progress.met
    going = tuple((i, matched + 1) for i, matched in progress.partial if phrases[i][matched] == token)
    if not going:
        going = tuple((i, 1) for i, phrase in enumerate(phrases) if not met >> i & 1 and phrase[0] == token)
    done = [i for i, matched in going if matched == len(phrases[i])]
    if done:
        return Progress(met | 1 << done[0], ())
    return Progress(met, going)


def met_tokens(phrases: list[list[int]], progress: Progress) -> int:
    """The constraint tokens a hypothesis has written: its bank in dynamic beam allocation."""
    whole = sum(len(phrase) for i, phrase in enumerate(phrases) if progress.met >> i & 1)
    return whole + max((matched for _, matched in progress.partial), default=0)


def is_satisfied(phrases: list[list[int]], progress: Progress) -> bool:
    return progress.met == (1 << len(phrases)) - 1


def advancing_tokens(phrases: list[list[int]], progress: Progress) -> set[int]:
    """The tokens that take a hypothesis further through its phrases: the next of each begun one, and the first of
    each unmet one."""
    tokens = {phrases[i][matched] for i, matched in progress.partial}
    tokens.update(phrase[0] for i, phrase in enumerate(phrases) if not progress.met >> i & 1)
    return tokens


def allocate(scores: list[float], banks: list[int], k: int, top_bank: int) -> list[int]:
    """Post and Vilar's dynamic beam allocation: the k candidates that live on, chosen among `scores` (log P) by
    bank (`banks`: constraint tokens met, 0 to `top_bank`). Each bank gets k // (top_bank + 1) places, the highest
    banks one more while k's remainder lasts; a bank's places go to its likeliest candidates, and places a bank cannot
    fill go to the next likeliest of the other banks, highest bank first, in turns. Returns the indices chosen,
    likeliest first."""
    by_bank: dict[int, list[int]] = {}
    for index in sorted(range(len(scores)), key=lambda i: -scores[i]):
        by_bank.setdefault(banks[index], []).append(index)
    places = [k // (top_bank + 1) + (bank > top_bank - k % (top_bank + 1)) for bank in range(top_bank + 1)]
    chosen = []
    for bank in range(top_bank, -1, -1):
        taken = by_bank.get(bank, [])[: places[bank]]
        chosen += taken
        by_bank[bank] = by_bank.get(bank, [])[len(taken) :]
    while len(chosen) < k and any(by_bank.values()):
        for bank in range(top_bank, -1, -1):
            if len(chosen) < k and by_bank.get(bank):
                chosen.append(by_bank[bank].pop(0))
    return sorted(chosen, key=lambda i: -scores[i])
