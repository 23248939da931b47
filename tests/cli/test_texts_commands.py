"""Issue 51's text cases through the commands: a glossary saved with a byte-order mark or quoted as a spreadsheet saves
TSV is applied as a plain one is; a "\\r" inside a line (classic Mac OS text, a target prefix) gives one output line
per input line for every reader of lines; devices and endless input are refused by name, never read into memory."""

import functools
import subprocess

import pytest
from helpers.memory import memory_cap
from helpers.refusals import refused
from helpers.training_setup import TINY_PAIRS, command, run_command

from modeling_vaswani.toolkit.cli import translate as translate_command
from modeling_vaswani.toolkit.serving.gate import read_keys

OPTIONS = ["--max_new_tokens", "12"]
run = functools.partial(run_command, translate_command)  # run(argv, capsys)
LINES = [source for source, _ in TINY_PAIRS]


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "in.en"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return path


def translated(trained, argv, capsys) -> str:
    code, out, err = run([trained, *argv, *OPTIONS], capsys)
    assert code == 0, err
    return out


def glossary_output(trained, source, tmp_path, capsys, data: bytes) -> str:
    glossary = tmp_path / "glossary.tsv"
    glossary.write_bytes(data)
    return translated(trained, ["--input", source, "--glossary", glossary], capsys)


def test_the_plain_glossary_makes_the_difference_the_others_must_make(trained, source, tmp_path, capsys):
    assert "Frau" not in translated(trained, ["--input", source], capsys)
    assert "Frau" in glossary_output(trained, source, tmp_path, capsys, b"girl\tFrau\n").split("\n")[2]


@pytest.mark.parametrize(
    "data",
    [
        b"\xef\xbb\xbfgirl\tFrau\n",  # Notepad's and Excel's "UTF-8" (with a byte-order mark)
        b'"girl"\t"Frau"\r\n',  # a spreadsheet's TSV: every field quoted, Windows line ends
        b'\xef\xbb\xbf"girl"\tFrau\n',  # both, one field quoted
        b'"man"\t"Mann"\n"girl"\t"Frau"\n',  # the term on a later line, after a quoted one
    ],
    ids=["bom", "quoted", "bom and quoted", "second line"],
)
def test_a_glossary_saved_by_a_spreadsheet_is_applied_as_a_plain_one(trained, source, tmp_path, capsys, data):
    assert "Frau" in glossary_output(trained, source, tmp_path, capsys, data).split("\n")[2]


def test_spreadsheet_quoting_reads_doubled_quotes_and_refuses_what_it_cannot_read(trained, source, tmp_path, capsys):
    glossary = tmp_path / "glossary.tsv"
    glossary.write_text('"girl"\t"""Frau"""\n', encoding="utf-8")  # the target term is "Frau" with its quotes
    out = translated(trained, ["--input", source, "--glossary", glossary], capsys)
    assert '"Frau"' in out.split("\n")[2]
    cases = (('"girl\tFrau\n', "unexpected end of data"), ('"girl" x\tFrau\n', "'\\t' expected after '\"'"))
    for text, reason in cases:
        glossary.write_text(text, encoding="utf-8")
        error = refused(translate_command.main, [trained, "--input", source, "--glossary", glossary], capsys)
        expected = f"{glossary}, line 1: {text.rstrip()!r}: quoting that is not a spreadsheet's (csv: {reason})"
        assert error.startswith(f"vaswani-translate: error: {expected}"), error


def read_back(path) -> tuple[int, int, int]:
    """How many lines three readers see in the file `path`: Python's readlines() (universal newlines: "\\n", "\\r",
    "\\r\\n"), str.splitlines (every Unicode line break) and `wc -l` (the "\\n" bytes)."""
    with open(path, encoding="utf-8") as stream:
        by_readlines = len(stream.readlines())
    by_splitlines = len(path.read_text(encoding="utf-8").splitlines())
    by_wc = int(subprocess.run(["wc", "-l", str(path)], capture_output=True, text=True, check=True).stdout.split()[0])
    return by_readlines, by_splitlines, by_wc


def test_a_classic_mac_input_gives_one_output_line_per_input_line(trained, tmp_path, capsys):
    """Lines end in "\\n" (or "\\r\\n"); a lone "\\r" is inside its line, and the sentences it separated are joined
    back with a space: one line out for the one line in, whoever counts."""
    source = tmp_path / "mac.en"
    source.write_bytes("\r".join(LINES).encode() + b"\r")  # classic Mac OS: no "\n" at all, one line
    output = tmp_path / "mac.de"
    translated(trained, ["--input", source, "--output", output], capsys)
    assert read_back(output) == (1, 1, 1)
    mixed = tmp_path / "mixed.en"
    mixed.write_bytes(f"{LINES[0]}\r{LINES[1]}\r\n{LINES[2]}\n".encode())  # a "\r" inside line 1, "\r\n" ending it
    translated(trained, ["--input", mixed, "--output", output], capsys)
    assert read_back(output) == (2, 2, 2)
    assert "\r" not in output.read_text(encoding="utf-8")


@pytest.mark.parametrize("separator", ["\r", "\u2028", "\x85", "\v"], ids=["cr", "u2028", "nel", "vt"])
def test_a_target_prefix_holding_a_line_break_gives_one_output_line(trained, source, tmp_path, capsys, separator):
    prefixes = tmp_path / "prefixes.de"
    prefixes.write_text(f"Ein{separator}Mann\n\n\n", encoding="utf-8")
    output = tmp_path / "out.de"
    translated(trained, ["--input", source, "--target_prefix", prefixes, "--output", output], capsys)
    assert read_back(output) == (3, 3, 3)
    assert output.read_text(encoding="utf-8").startswith("Ein Mann")


@pytest.mark.parametrize(
    ("flag", "lines"), [(["--nbest", "2"], 6), (["--alignments"], 3)], ids=["nbest", "alignments"]
)
def test_n_best_lists_and_alignments_go_through_the_same_writer(trained, source, tmp_path, capsys, flag, lines):
    prefixes = tmp_path / "prefixes.de"
    prefixes.write_text("Ein\rMann\n\u2028\n\n", encoding="utf-8")
    out = translated(trained, ["--input", source, "--target_prefix", prefixes, *flag], capsys)
    assert len(out.splitlines()) == out.count("\n") == lines


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "/dev/null"])
def test_a_device_given_as_a_text_file_is_refused_by_name(trained, source, capsys, device):
    expected = f"vaswani-translate: error: {device} is a character device; expected a text file, a pipe or a terminal"
    for flag in ("--input", "--glossary", "--target_prefix", "--constraints"):
        argv = [trained, "--input", source, flag, device] if flag != "--input" else [trained, "--input", device]
        with memory_cap():
            assert refused(translate_command.main, argv, capsys) == expected


def test_an_api_keys_file_with_a_byte_order_mark_keeps_its_first_key(tmp_path):
    """The key file a Windows editor saves: the first key is the key, not U+FEFF and the key (which no client can
    send)."""
    keys = tmp_path / "keys.txt"
    keys.write_bytes(b"\xef\xbb\xbf0123456789abcdef\r\n# a comment\r\nfedcba9876543210\r\n")
    assert read_keys([], keys) == ["0123456789abcdef", "fedcba9876543210"]


@pytest.mark.slow
def test_endless_or_binary_standard_input_is_refused_without_reading_it_whole(trained, tmp_path):
    """Standard input redirected from a device is refused by name; a pipe of NULs at its first read; a pipe of a
    line without end at 16 MiB, not at the end of memory (`ulimit -v` would kill a reader that gathers it)."""
    # A reader that gathers it all is stopped at 3 GiB of data (MemoryError) or 100 s, not at the machine's memory.
    translate = "timeout -s KILL 100 " + " ".join(command("translate"))
    cases = {
        f"{translate} {trained} < /dev/zero": "standard input is a character device",
        f"cat /dev/zero | {translate} {trained}": "standard input, line 1: holds a NUL character (byte 0 of",
        f"head -c 100000 /dev/urandom | {translate} {trained}": "standard input, line ",  # not UTF-8, or a NUL
        f"yes a | tr -d '\\n' | {translate} {trained}": "standard input, line 1: longer than 16,777,216 bytes",
    }
    for shell, message in cases.items():
        done = subprocess.run(["bash", "-c", f"ulimit -d 3145728; {shell}"], capture_output=True, text=True)
        assert done.returncode == 2, done.stderr
        assert f"vaswani-translate: error: {message}" in done.stderr, done.stderr
