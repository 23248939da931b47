"""Parallel data for translation: loading, validation and tokenization.

Every loader returns a `datasets.Dataset` (or a `DatasetDict` of splits) with the Hub's translation schema, as
`wmt14` uses: a single column `translation` holding `{source_lang: text, target_lang: text}`.

Bad data is never skipped quietly: misaligned files, empty lines, undecodable bytes, rows that do not parse and rows
without a language raise a `ValueError` naming the file (or dataset) and the line (or row). Every file format is read
by a reader of its own that knows its lines (`table_rows`: JSON Lines, JSON arrays, CSV, TSV; Parquet by row), and
every row of every format passes one check (`_checked_pair`). Lines are kept exactly as written (no stripping or
normalization) so that detokenized BLEU is computed against the original references.
"""

from __future__ import annotations

import bisect
import csv
import hashlib
import itertools
import json
import logging
import uuid
from collections.abc import Callable, Iterator, Sequence
from importlib import resources
from itertools import zip_longest
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from datasets import (
    Dataset,
    DatasetDict,
    Features,
    List,
    Translation,
    Value,
    concatenate_datasets,
    load_dataset,
    load_dataset_builder,
    load_from_disk,
)
from datasets.data_files import DataFilesDict, get_data_patterns
from datasets.exceptions import DatasetGenerationError

from .. import texts
from ..texts import existing_file, iter_text_lines, read_text

logger = logging.getLogger(__name__)

# Shipped as package data, so that it is there however the package was installed (wheel, editable, zip-free).
MULTI30K_DIR = Path(str(resources.files(__package__) / "multi30k"))
# Split names follow the Hub convention; the values are the upstream file stems.
MULTI30K_SPLITS = {"train": "train", "validation": "val", "test": "test_2016_flickr"}
MULTI30K_LANGUAGES = ("en", "de", "fr")  # task 1: English captions with German and French translations

# Suffix (after an optional .gz, but for Parquet, which compresses inside) -> the format of a table of pairs.
TABLE_FORMATS = {".jsonl": "JSON Lines", ".json": "JSON", ".csv": "CSV", ".tsv": "TSV", ".parquet": "Parquet"}
# Keys the cache of pairs read from files, with the files' sizes and times: a change to how they are read (here, or
# in the one text reader) reads again.
_READER_VERSION = hashlib.sha256(Path(__file__).read_bytes() + Path(texts.__file__).read_bytes()).hexdigest()[:16]


def read_sentences(path: str | Path) -> list[str]:
    """Read a one-sentence-per-line file; an empty or whitespace-only line raises a ValueError naming its number."""
    sentences = []
    for number, text in iter_text_lines(path):
        if not text.strip():
            raise ValueError(f"{path}, line {number}: empty line; expected one sentence per line")
        sentences.append(text)
    if not sentences:
        raise ValueError(f"{path} is empty; expected one sentence per line")
    return sentences


def _check_languages(source_lang: str, target_lang: str) -> None:
    for name, lang in (("source_lang", source_lang), ("target_lang", target_lang)):
        if not isinstance(lang, str) or not lang:
            raise ValueError(f"{name} must be a non-empty language code such as 'en', got {lang!r}")
    if source_lang == target_lang:
        raise ValueError(f"source_lang and target_lang are both {source_lang!r}; expected two different languages")


def _translation_features(*languages: str) -> Features:
    # Sorted, as Translation orders its struct fields, so both directions of a pair get equal features.
    return Features({"translation": Translation(languages=sorted(languages))})


def _aligned_pairs(
    source_file: Path, target_file: Path, source_lang: str, target_lang: str, identity: str
) -> Iterator:
    # `identity` (sizes and modification times) only keys the cache: an edited file is read again.
    source_lines, target_lines = iter_text_lines(source_file), iter_text_lines(target_file)
    pairs = 0
    for source_line, target_line in zip_longest(source_lines, target_lines):
        if source_line is None or target_line is None:
            # One file ended first: count the other's remaining lines, so the error says by how much.
            source_count = pairs + (source_line is not None) + sum(1 for _ in source_lines)
            target_count = pairs + (target_line is not None) + sum(1 for _ in target_lines)
            raise ValueError(
                f"misaligned parallel files: {source_file} has {source_count} lines but {target_file} has "
                f"{target_count}; expected the same number of lines"
            )
        (number, source), (_, target) = source_line, target_line
        for path, text in ((source_file, source), (target_file, target)):
            if not text.strip():
                raise ValueError(f"{path}, line {number}: empty line; expected one sentence per line")
        pairs = number
        yield {"translation": {source_lang: source, target_lang: target}}
    if not pairs:
        raise ValueError(f"{source_file} is empty; expected one sentence per line")


def load_text_pairs(source_file: str | Path, target_file: str | Path, source_lang: str, target_lang: str) -> Dataset:
    """Load two aligned one-sentence-per-line files (`.gz` allowed): line N of one translates line N of the other.

    The pairs stream into an Arrow file in the `datasets` cache (`Dataset.from_generator`), so a corpus of millions of
    lines is never held in memory, and a second run over the same, unchanged files reads the cache instead.
    """
    _check_languages(source_lang, target_lang)
    files = [existing_file(source_file), existing_file(target_file)]
    gen_kwargs = {"source_file": files[0], "target_file": files[1], "source_lang": source_lang,
                  "target_lang": target_lang, "identity": _identity(files)}  # fmt: skip
    return _generated(_aligned_pairs, gen_kwargs, _translation_features(source_lang, target_lang))


def _identity(files: Sequence[Path]) -> str:
    """What keys the cache of the pairs read from `files`, beside the reader's arguments: each file's path and the
    SHA-256 of its bytes (an edited file is read again, whatever its size and times say: `touch -r`, `cp -p` and an
    archive re-extracted restore the modification time), and the readers' version. A string, not a list:
    `from_generator` would take a list for shards to split between workers."""
    return repr([_READER_VERSION, *[(str(path.resolve()), content_digest(path)) for path in files]])


def content_digest(path: Path) -> str:
    """The SHA-256 of the file's bytes: 0.41 s for a 286 MB file (700 MB/s; docs/training.md), so hashed on every
    load rather than remembered by the file's status: a memo keyed by size and modification time is what `touch -r`
    fools, and one safe from it would need the change time (st_ctime_ns, which no user call can set back) and a
    store of its own, for a second or two a WMT-size corpus. A pipe is read once, by the reader: it is never the
    same corpus twice, and the key is one no other load has."""
    if not path.is_file():
        return f"not a regular file, read anew: {uuid.uuid4()}"
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _generated(generator: Callable, gen_kwargs: dict, features: Features, cache_dir: str | None = None) -> Dataset:
    """`Dataset.from_generator`, streamed into an Arrow file in the `datasets` cache, with the builder's wrapper taken
    off a refusal raised while reading: our ValueError (file and line) or OSError (file) is what the user needs."""
    try:
        return Dataset.from_generator(generator, features=features, gen_kwargs=gen_kwargs, cache_dir=cache_dir)
    except DatasetGenerationError as error:
        if isinstance(error.__cause__, (ValueError, OSError)):
            raise error.__cause__ from None
        raise


def multi30k_files(
    split: str, data_dir: str | Path | None = None, languages: Sequence[str] = ("en", "de")
) -> dict[str, Path]:
    """Paths of the Multi30k files of `split` ('train', 'validation' or 'test' = test2016 Flickr) in `languages`
    (any of English, German and French).

    `data_dir` defaults to the copy shipped with the package (gzip-compressed); an override may hold compressed
    (`train.en.gz`) or plain (`train.en`) files.
    """
    if split not in MULTI30K_SPLITS:
        raise ValueError(f"unknown Multi30k split {split!r}; expected one of {sorted(MULTI30K_SPLITS)}")
    unknown = [lang for lang in languages if lang not in MULTI30K_LANGUAGES]
    if unknown:
        raise ValueError(f"Multi30k has no {unknown[0]!r} text; expected languages among {MULTI30K_LANGUAGES}")
    directory = Path(data_dir) if data_dir is not None else MULTI30K_DIR
    files = {}
    for lang in languages:
        name = f"{MULTI30K_SPLITS[split]}.{lang}"
        candidates = [directory / f"{name}.gz", directory / name]
        found = [path for path in candidates if path.is_file()]
        if not found:
            raise FileNotFoundError(f"Multi30k {split!r} file not found: expected {candidates[0]} or {candidates[1]}")
        files[lang] = found[0]
    return files


def load_multi30k(
    split: str | None = None,
    source_lang: str = "en",
    target_lang: str = "de",
    data_dir: str | Path | None = None,
) -> Dataset | DatasetDict:
    """Load one Multi30k split, or all three as a DatasetDict when `split` is None, in any direction between
    English, German and French (the paper's two tasks are En-De and En-Fr)."""
    _check_languages(source_lang, target_lang)
    if split is None:
        return DatasetDict({name: load_multi30k(name, source_lang, target_lang, data_dir) for name in MULTI30K_SPLITS})
    files = multi30k_files(split, data_dir, (source_lang, target_lang))
    return load_text_pairs(files[source_lang], files[target_lang], source_lang, target_lang)


def _checked_pair(pair: object, source_lang: str, target_lang: str, where: str) -> dict[str, str]:
    """The one check of a translation pair, whatever format it was read from: a dict holding a sentence (a string
    with more than white space, that UTF-8 can hold) for each language; refused naming `where` otherwise."""
    if not isinstance(pair, dict):
        raise ValueError(
            f"{where}: translation is {pair!r}; expected a dict with keys {source_lang!r} and {target_lang!r}"
        )
    for lang in (source_lang, target_lang):
        if lang not in pair:
            raise ValueError(f"{where}: no {lang!r} text (found keys {sorted(pair)}); expected {lang!r} in every row")
        text = pair[lang]
        if text is None:
            raise ValueError(f"{where}: the {lang!r} value is null; expected a string (a sentence)")
        if not isinstance(text, str):
            raise ValueError(f"{where}: {lang!r} is {text!r} ({type(text).__name__}); expected a string")
        if not text.strip():
            raise ValueError(f"{where}: {lang!r} text is empty; expected a sentence")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:  # JSON's "\ud800": no character, and nothing Arrow can store
            raise ValueError(
                f"{where}: {lang!r} text holds a lone surrogate ({text[error.start]!r} at character {error.start}), "
                "which is no Unicode text; expected UTF-8 text"
            ) from None
    return {source_lang: pair[source_lang], target_lang: pair[target_lang]}


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
    return _checked_pair(row.get("translation", row), source_lang, target_lang, where)


def _table_format(path: Path) -> str:
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
    form = _table_format(path)
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
    expected = "expected one JSON object a line"
    rows = 0
    for number, text in iter_text_lines(path):
        if not text.strip():
            continue
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"{path}, line {number}, column {error.colno}: not valid JSON ({error.msg}); {expected}"
            ) from None
        except (ValueError, RecursionError) as error:  # a number of more than 4300 digits, nesting too deep
            raise ValueError(f"{path}, line {number}: not valid JSON ({error}); {expected}") from None
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
    expected = "expected a JSON array of objects"
    decoder, counted, line, rows = json.JSONDecoder(), 0, 1, 0

    def line_of(index: int) -> int:  # counted forward only: the array is read in order
        nonlocal counted, line
        line += text.count("\n", counted, index)
        counted = index
        return line

    def refuse(index: int, reason: str):
        column = index - (text.rfind("\n", 0, index) + 1) + 1
        raise ValueError(f"{path}, line {line_of(index)}, column {column}: not valid JSON ({reason}); {expected}")

    position = _skip_space(text, position + 1)
    while not text.startswith("]", position) or rows:
        if position >= len(text):
            refuse(position, "the array is not closed")
        try:
            value, end = decoder.raw_decode(text, position)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"{path}, line {error.lineno}, column {error.colno}: not valid JSON ({error.msg}); {expected}"
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


def _table_pairs(path: Path, source_lang: str, target_lang: str, identity: str) -> Iterator[dict]:
    # `identity` (sizes and modification times) only keys the cache: an edited file is read again.
    for where, row in table_rows(path, (source_lang, target_lang)):
        yield {"translation": _checked_row(row, source_lang, target_lang, where)}


def text_pair_location(source_file: str | Path, target_file: str | Path, row: int) -> str:
    """Pair `row` (0-based) of two aligned files `load_text_pairs` read, in words: line row + 1 of both (it skips
    no line)."""
    return f"line {row + 1} of {source_file} and {target_file}"


def table_row_location(path: str | Path, row: int) -> str:
    """Row `row` (0-based) of a table `load_table_pairs` read, in words: the line it starts on (read again, only to
    name it), or its row of a Parquet file."""
    path = Path(path)
    if _table_format(path) != "Parquet":
        for where, _ in itertools.islice(table_rows(path), row, None):
            return where
    return f"{path}, row {row + 1}"


def _row_pairs(dataset: Dataset, source_lang: str, target_lang: str, where: str):
    """Return a function reading the pair of row i of a batch, whichever of the two layouts is used."""
    columns = dataset.column_names
    if "translation" in columns:
        return lambda batch, i: batch["translation"][i]
    if source_lang in columns and target_lang in columns:
        return lambda batch, i: {lang: batch[lang][i] for lang in (source_lang, target_lang)}
    raise ValueError(
        f"{where} has columns {columns}; expected a 'translation' column or one column per language "
        f"({source_lang!r} and {target_lang!r})"
    )


def _rebuild_translation(
    dataset: Dataset, source_lang: str, target_lang: str, where: str, locate: Callable[[int], str]
) -> Dataset:
    """Check every row in Python and rebuild the data as a single `translation` column."""
    pair_of = _row_pairs(dataset, source_lang, target_lang, where)

    def rebuild(batch, indices):
        checked = [
            _checked_pair(pair_of(batch, i), source_lang, target_lang, locate(row)) for i, row in enumerate(indices)
        ]
        return {"translation": checked}

    return dataset.map(
        rebuild,
        batched=True,
        with_indices=True,
        remove_columns=dataset.column_names,
        features=_translation_features(source_lang, target_lang),
        desc="Checking translation pairs",
    )


def _struct_languages(dataset: Dataset) -> list[str] | None:
    """Field names of the `translation` column when it is a struct of strings, else None."""
    if "translation" not in dataset.features:
        return None
    column_type = dataset.features.arrow_schema.field("translation").type
    if not pa.types.is_struct(column_type):
        return None
    fields = [column_type.field(i) for i in range(column_type.num_fields)]
    if any(field.type not in (pa.string(), pa.large_string()) for field in fields):
        return None
    return [field.name for field in fields]


def _first_bad_row(dataset: Dataset, languages: Sequence[str]) -> int | None:
    column = dataset.with_format("arrow")["translation"]
    bad = pc.is_null(column)
    for lang in languages:
        blank = pc.equal(pc.utf8_trim_whitespace(pc.struct_field(column, [lang])), "")
        bad = pc.or_(bad, pc.fill_null(blank, True))
    index = pc.index(bad, True).as_py()
    return None if index < 0 else index


def _validated(
    dataset: Dataset, source_lang: str, target_lang: str, where: str, locate: Callable[[int], str] | None = None
) -> Dataset:
    """Return a table `dataset` (Parquet, a Hub dataset) as a single `translation` column after checking every row has
    both texts (`_checked_pair`); a bad row is named by `locate(row)` (0-based), by default "WHERE, row N"."""
    if locate is None:
        locate = lambda row: f"{where}, row {row + 1}"  # noqa: E731
    if len(dataset) == 0:
        raise ValueError(f"{where} has no rows; expected translation pairs")
    languages = _struct_languages(dataset)
    if languages is None or not {source_lang, target_lang} <= set(languages):
        return _rebuild_translation(dataset, source_lang, target_lang, where, locate)
    # Hub-sized corpora (WMT14: 4.5M pairs) are already in this layout: check them vectorized, without a copy, and
    # let the Python check word the error for the first bad row.
    row = _first_bad_row(dataset, (source_lang, target_lang))
    if row is not None:
        pair = dataset[row]["translation"]
        _checked_pair(pair, source_lang, target_lang, locate(row))
        # Arrow's idea of whitespace is a little wider than str.strip's.
        raise ValueError(f"{locate(row)}: {pair!r} has a blank text; expected a sentence in each language")
    # A plain struct (from JSON, say) becomes the Translation feature that Hub translation datasets declare.
    features = _translation_features(*languages)
    dataset = dataset.select_columns(["translation"])
    return dataset if dataset.features == features else dataset.cast(features)


def _load_parquet(paths: list[Path], source_lang: str, target_lang: str, cache_dir: str | None) -> Dataset:
    """Parquet files, read as one table through `datasets` (memory-mapped, at WMT's size), each file opened first so
    that one that is not Parquet, or lacks the columns, is named; a bad row is named by its file and row there."""
    counts = []
    for path in paths:
        try:
            metadata = pq.ParquetFile(path)
            names, rows = metadata.schema_arrow.names, metadata.metadata.num_rows
        except (pa.ArrowException, OSError) as error:
            raise ValueError(
                f"{path} is not a readable Parquet file ({_first_line(error)}); expected a table of translation pairs"
            ) from None
        if "translation" not in names and not {source_lang, target_lang} <= set(names):
            raise ValueError(
                f"{path} has columns {names}; expected a 'translation' column or one column per language "
                f"({source_lang!r} and {target_lang!r})"
            )
        counts.append(rows)
    if not sum(counts):
        raise ValueError(f"{', '.join(map(str, paths))} holds no rows; expected translation pairs")
    # `datasets` keys its cache of local files by their modification times: the configuration's name keys it by
    # their contents (`_identity`) too, so that a table edited in place is read again as the other formats are.
    name = "vaswani-" + hashlib.sha256(_identity(paths).encode()).hexdigest()[:32]
    files = [str(path) for path in paths]
    try:
        dataset = load_dataset("parquet", name=name, data_files=files, split="train", cache_dir=cache_dir)
    except DatasetGenerationError as error:
        cause = error.__cause__ or error
        for path in paths:  # a file whose footer reads but whose data does not
            try:
                pq.read_table(path)
            except (pa.ArrowException, OSError) as unreadable:
                raise ValueError(
                    f"{path} is not a readable Parquet file ({_first_line(unreadable)}); expected a table of "
                    "translation pairs"
                ) from None
        raise ValueError(
            f"{', '.join(map(str, paths))}: not one table ({type(cause).__name__}: {_first_line(cause)}); expected "
            "Parquet files of the same columns"
        ) from None
    starts = list(itertools.accumulate(counts, initial=0))

    def locate(row: int) -> str:
        index = bisect.bisect_right(starts, row) - 1
        return f"{paths[index]}, row {row - starts[index] + 1}"

    return _validated(dataset, source_lang, target_lang, str(paths[0]), locate)


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def load_table_pairs(
    files: str | Path | Sequence[str | Path],
    source_lang: str,
    target_lang: str,
    cache_dir: str | None = None,
) -> Dataset:
    """Load translation pairs from JSON Lines, JSON, CSV, TSV (`.gz` allowed) or Parquet files, concatenated in the
    order given.

    Each row holds either a `translation` dict (`{"translation": {"en": ..., "de": ...}}`, the Hub schema) or one
    column per language code (`{"en": ..., "de": ...}`, or a CSV/TSV header `en,de`). Other columns are dropped.
    The text formats stream through their readers (`table_rows`) into an Arrow file in the `datasets` cache, reused
    while the file is unchanged; Parquet is read by `datasets`. A bad row of any format is named by file and line
    (Parquet: row) with what was found and what was expected.
    """
    _check_languages(source_lang, target_lang)
    paths = [files] if isinstance(files, (str, Path)) else list(files)
    if not paths:
        raise ValueError("files is empty; expected at least one .jsonl, .json, .csv, .tsv or .parquet file")
    paths = [existing_file(path) for path in paths]
    forms = [_table_format(path) for path in paths]  # every name checked before any file is read
    if all(form == "Parquet" for form in forms):
        return _load_parquet(paths, source_lang, target_lang, cache_dir)
    features = _translation_features(source_lang, target_lang)
    parts = [
        _load_parquet([path], source_lang, target_lang, cache_dir)
        if form == "Parquet"
        else _generated(
            _table_pairs,
            {"path": path, "source_lang": source_lang, "target_lang": target_lang, "identity": _identity([path])},
            features,
            cache_dir,
        )
        for path, form in zip(paths, forms, strict=True)
    ]
    return parts[0] if len(parts) == 1 else concatenate_datasets(parts)


def _is_saved_to_disk(path: Path) -> bool:
    return (path / "dataset_dict.json").is_file() or (path / "state.json").is_file()


def _from_disk(path: Path, split: str | None) -> Dataset | DatasetDict:
    dataset = load_from_disk(str(path))
    if split is None:
        return dataset
    if isinstance(dataset, Dataset):
        raise ValueError(f"{path} holds a single Dataset, not splits; expected split=None, got split={split!r}")
    if split not in dataset:
        raise ValueError(f"{path} has no split {split!r}; expected one of {sorted(dataset)}")
    return dataset[split]


def _local_data_files(folder: Path, config: str | None) -> dict[str, list[Path]] | None:
    """The files of each split of a local dataset folder as `datasets` finds them (its split names, a README's
    configs), when every one is a table this module reads (TABLE_FORMATS), so that they are read and refused as
    `--train_file` is; None otherwise (`datasets` reads the folder)."""
    try:
        try:
            data_files = load_dataset_builder(str(folder), config).config.data_files
        except ValueError:  # files of several formats, which `datasets` does not mix; its split names still hold
            if config is not None:
                raise
            data_files = DataFilesDict.from_patterns(get_data_patterns(str(folder)), base_path=str(folder))
    except FileNotFoundError as error:  # datasets' "doesn't contain any data files"
        raise ValueError(
            f"{folder} holds no data files `datasets` recognizes ({_first_line(error)}); expected files such as "
            "train.jsonl or data/train-00000-of-00001.parquet"
        ) from None
    files = {str(split): [Path(name) for name in names] for split, names in (data_files or {}).items()}
    names = [name for split_names in files.values() for name in split_names]
    known = all(Path(name.name.removesuffix(".gz")).suffix in TABLE_FORMATS for name in names)
    return files if files and known else None


def load_hub_pairs(
    name_or_path: str | Path,
    config: str | None = None,
    *,
    source_lang: str,
    target_lang: str,
    split: str | None = None,
    cache_dir: str | None = None,
) -> Dataset | DatasetDict:
    """Load a Hub translation dataset (e.g. `load_hub_pairs("wmt14", "de-en", source_lang="en", target_lang="de")`).

    A folder written by `save_to_disk` is read with `load_from_disk`; a local folder of JSON Lines, JSON, CSV, TSV or
    Parquet files (split by `datasets`' rules: train.jsonl, data/train-*.parquet, ...) as `load_table_pairs` reads
    them; anything else (Hub name, another local folder) goes to `datasets.load_dataset(name_or_path, config,
    split=split)`. Returns a DatasetDict when `split` is None.
    """
    _check_languages(source_lang, target_lang)
    languages = {"source_lang": source_lang, "target_lang": target_lang, "cache_dir": cache_dir}
    path = Path(name_or_path)
    local = None
    if path.is_dir() and not _is_saved_to_disk(path):
        local = _local_data_files(path, config)
    if local is not None:
        if split is None:
            return DatasetDict({name: load_table_pairs(files, **languages) for name, files in local.items()})
        if split not in local:
            raise ValueError(f"{path} has no split {split!r}; expected one of {sorted(local)}")
        return load_table_pairs(local[split], **languages)
    if _is_saved_to_disk(path):
        dataset = _from_disk(path, split)
    else:
        try:
            dataset = load_dataset(str(name_or_path), config, split=split, cache_dir=cache_dir)
        except DatasetGenerationError as error:
            cause = error.__cause__ or error
            raise ValueError(
                f"{name_or_path}: `datasets` could not read it ({type(cause).__name__}: {_first_line(cause)}); "
                "expected a dataset of translation pairs"
            ) from None
    if isinstance(dataset, DatasetDict):
        return DatasetDict(
            {
                name: _validated(part, source_lang, target_lang, f"{name_or_path} split {name!r}")
                for name, part in dataset.items()
            }
        )
    return _validated(dataset, source_lang, target_lang, f"{name_or_path}" + (f" split {split!r}" if split else ""))


def _check_tokenizer(tokenizer) -> None:
    # The model prepends the decoder start token to the labels itself; labels must end with </s> and not start
    # with <s>, or the model learns to never stop or sees <s> twice.
    ids = tokenizer("a")["input_ids"]
    if tokenizer.eos_token_id is None or ids[-1] != tokenizer.eos_token_id:
        raise ValueError(f"tokenizer encodes 'a' as {ids}: expected the ids to end with eos_token_id")
    if tokenizer.bos_token_id is not None and ids[0] == tokenizer.bos_token_id:
        raise ValueError(f"tokenizer encodes 'a' as {ids}: expected no leading bos_token_id (the model adds it)")


# int32 ids (vocabularies are far below 2**31) and int8 masks: a quarter of the default int64 on disk and in the
# page cache, which is what a 4.5M-pair corpus's tokenized copy costs.
TOKENIZED_FEATURES = Features(
    {
        "input_ids": List(Value("int32")),
        "attention_mask": List(Value("int8")),
        "labels": List(Value("int32")),
    }
)


def _encode(batch, tokenizer, source_lang: str, target_lang: str) -> dict:
    sources = [pair[source_lang] for pair in batch["translation"]]
    targets = [pair[target_lang] for pair in batch["translation"]]
    encoded = tokenizer(sources, text_target=targets, truncation=False)
    return {key: encoded[key] for key in TOKENIZED_FEATURES}


def _keep_fitting(batch: pa.Table, max_length: int) -> pa.Table:
    # On Arrow's list offsets: no Python list per example is built to count its tokens.
    fits = pc.and_(
        pc.less_equal(pc.list_value_length(batch["input_ids"]), max_length),
        pc.less_equal(pc.list_value_length(batch["labels"]), max_length),
    )
    return batch.filter(fits)


def check_max_length(max_length: int | None) -> None:
    """Refuses a `max_length` that is not None or an int >= 2, before any tokenizing."""
    if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 2):
        raise ValueError(f"max_length must be None or an int >= 2 (a token plus </s>), got {max_length!r}")


def filter_by_length(tokenized: Dataset, max_length: int, num_proc: int | None = None, name: str = "dataset"):
    """Drop the pairs of a tokenized dataset whose source or target (counting the </s>) has more than `max_length`
    tokens, and log how many (WARNING when any is dropped)."""
    check_max_length(max_length)
    # A map that returns fewer rows, not `Dataset.filter`: a filter leaves the kept rows behind an index mapping,
    # through which every later read (the sampler's lengths, each batch) gathers a copy (47 s for 4.5M pairs'
    # lengths); this writes the kept rows out once, in Arrow, and the result is cached like the tokenization.
    kept = tokenized.with_format("arrow").map(
        _keep_fitting,
        batched=True,
        fn_kwargs={"max_length": max_length},
        num_proc=num_proc,
        desc=f"Length filter {name}",
    )
    kept = kept.with_format(tokenized.format["type"], tokenized.format["columns"])
    removed = len(tokenized) - len(kept)
    log = logger.warning if removed else logger.info
    log("%s: dropped %d of %d pairs longer than max_length=%d tokens", name, removed, len(tokenized), max_length)
    return kept


def _tokenize_split(
    dataset: Dataset,
    tokenizer,
    source_lang: str,
    target_lang: str,
    max_length: int | None,
    num_proc: int | None,
    name: str,
) -> Dataset:
    tokenized = dataset.map(
        _encode,
        batched=True,
        remove_columns=dataset.column_names,
        features=TOKENIZED_FEATURES,
        fn_kwargs={"tokenizer": tokenizer, "source_lang": source_lang, "target_lang": target_lang},
        num_proc=num_proc,
        desc=f"Tokenizing {name}",
    )
    return tokenized if max_length is None else filter_by_length(tokenized, max_length, num_proc, name)


def tokenize_pairs(
    dataset: Dataset | DatasetDict,
    tokenizer,
    source_lang: str,
    target_lang: str,
    max_length: int | None = None,
    num_proc: int | None = None,
) -> Dataset | DatasetDict:
    """Map translation pairs to `input_ids`, `attention_mask` and `labels` (target ids ending with </s>).

    Nothing is ever truncated: a cut-off target would teach the model to stop mid-sentence, and a cut-off source
    to translate text it never saw. With `max_length` set, pairs whose source or target (counting the </s>) is
    longer are dropped by `filter_by_length` and the count is logged (WARNING when any is dropped). Dropping was
    chosen over raising because large corpora (WMT) hold a few overlong or misaligned pairs that nobody wants to train
    on; evaluation sets should be tokenized without `max_length` so that every reference is kept. The original
    columns are removed, so rows align with the input only when `max_length` is None. `num_proc` worker processes
    share the work. Results are cached by `datasets` beside the input's
    Arrow files, so a second run over the same data and tokenizer reads them back.
    """
    _check_languages(source_lang, target_lang)
    check_max_length(max_length)
    if num_proc is not None and (isinstance(num_proc, bool) or not isinstance(num_proc, int) or num_proc < 1):
        raise ValueError(f"num_proc must be None or an int >= 1 (worker processes), got {num_proc!r}")
    _check_tokenizer(tokenizer)
    if isinstance(dataset, DatasetDict):
        return DatasetDict(
            {
                name: _tokenize_split(part, tokenizer, source_lang, target_lang, max_length, num_proc, name)
                for name, part in dataset.items()
            }
        )
    name = str(dataset.split) if dataset.split is not None else "dataset"
    return _tokenize_split(dataset, tokenizer, source_lang, target_lang, max_length, num_proc, name)
