"""generate(): the KV cache changes nothing, and the paper's decoding (Section 6.1) scores as the paper says."""

import threading

import pytest
import torch
from helpers.tiny_models import BOS, EOS, PAD, padded_batch, tiny_model
from transformers import CompileConfig, LogitsProcessor, LogitsProcessorList

from modeling_vaswani.search_vaswani import gnmt_length_penalty

ALPHA = 0.6


@pytest.fixture(scope="module")
def model():
    return tiny_model(seed=11)


@pytest.fixture(scope="module")
def batch():
    input_ids, attention_mask = padded_batch([7, 3, 5], seed=12)
    return {"input_ids": input_ids, "attention_mask": attention_mask}


@pytest.mark.parametrize(
    "settings",
    [
        {"num_beams": 1, "do_sample": False},
        {"num_beams": 4, "do_sample": False},
        {"num_beams": 1, "do_sample": True, "top_k": 0},
        {"num_beams": 4, "do_sample": False, "paper_decoding": True},
    ],
    ids=["greedy", "beam", "sampling", "paper"],
)
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_cache_changes_nothing(model, batch, settings):
    settings = {"max_new_tokens": 12, **settings}
    if settings.get("paper_decoding"):
        del settings["max_new_tokens"]
    outputs = []
    for use_cache in (True, False):
        torch.manual_seed(13)
        outputs.append(model.generate(**batch, use_cache=use_cache, **settings))
    assert torch.equal(outputs[0], outputs[1])


@pytest.mark.parametrize("num_beams", [1, 4])
def test_static_cache(model, batch, num_beams):
    dynamic = model.generate(**batch, num_beams=num_beams, max_new_tokens=10)
    static = model.generate(**batch, num_beams=num_beams, max_new_tokens=10, cache_implementation="static")
    assert torch.equal(dynamic, static)


@pytest.mark.parametrize("do_sample", [False, True], ids=["greedy", "sampling"])
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_decoding_steps_compile_as_one_graph(model, batch, do_sample):
    """generate()'s compiled decoding (a static cache and a CompileConfig, what transformers does by itself on a GPU;
    it compiles greedy search and sampling, never beam search) traced with fullgraph=True, so that a graph break
    anywhere in a step raises. The backend runs the traced graph as it is and counts it."""
    graphs = []

    def backend(graph_module, example_inputs, **options):
        graphs.append(graph_module)
        return graph_module.forward

    compile_config = CompileConfig(fullgraph=True, backend=backend)
    compile_config._compile_all_devices = True  # transformers compiles on accelerators only unless told
    outputs = []
    for settings in ({}, {"cache_implementation": "static", "compile_config": compile_config}):
        torch.manual_seed(14)
        outputs.append(
            model.generate(**batch, num_beams=1, do_sample=do_sample, top_k=0, max_new_tokens=10, **settings)
        )
    assert len(graphs) == 1  # one graph for every decoding step
    assert torch.equal(outputs[0], outputs[1])


def teacher_forced_log_probability(model, source, attention_mask, sequence):
    """log P(Y|X) of one generated sequence, recomputed with a plain forward pass; returns it and |Y|."""
    tokens = sequence[1:]  # after the decoder start token
    if (tokens == EOS).any():
        tokens = tokens[: int((tokens == EOS).nonzero()[0]) + 1]
    else:
        tokens = tokens[tokens != PAD]
    with torch.no_grad():
        logits = model(
            input_ids=source[None],
            attention_mask=attention_mask[None],
            decoder_input_ids=sequence[None, : len(tokens)],
        ).logits[0]
    log_probs = torch.log_softmax(logits.double(), dim=-1)
    return log_probs.gather(-1, tokens[:, None]).sum().item(), len(tokens)


@pytest.mark.parametrize("paper_decoding", [True, False])
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_sequence_scores_recomputed_by_hand(model, batch, paper_decoding):
    """Paper: log P(Y|X) / ((5 + |Y|) / 6)^alpha. Stock transformers (unchanged): log P(Y|X) / |Y|^alpha."""
    settings = {} if paper_decoding else {"max_new_tokens": 20}
    # Never emitting pad or start tokens keeps |Y| unambiguous; the other log-probabilities are unchanged.
    settings["bad_words_ids"] = [[PAD], [BOS]]
    out = model.generate(
        **batch,
        paper_decoding=paper_decoding,
        num_beams=4,
        num_return_sequences=4,
        output_scores=True,
        return_dict_in_generate=True,
        **settings,
    )
    scores = out.sequences_scores.view(3, 4)
    assert (scores[:, :-1] >= scores[:, 1:]).all()  # best first
    for row in range(3):
        for beam in range(4):
            log_probability, length = teacher_forced_log_probability(
                model, batch["input_ids"][row], batch["attention_mask"][row], out.sequences[row * 4 + beam]
            )
            penalty = ((5 + length) / 6) ** ALPHA if paper_decoding else length**ALPHA
            assert scores[row, beam].item() == pytest.approx(log_probability / penalty, abs=2e-4)


def test_gnmt_length_penalty_formula():
    assert gnmt_length_penalty(1, ALPHA) == 1.0
    assert gnmt_length_penalty(7, ALPHA) == pytest.approx(2.0**0.6)
    assert gnmt_length_penalty(7, 0.0) == 1.0


@pytest.mark.parametrize("num_beams", [1, 4])
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_paper_decoding_stops_each_sentence_at_source_length_plus_50(model, batch, num_beams):
    # With the end-of-sentence token forbidden, every sentence runs to its own limit.
    generated = model.generate(**batch, paper_decoding=True, num_beams=num_beams, bad_words_ids=[[EOS]])
    output_lengths = generated[:, 1:].ne(PAD).sum(-1)
    assert output_lengths.tolist() == (batch["attention_mask"].sum(-1) + 50).tolist()


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_paper_decoding_defaults_to_the_generation_configs_beams(model, batch):
    assert torch.equal(
        model.generate(**batch, paper_decoding=True), model.generate(**batch, paper_decoding=True, num_beams=4)
    )


@pytest.mark.parametrize("num_beams", [1, 4])
@pytest.mark.parametrize("cap", [{"max_new_tokens": 54}, {"max_length": 55}, {"max_new_tokens": 5}])
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_a_length_cap_lowers_each_sentences_limit(model, batch, num_beams, cap):
    # Sources of 7, 3 and 5 tokens: limits of 57, 53 and 55 output tokens; the cap is the smaller of the two, sentence
    # by sentence (max_length counts the decoder start token). </s> forbidden, so every sentence runs to its limit.
    generated = model.generate(**batch, paper_decoding=True, num_beams=num_beams, bad_words_ids=[[EOS]], **cap)
    cap_tokens = cap.get("max_new_tokens", cap.get("max_length", 0) - 1)
    limits = (batch["attention_mask"].sum(-1) + 50).clamp(max=cap_tokens)
    assert generated[:, 1:].ne(PAD).sum(-1).tolist() == limits.tolist()


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_a_cap_above_every_limit_changes_nothing(model, batch):
    assert torch.equal(
        model.generate(**batch, paper_decoding=True, max_new_tokens=500),
        model.generate(**batch, paper_decoding=True),
    )


class LikelierEnd(LogitsProcessor):
    """Makes </s> likely enough that hypotheses finish at several lengths, where the two length penalties rank them
    differently (the tiny model's own </s> is too unlikely for ranking to matter)."""

    def __call__(self, input_ids, scores):
        scores = scores.clone()
        scores[:, EOS] += 2.0
        return scores.log_softmax(-1)


class WaitInsideGenerate(LogitsProcessor):
    """Holds its generate() call at the first step until told to go on, so that another thread runs meanwhile."""

    def __init__(self):
        self.inside, self.go_on = threading.Event(), threading.Event()

    def __call__(self, input_ids, scores):
        self.inside.set()
        assert self.go_on.wait(timeout=120), "the other thread never finished"
        return scores


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_a_paper_decoding_call_does_not_change_a_plain_one_beside_it(model, batch):
    """One model, two threads: a plain beam search that runs while a paper-decoding call is inside generate() gets
    what it gets alone (the paper's search keeps its state in the call, none on the model)."""
    end = LikelierEnd()
    settings = {"num_beams": 4, "length_penalty": ALPHA, "max_new_tokens": 60, "logits_processor": [end]}
    plain_alone = model.generate(**batch, **settings)
    paper_alone = model.generate(**batch, paper_decoding=True, logits_processor=[end])
    assert not torch.equal(plain_alone, paper_alone), "the two rankings must differ here for the test to mean anything"

    waiter, results = WaitInsideGenerate(), {}

    def paper():
        processors = LogitsProcessorList([end, waiter])
        results["paper"] = model.generate(**batch, paper_decoding=True, logits_processor=processors)

    thread = threading.Thread(target=paper)
    thread.start()
    try:
        assert waiter.inside.wait(timeout=120)
        results["plain"] = model.generate(**batch, **settings)  # while the paper call is held inside generate()
    finally:
        waiter.go_on.set()
        thread.join()
    assert torch.equal(results["plain"], plain_alone)
    assert torch.equal(results["paper"], paper_alone)


def test_the_output_length_rule_has_one_home():
    """Section 6.1's input length + 50, lowered to max_new_tokens or max_length: the same numbers for an int (the
    commands' room checks, the CTranslate2 engine, the server) and for a batch's tensor (generate()'s limits)."""
    from helpers.tiny_models import tiny_config

    from modeling_vaswani.search_vaswani import max_output_length, sentence_limits

    lengths = [1, 7, 30, 60]
    mask = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    config = tiny_config(max_position_embeddings=512)
    for caps in ({}, {"max_new_tokens": 40}, {"max_length": 30}, {"max_new_tokens": 40, "max_length": 30}):
        expected = [max_output_length(length, **caps) for length in lengths]
        assert (sentence_limits(config, mask, **caps) - 1).tolist() == expected
    assert [max_output_length(length) for length in lengths] == [51, 57, 80, 110]
    assert max_output_length(7, max_new_tokens=40, max_length=30) == 29
