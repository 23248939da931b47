"""The search's selections, step by step on hand-made log-probabilities: `TopK` (Section 6.1's beam, from whole rows
or from each row's shortlist) and `DynamicBeamAllocation` (Post and Vilar 2018). Each expected value is worked out by
hand in the test; the whole
search against independent references is tests/model/test_paper_decoding.py's and test_constraints.py's."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import GenerationConfig
from transformers.generation import LogitsProcessorList, MinLengthLogitsProcessor
from transformers.modeling_outputs import BaseModelOutput

from modeling_vaswani.constraints_vaswani import DynamicBeamAllocation, Progress, Standing
from modeling_vaswani.decoding_vaswani import Recorder, Shortlist, shortlisted
from modeling_vaswani.search_vaswani import EXCLUDED, Candidates, TopK

EOS = 2


def test_top_k_proposes_the_likeliest_continuations_over_all_beams():
    """One sentence, k = 2 live hypotheses of log P -1 and -2, a vocabulary of 3: totals are row 0 [-1.5, -1.1, -3]
    and row 1 [-2.2, -4, -2.1]; the 4 likeliest are -1.1 (beam 0, token 1), -1.5 (0, 0), -2.1 (1, 2), -2.2 (1, 0)."""
    log_probs = torch.tensor([[-0.5, -0.1, -2.0], [-0.2, -2.0, -0.1]])
    candidates = TopK(k=2, candidates=4, do_sample=False).propose(log_probs, torch.tensor([[-1.0, -2.0]]), None)
    assert torch.allclose(candidates.scores, torch.tensor([[-1.1, -1.5, -2.1, -2.2]]))
    assert candidates.beam.tolist() == [[0, 0, 1, 1]] and candidates.token.tolist() == [[1, 0, 2, 0]]
    assert candidates.standing is None


def test_top_k_keeps_the_k_likeliest_that_do_not_end_and_lets_the_first_k_finish():
    live_scores = torch.tensor([[-1.0 + EXCLUDED, -1.5, -2.0, -2.5]])  # the likeliest ended
    candidates = Candidates(torch.tensor([[-1.0, -1.5, -2.0, -2.5]]), torch.zeros(1, 4), torch.zeros(1, 4))
    choice = TopK(k=2, candidates=4, do_sample=False).choose(candidates, live_scores, None)
    assert choice.keep.tolist() == [[1, 2]]
    assert choice.may_finish.tolist() == [[True, True, False, False]]
    assert choice.complete.all() and choice.state is None


def test_top_k_of_a_config_counts_k_more_candidates_for_each_extra_end_token():
    config = type("Config", (), {"num_beams": 3, "eos_token_id": [2, 5, 9], "do_sample": False})()
    top = TopK.of(config)
    assert (top.k, top.candidates, top.do_sample) == (3, 12, False)  # (1 + 3 ends) * 3


def allocation(phrases, k=2):
    return DynamicBeamAllocation(phrases, TopK(k=k, candidates=2 * k, do_sample=False), [EOS])


def test_an_unready_hypothesis_may_not_end_and_a_ready_one_may():
    """Sentence 0's first hypothesis has met its phrase, its second not; sentence 1 has none (ready from the start)."""
    selection = allocation([[[7]], []])
    standing = Standing([[[7]], []], [[Progress(met=1), Progress()], [Progress(), Progress()]])
    restricted = selection.restrict(torch.zeros(4, 10), standing)
    assert (restricted[:, EOS] == -math.inf).tolist() == [False, True, False, False]
    assert (restricted[:, [0, 1, *range(3, 10)]] == 0).all()


def test_allocation_keeps_a_less_likely_candidate_that_met_a_phrase():
    """Phrase [7], k = 2: banks 0 and 1 get a place each. Bank 1 holds only the third likeliest (token 7), which lives
    on beside the likeliest, over the second; and it may finish, holding its phrase, though not among the first k."""
    selection = allocation([[[7]]])
    standing = selection.start()
    log_probs = torch.full((2, 10), -20.0)
    log_probs[0, [5, 6, 7, 8]] = torch.tensor([-1.0, -2.0, -3.0, -4.0])
    running_scores = torch.tensor([[0.0, EXCLUDED]])  # the first step: one live hypothesis
    candidates = selection.propose(log_probs, running_scores, standing)
    assert candidates.token[0, :4].tolist() == [5, 6, 7, 8]
    met = [progress.met for progress in candidates.standing[0][:4]]
    assert met == [0, 0, 1, 0]
    choice = selection.choose(candidates, candidates.scores, standing)
    assert choice.keep.tolist() == [[0, 2]]
    assert choice.may_finish[0, :4].tolist() == [True, True, True, False]
    assert choice.complete[0, :4].tolist() == [False, False, True, False]
    assert choice.state.progress == [[Progress(), Progress(met=1)]]


def test_allocation_carries_nothing_but_what_it_returns():
    """The same step asked twice gives the same answer, and leaves the standing it was given as it was: what persists
    is the returned state alone."""
    selection = allocation([[[7, 8]], [[4]]])
    standing = selection.start()
    given = Standing([list(p) for p in standing.phrases], [list(p) for p in standing.progress])
    generator = torch.Generator().manual_seed(0)
    log_probs = torch.randn(4, 10, generator=generator).log_softmax(-1)
    running_scores = torch.tensor([[0.0, EXCLUDED], [0.0, EXCLUDED]])
    first, second = (selection.propose(log_probs, running_scores, standing) for _ in range(2))
    assert all(torch.equal(a, b) for a, b in zip(first[:3], second[:3], strict=True))
    assert first.standing == second.standing
    choices = [selection.choose(first, first.scores, standing) for _ in range(2)]
    assert torch.equal(choices[0].keep, choices[1].keep) and choices[0].state == choices[1].state
    assert standing == given


def test_selecting_sentences_keeps_their_phrases_and_standing():
    selection = allocation([[[7]], [[4, 5]], []])
    standing = Standing([[[7]], [[4, 5]], []], [[Progress(1)] * 2, [Progress(0, ((0, 1),))] * 2, [Progress()] * 2])
    kept = selection.select(standing, torch.tensor([0, 2]))
    assert kept == Standing([[[7]], []], [[Progress(1)] * 2, [Progress()] * 2])


def test_top_k_proposes_from_a_shortlist_what_it_proposes_from_the_whole_vocabulary():
    """One sentence, k = 2, 2 candidates, a vocabulary of 4: totals row 0 (log P -1) [-1.5, -1.1, -3, -1.3] and row 1
    (log P -2) [-2.2, -4, -2.1, -2.3]: the 2 likeliest are -1.1 (beam 0, token 1) and -1.3 (0, 3), each among its
    row's 2 likeliest tokens, which is all a shortlist of width 2 holds."""
    log_probs = torch.tensor([[-0.5, -0.1, -2.0, -0.3], [-0.2, -2.0, -0.1, -0.3]])
    top = TopK(k=2, candidates=2, do_sample=False)
    shortlist = Shortlist(torch.tensor([[-0.1, -0.3], [-0.1, -0.2]]), torch.tensor([[1, 3], [2, 0]]))
    candidates = top.propose_shortlist(shortlist, torch.tensor([[-1.0, -2.0]]))
    assert torch.allclose(candidates.scores, torch.tensor([[-1.1, -1.3]]))
    assert candidates.beam.tolist() == [[0, 0]] and candidates.token.tolist() == [[1, 3]]
    whole = top.propose(log_probs, torch.tensor([[-1.0, -2.0]]), None)
    assert whole.beam.tolist() == [[0, 0]] and whole.token.tolist() == [[1, 3]]


@settings(max_examples=200, deadline=None)
@given(
    sentences=st.integers(1, 3),
    k=st.integers(1, 4),
    extra=st.integers(0, 12),
    seed=st.integers(0, 2**31 - 1),
    first_step=st.booleans(),
)
def test_a_shortlist_as_wide_as_the_candidates_gives_the_same_candidates(sentences, k, extra, seed, first_step):
    """Distinct log-probabilities (a random permutation, so no ties), any beam, vocabulary and step: each row's
    `candidates` likeliest tokens (torch.topk in the test) give the candidates the whole rows give."""
    generator = torch.Generator().manual_seed(seed)
    top = TopK(k=k, candidates=2 * k, do_sample=False)
    vocab = 2 * k + extra
    rows = sentences * k
    log_probs = -(torch.randperm(rows * vocab, generator=generator).view(rows, vocab).float() + 1) / 7
    running = -torch.rand(sentences, k, generator=generator) * 3
    if first_step:
        running[:, 1:] = EXCLUDED  # as beam_search starts: one live hypothesis a sentence
    whole = top.propose(log_probs, running, None)
    values, tokens = torch.topk(log_probs, 2 * k, dim=-1)
    short = top.propose_shortlist(Shortlist(values, tokens), running)
    assert torch.equal(short.scores, whole.scores)
    assert torch.equal(short.beam, whole.beam) and torch.equal(short.token, whole.token)


def test_a_shortlist_narrower_than_the_candidates_without_values_or_for_a_sampled_beam_is_refused():
    shortlist = Shortlist(torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"shortlist of 3 tokens a row \(do_sample False, log-probabilities given\)"):
        TopK(k=2, candidates=4, do_sample=False).propose_shortlist(shortlist, torch.zeros(1, 2))
    with pytest.raises(ValueError, match=r"do_sample True, .*expected at least the 2 candidates .* and no sampling"):
        TopK(k=1, candidates=2, do_sample=True).propose_shortlist(shortlist, torch.zeros(2, 1))
    tokens_only = Shortlist(None, torch.zeros(2, 3, dtype=torch.long))  # a greedy step's: nothing to rank by
    with pytest.raises(ValueError, match=r"log-probabilities none\); expected .* their log-probabilities"):
        TopK(k=1, candidates=2, do_sample=False).propose_shortlist(tokens_only, torch.zeros(2, 1))


def test_a_shortlist_is_refused_where_the_decoding_reads_the_whole_distribution():
    shortlist = Shortlist(torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.long))
    encoder = BaseModelOutput(last_hidden_state=torch.zeros(2, 1, 4))
    plain = GenerationConfig()
    assert shortlisted(shortlist, LogitsProcessorList(), Recorder(plain, encoder), plain)
    assert not shortlisted(object(), LogitsProcessorList(), Recorder(plain, encoder), plain)
    recording = GenerationConfig(return_dict_in_generate=True, output_scores=True)
    sampling = GenerationConfig(do_sample=True)
    processors = LogitsProcessorList([MinLengthLogitsProcessor(3, EOS)])
    for processors_, recorder, config in (
        (processors, Recorder(plain, encoder), plain),
        (LogitsProcessorList(), Recorder(recording, encoder), recording),
        (LogitsProcessorList(), Recorder(plain, encoder), sampling),
    ):
        with pytest.raises(ValueError, match="reads the whole distribution .* expected full logits"):
            shortlisted(shortlist, processors_, recorder, config)
