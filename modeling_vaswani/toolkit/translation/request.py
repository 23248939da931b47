"""One translation request, and its check: the one home of every refusal a translation can get by what it asks (an
option of the wrong type, options that do not go together, what the engine or the model's attention kernel cannot
do, an n-best list longer than its beam). vaswani-translate, the library's functions, the pipeline and vaswani-serve
build a `TranslationRequest` and check it once, before any work (`check`, or `check_for` a loaded model); the check
gives back a `CheckedRequest`, which the translating entries (`translate_request`, translate.py's `decode_request`)
run without checking it again. Each refusal is a `RequestError` naming its field as the front end names it
(`Spelling`: the library's and the API's arguments, or a command's flags). What needs the text tokenized (a sentence
over the input limit, a prefix or constraints leaving no room) is refused where it is tokenized, in translate.py and
terminology.py, each once."""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace

from ..values import shown
from .arguments import RULES, count, markup_format, optional_count
from .engines import CAPABILITIES, ENGINES, Engine, engine_of
from .errors import RequestError
from .terminology import Glossary

PHRASES = ("constraints", "avoid", "glossary")  # the terminology a search meets
HELD = ("constraints", "glossary")  # phrases to hold: only the paper's beam search meets them
LIMITS = ("num_beams", "max_new_tokens")  # the request's fields that are generate()'s arguments
# The attention kernels that return their weights (output_attentions); the others (flex, flash) return none.
WEIGHT_KERNELS = ("eager", "sdpa")


@dataclass(frozen=True)
class Spelling:
    """How a front end names a request's fields in its refusals: the library's and the API's arguments
    (`paper_decoding=False`, a remedy "expected paper_decoding=True"), or, with `flags`, a command's
    (`--no_paper_decoding`, "drop --no_paper_decoding"). `names`: a field the front end calls otherwise (the command's
    --source_lang is the request's `language`, the pipeline's num_return_sequences its `nbest`)."""

    flags: bool = False
    names: Mapping[str, str] = field(default_factory=dict)

    def name(self, field_name: str) -> str:
        name = self.names.get(field_name, field_name)
        return f"--{name}" if self.flags else name

    def given(self, field_name: str, value) -> str:
        """The option as the caller gave it: `--nbest 3`, `--no_paper_decoding`, `--constraints`; `nbest=3`."""
        name = self.name(field_name)
        if not self.flags:
            return name if field_name in PHRASES or field_name == "target_prefixes" else f"{name}={shown(value)}"
        if value is False:  # a switch on by default: its --no_ flag
            return f"--no_{name[2:]}"
        return name if value is True or field_name in PHRASES or field_name == "target_prefixes" else f"{name} {value}"

    def remedy(self, request: "TranslationRequest", names: Sequence[str], joiner: str = " or ") -> str:
        """How to ask without `names`: "drop --nbest or --alignments or give --format text"; "expected nbest=None or
        alignments=False, or format='text'". A switch or a list is dropped, a setting given its default."""
        dropped = [name for name in names if DEFAULTS[name] is None or isinstance(DEFAULTS[name], bool)]
        reset = [name for name in names if name not in dropped]
        if self.flags:
            off = {name for name in dropped if getattr(request, name) is False}  # a switch's --no_ flag
            flags = [self.given(name, False) if name in off else self.name(name) for name in dropped]
            ways = [f"drop {joiner.join(flags)}"] if dropped else []
            return " or ".join(ways + [f"give {self.given(name, DEFAULTS[name])}" for name in reset])
        ways = [joiner.join(f"{self.name(name)}={DEFAULTS[name]!r}" for name in dropped)] if dropped else []
        return "expected " + ", or ".join(ways + [f"{self.name(name)}={DEFAULTS[name]!r}" for name in reset])


ARGUMENTS = Spelling()


@dataclass(frozen=True)
class TranslationRequest:
    """What a translation asks: its texts (sentences, lines that may hold paragraphs, or documents) and every option
    a translation takes, as `translate`, `translate_nbest`, `translate_aligned` and `translate_markup` take them.
    `models`: how many decode it (more than one, an ensemble); `nbest`: an n-best list's length (None: one
    translation); `format`: "text", or markup ("html", "xml-inline")."""

    texts: Sequence[str] = ()
    num_beams: int | None = None
    paper_decoding: bool = True
    nbest: int | None = None
    max_new_tokens: int | None = None
    target_prefixes: Sequence[str] | None = None
    constraints: Sequence[Sequence[str]] | None = None
    avoid: Sequence[Sequence[str]] | None = None
    glossary: Glossary | dict | None = None
    alignments: bool = False
    format: str = "text"
    split_sentences: bool = True
    language: str | None = None
    models: int = 1
    batch_size: int | None = None
    max_tokens: int | None = None
    max_input_tokens: int | None = None
    first_line: int = 1
    progress: bool = True

    def asks(self, field_name: str) -> bool:
        """Whether the request asks for `field_name`'s option: a phrase list holding a phrase, a non-empty glossary,
        a switch turned on, a value other than its default."""
        value = getattr(self, field_name)
        if field_name in ("constraints", "avoid"):
            return value is not None and any(value)
        if field_name == "glossary":
            return value is not None and bool(value.terms if isinstance(value, Glossary) else value)
        return value != DEFAULTS[field_name]

    def check(
        self,
        engine: type[Engine],
        beams: int | None = None,
        model: str | None = None,
        spelling: Spelling = ARGUMENTS,
        kernel: str | None = None,
    ) -> "CheckedRequest":
        """The request as it is to be run (a glossary dict as a `Glossary`, a language code stripped), after refusing
        (`RequestError`, naming the field) what it cannot get on `engine`: an option of the wrong type or value
        (`arguments.RULES`), options that do not go together, a capability the engine lacks (`Engine.can`), attention
        weights from a `kernel` that returns none, and an n-best list longer than its beam (`num_beams`, else
        `beams`, the model's where known). `model` names the model in refusals of the engine; `spelling`, the
        fields."""
        checked = CheckedRequest(**{**self.__dict__, **rule_checked(self, spelling)})
        for refuse in REFUSALS:
            refuse(checked, engine, beams, model or "the model", spelling)
        refuse_attention_without_weights(checked, kernel, spelling)
        return checked

    def check_for(self, loaded, model: str | None = None, spelling: Spelling = ARGUMENTS) -> "CheckedRequest":
        """`check` for a `loaded` model: its engine, its beam count where an n-best list is held to it
        (`beams_to_hold`), its attention kernel."""
        beams = self.beams_to_hold(lambda: loaded.generation_config.num_beams)
        return self.check(engine_of(loaded), beams, model, spelling, attention_kernel(loaded))

    def beams_to_hold(self, model_beams: Callable[[], int]) -> int | None:
        """The beam count an n-best list is held to beyond the request's own: the model's (`model_beams()`, asked
        only then) where the request asks an n-best list and names no beam count; else None."""
        return None if self.num_beams or self.nbest is None else model_beams()

    def limits(self) -> dict:
        """generate()'s arguments the request gives (`LIMITS`), those it sets."""
        return {name: value for name in LIMITS if (value := getattr(self, name)) is not None}


@dataclass(frozen=True)
class CheckedRequest(TranslationRequest):
    """A request as its check gave it back: the translating entries that take one (`translate_request`,
    translate.py's `decode_request` and `decode_nbest`) run it without checking it again. What its check stood for
    may be filled in (`dataclasses.replace`): the texts, and the phrases or prefixes of files the check saw named."""


def attention_kernel(loaded) -> str | None:
    """The attention kernel a loaded model runs (transformers' record of it, on its config); None where it has none."""
    return getattr(getattr(loaded, "config", None), "_attn_implementation", None)


def check_nbest(engine: type[Engine], nbest: int, num_beams: int) -> CheckedRequest:
    """An engine's n-best list asked directly (its model's `generate_nbest`), checked as any request is: refused
    (`RequestError`) where `nbest` is past `num_beams` or the search is not a beam search. The engines' one check of
    it; the translating entries, whose request its front end checked once already, call `generate_checked_nbest`."""
    return TranslationRequest(nbest=nbest, num_beams=num_beams).check(engine)


# generate()'s options that the exported engines' searches take, beside the batch and `nbest`.
EXPORTED_OPTIONS = ("paper_decoding", "num_beams", "max_new_tokens", "target_prefix")


class ExportedModel:
    """What the exported engines' models (`ctranslate2.CTranslate2Model`, `onnxruntime.OnnxRuntimeModel`) share
    around the one method each writes, `nbest_hypotheses(input_ids, attention_mask, nbest, paper_decoding,
    num_beams, max_new_tokens, target_prefix)` (each row's `nbest` best hypotheses, as (output ids, score) pairs):
    `generate_checked_nbest`, the call every translating entry makes (the options checked, the request not again),
    `generate`, its best hypotheses, and `generate_nbest`, an n-best list asked directly, checked as a request's
    (`check_nbest`) first. A subclass names its engine (`engine`, a key of engines.ENGINES) and its `num_beams`."""

    engine: str
    num_beams: int
    options = EXPORTED_OPTIONS  # what its search takes: a subclass may add its own

    def generate_checked_nbest(self, input_ids, attention_mask=None, nbest: int = 1, **options):
        """Each row's `nbest` best hypotheses (`nbest_hypotheses`, the engine's search), after the one check of the
        options a call gives: an option the exported engines' search does not take (generate()'s others:
        early_stopping, do_sample, max_length, ...) is refused by name before any work, not met by a TypeError."""
        if unknown := sorted(set(options) - set(self.options)):
            given = ", ".join(f"{name}={options[name]!r}" for name in unknown)
            raise ValueError(
                f"{given}: the {ENGINES[self.engine].title} engine's search takes {', '.join(self.options)} "
                "only; expected those, or the checkpoint it was exported from on the PyTorch engine for generate()'s "
                "other options"
            )
        return self.nbest_hypotheses(input_ids, attention_mask, nbest, **options)

    def generate(self, input_ids, attention_mask=None, **options) -> list[list[int]]:
        """Each row's output token ids (`</s>` included where it was generated): its best hypothesis."""
        rows = self.generate_checked_nbest(input_ids, attention_mask, 1, **options)
        return [hypotheses[0][0] for hypotheses in rows]

    def generate_nbest(self, input_ids, attention_mask=None, nbest: int = 1, **options):
        """`generate_checked_nbest`, `nbest` checked first: refused where it is past the beam (`num_beams`, else the
        export's) or the search is not a beam search."""
        check_nbest(ENGINES[self.engine], nbest, options.get("num_beams") or self.num_beams)
        return self.generate_checked_nbest(input_ids, attention_mask, nbest, **options)


def checked(request: TranslationRequest) -> CheckedRequest:
    """`request`, which must be a `CheckedRequest`: an entry that skips the check refuses (TypeError) one that never
    had it, loudly, rather than run it unchecked."""
    if not isinstance(request, CheckedRequest):
        raise TypeError(f"a {type(request).__name__}; expected a CheckedRequest (TranslationRequest.check's)")
    return request


DEFAULTS = {each.name: each.default for each in fields(TranslationRequest)}
TYPED = {  # the fields with a type rule, and their rule where it is not arguments.RULES' of their name
    "nbest": lambda name, value: None if value is None else count(name, value),
    "num_beams": optional_count,
    "max_new_tokens": optional_count,
    "models": count,
    "format": lambda name, value: value if value == "text" else markup_format(name, value),
    **{name: None for name in ("paper_decoding", "split_sentences", "alignments", "progress", "language", "glossary",
                                "batch_size", "max_tokens", "max_input_tokens", "first_line")},
}  # fmt: skip


def rule_checked(request: TranslationRequest, spelling: Spelling) -> dict:
    """Each typed field's value as it is to be used, refused (naming it, with its `field`) where its rule does."""
    values = {}
    for name, rule in TYPED.items():
        try:
            value = getattr(request, name)
            values[name] = (rule or RULES[name])(spelling.name(name), value)
        except ValueError as error:  # with its `field`; a TypeError stays one, save for a command's (its flags')
            if spelling.flags:
                raise RequestError(str(error), name) from None
            error.field = name
            raise
    return values


def asked(request: TranslationRequest, names: Sequence[str], spelling: Spelling) -> list[str]:
    return [spelling.given(name, getattr(request, name)) for name in names if request.asks(name)]


def refuse_ensemble_without_the_paper(request, engine, beams, model, spelling) -> None:
    if request.models > 1 and not request.paper_decoding:
        raise RequestError(
            "an ensemble (several models) decodes with the paper's decoding; "
            + spelling.remedy(request, ["paper_decoding"]),
            "paper_decoding",
        )


def refuse_alignments_with(request, engine, beams, model, spelling) -> None:
    """Word alignments are of an input's one translation (with terminology, of the translation that meets it)."""
    if request.alignments and request.nbest is not None:
        given = f"{spelling.given('alignments', True)} with {spelling.given('nbest', request.nbest)}"
        remedy = spelling.remedy(request, ["nbest", "alignments"])
        raise RequestError(f"{given}; alignments are of each input's one translation: {remedy}", "alignments")


def refuse_held_phrases_without_the_paper(request, engine, beams, model, spelling) -> None:
    """Phrases to hold are met by the paper's beam search (dynamic beam allocation); phrases to avoid hold in both."""
    held = [name for name in HELD if request.asks(name)]
    if held and not request.paper_decoding:
        raise RequestError(
            f"{' and '.join(asked(request, held, spelling))} need(s) the paper's decoding (its own beam search meets "
            f"them); {spelling.remedy(request, ['paper_decoding'])}",
            held[0],
        )


def refuse_markup_with(request, engine, beams, model, spelling) -> None:
    """A document is written back with its markup one way: one translation, split as the markup is."""
    if request.format == "text":
        return
    clashing = [
        name for name in ("nbest", "alignments", "target_prefixes", "split_sentences", *PHRASES) if request.asks(name)
    ]
    if clashing:
        raise RequestError(
            f"{spelling.given('format', request.format)} writes the translation with its markup, one way; "
            + spelling.remedy(request, [*clashing, "format"], " and "),
            "format",
        )


def refuse_language_without_splitting(request, engine, beams, model, spelling) -> None:
    """A language chooses the rules texts are split into sentences by: a request that splits none has no use for it."""
    if request.language is not None and not request.split_sentences:
        given = spelling.given("language", request.language)
        raise RequestError(
            f"{given} chooses how texts are split into sentences; "
            + spelling.remedy(request, ["language", "split_sentences"]),
            "language",
        )


def refuse_what_the_engine_cannot(request, engine, beams, model, spelling) -> None:
    """Each capability the request needs and `engine` lacks (`Engine.can`), named once here for every engine."""
    for capability, names in (
        ("attention", [name for name in ("alignments", "format") if request.asks(name)]),
        ("constraints", [name for name in PHRASES if request.asks(name)]),
        ("ensembles", ["models"] if request.models > 1 else []),
    ):
        if names and capability not in engine.can:
            what = CAPABILITIES[capability]
            instead = f": {engine.instead}" if engine.instead else ""
            raise RequestError(
                f"{' and '.join(spelling.given(name, getattr(request, name)) for name in names)} need(s) "
                f"{what.need}; {model} runs on {engine.title}, which {what.lack}{instead} "
                f"({spelling.remedy(request, names)})",
                names[0],
            )


def refuse_nbest_past_the_beam(request, engine, beams, model, spelling) -> None:
    """An n-best list holds the search's finished hypotheses: at most one a beam, of a beam search."""
    beams = request.num_beams or beams
    if request.nbest is not None and beams is not None and (beams < 2 or request.nbest > beams):
        raise RequestError(
            f"{spelling.given('nbest', request.nbest)} with {spelling.given('num_beams', beams)}; expected beam "
            "search (num_beams of at least 2) with at least nbest beams: an n-best list holds the search's finished "
            "hypotheses",
            "nbest",
        )


def refuse_attention_without_weights(request, kernel: str | None, spelling: Spelling) -> None:
    """Word alignments (and markup, placed by them) read the attention weights, which only some of transformers'
    attention kernels return (`kernel`: the one the model was loaded with; None where unknown)."""
    names = [name for name in ("alignments", "format") if request.asks(name)]
    if names and kernel is not None and kernel not in WEIGHT_KERNELS:
        raise RequestError(
            f"{' and '.join(spelling.given(name, getattr(request, name)) for name in names)} need(s) the attention "
            f"weights, which the model's {kernel!r} attention does not return; expected a model loaded with one of "
            f"{list(WEIGHT_KERNELS)} (from_pretrained(attn_implementation='sdpa')), or "
            + spelling.remedy(request, names),
            names[0],
        )


REFUSALS = (
    refuse_ensemble_without_the_paper,
    refuse_language_without_splitting,
    refuse_alignments_with,
    refuse_held_phrases_without_the_paper,
    refuse_markup_with,
    refuse_what_the_engine_cannot,
    refuse_nbest_past_the_beam,
)


def translate_request(model, tokenizer, request: TranslationRequest, **generate_kwargs) -> list:
    """`request`'s texts translated by `model`, one output a text, by the function its options choose: with markup,
    `documents.translate_markup`'s (a str a document); with alignments, `alignment.translate_aligned`'s (an
    AlignedTranslation a line); with `nbest`, `translate.translate_nbest`'s (a list of Hypothesis a line); else
    `translate.translate`'s (a str a line). A `CheckedRequest` runs as it is (its front end checked it); any other
    is checked here, once, for the loaded model (`check_for`). `generate_kwargs`: generate()'s own beyond the request
    (an ensemble's other models, stopping criteria)."""
    from .alignment import align_request  # they import this module for the check: imported once it has loaded
    from .documents import markup_request
    from .translate import decode_nbest, decode_request

    models = 1 + len(generate_kwargs.get("ensemble") or ())
    if not isinstance(request, CheckedRequest):
        request = replace(request, models=models).check_for(model)
    elif request.models != models:
        raise ValueError(f"a request checked for {request.models} model(s) run with {models}; expected the same")
    if request.format != "text":
        return markup_request(model, tokenizer, request, **generate_kwargs)
    if request.alignments:
        return align_request(model, tokenizer, request, **generate_kwargs)
    if request.nbest is not None:
        return decode_nbest(model, tokenizer, request, **generate_kwargs)
    layout, _, translations = decode_request(model, tokenizer, request, **generate_kwargs)
    return translations if layout is None else layout.join(translations)
