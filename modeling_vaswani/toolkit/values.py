"""How every room refuses a value it was given: the value shown (`shown`) and a whole-number check (`count`), the
one home of both, below every room that takes arguments (data, translation, training, serving)."""

import reprlib

# How a refusal shows a value a caller gave: whole where short, else its start and how much more (a request's 400
# phrases or a 10 MB string are named, not echoed back in full).
_SHOWN = reprlib.Repr()  # its limits as attributes: Repr() takes them as arguments only from Python 3.12
_SHOWN.maxlevel, _SHOWN.maxlist, _SHOWN.maxtuple, _SHOWN.maxdict = 3, 6, 6, 6
_SHOWN.maxstring, _SHOWN.maxother, _SHOWN.maxlong = 80, 80, 40


def shown(value) -> str:
    """`repr(value)`, shortened by the standard library's reprlib where long (`['a', 'b', ...]`, `'abc...xyz'`)."""
    return _SHOWN.repr(value)


class ArgumentTypeError(TypeError, ValueError):
    """A public argument of another type than it takes (`count`, translation's `arguments.check_arguments`): a
    TypeError, as Python's own are, and a ValueError, as every refusal of the package is (the commands' error shell
    answers those in one line; numpy's AxisError is a ValueError and an IndexError the same way)."""


def count(name: str, value, minimum: int = 1, why: str = "", optional: bool = False) -> int | None:
    """`value` where it is an int of at least `minimum` (or None, where `optional`); else an ArgumentTypeError (not an
    int: True and 2.0 are not counts) or a ValueError, naming `name`, the value, and what was expected and `why`."""
    if optional and value is None:
        return None
    expected = f"an int of at least {minimum}" + (f" ({why})" if why else "") + (" (or None)" if optional else "")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"{name}={shown(value)}; expected {expected}")
    if value < minimum:
        raise ValueError(f"{name}={shown(value)}; expected {expected}")
    return value
