"""Beyond Section 6.1: what guides the paper's search. Target prefixes (`TargetPrefix`, CTranslate2's
`target_prefix`, fairseq's prefix decoding), ensembles (`EnsembleSteps`, several models decoding as one), phrases a
translation must hold (`LexicalConstraints`: dynamic beam allocation, Post and Vilar 2018) and phrases it must not
(`AvoidPhrases`). Payload: imports only torch, transformers and its siblings.
"""

import math
import numbers
from typing import NamedTuple

import torch
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.generation import LogitsProcessor, LogitsProcessorList

from .compat_vaswani import CACHE
from .decoding_vaswani import DecoderSteps, FollowsTheBatch, eos_token_ids


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


def overflows(phrases: list[list[int]], prefix_length: int, room: int) -> bool:
    """The constraints' room rule, its one home: a sentence's phrases, with its target prefix, are more tokens than
    the `room` its translation may have."""
    return bool(phrases) and sum(map(len, phrases)) + prefix_length > room


def check_constraints(constraints, config, room: list[int], prefixes=None) -> list[list[list[int]]]:
    """`check_phrase_lists`, and refuses a phrase holding a special id (the end of sentence, which a hypothesis may
    write only once its phrases are all met; the padding; the decoder's start), and phrases whose tokens, with the
    sentence's target prefix, are more than its `room` of new tokens holds."""
    checked = check_phrase_lists(constraints, "constraints", config.vocab_size, len(room))
    ends = eos_token_ids(config)
    special = {*ends, config.pad_token_id, config.decoder_start_token_id} - {None}
    for number, phrases in enumerate(checked):
        for place, phrase in enumerate(phrases):
            if special & set(phrase):
                raise ValueError(
                    f"constraints[{number}][{place}] is {phrase}, which holds the special id(s) "
                    f"{sorted(special & set(phrase))} (end of sentence, padding or decoder start): expected phrases "
                    "of words"
                )
    for number, (phrases, limit) in enumerate(zip(checked, room, strict=True)):
        prefix = len(prefixes[number]) if prefixes is not None else 0
        if overflows(phrases, prefix, limit):
            raise ValueError(
                f"constraints[{number}] hold {sum(map(len, phrases))} tokens (phrases {phrases})"
                + (f" and its target prefix {prefix}" if prefix else "")
                + f"; sentence {number} may generate {limit}: expected fewer constraint tokens than its length limit "
                "leaves room for"
            )
    return checked


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


# === Lexical constraints =============================================================================================
# Dynamic beam allocation, Post and Vilar 2018 ("Fast Lexically Constrained Decoding with Dynamic Beam Allocation for
# Neural Machine Translation", NAACL), for phrases met in any order, each hypothesis's progress tracked through the
# phrases it may be writing as Hu et al. 2019 track it (their trie, here as the set of begun phrases). Written by hand:
# no library on the registry offers it for a search it does not own.


class Progress(NamedTuple):
    """Where one hypothesis stands against its sentence's phrases: `met`, a bitmask of the phrases it has written
    whole, and `partial`, the (phrase, tokens matched) pairs its last tokens have begun."""

    met: int = 0
    partial: tuple = ()


def advance(phrases: list[list[int]], progress: Progress, token: int) -> Progress:
    """`progress` after `token`: every begun phrase whose next token it is goes on, and `token` begins every unmet
    phrase it starts; a phrase is met once it has gone on to its end. So `partial` holds every ending of the hypothesis
    that begins an unmet phrase, and a phrase is met exactly when the hypothesis holds it somewhere, whole."""
    going = {(i, matched + 1) for i, matched in progress.partial if phrases[i][matched] == token}
    going |= {(i, 1) for i, phrase in enumerate(phrases) if not progress.met >> i & 1 and phrase[0] == token}
    met = progress.met
    for i, matched in going:
        if matched == len(phrases[i]):
            met |= 1 << i
    return Progress(met, tuple(sorted((i, m) for i, m in going if not met >> i & 1)))


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


class LexicalConstraints(FollowsTheBatch):
    """Phrases each sentence's translation must hold (each at least once, in any order), and where each live
    hypothesis of the search stands against them. The beam search (search_vaswani.beam_search) asks it, at each step,
    to rule out ending for hypotheses that have not met all their phrases (`forbid_unready_ends`), to widen the
    candidates with each hypothesis's best token and the tokens that take it further (`widen`), and to choose the
    k that live on by dynamic beam allocation (`choose`)."""

    def __init__(self, phrases: list[list[list[int]]], k: int, ends: list[int]):
        self.phrases = phrases
        self.progress = [[Progress()] * k for _ in phrases]
        self.eos_token_ids = ends
        self.advancing: list[list[set[int]]] = []  # each live hypothesis's, set by widen for candidates_progress

    def select(self, sentences: torch.Tensor) -> None:
        kept = sentences.tolist()
        self.phrases = [self.phrases[s] for s in kept]
        self.progress = [self.progress[s] for s in kept]

    def forbid_unready_ends(self, log_probs: torch.Tensor) -> torch.Tensor:
        """`log_probs` (a row per hypothesis) with the end of sentence at -inf where a hypothesis's phrases are not all
        met: it may end only by its length limit."""
        k = len(self.progress[0]) if self.progress else 1
        unready = [
            s * k + j
            for s, (phrases, states) in enumerate(zip(self.phrases, self.progress, strict=True))
            for j, progress in enumerate(states)
            if not is_satisfied(phrases, progress)
        ]
        if unready:
            rows = torch.tensor(unready, device=log_probs.device)
            ends = torch.tensor(self.eos_token_ids, device=log_probs.device)
            log_probs[rows[:, None], ends[None, :]] = -math.inf
        return log_probs

    def widen(self, log_probs, running_scores, chosen_scores, beam, token, excluded: float):
        """The step's candidates (beam_step's, log P, beam and token, a row per sentence), followed by each live
        hypothesis's likeliest token and every token that takes it further through its phrases (Post and Vilar's
        three sources), those already there left out; rows padded with `excluded`."""
        searching, k = running_scores.shape
        best, live = (
            log_probs.max(dim=-1).indices.view(searching, k).tolist(),
            (running_scores > excluded / 2).tolist(),
        )
        beams, tokens = beam.tolist(), token.tolist()
        self.advancing = [
            [advancing_tokens(self.phrases[s], p) for p in states] for s, states in enumerate(self.progress)
        ]
        extra_beams, extra_tokens, places = [], [], []
        for s in range(searching):
            row = []
            if self.phrases[s]:  # a sentence without phrases searches as without constraints
                seen = set(zip(beams[s], tokens[s], strict=True))
                for j in range(k):
                    if not live[s][j]:  # a copy of the start, not yet a hypothesis
                        continue
                    for t in sorted({best[s][j], *self.advancing[s][j]}):
                        if (j, t) not in seen:
                            seen.add((j, t))
                            row.append((j, t))
            extra_beams.append([j for j, _ in row])
            extra_tokens.append([t for _, t in row])
            places += [(s * k + j, t) for j, t in row]
        width = max(map(len, extra_beams))
        if not width:
            return chosen_scores, beam, token
        rows, columns = zip(*places, strict=True)
        flat = (log_probs[rows, columns] + running_scores.flatten()[list(rows)]).tolist()
        extra_scores = []
        for row in extra_beams:
            extra_scores.append(flat[: len(row)])
            flat = flat[len(row) :]
        pad = lambda rows, value: [row + [value] * (width - len(row)) for row in rows]  # noqa: E731
        device = chosen_scores.device
        return (
            torch.cat([chosen_scores, torch.tensor(pad(extra_scores, excluded), device=device)], dim=1),
            torch.cat([beam, torch.tensor(pad(extra_beams, 0), device=device)], dim=1),
            torch.cat([token, torch.tensor(pad(extra_tokens, 0), device=device)], dim=1),
        )

    def candidates_progress(self, beam: torch.Tensor, token: torch.Tensor) -> list[list[Progress]]:
        """Each candidate's standing: its hypothesis's, after its token. A token that takes the hypothesis no further
        (widen's `advancing` sets) leaves it its met phrases and no begun one: `advance` is asked only for the rest."""
        rows = []
        for s, (beams, tokens) in enumerate(zip(beam.tolist(), token.tolist(), strict=True)):
            phrases, states = self.phrases[s], self.progress[s]
            if not phrases:
                rows.append([Progress()] * len(beams))
                continue
            stopped = [Progress(p.met) for p in states]
            rows.append(
                [
                    advance(phrases, states[j], t) if t in self.advancing[s][j] else stopped[j]
                    for j, t in zip(beams, tokens, strict=True)
                ]
            )
        return rows

    def bound(self, device) -> torch.Tensor:
        """Whether each sentence has phrases to hold."""
        return torch.tensor([bool(phrases) for phrases in self.phrases], device=device)

    def satisfied(self, progress: list[list[Progress]], device) -> torch.Tensor:
        """Whether each candidate has met all its sentence's phrases."""
        return torch.tensor(
            [[is_satisfied(self.phrases[s], p) for p in row] for s, row in enumerate(progress)], device=device
        )

    def choose(self, live_scores: torch.Tensor, progress: list[list[Progress]], k: int, excluded: float):
        """The k candidates of each sentence that live on (`allocate` among those that may: not ended, not a start's
        copy), their progress kept for the next step."""
        keep = []
        for s, (scores, states) in enumerate(zip(live_scores.tolist(), progress, strict=True)):
            top_bank = sum(map(len, self.phrases[s]))
            valid = [i for i, score in enumerate(scores) if score > excluded / 2]
            bank_of = {}  # candidates share few standings
            for i in valid:
                if states[i] not in bank_of:
                    bank_of[states[i]] = min(met_tokens(self.phrases[s], states[i]), top_bank)
            banks = [bank_of[states[i]] for i in valid]
            chosen = [valid[i] for i in allocate([scores[i] for i in valid], banks, k, top_bank)]
            chosen += sorted(set(range(len(scores))) - set(chosen), key=lambda i: -scores[i])[: k - len(chosen)]
            keep.append(chosen)
            self.progress[s] = [states[i] for i in chosen]
        return torch.tensor(keep, device=live_scores.device)


class AvoidPhrases(FollowsTheBatch, LogitsProcessor):
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
    checked = check_phrase_lists(avoid, "avoid", model.config.vocab_size, sentences)
    ends = eos_token_ids(model.generation_config)
    for number, phrases in enumerate(checked):
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
    return checked
