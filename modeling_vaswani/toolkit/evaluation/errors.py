"""The error of translating callers (evaluation/translate.py and what builds on it: terminology, documents, alignments,
scoring), in a module of its own so that each can raise it without importing the others."""


class InputError(ValueError):
    """Sentences that cannot be translated as they are: the message names the first such sentence and why, and
    `sentence` is the number (from 1) of the input at fault where one is (the sentence; with split_sentences, the
    line holding it), so that a caller can still answer the inputs before it (vaswani-translate's stream)."""

    def __init__(self, message: str, sentence: int | None = None):
        super().__init__(message)
        self.sentence = sentence


class ArgumentTypeError(TypeError, ValueError):
    """A public argument of another type than it takes (`arguments.check_arguments`): a TypeError, as Python's own
    are, and a ValueError, as every refusal of the package is (the commands' error shell answers those in one line;
    numpy's AxisError is a ValueError and an IndexError the same way)."""
