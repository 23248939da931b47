"""Every public function of the library, given a value of the wrong type or outside its values for each argument it
checks (issue 51, item 18), refuses it with a TypeError or ValueError naming that argument, before any work: never an
AttributeError from deep inside, transformers' unused-model_kwargs error, or a str read as its truth."""

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from modeling_vaswani.toolkit.translation.alignment import translate_aligned, word_alignments
from modeling_vaswani.toolkit.translation.documents import translate_markup
from modeling_vaswani.toolkit.translation.pipeline import SplittingTranslationPipeline
from modeling_vaswani.toolkit.translation.scoring import score
from modeling_vaswani.toolkit.translation.translate import translate, translate_nbest, translate_sentences

ANYTHING = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8), st.binary(max_size=4),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)  # fmt: skip
NOT_BOOL = ANYTHING.filter(lambda value: not isinstance(value, bool))
NOT_COUNT = ANYTHING.filter(lambda value: type(value) is not int or value < 1)
NOT_OPTIONAL_COUNT = NOT_COUNT.filter(lambda value: value is not None)
# What a language code is, written here apart from the package's rule: 2 or 3 ASCII letters, then -subtags.
CODE = re.compile(r"[A-Za-z]{2,3}([-_][A-Za-z0-9]{1,8})*")
NOT_LANGUAGE = st.one_of(
    ANYTHING.filter(lambda value: value is not None and not isinstance(value, str)),
    st.text(max_size=12).filter(lambda text: not CODE.fullmatch(text.strip())),
    st.sampled_from(["", " ", "../../etc/passwd", "English", "de/../en", "12", "e", "deutsch"]),
)
NOT_GLOSSARY = st.one_of(
    ANYTHING.filter(lambda value: value is not None and not isinstance(value, dict)),
    st.dictionaries(st.text(max_size=4), st.one_of(st.integers(), st.none(), st.just("  ")), min_size=1, max_size=2),
)
NOT_FORMAT = ANYTHING.filter(lambda value: value not in ("html", "xml-inline"))

WRONG = {
    "batch_size": NOT_OPTIONAL_COUNT,
    "max_tokens": NOT_OPTIONAL_COUNT,
    "max_input_tokens": NOT_OPTIONAL_COUNT,
    "nbest": NOT_COUNT,
    "first_line": NOT_COUNT,
    "first": NOT_COUNT,
    "paper_decoding": NOT_BOOL,
    "progress": NOT_BOOL,
    "split_sentences": NOT_BOOL,
    "alignments": NOT_BOOL,
    "language": NOT_LANGUAGE,
    "glossary": NOT_GLOSSARY,
    "format": NOT_FORMAT,
}
TRANSLATING = ["batch_size", "max_tokens", "max_input_tokens", "paper_decoding", "progress", "split_sentences"]
TRANSLATING += ["language", "first_line", "glossary"]
LINES = ["A man rides a bike."]


MARKUP = ["format", "language", "batch_size", "max_tokens", "max_input_tokens", "paper_decoding", "progress", "first"]
BATCHING = ["batch_size", "max_tokens", "max_input_tokens", "progress"]
PIPELINE = ["split_sentences", "language", "alignments", "glossary", "paper_decoding", "max_input_tokens"]
CHECKED = {
    "translate": TRANSLATING,
    "translate_sentences": TRANSLATING,
    "translate_nbest": [*TRANSLATING, "nbest"],
    "translate_aligned": TRANSLATING,
    "translate_markup": MARKUP,
    "score": BATCHING,
    "word_alignments": BATCHING,
}
CASES = [(function, argument) for function, arguments in CHECKED.items() for argument in arguments]


@pytest.fixture(scope="module")
def functions(loaded):
    """Each public function as a call taking the keyword argument under test."""
    model, tokenizer = loaded
    pipe = SplittingTranslationPipeline(model=model, tokenizer=tokenizer)
    return {
        "translate": lambda **k: translate(model, tokenizer, LINES, **k),
        "translate_sentences": lambda **k: translate_sentences(model, tokenizer, LINES, **k),
        "translate_nbest": lambda **k: translate_nbest(model, tokenizer, LINES, **{"nbest": 2, "num_beams": 4, **k}),
        "translate_aligned": lambda **k: translate_aligned(model, tokenizer, LINES, **k),
        "translate_markup": lambda **k: translate_markup(model, tokenizer, ["<b>A</b> man."], **k),
        "score": lambda **k: score(model, tokenizer, LINES, ["Ein Mann."], **k),
        "word_alignments": lambda **k: word_alignments(model, tokenizer, LINES, ["Ein Mann."], **k),
        "pipeline call": lambda **k: pipe(LINES[0], **k),
        "pipeline creation": lambda **k: SplittingTranslationPipeline(model=model, tokenizer=tokenizer, **k),
    }


def assert_refused_naming(call, argument: str, value) -> None:
    with pytest.raises((TypeError, ValueError)) as refused:
        call(**{argument: value})
    message = str(refused.value)
    assert re.search(rf"\b{argument}\b", message), (argument, value, message)
    assert "model_kwargs" not in message, message  # transformers' error, after the tokenizing


@pytest.mark.parametrize(("function", "argument"), CASES)
@given(data=st.data())
def test_each_argument_of_each_function_is_refused_by_name(functions, function, argument, data):
    assert_refused_naming(functions[function], argument, data.draw(WRONG[argument], label=argument))


@pytest.mark.parametrize("argument", PIPELINE)
@given(data=st.data())
def test_the_pipelines_arguments_are_refused_by_name(functions, argument, data):
    value = data.draw(WRONG[argument], label=argument)
    if argument in ("split_sentences", "paper_decoding", "max_input_tokens"):
        value = value if value is not None else "no"  # None means "as at creation" per call
    assert_refused_naming(functions["pipeline call"], argument, value)
    if argument in ("split_sentences", "language") and value is not None:
        assert_refused_naming(functions["pipeline creation"], argument, value)


@given(name=st.from_regex(r"[a-z][a-z_]{2,12}", fullmatch=True))
def test_an_argument_neither_the_pipeline_nor_generate_takes_is_refused_by_name(functions, name):
    from modeling_vaswani.toolkit.translation.pipeline import generate_arguments

    known = {"split_sentences", "language", "alignments", "constraints", "avoid", "glossary", "batch_size"}
    if name in generate_arguments() or name in known or name.startswith(("num_workers", "_")):
        return
    assert_refused_naming(functions["pipeline call"], name, "pdf")


def test_the_issues_cases(functions, loaded):
    """split_sentences="no" was read as True, format="pdf" met transformers' error, a glossary dict an
    AttributeError."""
    call = functions["pipeline call"]
    with pytest.raises(TypeError, match=r"split_sentences='no'; expected True or False"):
        call(split_sentences="no")
    with pytest.raises(ValueError, match=r"format='pdf' is no argument of the vaswani-translation pipeline"):
        call(format="pdf")
    model, tokenizer = loaded
    glossary = {"bike": "Fahrrad"}
    got = translate(model, tokenizer, LINES, glossary=glossary, max_new_tokens=12, progress=False)
    assert "Fahrrad" in got[0]


@pytest.mark.parametrize(("function", "argument"), [("translate", "split_sentences"), ("score", "batch_size")])
def test_a_refusal_names_a_long_value_without_echoing_it_whole(functions, function, argument):
    """A value of a megabyte (or a list of 100,000 phrases) is named by its start, not written back whole into the
    error, a log line or a server's answer."""
    for value in ("x" * 2**20, list(range(100_000))):
        with pytest.raises((TypeError, ValueError)) as refused:
            functions[function](**{argument: value})
        assert argument in str(refused.value) and len(str(refused.value)) < 400, str(refused.value)[:500]


def test_a_long_list_of_phrases_is_named_by_its_start(loaded):
    model, tokenizer = loaded
    with pytest.raises(ValueError, match=r"constraints of input 1 is 'Hund Hund") as refused:
        translate(model, tokenizer, LINES, constraints=["Hund " * 100_000], split_sentences=False, progress=False)
    assert len(str(refused.value)) < 400
