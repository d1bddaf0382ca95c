"""Graph exploration for people and agents: what is in the graph, paginated, as one caller may see it.

Pages list only the entities and relationships some document the caller may read supports, with the descriptions,
predicates and document counts those documents justify (query.access), so browsing shows no more than a question
would. Offsets count what the caller may see.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from graphrag_pipeline.lib.models import Entity, Relationship
from graphrag_pipeline.lib.state import StateStore
from graphrag_pipeline.lib.stores.protocols import GraphStore
from graphrag_pipeline.query.access import ReaderAccess, reader_access
from graphrag_pipeline.query.engine import with_provenance

ENTITY_ORDERS = ("mention_count", "name")
GRAPH_PAGE = 500  # elements read from the graph store at a time while skipping what the caller may not see


class Index(Protocol):
    """What exploring reads of an open index (``open_index``'s result, or a ``QueryEngine``)."""

    state: StateStore
    graph: GraphStore


def graph_stats(graph: GraphStore, top_types: int = 10) -> dict[str, Any]:
    """Counts only: they name no entity, relationship or document."""
    stats = graph.stats()
    return {
        "entities": stats.entity_count,
        "relationships": stats.relationship_count,
        "chunks_with_mentions": stats.chunk_count,
        "top_entity_types": dict(sorted(stats.entity_types.items(), key=lambda kv: (-kv[1], kv[0]))[:top_types]),
        "relationship_types": dict(sorted(stats.relationship_types.items(), key=lambda kv: (-kv[1], kv[0]))),
    }


def list_entities(index: Index, *, groups: Iterable[str] = (), offset: int = 0, limit: int = 50,
                  order_by: str = "mention_count") -> dict[str, Any]:
    """A page of the entities a caller holding ``groups`` may see."""
    if order_by not in ENTITY_ORDERS:
        raise ValueError(f"order_by must be one of {ENTITY_ORDERS}")
    _check_page(offset, limit)
    access = reader_access(index.state, groups)
    entities = _visible_page(
        lambda start, size: index.graph.list_entities(offset=start, limit=size, order_by=order_by),
        access, offset, limit)
    entities = with_provenance(index.state, entities, access)
    return {
        "offset": offset,
        "limit": limit,
        "order_by": order_by,
        "entities": [
            {"id": e.entity_id, "name": e.name, "type": e.type, "mention_count": e.mention_count,
             "documents": sum(access.can_read(d) for d in e.doc_ids), "description": access.description(e)[:300]}
            for e in entities
        ],
    }


def list_relationships(index: Index, *, groups: Iterable[str] = (), offset: int = 0, limit: int = 50,
                       ) -> dict[str, Any]:
    """A page of the relationships a caller holding ``groups`` may see (both ends of one are then visible too: an
    entity is supported by every document that relates it)."""
    _check_page(offset, limit)
    access = reader_access(index.state, groups)
    relationships = _visible_page(
        lambda start, size: index.graph.list_relationships(offset=start, limit=size), access, offset, limit)
    relationships = with_provenance(index.state, relationships, access)
    names = index.graph.get_entities({r.source_id for r in relationships} | {r.target_id for r in relationships})
    return {
        "offset": offset,
        "limit": limit,
        "relationships": [
            {"subject": names[r.source_id].name if r.source_id in names else r.source_id,
             "predicate": r.type,
             "object": names[r.target_id].name if r.target_id in names else r.target_id,
             "original_predicates": access.predicates(r)[:5], "weight": r.weight,
             "documents": sum(access.can_read(d) for d in r.doc_ids)}
            for r in relationships
        ],
    }


def _visible_page(
    read: Callable[[int, int], list[Entity] | list[Relationship]], access: ReaderAccess, offset: int, limit: int
) -> list:
    """Skip ``offset`` visible elements of the store's order and return the next ``limit``."""
    page = []
    for position, element in enumerate(_visible(read, access)):
        if position >= offset:
            page.append(element)
            if len(page) == limit:
                break
    return page


def _visible(read: Callable[[int, int], list], access: ReaderAccess) -> Iterator:
    start = 0
    while True:
        batch = read(start, GRAPH_PAGE)
        yield from (element for element in batch if access.can_read_any(element.doc_ids))
        if len(batch) < GRAPH_PAGE:
            return
        start += len(batch)


def _check_page(offset: int, limit: int) -> None:
    if offset < 0 or not 1 <= limit <= 1000:
        raise ValueError("offset must be >= 0 and limit between 1 and 1000")
