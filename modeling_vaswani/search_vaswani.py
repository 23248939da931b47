"""Section 6.1 of "Attention Is All You Need" (arXiv:1706.03762): the paper's beam search.

"We used beam search with a beam size of 4 and length penalty alpha = 0.6 (GNMT, Wu et al. 2016) ... set the maximum
output length during inference to input length + 50, but terminate early when possible."

Here: GNMT's length penalty (`gnmt_length_penalty`), the output-length rule (`output_room`, `sentence_limits`,
`MaxLengthPerSentence`) and the search (`beam_search`); the loop's machinery (the model's forward, recording,
lock-step, sentences leaving the batch) is decoding_vaswani.py's. Payload: imports only torch, transformers and its
siblings.
"""

import torch
from torch import nn
from transformers.generation import GenerateBeamEncoderDecoderOutput, StoppingCriteria
from transformers.utils import logging

from .compat_vaswani import CACHE
from .decoding_vaswani import FollowsTheBatch, eos_token_ids, fill_token_id, leave_batch, peers_unfinished

logger = logging.get_logger(__name__)

# What transformers' beam search gives a hypothesis that may not be chosen; kept so that scores and tokens are the same
# as those of the beam search this loop replaced.
EXCLUDED = -1.0e9
# What a finished hypothesis missing a phrase of its constraints loses in rank (not in score): any that holds them all
# ranks above it, and it above none.
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
    """tensor[s, indices[s, j], ...] for every sentence s and chosen hypothesis j."""
    while indices.dim() < tensor.dim():
        indices = indices.unsqueeze(-1)
    return torch.take_along_dim(tensor, indices, dim=1)


def beam_step(log_probs: torch.Tensor, running_scores: torch.Tensor, candidates: int, do_sample: bool):
    """One step of the search (fairseq's `BeamSearch.step`): each sentence's `candidates` likeliest continuations over
    all its k live hypotheses, ranked by log P (sampled in proportion to P under `do_sample`). `log_probs`: the next
    token's log-probabilities, k rows a sentence; `running_scores`: (sentences, k) log P of the live hypotheses.
    Returns each continuation's log P, the beam it continues and its token, each (sentences, candidates)."""
    searching, k = running_scores.shape
    totals = (log_probs.view(searching, k, -1) + running_scores[:, :, None]).view(searching, -1)
    if do_sample:
        chosen = torch.multinomial(nn.functional.softmax(totals, dim=-1), num_samples=candidates)
        chosen_scores = torch.gather(totals, 1, chosen)
    else:
        chosen_scores, chosen = torch.topk(totals, k=candidates)
    vocab_size = totals.shape[-1] // k
    return chosen_scores, chosen // vocab_size, chosen % vocab_size


def beam_search(
    input_ids, logits_processor, stopping_criteria, config, steps, recorder, synced_gpus, shrinks, constraints=None
):
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

    `constraints` (guidance_vaswani.LexicalConstraints): phrases each translation must hold. Then a hypothesis may end
    only once it holds them all (or at its length limit), the candidates widen, the k that live on are chosen by
    dynamic beam allocation (Post and Vilar 2018), and finished hypotheses that hold them all rank above those that do
    not (which only a length limit ends).
    """
    k = config.num_beams
    sentences, cur_len = input_ids.shape[0] // k, input_ids.shape[1]
    prompt_len, max_length, alpha = cur_len, config.max_length, config.length_penalty
    device = input_ids.device
    candidates = max(2, 1 + len(eos_token_ids(config))) * k  # enough for k live ones if k of them finish
    stops_when_full = config.early_stopping is True  # k finished hypotheses end a sentence, better or not

    running = torch.full((sentences, k, max_length), fill_token_id(config), dtype=torch.int64, device=device)
    running[:, :, :cur_len] = input_ids.view(sentences, k, cur_len)
    finished = running.clone()
    # The k copies of the start differ only in score: the first one alone continues at the first step.
    running_scores = torch.zeros((sentences, k), dtype=torch.float, device=device)
    running_scores[:, 1:] = EXCLUDED
    finished_scores = torch.full((sentences, k), EXCLUDED, dtype=torch.float, device=device)
    is_finished = torch.zeros((sentences, k), dtype=torch.bool, device=device)
    finished_ok = torch.ones((sentences, k), dtype=torch.bool, device=device)  # holds its constraints' phrases
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
        if constraints is not None:
            log_probs = constraints.forbid_unready_ends(log_probs)
        recorder.add(outputs, logits, log_probs)
        del outputs

        # The 2k likeliest continuations of each sentence, over all its beams.
        searching = running.shape[0]
        chosen_scores, beam, token = beam_step(log_probs, running_scores, candidates, config.do_sample)
        if constraints is not None:
            chosen_scores, beam, token = constraints.widen(
                log_probs, running_scores, chosen_scores, beam, token, EXCLUDED
            )
            progress = constraints.candidates_progress(beam, token)
        extended = gather_beams(running, beam)
        extended[:, :, cur_len] = token
        extended_origins = gather_beams(running_origins, beam)
        extended_origins[:, :, cur_len - prompt_len] = beam + active[:, None] * k
        width = chosen_scores.shape[1]  # 2k, or more with constraints
        ends = stopping_criteria(extended[:, :, : cur_len + 1].reshape(searching * width, -1), recorder.scores)
        ends = ends.view(searching, width)

        # The k likeliest that do not end live on (with constraints, k chosen by dynamic beam allocation).
        live_scores = chosen_scores + ends.to(torch.float32) * EXCLUDED
        if constraints is None:
            keep = torch.topk(live_scores, k=k)[1]
        else:
            keep = constraints.choose(live_scores, progress, k, EXCLUDED)
        running = gather_beams(extended, keep)
        running_scores = gather_beams(live_scores, keep)
        running_origins = gather_beams(extended_origins, keep)

        # Those of the first k that end compete, by GNMT's score, with the sentence's k best finished ones.
        finish_now = ends & (torch.arange(width, device=device) < k)[None, :]
        if constraints is not None:  # and, where a sentence has phrases, every candidate that ends holding them all
            finish_ok = constraints.satisfied(progress, device)
            finish_now |= ends & finish_ok & constraints.bound(device)[:, None]
        finish_scores = chosen_scores / gnmt_length_penalty(cur_len + 1 - prompt_len, alpha)
        finish_scores += (torch.all(is_finished, dim=-1, keepdim=True) & stops_when_full).to(torch.float32) * EXCLUDED
        finish_scores += (~can_improve).to(torch.float32) * EXCLUDED
        finish_scores += (~finish_now) * EXCLUDED
        ranks = torch.cat((finished_scores, finish_scores), dim=1)
        if constraints is not None:  # those holding every phrase first
            ranks = ranks + (~torch.cat((finished_ok, finish_ok), dim=1)) * UNSATISFIED
        best = torch.topk(ranks, k=k)[1]
        finished = gather_beams(torch.cat((finished, extended), dim=1), best)
        finished_scores = gather_beams(torch.cat((finished_scores, finish_scores), dim=1), best)
        finished_origins = gather_beams(torch.cat((finished_origins, extended_origins), dim=1), best)
        is_finished = gather_beams(torch.cat((is_finished, finish_now), dim=1), best)
        if constraints is not None:
            finished_ok = gather_beams(torch.cat((finished_ok, finish_ok), dim=1), best)

        # The cache follows the chosen beams: rows numbered in the batch as it is now.
        steps.reorder((torch.arange(searching, device=device)[:, None] * k + gather_beams(beam, keep)).flatten())
        cur_len += 1

        best_reachable = running_scores[:, :1] / best_reachable_penalty
        counted = is_finished if constraints is None else is_finished & finished_ok  # a miss beats no live one
        worst_finished = torch.where(counted, torch.min(finished_scores, dim=1, keepdim=True)[0], EXCLUDED)
        can_improve = can_improve & torch.any(best_reachable > worst_finished, dim=-1, keepdim=True)
        full = torch.all(counted, dim=1) & stops_when_full
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
        if constraints is not None:
            constraints.select(kept)
        active = active[kept]
        running, running_scores, running_origins = running[kept], running_scores[kept], running_origins[kept]
        finished, finished_scores, finished_origins = finished[kept], finished_scores[kept], finished_origins[kept]
        is_finished, can_improve, finished_ok = is_finished[kept], can_improve[kept], finished_ok[kept]
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
