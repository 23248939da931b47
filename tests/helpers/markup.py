"""Reading translated markup with a parser other than lxml (the one data/markup.py uses)."""

import xml.etree.ElementTree as ElementTree


def xml_shape(text: str):
    """The fragment as xml.etree reads it (it refuses what is not well-formed): its text with the tags taken out,
    and its elements as (tag, attributes, children) in order."""
    root = ElementTree.fromstring(f"<root>{text}</root>")

    def shape(element):
        return [(child.tag, dict(child.attrib), shape(child)) for child in element]

    return "".join(root.itertext()), shape(root)
