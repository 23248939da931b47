"""Sentence splitters for source paragraphs (English, German, French): which one finds the sentence boundaries, keeps
the text, and how fast. Paragraphs are built by joining 1-5 consecutive sentences of the shipped data with one space,
so the true boundaries are known: Multi30k test2016, then validation, then train (en, de, fr; the package's copy in
modeling_vaswani/toolkit/data/multi30k/) and WMT newstest2013 (en, de; benchmarks/data/). There is no French news text
in the repository, so French is measured on Multi30k captions only. The findings are in docs/documents.md.

python benchmarks/splitters.py                          # 1000 per corpus and language (newstest2013: ~1000 at most)
python benchmarks/splitters.py --paragraphs 300 --seed 1

Candidates that are not installed are reported as skipped:
pip install sentencex pysbd sentence-splitter blingfire syntok
"""

import argparse
import datetime
import gzip
import importlib.metadata
import platform
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from difflib import SequenceMatcher
from pathlib import Path

from speed.report import machine

REPO = Path(__file__).resolve().parents[1]
# Read from the checkout rather than through modeling_vaswani.toolkit.data: importing the package costs seconds of
# torch/datasets imports that a splitter benchmark does not need.
MULTI30K = REPO / "modeling_vaswani" / "toolkit" / "data" / "multi30k"
NEWSTEST = REPO / "benchmarks" / "data"

# (corpus, language, files read in order until there are enough sentences)
SETS = [
    ("multi30k", "en", [MULTI30K / f"{stem}.en.gz" for stem in ("test_2016_flickr", "val", "train")]),
    ("multi30k", "de", [MULTI30K / f"{stem}.de.gz" for stem in ("test_2016_flickr", "val", "train")]),
    ("multi30k", "fr", [MULTI30K / f"{stem}.fr.gz" for stem in ("test_2016_flickr", "val", "train")]),
    ("newstest2013", "en", [NEWSTEST / "newstest2013.en.gz"]),
    ("newstest2013", "de", [NEWSTEST / "newstest2013.de.gz"]),
]
# A sentence "ends in terminal punctuation" when . ! ? or … is followed only by closing quotes or brackets. Captions
# and headlines often have none; no splitter can be blamed for missing a boundary that nothing marks.
TERMINAL = re.compile(r"[.!?…][\"'»«”“’)\]]*$")
# Whitespace the spacing probe puts between sentences: can a paragraph be rebuilt from the pieces with its own spacing?
SPACINGS = [" ", "  ", "\n", " \n", "\n\n", "\t"]


@dataclass
class Split:
    pieces: list[str]  # the sentences as the splitter returns them
    spans: list[tuple[int, int]] | None  # character offsets into the paragraph, where the API gives them


# ---- candidates: each maker takes a language code and returns text -> Split --------------------------------------


def make_sentencex(lang: str) -> Callable[[str], Split]:
    import sentencex

    def split(text: str) -> Split:
        found = sentencex.get_sentence_boundaries(lang, text)  # pieces keep their trailing whitespace
        return Split([b["text"] for b in found], [(b["start_index"], b["end_index"]) for b in found])

    return split


def make_pysbd(lang: str) -> Callable[[str], Split]:
    import pysbd

    # clean=False: the default cleaning rewrites the text; char_span=True gives offsets (and keeps whitespace).
    segmenter = pysbd.Segmenter(language=lang, clean=False, char_span=True)

    def split(text: str) -> Split:
        found = segmenter.segment(text)
        return Split([s.sent for s in found], [(s.start, s.end) for s in found])

    return split


def make_sentence_splitter(lang: str) -> Callable[[str], Split]:
    from sentence_splitter import SentenceSplitter

    splitter = SentenceSplitter(language=lang)
    return lambda text: Split(splitter.split(text), None)  # stripped sentences, no offsets


def make_blingfire(lang: str) -> Callable[[str], Split]:
    import blingfire  # one model for every language: `lang` is not used

    def split(text: str) -> Split:
        sentences, offsets = blingfire.text_to_sentences_and_offsets(text)
        return Split(sentences.split("\n"), [tuple(o) for o in offsets])

    return split


def make_syntok(lang: str) -> Callable[[str], Split]:
    from syntok import segmenter  # rules for English, German and Spanish; used as is for French

    def split(text: str) -> Split:
        pieces, spans = [], []
        for paragraph in segmenter.analyze(text):
            for sentence in paragraph:
                pieces.append("".join(token.spacing + token.value for token in sentence))
                spans.append((sentence[0].offset, sentence[-1].offset + len(sentence[-1].value)))
        return Split(pieces, spans)

    return split


# (name shown, pip distribution, maker, licence as the package metadata declares it)
CANDIDATES = [
    ("sentencex", "sentencex", make_sentencex),
    ("pysbd", "pysbd", make_pysbd),
    ("sentence-splitter", "sentence-splitter", make_sentence_splitter),
    ("blingfire", "blingfire", make_blingfire),
    ("syntok", "syntok", make_syntok),
]


def licence(distribution: str) -> str:
    metadata = importlib.metadata.metadata(distribution)
    declared = metadata.get("License-Expression") or metadata.get("License") or ""
    if declared and declared != "UNKNOWN" and len(declared) < 40:
        return declared
    # Fall back to the trove classifier (blingfire declares "UNKNOWN" but classifies itself MIT).
    classifiers = [
        c.split(" :: ")[-1].removesuffix(" License")
        for c in metadata.get_all("Classifier") or []
        if c.startswith("License ::")
    ]
    return classifiers[0] if classifiers else "?"


# ---- data ---------------------------------------------------------------------------------------------------------


def read_sentences(files: list[Path], needed: int):
    """Non-empty lines, stripped (40 lines of Multi30k train.de carry stray spaces), from the files in order."""
    sentences = []
    for path in files:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            sentences.extend(line.strip() for line in handle if line.strip())
        if len(sentences) >= needed:
            break
    return sentences


def build_paragraphs(sentences: list[str], count: int, rng: random.Random) -> list[list[str]]:
    """Consecutive runs of 1-5 sentences (news sentences stay within their document's order), until `count`."""
    paragraphs, start = [], 0
    while len(paragraphs) < count and start < len(sentences):
        size = rng.randint(1, 5)
        paragraphs.append(sentences[start : start + size])
        start += size
    return paragraphs


# ---- scoring ------------------------------------------------------------------------------------------------------


def squeeze(text: str) -> str:
    return "".join(text.split())


def boundaries_from_pieces(pieces: list[str]) -> set[int]:
    """Boundaries as counts of non-whitespace characters before them, so that a splitter that strips, keeps or moves
    whitespace is scored the same."""
    cuts, done = set(), 0
    for piece in pieces[:-1]:
        done += len(squeeze(piece))
        cuts.add(done)
    return cuts


def boundaries_aligned(pieces: list[str], text: str) -> set[int]:
    """Boundaries of pieces whose text was altered, mapped onto the paragraph's non-whitespace characters."""
    source, target = "".join(squeeze(p) for p in pieces), squeeze(text)
    mapping, cut_points = {}, boundaries_from_pieces(pieces)
    for block in SequenceMatcher(None, source, target, autojunk=False).get_matching_blocks():
        for k in range(block.size + 1):
            mapping[block.a + k] = block.b + k
    return {mapping[c] for c in cut_points if c in mapping}


def rebuildable(text: str, split: Split) -> bool:
    """Can the paragraph be rebuilt, its spacing included, from what the API returns alone: pieces that keep their
    whitespace, or offsets that tile the text (only whitespace between them)? Offsets are compared without whitespace
    because blingfire's sentence string turns a newline inside a sentence into a space while its offsets are right."""
    if "".join(split.pieces) == text:
        return True
    if split.spans is None or len(split.spans) != len(split.pieces):
        return False
    position = 0
    for (start, end), piece in zip(split.spans, split.pieces, strict=True):
        if start < position or squeeze(text[start:end]) != squeeze(piece) or text[position:start].strip():
            return False
        position = end
    return not text[position:].strip()


@dataclass
class Score:
    true_positive: int = 0
    predicted: int = 0
    gold: int = 0

    def add(self, predicted: set[int], gold: set[int]) -> None:
        self.true_positive += len(predicted & gold)
        self.predicted += len(predicted)
        self.gold += len(gold)

    def figures(self) -> tuple[float, float, float]:
        precision = self.true_positive / self.predicted if self.predicted else 1.0
        recall = self.true_positive / self.gold if self.gold else 1.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return precision, recall, f1


def evaluate(split_fn: Callable[[str], Split], paragraphs: list[list[str]], rng: random.Random) -> dict:
    texts = [" ".join(sentences) for sentences in paragraphs]
    split_fn(texts[0])  # first call pays for lazy set-up (rule compilation), not a paragraph's cost
    started = time.perf_counter()
    results = [split_fn(text) for text in texts]
    seconds = time.perf_counter() - started

    everything, punctuated, kept = Score(), Score(), 0
    for sentences, text, split in zip(paragraphs, texts, results, strict=True):
        intact = squeeze("".join(split.pieces)) == squeeze(text)
        kept += intact
        predicted = boundaries_from_pieces(split.pieces) if intact else boundaries_aligned(split.pieces, text)
        gold = boundaries_from_pieces(sentences)
        everything.add(predicted, gold)
        if all(TERMINAL.search(s) for s in sentences):
            punctuated.add(predicted, gold)

    # The spacing probe: the same sentences joined by mixed whitespace (not timed, not scored for boundaries).
    rebuilt = 0
    for sentences in paragraphs:
        text = sentences[0] + "".join(rng.choice(SPACINGS) + s for s in sentences[1:])
        rebuilt += rebuildable(text, split_fn(text))
    return {
        "all": everything.figures(),
        "punctuated": punctuated.figures(),
        "punctuated_paragraphs": sum(all(TERMINAL.search(s) for s in p) for p in paragraphs),
        "gold": everything.gold,
        "kept": kept / len(paragraphs),
        "rebuilt": rebuilt / len(paragraphs),
        "rate": len(texts) / seconds,
    }


# ---- report -------------------------------------------------------------------------------------------------------


def cpu_line() -> str:
    facts = machine()
    return f"{facts['cpu']}, {facts['cpu_count']} logical CPUs, {' '.join(facts['cpu_flags']) or 'no AVX2'}"


def percent(value: float) -> str:
    return f"{100 * value:.1f}"


def print_header(seed: int) -> None:
    print(f"# Sentence splitters, {datetime.date.today().isoformat()}\n")
    print(f"CPU: {cpu_line()}; Python {platform.python_version()}; seed {seed}.")
    print("Paragraphs of 1-5 consecutive sentences joined by one space; P/R/F1 in % over boundaries; 'punct.' = only")
    print(
        "paragraphs whose every sentence ends in . ! ? … (then closing quotes/brackets); 'kept' = % paragraphs whose"
    )
    print("non-space text comes back unchanged; 'rebuilt' = % paragraphs, re-joined with mixed whitespace (space, two")
    print("spaces, \\n, \\n\\n, tab), that the API's pieces or offsets rebuild exactly; 'para/s' = paragraphs per")
    print("second, one process, same run.\n")


def load_sets(count: int, seed: int) -> list[tuple[str, str, list[list[str]]]]:
    """The same paragraphs for every splitter: one seeded generator per corpus and language."""
    sets = []
    for corpus, lang, files in SETS:
        rng = random.Random(f"{seed}:{corpus}:{lang}")
        sets.append((corpus, lang, build_paragraphs(read_sentences(files, needed=count * 5), count, rng)))
    return sets


def installed_candidates() -> list[tuple[str, str, Callable, str]]:
    """The candidates that import, with their versions; the others are printed as skipped."""
    installed, skipped = [], []
    for name, distribution, maker in CANDIDATES:
        try:
            version = importlib.metadata.version(distribution)
            maker("en")  # imports the module: a broken install counts as not installed
        except Exception as error:  # noqa: BLE001 - any failure to import means skipped, never a crash
            skipped.append(f"{name} ({type(error).__name__}: {error})")
            continue
        installed.append((name, distribution, maker, version))
    print("| splitter | pip | licence |\n| --- | --- | --- |")
    for name, distribution, _, version in installed:
        print(f"| {name} | `{distribution}=={version}` | {licence(distribution)} |")
    if skipped:
        print("\nSkipped (not installed): " + "; ".join(skipped))
    return installed


def print_rows(name: str, maker: Callable, sets: list, seed: int) -> list[dict]:
    rows = []
    for corpus, lang, paragraphs in sets:
        result = evaluate(maker(lang), paragraphs, random.Random(seed))
        rows.append(result)
        p, r, f1 = result["all"]
        print(
            f"| {name} | {corpus} | {lang} | {len(paragraphs)} | {result['gold']} | {percent(p)} | {percent(r)} | "
            f"{percent(f1)} | {percent(result['punctuated'][2])} ({result['punctuated_paragraphs']}) | "
            f"{percent(result['kept'])} | {percent(result['rebuilt'])} | {result['rate']:,.0f} |"
        )
    return rows


def print_summary(name: str, rows: list[dict]) -> None:
    """Unweighted means over the corpus x language sets, so that news and captions count alike."""

    def mean(key: Callable[[dict], float]) -> float:
        return sum(key(row) for row in rows) / len(rows)

    worst = min(row["punctuated"][2] for row in rows)
    print(
        f"| {name} | {percent(mean(lambda r: r['all'][2]))} | {percent(mean(lambda r: r['punctuated'][2]))} | "
        f"{percent(worst)} | {percent(mean(lambda r: r['kept']))} | {percent(mean(lambda r: r['rebuilt']))} | "
        f"{mean(lambda r: r['rate']):,.0f} |"
    )


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return int(text)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--paragraphs", type=positive, default=1000, help="per corpus and language (default: 1000)")
    parser.add_argument("--seed", type=int, default=0)
    arguments = parser.parse_args(argv)

    print_header(arguments.seed)
    sets = load_sets(arguments.paragraphs, arguments.seed)
    installed = installed_candidates()

    print(
        "\n| splitter | corpus | lang | paragraphs | boundaries | P | R | F1 | F1 punct. (paragraphs) | kept |", end=""
    )
    print(" rebuilt | para/s |\n| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    results = [(name, print_rows(name, maker, sets, arguments.seed)) for name, _, maker, _ in installed]

    print("\n| splitter | mean F1 | mean F1 punct. | min F1 punct. | kept | rebuilt | para/s (mean) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, rows in results:
        print_summary(name, rows)


if __name__ == "__main__":
    main()
