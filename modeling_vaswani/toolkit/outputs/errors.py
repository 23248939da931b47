"""The refusal every check of an output raises."""


class OutputError(ValueError):
    """An output that may not or cannot be written: the message names the path and what was expected."""
