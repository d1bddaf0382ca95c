"""Records that flow between pipeline stages and stores.

Plain frozen dataclasses: cheap to create by the hundred thousand, trivially serializable with ``to_dict``.
Configuration lives in pydantic models (``lib.config``); these are data.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field, fields
from typing import Any

# Where sources put a document's last-modified time (their own clock), ISO 8601: folders the file's ("modified"),
# Confluence the page version's ("last_modified").
LAST_MODIFIED_KEYS = ("last_modified", "modified")


@dataclass(frozen=True, slots=True)
class Document:
    doc_id: str  # stable identity: source name + path/id, never the content
    source: str  # name of the configured source this came from
    uri: str  # path or URL a reader can follow back to the original
    title: str
    text: str
    content_hash: str
    metadata: dict[str, Any] = field(default_factory=dict)  # front matter, eval-set fields, labels …

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def last_modified(self) -> dt.datetime | None:
        """When the source last changed this document, in UTC, if the source says (None otherwise, or when the time
        it gave does not parse)."""
        for key in LAST_MODIFIED_KEYS:
            value = self.metadata.get(key)
            if isinstance(value, str):
                try:
                    stamp = dt.datetime.fromisoformat(value)
                except ValueError:
                    continue
                return (stamp if stamp.tzinfo else stamp.replace(tzinfo=dt.timezone.utc)).astimezone(dt.timezone.utc)
        return None


@dataclass(frozen=True, slots=True)
class ChunkText:
    """A chunk with its document, as a graph database's users read it (the lexical graph)."""

    chunk_id: str
    doc_id: str
    position: int
    text: str
    title: str  # the document's
    uri: str
    access_groups: tuple[str, ...] = ()  # the groups that may read the document (none: everyone)


@dataclass(frozen=True, slots=True)
class Chunk:
    chunk_id: str  # content-derived (document id + text)
    doc_id: str
    position: int  # order within the document
    text: str
    token_count: int
    start_char: int
    end_char: int
    headings: tuple[str, ...] = ()  # heading path the chunk sits under (recursive strategy)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class EntityMention:
    """An entity as one extractor saw it in one chunk, before merging."""

    name: str
    type: str
    description: str = ""
    chunk_id: str = ""
    spotter: str = ""  # which mechanism found it: dictionary, pattern, ner, title, llm, precomputed


@dataclass(frozen=True, slots=True)
class RelationMention:
    """A relationship as one extractor saw it in one chunk, before merging."""

    source: str  # entity name as written
    target: str
    type: str  # ontology relationship type
    predicate: str = ""  # the original wording when it differs from the type (kept for RELATED_TO fallbacks)
    description: str = ""
    weight: float = 1.0
    chunk_id: str = ""


@dataclass(frozen=True, slots=True)
class ChunkExtraction:
    chunk_id: str
    entities: tuple[EntityMention, ...]
    relations: tuple[RelationMention, ...]


@dataclass(frozen=True, slots=True)
class Entity:
    """A merged graph node: one real-world thing, with provenance back to every chunk and document."""

    entity_id: str
    name: str  # display name: the most frequent surface form
    canonical: str  # normalized key the id is derived from
    type: str
    description: str
    mention_count: int
    chunk_ids: tuple[str, ...]
    doc_ids: tuple[str, ...]
    aliases: tuple[str, ...] = ()
    # Each part of the description with the documents that state it, so a reader is shown only the parts some
    # document it may read states (query.access). Empty when unknown (the graph stores keep the merged text only).
    description_parts: tuple[tuple[str, tuple[str, ...]], ...] = ()
    title: str = ""  # a catalog's display name of it ("Checkout Service" for checkoutservice); also among the aliases

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class EntityNames:
    """What a question is linked to an entity by: its names, and how many chunks mention it (a query process reads
    these for every entity when it starts, and nothing else of them)."""

    entity_id: str
    name: str
    canonical: str
    aliases: tuple[str, ...]
    mention_count: int


@dataclass(frozen=True, slots=True)
class Relationship:
    relationship_id: str
    source_id: str
    target_id: str
    type: str
    description: str
    weight: float
    chunk_ids: tuple[str, ...]
    doc_ids: tuple[str, ...]
    predicates: tuple[str, ...] = ()
    description_parts: tuple[tuple[str, tuple[str, ...]], ...] = ()  # as Entity.description_parts
    predicate_doc_ids: tuple[tuple[str, ...], ...] = ()  # the documents phrasing each predicate, in their order

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Community:
    community_id: str  # content-derived from level + sorted member ids: stable while membership is stable
    level: int
    parent_id: str | None
    entity_ids: tuple[str, ...]
    child_ids: tuple[str, ...] = ()
    # A leaf's: the hash of every edge touching a member, which tells an incremental run it may keep the leaf.
    edges_hash: str = ""

    def to_dict(self) -> dict[str, Any]:
        return _fields_of(self)


@dataclass(frozen=True, slots=True)
class CommunitySummary:
    community_id: str
    level: int
    title: str
    summary: str
    top_entities: tuple[str, ...]
    content_hash: str
    chunk_ids: tuple[str, ...] = ()
    rating: float | None = None  # importance 0-10, from an LLM community report (extractive summaries have none)

    def to_dict(self) -> dict[str, Any]:
        return _fields_of(self)


def _fields_of(record: Any) -> dict[str, Any]:
    """``asdict`` without its deep copy, for records whose fields are strings, numbers and tuples of strings, which
    nothing can change: ``asdict`` copies each string of a tuple, and a community lists up to every entity of the
    graph."""
    return {f.name: getattr(record, f.name) for f in fields(record)}


@dataclass(frozen=True, slots=True)
class VectorPoint:
    point_id: str  # the pipeline's own id (chunk id, entity id, community id)
    vector: tuple[float, ...] | Any  # sequence of floats or a 1-D numpy array
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class VectorHit:
    point_id: str
    score: float
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Quarantined:
    """Input a stage could not process, kept with the reason so nothing is silently lost."""

    stage: str
    item_id: str
    reason: str
    raw: str = ""
