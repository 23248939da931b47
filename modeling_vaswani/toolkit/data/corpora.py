"""Parallel data for translation, loaded: the shipped Multi30k, two aligned text files, tables of pairs (JSON Lines,
JSON, CSV, TSV, Parquet) and Hub or local datasets, each into a `datasets.Dataset` (or a `DatasetDict` of splits) with
the Hub's translation schema (`pairs.py`); the pairs read from files cached by the files' content.

Bad data is never skipped quietly: misaligned files, empty lines, undecodable bytes, rows that do not parse and rows
without a language raise a `ValueError` naming the file (or dataset) and the line (or row). Every file format is read
by a reader of its own that knows its lines (`tables.py`; Parquet by row, `arrow.py`), and every row of every format
passes one check (`pairs.checked_pair`). Lines are kept exactly as written (no stripping or normalization) so that
detokenized BLEU is computed against the original references. Tokenizing the pairs is `tokenization.py`'s.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterator, Sequence
from importlib import resources
from itertools import zip_longest
from pathlib import Path

from datasets import Dataset, DatasetDict, Features, concatenate_datasets, load_dataset
from datasets.exceptions import DatasetGenerationError

from .. import texts
from ..texts import existing_file, iter_text_lines
from . import arrow, pairs, tables
from .arrow import first_line, from_disk, is_saved_to_disk, load_parquet, local_data_files, validated
from .pairs import check_languages, translation_features
from .tables import table_format, table_pairs

# Shipped as package data, so that it is there however the package was installed (wheel, editable, zip-free).
MULTI30K_DIR = Path(str(resources.files(__package__) / "multi30k"))
# Split names follow the Hub convention; the values are the upstream file stems.
MULTI30K_SPLITS = {"train": "train", "validation": "val", "test": "test_2016_flickr"}
MULTI30K_LANGUAGES = ("en", "de", "fr")  # task 1: English captions with German and French translations

# Keys the cache of pairs read from files, with the files' contents: a change to how they are read (here, in the
# readers of tables, the check of a pair, the Arrow side, or the one text reader) reads again.
_READER_VERSION = hashlib.sha256(
    b"".join(Path(module.__file__).read_bytes() for module in (arrow, pairs, tables, texts))
    + Path(__file__).read_bytes()
).hexdigest()[:16]


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
    check_languages(source_lang, target_lang)
    files = [existing_file(source_file), existing_file(target_file)]
    gen_kwargs = {"source_file": files[0], "target_file": files[1], "source_lang": source_lang,
                  "target_lang": target_lang, "identity": _identity(files)}  # fmt: skip
    return _generated(_aligned_pairs, gen_kwargs, translation_features(source_lang, target_lang))


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
    check_languages(source_lang, target_lang)
    if split is None:
        return DatasetDict({name: load_multi30k(name, source_lang, target_lang, data_dir) for name in MULTI30K_SPLITS})
    files = multi30k_files(split, data_dir, (source_lang, target_lang))
    return load_text_pairs(files[source_lang], files[target_lang], source_lang, target_lang)


def text_pair_location(source_file: str | Path, target_file: str | Path, row: int) -> str:
    """Pair `row` (0-based) of two aligned files `load_text_pairs` read, in words: line row + 1 of both (it skips
    no line)."""
    return f"line {row + 1} of {source_file} and {target_file}"


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
    check_languages(source_lang, target_lang)
    paths = [files] if isinstance(files, (str, Path)) else list(files)
    if not paths:
        raise ValueError("files is empty; expected at least one .jsonl, .json, .csv, .tsv or .parquet file")
    paths = [existing_file(path) for path in paths]
    forms = [table_format(path) for path in paths]  # every name checked before any file is read
    if all(form == "Parquet" for form in forms):
        return load_parquet(paths, source_lang, target_lang, cache_dir, _parquet_cache_name(paths))
    features = translation_features(source_lang, target_lang)
    parts = [
        load_parquet([path], source_lang, target_lang, cache_dir, _parquet_cache_name([path]))
        if form == "Parquet"
        else _generated(
            table_pairs,
            {"path": path, "source_lang": source_lang, "target_lang": target_lang, "identity": _identity([path])},
            features,
            cache_dir,
        )
        for path, form in zip(paths, forms, strict=True)
    ]
    return parts[0] if len(parts) == 1 else concatenate_datasets(parts)


def _parquet_cache_name(paths: Sequence[Path]) -> str:
    """The configuration name under which `datasets` caches Parquet `paths`: it keys its cache of local files by their
    modification times, and this name keys it by their contents (`_identity`) too, so that a table edited in place is
    read again as the other formats are."""
    return "vaswani-" + hashlib.sha256(_identity(paths).encode()).hexdigest()[:32]


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
    check_languages(source_lang, target_lang)
    languages = {"source_lang": source_lang, "target_lang": target_lang, "cache_dir": cache_dir}
    path = Path(name_or_path)
    local = None
    if path.is_dir() and not is_saved_to_disk(path):
        local = local_data_files(path, config)
    if local is not None:
        if split is None:
            return DatasetDict({name: load_table_pairs(files, **languages) for name, files in local.items()})
        if split not in local:
            raise ValueError(f"{path} has no split {split!r}; expected one of {sorted(local)}")
        return load_table_pairs(local[split], **languages)
    if is_saved_to_disk(path):
        dataset = from_disk(path, split)
    else:
        try:
            dataset = load_dataset(str(name_or_path), config, split=split, cache_dir=cache_dir)
        except DatasetGenerationError as error:
            cause = error.__cause__ or error
            raise ValueError(
                f"{name_or_path}: `datasets` could not read it ({type(cause).__name__}: {first_line(cause)}); "
                "expected a dataset of translation pairs"
            ) from None
    if isinstance(dataset, DatasetDict):
        return DatasetDict(
            {
                name: validated(part, source_lang, target_lang, f"{name_or_path} split {name!r}")
                for name, part in dataset.items()
            }
        )
    return validated(dataset, source_lang, target_lang, f"{name_or_path}" + (f" split {split!r}" if split else ""))
