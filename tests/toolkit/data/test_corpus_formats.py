"""Every corpus format the toolkit reads (JSON Lines, JSON arrays, CSV, TSV, Parquet, plain text pairs, and a local
dataset folder of them), hostile cases included: a bad file is refused with one ValueError naming the file, the
line (1-based; the column where JSON says) or the Parquet row, what was found and what was expected, never a
`datasets` traceback. Real files, read through the real loaders."""

import gzip
import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import DatasetDict

from modeling_vaswani.toolkit.data.corpora import load_hub_pairs, load_table_pairs, load_text_pairs
from modeling_vaswani.toolkit.data.tables import table_row_location


@pytest.fixture
def cache_dir(tmp_path):
    return str(tmp_path / "hf_cache")


def written(path, content: bytes | str):
    path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    return path


def refusal(path, cache_dir, source_lang="en", target_lang="de") -> str:
    """The one-line message load_table_pairs refuses `path` with."""
    with pytest.raises(ValueError) as raised:
        load_table_pairs(path, source_lang, target_lang, cache_dir=cache_dir)
    message = str(raised.value)
    assert type(raised.value) is ValueError and "\n" not in message, message
    assert message.startswith(str(path)), message
    return message[len(str(path)) :]


GOOD = '{"en": "A dog.", "de": "Ein Hund."}'

# name, content, the message after the file's name
BAD_FILES = [
    # JSON Lines: syntax, a row that is no object, mixed layouts with one bad row, values of the wrong type
    (
        "syntax.jsonl",
        f'{GOOD}\n{{"en": "c", "de": \n{GOOD}\n',
        ", line 2, column 19: not valid JSON (Expecting value); expected one JSON object a line",
    ),
    (
        "array_row.jsonl",
        f'{GOOD}\n["c", "d"]\n',
        ", line 2: the row is [\"c\", \"d\"], an array; expected an object with 'en' and 'de' texts, or a "
        "'translation' object holding them",
    ),
    (
        "string_row.jsonl",
        f'{GOOD}\n\n"just text"\n',
        ", line 3: the row is \"just text\", a string; expected an object with 'en' and 'de' texts, or a "
        "'translation' object holding them",
    ),
    (
        "mixed.jsonl",
        f'{GOOD}\n\n{{"translation": {{"en": "c", "de": "d"}}}}\n{{"en": "e", "fr": "f"}}\n',
        r", line 4: no 'de' text (found keys ['en', 'fr']); expected 'de' in every row",
    ),
    (
        "mixed_nested.jsonl",
        f'{GOOD}\n{{"translation": "Ein Hund."}}\n',
        ", line 2: translation is 'Ein Hund.'; expected a dict with keys 'en' and 'de'",
    ),
    ("number.jsonl", f'{GOOD}\n{{"en": 7, "de": "sieben"}}\n', ", line 2: 'en' is 7 (int); expected a string"),
    (
        "trailing.jsonl",
        f"{GOOD} x\n",
        ", line 1, column 37: not valid JSON (Extra data); expected one JSON object a line",
    ),
    ("empty.jsonl", "", " holds no rows; expected translation pairs, one JSON object a line"),
    (
        "null_row.jsonl",
        f"{GOOD}\nnull\n",
        ", line 2: the row is null, null; expected an object with 'en' and 'de' texts, "
        "or a 'translation' object holding them",
    ),
    (
        "deep.jsonl",
        f"{GOOD}\n" + "[" * 100_000 + "\n",
        ", line 2: not valid JSON (maximum recursion depth exceeded while decoding a JSON array from a unicode string)"
        "; expected one JSON object a line",
    ),
    (
        "huge_number.jsonl",
        f'{GOOD}\n{{"en": {"9" * 5000}, "de": "x"}}\n',
        ", line 2: not valid JSON (Exceeds the limit (4300 digits) for integer string conversion: value has 5000 "
        "digits; use sys.set_int_max_str_digits() to increase the limit); expected one JSON object a line",
    ),
    (
        "utf16.jsonl",
        GOOD.encode("utf-16"),
        ", line 1: not valid UTF-8 (invalid start byte at byte 0 of the line, byte 0 of the input (a UTF-16 "
        "byte-order mark)); expected UTF-8 text",
    ),
    ("blank.jsonl", "\n  \n\n", " holds no rows; expected translation pairs, one JSON object a line"),
    (
        "surrogate.jsonl",
        f'{GOOD}\n{{"en": "a \\ud800 b", "de": "c"}}\n',
        r", line 2: 'en' text holds a lone surrogate ('\ud800' at character 2), which is no Unicode text; expected "
        "UTF-8 text",
    ),
    # JSON arrays: each element named by the line it starts on
    (
        "array.json",
        f'[\n  {GOOD},\n  {{"en": "c"}}\n]\n',
        r", line 3: no 'de' text (found keys ['en']); expected 'de' in every row",
    ),
    (
        "array_syntax.json",
        f"[\n  {GOOD}\n  {GOOD}\n]\n",
        ", line 3, column 3: not valid JSON (expected ',' or ']' after an element); expected a JSON array of objects",
    ),
    (
        "array_bad_value.json",
        f"[\n  {GOOD},\n  {{\"en\": 'x'}}\n]\n",
        ", line 3, column 10: not valid JSON (Expecting value); expected a JSON array of objects",
    ),
    (
        "array_open.json",
        f"[\n  {GOOD},\n",
        ", line 3, column 1: not valid JSON (the array is not closed); expected a JSON array of objects",
    ),
    (
        "array_after.json",
        f"[{GOOD}] []\n",
        ", line 1, column 39: not valid JSON (text after the array); expected a JSON array of objects",
    ),
    ("array_empty.json", "[ ]\n", " holds no rows (an empty JSON array); expected translation pairs"),
    # CSV and TSV: the header decides the number of fields of every row
    (
        "extra.csv",
        "en,de\na,b\nc,d,e\n",
        ", line 3: 3 fields; expected 2, one per column of the header (line 1: en,de)",
    ),
    ("short.csv", "en,de\na,b\nc\n", ", line 3: 1 field; expected 2, one per column of the header (line 1: en,de)"),
    ("header.csv", "en,de\n", " holds only its header (line 1); expected a translation pair a line after it"),
    ("empty.csv", "", " is empty; expected a header line naming the columns (en,de), then a translation pair a line"),
    (
        "french.csv",
        "en,fr\na,b\n",
        ", line 1: the header names the columns ['en', 'fr']; expected a column per language ('en' and 'de')",
    ),
    ("twice.csv", "en,de,de\na,b,c\n", ", line 1: the header names 'de' twice; expected each column named once"),
    (
        "multiline.csv",
        'en,de\n"a long\ncaption",b\n"c",\n',
        ", line 4: 'de' text is empty; expected a sentence",
    ),
    (
        "open_quote.csv",
        'en,de\na,b\n"c,d\ne,f\n',
        ", line 3: not valid CSV (unexpected end of data); expected a translation pair a line",
    ),
    (
        "extra.tsv",
        "en\tde\na\tb\nc\td\te\n",
        ", line 3: 3 fields; expected 2, one per column of the header (line 1: en\tde)",
    ),
    ("empty_text.tsv", "en\tde\na\tb\n \tc\n", ", line 3: 'en' text is empty; expected a sentence"),
]


@pytest.mark.parametrize(("name", "content", "message"), BAD_FILES, ids=[case[0] for case in BAD_FILES])
def test_a_bad_file_is_refused_naming_its_line_and_what_was_expected(tmp_path, cache_dir, name, content, message):
    assert refusal(written(tmp_path / name, content), cache_dir) == message


@pytest.mark.parametrize("name", ["pairs.jsonl.gz", "pairs.csv.gz"])
def test_gzip_files_are_named_by_line_too(tmp_path, cache_dir, name):
    content = f"{GOOD}\n{{}}\n" if ".jsonl" in name else "en,de\na,b\nc,d,e\n"
    path = written(tmp_path / name, gzip.compress(content.encode("utf-8")))
    assert refusal(path, cache_dir).startswith(", line 2: no 'en' text" if ".jsonl" in name else ", line 3: 3 fields")


def test_good_files_of_every_format_give_the_same_pairs(tmp_path, cache_dir):
    pairs = [
        {"en": 'He said "hi", then left.', "de": 'Er sagte "hallo", dann ging er.'},
        {"en": "Room 007", "de": "NA"},
        {"en": "null", "de": "Zwei\u00a0Katzen. "},
    ]
    jsonl = written(tmp_path / "a.jsonl", "".join(json.dumps(pair) + "\n" for pair in pairs))
    nested = written(tmp_path / "b.jsonl", "\r\n".join(json.dumps({"translation": pair, "id": 1}) for pair in pairs))
    array = written(tmp_path / "c.json", json.dumps(pairs, indent=2))
    quoted = '"Er sagte ""hallo"", dann ging er.","He said ""hi"", then left."'
    csv_text = f"de,en\n{quoted}\nNA,Room 007\nZwei\u00a0Katzen. ,null\n"
    csv_file = written(tmp_path / "d.csv", "\ufeff" + csv_text)  # a byte-order mark, as spreadsheets write
    tsv = written(tmp_path / "e.tsv", "en\tde\n" + "".join(f"{p['en']}\t{p['de']}\n" for p in pairs))
    parquet = tmp_path / "f.parquet"
    pq.write_table(pa.table({"en": [p["en"] for p in pairs], "de": [p["de"] for p in pairs]}), parquet)
    for path in (jsonl, nested, array, csv_file, tsv, parquet):
        assert load_table_pairs(path, "en", "de", cache_dir=cache_dir)["translation"] == pairs, path
    both = load_table_pairs([jsonl, parquet, tsv], "en", "de", cache_dir=cache_dir)
    assert both["translation"] == pairs * 3


def test_parquet_is_refused_by_file_and_row(tmp_path, cache_dir):
    bad_rows = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"en": ["a", "b", "c"], "de": ["x", None, "z"]}), bad_rows)
    assert refusal(bad_rows, cache_dir) == ", row 2: the 'de' value is null; expected a string (a sentence)"
    french = tmp_path / "french.parquet"
    pq.write_table(pa.table({"en": ["a"], "fr": ["b"]}), french)
    assert refusal(french, cache_dir) == (
        " has columns ['en', 'fr']; expected a 'translation' column or one column per language ('en' and 'de')"
    )
    none = tmp_path / "none.parquet"
    pq.write_table(pa.table({"en": pa.array([], pa.string()), "de": pa.array([], pa.string())}), none)
    assert refusal(none, cache_dir) == " holds no rows; expected translation pairs"
    garbage = written(tmp_path / "garbage.parquet", b"PAR1 not really")
    assert re.fullmatch(
        r" is not a readable Parquet file \(.+\); expected a table of translation pairs", refusal(garbage, cache_dir)
    )
    truncated = tmp_path / "truncated.parquet"
    truncated.write_bytes(bad_rows.read_bytes()[:-20])
    assert refusal(truncated, cache_dir).startswith(" is not a readable Parquet file (")
    assert refusal(written(tmp_path / "x.parquet.gz", b""), cache_dir) == (
        ": a Parquet file is compressed inside; expected it without .gz"
    )


def test_a_parquet_shard_is_named_with_its_own_row(tmp_path, cache_dir):
    first, second = tmp_path / "train-0.parquet", tmp_path / "train-1.parquet"
    pq.write_table(pa.table({"en": ["a", "b"], "de": ["x", "y"]}), first)
    pq.write_table(pa.table({"en": ["c", " "], "de": ["z", "w"]}), second)
    with pytest.raises(
        ValueError, match=rf"^{re.escape(str(second))}, row 2: 'en' text is empty; expected a sentence$"
    ):
        load_table_pairs([first, second], "en", "de", cache_dir=cache_dir)


def test_empty_text_pair_files_are_refused_by_name(tmp_path):
    source, target = written(tmp_path / "e.en", ""), written(tmp_path / "e.de", "")
    with pytest.raises(ValueError, match=rf"^{re.escape(str(source))} is empty; expected one sentence per line$"):
        load_text_pairs(source, target, "en", "de")


def test_a_local_dataset_folder_is_read_and_refused_like_its_files(tmp_path, cache_dir):
    folder = tmp_path / "corpus"
    folder.mkdir()
    written(folder / "train.jsonl", f"{GOOD}\n{GOOD}\n")
    written(folder / "test.csv", "en,de\na,b\n")  # another format in another split: datasets refuses the mix
    data = load_hub_pairs(folder, source_lang="en", target_lang="de", cache_dir=cache_dir)
    assert isinstance(data, DatasetDict) and {name: len(part) for name, part in data.items()} == {
        "train": 2,
        "test": 1,
    }
    written(folder / "train.jsonl", f'{GOOD}\n{{"en": "a", "de": [1]}}\n')
    with pytest.raises(
        ValueError, match=rf"^{re.escape(str(folder / 'train.jsonl'))}, line 2: 'de' is \[1\] \(list\)"
    ):
        load_hub_pairs(folder, source_lang="en", target_lang="de", cache_dir=cache_dir)


def test_a_row_is_located_again_by_its_line_in_every_format(tmp_path):
    jsonl = written(tmp_path / "a.jsonl", f"\n{GOOD}\n\n{GOOD}\n")
    csv_file = written(tmp_path / "b.csv", 'en,de\n"two\nlines",b\nc,d\n')
    array = written(tmp_path / "c.json", f"[{GOOD},\n\n{GOOD}]")
    assert table_row_location(jsonl, 1) == f"{jsonl}, line 4"
    assert table_row_location(csv_file, 1) == f"{csv_file}, line 4"
    assert table_row_location(array, 1) == f"{array}, line 3"
