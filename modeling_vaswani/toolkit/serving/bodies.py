"""The bodies vaswani-serve's API accepts, as pydantic models: strict types, no unknown field. FastAPI parses a
request into them; the translation service (`service.py`) takes them as they are."""

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class Strict(BaseModel):
    """A request's body: no field the API does not know, no value of another type ("4" is no beam count)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class TranslateRequest(Strict):
    """A text or a list of them, and what vaswani-translate's flags set. A text may hold a paragraph: it is split into
    sentences (by the served model's source language) and its translations joined with its own spacing, an empty or
    blank text giving ""; `split_sentences` false translates each text whole, as one sentence."""

    text: Annotated[list[str], Field(min_length=1)] | str
    model: str | None = Field(None, description="a served model's name (default: the first)")
    num_beams: Annotated[int, Field(ge=1, le=32)] | None = None
    paper_decoding: bool = True
    nbest: Annotated[int, Field(ge=1, le=32)] | None = None
    max_new_tokens: Annotated[int, Field(ge=1)] | None = None
    target_prefix: list[str] | str | None = None
    split_sentences: bool = True
    alignments: bool = Field(
        False,
        description="also answer `alignments`: each text's word alignment, [source word, target word] pairs, words "
        "counted from 0 in the text's and the translation's whitespace-separated words (a PyTorch model's attention)",
    )
    constraints: list[list[str]] | None = Field(
        None,
        description="phrases each text's translation must hold: one list a text (docs/decoding.md#terminology-"
        "constraints-phrases-to-avoid-glossaries; the paper's decoding, a PyTorch model)",
    )
    avoid: list[list[str]] | None = Field(None, description="phrases each text's translation must not hold")
    glossary: dict[str, str] | None = Field(
        None, description="source term to target term: a sentence holding the source term holds the target term"
    )
    format: Literal["text", "html", "xml-inline"] = Field(
        "text",
        description="html: each text is an HTML document or fragment, answered with its markup; xml-inline: a line "
        "with inline tags (<b>, <a href>, <br/>), answered as well-formed XML; tags go on the target words the "
        "model's alignment links to theirs (docs/documents.md#markup; a PyTorch model's attention)",
    )


class ScoreRequest(Strict):
    model: str | None = None
    source: Annotated[list[str], Field(min_length=1)]
    target: Annotated[list[str], Field(min_length=1)]


class AttentionRequest(Strict):
    model: str | None = None
    text: Annotated[str, Field(min_length=1)]
    layers: Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)] | None = Field(
        None, description="the layers to show, counting from 0 (default: every layer)"
    )
    heads: Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)] | None = Field(
        None, description="the heads to show, counting from 0 (default: every head)"
    )
