"""The one text reader and the one line writer (toolkit/texts.py), each rule on its own: texts written with any line
ends and a byte-order mark read back as written, any bytes either read as Python's UTF-8 decoder reads them or refused
at the byte it names, any text written as exactly one line for every reader of lines."""

import csv
import gzip
import io
import os
import subprocess
import sys

import pytest
from helpers.memory import memory_cap
from hypothesis import given
from hypothesis import strategies as st

from modeling_vaswani.toolkit.texts import (
    LINE_BREAKS,
    MAX_LINE_BYTES,
    iter_arrived_lines,
    iter_stream_lines,
    iter_text_lines,
    one_line,
    read_text,
    tab_fields,
    write_lines,
)

BOM = b"\xef\xbb\xbf"
# A line's text: anything but "\n" and NUL (which end or refuse a line), a lone "\r" included.
TEXT = st.text(st.characters(exclude_characters="\n\0", exclude_categories=("Cs",)))


@st.composite
def written_lines(draw):
    """A list of texts and the bytes of a file holding them, one a line, with any mix of "\\n" and "\\r\\n", with
    or without a byte-order mark, with or without a line end after the last."""
    texts = draw(st.lists(TEXT, max_size=8))
    if texts:  # a text that would make its line end "\r\n" or its file start with a byte-order mark is not its own
        texts = [text.rstrip("\r") for text in texts]  # "\r\r" too: any "\r" before "\n" joins the line end
        texts[0] = texts[0].lstrip("\ufeff")
    ends = draw(st.lists(st.sampled_from(["\n", "\r\n"]), min_size=len(texts), max_size=len(texts)))
    if texts and texts[-1] and draw(st.booleans()):
        ends[-1] = ""  # no line end after the last line
    data = "".join(text + end for text, end in zip(texts, ends, strict=True)).encode()
    return texts, (BOM if draw(st.booleans()) else b"") + data


def arrived(path, chunk: int) -> list[tuple[int, str]]:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        return [line for group in iter_arrived_lines(descriptor, path, chunk=chunk) for line in group]
    finally:
        os.close(descriptor)


def every_reading(path, chunk: int) -> list[list[str]]:
    """The lines of `path` as each of the reader's entries gives them."""
    with open(path, "rb") as stream:
        streamed = [text for _, text in iter_stream_lines(stream, path)]
    return [[text for _, text in iter_text_lines(path)], streamed, [text for _, text in arrived(path, chunk)]]


@given(written_lines(), st.integers(1, 7))
def test_texts_read_back_as_written_whatever_the_line_ends_and_the_byte_order_mark(tmp_path_factory, case, chunk):
    texts, data = case
    path = tmp_path_factory.mktemp("lines") / "text.txt"
    path.write_bytes(data)
    assert every_reading(path, chunk) == [texts] * 3
    packed = path.with_suffix(".txt.gz")
    packed.write_bytes(gzip.compress(data))
    assert [text for _, text in iter_text_lines(packed)] == texts
    # read_text keeps the line ends as written, less the byte-order mark
    assert read_text(path) == data.removeprefix(BOM).decode()


def first_fault(data: bytes) -> int | None:
    """The first byte of `data` that is not text, by Python's own UTF-8 decoder and NUL, or None."""
    faults = [data.find(b"\0")] if b"\0" in data else []
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        faults.append(error.start)
    return min(faults, default=None)


@given(
    st.binary(max_size=64)
    | st.lists(st.sampled_from([b"a", b"\n", b"\r", b"\0", b"\xc3", b"\xa9", BOM, b"\xff"])).map(b"".join),
    st.integers(1, 9),
)
def test_any_bytes_read_as_utf8_lines_or_are_refused_at_the_byte_python_names(tmp_path_factory, data, chunk):
    path = tmp_path_factory.mktemp("bytes") / "data.bin"
    path.write_bytes(data)
    fault = first_fault(data)
    if fault is None:
        *ended, last = data.removeprefix(BOM).decode().split("\n")
        expected = [line.removesuffix("\r") for line in ended] + ([last] if last else [])
        assert every_reading(path, chunk) == [expected] * 3
        return
    line = data[:fault].count(b"\n") + 1
    for read in (lambda: list(iter_text_lines(path)), lambda: arrived(path, chunk)):
        with pytest.raises(ValueError) as error:
            read()
        assert str(error.value).startswith(f"{path}, line {line}: "), error.value
        assert f"byte {fault:,} of the input" in str(error.value), (data, error.value)


def test_a_line_longer_than_the_bound_is_refused_as_it_arrives():
    """A process writing one line that never ends, through a pipe: refused once MAX_LINE_BYTES have come, the
    line's start named; the writer is still writing (nothing waited for its end)."""
    endless = "import sys\nsys.stdout.buffer.write(b'ab\\n')\nwhile True: sys.stdout.buffer.write(b'a' * 65536)"
    writer = subprocess.Popen([sys.executable, "-c", endless], stdout=subprocess.PIPE)
    try:
        groups = iter_arrived_lines(writer.stdout.fileno(), "pipe")
        assert next(groups) == [(1, "ab")]
        with pytest.raises(
            ValueError, match=r"^pipe, line 2: longer than 16,777,216 bytes \(from byte 3 of the input"
        ):
            next(groups)
        assert writer.poll() is None
    finally:
        writer.kill()
        writer.wait()
        writer.stdout.close()


def test_a_line_of_exactly_the_bound_is_read(tmp_path):
    path = tmp_path / "long.txt"
    path.write_bytes(b"ab\n" + b"x" * MAX_LINE_BYTES + b"\n")  # the bound counts the bytes before "\n"
    assert [len(text) for _, text in iter_text_lines(path)] == [2, MAX_LINE_BYTES]
    path.write_bytes(b"ab\n" + b"x" * (MAX_LINE_BYTES + 1) + b"\n")
    with pytest.raises(ValueError, match=r"long\.txt, line 2: longer than 16,777,216 bytes"):
        list(iter_text_lines(path))


def test_utf16_is_refused_with_its_name(tmp_path):
    path = tmp_path / "notepad.txt"
    path.write_bytes("bike\tFahrrad\n".encode("utf-16"))
    with pytest.raises(
        ValueError,
        match=r"line 1: not valid UTF-8 \(invalid start byte at byte 0 of the line, byte 0 of the input "
        r"\(a UTF-16 byte-order mark\)\)",
    ):
        list(iter_text_lines(path))


def test_a_folder_and_a_device_are_refused_before_a_byte_is_read(tmp_path):
    with pytest.raises(IsADirectoryError):
        list(iter_text_lines(tmp_path))
    for device in ("/dev/zero", "/dev/full"):
        with memory_cap(), pytest.raises(ValueError, match=f"^{device} is a character device; expected a text file"):
            list(iter_text_lines(device))
        with open(device, "rb") as stream, memory_cap():
            with pytest.raises(ValueError, match="standard input is a character device"):
                list(iter_stream_lines(stream, "standard input"))


def test_the_line_breaks_are_every_one_str_splitlines_knows():
    """LINE_BREAKS against Python itself, over every code point: the writer's list is the one readers use."""
    splitting = {
        chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF and len(f"a{chr(c)}b".splitlines()) == 2
    }
    assert set(LINE_BREAKS) - {"\r\n"} == splitting
    assert len("a\r\nb".splitlines()) == 2 and one_line("a\r\nb") == "a b"  # one break, one space


@given(st.lists(st.text(st.characters(exclude_categories=("Cs",)))), st.integers(1, 50))
def test_any_text_is_written_as_exactly_one_line_for_every_reader(tmp_path_factory, lines, first):
    path = tmp_path_factory.mktemp("out") / "out.txt"
    with open(path, "w", encoding="utf-8", newline="") as target:
        write_lines(lines, target, first=first)
    data = path.read_bytes()
    assert data.split(b"\n") == [*(one_line(line).encode() for line in lines), b""]
    assert len(data.decode().splitlines()) == len(lines)
    with open(path, encoding="utf-8") as stream:  # universal newlines: "\n", "\r" and "\r\n"
        assert len(stream.readlines()) == len(lines)
    for line, written in zip(lines, data.decode().split("\n"), strict=False):
        assert written.split() == line.split()  # no word lost or joined: each break became whitespace
        assert written == line or any(separator in line for separator in LINE_BREAKS)


def test_the_writer_warns_once_naming_the_output_lines(caplog):
    target = io.StringIO()
    with caplog.at_level("WARNING"):
        write_lines(["a", "b\rc", "d", "e\u2028f"], target, first=7)
    assert target.getvalue() == "a\nb c\nd\ne f\n"
    assert [record.getMessage() for record in caplog.records] == [
        "output lines 8, 10 held line breaks (\\r, \\n, U+2028, ...), each written as a space to keep one line "
        "per line"
    ]


@pytest.mark.parametrize(
    ("line", "fields"),
    [
        ('"bike"\t"Fahrrad"', ["bike", "Fahrrad"]),
        ('"a ""b"""\tc', ['a "b"', "c"]),
        ('5" screen\t5-Zoll-Bildschirm', ['5" screen', "5-Zoll-Bildschirm"]),
        ('"tab\there"\tx', ["tab\there", "x"]),
        ("plain\tterms", ["plain", "terms"]),
    ],
)
def test_tab_fields_read_a_spreadsheets_quoting(line, fields):
    assert tab_fields(line, "g.tsv, line 1") == fields


@given(st.lists(st.text(st.characters(exclude_characters="\n\r\0", exclude_categories=("Cs",))), min_size=1))
def test_tab_fields_read_what_a_spreadsheet_writes(fields):
    """Python's csv writer (excel-tab: as Excel and LibreOffice quote) writes the fields; tab_fields reads them."""
    written = io.StringIO()
    csv.writer(written, dialect="excel-tab", lineterminator="").writerow(fields)
    assert tab_fields(written.getvalue(), "g.tsv, line 1") == fields


def every_reader_of_user_text():
    """Each of the package's readers of a text a user writes, with a file's text and what it must read from it."""
    from modeling_vaswani.toolkit.cli.arguments import read_input
    from modeling_vaswani.toolkit.data.corpora import read_sentences
    from modeling_vaswani.toolkit.interop.fairseq import read_codes, read_dictionary
    from modeling_vaswani.toolkit.serving.gate import read_keys
    from modeling_vaswani.toolkit.translation.terminology import Glossary

    return {
        "input": (read_input, "A man.\r\nA dog.\r\n", ["A man.", "A dog."]),
        "sentences": (read_sentences, "A man.\r\nA dog.\r\n", ["A man.", "A dog."]),
        "glossary": (lambda path: Glossary.read(path).terms, "bike\tFahrrad\r\n", {"bike": "Fahrrad"}),
        "keys": (lambda path: read_keys([], path), "0123456789abcdef\r\n", ["0123456789abcdef"]),
        "dictionary": (read_dictionary, "the 5\r\ncat@@ 3\r\n", ["<s>", "<pad>", "</s>", "<unk>", "the", "cat@@"]),
        "codes": (read_codes, "#version: 0.2\r\nt h\r\nth e</w>\r\n", [("t", "h"), ("th", "e</w>")]),
    }


@pytest.mark.parametrize("reader", list(every_reader_of_user_text()))
def test_every_reader_of_user_text_drops_a_byte_order_mark_and_refuses_a_device(tmp_path, reader):
    """A file saved by Notepad or a spreadsheet (a byte-order mark, Windows line ends) reads as the plain file does,
    and /dev/zero is refused by name, whichever reader: they are one reader."""
    read, text, expected = every_reader_of_user_text()[reader]
    path = tmp_path / "saved.txt"
    path.write_bytes(BOM + text.encode())
    assert read(path) == expected
    with memory_cap(), pytest.raises(ValueError, match="^/dev/zero is a character device"):
        read("/dev/zero")
