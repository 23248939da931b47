"""The errors of translating callers (translation/translate.py and what builds on it: terminology, documents,
alignments, scoring, the request's check), in a module of its own so that each can raise them
without importing the others."""

import reprlib

# How a refusal shows a value a caller gave: whole where short, else its start and how much more (a request's 400
# phrases or a 10 MB string are named, not echoed back in full).
_SHOWN = reprlib.Repr()  # its limits as attributes: Repr() takes them as arguments only from Python 3.12
_SHOWN.maxlevel, _SHOWN.maxlist, _SHOWN.maxtuple, _SHOWN.maxdict = 3, 6, 6, 6
_SHOWN.maxstring, _SHOWN.maxother, _SHOWN.maxlong = 80, 80, 40


def shown(value) -> str:
    """`repr(value)`, shortened by the standard library's reprlib where long (`['a', 'b', ...]`, `'abc...xyz'`)."""
    return _SHOWN.repr(value)


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


class ArgumentTypeError(TypeError, ValueError):
    """A public argument of another type than it takes (`arguments.check_arguments`): a TypeError, as Python's own
    are, and a ValueError, as every refusal of the package is (the commands' error shell answers those in one line;
    numpy's AxisError is a ValueError and an IndexError the same way)."""
