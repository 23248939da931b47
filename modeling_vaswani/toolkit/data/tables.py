"""Tables of translation pairs in text formats (JSON Lines, JSON arrays, CSV, TSV; `.gz` allowed): each read by a
reader of its own that knows its lines (`table_rows`), refusing by file, line (and column where the parser knows it)
what does not parse; every row then passes the one check of a pair (`pairs.checked_pair`). Parquet, which has rows
and not lines, is read through `datasets` (`arrow.py`)."""

import csv
import itertools
import json
from collections.abc import Iterator, Sequence
from pathlib import Path

from ..texts import existing_file, iter_text_lines, read_text
from .pairs import checked_pair

# Suffix (after an optional .gz, but for Parquet, which compresses inside) -> the format of a table of pairs.
TABLE_FORMATS = {".jsonl": "JSON Lines", ".json": "JSON", ".csv": "CSV", ".tsv": "TSV", ".parquet": "Parquet"}


# JSON's names for what a row of a JSON file was instead of an object.
_JSON_TYPES = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}


def _checked_row(row: object, source_lang: str, target_lang: str, where: str) -> dict[str, str]:
    """The pair of a row as `table_rows` reads it: an object holding a `translation` object (the Hub schema) or the
    texts themselves (one column per language), each row on its own."""
    if not isinstance(row, dict):
        shown = json.dumps(row, ensure_ascii=False)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise ValueError(
            f"{where}: the row is {shown}, {_JSON_TYPES.get(type(row), 'null')}; expected an object with "
            f"{source_lang!r} and {target_lang!r} texts, or a 'translation' object holding them"
        )
    return checked_pair(row.get("translation", row), source_lang, target_lang, where)


def table_format(path: Path) -> str:
    """The format of the table file `path`, by its name (TABLE_FORMATS)."""
    suffix = Path(path.name.removesuffix(".gz")).suffix
    if suffix not in TABLE_FORMATS:
        raise ValueError(
            f"cannot tell the format of {path}: expected a name ending in {sorted(TABLE_FORMATS)} (+ .gz but for "
            ".parquet)"
        )
    if suffix == ".parquet" and path.name.endswith(".gz"):
        raise ValueError(f"{path}: a Parquet file is compressed inside; expected it without .gz")
    return TABLE_FORMATS[suffix]


def table_rows(path: str | Path, languages: Sequence[str] = ()) -> Iterator[tuple[str, object]]:
    """Each row of the JSON Lines, JSON or CSV/TSV file `path` (`.gz` allowed) as written, with where it is in words
    ("FILE, line N", the line a row starts on). One reader per format, each refusing by file, line (and column where
    the parser knows it) what does not parse, and a file without rows; bytes that are not UTF-8 are refused by line
    for every format. `languages`: the columns a CSV/TSV header must name. The rows are checked by `_checked_row`."""
    path = existing_file(path)
    form = table_format(path)
    if form == "Parquet":
        raise ValueError(f"{path}: Parquet has rows, not lines; it is read by load_table_pairs")
    if form in ("CSV", "TSV"):
        yield from _delimited_rows(path, "," if form == "CSV" else "\t", languages)
    elif form == "JSON":
        yield from _json_rows(path)
    else:
        yield from _json_lines_rows(path)


def _json_lines_rows(path: Path) -> Iterator[tuple[str, object]]:
    """JSON Lines: one JSON value a line; blank lines are no rows (as `datasets` reads them)."""
    expectation = "expected one JSON object a line"
    rows = 0
    for number, text in iter_text_lines(path):
        if not text.strip():
            continue
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"{path}, line {number}, column {error.colno}: not valid JSON ({error.msg}); {expectation}"
            ) from None
        except (ValueError, RecursionError) as error:  # a number of more than 4300 digits, nesting too deep
            raise ValueError(f"{path}, line {number}: not valid JSON ({error}); {expectation}") from None
        rows += 1
        yield f"{path}, line {number}", value
    if not rows:
        raise ValueError(f"{path} holds no rows; expected translation pairs, one JSON object a line")


def _json_rows(path: Path) -> Iterator[tuple[str, object]]:
    """A .json file: a JSON array of rows, each named by the line it starts on (read whole, as `datasets` reads an
    array), or else JSON Lines, which `datasets` accepts under that name too."""
    text = read_text(path)
    position = _skip_space(text, 0)
    if not text.startswith("[", position):
        yield from _json_lines_rows(path)
        return
    expectation = "expected a JSON array of objects"
    decoder, counted, line, rows = json.JSONDecoder(), 0, 1, 0

    def line_of(index: int) -> int:  # counted forward only: the array is read in order
        nonlocal counted, line
        line += text.count("\n", counted, index)
        counted = index
        return line

    def refuse(index: int, reason: str):
        column = index - (text.rfind("\n", 0, index) + 1) + 1
        raise ValueError(f"{path}, line {line_of(index)}, column {column}: not valid JSON ({reason}); {expectation}")

    position = _skip_space(text, position + 1)
    while not text.startswith("]", position) or rows:
        if position >= len(text):
            refuse(position, "the array is not closed")
        try:
            value, end = decoder.raw_decode(text, position)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"{path}, line {error.lineno}, column {error.colno}: not valid JSON ({error.msg}); {expectation}"
            ) from None
        except (ValueError, RecursionError) as error:
            refuse(position, str(error))
        rows += 1
        yield f"{path}, line {line_of(position)}", value
        position = _skip_space(text, end)
        if text.startswith(",", position):
            position = _skip_space(text, position + 1)
        elif text.startswith("]", position):
            break
        elif position >= len(text):
            refuse(position, "the array is not closed")
        else:
            refuse(position, "expected ',' or ']' after an element")
    position = _skip_space(text, position + 1)
    if position < len(text):
        refuse(position, "text after the array")
    if not rows:
        raise ValueError(f"{path} holds no rows (an empty JSON array); expected translation pairs")


def _skip_space(text: str, position: int) -> int:
    while position < len(text) and text[position] in " \t\r\n":
        position += 1
    return position


def _delimited_rows(path: Path, delimiter: str, languages: Sequence[str]) -> Iterator[tuple[str, object]]:
    """CSV (quoted as spreadsheets write it) or TSV (fields as written between tabs, quotes included): a header line
    naming the columns, then one row a record, each with as many fields as the header. Texts are read as written:
    no type inference ("007" stays "007") and no "NA" or "null" taken for a missing value."""
    form, joined = ("CSV", ",") if delimiter == "," else ("TSV", "\t")
    read_up_to = 0  # the last line handed to the csv reader: a record starts on the line after the one before it

    def lines():
        nonlocal read_up_to
        for number, text in iter_text_lines(path, keep_ends=True):  # quoted line breaks kept inside their field
            read_up_to = number
            yield text

    quoting = csv.QUOTE_NONE if form == "TSV" else csv.QUOTE_MINIMAL
    reader = csv.reader(lines(), delimiter=delimiter, quoting=quoting, strict=True)
    header, header_line, rows = None, 0, 0
    while True:
        start = read_up_to + 1
        try:
            fields = next(reader)
        except StopIteration:
            break
        except csv.Error as error:
            raise ValueError(
                f"{path}, line {start}: not valid {form} ({error}); expected a translation pair a line"
            ) from None
        if not fields:  # a blank line
            continue
        if header is None:
            header, header_line = fields, start
            _check_header(path, header, header_line, languages)
            continue
        if len(fields) != len(header):
            raise ValueError(
                f"{path}, line {start}: {len(fields)} field{'s' if len(fields) != 1 else ''}; expected "
                f"{len(header)}, one per column of the header (line {header_line}: {joined.join(header)})"
            )
        rows += 1
        yield f"{path}, line {start}", dict(zip(header, fields, strict=True))
    if header is None:
        naming = f" ({joined.join(languages)})" if languages else ""
        raise ValueError(
            f"{path} is empty; expected a header line naming the columns{naming}, then a translation pair a line"
        )
    if not rows:
        raise ValueError(
            f"{path} holds only its header (line {header_line}); expected a translation pair a line after it"
        )


def _check_header(path: Path, header: list[str], line: int, languages: Sequence[str]) -> None:
    twice = [name for name in dict.fromkeys(header) if header.count(name) > 1]
    if twice:
        raise ValueError(f"{path}, line {line}: the header names {twice[0]!r} twice; expected each column named once")
    if not set(languages) <= set(header):
        wanted = " and ".join(repr(lang) for lang in languages)
        raise ValueError(
            f"{path}, line {line}: the header names the columns {header}; expected a column per language ({wanted})"
        )


def table_pairs(path: Path, source_lang: str, target_lang: str, identity: str) -> Iterator[dict]:
    # `identity` (sizes and modification times) only keys the cache: an edited file is read again.
    for where, row in table_rows(path, (source_lang, target_lang)):
        yield {"translation": _checked_row(row, source_lang, target_lang, where)}


def table_row_location(path: str | Path, row: int) -> str:
    """Row `row` (0-based) of a table `load_table_pairs` read, in words: the line it starts on (read again, only to
    name it), or its row of a Parquet file."""
    path = Path(path)
    if table_format(path) != "Parquet":
        for where, _ in itertools.islice(table_rows(path), row, None):
            return where
    return f"{path}, row {row + 1}"
