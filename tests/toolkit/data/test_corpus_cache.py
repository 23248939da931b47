"""The prepared-corpus cache is keyed by the files' contents (issue 51, item 5): a corpus edited in place is read
again whatever its size and times say (`touch -r`, `cp -p`, an archive re-extracted restore the modification time).

Real files, the real `touch` and `cp`, the `datasets` cache in a folder of the test's own.
"""

import os
import shutil
import subprocess
import tarfile
import threading

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from modeling_vaswani.toolkit.data.corpora import load_table_pairs, load_text_pairs

SOURCE = ["A dog runs.", "Two men talk.", "A girl sings."]
TARGET = ["Ein Hund rennt.", "Zwei Männer reden.", "Ein Mädchen singt."]
EDITED = "Ein Hund bellt."  # the same number of bytes as "Ein Hund rennt." in UTF-8
assert len(EDITED.encode()) == len(TARGET[0].encode())


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "datasets-cache"))


def write(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def targets(dataset) -> list[str]:
    return [row["translation"]["de"] for row in dataset]


def corpus(tmp_path):
    return write(tmp_path / "train.en", SOURCE), write(tmp_path / "train.de", TARGET)


def test_a_line_edited_to_the_same_length_with_the_time_restored_by_touch_r_is_read_again(tmp_path):
    source, target = corpus(tmp_path)
    assert targets(load_text_pairs(source, target, "en", "de")) == TARGET
    shutil.copy2(target, tmp_path / "reference")
    write(target, [EDITED, *TARGET[1:]])
    subprocess.run(["touch", "-r", str(tmp_path / "reference"), str(target)], check=True)
    assert os.stat(target).st_mtime_ns == os.stat(tmp_path / "reference").st_mtime_ns
    assert targets(load_text_pairs(source, target, "en", "de")) == [EDITED, *TARGET[1:]]


def test_a_file_copied_over_with_cp_p_is_read_again(tmp_path):
    source, target = corpus(tmp_path)
    edited = write(tmp_path / "edited.de", [EDITED, *TARGET[1:]])
    os.utime(edited, ns=(os.stat(target).st_atime_ns, os.stat(target).st_mtime_ns))
    assert targets(load_text_pairs(source, target, "en", "de")) == TARGET
    subprocess.run(["cp", "-p", str(edited), str(target)], check=True)
    assert targets(load_text_pairs(source, target, "en", "de")) == [EDITED, *TARGET[1:]]


def test_an_archive_re_extracted_over_the_corpus_is_read_again(tmp_path):
    """Two versions of a corpus archived with one modification time: extracting the other one over the first."""
    versions = {}
    for name, first in (("old", TARGET[0]), ("new", EDITED)):
        folder = tmp_path / name
        folder.mkdir()
        write(folder / "train.de", [first, *TARGET[1:]])
        os.utime(folder / "train.de", ns=(1_700_000_000 * 10**9,) * 2)
        versions[name] = tmp_path / f"{name}.tar"
        with tarfile.open(versions[name], "w") as archive:
            archive.add(folder / "train.de", arcname="train.de")
    work = tmp_path / "work"
    source = write(tmp_path / "train.en", SOURCE)
    for name, expected in (("old", TARGET), ("new", [EDITED, *TARGET[1:]])):
        with tarfile.open(versions[name]) as archive:
            archive.extractall(work, filter="data")
        assert targets(load_text_pairs(source, work / "train.de", "en", "de")) == expected


def test_a_json_lines_table_edited_in_place_is_read_again(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"en": "A dog.", "de": "Ein Hund."}\n', encoding="utf-8")
    stamp = os.stat(path)
    assert targets(load_table_pairs(path, "en", "de")) == ["Ein Hund."]
    path.write_text('{"en": "A dog.", "de": "Eine Maus"}\n', encoding="utf-8")
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert os.stat(path).st_size == stamp.st_size
    assert targets(load_table_pairs(path, "en", "de")) == ["Eine Maus"]


line = st.text(st.characters(exclude_categories=("Cc", "Cs", "Zl", "Zp")), min_size=1, max_size=12).filter(
    lambda text: text.strip() and "\x85" not in text
)


@pytest.mark.slow  # 200 examples, each read twice into the datasets cache: 11 s on 2 busy cores
@given(lines=st.lists(line, min_size=1, max_size=4), data=st.data())
def test_any_same_size_edit_with_the_time_restored_is_what_is_read(tmp_path_factory, lines, data):
    """Whatever the text and whichever line is rewritten to another of the same byte length, with the modification
    time restored, the pairs read are the file as it now is."""
    folder = tmp_path_factory.mktemp("edits")
    datasets.config.HF_DATASETS_CACHE = str(folder / "cache")
    index = data.draw(st.integers(0, len(lines) - 1))
    size = len(lines[index].encode())
    new = data.draw(st.text("abcdefXYZ.", min_size=size, max_size=size).filter(lambda text: text != lines[index]))
    source = write(folder / "train.en", ["s"] * len(lines))
    target = write(folder / "train.de", lines)
    stamp = os.stat(target)
    assert targets(load_text_pairs(source, target, "en", "de")) == lines
    edited = [*lines[:index], new, *lines[index + 1 :]]
    write(target, edited)
    os.utime(target, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert os.stat(target).st_size == stamp.st_size
    assert targets(load_text_pairs(source, target, "en", "de")) == edited


def test_a_pipe_is_read_once_by_the_reader_and_anew_at_each_load(tmp_path):
    """A named pipe cannot be hashed without being consumed: each load reads what is written into it then."""
    source = write(tmp_path / "train.en", SOURCE[:1])
    pipe = tmp_path / "train.de"
    os.mkfifo(pipe)
    for text in (TARGET[0], EDITED):
        writer = threading.Thread(target=write, args=(pipe, [text]))
        writer.start()
        assert targets(load_text_pairs(source, pipe, "en", "de")) == [text]
        writer.join()


def test_a_parquet_table_edited_in_place_is_read_again(tmp_path):
    """Parquet goes through `datasets`' own reader, whose cache of a local file is keyed by its modification time."""
    path = tmp_path / "train.parquet"
    pq.write_table(pa.table({"en": ["A dog."], "de": ["Ein Hund."]}), path, compression="none")
    stamp = os.stat(path)
    assert targets(load_table_pairs(path, "en", "de")) == ["Ein Hund."]
    pq.write_table(pa.table({"en": ["A dog."], "de": ["Eine Maus"]}), path, compression="none")
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert os.stat(path).st_size == stamp.st_size
    assert targets(load_table_pairs(path, "en", "de")) == ["Eine Maus"]
