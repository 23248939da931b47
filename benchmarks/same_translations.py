"""The same translations before and after a change: vaswani-translate run from two checkouts of this repository on
one model and one test set, every output compared byte for byte (issue 52's proof that its restructuring changed no
translation). Five modes: the paper's beam (the default), greedy (--num_beams 1), constraints (a glossary of test2016
words), documents (paragraphs of consecutive lines, split into sentences) and markup (HTML documents, --format html).

Each checkout runs as `python -m modeling_vaswani.toolkit.cli.translate` (vaswani-translate's entry point) with
PYTHONPATH set to it and from it as the working directory, so the import takes that checkout's code; the origin of
the package each one imports is printed first. Nothing of the package is imported here: the comparison belongs to
neither side.

One line per mode: the lines compared, identical or the first differing line with both versions, and the seconds
each run took. Exit status 0 only when every mode is identical.

python benchmarks/same_translations.py --before /work/base52 --after . --model runs/small/averaged
python benchmarks/same_translations.py --before ../base --after . --model m --lines 200 --modes beam greedy
"""

import argparse
import gzip
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

MULTI30K = Path(__file__).resolve().parents[1] / "modeling_vaswani" / "toolkit" / "data" / "multi30k"
TEST2016 = MULTI30K / "test_2016_flickr.en.gz"
MODES = ("beam", "greedy", "constraints", "documents", "markup")
# Frequent test2016 source words and the German word a translator would require (a subset of
# benchmarks/terminology.py's GLOSSARY): each occurs in 48 to 250 of its 1,000 sentences.
GLOSSARY = {"man": "Mann", "woman": "Frau", "dog": "Hund", "shirt": "Hemd", "street": "Straße"}
PARAGRAPH = 5  # test2016 lines a paragraph in the documents mode
MARKUP_DOCUMENTS = 3
MARKUP_SENTENCES = 6  # test2016 lines a markup document
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


@dataclass(frozen=True)
class Comparison:
    """Two outputs compared: how many lines the before one has, and the first line (counted from 1) where they
    differ with both versions of it (None for a side that has no such line); `line` is None when they are identical."""

    lines: int
    line: int | None = None
    before: str | None = None
    after: str | None = None

    @property
    def identical(self) -> bool:
        return self.line is None


def compare_files(before: Path, after: Path) -> Comparison:
    """Byte for byte: two files are identical when their bytes are; otherwise the first line (split on b"\\n", so a
    "\\r" or a missing last newline counts) whose bytes differ."""
    old, new = Path(before).read_bytes(), Path(after).read_bytes()
    old_lines, new_lines = old.split(b"\n"), new.split(b"\n")
    lines = len(old_lines) - (old_lines[-1] == b"")
    if old == new:
        return Comparison(lines)
    for number in range(max(len(old_lines), len(new_lines))):
        first = old_lines[number] if number < len(old_lines) else None
        second = new_lines[number] if number < len(new_lines) else None
        if first != second:
            return Comparison(lines, number + 1, _text(first), _text(second))
    raise AssertionError("unequal bytes with equal lines")  # unreachable: split is reversible by b"\n".join


def _text(line: bytes | None) -> str | None:
    return None if line is None else line.decode("utf-8", errors="backslashreplace")


def compare_folders(before: Path, after: Path, names: list[str]) -> dict[str, Comparison]:
    """Each named file of `before` compared with its namesake in `after`; a file missing on either side is refused."""
    for folder in (before, after):
        missing = [name for name in names if not (Path(folder) / name).is_file()]
        if missing:
            raise FileNotFoundError(f"{folder} has no output {', '.join(missing)}: expected one file for each mode")
    return {name: compare_files(Path(before) / name, Path(after) / name) for name in names}


def read_test_set(path: Path) -> list[str]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as file:
        return file.read().splitlines()


def html_document(sentences: list[str], number: int) -> str:
    """A small HTML document of test2016 sentences: a title, paragraphs of two sentences, inline tags in some."""
    paragraphs = []
    for start in range(0, len(sentences), 2):
        pair = sentences[start : start + 2]
        first = pair[0].split(" ", 2)
        if len(first) == 3:  # the second word in bold, as a writer marks a word
            pair[0] = f"{first[0]} <b>{first[1]}</b> {first[2]}"
        paragraphs.append(f"<p>{' '.join(pair)}</p>")
    body = "\n".join(paragraphs)
    return f"<!DOCTYPE html>\n<html><head><title>Document {number}</title></head>\n<body>\n{body}\n</body></html>\n"


def prepare(sample: list[str], folder: Path, documents: int = MARKUP_DOCUMENTS) -> dict[str, list[list[str]]]:
    """Writes the inputs into `folder` and returns, for each mode, its runs' extra arguments (one run a mode, one a
    markup document); each run's --output is added by `run_mode`."""
    (folder / "test.en").write_text("".join(line + "\n" for line in sample), encoding="utf-8")
    glossary = "".join(f"{source}\t{target}\n" for source, target in GLOSSARY.items())
    (folder / "glossary.tsv").write_text(glossary, encoding="utf-8")
    paragraphs = [" ".join(sample[i : i + PARAGRAPH]) for i in range(0, len(sample), PARAGRAPH)]
    (folder / "paragraphs.en").write_text("".join(p + "\n" for p in paragraphs), encoding="utf-8")
    markup = []
    for number in range(documents):
        chunk = sample[number * MARKUP_SENTENCES : (number + 1) * MARKUP_SENTENCES]
        (folder / f"document{number}.html").write_text(html_document(chunk, number), encoding="utf-8")
        markup.append(["--input", str(folder / f"document{number}.html"), "--format", "html"])
    one_a_line = ["--input", str(folder / "test.en"), "--no_split_sentences"]
    return {
        "beam": [one_a_line],
        "greedy": [one_a_line + ["--num_beams", "1"]],
        "constraints": [one_a_line + ["--glossary", str(folder / "glossary.tsv")]],
        "documents": [["--input", str(folder / "paragraphs.en")]],
        "markup": markup,
    }


def environment(checkout: Path) -> dict:
    return {**os.environ, **OFFLINE, "PYTHONPATH": str(checkout)}


def package_origin(checkout: Path) -> str:
    """Where `import modeling_vaswani` finds the package when run as the translations are (without importing it)."""
    code = "import importlib.util; print(importlib.util.find_spec('modeling_vaswani').origin)"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=checkout, env=environment(checkout), capture_output=True, text=True
    )
    return result.stdout.strip() or result.stderr.strip()


def run_mode(checkout: Path, model: Path, runs: list[list[str]], outputs: Path, mode: str) -> tuple[list[str], float]:
    """Runs a mode's translations from `checkout`; returns its output files' names and the seconds they took."""
    names, start = [], time.perf_counter()
    for index, extra in enumerate(runs):
        name = f"{mode}.de" if len(runs) == 1 else f"{mode}{index}.html"
        command = [sys.executable, "-m", "modeling_vaswani.toolkit.cli.translate", str(model), *extra]
        command += ["--output", str(outputs / name)]
        result = subprocess.run(command, cwd=checkout, env=environment(checkout), capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} in {checkout} exited with {result.returncode}:\n{result.stderr}")
        names.append(name)
    return names, time.perf_counter() - start


def report(mode: str, comparisons: list[Comparison], seconds: tuple[float, float]) -> str:
    lines = sum(comparison.lines for comparison in comparisons)
    times = f"before {seconds[0]:.1f} s, after {seconds[1]:.1f} s"
    differing = [(i, c) for i, c in enumerate(comparisons) if not c.identical]
    if not differing:
        return f"{mode:<12} {lines:>5} lines  identical  ({times})"
    index, first = differing[0]
    where = f"line {first.line}" + (f" of document {index}" if len(comparisons) > 1 else "")
    return (
        f"{mode:<12} {lines:>5} lines  DIFFER at {where}  ({times})\n"
        f"    before: {first.before!r}\n    after:  {first.after!r}"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, type=Path, help="the checkout before the change")
    parser.add_argument("--after", required=True, type=Path, help="the checkout after the change")
    parser.add_argument("--model", required=True, type=Path, help="a checkpoint folder both checkouts can load")
    parser.add_argument("--test_set", type=Path, default=TEST2016, help="source lines (default: test2016 En, shipped)")
    parser.add_argument("--lines", type=int, help="the first N lines only (default: all)")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--documents", type=int, default=MARKUP_DOCUMENTS, help="HTML documents in the markup mode")
    parser.add_argument("--keep", type=Path, help="a new folder to keep the inputs and both sides' outputs in")
    arguments = parser.parse_args(argv)
    if arguments.documents < 1:
        parser.error(f"--documents {arguments.documents}: expected at least 1")
    if arguments.lines is not None and arguments.lines < arguments.documents * MARKUP_SENTENCES:
        parser.error(f"--lines {arguments.lines}: expected at least {arguments.documents * MARKUP_SENTENCES}")
    checkouts = {"before": arguments.before.resolve(), "after": arguments.after.resolve()}
    for side, checkout in checkouts.items():
        print(f"{side}: {checkout} imports {package_origin(checkout)}")
    sources = read_test_set(arguments.test_set)[: arguments.lines]
    if arguments.keep:
        arguments.keep.mkdir(parents=True)
    folder = arguments.keep or Path(tempfile.mkdtemp(prefix="same_translations_"))
    for side in checkouts:
        (folder / side).mkdir()
    runs = prepare(sources, folder, arguments.documents)
    print(f"{arguments.test_set.name}: {len(sources)} lines (the sample)")
    identical = True
    for mode in arguments.modes:
        seconds = []
        for side, checkout in checkouts.items():
            names, took = run_mode(checkout, arguments.model.resolve(), runs[mode], folder / side, mode)
            seconds.append(took)
        comparisons = list(compare_folders(folder / "before", folder / "after", names).values())
        print(report(mode, comparisons, tuple(seconds)), flush=True)
        identical &= all(comparison.identical for comparison in comparisons)
    print(f"outputs in {folder}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
