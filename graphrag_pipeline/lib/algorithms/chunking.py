"""Token-aware chunking of documents.

A document is tokenized once; every chunk is a run of consecutive tokens, so its text is the exact slice
``doc.text[start_char:end_char]`` and its ``token_count`` is measured in the tokenizer the caller passes in (the
embedder's, in the pipeline, so that no chunk is silently truncated at embedding time).

Strategies:

* ``fixed``: windows of ``size`` tokens, consecutive windows sharing ``overlap`` tokens.
* ``recursive``: markdown sections first (small consecutive sections are merged up to ``size``; a section never
  shares a chunk with a neighbour that does not fit), and sections longer than ``size`` are cut at the best
  boundary available: a paragraph break, else a sentence or list item, else a line break, else between words, else
  exactly at ``size`` tokens. Consecutive pieces of one split section share about ``overlap`` tokens, starting at a
  sentence boundary where there is one.

Long inputs cost linear time and memory: the text is tokenized in windows of at most ``TOKENIZE_WINDOW`` characters
cut at whitespace (a 5 MB line is many calls, never one tokenizer encoding of the whole), and a token longer than
``LONGEST_TOKEN`` characters (a base64 blob the tokenizer calls one unknown word) is cut into pieces of that length,
so no chunk grows beyond ``size`` pieces of bounded text. ``max_chunks_per_document`` stops a document that would
need more chunks (``ChunkLimitExceeded``), before any chunk is built.

Neither strategy cuts inside a word when it can avoid it (subword tokenizers split "NodeRAIDDegraded" into several
tokens), so re-tokenizing a chunk's text gives the tokens it was measured with. Only ATX headings (``# Title``)
outside fenced code blocks count as section boundaries; HTML sources are converted to that form by the reader.

``chunk_document(doc, **settings.chunking.model_dump(), tokenizer=...)`` applies a ``ChunkingConfig``.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from graphrag_pipeline.lib.core.errors import GraphRAGError
from graphrag_pipeline.lib.core.ids import short_id
from graphrag_pipeline.lib.core.models import Chunk, Document

Strategy = Literal["recursive", "fixed"]
Span = tuple[int, int]


@runtime_checkable
class Tokenizer(Protocol):
    """Also ``encode_offsets_batch(texts) -> list[list[Span]]``, where a tokenizer has one (``document_token_spans``
    gives it every window of a batch of documents at once)."""

    def encode_offsets(self, text: str) -> list[Span]:
        """Character spans ``(start, end)`` of the tokens of ``text``, in order and not overlapping."""
        ...


class WordTokenizer:
    """Words and single punctuation marks: dependency-free and predictable, the default and the tests' tokenizer."""

    _TOKEN = re.compile(r"\w+|[^\w\s]")

    def encode_offsets(self, text: str) -> list[Span]:
        return [match.span() for match in self._TOKEN.finditer(text)]


class HuggingFaceTokenizer:
    """Adapter for a HuggingFace *fast* tokenizer (the only kind that reports character offsets)."""

    def __init__(self, tokenizer: Any) -> None:
        if not getattr(tokenizer, "is_fast", False):
            raise ValueError("a fast (Rust-backed) HuggingFace tokenizer is needed for character offsets")
        self._tokenizer = tokenizer

    def encode_offsets(self, text: str) -> list[Span]:
        # verbose=False: documents are longer than the model's input on purpose, the warning about it is noise.
        encoding = self._tokenizer(text, return_offsets_mapping=True, add_special_tokens=False, verbose=False)
        return token_spans(encoding["offset_mapping"])


def token_spans(offsets: Iterable[tuple[int, int]]) -> list[Span]:
    """A tokenizer's character offsets as spans to cut text at: empty ones dropped, overlapping ones joined."""
    spans: list[Span] = []
    for start, end in offsets:
        if end <= start:
            continue
        if spans and start < spans[-1][1]:
            # Byte-level fallback splits one character (Hangul, emoji) into several tokens with the same span; they
            # are one unit for cutting text. Such text is slightly undercounted, never cut mid-character.
            spans[-1] = (spans[-1][0], max(spans[-1][1], end))
            continue
        spans.append((start, end))
    return spans


class ChunkLimitExceeded(GraphRAGError, ValueError):
    """A document needs more chunks than ``max_chunks_per_document`` allows."""

    kind = "invalid"


TOKENIZE_WINDOW = 16_384  # characters given to the tokenizer at once
LONGEST_TOKEN = 100  # characters; WordPiece calls any longer word one unknown token anyway


def chunk_document(
    doc: Document,
    *,
    strategy: Strategy = "recursive",
    size: int,
    overlap: int,
    max_chunks_per_document: int | None = None,
    tokenizer: Tokenizer | None = None,
    spans: list[Span] | None = None,
) -> list[Chunk]:
    """Chunks of ``doc`` in order; an empty or whitespace-only document has none. Raises ``ChunkLimitExceeded`` when
    it needs more than ``max_chunks_per_document`` (None: no limit). ``spans``: its tokens, when
    ``document_token_spans`` has already found them with ``tokenizer``."""
    if strategy not in ("recursive", "fixed"):
        raise ValueError(f"unknown chunking strategy {strategy!r}; expected 'recursive' or 'fixed'")
    if size < 1:
        raise ValueError(f"chunk size must be positive, got {size}")
    if not 0 <= overlap < size:
        raise ValueError(f"chunk overlap must be at least 0 and smaller than the size ({size}), got {overlap}")
    text = doc.text
    if not text.strip():
        return []
    if spans is None:
        spans = document_token_spans([text], tokenizer if tokenizer is not None else WordTokenizer(), [doc.doc_id])[0]
    if not spans:
        return []
    if max_chunks_per_document is not None and len(spans) > max_chunks_per_document * size:
        # Every chunk holds at most ``size`` tokens: no need to lay the document out to know it is too long.
        raise ChunkLimitExceeded(f"over max_chunks_per_document: {len(spans)} tokens need more than "
                                 f"{max_chunks_per_document} chunks of {size} ({doc.doc_id})")
    layout = _Layout(text, spans)
    if strategy == "fixed":
        word_level = (layout.word_cuts,)
        ranges = _windows(0, len(spans), size, overlap, cut_levels=word_level, resume_levels=word_level)
    else:
        ranges = _recursive_ranges(layout, size, overlap)
    if max_chunks_per_document is not None and len(ranges) > max_chunks_per_document:
        raise ChunkLimitExceeded(f"over max_chunks_per_document: {len(ranges)} chunks, more than "
                                 f"{max_chunks_per_document} ({doc.doc_id})")
    return _build_chunks(doc, layout, ranges)


def document_token_spans(texts: Sequence[str], tokenizer: Tokenizer, doc_ids: Sequence[str]) -> list[list[Span]]:
    """The tokens of each text, tokenized one window at a time (each ending at whitespace where the window has any,
    so no word is split between two calls), with tokens longer than ``LONGEST_TOKEN`` characters cut into pieces.
    A tokenizer with ``encode_offsets_batch`` gets the windows of all the texts at once: a fast tokenizer spreads a
    batch over the cores (musique-100's 1,890 documents took 0.21-0.25 s instead of 0.40-0.42 s on two)."""
    windows = [(index, start, end) for index, text in enumerate(texts) for start, end in _tokenize_windows(text)]
    pieces = [texts[index][start:end] for index, start, end in windows]
    batch = getattr(tokenizer, "encode_offsets_batch", None)
    encoded = batch(pieces) if batch is not None else [tokenizer.encode_offsets(piece) for piece in pieces]
    spans: list[list[Span]] = [[] for _ in texts]
    for (index, start, end), offsets in zip(windows, encoded):
        _add_checked_spans(spans[index], offsets, start, end - start, doc_ids[index])
    return spans


def _tokenize_windows(text: str) -> Iterator[Span]:
    """The stretches of ``text`` a tokenizer is given, in order (see ``document_token_spans``)."""
    start = 0
    while start < len(text):
        end = min(start + TOKENIZE_WINDOW, len(text))
        if end < len(text):
            floor = start + TOKENIZE_WINDOW // 2
            space = max(text.rfind(" ", floor, end), text.rfind("\n", floor, end), text.rfind("\t", floor, end))
            if space >= 0:
                end = space + 1
        yield start, end
        start = end


# ------------------------------------------------------------------------------------------------------- structure


@dataclass(frozen=True, slots=True)
class _Section:
    start: int  # character offset of the heading line (0 for text before the first heading)
    body_start: int  # character offset just after the heading line
    headings: tuple[str, ...]


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n\s*")
_SENTENCE_BREAK = re.compile(r"[.!?][\"')\]]*\s+|\n(?=[ \t]*(?:[-*+]|\d+[.)])[ \t])")
_LINE_BREAK = re.compile(r"\n\s*")


def _sections(text: str) -> list[_Section]:
    """Sections in order, each starting at a heading line, plus a leading heading-less section."""
    sections = [_Section(0, 0, ())]
    stack: list[tuple[int, str]] = []
    fence: str | None = None
    offset = 0
    for line in text.splitlines(keepends=True):
        start, offset = offset, offset + len(line)
        content = line.rstrip("\r\n")
        opening = _FENCE.match(content)
        if opening is not None:
            marker = opening.group(1)
            if fence is None:
                fence = marker
            elif marker[0] == fence[0] and len(marker) >= len(fence) and not content.strip().strip(marker[0]):
                fence = None
            continue
        heading = _HEADING.match(content) if fence is None else None
        if heading is None:
            continue
        level = len(heading.group(1))
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, (heading.group(2) or "").strip()))
        sections.append(_Section(start, offset, tuple(title for _, title in stack)))
    return sections


class _Layout:
    """A document's tokens and the token indices at which it may be cut, by preference."""

    def __init__(self, text: str, spans: list[Span]) -> None:
        self.text = text
        self.spans = spans
        self.starts = [start for start, _ in spans]
        self.sections = _sections(text)
        self.section_starts = [section.start for section in self.sections]
        self.word_cuts = self._word_cuts()
        self.paragraph_cuts = self._cuts(_PARAGRAPH_BREAK)
        # Each finer level includes the coarser ones, so "the best cut at this level" considers all of them.
        self.sentence_cuts = sorted(set(self.paragraph_cuts) | set(self._cuts(_SENTENCE_BREAK)))
        self.line_cuts = sorted(set(self.sentence_cuts) | set(self._cuts(_LINE_BREAK)))

    def token_index(self, char_offset: int) -> int:
        """Index of the first token starting at or after ``char_offset``."""
        return bisect_left(self.starts, char_offset)

    def _cuts(self, pattern: re.Pattern[str]) -> list[int]:
        return sorted({self.token_index(match.end()) for match in pattern.finditer(self.text)} - {0, len(self.spans)})

    def _word_cuts(self) -> list[int]:
        """Indices i such that cutting before token i does not split a word into subword tokens."""
        text, spans = self.text, self.spans
        return [
            index
            for index in range(1, len(spans))
            if spans[index][0] > spans[index - 1][1]
            or not (text[spans[index][0] - 1].isalnum() and text[spans[index][0]].isalnum())
        ]

    def headings(self, start_char: int, end_char: int) -> tuple[str, ...]:
        """Heading path shared by every section the character range touches."""
        first = bisect_right(self.section_starts, start_char) - 1
        last = bisect_left(self.section_starts, end_char) - 1
        common = self.sections[first].headings
        for section in self.sections[first + 1 : last + 1]:
            common = _common_prefix(common, section.headings)
        return common


def _common_prefix(left: tuple[str, ...], right: tuple[str, ...]) -> tuple[str, ...]:
    length = 0
    for a, b in zip(left, right):
        if a != b:
            break
        length += 1
    return left[:length]


# ------------------------------------------------------------------------------------------------------ splitting


def _recursive_ranges(layout: _Layout, size: int, overlap: int) -> list[Span]:
    """Token ranges: sections merged while they fit, oversized sections split at the best boundaries."""
    token_count = len(layout.spans)
    groups: list[list[int]] = []  # [first token, end token, has body]
    for index, section in enumerate(layout.sections):
        first = layout.token_index(section.start)
        end = (
            layout.token_index(layout.sections[index + 1].start) if index + 1 < len(layout.sections) else token_count
        )
        if first == end:
            continue
        has_body = layout.token_index(section.body_start) < end or not section.headings
        previous = groups[-1] if groups else None
        # A heading directly followed by a sub-heading always joins what follows: alone it would be a useless chunk.
        if previous is not None and (not previous[2] or end - previous[0] <= size):
            previous[1] = end
            previous[2] = previous[2] or has_body
        else:
            groups.append([first, end, has_body])

    levels = (layout.paragraph_cuts, layout.sentence_cuts, layout.line_cuts, layout.word_cuts)
    ranges: list[Span] = []
    for first, end, _ in groups:
        ranges.extend(_windows(first, end, size, overlap, cut_levels=levels, resume_levels=levels[1:]))
    return ranges


def _windows(
    first: int,
    end: int,
    size: int,
    overlap: int,
    *,
    cut_levels: Sequence[list[int]],
    resume_levels: Sequence[list[int]],
) -> list[Span]:
    """Split tokens ``[first, end)`` into pieces of at most ``size`` tokens.

    Each piece ends at the last boundary of the most preferred level that keeps it at least half full (or more than
    ``overlap`` tokens long, which guarantees progress); the next piece starts at the earliest boundary of a
    ``resume_levels`` level within the last ``overlap`` tokens, or exactly ``overlap`` tokens back.
    """
    ranges: list[Span] = []
    start = first
    while end - start > size:
        limit = start + size
        floor = start + max(overlap, size // 2)
        stop = _last_cut(cut_levels, floor, limit)
        stop = limit if stop is None else stop
        ranges.append((start, stop))
        if overlap == 0:
            start = stop
        else:
            resume = _first_cut(resume_levels, stop - overlap, stop)
            start = stop - overlap if resume is None else resume
    ranges.append((start, end))
    return ranges


def _last_cut(levels: Sequence[list[int]], above: int, at_most: int) -> int | None:
    for cuts in levels:
        index = bisect_right(cuts, at_most) - 1
        if index >= 0 and cuts[index] > above:
            return cuts[index]
    return None


def _first_cut(levels: Sequence[list[int]], at_least: int, below: int) -> int | None:
    for cuts in levels:
        index = bisect_left(cuts, at_least)
        if index < len(cuts) and cuts[index] < below:
            return cuts[index]
    return None


# --------------------------------------------------------------------------------------------------------- output


def _add_checked_spans(checked: list[Span], spans: Sequence[Span], offset: int, text_length: int, doc_id: str) -> None:
    """Append the tokenizer's spans of a window starting at ``offset``, shifted to document offsets, without zero-width
    ones (special tokens carry no text), verified to tile the window and cut to ``LONGEST_TOKEN`` characters."""
    previous_end = 0
    for raw_start, raw_end in spans:
        start, end = int(raw_start), int(raw_end)
        if start == end:
            continue
        if not (previous_end <= start < end <= text_length):
            raise ValueError(
                f"{doc_id}: tokenizer returned span ({start}, {end}) out of order or outside the text; "
                "token spans must be increasing, non-overlapping character offsets"
            )
        previous_end = end
        start, end = start + offset, end + offset
        while end - start > LONGEST_TOKEN:
            checked.append((start, start + LONGEST_TOKEN))
            start += LONGEST_TOKEN
        checked.append((start, end))


def _build_chunks(doc: Document, layout: _Layout, ranges: list[Span]) -> list[Chunk]:
    chunks: list[Chunk] = []
    seen: Counter[str] = Counter()
    for position, (first, end) in enumerate(ranges):
        start_char, end_char = layout.spans[first][0], layout.spans[end - 1][1]
        text = doc.text[start_char:end_char]
        # Identical passages (boilerplate, repeated notes) in one document still need distinct ids.
        occurrence = seen[text]
        seen[text] += 1
        chunks.append(
            Chunk(
                chunk_id=short_id("chunk", doc.doc_id, text, str(occurrence)),
                doc_id=doc.doc_id,
                position=position,
                text=text,
                token_count=end - first,
                start_char=start_char,
                end_char=end_char,
                headings=layout.headings(start_char, end_char),
            )
        )
    return chunks
