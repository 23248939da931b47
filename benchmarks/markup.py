"""Inline tags carried across translation (modeling_vaswani/toolkit/translation/documents.py, data/markup.py), on
Multi30k test2016 sentences given 1-3 synthetic tags wrapping source word spans (seeded: one tag, two side by side,
two nested, one inside another with a third after them, and a `<br/>` after a word). The findings are in
docs/documents.md#markup.

Reported:
- well-formed, same tags: % outputs that xml.etree (not lxml, which markup.py uses) reads, with the same elements,
  attributes and nesting as the input;
- text = plain: % outputs whose text (tags taken out) equals the plain translation of the input's text;
- on eflomal's words: for the sentences of tests/toolkit/translation/data/alignment_test2016_sample.jsonl (every
  10th test2016 pair, the model's own translation and eflomal's grow-diag-final-and links of it) whose translation
  here is the sample's, each wrapping tag whose source words eflomal links: % placed on exactly the smallest target
  span covering eflomal's links, and the mean F1 of the target words it wraps against that span's.

python benchmarks/markup.py --model runs/small/averaged --sentences 300   # a few minutes on 2 cores
"""

import argparse
import datetime
import json
import random
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from speed.report import machine
from transformers import AutoTokenizer

from modeling_vaswani import VaswaniForConditionalGeneration
from modeling_vaswani.toolkit.data.corpora import multi30k_files, read_sentences
from modeling_vaswani.toolkit.data.markup import Document
from modeling_vaswani.toolkit.translation.alignment import parse_pharaoh
from modeling_vaswani.toolkit.translation.documents import translate_markup
from modeling_vaswani.toolkit.translation.translate import translate

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "tests/toolkit/translation/data/alignment_test2016_sample.jsonl"
KINDS = ("one", "adjacent", "nested", "nested + after", "break")


def tagged(words: list[str], kind: str, generator: random.Random) -> str:
    """`words` with tags of `kind` around seeded spans of them."""
    n = len(words)
    opens, closes = [[] for _ in range(n)], [[] for _ in range(n)]

    def wrap(start: int, end: int, tag: str, attributes: str = "") -> None:  # words start..end-1
        opens[start].append(f"<{tag}{attributes}>")
        closes[end - 1].insert(0, f"</{tag}>")

    def span(low: int, high: int) -> tuple[int, int]:  # 1-4 words starting in low..high-1, ending by high
        start = generator.randrange(low, high)
        return start, generator.randint(start + 1, min(high, start + 4))

    if kind == "adjacent" and n >= 2:  # touching: the second starts at the first's end
        start, middle = span(0, n - 1)
        wrap(start, middle, "b")
        wrap(middle, generator.randint(middle + 1, min(n, middle + 3)), "i")
    elif kind.startswith("nested") and n >= 3:
        start, end = span(0, n - 1)
        if end - start < 2:  # room for the inner tag to differ from the outer
            start, end = max(0, end - 2), max(end, 2)
        wrap(start, end, "a", f' href="#w{start}"')
        inner = generator.randrange(start, end)
        wrap(inner, generator.randint(inner + 1, end), "i")
        if kind == "nested + after" and end < n:
            after = generator.randrange(end, n)
            wrap(after, after + 1, "u")
    elif kind == "break" and n >= 2:
        closes[generator.randrange(n - 1)].append("<br/>")
        wrap(*span(0, n), "em")
    else:  # one tag, or a sentence too short for its kind
        wrap(*span(0, n), "b")
    return " ".join("".join(opens[i]) + word + "".join(closes[i]) for i, word in enumerate(words))


def read(text: str):
    """xml.etree's reading of a fragment (None if it is not well-formed): its text and element tree."""
    try:
        root = ElementTree.fromstring(f"<root>{text}</root>")
    except ElementTree.ParseError:
        return None

    def shape(element):
        return [(child.tag, dict(child.attrib), shape(child)) for child in element]

    return "".join(root.itertext()), shape(root)


def wrapping(tags) -> list:
    """Every tag wrapping words, outermost first, as (name, start, end)."""
    found = []
    for tag in tags:
        if tag.start < tag.end:
            found.append((tag.name, tag.start, tag.end))
        found += wrapping(tag.children)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--sentences", type=int, default=300, help="test2016 sentences (the sample's first)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    generator = random.Random(args.seed)
    sources = read_sentences(multi30k_files("test")["en"])
    sample = {row["line"]: row for row in map(json.loads, SAMPLE.read_text(encoding="utf-8").splitlines())}
    # The sample's sentences first, then others, seeded
    others = [line for line in range(1, len(sources) + 1) if line not in sample]
    lines = (sorted(sample) + generator.sample(others, len(others)))[: args.sentences]
    plain = [sources[line - 1] for line in lines]
    kinds = [KINDS[i % len(KINDS)] for i in range(len(lines))]
    inputs = [tagged(text.split(), kind, generator) for text, kind in zip(plain, kinds, strict=True)]
    model = VaswaniForConditionalGeneration.from_pretrained(args.model).eval()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    start = time.perf_counter()
    outputs = translate_markup(model, tokenizer, inputs, format="xml-inline", language="en", progress=False)
    seconds = time.perf_counter() - start
    translations = translate(model, tokenizer, plain, language="en", progress=False)
    same_tags = same_text = 0
    exact = landed = 0
    f1s = []
    for line, source, output, translation in zip(lines, inputs, outputs, translations, strict=True):
        read_in, read_out = read(source), read(output)
        same_tags += read_out is not None and read_out[1] == read_in[1]
        same_text += read_out is not None and read_out[0] == translation
        row = sample.get(line)
        if row is None or row["translation"] != translation:
            continue
        links = parse_pharaoh(row["eflomal"])
        source_tags = wrapping(Document(source, "xml-inline").runs[0].tags)
        output_tags = wrapping(Document(output, "xml-inline").runs[0].tags)
        for (_, start, end), (_, placed_start, placed_end) in zip(source_tags, output_tags, strict=False):
            reference = {t for s, t in links if start <= s < end}
            if not reference:
                continue
            expected = set(range(min(reference), max(reference) + 1))
            placed = set(range(placed_start, placed_end))
            landed += 1
            exact += placed == expected
            common = len(placed & expected)
            f1s.append(2 * common / (len(placed) + len(expected)))
    count = len(lines)
    print(f"{datetime.date.today()} {machine()}")
    print(f"{count} test2016 sentences, {', '.join(KINDS)} in turn, seed {args.seed}; {seconds:.1f} s translating")
    print(f"well-formed, same tags and nesting: {100 * same_tags / count:.1f}% ({same_tags}/{count})")
    print(f"text = plain translation: {100 * same_text / count:.1f}% ({same_text}/{count})")
    if landed:
        print(
            f"on eflomal's words: {landed} tags; exact span {100 * exact / landed:.1f}%, "
            f"mean F1 {100 * sum(f1s) / landed:.1f}"
        )


if __name__ == "__main__":
    main()
