"""Markup carried across translation: inline tags in a line of text (`<b>`, `<i>`, `<a href="...">`, `<br/>`, nested
or side by side) and HTML documents. Parsing, repairing and serializing are lxml's (libxml2's HTML parser, chosen by
measurement: docs/documents.md#markup); no model here (translation/documents.py translates).

The steps, for a text (`Document`):
1. Parse (`parse`): a text starting with `<!DOCTYPE` or `<html` as a whole document, anything else as a fragment (a
   line with inline tags, or a piece of a page). Malformed HTML is repaired as libxml2 repairs it: unclosed elements
   are closed where their parent ends, a stray end tag is dropped, an inline element left open across a block is
   closed at the block's end (browsers, following WHATWG, would reopen it in the next block), misnested inline tags
   are closed at the first end tag that does not match, bare `&` and `<` are read as text. What libxml2 does not
   read whole is refused, never translated truncated: elements nested deeper than it holds (`huge_tree`: 2,048), and
   any text a second reading (the standard library's html.parser) finds that the tree lacks (libxml2 drops, for one,
   whatever follows `</html>`).
2. Runs: the text to translate is every run of inline content (text and inline elements: `INLINE`) inside a block
   element, up to the next block element; each run is translated as one line (its sentences split and translated by
   the caller). Kept verbatim, never translated: `VERBATIM` elements (`<script>`, `<style>`, `<code>`, `<pre>`,
   `<textarea>`), any element with `translate="no"` (with everything in it), comments. Attributes (`alt`, `title`)
   are not translated.
3. Take the tags out (`strip`): a run's text without its tags, and each inline element as a `Tag` holding the span
   of the words it wraps (positions in the stripped text's `.split()`, what the aligner counts). A verbatim element
   inside a run is taken out whole, content and all, and its words are not translated. An element that shows
   something but holds no word of the run (`<br>`, `<img>`, a verbatim one: `separates`) ends the word before it:
   between two characters that are not spaces it stands for one space in the run's text, so `bike.<br/>He` is
   translated as `bike. He`, never as the word `bike.He`. An element wrapping no character wraps no word.
4. Put them back (`place`, `fill`) around the target words the alignment links to each tag's source words.
5. Serialize: lxml's HTML serializer for `format="html"`, its XML one for `"xml-inline"` (`<br/>`, and a
   well-formed XML fragment).

What no library does, and is written here by hand: the runs (which content is translated as one line), the word
spans of tags, and the placing of tags on the target words (`place`).
"""

import bisect
import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser

import lxml.etree
import lxml.html

from .sentences import preview

FORMATS = ("html", "xml-inline")

# Inline (phrasing) elements: their content belongs to the sentence around them. Anything else (div, p, li, td, h1,
# unknown custom elements) is a block: a run of text ends at it, so no sentence is made of the text of two blocks.
INLINE = frozenset(
    "a abbr acronym b bdi bdo big br cite code data del dfn em font i img input ins kbd label mark nobr q rp rt ruby "
    "s samp small span strike strong sub sup textarea time tt u var wbr".split()
)
# Kept as they are, content included: code and scripts are not text in the page's language.
VERBATIM = frozenset({"script", "style", "code", "pre", "textarea"})
# Verbatim elements that may stand between blocks or inside a run without ending it (a <pre> is a block).
SCRIPTS = frozenset({"script", "style", "textarea"})
VOID = frozenset(lxml.html.defs.empty_tags)
# Elements taken out of a run's text that show nothing where they stand: they join the characters around them, as a
# browser does (<wbr> marks where a word may break, inside the word). Comments show nothing either.
SHOWING_NOTHING = frozenset({"wbr", "script", "style"})
_RUN = "vaswani-run"  # the temporary element a run is gathered in, dropped after translation
_DOCUMENT = re.compile(r"\s*(<\?xml[^>]*>\s*)?(<!doctype|<html)", re.IGNORECASE)
# What lxml (libxml2) cannot hold in a tree, as XML 1.0 forbids it: control characters but tab, newline and carriage
# return, surrogates, U+FFFE and U+FFFF. HTML takes a form feed for a space; libxml2 cannot, so it is refused too.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def check_markup_text(text: str, what: str) -> None:
    """Refuses a character `_NOT_XML` holds in `what`, as itself or as a numeric character reference (`&#12;`, which
    the parser would resolve into it), naming it and its line and character in `text`."""
    for found in re.finditer(r"&#(?:[xX]([0-9a-fA-F]+)|([0-9]+));?|" + _NOT_XML.pattern, text):
        hexadecimal, decimal = found.groups()
        code = (
            ord(found.group())
            if found.group(1, 2) == (None, None)
            else int(hexadecimal or decimal, 16 if hexadecimal else 10)
        )
        if not (code == 0 or code > 0x10FFFF or _NOT_XML.match(chr(code))):
            continue
        line = text.count("\n", 0, found.start()) + 1
        column = found.start() - (text.rfind("\n", 0, found.start()) + 1) + 1
        written = f" written {found.group()!r}" if found.group(1, 2) != (None, None) else ""
        raise ValueError(
            f"{what} holds U+{code:04X}{written} at line {line}, character {column}: markup is parsed and written by "
            "libxml2, which takes no control character but tab, newline and carriage return (XML 1.0); expected "
            "text without it (or --format text, which translates tags as text)"
        )


def word_spans(text: str) -> list[tuple[int, int]]:
    """The (start, end) character offsets of `text.split()`'s words."""
    return [match.span() for match in re.finditer(r"\S+", text)]


def is_verbatim(element) -> bool:
    """Whether `element` is kept as it is: a comment or processing instruction, a VERBATIM element, or one marked
    translate="no"."""
    if not isinstance(element.tag, str):
        return True
    return element.tag.lower() in VERBATIM or (element.get("translate") or "").strip().lower() == "no"


def inline_elements(root) -> set:
    """The elements inside `root` that belong to the run of text around them: comments, scripts and styles (which may
    stand anywhere), and INLINE elements with no block inside (a verbatim one's inside is not looked at: it is kept
    whole). A `<pre>` or a block marked translate="no" is a block, kept as it is. One pass from the leaves up: asked
    element by element, deep nesting would be read again at each of its levels."""
    inline = set()
    for element in reversed(list(root.iter())):  # each element's children before it
        if not isinstance(element.tag, str) or element.tag.lower() in SCRIPTS:
            inline.add(element)
        elif element.tag.lower() in INLINE and (is_verbatim(element) or all(child in inline for child in element)):
            inline.add(element)
    return inline


def separates(element) -> bool:
    """Whether `element`, taken out of its run's text without a word of it, ends the word before it: a void or
    verbatim element that shows something (not `SHOWING_NOTHING`, not a comment)."""
    if not isinstance(element.tag, str) or element.tag.lower() in SHOWING_NOTHING:
        return False
    return element.tag.lower() in VOID or is_verbatim(element)


@dataclass
class Tag:
    """An inline element of a run, taken out of its text: `element`, a copy without text, children or tail (a
    verbatim one whole, with its content), wraps source words `start` to `end` (exclusive; positions in `.split()`
    of the run's stripped text). `start == end`: it wraps no word (`<br/>`, an empty element, a verbatim one, one of
    whitespace only), and stands after source word `start - 1`. `children`: the tags inside it, in order."""

    element: object
    start: int
    end: int
    children: list["Tag"] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.element.tag if isinstance(self.element.tag, str) else "<!-->"


@dataclass
class Marked:
    """A run of text with its tags taken out: `text` (what is translated) and its `tags` (the outermost, in
    order)."""

    text: str
    tags: list[Tag]


def strip(container) -> Marked:
    """The text of `container`'s content (its text, children and their tails, not its own tail), tags taken out, and
    the tags (`Tag`) with the word spans they wrap. A `separates` element standing between two characters that are
    not spaces is one space in the text; a tag wrapping no character wraps no word (inside a word: before it)."""
    parts: list[str] = []
    spans: list[tuple[Tag, int, int]] = []  # each tag with the character offsets it wraps, turned into words below
    breaks: list[int] = []  # where a separating element stands
    length = 0

    def add(text: str | None) -> None:
        nonlocal length
        if text:
            parts.append(text)
            length += len(text)

    tags: list[Tag] = []
    add(container.text)
    # A loop, not recursion (elements may nest as deep as libxml2 holds): for each open element, its children left to
    # read, the list their tags go to, and what finishes it once they are read (its tag, first offset and tail).
    stack = [(iter(container), tags, None)]
    while stack:
        children, siblings, opened = stack[-1]
        child = next(children, None)
        if child is None:
            stack.pop()
            if opened is not None:
                tag, start, tail = opened
                spans.append((tag, start, length))
                add(tail)
            continue
        if separates(child):
            breaks.append(length)
        if is_verbatim(child):
            element = copy.deepcopy(child)
            element.tail = None
            siblings.append(tag := Tag(element, 0, 0))
            spans.append((tag, length, length))
            add(child.tail)
        else:
            siblings.append(tag := Tag(child.makeelement(child.tag, dict(child.attrib)), 0, 0))
            stack.append((iter(child), tag.children, (tag, length, child.tail)))
            add(child.text)
    text = "".join(parts)
    breaks = [
        at
        for at in dict.fromkeys(breaks)
        if 0 < at < len(text) and not any(c.isspace() for c in text[at - 1 : at + 1])
    ]
    text = " ".join(text[start:end] for start, end in zip([0, *breaks], [*breaks, len(text)], strict=True))
    words = word_spans(text)
    starts, ends = [start for start, _ in words], [end for _, end in words]
    for tag, start, end in spans:
        # Offsets in the text with its separating spaces: a tag starting at one starts after it, one ending there ends
        # before it.
        start, end = start + bisect.bisect_right(breaks, start), end + bisect.bisect_left(breaks, end)
        # The words the characters touch: a tag ending inside a word ("<b>dog</b>s") wraps the whole word.
        first, after = bisect.bisect_right(ends, start), bisect.bisect_left(starts, end)
        tag.start, tag.end = (first, after) if start < end and first < after else (first, first)
    return Marked(text, tags)


def check_links(links: Sequence[tuple[int, int]], sources: int, targets: int) -> None:
    """Refuses a link that is not a (source word, target word) pair inside `sources` and `targets` words."""
    for link in links:
        if len(link) != 2 or not (0 <= link[0] < sources and 0 <= link[1] < targets):
            raise ValueError(
                f"alignment link {link!r} is not a (source word, target word) pair of a text of {sources} source "
                f"and {targets} target words; expected 0 <= source < {sources}, 0 <= target < {targets}"
            )


@dataclass
class Placed:
    """A tag placed on target words `start` to `end` (exclusive; `start == end`: between words start - 1 and
    start), its children placed inside."""

    tag: Tag
    start: int
    end: int
    children: list["Placed"]


def place(tags: Sequence[Tag], links: Sequence[tuple[int, int]], sources: int, targets: int) -> list[Placed]:
    """Where each tag goes in a translation of `targets` words, from the (source word, target word) `links`:

    - a tag wrapping words wraps the smallest contiguous target span covering every target word linked to any of
      its source words;
    - a tag wrapping no word (`<br/>`, verbatim content) goes right after the last target word linked to the source
      word before it (the nearest one before it that has a link; at the start of the translation if none has);
    - a tag wrapping words none of which is linked goes where a tag wrapping no word would, and wraps no word (it
      is still there, empty);
    - nesting and order are kept, the source's: a tag is clamped into its parent's target span, and siblings into
      the order they had: one that would start before the previous sibling ends (crossing or reordered
      alignments) starts where that one ends, and ends no earlier than it starts (possibly wrapping no word).
    Every tag is placed: none is dropped."""
    check_links(links, sources, targets)
    linked: list[list[int]] = [[] for _ in range(sources)]
    for source, target in links:
        linked[source].append(target)

    def wanted(tag: Tag) -> tuple[int, int]:
        covered = [target for source in range(tag.start, tag.end) for target in linked[source]]
        if covered:
            return min(covered), max(covered) + 1
        before = next((linked[source] for source in range(tag.start - 1, -1, -1) if linked[source]), [-1])
        return max(before) + 1, max(before) + 1

    placed: list[Placed] = []
    work = [(tags, 0, targets, placed)]  # siblings, their parent's span, the list they go to
    while work:  # a loop, not recursion: tags may nest as deep as libxml2 holds
        siblings, low, high, into = work.pop()
        cursor = low
        for tag in siblings:
            start, end = wanted(tag)
            start = min(max(start, cursor), high)
            end = min(max(end, start), high)
            into.append(item := Placed(tag, start, end, []))
            work.append((tag.children, start, end, item.children))
            cursor = end
    return placed


def fill(container, marked: Marked, target: str, links: Sequence[tuple[int, int]]) -> None:
    """Makes `target` (the translation of `marked.text`) with `marked`'s tags placed by `links` (`place`) the content
    of `container`, replacing what it held (its tail is left alone). Stripping the tags from the result gives
    `target` exactly."""
    words = word_spans(target)
    placed = place(marked.tags, links, len(marked.text.split()), len(words))
    for child in list(container):
        container.remove(child)
    container.text = None

    def put(parent, text: str, last) -> None:
        if not text:
            return
        if last is None:
            parent.text = (parent.text or "") + text
        else:
            last.tail = (last.tail or "") + text

    work = [(container, placed, 0, len(target))]  # an element, its placed tags, its span of characters
    while work:  # a loop, not recursion: tags may nest as deep as libxml2 holds
        parent, tags, low, high = work.pop()
        cursor, last = low, None
        for item in tags:
            if item.start < item.end:
                start, end = words[item.start][0], words[item.end - 1][1]
            else:  # right after the word before, not before the space that follows it
                start = end = words[item.start - 1][1] if item.start > 0 else 0
            # `place` nested and ordered the word spans; in characters, a tag wrapping no word at its parent's first
            # word would sit before the parent's first character (at the end of the word before): kept inside.
            start = min(max(start, cursor), high)
            end = min(max(end, start), high)
            put(parent, target[cursor:start], last)
            element = copy.deepcopy(item.tag.element)
            if not is_verbatim(item.tag.element):
                work.append((element, item.children, start, end))
            parent.append(element)
            cursor, last = end, element
        put(parent, target[cursor:high], last)


_BODY = "<html><body>"  # a fragment is read as the body of a page of its own, as lxml.html's fragments are


class _TextReader(HTMLParser):
    """The standard library's HTML tokenizer, a reading independent of libxml2: each piece of character data as
    written, with its line and column (character references left out: the two resolve a few of them differently)."""

    def __init__(self):
        super().__init__(convert_charrefs=False)
        self.pieces: list[tuple[tuple[int, int], str]] = []

    def handle_data(self, data: str) -> None:
        self.pieces.append((self.getpos(), data))


def check_kept(text: str, root, what: str) -> None:
    """Refuses `text` unless the tree libxml2 built from it (`root`) holds every letter and digit of its character
    data as html.parser reads it, in order (text, comments, scripts: anywhere in the tree), naming the first piece of
    text the tree lacks by line and character. Spaces, punctuation and references are not compared: the two parsers
    differ there without losing anything."""
    pieces = root.xpath(".//text() | .//comment() | .//processing-instruction()")  # in document order
    kept = (
        char for piece in pieces for char in (piece if isinstance(piece, str) else piece.text or "") if char.isalnum()
    )
    reader = _TextReader()
    # "<![" opens a marked section (CDATA and others, never text for either parser); html.parser stops at one it
    # cannot name with an AssertionError, and reads "<!?" as a bogus comment, the same length, up to its ">".
    reader.feed(text.replace("<![", "<!?"))
    # Not read: what html.parser hands over only when closed, a tag, comment or reference left unfinished at the end
    # of the text, which libxml2 (as a browser) reads as markup, not as text.
    for (line, column), data in reader.pieces:
        # `kept` is read once, in order: each character is looked for after the one found before it.
        if not all(any(char == other for other in kept) for char in data if char.isalnum()):
            raise ValueError(
                f"{what}: libxml2's HTML parser drops its text at line {line}, character {column + 1} "
                f"({preview(data)!r}), which would be missing from the translation; expected HTML that libxml2 "
                "reads whole (it drops, for one, whatever follows </html>, and in a fragment what follows </body>)"
            )


def parse(text: str, whole: bool, what: str):
    """The tree of `text` as libxml2 reads it (lxml.html, `huge_tree`: up to 2,048 nested elements, html and body
    included), `whole`: as a document (its <html> element), else as a fragment (a <div> holding it). The one place
    that decides that nothing of `text` was lost in parsing: a text libxml2 stops reading (elements nested too deep)
    or whose text it drops (`check_kept`) is refused, naming where, never translated truncated."""
    parser = lxml.html.HTMLParser(huge_tree=True)
    if whole:
        # A str holding an XML declaration with an encoding is refused by lxml: it is already decoded. Blanked, not
        # removed, so that libxml2's line numbers are the text's.
        declaration = _DOCUMENT.match(text).group(1) or ""
        blank = re.sub(r"[^\n]", " ", declaration)
        try:
            root = lxml.html.document_fromstring(text.replace(declaration, blank, 1), parser=parser)
        except lxml.etree.ParserError as error:  # "Document is empty": libxml2 found no element to keep
            raise ValueError(
                f"{what}: libxml2's HTML parser reads no document in it ({error}); expected HTML"
            ) from None
    else:
        body = lxml.html.document_fromstring(_BODY + text, parser=parser).find("body")
        root = body.makeelement("div", {})
        root.text = body.text
        root.extend(body)
    for error in parser.error_log:
        if error.level_name == "FATAL":
            deep = re.match(r"Excessive depth in document: (\d+)", error.message)
            reason = (
                f"its elements nest more than {deep[1]} deep, the most libxml2's HTML parser holds (html and body "
                f"included); expected at most {deep[1]} nested elements"
                if deep
                else f"libxml2's HTML parser stops there: {error.message.strip()}"
            )
            raise ValueError(f"{what} cannot be read whole: at line {error.line}, {reason}")
    check_kept(text, root, what)
    return root


def _wrap_runs(root, runs: list) -> None:
    """Gathers each run of inline content of `root` and of the blocks inside it that holds words into a temporary
    element, appended with its `Marked` to `runs`."""
    inline_ones = inline_elements(root)
    blocks = [root]
    while blocks:  # a loop, not recursion: blocks may nest as deep as libxml2 holds
        block = blocks.pop()
        segments, current = [], (None, [])  # (the element whose tail starts the run, None: the block's text; elements)
        inner = []
        for child in list(block):
            if child in inline_ones:
                current[1].append(child)
                continue
            segments.append(current)
            current = (child, [])
            if not is_verbatim(child):
                inner.append(child)
        segments.append(current)
        blocks.extend(reversed(inner))
        for owner, inline in segments:
            lead = block.text if owner is None else owner.tail
            if not inline and not (lead or "").strip():
                continue  # whitespace between blocks: nothing to translate
            wrapper = block.makeelement(_RUN, {})
            if owner is None:
                block.text = None
                block.insert(0, wrapper)
            else:
                owner.tail = None
                owner.addnext(wrapper)
            wrapper.text = lead
            for element in inline:
                wrapper.append(element)  # its tail moves with it
            marked = strip(wrapper)
            if marked.text.strip():
                runs.append((wrapper, marked))
            else:  # only verbatim content or empty tags: left as it was
                wrapper.drop_tag()


class Document:
    """A text with markup, parsed (`FORMATS`: "html" for pages and fragments of pages, "xml-inline" for a line with
    inline tags, written back as XML), and its `runs`: the text to translate, each a `Marked` run translated as a
    line. `write` gives the text back with the runs' translations in place."""

    def __init__(self, text: str, format: str = "html"):
        if format not in FORMATS:
            raise ValueError(f"unknown markup format {format!r}; expected one of {list(FORMATS)}")
        if not isinstance(text, str):
            raise ValueError(f"a document is a {type(text).__name__}; expected a str")
        check_markup_text(text, f"the {format} text")
        self.format, self.text = format, text
        self.whole = bool(_DOCUMENT.match(text))
        self.runs: list[Marked] = []
        self._wrappers: list = []
        if not text.strip():  # lxml refuses an empty document; there is nothing to translate or repair
            self.root = None
            return
        self.root = parse(text, self.whole, f"the {format} text")
        found: list = []
        _wrap_runs(self.root, found)
        self._wrappers = [wrapper for wrapper, _ in found]
        self.runs = [marked for _, marked in found]

    def write(self, translations: Sequence[str], links: Sequence[Sequence[tuple[int, int]]]) -> str:
        """The document with each run replaced by its translation, tags placed by its (source word, target word)
        `links` (`fill`), serialized. Call once."""
        if len(translations) != len(self.runs) or len(links) != len(self.runs):
            raise ValueError(
                f"{len(translations)} translations and {len(links)} alignments for {len(self.runs)} runs of text; "
                "expected one of each a run"
            )
        for wrapper, marked, target, pairs in zip(self._wrappers, self.runs, translations, links, strict=True):
            check_markup_text(target, f"the translation {target!r}")  # byte-level BPE may write any character
            fill(wrapper, marked, target, pairs)
            wrapper.drop_tag()
        if self.root is None:
            return self.text
        method = "html" if self.format == "html" else "xml"
        if method == "xml":  # an empty element written <b></b>, not <b/>, which an HTML reader takes for an open <b>
            for element in self.root.iter(lxml.etree.Element):
                if element.text is None and not len(element) and element.tag.lower() not in VOID:
                    element.text = ""
        if self.whole:
            return lxml.html.tostring(self.root.getroottree(), encoding="unicode", method=method)
        written = lxml.etree.tostring(self.root, encoding="unicode", method=method)
        # The fragment was parsed into a <div> of its own (create_parent): its content is the text.
        if not (written.startswith("<div>") and written.endswith("</div>")):
            raise RuntimeError(f"lxml wrote the fragment's container as {written[:20]!r}...; expected <div>...</div>")
        return written[len("<div>") : -len("</div>")]


def check_documents(texts: Sequence[str], format: str, what: str) -> None:
    """Refuses the first of `texts` that is no `Document` of `format` (a character libxml2 cannot hold, markup it
    does not read whole), naming `what` (a file) and the text's number: what a command checks before a model loads."""
    for number, text in enumerate(texts, 1):
        try:
            Document(text, format)
        except ValueError as error:
            raise ValueError(f"{what}: text {number}: {error}") from None


def write_documents(
    documents: Sequence[Document], translations: Sequence[str], links: Sequence[Sequence[tuple[int, int]]]
) -> list[str]:
    """Each document written (`Document.write`) with its runs' `translations` and `links`, given for the runs of all
    the documents, in order."""
    runs = sum(len(document.runs) for document in documents)
    if len(translations) != runs or len(links) != runs:
        raise ValueError(
            f"{len(translations)} translations and {len(links)} alignments for the {runs} runs of text of "
            f"{len(documents)} documents; expected one of each a run"
        )
    written, start = [], 0
    for document in documents:
        end = start + len(document.runs)
        written.append(document.write(translations[start:end], links[start:end]))
        start = end
    return written
