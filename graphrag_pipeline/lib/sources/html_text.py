"""HTML reduced to readable text: one blank-line separated block per paragraph, headings kept as Markdown ``#``
lines so the recursive chunker still sees the structure. Folder sources read ``.html`` files with it, the Confluence
source its pages' storage-format bodies."""

from __future__ import annotations

import re

from bs4 import BeautifulSoup, NavigableString, Tag
from bs4.element import PreformattedString

_DROPPED_TAGS = frozenset({"script", "style", "noscript", "template", "head", "svg", "iframe", "object"})
_HEADING_TAGS = {f"h{level}": level for level in range(1, 7)}
_BLOCK_TAGS = frozenset(
    {
        "address", "article", "aside", "blockquote", "body", "dd", "details", "div", "dl", "dt", "fieldset",
        "figcaption", "figure", "footer", "form", "header", "hr", "html", "main", "nav", "ol", "p", "section",
        "summary", "table", "tbody", "thead", "tfoot", "tr", "ul",
    }
)  # fmt: skip
_SPACES = re.compile(r"[ \t\n\r\f\v]+")


def html_to_text(html: str) -> tuple[str, str]:
    """(title, text): readable text with one block per paragraph and headings as markdown ``#`` lines."""
    soup = BeautifulSoup(html, "html.parser")
    title = ""
    if soup.title is not None:
        title = _collapse(soup.title.get_text(" "))
    if not title and (h1 := soup.find("h1")) is not None:
        title = _collapse(h1.get_text(" "))
    writer = _BlockWriter()
    writer.walk(soup)
    return title, writer.text()


def _collapse(text: str) -> str:
    return _SPACES.sub(" ", text).strip()


class _BlockWriter:
    """Flattens an HTML tree into blank-line separated blocks, which the chunker treats as paragraphs."""

    def __init__(self) -> None:
        self._blocks: list[str] = []
        self._line: list[str] = []
        self._lines: list[str] = []

    def walk(self, node: Tag) -> None:
        for child in node.children:
            if isinstance(child, PreformattedString):  # comments, doctype, CDATA, processing instructions
                continue
            if isinstance(child, NavigableString):
                self._line.append(str(child))
            elif isinstance(child, Tag):
                self._tag(child)

    def _tag(self, tag: Tag) -> None:
        name = tag.name.lower()
        if name in _DROPPED_TAGS:
            return
        if name == "br":
            self._end_line()
        elif name in _HEADING_TAGS:
            self._end_block()
            heading = _collapse(tag.get_text(" "))
            if heading:
                self._blocks.append(f"{'#' * _HEADING_TAGS[name]} {heading}")
        elif name == "pre":
            self._end_block()
            code = tag.get_text().strip("\n")
            if code.strip():
                self._blocks.append(code)
        elif name == "li":
            # Items are lines of one block, so a whole list stays one paragraph for the chunker.
            self._end_line()
            self._line.append("- ")
            self.walk(tag)
            self._end_line()
        elif name in _BLOCK_TAGS:
            self._end_block()
            self.walk(tag)
            self._end_block()
        elif name in {"td", "th"}:
            self.walk(tag)
            self._line.append(" ")
        else:
            self.walk(tag)

    def _end_line(self) -> None:
        line = _collapse("".join(self._line))
        self._line = []
        if line and line != "-":
            self._lines.append(line)

    def _end_block(self) -> None:
        self._end_line()
        if self._lines:
            self._blocks.append("\n".join(self._lines))
        self._lines = []

    def text(self) -> str:
        self._end_block()
        return "\n\n".join(self._blocks)
