"""The "vaswani-translation" pipeline where the package is installed: its outputs against generate() on the same
batches, its options, and checkpoints that declare it as remote code (`custom_pipelines`)."""

import json

import pytest
from helpers.training_setup import tiny_checkpoint
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

from modeling_vaswani import VaswaniConfig, VaswaniTranslationPipeline
from modeling_vaswani.remote_code_vaswani import CUSTOM_PIPELINES

SENTENCES = ["A man in a blue shirt is riding a bike.", "Two dogs play.", "A girl in a red dress sings on a stage."]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def translator(checkpoint):
    return pipeline("vaswani-translation", model=str(checkpoint))


def generated_texts(checkpoint, sentences, **generate_kwargs) -> list[str]:
    """The reference: the model's generate() on one padded batch of `sentences`, decoded."""
    model = AutoModelForSeq2SeqLM.from_pretrained(checkpoint).eval()
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    batch = tokenizer(sentences, return_tensors="pt", padding=True)
    return tokenizer.batch_decode(model.generate(**batch, **generate_kwargs), skip_special_tokens=True)


def test_one_text_gives_a_list_of_one_translation(translator, checkpoint):
    assert type(translator) is VaswaniTranslationPipeline
    expected = generated_texts(checkpoint, SENTENCES[:1], paper_decoding=True)
    assert translator(SENTENCES[0]) == [{"translation_text": expected[0]}]


def test_batches_translate_as_generate_does_on_the_same_batches(translator, checkpoint):
    expected = generated_texts(checkpoint, SENTENCES[:2], paper_decoding=True)
    expected += generated_texts(checkpoint, SENTENCES[2:], paper_decoding=True)
    assert translator(SENTENCES, batch_size=2) == [{"translation_text": text} for text in expected]
    assert translator([]) == []


def test_generate_options_pass_through(translator, checkpoint):
    expected = generated_texts(checkpoint, SENTENCES[:1], paper_decoding=False, num_beams=1, max_new_tokens=5)
    assert translator(SENTENCES[:1], paper_decoding=False, num_beams=1, max_new_tokens=5) == [
        {"translation_text": expected[0]}
    ]
    two = translator(SENTENCES[:2], num_return_sequences=2)
    assert [len(candidates) for candidates in two] == [2, 2]  # one list of candidates per text
    # A length cap under the paper's decoding lowers each sentence's limit (source length + 50).
    capped = generated_texts(checkpoint, SENTENCES[:1], paper_decoding=True, max_new_tokens=3)
    assert translator(SENTENCES[0], max_new_tokens=3) == [{"translation_text": capped[0]}]


def test_empty_text_is_refused(translator):
    with pytest.raises(ValueError, match="expected a non-empty text to translate, got ' '"):
        translator(" ")


def test_a_checkpoint_declaring_the_pipeline_needs_no_trust_remote_code_here(checkpoint, tmp_path):
    """transformers' pipeline() demands trust_remote_code for a task in config.custom_pipelines; where the package
    is installed the config does not load its own task from there, so the registered class serves it."""
    config = json.loads((checkpoint / "config.json").read_text())
    other = {"impl": "other_pipeline.OtherPipeline", "pt": ["AutoModelForSeq2SeqLM"]}
    config["custom_pipelines"] = {**CUSTOM_PIPELINES, "other-task": other}
    (tmp_path / "config.json").write_text(json.dumps(config))
    loaded = VaswaniConfig.from_pretrained(tmp_path)
    assert loaded.custom_pipelines == {"other-task": other}, "another task's declaration is kept"

    declaring = tmp_path / "declaring"
    translator = pipeline("vaswani-translation", model=str(checkpoint))
    translator.save_pretrained(declaring)  # transformers' own way of declaring a registered pipeline
    assert json.loads((declaring / "config.json").read_text())["custom_pipelines"] == CUSTOM_PIPELINES
    assert (declaring / "pipeline_vaswani.py").is_file()
    again = pipeline("vaswani-translation", model=str(declaring))
    assert type(again) is VaswaniTranslationPipeline
    assert again(SENTENCES[0]) == translator(SENTENCES[0])


def test_generate_options_given_at_creation_apply_to_every_call(checkpoint):
    """They reach generate() through the pipeline's public hooks; a call's own options win over them."""
    capped = pipeline(
        "vaswani-translation", model=str(checkpoint), paper_decoding=False, num_beams=1, max_new_tokens=4
    )
    expected = generated_texts(checkpoint, SENTENCES[:1], paper_decoding=False, num_beams=1, max_new_tokens=4)
    assert capped(SENTENCES[0]) == [{"translation_text": expected[0]}]
    longer = generated_texts(checkpoint, SENTENCES[:1], paper_decoding=False, num_beams=1, max_new_tokens=7)
    assert longer != expected, "the two caps must translate differently for the test to mean anything"
    assert capped(SENTENCES[0], max_new_tokens=7) == [{"translation_text": longer[0]}]


def test_a_target_prefix_starts_every_translation_of_the_call(translator, checkpoint):
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    prefix = tokenizer(text_target="Ein Mann", add_special_tokens=False)["input_ids"]
    expected = generated_texts(checkpoint, SENTENCES[:2], paper_decoding=True, target_prefix=[prefix, prefix])
    assert translator(SENTENCES[:2], batch_size=2, target_prefix="Ein Mann") == [
        {"translation_text": text} for text in expected
    ]
    assert all(text.startswith("Ein Mann") for text in expected), expected
    with pytest.raises(ValueError, match="target_prefix=3; expected a str"):
        translator(SENTENCES[0], target_prefix=3)
