"""The commands' one error shell (toolkit/cli/shell.py): every console script runs through it; an expected failure is
one line and exit 2, an unexpected one keeps its traceback and exits 1, Ctrl-C exits 130. Run as real processes."""

import os
import subprocess
import sys
import textwrap
from importlib import import_module

import pytest
import tomllib
from helpers.training_setup import REPO


def scripts() -> dict[str, str]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]


@pytest.mark.parametrize(("name", "target"), sorted(scripts().items()))
def test_every_console_script_runs_through_the_shell_under_its_own_name(name, target):
    module, function = target.split(":")
    assert getattr(getattr(import_module(module), function), "error_shell", None) == name


@pytest.mark.parametrize(("name", "target"), sorted(scripts().items()))
def test_every_command_but_the_server_starts_with_the_process_settings(name, target, monkeypatch):
    """The shell applies toolkit/runtime.py's settings before the command's own code (here, its --help) runs; the
    server, which lives on after a burst, alone keeps glibc's default."""
    from modeling_vaswani.toolkit.cli import shell

    order = []
    monkeypatch.setattr(shell, "apply_process_settings", lambda: order.append("settings"))
    module, function = target.split(":")
    with pytest.raises(SystemExit) as exited:
        getattr(import_module(module), function)(["--help"])
    assert exited.value.code == 0
    assert order == ([] if name == "vaswani-serve" else ["settings"])


FAILING = textwrap.dedent(
    """
    import sys
    from modeling_vaswani.toolkit.cli import translate
    def load_ensemble(*args, **kwargs):
        {failure}
    translate.load_ensemble = load_ensemble
    translate.main(["any/model"])
    """
)


def run_failing(failure: str, **env) -> subprocess.CompletedProcess:
    program = FAILING.format(failure=failure)
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", **env}
    # Input to translate: an empty one is refused before any model loads (the failures here are the loading's).
    return subprocess.run(
        [sys.executable, "-c", program], input="A man.\n", capture_output=True, text=True, env=environment
    )


@pytest.mark.parametrize(
    ("failure", "code", "told"),
    [
        # a bug: its traceback is what a report needs
        ("raise RuntimeError('boom')", 1, "RuntimeError: boom"),
        # a ValueError raised outside this package is not a refusal of ours: traceback too
        ("int('x')", 1, "ValueError: invalid literal for int() with base 10: 'x'"),
        # the environment: one line naming the file
        (
            "raise PermissionError(13, 'Permission denied', '/srv/models/m')",
            2,
            "vaswani-translate: error: /srv/models/m: permission denied (Permission denied)",
        ),
        ("raise KeyboardInterrupt", 130, "vaswani-translate: interrupted; outputs are written aside"),
    ],
)
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_unexpected_failures_keep_their_traceback_and_expected_ones_are_one_line(failure, code, told):
    result = run_failing(failure)
    assert result.returncode == code, result.stderr
    assert told in result.stderr
    assert ("Traceback" in result.stderr) == (code == 1)


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_a_hub_id_that_cannot_be_fetched_is_one_line():
    """transformers' own message for an unreachable Hub (its hub module's OSError), told on one line."""
    program = "from modeling_vaswani.toolkit.cli import translate; translate.main(['someone/some-model'])"
    result = subprocess.run(
        [sys.executable, "-c", program],
        input="A man.\n",
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("vaswani-translate: error:")]
    assert "couldn't connect to 'https://huggingface.co' to load the files" in line
