"""Tables that `datasets` reads into Arrow (Parquet files, Hub datasets, folders written by `save_to_disk`, local
dataset folders), each checked by column into the one `translation` column, a bad row named by where it is."""

import bisect
import itertools
from collections.abc import Callable, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from datasets import Dataset, DatasetDict, load_dataset, load_dataset_builder, load_from_disk
from datasets.data_files import DataFilesDict, get_data_patterns
from datasets.exceptions import DatasetGenerationError

from .pairs import checked_pair, translation_features
from .tables import TABLE_FORMATS


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
            checked_pair(pair_of(batch, i), source_lang, target_lang, locate(row)) for i, row in enumerate(indices)
        ]
        return {"translation": checked}

    return dataset.map(
        rebuild,
        batched=True,
        with_indices=True,
        remove_columns=dataset.column_names,
        features=translation_features(source_lang, target_lang),
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


def validated(
    dataset: Dataset, source_lang: str, target_lang: str, where: str, locate: Callable[[int], str] | None = None
) -> Dataset:
    """Return a table `dataset` (Parquet, a Hub dataset) as a single `translation` column after checking every row has
    both texts (`checked_pair`); a bad row is named by `locate(row)` (0-based), by default "WHERE, row N"."""
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
        checked_pair(pair, source_lang, target_lang, locate(row))
        # Arrow's idea of whitespace is a little wider than str.strip's.
        raise ValueError(f"{locate(row)}: {pair!r} has a blank text; expected a sentence in each language")
    # A plain struct (from JSON, say) becomes the Translation feature that Hub translation datasets declare.
    features = translation_features(*languages)
    dataset = dataset.select_columns(["translation"])
    return dataset if dataset.features == features else dataset.cast(features)


def load_parquet(
    paths: list[Path], source_lang: str, target_lang: str, cache_dir: str | None, cache_name: str
) -> Dataset:
    """Parquet files, read as one table through `datasets` (memory-mapped, at WMT's size) under the configuration
    name `cache_name`, each file opened first so that one that is not Parquet, or lacks the columns, is named; a bad
    row is named by its file and row there."""
    counts = []
    for path in paths:
        try:
            metadata = pq.ParquetFile(path)
            names, rows = metadata.schema_arrow.names, metadata.metadata.num_rows
        except (pa.ArrowException, OSError) as error:
            raise ValueError(
                f"{path} is not a readable Parquet file ({first_line(error)}); expected a table of translation pairs"
            ) from None
        if "translation" not in names and not {source_lang, target_lang} <= set(names):
            raise ValueError(
                f"{path} has columns {names}; expected a 'translation' column or one column per language "
                f"({source_lang!r} and {target_lang!r})"
            )
        counts.append(rows)
    if not sum(counts):
        raise ValueError(f"{', '.join(map(str, paths))} holds no rows; expected translation pairs")
    files = [str(path) for path in paths]
    try:
        dataset = load_dataset("parquet", name=cache_name, data_files=files, split="train", cache_dir=cache_dir)
    except DatasetGenerationError as error:
        cause = error.__cause__ or error
        for path in paths:  # a file whose footer reads but whose data does not
            try:
                pq.read_table(path)
            except (pa.ArrowException, OSError) as unreadable:
                raise ValueError(
                    f"{path} is not a readable Parquet file ({first_line(unreadable)}); expected a table of "
                    "translation pairs"
                ) from None
        raise ValueError(
            f"{', '.join(map(str, paths))}: not one table ({type(cause).__name__}: {first_line(cause)}); expected "
            "Parquet files of the same columns"
        ) from None
    starts = list(itertools.accumulate(counts, initial=0))

    def locate(row: int) -> str:
        index = bisect.bisect_right(starts, row) - 1
        return f"{paths[index]}, row {row - starts[index] + 1}"

    return validated(dataset, source_lang, target_lang, str(paths[0]), locate)


def first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def is_saved_to_disk(path: Path) -> bool:
    return (path / "dataset_dict.json").is_file() or (path / "state.json").is_file()


def from_disk(path: Path, split: str | None) -> Dataset | DatasetDict:
    dataset = load_from_disk(str(path))
    if split is None:
        return dataset
    if isinstance(dataset, Dataset):
        raise ValueError(f"{path} holds a single Dataset, not splits; expected split=None, got split={split!r}")
    if split not in dataset:
        raise ValueError(f"{path} has no split {split!r}; expected one of {sorted(dataset)}")
    return dataset[split]


def local_data_files(folder: Path, config: str | None) -> dict[str, list[Path]] | None:
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
            f"{folder} holds no data files `datasets` recognizes ({first_line(error)}); expected files such as "
            "train.jsonl or data/train-00000-of-00001.parquet"
        ) from None
    files = {str(split): [Path(name) for name in names] for split, names in (data_files or {}).items()}
    names = [name for split_names in files.values() for name in split_names]
    known = all(Path(name.name.removesuffix(".gz")).suffix in TABLE_FORMATS for name in names)
    return files if files and known else None
