"""Beyond Section 6.1: phrases each translation must hold (lexical constraints), met by dynamic beam allocation, Post
and Vilar 2018 ("Fast Lexically Constrained Decoding with Dynamic Beam Allocation for Neural Machine Translation",
NAACL), for phrases met in any order, each hypothesis's progress tracked through the phrases it may be writing as
Hu et al. 2019 track it (their trie, here as the set of begun phrases). Written by hand: no library on the registry
offers it for a search it does not own.

`DynamicBeamAllocation` is a selection of search_vaswani.beam_search, as `TopK` (Section 6.1's beam) is: the search
asks it, at each step, which log-probabilities to rule out, which candidates to weigh and which of them live on, and
keeps what it returns (`Standing`) for the next step. Payload: imports only torch, transformers and its siblings.
"""

import math
from typing import NamedTuple

import torch

from .decoding_vaswani import eos_token_ids
from .guidance_vaswani import check_phrase_lists
from .search_vaswani import EXCLUDED, Candidates, Choice, TopK


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
    fill go to the next likeliest of the other banks, highest bank first, in turns. Returns the indices kept,
    likeliest first."""
    by_bank: dict[int, list[int]] = {}
    for index in sorted(range(len(scores)), key=lambda i: -scores[i]):
        by_bank.setdefault(banks[index], []).append(index)
    places = [k // (top_bank + 1) + (bank > top_bank - k % (top_bank + 1)) for bank in range(top_bank + 1)]
    kept = []
    for bank in range(top_bank, -1, -1):
        taken = by_bank.get(bank, [])[: places[bank]]
        kept += taken
        by_bank[bank] = by_bank.get(bank, [])[len(taken) :]
    while len(kept) < k and any(by_bank.values()):
        for bank in range(top_bank, -1, -1):
            if len(kept) < k and by_bank.get(bank):
                kept.append(by_bank[bank].pop(0))
    return sorted(kept, key=lambda i: -scores[i])


def overflows(phrases: list[list[int]], prefix_length: int, room: int) -> bool:
    """The constraints' room rule, its one home: a sentence's phrases, with its target prefix, are more tokens than
    the `room` its translation may have."""
    return bool(phrases) and sum(map(len, phrases)) + prefix_length > room


def check_constraints(constraints, config, room: list[int], prefixes=None) -> list[list[list[int]]]:
    """`check_phrase_lists`, and refuses a phrase holding a special id (the end of sentence, which a hypothesis may
    write only once its phrases are all met; the padding; the decoder's start), and phrases whose tokens, with the
    sentence's target prefix, are more than its `room` of new tokens holds."""
    required = check_phrase_lists(constraints, "constraints", config.vocab_size, len(room))
    special = {*eos_token_ids(config), config.pad_token_id, config.decoder_start_token_id} - {None}
    for number, phrases in enumerate(required):
        for place, phrase in enumerate(phrases):
            if special & set(phrase):
                raise ValueError(
                    f"constraints[{number}][{place}] is {phrase}, which holds the special id(s) "
                    f"{sorted(special & set(phrase))} (end of sentence, padding or decoder start): expected phrases "
                    "of words"
                )
    for number, (phrases, limit) in enumerate(zip(required, room, strict=True)):
        prefix = len(prefixes[number]) if prefixes is not None else 0
        if overflows(phrases, prefix, limit):
            raise ValueError(
                f"constraints[{number}] hold {sum(map(len, phrases))} tokens (phrases {phrases})"
                + (f" and its target prefix {prefix}" if prefix else "")
                + f"; sentence {number} may generate {limit}: expected fewer constraint tokens than its length limit "
                "leaves room for"
            )
    return required


class Standing(NamedTuple):
    """What dynamic beam allocation carries from one step to the next: each sentence's phrases, and where each of its
    k live hypotheses stands against them."""

    phrases: list[list[list[int]]]
    progress: list[list[Progress]]


class DynamicBeamAllocation:
    """The selection of a search whose translations must hold phrases (each at least once, in any order): a hypothesis
    that has not met all its sentence's phrases may not end (`restrict`); the candidates are the top k's, widened by
    each live hypothesis's likeliest token and every token that takes it further (`propose`, Post and Vilar's three
    sources); the k that live on are allocated by bank, and every candidate that ends holding all its sentence's
    phrases may finish (`choose`). A sentence without phrases searches as `TopK` does."""

    def __init__(self, phrases: list[list[list[int]]], top: TopK, ends: list[int]):
        self.phrases, self.top, self.ends = phrases, top, ends

    def start(self) -> Standing:
        return Standing(self.phrases, [[Progress()] * self.top.k for _ in self.phrases])

    def select(self, standing: Standing, sentences: torch.Tensor) -> Standing:
        kept = sentences.tolist()
        return Standing([standing.phrases[s] for s in kept], [standing.progress[s] for s in kept])

    def restrict(self, log_probs: torch.Tensor, standing: Standing) -> torch.Tensor:
        """`log_probs` (a row per hypothesis) with the end of sentence at -inf where a hypothesis's phrases are not all
        met: it may end only by its length limit."""
        k = self.top.k
        unready = [
            s * k + j
            for s, (phrases, states) in enumerate(zip(*standing, strict=True))
            for j, progress in enumerate(states)
            if not is_satisfied(phrases, progress)
        ]
        if unready:
            rows = torch.tensor(unready, device=log_probs.device)
            ends = torch.tensor(self.ends, device=log_probs.device)
            log_probs[rows[:, None], ends[None, :]] = -math.inf
        return log_probs

    def propose(self, log_probs: torch.Tensor, running_scores: torch.Tensor, standing: Standing) -> Candidates:
        """The top k's candidates, widened (`widen`), each with its standing after its token (`advance`)."""
        top = self.top.propose(log_probs, running_scores, None)
        advancing = [[advancing_tokens(phrases, p) for p in states] for phrases, states in zip(*standing, strict=True)]
        scores, beam, token = widen(standing.phrases, advancing, log_probs, running_scores, top)
        return Candidates(scores, beam, token, candidates_progress(standing, advancing, beam, token))

    def choose(self, candidates: Candidates, live_scores: torch.Tensor, standing: Standing) -> Choice:
        """The k of each sentence that live on (`allocate` among those that may: not ended, not a start's copy); of
        those that end, the top k's and every one holding all its sentence's phrases finish."""
        keep, progress = [], []
        for phrases, scores, states in zip(standing.phrases, live_scores.tolist(), candidates.standing, strict=True):
            top_bank = sum(map(len, phrases))
            valid = [i for i, score in enumerate(scores) if score > EXCLUDED / 2]
            bank_of = {}  # candidates share few standings
            for i in valid:
                if states[i] not in bank_of:
                    bank_of[states[i]] = min(met_tokens(phrases, states[i]), top_bank)
            banks = [bank_of[states[i]] for i in valid]
            kept = [valid[i] for i in allocate([scores[i] for i in valid], banks, self.top.k, top_bank)]
            kept += sorted(set(range(len(scores))) - set(kept), key=lambda i: -scores[i])[: self.top.k - len(kept)]
            keep.append(kept)
            progress.append([states[i] for i in kept])
        device = live_scores.device
        rows = zip(standing.phrases, candidates.standing, strict=True)
        complete = torch.tensor([[is_satisfied(phrases, p) for p in row] for phrases, row in rows], device=device)
        has_phrases = torch.tensor([bool(phrases) for phrases in standing.phrases], device=device)
        may_finish = self.top.first_k(live_scores) | (complete & has_phrases[:, None])
        return Choice(torch.tensor(keep, device=device), may_finish, complete, Standing(standing.phrases, progress))


def widen(phrases, advancing, log_probs, running_scores, top: Candidates):
    """The top k's candidates (log P, beam and token, a row per sentence), followed by each live hypothesis's likeliest
    token and every token of its `advancing` set, those already there left out; rows padded with EXCLUDED."""
    searching, k = running_scores.shape
    best = log_probs.max(dim=-1).indices.view(searching, k).tolist()
    live = (running_scores > EXCLUDED / 2).tolist()
    beams, tokens = top.beam.tolist(), top.token.tolist()
    extra_beams, extra_tokens, places = [], [], []
    for s in range(searching):
        row = []
        if phrases[s]:  # a sentence without phrases searches as without constraints
            seen = set(zip(beams[s], tokens[s], strict=True))
            for j in range(k):
                if not live[s][j]:  # a copy of the start, not yet a hypothesis
                    continue
                for t in sorted({best[s][j], *advancing[s][j]}):
                    if (j, t) not in seen:
                        seen.add((j, t))
                        row.append((j, t))
        extra_beams.append([j for j, _ in row])
        extra_tokens.append([t for _, t in row])
        places += [(s * k + j, t) for j, t in row]
    width = max(map(len, extra_beams))
    if not width:
        return top.scores, top.beam, top.token
    rows, columns = zip(*places, strict=True)
    flat = (log_probs[rows, columns] + running_scores.flatten()[list(rows)]).tolist()
    extra_scores = []
    for row in extra_beams:
        extra_scores.append(flat[: len(row)])
        flat = flat[len(row) :]
    pad = lambda rows, value: [row + [value] * (width - len(row)) for row in rows]  # noqa: E731
    device = top.scores.device
    return (
        torch.cat([top.scores, torch.tensor(pad(extra_scores, EXCLUDED), device=device)], dim=1),
        torch.cat([top.beam, torch.tensor(pad(extra_beams, 0), device=device)], dim=1),
        torch.cat([top.token, torch.tensor(pad(extra_tokens, 0), device=device)], dim=1),
    )


def candidates_progress(standing: Standing, advancing, beam: torch.Tensor, token: torch.Tensor) -> list:
    """Each candidate's standing: its hypothesis's, after its token. A token that takes the hypothesis no further (not
    in its `advancing` set) leaves it its met phrases and no begun one: `advance` is asked only for the rest."""
    rows = []
    for s, (beams, tokens) in enumerate(zip(beam.tolist(), token.tolist(), strict=True)):
        phrases, states = standing.phrases[s], standing.progress[s]
        if not phrases:
            rows.append([Progress()] * len(beams))
            continue
        stopped = [Progress(p.met) for p in states]
        rows.append(
            [
                advance(phrases, states[j], t) if t in advancing[s][j] else stopped[j]
                for j, t in zip(beams, tokens, strict=True)
            ]
        )
    return rows
