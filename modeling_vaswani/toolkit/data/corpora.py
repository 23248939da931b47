"""Parallel data for translation: loading, validation and tokenization.

Every loader returns a `datasets.Dataset` (or a `DatasetDict` of splits) with the Hub's translation schema, as
`wmt14` uses: a single column `translation` holding `{source_lang: text, target_lang: text}`.

Bad data is never skipped quietly: misaligned files, empty lines, undecodable bytes and rows without a language raise
a `ValueError` naming the file (or dataset) and the line (or row). Lines are kept exactly as written (no stripping or
normalization) so that detokenized BLEU is computed against the original references.
"""

from __future__ import annotations

import errno
import gzip
import json
import logging
import os
from collections.abc import Iterator, Sequence
from importlib import resources
from itertools import zip_longest
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
from datasets import (
    Dataset,
    DatasetDict,
    Features,
    List,
    Translation,
    Value,
    concatenate_datasets,
    load_dataset,
    load_from_disk,
)
from datasets.exceptions import DatasetGenerationError

logger = logging.getLogger(__name__)

# Shipped as package data, so that it is there however the package was installed (wheel, editable, zip-free).
MULTI30K_DIR = Path(str(resources.files(__package__) / "multi30k"))
# Split names follow the Hub convention; the values are the upstream file stems.
MULTI30K_SPLITS = {"train": "train", "validation": "val", "test": "test_2016_flickr"}
MULTI30K_LANGUAGES = ("en", "de", "fr")  # task 1: English captions with German and French translations

# Suffix (after an optional .gz) -> `datasets` packaged builder.
_TABLE_BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv"}


def _existing_file(path: str | Path) -> Path:
    """`path` if it can be read as a file: a regular one, or a pipe such as the shell's `<(command)`."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"data file not found: {str(path)!r}")
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    return path


def iter_stream_lines(stream: BinaryIO, name: object) -> Iterator[tuple[int, str]]:
    """Yield `(line_number, text)` for a stream of UTF-8 bytes (a file, standard input), line numbers 1-based.

    Lines are split on "\\n" only (not on the Unicode line separators `str.splitlines` knows, nor on a stray "\\r") and
    lose their "\\n" or "\\r\\n"; a UTF-8 byte-order mark on line 1 is dropped. Invalid UTF-8, and NUL, which no text
    holds but binary data and UTF-16 do, raise a ValueError naming `name` and the line.
    """
    for number, raw in enumerate(stream, start=1):
        yield number, decode_line(raw, number, name)


def decode_line(raw: bytes, number: int, name: object) -> str:
    """Line `number` of `name` as text, as `iter_stream_lines` decodes it."""
    try:
        text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{name}, line {number}: not valid UTF-8 ({error.reason} at byte {error.start} of the line); "
            "expected UTF-8 text"
        ) from None
    if "\0" in text:
        raise ValueError(f"{name}, line {number}: holds a NUL character; expected UTF-8 text (binary or UTF-16?)")
    return text.removesuffix("\n").removesuffix("\r")


def iter_arrived_lines(fd: int, name: object, chunk: int = 1 << 16) -> Iterator[list[tuple[int, str]]]:
    """The lines of the file descriptor `fd` (a pipe, a terminal) in groups, each group as soon as it has arrived:
    whatever complete lines one read returns, so that a program reading them answers each line without waiting for
    the end of its input. Decoded and checked as `iter_stream_lines` does; a last line without "\\n" comes at the
    end. Written by hand: Python's line iterators read ahead, and would wait for more input before returning."""
    pending, number = b"", 0
    while data := os.read(fd, chunk):
        *complete, pending = (pending + data).split(b"\n")
        group = []
        for raw in complete:
            number += 1
            group.append((number, decode_line(raw, number, name)))
        if group:
            yield group
    if pending:
        yield [(number + 1, decode_line(pending, number + 1, name))]


def iter_text_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """`iter_stream_lines` of a UTF-8 text file (`.gz` allowed)."""
    path = _existing_file(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as stream:
        yield from iter_stream_lines(stream, path)


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


def load_text_pairs(source_file: str | Path, target_file: str | Path, source_lang: str, target_lang: str) -> Dataset:
    """Load two aligned one-sentence-per-line files (`.gz` allowed): line N of one translates line N of the other.

    The pairs stream into an Arrow file in the `datasets` cache (`Dataset.from_generator`), so a corpus of millions of
    lines is never held in memory, and a second run over the same, unchanged files reads the cache instead.
    """
    _check_languages(source_lang, target_lang)
    files = [_existing_file(source_file), _existing_file(target_file)]
    # A string, not a list: `from_generator` would take a list for shards to split between workers.
    identity = repr([(str(path.resolve()), path.stat().st_size, path.stat().st_mtime_ns) for path in files])
    try:
        dataset = Dataset.from_generator(
            _aligned_pairs,
            features=_translation_features(source_lang, target_lang),
            gen_kwargs={"source_file": files[0], "target_file": files[1], "source_lang": source_lang,
                        "target_lang": target_lang, "identity": identity},
        )  # fmt: skip
    except DatasetGenerationError as error:
        # Our ValueError, naming file and line, is what the user needs, not the builder's wrapper.
        if isinstance(error.__cause__, ValueError):
            raise error.__cause__ from None
        raise
    if len(dataset) == 0:
        raise ValueError(f"{files[0]} is empty; expected one sentence per line")
    return dataset


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
    return {source_lang: pair[source_lang], target_lang: pair[target_lang]}


def json_line_of_row(path: Path, row: int) -> tuple[int, object] | None:
    """The 1-based line number and parsed value of row `row` (0-based) of a JSON Lines file, as `datasets` counts
    rows (blank lines are no rows); None where the file does not read as one JSON value a line up to there (a JSON
    array, say). Read again only to name a bad row."""
    rows = -1
    for number, text in iter_text_lines(path):
        if text.strip():
            rows += 1
            if rows == row:
                try:
                    return number, json.loads(text)
                except ValueError:
                    return None
    return None


def text_pair_location(source_file: str | Path, target_file: str | Path, row: int) -> str:
    """Pair `row` (0-based) of two aligned files `load_text_pairs` read, in words: line row + 1 of both (it skips
    no line)."""
    return f"line {row + 1} of {source_file} and {target_file}"


def table_row_location(path: str | Path, row: int) -> str:
    """Row `row` (0-based) of a table `load_table_pairs` read, in words: its line of a JSON Lines file, its row
    counted after the header of a CSV file."""
    path = Path(path)
    if _table_builder(path) == "json":
        found = json_line_of_row(path, row)
        if found is not None:
            return f"{path}, line {found[0]}"
        return f"{path}, row {row + 1}"
    return f"{path}, row {row + 1} (counted after the header)"


def _checked_row(
    pair: object, source_lang: str, target_lang: str, where: str, row: int, lines: Path | None = None
) -> dict[str, str]:
    """`_checked_pair` of row `row` (0-based) of `where`. With `lines`, the JSON Lines file the rows were read from, a
    bad row is checked again as written there and named by its line: `datasets` reads a missing key and a null value
    alike (None), the file tells them apart."""
    try:
        return _checked_pair(pair, source_lang, target_lang, f"{where}, row {row + 1}")
    except ValueError:
        found = json_line_of_row(lines, row) if lines is not None else None
        if found is not None:
            number, value = found
            written = value.get("translation", value) if isinstance(value, dict) else value
            try:
                _checked_pair(written, source_lang, target_lang, f"{lines}, line {number}")
            except ValueError as at_line:
                raise at_line from None
        raise  # no line to name, or the line reads well as written: the row's own words, then


def _row_pairs(dataset: Dataset, source_lang: str, target_lang: str, where: str):
    """Return a function reading the pair of row i of a batch, whichever of the two file layouts is used."""
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
    dataset: Dataset, source_lang: str, target_lang: str, where: str, lines: Path | None = None
) -> Dataset:
    """Check every row in Python and rebuild the data as a single `translation` column."""
    pair_of = _row_pairs(dataset, source_lang, target_lang, where)

    def rebuild(batch, indices):
        pairs = [
            _checked_row(pair_of(batch, i), source_lang, target_lang, where, row, lines)
            for i, row in enumerate(indices)
        ]
        return {"translation": pairs}

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


def _validated(dataset: Dataset, source_lang: str, target_lang: str, where: str, lines: Path | None = None) -> Dataset:
    """Return `dataset` as a single `translation` column after checking every row has both texts; a bad row is named
    by its line of `lines`, the JSON Lines file it was read from, where there is one (`_checked_row`)."""
    if len(dataset) == 0:
        raise ValueError(f"{where} has no rows; expected translation pairs")
    languages = _struct_languages(dataset)
    if languages is None or not {source_lang, target_lang} <= set(languages):
        return _rebuild_translation(dataset, source_lang, target_lang, where, lines)
    # Hub-sized corpora (WMT14: 4.5M pairs) are already in this layout: check them vectorized, without a copy, and
    # let the Python check word the error for the first bad row.
    row = _first_bad_row(dataset, (source_lang, target_lang))
    if row is not None:
        pair = dataset[row]["translation"]
        _checked_row(pair, source_lang, target_lang, where, row, lines)
        # Arrow's idea of whitespace is a little wider than str.strip's.
        raise ValueError(f"{where}, row {row + 1}: {pair!r} has a blank text; expected a sentence in each language")
    # A plain struct (from JSON, say) becomes the Translation feature that Hub translation datasets declare.
    features = _translation_features(*languages)
    dataset = dataset.select_columns(["translation"])
    return dataset if dataset.features == features else dataset.cast(features)


def _table_builder(path: Path) -> str:
    suffix = Path(path.name.removesuffix(".gz")).suffix
    if suffix not in _TABLE_BUILDERS:
        raise ValueError(
            f"cannot tell the format of {path}: expected a name ending in {sorted(_TABLE_BUILDERS)} (+ .gz)"
        )
    return _TABLE_BUILDERS[suffix]


def _load_table(path: Path, source_lang: str, target_lang: str, cache_dir: str | None) -> Dataset:
    builder = _table_builder(path)
    # `datasets` would fail on bad bytes without a line number; this pass finds it.
    for _ in iter_text_lines(path):
        pass
    if builder == "csv":
        # Read texts as written: no type inference ("007" -> 7) and no "NA"/"null" -> missing.
        options = {"converters": {source_lang: str, target_lang: str}, "keep_default_na": False}
        where = f"{path} (rows counted after the header)"
    else:
        options, where = {}, str(path)
    dataset = load_dataset(builder, data_files=str(path), split="train", cache_dir=cache_dir, **options)
    return _validated(dataset, source_lang, target_lang, where, lines=path if builder == "json" else None)


def load_table_pairs(
    files: str | Path | Sequence[str | Path],
    source_lang: str,
    target_lang: str,
    cache_dir: str | None = None,
) -> Dataset:
    """Load translation pairs from JSON Lines or CSV files (`.gz` allowed), concatenated in the order given.

    Each row holds either a `translation` dict (`{"translation": {"en": ..., "de": ...}}`, the Hub schema) or one
    column per language code (`{"en": ..., "de": ...}`, or a CSV header `en,de`). Other columns are dropped.
    """
    _check_languages(source_lang, target_lang)
    paths = [files] if isinstance(files, (str, Path)) else list(files)
    if not paths:
        raise ValueError("files is empty; expected at least one .jsonl or .csv file")
    parts = [_load_table(_existing_file(path), source_lang, target_lang, cache_dir) for path in paths]
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

    A folder written by `save_to_disk` is read with `load_from_disk`; anything else (Hub name, local dataset folder)
    goes to `datasets.load_dataset(name_or_path, config, split=split)`. Returns a DatasetDict when `split` is None.
    """
    _check_languages(source_lang, target_lang)
    path = Path(name_or_path)
    if _is_saved_to_disk(path):
        dataset = _from_disk(path, split)
    else:
        dataset = load_dataset(str(name_or_path), config, split=split, cache_dir=cache_dir)
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
