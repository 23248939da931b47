"""Tests for parallel-data loading and tokenization, on real files read through `datasets`."""

import csv
import gzip
import json
import logging
import os

import pytest
from datasets import Dataset, DatasetDict, Features, Translation
from helpers.training_setup import REPO

from modeling_vaswani.toolkit.data.corpora import (
    MULTI30K_DIR,
    load_hub_pairs,
    load_multi30k,
    load_table_pairs,
    load_text_pairs,
    multi30k_files,
)
from modeling_vaswani.toolkit.data.tokenization import tokenize_pairs
from modeling_vaswani.toolkit.data.tokenizer import train_tokenizer
from modeling_vaswani.toolkit.texts import iter_arrived_lines, iter_stream_lines

SCHEMA = Features({"translation": Translation(languages=["de", "en"])})
COUNTS = {"train": 29000, "validation": 1014, "test": 1000}
STEMS = {"train": "train", "validation": "val", "test": "test_2016_flickr"}


def gz_lines(path):
    with gzip.open(path, "rt", encoding="utf-8", newline="") as stream:
        return stream.read().removesuffix("\n").split("\n")


def write_lines(path, lines):
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    files = [MULTI30K_DIR / "val.en.gz", MULTI30K_DIR / "val.de.gz"]
    return train_tokenizer(files, vocab_size=500, output_dir=tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture
def cache_dir(tmp_path):
    return str(tmp_path / "hf_cache")


@pytest.mark.parametrize("split", COUNTS)
def test_multi30k_files_are_the_shipped_gz_files(split):
    files = multi30k_files(split)
    assert files == {
        lang: REPO / "modeling_vaswani" / "toolkit" / "data" / "multi30k" / f"{STEMS[split]}.{lang}.gz"
        for lang in ("en", "de")
    }
    assert [len(gz_lines(path)) for path in files.values()] == [COUNTS[split]] * 2


def test_multi30k_train_rows_match_the_files_line_by_line():
    dataset = load_multi30k("train")
    en, de = gz_lines(MULTI30K_DIR / "train.en.gz"), gz_lines(MULTI30K_DIR / "train.de.gz")
    assert dataset.features == SCHEMA and dataset.column_names == ["translation"]
    assert len(dataset) == 29000
    # Line 5909 of train.de ends with a space in the original data; it must survive loading.
    assert de[5908].endswith(". ")
    for index in (0, 5908, 14874, 28999):
        assert dataset[index]["translation"] == {"en": en[index], "de": de[index]}
    assert sum("&amp;" in pair["en"] for pair in dataset["translation"]) == 16


def test_multi30k_all_splits_and_plain_data_dir(tmp_path):
    for lang in ("en", "de"):
        write_lines(tmp_path / f"val.{lang}", gz_lines(MULTI30K_DIR / f"val.{lang}.gz"))
    assert multi30k_files("validation", data_dir=tmp_path) == {"en": tmp_path / "val.en", "de": tmp_path / "val.de"}
    dataset = load_multi30k("validation", source_lang="de", target_lang="en", data_dir=tmp_path)
    assert dataset[1013]["translation"]["de"] == gz_lines(MULTI30K_DIR / "val.de.gz")[1013]
    everything = load_multi30k()
    assert isinstance(everything, DatasetDict)
    assert {name: len(part) for name, part in everything.items()} == COUNTS


def test_multi30k_bad_arguments_are_named(tmp_path):
    with pytest.raises(ValueError, match="'dev'"):
        multi30k_files("dev")
    with pytest.raises(FileNotFoundError, match="test_2016_flickr.en"):
        multi30k_files("test", data_dir=tmp_path)
    with pytest.raises(ValueError, match="source_lang and target_lang are both 'fr'"):
        load_multi30k("test", source_lang="fr", target_lang="fr")
    with pytest.raises(ValueError, match=r"Multi30k has no 'cs' text; expected languages among \('en', 'de', 'fr'\)"):
        load_multi30k("test", source_lang="en", target_lang="cs")


def test_multi30k_french_for_the_papers_second_task():
    """En-Fr is the paper's second task; Multi30k's French is line-aligned with the same English captions."""
    english, french = (gz_lines(MULTI30K_DIR / f"test_2016_flickr.{lang}.gz") for lang in ("en", "fr"))
    test = load_multi30k("test", source_lang="en", target_lang="fr")
    assert len(test) == COUNTS["test"] and test.features == Features({"translation": Translation(["en", "fr"])})
    assert test[0]["translation"] == {"en": english[0], "fr": french[0]}
    reverse = load_multi30k("validation", source_lang="fr", target_lang="de")
    assert len(reverse) == COUNTS["validation"]
    assert reverse[5]["translation"]["de"] == gz_lines(MULTI30K_DIR / "val.de.gz")[5]


def test_text_pairs_from_plain_and_gz_files(tmp_path):
    source = write_lines(tmp_path / "x.en", ["A dog runs.", "Two cats\u00a0sleep. "])
    target = tmp_path / "x.de.gz"
    with gzip.open(target, "wb") as stream:
        stream.write(b"Ein Hund rennt.\r\nZwei Katzen schlafen.")
    dataset = load_text_pairs(source, target, "en", "de")
    assert dataset.features == SCHEMA
    assert dataset["translation"] == [
        {"de": "Ein Hund rennt.", "en": "A dog runs."},
        {"de": "Zwei Katzen schlafen.", "en": "Two cats\u00a0sleep. "},
    ]


def test_misaligned_text_files_name_both_files_and_counts(tmp_path):
    source = write_lines(tmp_path / "a.en", ["one", "two", "three"])
    target = write_lines(tmp_path / "a.de", ["eins", "zwei"])
    with pytest.raises(ValueError, match=r"a\.en has 3 lines but .*a\.de has 2"):
        load_text_pairs(source, target, "en", "de")


@pytest.mark.parametrize("blank", ["", "   ", "\t"])
def test_empty_line_names_file_and_line(tmp_path, blank):
    source = write_lines(tmp_path / "b.en", ["one", "two", "three"])
    target = write_lines(tmp_path / "b.de", ["eins", blank, "drei"])
    with pytest.raises(ValueError, match=r"b\.de, line 2: empty line"):
        load_text_pairs(source, target, "en", "de")


def test_undecodable_bytes_name_file_and_line(tmp_path):
    source = write_lines(tmp_path / "c.en", ["one", "two", "three"])
    target = tmp_path / "c.de.gz"
    with gzip.open(target, "wb") as stream:
        stream.write("eins\nzwei\nGrüße\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"c\.de\.gz, line 3: not valid UTF-8"):
        load_text_pairs(source, target, "en", "de")


@pytest.mark.parametrize("reader", ["stream", "arrived"])
def test_undecodable_bytes_are_named_by_their_byte_in_the_input(tmp_path, reader):
    """Counted by hand: "Grüße.\n" is 9 bytes (ü and ß take two each), so line 2's fifth byte is the input's 14th
    (offset 13); "eins\n" is 5, so the NUL of line 2 is at offset 5 + 2."""
    cases = [
        (
            b"Gr\xc3\xbc\xc3\x9fe.\nZwei\xff Hunde.\n",
            "line 2: not valid UTF-8 (invalid start byte at byte 4 of the line, byte 13 of the input)",
        ),
        (b"eins\nzw\x00ei\n", "line 2: holds a NUL character (byte 7 of the input)"),
    ]
    for data, message in cases:
        path = tmp_path / "input.txt"
        path.write_bytes(data)
        with pytest.raises(ValueError) as error:
            if reader == "stream":
                with path.open("rb") as stream:
                    list(iter_stream_lines(stream, path))
            else:
                descriptor = os.open(path, os.O_RDONLY)
                try:
                    list(iter_arrived_lines(descriptor, path, chunk=3))  # lines cut across reads
                finally:
                    os.close(descriptor)
        assert str(error.value).startswith(f"{path}, {message}")


def test_missing_text_file_and_bad_languages(tmp_path):
    source = write_lines(tmp_path / "d.en", ["one"])
    with pytest.raises(FileNotFoundError, match="d.de"):
        load_text_pairs(source, tmp_path / "d.de", "en", "de")
    with pytest.raises(ValueError, match="both 'en'"):
        load_text_pairs(source, source, "en", "en")


def test_jsonl_with_translation_dicts_and_language_columns(tmp_path, cache_dir):
    nested = tmp_path / "nested.jsonl"
    nested.write_text(json.dumps({"translation": {"en": "A dog.", "de": "Ein Hund."}}) + "\n", encoding="utf-8")
    flat = tmp_path / "flat.jsonl.gz"
    with gzip.open(flat, "wt", encoding="utf-8") as stream:
        stream.write(json.dumps({"id": 7, "en": "Two cats.", "de": "Zwei Katzen."}) + "\n")
    dataset = load_table_pairs([nested, flat], "en", "de", cache_dir=cache_dir)
    assert dataset.features == SCHEMA
    assert dataset["translation"] == [{"de": "Ein Hund.", "en": "A dog."}, {"de": "Zwei Katzen.", "en": "Two cats."}]


def test_csv_texts_are_read_verbatim(tmp_path, cache_dir):
    rows = [["de", "en"], ["Zimmer 007", "Room 007"], ["NA", "null"], ["Hund, Katze", "dog,\ncat"]]
    path = tmp_path / "pairs.csv"
    with path.open("w", encoding="utf-8", newline="") as stream:
        csv.writer(stream).writerows(rows)
    dataset = load_table_pairs(path, "en", "de", cache_dir=cache_dir)
    assert dataset["translation"] == [{"de": de, "en": en} for de, en in rows[1:]]


def test_jsonl_row_without_a_language_is_named(tmp_path, cache_dir):
    rows = [
        {"translation": {"en": "a", "de": "b"}},
        {"translation": {"en": "c", "de": "d"}},
        {"translation": {"en": "e"}},
    ]
    path = tmp_path / "missing.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    with pytest.raises(ValueError, match=r"missing\.jsonl, line 3: no 'de' text \(found keys \['en'\]\)"):
        load_table_pairs(path, "en", "de", cache_dir=cache_dir)


@pytest.mark.parametrize("nested", [False, True], ids=["language columns", "translation dicts"])
def test_jsonl_null_text_is_named_by_its_line_apart_from_a_missing_one(tmp_path, cache_dir, nested):
    """`datasets` reads a null and a missing key alike (None); the file tells them apart, and its line (blank lines
    are no rows) names the row."""
    rows = [{"en": "a", "de": "b"}, None, {"en": "c", "de": "d"}, {"en": "e", "de": None}, {"en": "f"}]
    lines = ["" if row is None else json.dumps({"translation": row} if nested else row) for row in rows]
    path = write_lines(tmp_path / "null.jsonl", lines)
    with pytest.raises(ValueError, match=r"null\.jsonl, line 4: the 'de' value is null; expected a string"):
        load_table_pairs(path, "en", "de", cache_dir=cache_dir)
    path = write_lines(tmp_path / "absent.jsonl", lines[:3] + lines[4:])
    with pytest.raises(ValueError, match=r"absent\.jsonl, line 4: no 'de' text \(found keys \['en'\]\)"):
        load_table_pairs(path, "en", "de", cache_dir=cache_dir)


def test_csv_row_with_empty_text_and_csv_without_language_column(tmp_path, cache_dir):
    path = write_lines(tmp_path / "empty.csv", ["en,de", "a,b", "c,"])
    with pytest.raises(ValueError, match=r"empty\.csv, line 3: 'de' text is empty"):
        load_table_pairs(path, "en", "de", cache_dir=cache_dir)
    path = write_lines(tmp_path / "french.csv", ["en,fr", "a,b"])
    with pytest.raises(ValueError, match=r"french\.csv, line 1: the header names the columns \['en', 'fr'\]"):
        load_table_pairs(path, "en", "de", cache_dir=cache_dir)


def test_table_bad_bytes_and_unknown_format(tmp_path, cache_dir):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(('{"en": "a", "de": "b"}\n{"en": "c", "de": "Grüße"}\n').encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1\.jsonl, line 2: not valid UTF-8"):
        load_table_pairs(path, "en", "de", cache_dir=cache_dir)
    with pytest.raises(ValueError, match=r"format of .*pairs\.txt"):
        load_table_pairs(write_lines(tmp_path / "pairs.txt", ["a"]), "en", "de", cache_dir=cache_dir)


def test_saved_dataset_dict_loads_like_a_hub_dataset(tmp_path, cache_dir):
    pairs = [{"de": f"Satz {i}.", "en": f"Sentence {i}."} for i in range(5)]
    splits = DatasetDict(
        {
            "train": Dataset.from_dict({"translation": pairs, "id": list(range(5))}, features=None),
            "test": Dataset.from_dict({"translation": pairs[:2]}),
        }
    )
    splits.save_to_disk(str(tmp_path / "saved"))
    train = load_hub_pairs(tmp_path / "saved", source_lang="en", target_lang="de", split="train")
    assert train.column_names == ["translation"] and train["translation"] == pairs
    everything = load_hub_pairs(str(tmp_path / "saved"), source_lang="de", target_lang="en")
    assert {name: len(part) for name, part in everything.items()} == {"train": 5, "test": 2}
    with pytest.raises(ValueError, match="no split 'validation'"):
        load_hub_pairs(tmp_path / "saved", source_lang="en", target_lang="de", split="validation")


def test_saved_dataset_with_a_blank_row_is_named(tmp_path):
    pairs = [{"de": "Ein Hund.", "en": "A dog."}, {"de": "Katze.", "en": "Cat."}, {"de": " ", "en": "Bird."}]
    Dataset.from_dict({"translation": pairs}, features=SCHEMA).save_to_disk(str(tmp_path / "one"))
    with pytest.raises(ValueError, match=r"one, row 3: 'de' text is empty"):
        load_hub_pairs(tmp_path / "one", source_lang="en", target_lang="de")
    with pytest.raises(ValueError, match="single Dataset, not splits"):
        load_hub_pairs(tmp_path / "one", source_lang="en", target_lang="de", split="train")


def test_local_dataset_folder_goes_through_load_dataset(tmp_path, cache_dir):
    folder = tmp_path / "hub_like"
    folder.mkdir()
    rows = [{"translation": {"de": "Ein Hund.", "en": "A dog."}}, {"translation": {"de": "Zwei.", "en": "Two."}}]
    (folder / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    dataset = load_hub_pairs(folder, source_lang="en", target_lang="de", split="train", cache_dir=cache_dir)
    assert dataset.features == SCHEMA and dataset["translation"] == [row["translation"] for row in rows]


def test_tokenize_pairs_matches_the_tokenizer(tokenizer):
    dataset = load_multi30k("test")
    tokenized = tokenize_pairs(dataset.select(range(50)), tokenizer, "en", "de")
    assert tokenized.column_names == ["input_ids", "attention_mask", "labels"]
    pair = dataset[49]["translation"]
    assert tokenized[49]["input_ids"] == tokenizer(pair["en"])["input_ids"]
    assert tokenized[49]["labels"] == tokenizer(pair["de"])["input_ids"]
    eos, bos = tokenizer.eos_token_id, tokenizer.bos_token_id
    assert all(labels[-1] == eos and bos not in labels for labels in tokenized["labels"])


def test_long_pairs_are_never_truncated_and_filter_is_logged(tokenizer, caplog):
    long_text = " ".join(["Ein Mann mit einem roten Hut geht die Straße entlang."] * 30)
    pairs = [{"en": "A dog.", "de": "Ein Hund."}, {"en": "Short.", "de": long_text}, {"en": "Cat.", "de": "Katze."}]
    dataset = Dataset.from_dict({"translation": pairs}, features=SCHEMA)
    full_length = len(tokenizer(long_text)["input_ids"])
    assert full_length > 200
    assert [len(labels) for labels in tokenize_pairs(dataset, tokenizer, "en", "de")["labels"]][1] == full_length
    with caplog.at_level(logging.INFO, logger="modeling_vaswani.toolkit.data"):
        kept = tokenize_pairs(dataset, tokenizer, "en", "de", max_length=full_length - 1)
    assert len(kept) == 2 and max(len(labels) for labels in kept["labels"]) < 20
    assert "dropped 1 of 3 pairs longer than max_length" in caplog.text


def test_length_filter_count_on_multi30k(tokenizer, caplog):
    dataset = load_multi30k("validation")
    max_length = 20
    expected = sum(
        max(len(tokenizer(pair["en"])["input_ids"]), len(tokenizer(pair["de"])["input_ids"])) > max_length
        for pair in dataset["translation"]
    )
    assert 0 < expected < len(dataset)
    with caplog.at_level(logging.WARNING, logger="modeling_vaswani.toolkit.data"):
        kept = tokenize_pairs(DatasetDict({"validation": dataset}), tokenizer, "en", "de", max_length=max_length)
    assert len(kept["validation"]) == len(dataset) - expected
    assert f"validation: dropped {expected} of {len(dataset)} pairs" in caplog.text


def test_tokenize_pairs_rejects_bad_tokenizer_and_max_length(tokenizer):
    dataset = Dataset.from_dict({"translation": [{"en": "A dog.", "de": "Ein Hund."}]}, features=SCHEMA)
    with pytest.raises(ValueError, match=r"max_length=1; expected an int of at least 2 \(a token plus </s>\)"):
        tokenize_pairs(dataset, tokenizer, "en", "de", max_length=1)
    without_eos = type(tokenizer)(tokenizer_object=tokenizer.backend_tokenizer, eos_token="</s>", add_eos_token=False)
    with pytest.raises(ValueError, match="expected the ids to end with eos_token_id"):
        tokenize_pairs(dataset, without_eos, "en", "de")


PREPARE = """
import json, logging, sys
from pathlib import Path
from modeling_vaswani.toolkit.training import recipe
from modeling_vaswani.toolkit.data.tokenization import tokenize_pairs

logging.basicConfig(level=logging.INFO, stream=sys.stderr)
source, target, output = sys.argv[1:]
train = recipe.load_data(recipe.DataArguments(train_source_file=source, train_target_file=target))["train"]
tokenizer = recipe.prepare_tokenizer(recipe.ModelArguments(vocab_size=400), train, "en", "de", Path(output))
tokenized = tokenize_pairs(train, tokenizer, "en", "de", max_length=64, num_proc=2)
print(json.dumps({"pairs": len(train), "data": [f["filename"] for f in train.cache_files],
                  "tokenized": sorted(f["filename"] for f in tokenized.cache_files)}))
"""


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_a_second_run_reuses_the_prepared_data_and_an_edited_file_is_prepared_again(tmp_path):
    """What makes a second run on WMT reach its first step in seconds: the loaded pairs, the trained vocabulary and
    the tokenized data come back from the `datasets` cache in a fresh process; an edited corpus is prepared anew."""
    import subprocess
    import sys

    source = write_lines(tmp_path / "train.en", gz_lines(MULTI30K_DIR / "train.en.gz")[:600])
    target = write_lines(tmp_path / "train.de", gz_lines(MULTI30K_DIR / "train.de.gz")[:600])
    environment = {**__import__("os").environ, "HF_DATASETS_CACHE": str(tmp_path / "cache")}

    def prepare():
        command = [sys.executable, "-c", PREPARE, str(source), str(target), str(tmp_path / "run")]
        process = subprocess.run(command, capture_output=True, text=True, env=environment, check=True)
        report = json.loads(process.stdout.strip().splitlines()[-1])
        return report | {"trained": "tokenizer: reusing" not in process.stderr}

    first, second = prepare(), prepare()
    assert first["trained"] and not second["trained"]
    assert second["data"] == first["data"] and second["tokenized"] == first["tokenized"]
    assert all(name.endswith(("_00000_of_00002.arrow", "_00001_of_00002.arrow")) for name in first["tokenized"])
    assert (tmp_path / "run" / "tokenizer" / "tokenizer.json").is_file()

    with source.open("a", encoding="utf-8") as en, target.open("a", encoding="utf-8") as de:
        en.write("A new sentence.\n")
        de.write("Ein neuer Satz.\n")
    edited = prepare()
    assert edited["pairs"] == 601 and edited["trained"]
    assert edited["data"] != first["data"] and not set(edited["tokenized"]) & set(first["tokenized"])
