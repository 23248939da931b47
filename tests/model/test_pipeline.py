"""The "vaswani-translation" pipeline where the package is installed: its outputs against generate() on the same
batches, its options, checkpoints that declare it as remote code (`custom_pipelines`), and texts that hold paragraphs
(the registered class splits them into sentences; the payload's does not)."""

import json
import shutil

import pytest
from helpers.training_setup import tiny_checkpoint
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

from modeling_vaswani import SplittingTranslationPipeline, VaswaniConfig, VaswaniTranslationPipeline
from modeling_vaswani.remote_code_vaswani import CUSTOM_PIPELINES, PAYLOAD_FILES
from modeling_vaswani.toolkit.translation.alignment import translate_aligned

SENTENCES = ["A man in a blue shirt is riding a bike.", "Two dogs play.", "A girl in a red dress sings on a stage."]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("tiny"))


# The untrained model rarely ends a sentence: each would run to its limit of input length + 50 (the tests' cost).
CAP = {"max_new_tokens": 8}


@pytest.fixture(scope="module")
def translator(checkpoint):
    return pipeline("vaswani-translation", model=str(checkpoint), **CAP)


def generated_texts(checkpoint, sentences, **generate_kwargs) -> list[str]:
    """The reference: the model's generate() on one padded batch of `sentences`, decoded (at most CAP's tokens,
    unless `generate_kwargs` say otherwise)."""
    generate_kwargs = {**CAP, **generate_kwargs}
    model = AutoModelForSeq2SeqLM.from_pretrained(checkpoint).eval()
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    batch = tokenizer(sentences, return_tensors="pt", padding=True)
    return tokenizer.batch_decode(model.generate(**batch, **generate_kwargs), skip_special_tokens=True)


def test_one_text_gives_a_list_of_one_translation(translator, checkpoint):
    assert type(translator) is SplittingTranslationPipeline and isinstance(translator, VaswaniTranslationPipeline)
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


def test_empty_text_gives_an_empty_translation_unless_each_text_is_one_sentence(translator):
    assert translator(" ") == [{"translation_text": ""}]
    assert translator(["", " \t"]) == [{"translation_text": ""}, {"translation_text": ""}]
    with pytest.raises(ValueError, match="expected a non-empty text to translate, got ' '"):
        translator(" ", split_sentences=False)


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
    # The payload's pipeline is what is declared and copied, not the registered subclass (toolkit code).
    assert sorted(path.name for path in declaring.glob("*.py")) == sorted(PAYLOAD_FILES)
    again = pipeline("vaswani-translation", model=str(declaring))
    assert type(again) is SplittingTranslationPipeline
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


# ---------------------------------------------------------------------------------------------------------------------
# Paragraphs: split into sentences, translated together, joined with the text's own spacing
# ---------------------------------------------------------------------------------------------------------------------

PARAGRAPHS = [  # (sentences, spacing)
    (SENTENCES[:2], ["", "  ", ""]),
    (SENTENCES[2:], ["\t", " "]),
    (["Two dogs play.", "A man in a blue shirt is riding a bike.", "A girl sings."], [" ", "\t", " ", ""]),
]


def joined(parts, spacing):
    return spacing[0] + "".join(part + after for part, after in zip(parts, spacing[1:], strict=True))


def test_a_paragraph_translates_as_generate_on_each_of_its_sentences(translator, checkpoint):
    texts = [joined(sentences, spacing) for sentences, spacing in PARAGRAPHS]
    expected = [
        joined([generated_texts(checkpoint, [sentence], paper_decoding=True)[0] for sentence in sentences], spacing)
        for sentences, spacing in PARAGRAPHS
    ]
    assert translator(texts) == [{"translation_text": text} for text in expected]
    assert translator(texts[0]) == [{"translation_text": expected[0]}]
    # The payload's way: a text is one sentence, whatever it holds.
    whole = generated_texts(checkpoint, [texts[0]], paper_decoding=True)
    assert translator(texts[0], split_sentences=False) == [{"translation_text": whole[0]}]


def test_the_sentences_of_a_call_share_batches_across_texts(translator, checkpoint):
    """batch_size=2 over the call's 6 sentences: batches (1, 2), (3, 4), (5, 6) hold sentences of different texts,
    each translated as generate() translates that batch."""
    texts = [joined(sentences, spacing) for sentences, spacing in PARAGRAPHS]
    flat = [sentence for sentences, _ in PARAGRAPHS for sentence in sentences]
    references = []
    for start in range(0, len(flat), 2):
        references += generated_texts(checkpoint, flat[start : start + 2], paper_decoding=True)
    references = iter(references)
    expected = [joined([next(references) for _ in sentences], spacing) for sentences, spacing in PARAGRAPHS]
    assert translator(texts, batch_size=2) == [{"translation_text": text} for text in expected]


def test_a_prefix_starts_each_texts_first_sentence(translator, checkpoint):
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    prefix = tokenizer(text_target="Ein Mann", add_special_tokens=False)["input_ids"]
    (first, second), spacing = PARAGRAPHS[0]
    started = generated_texts(checkpoint, [first], paper_decoding=True, target_prefix=[prefix])[0]
    plain = generated_texts(checkpoint, [second], paper_decoding=True)[0]
    assert started.startswith("Ein Mann")
    expected = joined([started, plain], spacing)
    assert translator(joined([first, second], spacing), target_prefix="Ein Mann") == [{"translation_text": expected}]
    # Three sentences in one batch, prefixed by row: the first of each text only.
    together = generated_texts(
        checkpoint, [first, second, first], paper_decoding=True, target_prefix=[prefix, [], prefix]
    )
    texts = [joined([first, second], spacing), first]
    assert translator(texts, target_prefix="Ein Mann", batch_size=3) == [
        {"translation_text": joined(together[:2], spacing)},
        {"translation_text": together[2]},
    ]


def test_candidates_of_a_paragraph_are_refused_and_of_a_sentence_kept(translator):
    with pytest.raises(ValueError, match=r"text 2 holds 2 sentences \(text 2, sentence 1 \('A man in a ...'\)"):
        translator([SENTENCES[2], joined(*PARAGRAPHS[0])], num_return_sequences=2)
    two = translator([SENTENCES[2], " " + SENTENCES[1]], num_return_sequences=2)
    assert [len(candidates) for candidates in two] == [2, 2]
    assert all(candidate["translation_text"].startswith(" ") for candidate in two[1])  # its leading space kept


def test_a_sentence_over_the_limit_is_named_by_its_text(translator):
    long = " ".join(["word"] * 40) + "."
    with pytest.raises(ValueError, match=r"^text 2, sentence 2 \('word word word word ...'\) is \d+ tokens long"):
        translator([SENTENCES[1], f"A dog. {long}"], max_input_tokens=20)


def test_the_language_is_the_models_recorded_one(checkpoint, tmp_path):
    """German rules keep "sog." inside its sentence, generic rules cut after it."""
    german_model = shutil.copytree(checkpoint, tmp_path / "german")
    (german_model / "results.json").write_text(json.dumps({"test_set": {"source_lang": "de"}}))
    text = "Das ist die sog. Lösung. Gut."
    german = " ".join(
        generated_texts(checkpoint, [s], paper_decoding=True)[0] for s in ["Das ist die sog. Lösung.", "Gut."]
    )
    generic = " ".join(
        generated_texts(checkpoint, [s], paper_decoding=True)[0] for s in ["Das ist die sog.", "Lösung.", "Gut."]
    )
    assert german != generic, "the two cuts must translate differently for the test to mean anything"
    assert pipeline("vaswani-translation", model=str(german_model), **CAP)(text) == [{"translation_text": german}]
    assert pipeline("vaswani-translation", model=str(checkpoint), **CAP)(text) == [{"translation_text": generic}]
    assert pipeline("vaswani-translation", model=str(checkpoint), language="de", **CAP)(text) == [
        {"translation_text": german}
    ]
    assert pipeline("vaswani-translation", model=str(german_model), **CAP)(text, language="en") == [
        {"translation_text": generic}
    ]


def test_alignments_on_request_are_the_librarys(translator, checkpoint):
    """alignments=True adds each text's "alignment": translate_aligned's pairs (checked against each sentence aligned
    alone in tests/toolkit/translation/test_translate_aligned.py), in the text's word positions; without it, none."""
    model = AutoModelForSeq2SeqLM.from_pretrained(checkpoint).eval()
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    texts = [joined(sentences, spacing) for sentences, spacing in PARAGRAPHS] + [" "]
    expected = translate_aligned(model, tokenizer, texts, batch_size=1, progress=False, **CAP)
    got = translator(texts, alignments=True)
    assert got == [{"translation_text": line.text, "alignment": line.alignment} for line in expected]
    assert got[-1] == {"translation_text": "", "alignment": []}
    assert sum(len(answer["alignment"]) for answer in got) > 3
    assert translator(texts[0], alignments=True) == [got[0]]
    assert all("alignment" not in answer for answer in translator(texts))
    whole = translate_aligned(model, tokenizer, texts[:1], split_sentences=False, progress=False, **CAP)
    answer = translator(texts[0], split_sentences=False, alignments=True)
    assert answer == [{"translation_text": whole[0].text, "alignment": whole[0].alignment}]
    with pytest.raises(ValueError, match="alignments=True with num_return_sequences=2; alignments are of each"):
        translator(SENTENCES[0], alignments=True, num_return_sequences=2)
    with pytest.raises(ValueError, match=r"alignments='yes'; expected True or False"):
        translator(SENTENCES[0], alignments="yes")
