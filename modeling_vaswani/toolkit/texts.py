"""The one reader of the text a user writes, and the one writer of line output.

Reading: every text the package reads from a file or standard input (inputs to translate, score and evaluate,
corpora, tokenizer training files, target prefixes, constraint, avoid and glossary files, API keys files, fairseq
dictionaries and BPE codes, model card templates) goes through `iter_text_lines`, `iter_stream_lines`,
`iter_arrived_lines` or `read_text`, under the same rules whatever the file:

- UTF-8 only: a byte that is not (and NUL, which no text holds but binary data and UTF-16 do) is a ValueError naming
  the file, the line, the byte in the line and in the file; the first such byte is named.
- A UTF-8 byte-order mark at the start of the file is dropped (a spreadsheet or Notepad writes one; kept, it would be
  the first character of the first line, and the first term of a glossary would never be found).
- Lines are split on "\\n" only, and "\\r\\n" ends a line too; a lone "\\r" and the other separators `str.splitlines`
  knows are characters inside a line (a classic Mac file is one line). `write_lines` takes them out of what it
  writes.
- A line is at most MAX_LINE_BYTES bytes before its "\\n": a longer one is refused by its line as soon as that many
  bytes have come, so an input without line ends is never read into all the memory.
- A regular file, a pipe (the shell's `<(command)`), a socket or a terminal is read; any other device (`/dev/zero`,
  `/dev/urandom`, `/dev/null`, a disk) is refused by name before a byte is read, as is a folder.

Writing: `write_lines` is what every command's line output goes through (translations, n-best lists, alignments,
scores, streamed answers, the hypotheses vaswani-evaluate and vaswani-train write): one line written per line given,
whatever the text holds, for every common reader of lines (`wc -l`, `readlines()`, `str.splitlines`).
"""

import codecs
import csv
import errno
import gzip
import io
import logging
import os
import re
import stat
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO, TextIO

logger = logging.getLogger(__name__)

# A line is a sentence, a paragraph or a row of a table: Multi30k's longest is 0.3 KiB, WMT's and Paracrawl's under
# 64 KiB, a JSON Lines row of a document a few hundred KiB. 16 MiB is far past those, and past a JSON array of some
# 100,000 pairs written on one line (json.dump's way), yet small beside any memory, so that `/dev/zero` through a pipe
# or a file without line ends stops within milliseconds.
MAX_LINE_BYTES = 16 * 2**20
CHUNK_BYTES = 1 << 16
_UTF16_MARKS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)

# What `write_lines` does with each character some reader of lines takes for a line end: every one `str.splitlines`
# splits on (Python's documented list, checked against str.splitlines over all of Unicode by the tests), and "\r\n"
# as one. Each becomes one space: the words on either side stay apart, as a line end kept them.
LINE_BREAKS = {
    "\r\n": "CARRIAGE RETURN + LINE FEED (Windows)",
    "\n": "LINE FEED",
    "\r": "CARRIAGE RETURN (classic Mac OS)",
    "\v": "LINE TABULATION",
    "\f": "FORM FEED",
    "\x1c": "FILE SEPARATOR",
    "\x1d": "GROUP SEPARATOR",
    "\x1e": "RECORD SEPARATOR",
    "\x85": "NEXT LINE (NEL)",
    "\u2028": "LINE SEPARATOR",
    "\u2029": "PARAGRAPH SEPARATOR",
}
_LINE_BREAK = re.compile("|".join(re.escape(separator) for separator in LINE_BREAKS))


def existing_file(path: str | Path) -> Path:
    """`path` if there is something there to read that is no folder (what it is, `open_text` checks)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"data file not found: {str(path)!r}")
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    return path


def check_readable_kind(fd: int, name: object) -> None:
    """Refuses (ValueError) a descriptor that is not a regular file, a pipe, a socket or a terminal: a device such as
    /dev/zero or /dev/urandom, given by its path or redirected to standard input, never ends and holds no text."""
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd):
        return
    kind = "a character device" if stat.S_ISCHR(mode) else "a block device" if stat.S_ISBLK(mode) else "no file"
    raise ValueError(f"{name} is {kind}; expected a text file, a pipe or a terminal")


def iter_text_lines(path: str | Path, keep_ends: bool = False) -> Iterator[tuple[int, str]]:
    """`(line_number, text)` of each line of the UTF-8 text file `path` (`.gz` allowed, its decompressed text read
    under the same rules), line numbers from 1, as the module's rules read it."""
    path = existing_file(path)
    with open(path, "rb") as raw:
        check_readable_kind(raw.fileno(), path)
        if path.suffix != ".gz":
            yield from _stream_lines(raw, path, keep_ends)
            return
        with gzip.open(raw, "rb") as stream:
            yield from _stream_lines(stream, path, keep_ends)


def iter_stream_lines(stream: BinaryIO, name: object, keep_ends: bool = False) -> Iterator[tuple[int, str]]:
    """`(line_number, text)` of each line of an open binary stream (standard input, a file), under the module's rules;
    `name` names it in errors. A line loses its "\\n" or "\\r\\n" unless `keep_ends`."""
    try:
        descriptor = stream.fileno()
    except io.UnsupportedOperation:  # bytes in memory (io.BytesIO): no device behind them
        descriptor = None
    if descriptor is not None:
        check_readable_kind(descriptor, name)
    yield from _stream_lines(stream, name, keep_ends)


def _stream_lines(stream: BinaryIO, name: object, keep_ends: bool) -> Iterator[tuple[int, str]]:
    for group in _raw_lines(stream.read, name, CHUNK_BYTES):
        for number, raw, start in group:
            yield number, _decode(raw, number, name, start, keep_ends)


def iter_arrived_lines(fd: int, name: object, chunk: int = CHUNK_BYTES) -> Iterator[list[tuple[int, str]]]:
    """The lines of the file descriptor `fd` (a pipe, a terminal) in groups, each group as soon as it has arrived:
    whatever complete lines one read returns, so that a program reading them answers each line without waiting for
    the end of its input. Read under the module's rules; a line that is not text raises its error after the lines
    before it in the same read have been yielded, so that they are answered first. Written by hand: Python's line
    iterators read ahead, and would wait for more input before returning."""
    check_readable_kind(fd, name)
    for group in _raw_lines(lambda size: os.read(fd, size), name, chunk):
        decoded = []
        for number, raw, start in group:
            try:
                decoded.append((number, _decode(raw, number, name, start)))
            except ValueError:
                if decoded:
                    yield decoded
                raise
        yield decoded


def read_text(path: str | Path) -> str:
    """The whole text of the file `path`, its line ends as written, under the module's rules (a byte-order mark
    dropped, UTF-8 and NUL checked by line, each line bounded)."""
    return "".join(text for _, text in iter_text_lines(path, keep_ends=True))


def _raw_lines(read: Callable[[int], bytes], name: object, chunk: int) -> Iterator[list[tuple[int, bytes, int]]]:
    """Groups of `(line_number, bytes with the "\\n", first byte's offset)`, a group the complete lines each read
    brought. A line still without its end is refused past MAX_LINE_BYTES, or at once where it holds a NUL, so that
    a device or a binary file through a pipe is never gathered into memory."""
    pending, number, start = bytearray(), 0, 0
    while data := read(chunk):
        cut = data.rfind(b"\n")
        if cut < 0:
            pending += data
            nul = data.find(b"\0")
            if nul >= 0:  # the bytes up to a NUL are whole characters: decoding them names the first fault
                _decode(bytes(pending[: len(pending) - len(data) + nul + 1]), number + 1, name, start)
            _check_length(len(pending), number + 1, name, start)
            continue
        complete, pending = bytes(pending) + data[: cut + 1], bytearray(data[cut + 1 :])
        group = []
        for raw in complete.split(b"\n")[:-1]:
            number += 1
            group.append((number, raw + b"\n", start))
            start += len(raw) + 1
        yield group
    if pending and not (number == 0 and pending == codecs.BOM_UTF8):  # a byte-order mark alone: an empty file
        yield [(number + 1, bytes(pending), start)]


def _check_length(size: int, number: int, name: object, start: int) -> None:
    if size > MAX_LINE_BYTES:
        raise ValueError(
            f"{name}, line {number}: longer than {MAX_LINE_BYTES:,} bytes (from byte {start:,} of the input); "
            "expected lines of text (a JSON array on one line: write it as JSON Lines, one row a line)"
        )


def _decode(raw: bytes, number: int, name: object, start: int, keep_end: bool = False) -> str:
    """Line `number` of `name` as text; `start` is its first byte in the input (of a .gz file: in its decompressed
    bytes). The first byte that is not text (invalid UTF-8, NUL) is named in the line and in the input."""
    _check_length(len(raw) - raw.endswith(b"\n"), number, name, start)
    skip = len(codecs.BOM_UTF8) if number == 1 and raw.startswith(codecs.BOM_UTF8) else 0
    nul = raw.find(b"\0")
    try:
        text = raw[skip:].decode("utf-8")
    except UnicodeDecodeError as error:
        bad = skip + error.start
        if nul < 0 or bad < nul:
            utf16 = " (a UTF-16 byte-order mark)" if number == 1 and raw.startswith(_UTF16_MARKS) else ""
            raise ValueError(
                f"{name}, line {number}: not valid UTF-8 ({error.reason} at byte {bad} of the line, byte "
                f"{start + bad:,} of the input{utf16}); expected UTF-8 text"
            ) from None
    if nul >= 0:
        raise ValueError(
            f"{name}, line {number}: holds a NUL character (byte {start + nul:,} of the input); "
            "expected UTF-8 text (binary or UTF-16?)"
        )
    if keep_end or not text.endswith("\n"):
        return text
    return text[:-1].removesuffix("\r")  # a "\r" is a line end only before "\n"


def tab_fields(line: str, where: str) -> list[str]:
    """The tab-separated fields of `line`, each as written or quoted as a spreadsheet saves a TSV file (Excel,
    LibreOffice: `"bike"<TAB>"Fahrrad"`, a quote inside a quoted field doubled, a tab inside one kept): csv's
    `excel-tab` dialect, strict, so that quoting it cannot read is refused naming `where` instead of being taken as
    part of a term. A quote inside an unquoted field (`5" screen`) is text."""
    try:
        return next(csv.reader([line], dialect="excel-tab", strict=True))
    except csv.Error as error:
        # csv's words, a tab in them shown as "\\t"; its hint after " - " is about opening files, not this line.
        reason = str(error).split(" - ")[0].replace("\t", "\\t")
        raise ValueError(
            f"{where}: {line!r}: quoting that is not a spreadsheet's (csv: {reason}); expected fields separated by "
            "tabs, each as written or in double quotes (a quote inside doubled)"
        ) from None


def one_line(text: str) -> str:
    """`text` with each line break of LINE_BREAKS as one space: a line for every common reader of lines."""
    return _LINE_BREAK.sub(" ", text)


def write_lines(lines: Sequence[str], target: TextIO, first: int = 1) -> None:
    """Each of `lines` to `target` as one line ("\\n"-ended): a line break inside one (a byte-level vocabulary can
    generate "\\n", a target prefix or an input line can hold "\\r") would make it two for a reader and shift every
    line after it, so each becomes a space (`one_line`), and one warning names the output lines that held any,
    counted from `first`."""
    broken = [first + index for index, line in enumerate(lines) if _LINE_BREAK.search(line)]
    if broken:
        more = f" and {len(broken) - 10} more" if len(broken) > 10 else ""
        shown = ", ".join(str(number) for number in broken[:10]) + more
        logger.warning(
            "output line%s %s held line breaks (\\r, \\n, U+2028, ...), each written as a space to keep one line "
            "per line", "s" if len(broken) > 1 else "", shown,
        )  # fmt: skip
    target.write("".join(one_line(line) + "\n" for line in lines))
