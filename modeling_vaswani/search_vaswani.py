"""Section 6.1 of "Attention Is All You Need" (arXiv:1706.03762): the paper's beam search.

"We used beam search with a beam size of 4 and length penalty alpha = 0.6 (GNMT, Wu et al. 2016) ... set the maximum
output length during inference to input length + 50, but terminate early when possible."

Here: GNMT's length penalty (`gnmt_length_penalty`), the output-length rule (`max_output_length`, `sentence_limits`,
`MaxLengthPerSentence`), the search (`beam_search`) and its selection of each step (`TopK`, Section 6.1's beam), as
fairseq keeps fairseq/search.py's strategies apart from the generator that calls them; the selection where phrases
must be held is constraints_vaswani.py's, and the loop's machinery (the model's forward, recording, lock-step,
sentences leaving the batch) decoding_vaswani.py's. Payload: imports only torch, transformers and its
siblings.
"""

from typing import NamedTuple

import torch
from torch import nn
from transformers.generation import GenerateBeamEncoderDecoderOutput, StoppingCriteria
from transformers.utils import logging

from .compat_vaswani import CACHE
from .decoding_vaswani import (
    FollowsTheBatch,
    Shortlist,
    eos_token_ids,
    fill_token_id,
    leave_batch,
    peers_unfinished,
    scores_only_fall,
    shortlisted,
)

logger = logging.get_logger(__name__)

# What transformers' beam search gives a hypothesis that may not be chosen; kept so that scores and tokens are the same
# as those of the beam search this loop replaced.
EXCLUDED = -1.0e9
# What a finished hypothesis missing some of its guidance (a phrase of its constraints) loses in rank (not in score):
# any that holds it all ranks above it, and it above none.
UNSATISFIED = -1.0e6


def gnmt_length_penalty(length: int | torch.Tensor, alpha: float) -> float | torch.Tensor:
    """Section 6.1, from GNMT (Wu et al. 2016): lp(Y) = ((5 + |Y|) / 6)^alpha.

    A finished hypothesis scores log P(Y|X) / lp(Y).
    """
    return ((5 + length) / 6) ** alpha


class MaxLengthPerSentence(FollowsTheBatch, StoppingCriteria):
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


OUTPUT_MARGIN = 50  # Section 6.1: "maximum output length to input length + 50"


def max_output_length(source_length, max_new_tokens=None, max_length=None):
    """Section 6.1's output-length rule, its one home: the tokens a sentence of `source_length` source tokens may
    generate, input length + 50, lowered to a `max_new_tokens` cap or a `max_length` one (which counts the decoder
    start token). `source_length`: an int, or a tensor of them (one a sentence)."""
    room = source_length + OUTPUT_MARGIN
    for cap in (max_new_tokens, None if max_length is None else max_length - 1):
        if cap is not None:
            room = room.clamp(max=cap) if isinstance(room, torch.Tensor) else min(room, cap)
    return room


def sentence_limits(config, attention_mask: torch.Tensor, max_new_tokens=None, max_length=None) -> torch.Tensor:
    """`max_output_length` for each sentence, as a decoder length (the start token included), lowered to the end of
    a table of learned positions."""
    limits = 1 + max_output_length(attention_mask.sum(dim=-1), max_new_tokens, max_length)
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


def gather_beams(tensor: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """tensor[s, indices[s, j], ...] for every sentence s and chosen hypothesis j: rows of the tensor flattened to
    (sentences x hypotheses, ...), copied whole (torch.take_along_dim, its indices broadcast over the trailing
    dimensions, took 7x as long on 100 sentences' 4 hypotheses of 80 tokens: 582 against 85 us)."""
    sentences, hypotheses = tensor.shape[:2]
    rows = indices + torch.arange(sentences, device=indices.device)[:, None] * hypotheses
    return tensor.flatten(0, 1).index_select(0, rows.flatten()).view(*indices.shape, *tensor.shape[2:])


class Candidates(NamedTuple):
    """A step's candidates, each (sentences, width): their log P, the live hypothesis (`beam`) each continues and its
    `token`; and `standing`, what the selection that proposed them knows of each (None for `TopK`)."""

    scores: torch.Tensor
    beam: torch.Tensor
    token: torch.Tensor
    standing: list | None = None


class Choice(NamedTuple):
    """What a selection decides at a step, over the step's candidates (sentences, width): `keep`, the k of each
    sentence that live on (indices, sentences x k); `may_finish`, those that join the finished hypotheses if they end;
    `complete`, those that hold all their guidance (finished ones that do rank above those that do not); `state`, what
    the selection carries to the next step."""

    keep: torch.Tensor
    may_finish: torch.Tensor
    complete: torch.Tensor
    state: object


class TopK:
    """Section 6.1's beam, the selection `beam_search` makes without guidance (fairseq's `BeamSearch`): each
    sentence's `candidates` likeliest continuations over all its k live hypotheses, ranked by log P (sampled in
    proportion to P under `do_sample`); the k likeliest that do not end live on, and those of the first k that end
    finish. It carries nothing from one step to the next.

    A selection's methods, which `beam_search` calls at every step without knowing which selection runs: `restrict`
    (log-probabilities ruled out before any choice), `propose` (the candidates), `choose` (what lives on and what may
    finish), and `select` (what it carries, kept for the sentences still searching); `start` gives what it carries
    into the first step."""

    def __init__(self, k: int, candidates: int, do_sample: bool):
        self.k, self.candidates, self.do_sample = k, candidates, do_sample

    @classmethod
    def of(cls, config) -> "TopK":
        """k = `num_beams`, and 2k candidates (k more per extra end-of-sentence id): enough for k live ones if k of
        them end."""
        k = config.num_beams
        return cls(k, max(2, 1 + len(eos_token_ids(config))) * k, config.do_sample)

    def start(self) -> None:
        return None

    def select(self, state: None, sentences: torch.Tensor) -> None:
        return state

    def restrict(self, log_probs: torch.Tensor, state: None) -> torch.Tensor:
        return log_probs

    def propose(self, log_probs: torch.Tensor, running_scores: torch.Tensor, state: None) -> Candidates:
        """`log_probs`: the next token's log-probabilities, k rows a sentence; `running_scores`: (sentences, k) log P
        of the live hypotheses."""
        searching, k = running_scores.shape
        totals = (log_probs.view(searching, k, -1) + running_scores[:, :, None]).view(searching, -1)
        if self.do_sample:
            flat = torch.multinomial(nn.functional.softmax(totals, dim=-1), num_samples=self.candidates)
            scores = torch.gather(totals, 1, flat)
        else:
            scores, flat = torch.topk(totals, k=self.candidates)
        vocab_size = totals.shape[-1] // k
        return Candidates(scores, flat // vocab_size, flat % vocab_size)

    def propose_shortlist(self, shortlist: Shortlist, running_scores: torch.Tensor) -> Candidates:
        """`propose` from each row's likeliest tokens alone (decoding_vaswani.Shortlist): the same candidates, since
        a sentence's `candidates` likeliest continuations are each among their own row's `candidates` likeliest."""
        searching, k = running_scores.shape
        width = shortlist.tokens.shape[-1]
        if width < self.candidates or self.do_sample or shortlist.log_probs is None:
            raise ValueError(
                f"a shortlist of {width} tokens a row (do_sample {self.do_sample}, log-probabilities "
                f"{'none' if shortlist.log_probs is None else 'given'}); expected at least the {self.candidates} "
                "candidates a sentence the beam proposes, their log-probabilities, and no sampling"
            )
        totals = (shortlist.log_probs.view(searching, k, width) + running_scores[:, :, None]).view(searching, -1)
        scores, flat = torch.topk(totals, k=self.candidates)
        return Candidates(scores, flat // width, shortlist.tokens.view(searching, -1).gather(1, flat))

    def choose(self, candidates: Candidates, live_scores: torch.Tensor, state: None) -> Choice:
        """`live_scores`: the candidates' log P, EXCLUDED where they end."""
        may_finish = self.first_k(live_scores)
        return Choice(torch.topk(live_scores, k=self.k)[1], may_finish, torch.ones_like(may_finish), None)

    def first_k(self, scores: torch.Tensor) -> torch.Tensor:
        """Whether each candidate is among the first k its sentence proposed (the k likeliest, unless sampled)."""
        return (torch.arange(scores.shape[1], device=scores.device) < self.k)[None, :].expand(scores.shape)


def beam_search(
    input_ids, logits_processor, stopping_criteria, config, steps, recorder, synced_gpus, shrinks, selection
):
    """Section 6.1's beam search: k = `num_beams` live hypotheses per sentence; a finished one (ended by an
    end-of-sentence token or a stopping criterion, such as the length limit) scores log P(Y|X) / lp(Y), GNMT's
    penalty with alpha = `length_penalty`, |Y| counting its end token.

    At each step `selection` (`TopK`, Section 6.1's beam; constraints_vaswani.DynamicBeamAllocation where phrases must
    be held) proposes each sentence's candidates and chooses the k that live on among those that do not end; those
    it lets finish join the sentence's k best finished hypotheses, those holding all their guidance first. A
    sentence's search ends when no live hypothesis can beat its k-th best finished one: log-probabilities only fall as
    a hypothesis grows and lp(Y) only grows (alpha >= 0), so the best a live one can reach is its log P now over lp
    at the longest length its sentence allows (tensor2tensor's bound, with each sentence's own limit). Ties go as
    torch.topk orders them. These are transformers' beam search's rules (`early_stopping` too), with GNMT's ranking
    in place of |Y|^alpha; the loop replaced one that hooked into that beam search, and gives its tokens and scores.

    Where `shrinks`, a sentence whose search has ended leaves the batch (as in CTranslate2), and the steps after
    compute only the sentences still searching; so does one whose n = `num_return_sequences` best finished hypotheses
    are final, once no live one can beat the n-th of them: the rest of its search could only reorder the finished
    ones below the n it returns, so its tokens and scores are those of the whole search, with fewer steps where n < k
    (300 test2016 sentences, beam 4, n 1: 24,264 decoder rows against 27,780). Only where the bound holds for certain
    (`scores_only_fall`): a logits processor that adds to a score (ExponentialDecayLengthPenalty) makes it a rule of
    thumb, which the whole search keeps as transformers' does.
    """
    k, n = config.num_beams, config.num_return_sequences
    sentences, cur_len = input_ids.shape[0] // k, input_ids.shape[1]
    prompt_len, max_length, alpha = cur_len, config.max_length, config.length_penalty
    device = input_ids.device
    stops_when_full = config.early_stopping is True  # k finished hypotheses end a sentence, better or not
    falls = scores_only_fall(logits_processor)  # the bound below holds for certain

    running = torch.full((sentences, k, max_length), fill_token_id(config), dtype=torch.int64, device=device)
    running[:, :, :cur_len] = input_ids.view(sentences, k, cur_len)
    finished = running.clone()
    # The k copies of the start differ only in score: the first one alone continues at the first step.
    running_scores = torch.zeros((sentences, k), dtype=torch.float, device=device)
    running_scores[:, 1:] = EXCLUDED
    finished_scores = torch.full((sentences, k), EXCLUDED, dtype=torch.float, device=device)
    is_finished = torch.zeros((sentences, k), dtype=torch.bool, device=device)
    finished_complete = torch.ones((sentences, k), dtype=torch.bool, device=device)  # holds all its guidance
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
    state = selection.start()

    done = False
    while peers_unfinished(done, synced_gpus, device):
        hypotheses = running[:, :, :cur_len].reshape(-1, cur_len)
        outputs = steps(hypotheses)
        if synced_gpus and done:
            continue  # forward only, in step with the other processes
        if shortlisted(outputs, logits_processor, recorder, config):
            candidates = selection.propose_shortlist(outputs, running_scores)
        else:
            logits = outputs.logits[:, -1, :].to(copy=True, dtype=torch.float32, device=device)
            log_probs = logits_processor(hypotheses, nn.functional.log_softmax(logits, dim=-1))
            log_probs = selection.restrict(log_probs, state)
            recorder.add(outputs, logits, log_probs)
            candidates = selection.propose(log_probs, running_scores, state)
        del outputs

        searching = running.shape[0]
        extended = gather_beams(running, candidates.beam)
        extended[:, :, cur_len] = candidates.token
        extended_origins = gather_beams(running_origins, candidates.beam)
        extended_origins[:, :, cur_len - prompt_len] = candidates.beam + active[:, None] * k
        width = candidates.scores.shape[1]
        ends = stopping_criteria(extended[:, :, : cur_len + 1].reshape(searching * width, -1), recorder.scores)
        ends = ends.view(searching, width)

        live_scores = candidates.scores + ends.to(torch.float32) * EXCLUDED
        choice = selection.choose(candidates, live_scores, state)
        state = choice.state
        running = gather_beams(extended, choice.keep)
        running_scores = gather_beams(live_scores, choice.keep)
        running_origins = gather_beams(extended_origins, choice.keep)

        # Those the selection lets finish compete, by GNMT's score, with the sentence's k best finished ones.
        finish_now = ends & choice.may_finish
        finish_scores = candidates.scores / gnmt_length_penalty(cur_len + 1 - prompt_len, alpha)
        finish_scores += (torch.all(is_finished, dim=-1, keepdim=True) & stops_when_full).to(torch.float32) * EXCLUDED
        finish_scores += (~can_improve).to(torch.float32) * EXCLUDED
        finish_scores += (~finish_now) * EXCLUDED
        ranks = torch.cat((finished_scores, finish_scores), dim=1)
        ranks = ranks + (~torch.cat((finished_complete, choice.complete), dim=1)) * UNSATISFIED
        best = torch.topk(ranks, k=k)[1]
        finished = gather_beams(torch.cat((finished, extended), dim=1), best)
        finished_scores = gather_beams(torch.cat((finished_scores, finish_scores), dim=1), best)
        finished_origins = gather_beams(torch.cat((finished_origins, extended_origins), dim=1), best)
        is_finished = gather_beams(torch.cat((is_finished, finish_now), dim=1), best)
        finished_complete = gather_beams(torch.cat((finished_complete, choice.complete), dim=1), best)

        # The cache follows the chosen beams: rows numbered in the batch as it is now.
        rows = torch.arange(searching, device=device)[:, None] * k + gather_beams(candidates.beam, choice.keep)
        steps.reorder(rows.flatten())
        cur_len += 1

        best_reachable = running_scores[:, :1] / best_reachable_penalty
        counted = is_finished & finished_complete  # one missing its guidance beats no live one
        worst_finished = torch.where(counted, torch.min(finished_scores, dim=1, keepdim=True)[0], EXCLUDED)
        can_improve = can_improve & torch.any(best_reachable > worst_finished, dim=-1, keepdim=True)
        full = torch.all(counted, dim=1) & stops_when_full
        if not shrinks:
            done = not (bool(torch.any(can_improve)) and not bool(torch.all(full)) and not bool(torch.all(ends)))
            continue
        # A sentence's search is over when none of its live hypotheses can win, k have finished under
        # early_stopping=True, or all its continuations ended (its length limit): its finished ones are final.
        # Or when the n it returns are final: none of its live hypotheses can beat the n-th best finished one.
        returned_final = torch.all(counted[:, :n], dim=1) & (best_reachable[:, 0] <= finished_scores[:, n - 1])
        returned_final &= falls
        over = ~can_improve[:, 0] | full | torch.all(ends, dim=1) | returned_final
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
        state = selection.select(state, kept)
        active = active[kept]
        running, running_scores, running_origins = running[kept], running_scores[kept], running_origins[kept]
        finished, finished_scores, finished_origins = finished[kept], finished_scores[kept], finished_origins[kept]
        is_finished, can_improve, finished_complete = is_finished[kept], can_improve[kept], finished_complete[kept]
        if best_reachable_penalty.shape[0] > 1:
            best_reachable_penalty = best_reachable_penalty[kept]

    if results is not None:  # every sentence has left the batch
        finished, finished_scores, finished_origins = results
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
