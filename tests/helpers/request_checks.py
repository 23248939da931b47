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
