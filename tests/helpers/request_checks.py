"""Each run of `TranslationRequest.check` (`check_for` and `check_nbest` run it too), counted by wrapping it, for the
tests that a request is checked once on its way through a front end and an engine."""

from modeling_vaswani.toolkit.translation.request import TranslationRequest


def counted_checks(monkeypatch) -> list[str]:
    """The list each later check appends the class of the request it checked to (`TranslationRequest`; a
    `CheckedRequest` checked again would show)."""
    calls, check = [], TranslationRequest.check

    def counted(self, *args, **kwargs):
        calls.append(type(self).__name__)
        return check(self, *args, **kwargs)

    monkeypatch.setattr(TranslationRequest, "check", counted)
    return calls


# generate() options no exported engine's search takes, each as a call might give it.
OTHER_OPTIONS = [
    {"early_stopping": True},
    {"do_sample": True},
    {"max_length": 20},
    {"length_penalty": 1.0},
    {"num_return_sequences": 2},
    {"no_repeat_ngram_size": 3, "early_stopping": "never"},
]


def other_options_are_refused(engine, tokenizer, sentences: list[str], options: dict) -> None:
    """`options` (none of them EXPORTED_OPTIONS) given to an exported `engine` through each of its entries (generate,
    generate_nbest, translate, translate_nbest): each refuses them with a ValueError naming every one, its value and
    the engine, before its search runs (its `nbest_hypotheses` is never called)."""
    import pytest

    from modeling_vaswani.toolkit.translation.engines import ENGINES
    from modeling_vaswani.toolkit.translation.translate import translate, translate_nbest

    searches = []
    search = engine.nbest_hypotheses
    engine.nbest_hypotheses = lambda *args, **kwargs: searches.append(args) or search(*args, **kwargs)
    try:
        batch = tokenizer(sentences, return_tensors="pt", padding=True)
        calls = [
            lambda: engine.generate(batch.input_ids, batch.attention_mask, **options),
            lambda: engine.generate_nbest(batch.input_ids, batch.attention_mask, 2, **options),
            lambda: translate(engine, tokenizer, sentences, progress=False, **options),
            lambda: translate_nbest(engine, tokenizer, sentences, 2, progress=False, **options),
        ]
        for call in calls:
            with pytest.raises(ValueError) as refusal:
                call()
            message = str(refusal.value)
            for name, value in options.items():
                assert f"{name}={value!r}" in message, message
            assert f"the {ENGINES[engine.engine].title} engine's search takes" in message, message
        assert searches == []
    finally:
        del engine.nbest_hypotheses
