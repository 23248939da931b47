"""The request's check (translation/request.py): every refusal a translation can get by what it asks, each naming its
field, in the library's spelling and in a command's; the engines asked what they can do; each refusal written once in
the package; and, over combinations of options, a translation or a refusal naming a field, never a traceback."""

import re
from dataclasses import fields, replace
from pathlib import Path

import pytest
import torch
from helpers.request_checks import counted_checks
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import pipeline

import modeling_vaswani
from modeling_vaswani.toolkit.cli import translate as translate_command
from modeling_vaswani.toolkit.translation.alignment import AlignedTranslation, translate_aligned, word_alignments
from modeling_vaswani.toolkit.translation.documents import translate_markup
from modeling_vaswani.toolkit.translation.engines import ENGINES, CTranslate2, PyTorch, engine_for, engine_of
from modeling_vaswani.toolkit.translation.errors import InputError
from modeling_vaswani.toolkit.translation.request import (
    CheckedRequest,
    Spelling,
    TranslationRequest,
    translate_request,
)
from modeling_vaswani.toolkit.translation.terminology import Glossary
from modeling_vaswani.toolkit.translation.translate import Hypothesis, decode_request, translate, translate_nbest

FLAGS = Spelling(flags=True, names={"language": "source_lang", "target_prefixes": "target_prefix"})
FIELDS = {each.name for each in fields(TranslationRequest)}

# (options, engine, field, the library's message, the command's message): each written out here, by hand.
REFUSALS = [
    (
        {"constraints": [["Fahrrad"]], "paper_decoding": False}, PyTorch, "constraints",
        "constraints need(s) the paper's decoding (its own beam search meets them); expected paper_decoding=True",
        "--constraints need(s) the paper's decoding (its own beam search meets them); drop --no_paper_decoding",
    ),
    (
        {"glossary": {"bike": "Fahrrad"}, "paper_decoding": False}, PyTorch, "glossary",
        "glossary need(s) the paper's decoding", "--glossary need(s) the paper's decoding",
    ),
    (
        {"avoid": [["Mann"]]}, CTranslate2, "avoid",
        "avoid need(s) the paper's search with lexical constraints; m runs on CTranslate2, which has no lexical "
        "constraints: give the checkpoint it was exported from, on the PyTorch engine",
        "--avoid need(s) the paper's search with lexical constraints; m runs on CTranslate2",
    ),
    (
        {"alignments": True}, CTranslate2, "alignments",
        "alignments=True need(s) the PyTorch model's attention weights (word alignments); m runs on CTranslate2",
        "--alignments need(s) the PyTorch model's attention weights (word alignments); m runs on CTranslate2",
    ),
    (
        {"format": "html"}, CTranslate2, "format",
        "format='html' need(s) the PyTorch model's attention weights",
        "--format html need(s) the PyTorch model's attention weights",
    ),
    (
        {"models": 2}, CTranslate2, "models",
        "models=2 need(s) several models' predictions averaged at each step; m runs on CTranslate2, which decodes "
        "one model at a time", "--models 2 need(s) several models' predictions",
    ),
    (
        {"models": 3, "paper_decoding": False}, PyTorch, "paper_decoding",
        "an ensemble (several models) decodes with the paper's decoding; expected paper_decoding=True",
        "an ensemble (several models) decodes with the paper's decoding; drop --no_paper_decoding",
    ),
    (
        {"alignments": True, "nbest": 3}, PyTorch, "alignments",
        "alignments=True with nbest=3; alignments are of each input's one translation: expected nbest=None or "
        "alignments=False",
        "--alignments with --nbest 3; alignments are of each input's one translation: drop --nbest or --alignments",
    ),
    (
        {"format": "xml-inline", "nbest": 2, "split_sentences": False}, PyTorch, "format",
        "format='xml-inline' writes the translation with its markup, one way; expected nbest=None and "
        "split_sentences=True, or format='text'",
        "--format xml-inline writes the translation with its markup, one way; drop --nbest and --no_split_sentences "
        "or give --format text",
    ),
    (
        {"nbest": 5, "num_beams": 4}, PyTorch, "nbest",
        "nbest=5 with num_beams=4; expected beam search (num_beams of at least 2) with at least nbest beams",
        "--nbest 5 with --num_beams 4; expected beam search",
    ),
    ({"nbest": 2, "num_beams": 1}, CTranslate2, "nbest", "nbest=2 with num_beams=1", "--nbest 2 with --num_beams 1"),
    ({"nbest": 0}, PyTorch, "nbest", "nbest=0; expected an int of at least 1", "nbest=0; expected an int"),
    ({"format": "pdf"}, PyTorch, "format", "unknown markup format 'pdf' for format", "unknown markup format 'pdf'"),
    (
        {"language": "de", "split_sentences": False}, PyTorch, "language",
        "language='de' chooses how texts are split into sentences; expected language=None or split_sentences=True",
        "--source_lang de chooses how texts are split into sentences; drop --source_lang or --no_split_sentences",
    ),
    (
        {"language": "english"}, PyTorch, "language", "language='english' is not a language code",
        "--source_lang='english' is not a language code",
    ),
    (
        {"alignments": True, "kernel": "flex_attention"}, PyTorch, "alignments",
        "alignments=True need(s) the attention weights, which the model's 'flex_attention' attention does not "
        "return; expected a model loaded with one of ['eager', 'sdpa'] (from_pretrained(attn_implementation='sdpa')), "
        "or expected alignments=False",
        "--alignments need(s) the attention weights, which the model's 'flex_attention' attention does not return",
    ),
    (
        {"format": "html", "kernel": "flash_attention_2"}, PyTorch, "format",
        "format='html' need(s) the attention weights, which the model's 'flash_attention_2' attention does not",
        "--format html need(s) the attention weights",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("options", "engine", "field", "library", "command"), REFUSALS)
def test_each_refusal_names_its_field_in_the_front_ends_spelling(options, engine, field, library, command):
    options = dict(options)
    kernel = options.pop("kernel", None)  # the loaded model's attention kernel, which `check_for` reads
    for spelling, message in ((Spelling(), library), (FLAGS, command)):
        with pytest.raises(ValueError) as refused:
            TranslationRequest(**options).check(engine, model="m", spelling=spelling, kernel=kernel)
        assert refused.value.field == field
        assert message in str(refused.value)


def test_what_goes_is_given_back_as_it_is_to_be_run():
    request = TranslationRequest(glossary={"Bike ": "Fahrrad"}, language=" de ", nbest=3, num_beams=4)
    checked = request.check(PyTorch)
    assert isinstance(checked.glossary, Glossary) and checked.glossary.terms == {"bike": "Fahrrad"}
    assert (checked.language, checked.nbest) == ("de", 3)
    # Empty lists of phrases ask for nothing: CTranslate2 translates them, as it did before the request.
    assert TranslationRequest(constraints=[[], []], avoid=[[]], glossary={}).check(CTranslate2).avoid == [[]]
    # The model's beam decides where the request names none; unknown before loading, nothing is refused.
    assert TranslationRequest(nbest=4).check(PyTorch).nbest == 4
    with pytest.raises(InputError, match="nbest=5 with num_beams=4"):
        TranslationRequest(nbest=5).check(PyTorch, beams=4)


def test_the_engines_declare_what_they_can_do_and_are_chosen_by_their_files(tmp_path):
    assert {"pytorch", "ctranslate2"} <= set(ENGINES) and PyTorch.can == {"constraints", "attention", "ensembles"}
    assert CTranslate2.can == frozenset()
    assert engine_for(None) is PyTorch and engine_for(tmp_path) is PyTorch
    (tmp_path / "model.bin").write_bytes(b"")
    (tmp_path / "config.json").write_text("{}")
    assert engine_for(tmp_path) is CTranslate2 and engine_for(tmp_path, "pytorch") is PyTorch
    with pytest.raises(ValueError, match="engine 'onnx' is unknown; expected one of pytorch, ctranslate2"):
        engine_for(tmp_path, "onnx")
    # A loaded model is known by the engine that holds it; one no engine holds is named, not a StopIteration (the
    # speed benchmark's wrapper of MarianMTModel, a plain object, met it before it became a module).
    assert engine_of(torch.nn.Linear(1, 1)) is PyTorch
    with pytest.raises(TypeError, match="a model of type object runs on no engine; expected a model PyTorch's, "):
        engine_of(object())


# Each refusal's words, which only its one home may hold.
ONE_HOME = {
    "need(s) the paper's decoding": "translation/request.py",
    "an ensemble (several models) decodes with": "translation/request.py",
    "alignments are of each": "translation/request.py",
    "writes the translation with its markup": "translation/request.py",
    "an n-best list holds the search's": "translation/request.py",
    "has no lexical constraints": "translation/engines.py",
    "does not give them": "translation/engines.py",
    "chooses how texts are split into sentences": "translation/request.py",
    "attention does not return": "translation/request.py",
}
# Refusals routed into the request's check or answered instead: their old words are nowhere in the package.
GONE = ["chooses how lines are split", "with num_return_sequences > 1; expected 1", "need a PyTorch model"]


def test_each_refusal_is_written_once_in_the_package():
    package = Path(modeling_vaswani.__file__).parent
    sources = {
        path.relative_to(package).as_posix(): path.read_text(encoding="utf-8") for path in package.rglob("*.py")
    }
    for words, home in ONE_HOME.items():
        holders = {name: text.count(words) for name, text in sources.items() if words in text}
        assert holders == {f"toolkit/{home}": 1}, (words, holders)
    for words in GONE:
        assert not [name for name, text in sources.items() if words in text], words


OPTIONS = {
    "num_beams": st.one_of(st.none(), st.integers(0, 5), st.just("4")),
    "paper_decoding": st.one_of(st.booleans(), st.just("no")),
    "nbest": st.one_of(st.none(), st.integers(0, 6)),
    "max_new_tokens": st.one_of(st.none(), st.integers(1, 4)),
    "target_prefixes": st.one_of(st.none(), st.just(["Ein"]), st.just("Ein")),
    "constraints": st.one_of(st.none(), st.just([["Mann"]]), st.just([[]]), st.just("Mann")),
    "avoid": st.one_of(st.none(), st.just([["Hund"]]), st.just([[" "]])),
    "glossary": st.one_of(st.none(), st.just({"man": "Mann"}), st.just(["man"])),
    "alignments": st.booleans(),
    "format": st.sampled_from(["text", "html", "xml-inline", "pdf"]),
    "split_sentences": st.booleans(),
    "language": st.sampled_from([None, "en", "english"]),
    "models": st.integers(0, 3),
}


@given(
    options=st.fixed_dictionaries({}, optional=OPTIONS),
    engine=st.sampled_from(list(ENGINES.values())),
    kernel=st.sampled_from([None, "sdpa", "eager", "flex_attention"]),
)
@settings(max_examples=600)
def test_every_combination_is_checked_or_refused_naming_a_field(options, engine, kernel):
    for spelling in (Spelling(), FLAGS):
        try:
            TranslationRequest(**options).check(engine, beams=4, spelling=spelling, kernel=kernel)
        except ValueError as refused:
            assert refused.field in FIELDS
            # As the argument (a type rule: a command's parser types its flags before), else the flag, as given.
            field = FLAGS.names.get(refused.field, refused.field) if spelling.flags else refused.field
            assert re.search(rf"(--|--no_|\b)({refused.field}|{field})\b", str(refused)), str(refused)


@pytest.mark.slow  # decodes up to 25 requests with a tiny model: over 5 s on 2 busy cores
@given(
    options=st.fixed_dictionaries(
        {}, optional={k: OPTIONS[k] for k in OPTIONS if k not in ("format", "models", "alignments")}
    )
)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_every_combination_gets_a_translation_or_a_refusal_naming_a_field(loaded, options):
    model, tokenizer = loaded
    nbest = options.pop("nbest", None)
    options = {"max_new_tokens": 4, **{k: v for k, v in options.items() if v is not None}, "progress": False}
    try:
        if nbest is None:
            got = translate(model, tokenizer, ["A man rides."], **options)
        else:
            got = translate_nbest(model, tokenizer, ["A man rides."], nbest, **options)
    except ValueError as refused:
        field = getattr(refused, "field", None)
        assert field in FIELDS or re.search(r"\b(num_beams|max_new_tokens|target_prefix|alignments)", str(refused))
        return
    assert len(got) == 1


@pytest.mark.slow  # five translations and their references: 13 s on 2 busy cores
def test_a_request_is_translated_by_the_function_its_options_choose(loaded):
    """translate_request, the one dispatch the command and the evaluation use: each kind of request answered as the
    library function of its kind answers the same options."""
    model, tokenizer = loaded
    texts, fast = ["A man rides a bike. A dog runs."], {"max_new_tokens": 4, "progress": False}
    plain = TranslationRequest(texts=texts, **fast)
    assert translate_request(model, tokenizer, plain) == translate(model, tokenizer, texts, **fast)
    lists = translate_request(model, tokenizer, replace(plain, texts=["A man."], nbest=2, num_beams=2))
    assert [[type(h) for h in hypotheses] for hypotheses in lists] == [[Hypothesis, Hypothesis]]
    assert lists == translate_nbest(model, tokenizer, ["A man."], 2, num_beams=2, **fast)
    aligned = translate_request(model, tokenizer, replace(plain, alignments=True))
    assert [type(line) for line in aligned] == [AlignedTranslation]
    assert aligned == translate_aligned(model, tokenizer, texts, **fast)
    marked = translate_request(model, tokenizer, replace(plain, texts=["<b>A</b> man."], format="xml-inline"))
    assert marked == translate_markup(model, tokenizer, ["<b>A</b> man."], "xml-inline", **fast)
    with pytest.raises(InputError, match="alignments=True with nbest=2"):
        translate_request(model, tokenizer, replace(plain, alignments=True, nbest=2))
    # Alignments with terminology: those of the translation that meets it (vaswani-serve answered them before the
    # request; the command and the pipeline now do too).
    one, terms = ["A man rides a bike."], [["Fahrrad"]]
    held = replace(plain, texts=one, alignments=True, constraints=terms, max_new_tokens=12)
    held = translate_request(model, tokenizer, held)
    room = {**fast, "max_new_tokens": 12}  # the constraint's pieces fit
    assert [line.text for line in held] == translate(model, tokenizer, one, constraints=terms, **room)
    assert "Fahrrad" in held[0].text
    assert held == translate_aligned(model, tokenizer, one, constraints=terms, **room)


@pytest.fixture
def checks(monkeypatch) -> list[str]:
    """Each run of `TranslationRequest.check`: the class of the request it checked (helpers/request_checks.py)."""
    return counted_checks(monkeypatch)


@pytest.mark.slow  # a dozen short decodes and a command run in process: about 8 s on 2 busy cores
def test_each_front_end_checks_a_request_once(checkpoint, loaded, checks, tmp_path, capsys):
    """Every request is checked exactly once in the command (before its model loads, the n-best list held to the
    model's stored beam), the library's functions, the one dispatch and the pipeline (the server: test_service.py):
    the entries under them run the checked request as it is. On 2c3ba1d the command checked 3 times, translate_request
    twice."""
    model, tokenizer = loaded
    fast = {"max_new_tokens": 3, "progress": False}
    translator = pipeline("vaswani-translation", model=model, tokenizer=tokenizer, max_new_tokens=3)
    lines, paragraphs = tmp_path / "lines.en", tmp_path / "paragraphs.en"
    lines.write_text("A man rides.\nTwo dogs.\n", encoding="utf-8")
    paragraphs.write_text("A man rides. A dog runs.\nTwo dogs.\n", encoding="utf-8")
    command = [str(checkpoint), "--max_new_tokens", "3", "--input"]
    front_ends = {
        "translate": lambda: translate(model, tokenizer, ["A man. A dog."], **fast),
        "translate_nbest": lambda: translate_nbest(model, tokenizer, ["A man."], 2, num_beams=2, **fast),
        "translate_aligned": lambda: translate_aligned(model, tokenizer, ["A man."], constraints=[["Mann"]], **fast),
        "translate_markup": lambda: translate_markup(model, tokenizer, ["<b>A</b> man."], "xml-inline", **fast),
        "word_alignments": lambda: word_alignments(model, tokenizer, ["A man."], ["Ein Mann."]),
        "translate_request": lambda: translate_request(model, tokenizer, TranslationRequest(["A."], nbest=2, **fast)),
        "pipeline": lambda: translator(["A man. A dog."], alignments=True),
        "pipeline, terms": lambda: translator("A man.", constraints=["Mann"], num_return_sequences=2),
        "vaswani-translate": lambda: translate_command.main([*command, str(paragraphs)]),
        "vaswani-translate --nbest": lambda: translate_command.main([*command, str(lines), "--nbest", "2"]),
        "vaswani-translate --format": lambda: translate_command.main([*command, str(lines), "--format", "xml-inline"]),
    }
    for name, front_end in front_ends.items():
        checks.clear()
        front_end()
        assert checks == ["TranslationRequest"], name
    assert capsys.readouterr().out.count("\n") == 2 + 2 * 2 + 2  # the commands answered: lines, n-best lists, lines


def test_a_request_checked_once_runs_without_a_second_and_no_unchecked_one_skips_it(loaded, checks):
    model, tokenizer = loaded
    asked = TranslationRequest(texts=["A man."], max_new_tokens=3, progress=False)
    checked = asked.check_for(model)
    assert type(checked) is CheckedRequest and checks == ["TranslationRequest"]
    assert translate_request(model, tokenizer, checked) == translate(model, tokenizer, ["A man."], max_new_tokens=3)
    assert checks == ["TranslationRequest", "TranslationRequest"]  # translate()'s own, not translate_request's
    with pytest.raises(TypeError, match="a TranslationRequest; expected a CheckedRequest"):
        decode_request(model, tokenizer, asked)
    with pytest.raises(ValueError, match="a request checked for 1 model.s. run with 2; expected the same"):
        translate_request(model, tokenizer, checked, ensemble=[model])


def test_the_beam_rule_asks_the_models_beam_only_for_an_nbest_list_that_names_none():
    asked = []

    def model_beams():
        asked.append(True)
        return 4

    assert TranslationRequest(nbest=3).beams_to_hold(model_beams) == 4
    assert TranslationRequest(nbest=3, num_beams=5).beams_to_hold(model_beams) is None
    assert TranslationRequest().beams_to_hold(model_beams) is None
    assert asked == [True]


@pytest.mark.slow  # two constrained beam searches of 12 tokens: about 4 s on 2 busy cores
def test_the_pipeline_answers_terminology_with_several_candidates_as_translate_nbest_does(loaded):
    """Refused before (num_return_sequences > 1 with terms); now each candidate meets them, the library's n-best
    list the reference."""
    model, tokenizer = loaded
    translator = pipeline("vaswani-translation", model=model, tokenizer=tokenizer, max_new_tokens=12)
    got = translator("A man rides a bike.", constraints=["Fahrrad"], num_return_sequences=2)
    expected = translate_nbest(
        model, tokenizer, ["A man rides a bike."], 2, constraints=[["Fahrrad"]], max_new_tokens=12, progress=False
    )
    assert [answer["translation_text"] for answer in got] == [hypothesis.text for hypothesis in expected[0]]
    assert all("Fahrrad" in answer["translation_text"] for answer in got)
    with pytest.raises(ValueError, match="text 1 holds 2 sentences"):
        translator(["A man. A dog."], glossary={"man": "Mann"}, num_return_sequences=2)
