"""generate(paper_decoding=True, ensemble=[...]): several models decoding as one, their next-token log-probabilities
averaged at each step, against the reference search (helpers/reference_search.py) run over that average."""

import pytest
import torch
from helpers.reference_search import (
    Averaged,
    EndLikelierWithLength,
    decoded,
    expected_output,
    paper_generate,
    random_cases,
    random_model,
)
from helpers.tiny_models import padded_batch

from modeling_vaswani.decoding_vaswani import DecoderSteps


def test_an_ensemble_of_a_model_with_itself_translates_as_the_model():
    model, copy = random_model(seed=31), random_model(seed=31)
    input_ids, attention_mask = padded_batch([4, 7, 3, 9], seed=60)
    batch = {"input_ids": input_ids, "attention_mask": attention_mask, "logits_processor": [EndLikelierWithLength()]}
    for beams in (1, 4):
        settings = {"num_beams": beams, "return_dict_in_generate": True, "output_scores": True}
        alone = model.generate(**batch, paper_decoding=True, **settings)
        together = model.generate(**batch, paper_decoding=True, ensemble=[copy], **settings)
        assert torch.equal(alone.sequences, together.sequences)
        if beams > 1:
            torch.testing.assert_close(alone.sequences_scores, together.sequences_scores, atol=1e-5, rtol=0)


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_two_models_decode_as_the_reference_over_their_averaged_log_probabilities(monkeypatch):
    first, second, third = random_model(seed=31), random_model(seed=32), random_model(seed=33)
    reference = Averaged(first, second, third)
    selected = []
    original = DecoderSteps.select
    monkeypatch.setattr(
        DecoderSteps, "select", lambda self, kept, k: selected.append(len(kept)) or original(self, kept, k)
    )
    compared = differs = 0
    for lengths, seed, settings in random_cases(12, seed=61):
        input_ids, attention_mask = padded_batch(lengths, vocab_size=61, seed=seed)
        output = paper_generate(first, input_ids, attention_mask, ensemble=[second, third], **settings)
        expected = expected_output(reference, input_ids, attention_mask, settings)
        assert decoded(output) == [tokens for tokens, _ in expected], settings
        if settings["num_beams"] > 1:
            assert output.sequences_scores.tolist() == pytest.approx([score for _, score in expected], abs=1e-4)
        alone = expected_output(first, input_ids, attention_mask, settings)
        differs += [tokens for tokens, _ in alone] != [tokens for tokens, _ in expected]
        compared += len(expected)
    assert compared >= 12 and differs > 0  # the ensemble is not its first model

    # Without return_dict_in_generate, sentences leave the batch, in every member alike: the same tokens.
    for lengths, seed, settings in random_cases(8, seed=64):
        input_ids, attention_mask = padded_batch([*lengths, 9, 3], vocab_size=61, seed=seed)
        batch = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "exponential_decay_length_penalty": (2, 1.6),
        }
        shrinking = first.generate(**batch, paper_decoding=True, ensemble=[second, third], **settings)
        whole = first.generate(
            **batch, paper_decoding=True, ensemble=[second, third], return_dict_in_generate=True, **settings
        )
        assert shrinking.tolist() == whole.sequences.tolist(), settings
    assert len(selected) >= 3, selected


def test_what_an_ensemble_cannot_do_is_refused():
    model = random_model(seed=31)
    input_ids, attention_mask = padded_batch([4, 6], seed=63)
    batch = {"input_ids": input_ids, "attention_mask": attention_mask}
    with pytest.raises(ValueError, match="ensemble needs paper_decoding=True"):
        model.generate(**batch, ensemble=[random_model(seed=32)])
    with pytest.raises(ValueError, match=r"ensemble\[0\] has vocab_size 80, this model 61; expected models"):
        model.generate(**batch, paper_decoding=True, ensemble=[random_model(seed=32, vocab_size=80)])
    with pytest.raises(ValueError, match="expected a non-empty list of the other models"):
        model.generate(**batch, paper_decoding=True, ensemble=[])
