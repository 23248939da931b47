"""The errors of translating callers (translation/translate.py and what builds on it: terminology, documents,
alignments, scoring, the request's check), in a module of its own so that each can raise them
without importing the others. How they show a value, and the type error, are every room's: values.py."""


class InputError(ValueError):
    """Sentences that cannot be translated as they are: the message names the first such sentence and why, and
    `sentence` is the number (from 1) of the input at fault where one is (the sentence; with split_sentences, the
    line holding it), so that a caller can still answer the inputs before it (vaswani-translate's stream)."""

    def __init__(self, message: str, sentence: int | None = None):
        super().__init__(message)
        self.sentence = sentence


class RequestError(InputError):
    """A request refused by what it asks (`request.TranslationRequest.check`, terminology's checks), and `field`, the
    public name of the option at fault, as the server's error answer names it."""

    def __init__(self, message: str, field: str, sentence: int | None = None):
        super().__init__(message, sentence)
        self.field = field
