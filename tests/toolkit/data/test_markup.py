"""Markup taken out of a text and put back on a translation (data/markup.py), with alignments written by hand; the
output checked by parsers other than lxml (the one markup.py uses): xml.etree for "xml-inline" and the standard
library's html.parser for HTML."""

import html
import time
from html.parser import HTMLParser

import pytest
from helpers.markup import xml_shape
from hypothesis import given
from hypothesis import strategies as st

from modeling_vaswani.toolkit.data.markup import VOID, Document, Tag, place


def tree(marked_tags):
    """Tags as (name, start, end, children) tuples, to compare."""
    return [(tag.name, tag.start, tag.end, tree(tag.children)) for tag in marked_tags]


def inline(text: str, target: str, links) -> str:
    document = Document(text, "xml-inline")
    assert len(document.runs) == 1
    return document.write([target], [links])


class Balance(HTMLParser):
    """The standard library's HTML tokenizer, checking that every element opened is closed, in order."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.text, self.problems = [], [], []

    def handle_starttag(self, tag, attrs):
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack.pop() != tag:
            self.problems.append(tag)

    def handle_data(self, data):
        self.text.append(data)


def balanced(html: str) -> Balance:
    checker = Balance()
    checker.feed(html)
    checker.close()
    assert not checker.problems and not checker.stack, (checker.problems, checker.stack)
    return checker


# ---- taking tags out ------------------------------------------------------------------------------------------------


def test_strip_gives_the_text_and_the_word_span_of_every_tag():
    text = 'A <b>big <i>red</i></b> <u>car</u><br/> and <a href="x?a=1&amp;b=2">the</a> <s> </s>dog&amp;cat<i/>'
    [run] = Document(text, "xml-inline").runs
    assert run.text == "A big red car and the  dog&cat"
    assert tree(run.tags) == [
        ("b", 1, 3, [("i", 2, 3, [])]),
        ("u", 3, 4, []),
        ("br", 4, 4, []),  # wraps nothing: stands after word 3
        ("a", 5, 6, []),
        ("s", 6, 6, []),  # whitespace only: no word
        ("i", 7, 7, []),
    ]
    assert run.tags[3].element.attrib == {"href": "x?a=1&b=2"}


def test_a_tag_ending_inside_a_word_wraps_the_whole_word():
    [run] = Document("<b>dog</b>s run", "xml-inline").runs
    assert (run.text, tree(run.tags)) == ("dogs run", [("b", 0, 1, [])])


# ---- putting them back, alignments by hand -------------------------------------------------------------------------

MONOTONE = [(0, 0), (1, 1), (2, 2), (3, 3)]


@pytest.mark.parametrize(
    ("text", "target", "links", "expected"),
    [
        # nested: the outer tag covers the inner one's words and its own
        ("A <b>big <i>red</i></b> car", "Ein großes rotes Auto", MONOTONE, "Ein <b>großes <i>rotes</i></b> Auto"),
        # adjacent, no space between them
        ("<b>A</b><i>dog</i> runs", "Ein Hund läuft", [(0, 0), (0, 1), (0, 2)], "<b>Ein Hund läuft</b><i></i>"),
        ("<b>two</b> <i>dogs</i> run", "zwei Hunde laufen", [(0, 0), (1, 1), (2, 2)],
         "<b>zwei</b> <i>Hunde</i> laufen"),
        # a span of target words: the smallest one covering every linked word (here words 1 to 3)
        ("the <a href='#x'>car</a> stops", "der Wagen hält da an", [(0, 0), (1, 1), (2, 2), (1, 4)],
         'der <a href="#x">Wagen hält da an</a>'),
        # reordered: the tag follows its words
        ("I <b>have</b> seen it", "Ich habe es gesehen", [(0, 0), (1, 1), (2, 3), (3, 2)],
         "Ich <b>habe</b> es gesehen"),
        ("I have <b>seen</b> it", "Ich habe es gesehen", [(0, 0), (1, 1), (2, 3), (3, 2)],
         "Ich habe es <b>gesehen</b>"),
        # crossing siblings: the second starts where the first ends (order kept), so it wraps no word
        ("<b>red</b> <i>car</i>", "Auto rot", [(1, 0), (0, 1)], "Auto <b>rot</b><i></i>"),
        # unaligned: empty, right after the target word linked to the nearest source word before it
        ("a <b>very</b> big dog", "ein großer Hund", [(0, 0), (2, 1), (3, 2)], "ein<b></b> großer Hund"),
        ("<b>very</b> big dog", "großer Hund", [(1, 0), (2, 1)], "<b></b>großer Hund"),
        # self-closing: after the target word linked to the source word before it
        ("one <br/>two <img src='a.png'/>three", "eins zwei drei", [(0, 0), (1, 1), (2, 2)],
         'eins<br/> zwei<img src="a.png"/> drei'),
        ("Hello world<br/>", "Hallo Welt", [(0, 0), (1, 1)], "Hallo Welt<br/>"),
        ("<br/>Hello", "Hallo", [(0, 0)], "<br/>Hallo"),
        # a child whose words cross out of its parent's span stays inside the parent
        ("<b>a <i>b</i></b> c", "x y z", [(0, 1), (1, 2), (2, 0)], "x <b>y <i>z</i></b>"),
        ("<b>a</b> <i>b</i> c", "x y z", [(0, 2), (1, 0), (2, 1)], "x y <b>z</b><i></i>"),
        # escaping: the translation's & and < are text, attributes keep their values
        ('<a title="a &quot;q&quot; &amp; b">x</a> y', "x & <y>", [(0, 0), (1, 1), (1, 2)],
         '<a title="a &quot;q&quot; &amp; b">x</a> &amp; &lt;y&gt;'),
    ],
)  # fmt: skip
def test_tags_are_placed_on_the_linked_target_words_and_the_output_is_well_formed(text, target, links, expected):
    output = inline(text, target, links)
    assert output == expected
    source = Document(text, "xml-inline")
    _, source_shape = xml_shape(source.write([source.runs[0].text], [[]]))  # the input's tags, as lxml repaired it
    output_text, output_shape = xml_shape(output)  # well-formed, read by a second parser
    assert output_text == target
    assert output_shape == source_shape  # the same tags, attributes and nesting


def test_every_tag_is_placed_whatever_the_links():
    """Random links (crossing, many-to-many, none) over a deeply nested text: every tag comes back once, nested as
    it was, and the text is the translation."""
    import random

    text = "<b>a <i>b <u>c</u></i> d</b> <s>e</s><br/> <a href='#'>f <em>g</em></a> h"
    source = Document(text, "xml-inline")
    _, shape = xml_shape(source.write([source.runs[0].text], [[]]))
    generator = random.Random(0)
    for _ in range(200):
        target = " ".join(f"w{i}" for i in range(generator.randint(0, 9)))
        words = len(target.split())
        links = (
            [(generator.randrange(8), generator.randrange(words)) for _ in range(generator.randint(0, 12))]
            if words
            else []
        )
        output = inline(text, target, links)
        assert xml_shape(output) == (target, shape), (target, links, output)


def test_place_refuses_links_outside_the_texts():
    tags = [Tag(Document("<b>x</b>", "xml-inline").runs[0].tags[0].element, 0, 1)]
    with pytest.raises(ValueError, match=r"link \(0, 5\) is not .* 2 target words"):
        place(tags, [(0, 5)], 1, 2)


def test_unknown_format_and_runs_count_are_refused():
    with pytest.raises(ValueError, match="unknown markup format 'markdown'"):
        Document("x", "markdown")
    with pytest.raises(ValueError, match="1 translations and 1 alignments for 2 runs"):
        Document("<p>a</p><p>b</p>", "html").write(["x"], [[]])


# Every character XML 1.0 forbids, written as itself and as decimal and hexadecimal references, in both formats.
FORBIDDEN = [*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0xFFFE, 0xFFFF]


@pytest.mark.parametrize("format", ["html", "xml-inline"])
@pytest.mark.parametrize("code", FORBIDDEN, ids=lambda code: f"U+{code:04X}")
def test_a_character_libxml2_cannot_hold_is_refused_by_name_and_place(code, format):
    """libxml2 holds no such character: written as itself, lxml refused it with a message naming nothing, and as a
    reference (&#12;) it was resolved, then refused, or written as U+FFFD. Each is refused naming it and its place."""
    for written in (chr(code), f"&#{code};", f"&#x{code:x};"):
        text = f"a <b>c</b>\nfirst {written} <i>word</i>"
        with pytest.raises(ValueError) as refused:
            Document(text, format)
        message = str(refused.value)
        assert f"holds U+{code:04X}" in message and "at line 2, character 7" in message, message
        assert (f"written {written!r}" in message) == (written != chr(code)), message


@pytest.mark.parametrize("text", ["tab\there", "line\nbreak", "cr\r\nlf", "&#9; &#10; &#13; &#65; &#x263a; &amp;"])
def test_the_characters_xml_allows_are_taken(text):
    assert Document(f"<b>{text}</b>", "xml-inline").runs


def test_a_translation_holding_such_a_character_is_refused_by_name():
    document = Document("a <b>b</b>", "xml-inline")
    with pytest.raises(ValueError, match=r"the translation 'x \\x0c y' holds U\+000C at line 1, character 3"):
        document.write(["x \x0c y"], [[(0, 0), (1, 2)]])


# ---- HTML documents ------------------------------------------------------------------------------------------------

PAGE = """<!DOCTYPE html>
<html lang="en"><head><title>Two dogs</title><style>p > b { color: red; }</style>
<script>if (a < b && c) { document.write("<p>x</p>"); }</script></head>
<body>
  <h1 class="top">Two <em>dogs</em> play.</h1>
  <div>A man rides. <b>A woman</b> reads.
    <p>Inside a <a href="/x?q=1&amp;r=2" title="T">paragraph</a>.</p>
    tail text <code>x &lt; y</code> after code
  </div>
  <pre>  keep   these
     spaces &amp; lines </pre>
  <p translate="no">Do <b>not</b> translate.</p>
  <p>Some <span translate="no">Brand Name</span> here.<!-- a comment --></p>
  <ul><li>one</li><li>two <i>three</i></li></ul>
</body></html>
"""
VERBATIM = [
    "<style>p > b { color: red; }</style>",
    '<script>if (a < b && c) { document.write("<p>x</p>"); }</script>',
    "<code>x &lt; y</code>",
    "<pre>  keep   these\n     spaces &amp; lines </pre>",
    '<p translate="no">Do <b>not</b> translate.</p>',
    '<span translate="no">Brand Name</span>',
    "<!-- a comment -->",
]


def upper(document: Document) -> str:
    """The document "translated" into upper case, word for word."""
    return document.write(
        [run.text.upper() for run in document.runs],
        [[(i, i) for i in range(len(run.text.split()))] for run in document.runs],
    )


def test_html_runs_are_the_text_of_blocks_and_verbatim_content_is_kept_byte_for_byte():
    document = Document(PAGE, "html")
    assert sorted(" ".join(run.text.split()) for run in document.runs) == sorted(
        ["Two dogs", "Two dogs play.", "A man rides. A woman reads.", "Inside a paragraph.",
         "tail text after code", "Some here.", "one", "two three"]
    )  # fmt: skip
    output = upper(document)
    for verbatim in VERBATIM:
        assert verbatim in PAGE and verbatim in output
    assert '<h1 class="top">TWO <em>DOGS</em> PLAY.</h1>' in output
    assert '<a href="/x?q=1&amp;r=2" title="T">PARAGRAPH.</a>' in output
    assert output.startswith("<!DOCTYPE html>")
    checker = balanced(output)  # a second parser: every element closed, in order
    assert "MAN RIDES" in "".join(checker.text)


def test_a_fragment_stays_a_fragment_and_blank_text_stays_as_it_is():
    assert upper(Document("<p>a <b>b</b></p> c", "html")) == "<p>A <b>B</b></p> C"
    for blank in ("", "  \n"):
        document = Document(blank, "html")
        assert document.runs == [] and document.write([], []) == blank


@pytest.mark.parametrize(
    ("malformed", "repaired"),
    [
        # an inline element left open is closed where its block ends (a browser would reopen it in the next block)
        ("<p>A <b>man rides.<p>Two dogs.", "<p>A <b>MAN RIDES.</b></p><p>TWO DOGS.</p>"),
        # misnested: closed at the first end tag that does not match
        ("<p>A <b>man <i>rides</b> a</i> bike.</p>", "<p>A <b>MAN <i>RIDES</i></b> A BIKE.</p>"),
        ("<div>A man</span> rides.</div></div>", "<div>A MAN RIDES.</div>"),
        ("<p>Fish & chips < 5", "<p>FISH &amp; CHIPS &lt; 5</p>"),
        ("<ul><li>one<li>two</ul>", "<ul><li>ONE</li><li>TWO</li></ul>"),
    ],
)
def test_malformed_html_is_repaired_as_lxml_repairs_it(malformed, repaired):
    output = upper(Document(malformed, "html"))
    assert output == repaired
    balanced(output)


def test_place_keeps_siblings_in_order_and_children_inside_their_parent():
    [run] = Document("<b>a <i>b</i></b> <u>c</u> d", "xml-inline").runs
    # a -> 3, b -> 0 (out of its parent's span), c -> 1 (before its previous sibling), d -> 2
    placed = place(run.tags, [(0, 3), (1, 0), (2, 1), (3, 2)], 4, 4)
    assert [(p.tag.name, p.start, p.end, [(c.tag.name, c.start, c.end) for c in p.children]) for p in placed] == [
        ("b", 0, 4, [("i", 0, 1)]),
        ("u", 4, 4, []),
    ]


# ---- nothing lost: deep pages, void elements between words (issue 51, item 7) ---------------------------------------


class Words(HTMLParser):
    """A page's words as the standard library's HTML tokenizer reads them, each with whether it is to be translated:
    the words of verbatim content (`<code>`, `<textarea>`, translate="no") are kept as written; script, style and
    comments show nothing and are left out. What ends a word: a space, and an element that shows something without
    holding a word of the text (`<br>`, `<img>`, `<hr>`, verbatim content); not `<wbr>` (where a word may break).
    Other elements are not counted as ending words: where they stand in malformed markup is the parser's repair
    (libxml2 and html.parser repair differently), not what is compared here."""

    INVISIBLE = frozenset({"script", "style", "wbr"})

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, bool, bool]] = []  # open elements: name, verbatim itself, inside a verbatim one
        self.pieces: list[tuple[str, bool]] = []  # (text, translated)
        self.feed(text.replace("<![", "<!?"))  # a marked section html.parser cannot name: a bogus comment, not text
        self.close()

    def handle_starttag(self, tag, attrs):
        own = tag in {"code", "textarea", "script", "style"} or ("translate", "no") in attrs
        if tag not in self.INVISIBLE and (tag in VOID or own):
            self.pieces.append((" ", False))
        if tag not in VOID:
            self.stack.append((tag, own, own or any(kept for _, _, kept in self.stack)))

    def handle_endtag(self, tag):
        own = False
        while self.stack and tag not in VOID:
            name, own, _ = self.stack.pop()
            if name == tag:
                break
        if tag not in self.INVISIBLE and (tag in VOID or own):
            self.pieces.append((" ", False))

    def handle_data(self, data):
        if not any(name in self.INVISIBLE for name, _, _ in self.stack):
            self.pieces.append((data, not (self.stack and self.stack[-1][2])))

    def words(self, translate=lambda text: text) -> list[str]:
        return "".join(translate(text) if translated else text for text, translated in self.pieces).split()


def word_for_word(document: Document, translate) -> str:
    """The document written with each run "translated" by `translate` (a function of a run's text keeping its number
    of words), each word linked to the word at its place."""
    return document.write(
        [translate(run.text) for run in document.runs],
        [[(i, i) for i in range(len(run.text.split()))] for run in document.runs],
    )


def test_a_page_300_elements_deep_is_translated_whole():
    """libxml2's HTML parser stopped at depth 256 without an error: the output was 254 empty <div>s, both sentences
    gone. Read with huge_tree, the page is translated whole, as html.parser (which has no depth limit) reads it."""
    page = "<div>" * 300 + "A man rides a bike." + "</div>" * 300 + "\n<p>Two dogs play.</p>"
    output = word_for_word(Document(page, "html"), str.upper)
    assert Words(output).words() == "A MAN RIDES A BIKE. TWO DOGS PLAY.".split()
    assert output.count("<div>") == output.count("</div>") == 300
    balanced(output)


@pytest.mark.parametrize("tag", ["div", "b", "span"])
def test_elements_nested_as_deep_as_libxml2_holds_are_translated_and_one_more_is_refused_naming_the_depth(tag):
    """2,048 levels, html and body included: a fragment may nest 2,046 elements. Inline ones nested that deep go
    through the tags' taking out and putting back (loops, not recursion: Python's stack holds 1,000 frames)."""
    page = f"<{tag}>" * 2045 + "deep <i>words</i>" + f"</{tag}>" * 2045 + "\n<p>after it</p>"
    output = word_for_word(Document(page, "html"), str.upper)
    assert Words(output).words() == ["DEEP", "WORDS", "AFTER", "IT"]
    assert output.count(f"<{tag}>") == 2045
    deeper = r"at line 2, its elements nest more than 2048 deep, .* expected at most 2048 nested elements"
    with pytest.raises(ValueError, match=deeper):
        Document("\n" + f"<{tag}>" * 2047 + "deep", "html")


def test_a_block_under_2044_nested_inline_elements_is_read_in_one_pass():
    """Which elements are inline is decided once, from the leaves up: asked level by level, each of the 2,044 <b>s
    read everything under it again (19 s on this project's machine; 0.06 s now)."""
    page = "<b>" * 2044 + "x <div>y</div> z" + "</b>" * 2044
    started = time.perf_counter()
    output = word_for_word(Document(page, "html"), str.upper)
    assert time.perf_counter() - started < 5
    assert Words(output).words() == ["X", "Y", "Z"] and output.count("<b>") == 2044


@pytest.mark.parametrize(
    ("page", "where", "lost"),
    [
        # libxml2 keeps nothing after </html>, without a word in its error log
        ("<!DOCTYPE html><html><body><p>Kept.</p></body></html>\n<p>Two dogs play.</p>", "line 2, character 4",
         "Two dogs play."),
        ("<html><body>A man.</body></html><script>track();</script>", "line 1, character 41", "track();"),
        ("A <b>man</b>.\n<p>I wrote </html> here.</p>", "line 2, character 19", "here."),
        # in a fragment, what follows </body> lands outside the fragment's body
        ("A man rides.\n</body>Two dogs play.", "line 2, character 8", "Two dogs play."),
        ("A man <b>rides</b>.</html> Two dogs play.", "line 1, character 27", "Two dogs play."),
    ],
)  # fmt: skip
def test_text_libxml2_drops_is_refused_naming_its_place(page, where, lost):
    with pytest.raises(ValueError, match="drops its text") as refused:
        Document(page, "html")
    assert f"at {where} ({lost!r})" in str(refused.value)


@pytest.mark.parametrize("page", ["<!DOCTYPE x", "<!doctype x><!--[<?<plaintext></html>"])
def test_a_document_libxml2_reads_as_empty_is_refused(page):
    """lxml raised its own ParserError ("Document is empty"), a traceback from the commands."""
    with pytest.raises(ValueError, match="reads no document in it"):
        Document(page, "html")


@pytest.mark.parametrize("page", ["a <![<br> b", "<p>x<![if !IE]>y<![endif]> z</p>", "<![CDATA[c]]>d <![ e>f"])
def test_marked_sections_do_not_stop_the_second_reading(page):
    """html.parser raised an AssertionError ("expected name token") at a "<![" it cannot name."""
    document = Document(page, "html")
    assert Words(word_for_word(document, str.upper)).words() == Words(page).words(str.upper)


@pytest.mark.parametrize(
    ("markup", "text", "output"),
    [
        # the named case: the word on each side of <br/> was lost inside the <br>, which holds no text
        ("<p>A man in a blue shirt is riding a bike.<br/>He smiles.</p>",
         "A man in a blue shirt is riding a bike. He smiles.",
         "<p>A MAN IN A BLUE SHIRT IS RIDING A BIKE.<br> HE SMILES.</p>"),
        ("<p>Two dogs<img src='d.png' alt='dogs'>play.</p>", "Two dogs play.",
         '<p>TWO DOGS<img src="d.png" alt="dogs"> PLAY.</p>'),
        ("<p>Type<input name=q>here.</p>", "Type here.", '<p>TYPE<input name="q"> HERE.</p>'),
        ("<p>Call<code>f(x)</code>now.</p>", "Call now.", "<p>CALL<code>f(x)</code> NOW.</p>"),
        ('<p>By<span translate="no">Vaswani</span>today.</p>', "By today.",
         '<p>BY<span translate="no">Vaswani</span> TODAY.</p>'),
        # two side by side: one space; at the edges of a run or beside a space: none
        ("<p>one<br><br>two</p>", "one two", "<p>ONE<br><br> TWO</p>"),
        ("<p><br>one <br>two<br> three<br></p>", "one two three", "<p><br>ONE<br> TWO<br> THREE<br></p>"),
        # scripts and comments show nothing: the words around them stay one, as a browser shows them
        ("<p>Fire<!-- x -->fly <script>go()</script>now</p>", "Firefly now",
         "<p><!-- x -->FIREFLY<script>go()</script> NOW</p>"),
    ],
)  # fmt: skip
def test_an_element_showing_something_between_two_words_ends_the_first(markup, text, output):
    document = Document(markup, "html")
    assert [run.text for run in document.runs] == [text]
    assert word_for_word(document, str.upper) == output


# Random markup: words (entities among them) glued or spaced, inline and block elements with attributes, void
# elements, verbatim content and comments, nested up to 400 deep.
WORD = st.sampled_from(
    ["a", "man", "rides.", "Two", "dogs", "café", "x-ray", "42", "&amp;", "&lt;b&gt;", "&eacute;t&#233;"]
)
TEXT = st.lists(st.tuples(WORD, st.sampled_from(["", " ", "  ", "\n"])), max_size=4).map(
    lambda pairs: "".join(word + space for word, space in pairs)
)
VOIDS = st.sampled_from(["<br>", "<br/>", "<img src='a.png' alt='a dog'>", "<hr>", "<wbr>", "<input value=x>"])
KEPT = st.sampled_from(
    ["<code>f(x) &lt; 2</code>", '<span translate="no">Vaswani GmbH</span>', "<textarea>keep me</textarea>",
     "<script>if (a < b) { go(); }</script>", "<style>p > b { color: red }</style>", "<!-- a comment -->"]
)  # fmt: skip
INLINE_TAGS, BLOCK_TAGS = ["a", "b", "i", "em", "span", "u"], ["div", "p", "section", "blockquote", "h2", "li"]
ATTRIBUTES = st.dictionaries(
    st.sampled_from(["title", "class", "href", "data-x"]), st.text(alphabet="ab \"'<>&=", max_size=5), max_size=2
)


def element(tag: str, attributes: dict, inside: list[str]) -> str:
    written = "".join(f' {name}="{html.escape(value)}"' for name, value in attributes.items())
    return f"<{tag}{written}>{''.join(inside)}</{tag}>"


def nested(tags: list[str], depth: int, inside: str, after: str) -> str:
    chain = [tags[level % len(tags)] for level in range(depth)]
    return "".join(f"<{tag}>" for tag in chain) + inside + "".join(f"</{tag}>" for tag in reversed(chain)) + after


CONTENT = st.recursive(
    st.one_of(TEXT, VOIDS, KEPT),
    lambda inner: st.builds(
        element, st.sampled_from(INLINE_TAGS + BLOCK_TAGS), ATTRIBUTES, st.lists(inner, max_size=3)
    ),
    max_leaves=12,
)
PAGES = st.builds(
    nested, st.lists(st.sampled_from(INLINE_TAGS + BLOCK_TAGS), min_size=1, max_size=3), st.integers(0, 400),
    st.lists(CONTENT, max_size=4).map("".join), st.lists(CONTENT, max_size=3).map("".join),
)  # fmt: skip


@given(page=PAGES)
def test_every_word_of_any_markup_comes_out_translated_and_nothing_else_changes(page):
    """With a stand-in translation (each run upper-cased, word for word), the output read by html.parser holds the
    input's words as html.parser reads them, each translated word upper-cased and the verbatim ones as they were:
    nothing lost, glued or moved, at any depth, whatever the void elements between words."""
    output = word_for_word(Document(page, "html"), str.upper)
    assert Words(output).words() == Words(page).words(str.upper)


@given(line=st.lists(st.one_of(TEXT, VOIDS, KEPT, CONTENT), max_size=6).map("".join))
def test_a_line_of_any_inline_markup_keeps_its_words_and_is_well_formed_xml(line):
    """xml-inline: the output is well-formed (xml.etree reads it) and holds the input's words as the page test
    says."""
    output = word_for_word(Document(line, "xml-inline"), str.upper)
    xml_shape(output)
    assert Words(output).words() == Words(line).words(str.upper)
