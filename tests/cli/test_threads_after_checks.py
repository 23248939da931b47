"""The commands measure their threads (toolkit/threads.py) only once their input has passed every check (issue 53
item 4): vaswani-translate, -evaluate and -score just before their first batch, so that an input refused by a check
that needs the tokenizer (a sentence over --max_input_tokens, an empty line, a prefix leaving no room, a pair over
--max_tokens) costs no measuring and prints no thread message before its error; vaswani-serve at startup, after every
refusal a startup can get and before it serves. tests/cli/test_reliability.py checks the same order against the
progress bar.

Seen by two real signals: the thread message on standard error, and a count of `command_threads` calls (the one
function that measures; wrapped here only to count, the real one runs). The commands run in this process (`main(argv)`)
on a real tiny checkpoint, on 2 threads with no OMP_NUM_THREADS, so that a measuring is due."""

import re

import pytest
import torch
from helpers.training_setup import free_port, run_command

from modeling_vaswani.toolkit import threads as threads_module
from modeling_vaswani.toolkit.cli import arguments, evaluate, score, serve, translate
from modeling_vaswani.toolkit.threads import USER_SETTINGS, torch_threads

# Decoding kept short: these tests are about what happens before it.
FAST = ["--num_beams", "1", "--max_new_tokens", "4"]
MEASURED = re.compile(r"vaswani-\w+: (decoding|scoring) on \d+ threads?, measured faster")
LONG = " ".join(["A man rides a bike"] * 12)  # one sentence of about 70 tokens: over --max_input_tokens 20


@pytest.fixture
def measurings(monkeypatch):
    """The `command_threads` calls made (each the arguments it got), on 2 threads with no thread setting of the
    user's; torch's count is set back after."""
    for setting in USER_SETTINGS:
        monkeypatch.delenv(setting, raising=False)
    calls = []
    real = threads_module.command_threads

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(arguments, "command_threads", counted)
    with torch_threads(2):
        yield calls
        assert torch.get_num_threads() == 2, "a command left torch's thread count changed"


@pytest.fixture
def texts(tmp_path):
    """Two good lines (en, de), and files of each bad kind."""
    files = {
        "good.en": "A man rides a bike.\nTwo dogs play.\n",
        "good.de": "Ein Mann fährt Fahrrad.\nZwei Hunde spielen.\n",
        "long.en": f"A dog runs.\n{LONG}\n",
        "long.de": f"Ein Hund rennt.\n{LONG}\n",
        "blank.en": "A dog runs.\n \n",
        "prefix.de": "Ein Mann fährt mit dem Fahrrad durch die Stadt und die Straße\n\n",
        "empty_lines.en": "\n\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


def refused_unmeasured(command, argv, capsys, calls, expected: str) -> None:
    code, _, err = run_command(command, argv, capsys)
    assert code == 2 and expected in err, err
    assert not MEASURED.search(err) and calls == [], f"measured before the refusal: {err}"


def measured_once(command, argv, capsys, calls, bar: str) -> str:
    """The command run on a good input: measured once, its message before the progress bar `bar` opened."""
    code, out, err = run_command(command, argv, capsys)
    assert code == 0, err
    assert len(calls) == 1 and len(MEASURED.findall(err)) == 1, err
    assert MEASURED.search(err).start() < err.index(bar), "measured after the work had started"
    return out


def test_translate_refuses_what_its_checks_find_before_measuring(checkpoint, texts, capsys, measurings):
    whole = "--no_split_sentences"
    cases = [
        (["--input", texts / "long.en", whole, "--max_input_tokens", 20], "more than the limit of 20"),
        (["--input", texts / "blank.en", whole], "sentence 2 is empty"),
        (["--input", texts / "good.en", "--target_prefix", texts / "prefix.de"], "target prefix 1 is"),
        (["--input", texts / "long.en", "--max_tokens", 20], "more than --max_tokens 20"),
    ]
    for argv, expected in cases:
        refused_unmeasured(translate, [checkpoint, *argv, *FAST], capsys, measurings, expected)
    # Only empty lines: nothing to translate, an empty line each, nothing measured.
    code, out, _ = run_command(translate, [checkpoint, "--input", texts / "empty_lines.en", *FAST], capsys)
    assert (code, out, measurings) == (0, "\n\n", [])
    out = measured_once(
        translate, [checkpoint, "--input", texts / "good.en", *FAST], capsys, measurings, "translating"
    )
    assert len(out.splitlines()) == 2


def test_evaluate_refuses_a_sentence_over_the_limit_before_measuring(checkpoint, texts, capsys, measurings):
    argv = ["--source", texts / "long.en", "--reference", texts / "long.de", "--max_input_tokens", 20]
    refused_unmeasured(evaluate, [checkpoint, *argv], capsys, measurings, "more than the limit of 20")
    good = ["--source", texts / "good.en", "--reference", texts / "good.de"]
    out = measured_once(evaluate, [checkpoint, *good], capsys, measurings, "translating")
    assert out.startswith("sacreBLEU ")


def test_score_refuses_what_its_checks_find_before_measuring(checkpoint, texts, capsys, measurings):
    pair = ["--source", texts / "long.en", "--target", texts / "long.de"]
    refused_unmeasured(score, [checkpoint, *pair, "--max_input_tokens", 20], capsys, measurings, "limit of 20")
    # A pair over --max_tokens: refused before the progress bar too (it was found inside the batch loop).
    code, _, err = run_command(score, [checkpoint, *pair, "--max_tokens", 20], capsys)
    assert code == 2 and "more than --max_tokens 20" in err and "scoring:" not in err, err
    assert measurings == []
    good = ["--source", texts / "good.en", "--target", texts / "good.de"]
    out = measured_once(score, [checkpoint, *good], capsys, measurings, "scoring:")
    assert len(out.splitlines()) == 2


def test_serve_measures_at_startup_after_its_refusals_and_before_serving(
    checkpoint, tmp_path, capsys, measurings, monkeypatch
):
    from modeling_vaswani.toolkit.serving import server

    missing = tmp_path / "no-such-model"
    refused_unmeasured(serve, [checkpoint, missing, "--port", free_port()], capsys, measurings, f"{missing}")
    refused_unmeasured(
        serve, [checkpoint, "--host", "0.0.0.0", "--port", free_port()], capsys, measurings, "--api_key"
    )
    served = []

    def serve_nothing(app, sock, timeout_s, body_timeout_s):
        """In place of serving: what had been measured when serving would have begun, then the worker stopped."""
        served.append((len(measurings), torch.get_num_threads()))
        sock.close()
        app.state.service.close(1)

    monkeypatch.setattr(server, "serve", serve_nothing)
    code, _, err = run_command(serve, [checkpoint, "--port", free_port()], capsys)
    assert code == 0 and len(MEASURED.findall(err)) == 1, err
    chosen = int(re.search(r"decoding on (\d+) thread", err).group(1))
    assert served == [(1, chosen)]  # measured once, at startup, and the server would run on the count chosen
