"""Which HTML parser the markup handling (modeling_vaswani/toolkit/data/markup.py) uses: lxml.html, html5lib and
BeautifulSoup (with its html.parser, lxml and html5lib back ends) parse and serialize a few real pages and malformed
snippets. The findings are in docs/documents.md#markup.

For each parser and input:
- ms: parse + serialize, the median of --repeat runs;
- stable: serializing the parse of the parser's own output gives that output again (a second pass changes nothing);
- as browsers: the parser's output, parsed by html5lib (the WHATWG algorithm browsers implement), gives the same
  tree as the input parsed by html5lib (attribute order and the whitespace ending the body aside): the repair is the
  one a browser makes, and the output means to a browser what the input did;
- text kept: the output's text (whitespace collapsed), read by html5lib, equals the input's.

python benchmarks/html_parsers.py                      # the project's page + the snippets below
python benchmarks/html_parsers.py --pages a.html b.html   # add real pages
"""

import argparse
import datetime
import re
import statistics
import time
from pathlib import Path

import html5lib
import lxml.html
from bs4 import BeautifulSoup
from speed.report import machine

REPO = Path(__file__).resolve().parent.parent

MALFORMED = {
    "unclosed inline": "<p>A <b>man rides a bike.<p>Two dogs play.",
    "misnested": "<p>A <b>man <i>rides</b> a</i> bike.</p>",
    "stray end tag": "<div>A man</span> rides.</div></div>",
    "unquoted attribute": '<p>See <a href=page.html title="a &quot;b&quot;">this</a> page</p>',
    "bare & and <": "<p>Fish & chips < 5 euros</p>",
    "text in table": "<table>stray<tr><td>cell</td></tr></table>",
    "unclosed li": "<ul><li>one<li>two</ul>",
    "no html/body": "<title>T</title><p>Hello <br> world",
    "void closed": "<p>a<br/>b<img src=x.png/>c</p>",
    "block in inline": "<b>bold <div>block</div> after</b>",
    "script with <": "<script>if (a < b && c) {}</script><p>x</p>",
    "unterminated comment": "<p>a</p><!-- never closed",
}


def html5lib_tree(text: str) -> str:
    """The input as html5lib (the WHATWG parsing algorithm) understands it, as text to compare: attributes in
    alphabetical order (their order means nothing) and the whitespace that ends the body left out (libxml2 drops
    the last newline of a page; nothing renders it)."""
    tree = html5lib.serialize(
        html5lib.parse(text), omit_optional_tags=False, quote_attr_values="always", alphabetical_attributes=True
    )
    return re.sub(r"\s+</body>", "</body>", tree)


def html5lib_text(text: str) -> str:
    return " ".join(
        html5lib.parse(text, treebuilder="lxml").getroot().xpath("string(//*[local-name()='body'])").split()
    )


def lxml_html(text: str) -> str:
    return lxml.html.tostring(lxml.html.document_fromstring(text), encoding="unicode")


def html5lib_own(text: str) -> str:
    return html5lib.serialize(html5lib.parse(text), omit_optional_tags=False, quote_attr_values="always")


PARSERS = {
    "lxml.html": lxml_html,
    "html5lib": html5lib_own,
    "bs4 + html.parser": lambda text: str(BeautifulSoup(text, "html.parser")),
    "bs4 + lxml": lambda text: str(BeautifulSoup(text, "lxml")),
    "bs4 + html5lib": lambda text: str(BeautifulSoup(text, "html5lib")),
}


def measure(parse, text: str, repeat: int) -> dict:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        output = parse(text)
        times.append(time.perf_counter() - start)
    return {
        "ms": statistics.median(times) * 1000,
        "stable": parse(output) == output,
        "as browsers": html5lib_tree(output) == html5lib_tree(text),
        "text kept": html5lib_text(output) == html5lib_text(text),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", nargs="*", type=Path, default=[], help="real HTML pages to add")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    pages = {"serving/page.html": (REPO / "modeling_vaswani/toolkit/serving/page.html").read_text(encoding="utf-8")}
    pages.update({path.name: path.read_text(encoding="utf-8") for path in args.pages})
    print(f"{datetime.date.today()} {machine()}")
    print(f"pages: {', '.join(f'{name} ({len(text):,} chars)' for name, text in pages.items())}")
    print(
        "| parser | pages: ms (sum) | pages stable | pages as browsers | snippets stable | snippets as browsers "
        "| snippets text kept |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, parse in PARSERS.items():
        page = [measure(parse, text, args.repeat) for text in pages.values()]
        snippet = {label: measure(parse, text, args.repeat) for label, text in MALFORMED.items()}
        failed = [label for label, result in snippet.items() if not result["as browsers"]]

        def count(results, key):
            return f"{sum(result[key] for result in results)}/{len(results)}"

        print(
            f"| {name} | {sum(result['ms'] for result in page):.1f} | {count(page, 'stable')} | "
            f"{count(page, 'as browsers')} | {count(snippet.values(), 'stable')} | "
            f"{count(snippet.values(), 'as browsers')} | {count(snippet.values(), 'text kept')} |"
        )
        if failed:
            print(f"    not as browsers: {', '.join(failed)}")


if __name__ == "__main__":
    main()
