"""generate() refuses invalid inputs before any work, in both decoding modes, with an error naming the argument, the
value and what was expected; the pipeline refuses a text longer than its input limit.

Before these checks each case below failed deep inside the search (ZeroDivisionError, "negative dimension", a reshape
or dtype error from torch, a bare IndexError), reported another value than the one given, or decoded silently.
"""

import copy
import math
import re

import pytest
import torch
from helpers.tiny_models import PAD, padded_batch, tiny_model
from helpers.training_setup import tiny_checkpoint
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, GenerationConfig, pipeline

VOCAB = 61  # tiny_model's vocab_size


@pytest.fixture(scope="module")
def model():
    return tiny_model(seed=41)


def batch():
    """Two sentences, 5 and 3 tokens: input_ids of shape (2, 5)."""
    return padded_batch([5, 3], vocab_size=VOCAB, seed=42)


def with_id(row: int, position: int, value: int) -> dict:
    input_ids, attention_mask = batch()
    input_ids[row, position] = value
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def with_inputs(input_ids, attention_mask) -> dict:
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def with_mask_row_empty() -> dict:
    input_ids, attention_mask = batch()
    attention_mask[1] = 0
    return {"input_ids": input_ids, "attention_mask": attention_mask}


IDS, MASK = batch()

# (arguments given to generate() besides the batch, exception, fragments its message must hold)
CASES = {
    "num_beams=0": ({"num_beams": 0}, ValueError, ["num_beams=0", "at least 1"]),
    "num_beams=-1": ({"num_beams": -1}, ValueError, ["num_beams=-1", "at least 1"]),
    "num_beams=2.0": ({"num_beams": 2.0}, TypeError, ["num_beams=2.0", "float", "expected an int"]),
    "no rows": (with_inputs(IDS[:0], MASK[:0]), ValueError, ["input_ids has shape (0, 5)", "at least one row"]),
    "no tokens": (with_inputs(IDS[:, :0], MASK[:, :0]), ValueError, ["input_ids has shape (2, 0)", "at least one"]),
    "id = vocab_size": (with_id(0, 1, VOCAB), ValueError, ["input_ids[0, 1] is 61", f"vocabulary of {VOCAB}"]),
    "id > vocab_size": (with_id(1, 2, 1000), ValueError, ["input_ids[1, 2] is 1000", f"vocabulary of {VOCAB}"]),
    "negative id": (with_id(1, 0, -3), ValueError, ["input_ids[1, 0] is -3", f"0 to {VOCAB - 1}"]),
    "float ids": (with_inputs(IDS.float(), MASK), TypeError, ["input_ids has dtype torch.float32", "integer"]),
    "bool ids": (with_inputs(IDS.bool(), MASK), TypeError, ["input_ids has dtype torch.bool", "integer"]),
    "list ids": (with_inputs(IDS.tolist(), MASK), TypeError, ["input_ids is a list", "torch.Tensor"]),
    "1-D ids": (with_inputs(IDS[0], MASK[0]), ValueError, ["input_ids has shape (5,)", "(batch, length)"]),
    "3-D ids": (with_inputs(IDS[None], MASK[None]), ValueError, ["input_ids has shape (1, 2, 5)", "(batch, length)"]),
    "mask shorter": (
        with_inputs(IDS, MASK[:, :4]),
        ValueError,
        ["attention_mask has shape (2, 4)", "input_ids' shape (2, 5)"],
    ),
    "mask of one row": (
        with_inputs(IDS, MASK[:1]),
        ValueError,
        ["attention_mask has shape (1, 5)", "input_ids' shape (2, 5)"],
    ),
    "num_return_sequences=0": (
        {"num_return_sequences": 0},
        ValueError,
        ["num_return_sequences=0", "at least 1"],
    ),
    "num_return_sequences > num_beams": (
        {"num_beams": 4, "num_return_sequences": 5},
        ValueError,
        ["`num_return_sequences` (5)", "`num_beams` (4)"],  # transformers' GenerationConfig.validate
    ),
    "length_penalty=nan": ({"length_penalty": math.nan}, ValueError, ["length_penalty=nan", "finite"]),
    "length_penalty=inf": ({"length_penalty": math.inf}, ValueError, ["length_penalty=inf", "finite"]),
    "length_penalty=-inf": ({"length_penalty": -math.inf}, ValueError, ["length_penalty=-inf", "finite"]),
    "length_penalty='0.6'": ({"length_penalty": "0.6"}, TypeError, ["length_penalty='0.6'", "str"]),
    "max_length=0": ({"max_length": 0}, ValueError, ["max_length=0", "at least 2"]),
    "max_length=1": ({"max_length": 1}, ValueError, ["max_length=1", "at least 2"]),
    "max_new_tokens=0": ({"max_new_tokens": 0}, ValueError, ["max_new_tokens=0", "at least 1"]),
    "max_new_tokens=-1": ({"max_new_tokens": -1}, ValueError, ["max_new_tokens=-1", "at least 1"]),
    "a generation_config's num_beams=0": (
        {"generation_config": GenerationConfig(num_beams=0)},
        ValueError,
        ["num_beams=0", "at least 1"],
    ),
    "a row all padding": (with_mask_row_empty(), ValueError, ["attention_mask row 1 is all padding"]),
}

MODES = {"paper decoding": True, "stock generate": False}


@pytest.mark.parametrize("paper_decoding", list(MODES.values()), ids=list(MODES))
@pytest.mark.parametrize("case", list(CASES))
def test_invalid_input_is_refused_by_name(model, case, paper_decoding, monkeypatch):
    arguments, error, fragments = CASES[case]
    arguments = {**with_inputs(*batch()), **arguments}
    forwards = []
    monkeypatch.setattr(model, "forward", lambda *args, **kwargs: forwards.append(1))  # any work would call it
    with pytest.raises(error) as raised:
        model.generate(**arguments, paper_decoding=paper_decoding)
    for fragment in fragments:
        assert re.search(re.escape(fragment), str(raised.value)), (fragment, str(raised.value))
    assert forwards == [], "refused after the model ran"


def test_the_paper_decoding_refuses_a_negative_length_penalty_and_stock_generate_allows_it(model):
    """The paper's search stops a sentence once no live hypothesis can beat its finished ones, a bound that holds
    only while the GNMT penalty grows with length (alpha >= 0); transformers' beam search allows any finite value."""
    input_ids, attention_mask = batch()
    with pytest.raises(ValueError, match=re.escape("length_penalty=-0.5") + ".*at least 0"):
        model.generate(input_ids=input_ids, attention_mask=attention_mask, paper_decoding=True, length_penalty=-0.5)
    stock = model.generate(input_ids=input_ids, attention_mask=attention_mask, length_penalty=-0.5, max_new_tokens=4)
    assert stock.shape[0] == 2


@pytest.mark.parametrize("paper_decoding", list(MODES.values()), ids=list(MODES))
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_valid_edge_values_decode(model, paper_decoding):
    """The smallest values allowed decode, and int32 ids decode as int64 ones do."""
    input_ids, attention_mask = batch()
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "paper_decoding": paper_decoding}
    assert model.generate(**inputs, num_beams=1, max_new_tokens=1).shape == (2, 2)
    assert model.generate(**inputs, num_beams=1, max_length=2).shape == (2, 2)
    assert model.generate(**inputs, num_beams=2, num_return_sequences=2, max_new_tokens=3).shape[0] == 4
    assert model.generate(**inputs, length_penalty=0.0, max_new_tokens=3).shape[0] == 2
    as_int32 = model.generate(**{**inputs, "input_ids": input_ids.int()}, max_new_tokens=5)
    assert torch.equal(as_int32, model.generate(**inputs, max_new_tokens=5))
    # The ids an id check must let through: the last of the vocabulary, and the pad id beside a real token.
    input_ids[0, 0] = VOCAB - 1
    model.generate(input_ids=input_ids, attention_mask=input_ids.ne(PAD), paper_decoding=paper_decoding)


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_the_paper_decoding_takes_its_beams_from_a_generation_config(model):
    """A generation_config passed without num_beams leaves the model's (4) in force, as stock generate() does; a
    num_beams in it is used as the keyword would be."""
    input_ids, attention_mask = batch()
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "paper_decoding": True}
    assert torch.equal(model.generate(**inputs, generation_config=GenerationConfig()), model.generate(**inputs))
    assert torch.equal(
        model.generate(**inputs, generation_config=GenerationConfig(num_beams=2)),
        model.generate(**inputs, num_beams=2),
    )


@pytest.mark.parametrize("cap", [{"max_new_tokens": 3}, {"max_length": 4}])
def test_the_paper_decodings_length_caps_are_resolved_as_generate_resolves_them(model, cap):
    """Section 6.1's input length + 50, lowered by a cap given as a keyword, in a generation_config passed, or in the
    model's own generation_config (the call's keyword first), as stock generate() reads them. The caps of the two
    configurations were ignored: sentences ran to input length + 50."""
    input_ids, attention_mask = batch()
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "paper_decoding": True}
    by_keyword = model.generate(**inputs, **cap)
    assert by_keyword.shape[1] <= 4  # the start token and at most 3 more
    assert torch.equal(model.generate(**inputs, generation_config=GenerationConfig(num_beams=4, **cap)), by_keyword)
    own = copy.deepcopy(model)
    for name, value in cap.items():
        setattr(own.generation_config, name, value)
    assert torch.equal(own.generate(**inputs), by_keyword)
    longer = {name: value + 2 for name, value in cap.items()}
    assert torch.equal(own.generate(**inputs, **longer), model.generate(**inputs, **longer))


@pytest.fixture(scope="module")
def small_checkpoint(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("tiny"), lines=300)


def test_the_pipeline_refuses_a_text_longer_than_the_model_takes(small_checkpoint):
    """The limit is the model's max_position_embeddings (the commands' default) unless `max_input_tokens` is given."""
    tokenizer = AutoTokenizer.from_pretrained(small_checkpoint)
    short, long = "Two dogs play.", "A man in a blue shirt is riding a bike down a long and busy street."
    limit, tokens = len(tokenizer(short)["input_ids"]), len(tokenizer(long)["input_ids"])
    assert limit < tokens
    model = AutoModelForSeq2SeqLM.from_pretrained(small_checkpoint, max_position_embeddings=limit).eval()
    translator = pipeline("vaswani-translation", model=model, tokenizer=tokenizer)
    assert len(translator(short, max_new_tokens=3)) == 1
    # Split into sentences (the package's pipeline), a sentence is named by its text and first words; whole (the
    # payload's, split_sentences=False), the text is.
    limit_name = f"more than the limit of {limit} (the model's max_position_embeddings)"
    for texts, split, refused in (
        (long, True, f"text 1, sentence 1 ('A man in a ...') is {tokens} tokens long, {limit_name}"),
        ([short, long], True, f"text 2, sentence 1 ('A man in a ...') is {tokens} tokens long, {limit_name}"),
        (long, False, f"the text is {tokens} tokens long, {limit_name}"),
        ([short, long], False, f"the text is {tokens} tokens long, {limit_name}"),
    ):
        with pytest.raises(ValueError, match=re.escape(refused)):
            translator(texts, batch_size=2, split_sentences=split)
    with pytest.raises(ValueError, match=re.escape(f"is {limit} tokens long, more than the limit of 3 (")):
        translator(short, max_input_tokens=3)
    assert len(translator(long, max_input_tokens=tokens, max_new_tokens=3)) == 1
    with pytest.raises(ValueError, match=re.escape("max_input_tokens=0; expected an int of at least 1")):
        translator(short, max_input_tokens=0)
