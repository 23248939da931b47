"""benchmarks/same_translations.py's comparison: real files in two folders, made here."""

import pytest
from same_translations import compare_folders, report


def write(folder, name, data: bytes):
    folder.mkdir(exist_ok=True)
    (folder / name).write_bytes(data)


def test_equal_files_are_identical(tmp_path):
    write(tmp_path / "before", "beam.de", b"Ein Mann.\nZwei Hunde.\n")
    write(tmp_path / "after", "beam.de", b"Ein Mann.\nZwei Hunde.\n")
    comparison = compare_folders(tmp_path / "before", tmp_path / "after", ["beam.de"])["beam.de"]
    assert (comparison.identical, comparison.lines) == (True, 2)


def test_the_first_differing_line_is_named_with_both_versions(tmp_path):
    write(tmp_path / "before", "greedy.de", b"Ein Mann.\nZwei Hunde.\nEine Frau.\nEin Kind.\n")
    write(tmp_path / "after", "greedy.de", b"Ein Mann.\nZwei Hunde .\nEine Frau!\nEin Kind.\n")
    comparison = compare_folders(tmp_path / "before", tmp_path / "after", ["greedy.de"])["greedy.de"]
    assert (comparison.identical, comparison.lines, comparison.line) == (False, 4, 2)
    assert (comparison.before, comparison.after) == ("Zwei Hunde.", "Zwei Hunde .")
    assert "DIFFER at line 2" in report("greedy", [comparison], (1.0, 2.0))


@pytest.mark.parametrize(
    ("before", "after", "line", "versions"),
    [
        (b"Ein Mann.\n", b"Ein Mann.", 2, ("", None)),  # the last newline missing: bytes, not lines, are compared
        (b"Ein Mann.\n", b"Ein Mann.\r\n", 1, ("Ein Mann.", "Ein Mann.\r")),
        (b"Ein Mann.\n", b"Ein Mann.\nZwei Hunde.\n", 2, ("", "Zwei Hunde.")),
    ],
)
def test_differences_that_lines_of_text_would_hide(tmp_path, before, after, line, versions):
    write(tmp_path / "before", "out", before)
    write(tmp_path / "after", "out", after)
    comparison = compare_folders(tmp_path / "before", tmp_path / "after", ["out"])["out"]
    assert (comparison.line, (comparison.before, comparison.after)) == (line, versions)


def test_a_missing_output_is_refused_by_name(tmp_path):
    write(tmp_path / "before", "markup0.html", b"<p>Ein Mann.</p>\n")
    (tmp_path / "after").mkdir()
    with pytest.raises(FileNotFoundError, match="after has no output markup0.html"):
        compare_folders(tmp_path / "before", tmp_path / "after", ["markup0.html"])
