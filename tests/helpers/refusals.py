"""What the commands' refusal tests share: a command run to its usage error, and a folder's files read back."""

import pytest


def refused(main, argv, capsys, one_line: bool = True) -> str:
    """The line `main(argv)` printed before exiting with argparse's code 2, with no traceback (`one_line`: and
    nothing else on stderr)."""
    capsys.readouterr()  # what the test's own setup printed
    with pytest.raises(SystemExit) as exit_info:
        main([str(argument) for argument in argv])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert not one_line or len(lines) == 1, err
    return lines[-1]


def files(folder) -> dict:
    """Every file of `folder` by name, with its bytes."""
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}
