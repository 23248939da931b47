"""The "vaswani-translation" pipeline where the package is installed: the payload's pipeline, with texts split into
sentences. The payload (pipeline_vaswani.py) travels as remote code and imports only torch and transformers, so the
splitter (sentencex) cannot be there: the package registers this subclass for the task instead (modeling_vaswani's
__init__), and a checkpoint loaded as remote code, where the package is not installed, gets the payload's pipeline,
which translates each text whole as one sentence.
"""

import functools
import inspect
from dataclasses import dataclass

import torch

from ...pipeline_vaswani import VaswaniTranslationPipeline
from ..data.sentences import Layout, split_lines


@functools.cache
def generate_arguments() -> frozenset[str]:
    """What the pipeline hands to generate() and generate() takes: the payload pipeline's own (`_sanitize_parameters`),
    the payload generate()'s extras, transformers' generate() parameters and every GenerationConfig setting."""
    from transformers import GenerationConfig, GenerationMixin

    own = {"paper_decoding", "max_input_tokens", "target_prefix", "ensemble", "constraints", "avoid"}
    parameters = set(inspect.signature(GenerationMixin.generate).parameters) - {"self", "kwargs", "inputs"}
    return frozenset(own | parameters | set(GenerationConfig().to_dict()))


@dataclass(frozen=True)
class Sentence:
    """One sentence of a call, as the pipeline's preprocess receives it: its text, and whether it is the first of
    its text (the one a `target_prefix` starts)."""

    text: str
    first: bool
    index: int = -1  # its place among the call's sentences, for the call's terminology (`_phrase_ids`)


class SplittingTranslationPipeline(VaswaniTranslationPipeline):
    """Identical to `VaswaniTranslationPipeline` except: texts are split into sentences (sentencex, by the model's
    source language), all the sentences of a call are translated together (`batch_size` sentences a `generate()`
    call), and each text's translations are joined with the text's own spacing; an empty or blank text gives "".

    `split_sentences=False` (at creation or per call) translates each text whole, as the payload's pipeline does.
    `language="de"` (at creation or per call) sets the splitter's language; by default it is the model's source
    language as its training recorded it (results.json beside a local or Hub model, else the tokenizer's
    configuration), else sentencex's generic rules. `target_prefix` starts the translation of each text's first
    sentence. With `num_return_sequences` > 1 a text that splits into several sentences is refused (ValueError): the
    candidates of a paragraph would be combinations of its sentences' ones. `alignments=True` (per call) adds to each
    result an "alignment": the word alignment `alignment.translate_aligned` gives, (source word, target word) pairs
    in the positions of the text's and the translation's `split()` (a paragraph's words counted across its
    sentences); refused (ValueError) with `num_return_sequences` > 1. A text longer than `max_input_tokens`
    (default: the model's `max_position_embeddings`) is refused by its sentence, before any translating.

    `save_pretrained` saves it as the payload's pipeline (the model, whose save writes pipeline_vaswani.py and declares
    it in config.json, and the tokenizer): this module is toolkit code, which does not run as remote code.
    """

    def __init__(self, *args, split_sentences: bool = True, language: str | None = None, **kwargs):
        from .arguments import check_arguments  # the package's import stays light: lxml loads at first use
        from .terminology import NO_PHRASES

        checked = check_arguments(split_sentences=split_sentences, language=language)
        super().__init__(*args, **kwargs)
        self.split_sentences, self.language = checked["split_sentences"], checked["language"]
        self._model_language, self._model_language_known = None, False
        self._phrase_ids = NO_PHRASES  # the current call's phrases to hold and to avoid, as ids, one list a sentence

    def model_language(self) -> str | None:
        """The model's source language as its training recorded it, looked up once (None: not recorded)."""
        if not self._model_language_known:
            # Imported when a text is first split: `import modeling_vaswani` registers this class, and stays light.
            from .translate import source_language

            name = getattr(self.model, "name_or_path", None) or None
            self._model_language = source_language(name, self.tokenizer)
            self._model_language_known = True
        return self._model_language

    def __call__(
        self,
        inputs,
        split_sentences: bool | None = None,
        language: str | None = None,
        alignments: bool = False,
        constraints=None,
        avoid=None,
        glossary=None,
        **kwargs,
    ):
        from .engines import engine_of
        from .request import Spelling, TranslationRequest, attention_kernel

        candidates = self.candidates(kwargs)
        request = TranslationRequest(
            nbest=candidates if candidates > 1 else None,
            alignments=alignments,
            constraints=constraints,
            avoid=avoid,
            glossary=glossary,
            language=language,
            split_sentences=self.split_sentences if split_sentences is None else split_sentences,
            progress=False,  # a pipeline shows no bar
        ).check(
            engine_of(self.model), spelling=Spelling(names={"nbest": "num_return_sequences"}),
            kernel=attention_kernel(self.model),
        )  # fmt: skip
        split, language, glossary = request.split_sentences, request.language, request.glossary
        if alignments and not split and not isinstance(inputs, (str, list)):  # a generator is read as it is translated
            raise ValueError(f"alignments=True on a {type(inputs).__name__} of texts; expected a str or a list of str")
        if constraints is not None or avoid is not None or glossary is not None:
            return self.translate_terminology(inputs, request, candidates, kwargs)
        if not split:
            results = super().__call__(inputs, **kwargs)
            if alignments:  # one result a text (one candidate): each text aligned whole
                texts = [inputs] if isinstance(inputs, str) else inputs
                self.add_alignments(request, results, texts, [result["translation_text"] for result in results])
            return results
        single = isinstance(inputs, str)
        if not single and not isinstance(inputs, list):
            raise ValueError(
                f"a {type(inputs).__name__} of texts; expected a str or a list of str (split_sentences=False takes "
                "what the payload's pipeline takes, generators and datasets too)"
            )
        texts = [inputs] if single else inputs
        for number, text in enumerate(texts, start=1):
            if not isinstance(text, str):
                raise ValueError(f"text {number} is a {type(text).__name__}; expected a str")
        layout = split_lines(texts, language or self.language or self.model_language(), unit="text")
        self.check(layout, candidates, kwargs.get("max_input_tokens"))
        results = []
        if layout.sentences:
            firsts = set(layout.starts)
            items = [Sentence(text, i in firsts) for i, text in enumerate(layout.sentences)]
            results = [r if isinstance(r, list) else [r] for r in super().__call__(items, **kwargs)]
        return self.answers(request, single, len(texts), layout.sentences, results, candidates, layout)

    def candidates(self, kwargs: dict) -> int:
        """How many translations a text the call asks (`num_return_sequences`, of the call or of the pipeline)."""
        return kwargs.get("num_return_sequences", self._forward_params.get("num_return_sequences")) or 1

    def translate_terminology(self, inputs, request, candidates: int, kwargs: dict):
        """A call with terminology (translation/terminology.py), its `request` checked: `constraints` and `avoid`,
        one list of phrases a text (for one text, its list), `glossary`, source term to target term; each sentence's
        phrases reach generate() with its row. Answered as a call without: `candidates` translations a text, each
        meeting the terms."""
        from .terminology import NO_PHRASES, SentencePhrases, phrase_ids, sentence_terms

        single = isinstance(inputs, str)
        texts = [inputs] if single else list(inputs)
        constraints, avoid = (
            [value] if single and value is not None else value for value in (request.constraints, request.avoid)
        )
        split, language = request.split_sentences, request.language or self.language or self.model_language()
        layout = split_lines(texts, language, unit="text") if split else None
        if split:
            self.check(layout, candidates, kwargs.get("max_input_tokens"))
        sentences = layout.sentences if split else texts
        phrases = sentence_terms(layout, sentences, constraints, avoid, request.glossary, self.tokenizer)
        self._phrase_ids = SentencePhrases(*(phrase_ids(self.tokenizer, rows) for rows in phrases))
        try:
            firsts = set(layout.starts) if split else set(range(len(texts)))
            items = [Sentence(text, i in firsts, i) for i, text in enumerate(sentences)]
            results = [r if isinstance(r, list) else [r] for r in super().__call__(items, **kwargs)] if items else []
        finally:
            self._phrase_ids = NO_PHRASES
        return self.answers(request, single, len(texts), sentences, results, candidates, layout)

    def answers(self, request, single: bool, texts: int, sentences, results: list, candidates: int, layout=None):
        """The call's answer from its `sentences`' `results` (a list of candidates each): one list of candidates a
        text, each candidate its sentences' candidates of that rank, joined (`layout`; None: a sentence a text), with
        alignments (of the translations that meet the terminology) where the request asks them; for one text its
        list, for several one answer a text (one candidate) or their lists."""
        ranked = [[result[rank]["translation_text"] for result in results] for rank in range(candidates)]
        joined = [translations if layout is None else layout.join(translations) for translations in ranked]
        per_text = [[{"translation_text": rank[i]} for rank in joined] for i in range(texts)]
        if request.alignments:  # one candidate a text (the request's check)
            self.add_alignments(request, [answer[0] for answer in per_text], sentences, ranked[0], layout)
        if single:
            return per_text[0]
        return [answer[0] for answer in per_text] if candidates == 1 else per_text

    def add_alignments(self, request, answers: list[dict], sources: list[str], translations: list[str], layout=None):
        """Adds each answer's "alignment": `translations` (one a source) aligned to `sources` by
        `alignment.request_alignments` for the call's checked `request`; with `layout` (the sources are its sentences,
        the answers its lines), in the lines' word positions (`alignment.line_alignments`)."""
        from .alignment import line_alignments, request_alignments

        pairs = request_alignments(self.model, self.tokenizer, sources, translations, request) if sources else []
        if layout is not None:
            pairs = line_alignments(layout, translations, pairs)
        for answer, links in zip(answers, pairs, strict=True):
            answer["alignment"] = links

    def check(self, layout: Layout, candidates: int, max_input_tokens: int | None) -> None:
        """Refuses (ValueError), before any translating, a text of several sentences when `candidates` > 1, and a
        sentence longer than the input limit, naming the text and the sentence's first words."""
        if candidates > 1:
            for line, start in enumerate(layout.starts):
                if layout.count(line) > 1:
                    raise ValueError(
                        f"text {line + 1} holds {layout.count(line)} sentences ({layout.name(start + 1)} and "
                        f"{layout.count(line) - 1} more); num_return_sequences={candidates} returns one sentence's "
                        "candidates: expected one sentence a text, or split_sentences=False to translate it whole"
                    )
        if max_input_tokens is not None:
            self._sanitize_parameters(max_input_tokens=max_input_tokens)  # refuses one that is no count
        limit = max_input_tokens or self._preprocess_params.get("max_input_tokens")
        source = "max_input_tokens" if limit else "the model's max_position_embeddings"
        limit = limit or self.model.config.max_position_embeddings
        if not layout.sentences:
            return
        lengths = [len(ids) for ids in self.tokenizer(layout.sentences)["input_ids"]]
        for number, length in enumerate(lengths, start=1):
            if length > limit:
                raise ValueError(
                    f"{layout.name(number)} is {length} tokens long, more than the limit of {limit} ({source}); "
                    "expected a shorter sentence"
                )

    def _sanitize_parameters(self, **kwargs):
        """Refuses (ValueError) an argument neither the pipeline nor generate() takes, naming it, before transformers'
        generate() would, after the tokenizing, as model_kwargs it does not use; and a `paper_decoding` that is no
        bool (TypeError)."""
        unknown = sorted(set(kwargs) - generate_arguments())
        if unknown:
            raise ValueError(
                f"{unknown[0]}={kwargs[unknown[0]]!r} is no argument of the vaswani-translation pipeline nor of "
                "generate(); expected the pipeline's (split_sentences, language, alignments, constraints, avoid, "
                "glossary, paper_decoding, target_prefix, max_input_tokens, batch_size) or generate()'s (num_beams, "
                "max_new_tokens, length_penalty, ...)"
            )
        if kwargs.get("paper_decoding") is not None:
            from .arguments import check_arguments

            check_arguments(paper_decoding=kwargs["paper_decoding"])
        return super()._sanitize_parameters(**kwargs)

    def preprocess(self, text, max_input_tokens=None):
        if not isinstance(text, Sentence):
            return super().preprocess(text, max_input_tokens)
        model_inputs = super().preprocess(text.text, max_input_tokens)
        model_inputs["first_sentence"] = torch.tensor([[int(text.first)]])  # batched with the ids, by row
        model_inputs["sentence_index"] = torch.tensor([[text.index]])
        return model_inputs

    def _forward(self, model_inputs, paper_decoding=True, target_prefix=None, **generate_kwargs):
        first = model_inputs.pop("first_sentence", None)
        index = model_inputs.pop("sentence_index", None)
        rows = [] if index is None else index.view(-1).tolist()
        for name, phrases in zip(("constraints", "avoid"), self._phrase_ids, strict=True):
            if phrases is not None and any(phrases[row] for row in rows):
                generate_kwargs[name] = [phrases[row] for row in rows]
        if first is None or target_prefix is None:
            return super()._forward(model_inputs, paper_decoding, target_prefix, **generate_kwargs)
        # A text's prefix starts its first sentence's translation only: the payload's _forward gives every row one.
        ids = target_prefix["input_ids"]
        generate_kwargs["target_prefix"] = [ids if flag else [] for flag in first.view(-1).tolist()]
        output_ids = self.model.generate(**model_inputs, paper_decoding=paper_decoding, **generate_kwargs)
        texts = model_inputs["input_ids"].shape[0]
        return {"output_ids": output_ids.reshape(texts, -1, output_ids.shape[-1])}

    def save_pretrained(self, save_directory, **kwargs):
        """The model (whose save_pretrained writes the payload, pipeline_vaswani.py included, and declares that
        pipeline in config.json) and the tokenizer: what the payload's pipeline saves, and not this module, which
        transformers' route for a registered pipeline would copy as remote code that cannot run."""
        self.model.save_pretrained(save_directory, **kwargs)
        self.tokenizer.save_pretrained(save_directory, **kwargs)
