"""Graph exploration for people and agents: what is in the graph, paginated, as one caller may see it.

Pages list only the entities and relationships some document the caller may read supports, with the descriptions,
predicates and document counts those documents justify (query.access), so browsing shows no more than a question
would. Offsets count what the caller may see.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol

from graphrag_pipeline.lib.core.models import Entity, Relationship
from graphrag_pipeline.lib.stores.protocols import GraphStore
from graphrag_pipeline.lib.stores.state.protocol import StateStore
from graphrag_pipeline.query.access import ReaderAccess, reader_access
from graphrag_pipeline.query.engine import with_provenance

ENTITY_ORDERS = ("mention_count", "name")
GRAPH_PAGE = 500  # elements read from the graph store at a time while skipping what the caller may not see


class Index(Protocol):
    """What exploring reads of an open index (``open_index``'s result, or a ``QueryEngine``)."""

    state: StateStore
    graph: GraphStore

    def documents_about(self, entity_id: str) -> dict[str, float]: ...


def _store_stats(graph: GraphStore, top_types: int) -> dict[str, Any]:
    """The store's own counts: what a caller who reads every document sees."""
    stats = graph.stats()
    return {
        "entities": stats.entity_count,
        "relationships": stats.relationship_count,
        "chunks_with_mentions": stats.chunk_count,
        "top_entity_types": dict(sorted(stats.entity_types.items(), key=lambda kv: (-kv[1], kv[0]))[:top_types]),
        "relationship_types": dict(sorted(stats.relationship_types.items(), key=lambda kv: (-kv[1], kv[0]))),
    }


def graph_stats(index: Index, *, groups: Iterable[str] = (), top_types: int = 10) -> dict[str, Any]:
    """Entity and relationship counts by type, of what a caller holding ``groups`` may see: the store's own counts
    for a caller who reads every document, else counted over the entities and relationships some readable document
    supports (a count of what only a restricted document states would tell that it exists)."""
    access = reader_access(index.state, groups)
    if access.reads_everything():
        return _store_stats(index.graph, top_types)
    entity_types: Counter[str] = Counter()
    relationship_types: Counter[str] = Counter()
    chunks: set[str] = set()
    for entity in _visible(lambda start, size: index.graph.list_entities(offset=start, limit=size), access):
        entity_types[entity.type] += 1
        chunks.update(entity.chunk_ids)
    for relationship in _visible(lambda start, size: index.graph.list_relationships(offset=start, limit=size), access):
        relationship_types[relationship.type] += 1
    readable_chunks = {chunk_id for chunk_id, doc_id in index.state.query("SELECT chunk_id, doc_id FROM chunks")
                       if chunk_id in chunks and access.can_read(doc_id)}
    return {
        "entities": sum(entity_types.values()),
        "relationships": sum(relationship_types.values()),
        "chunks_with_mentions": len(readable_chunks),
        "top_entity_types": dict(sorted(entity_types.items(), key=lambda kv: (-kv[1], kv[0]))[:top_types]),
        "relationship_types": dict(sorted(relationship_types.items(), key=lambda kv: (-kv[1], kv[0]))),
    }


def entity_neighbourhood(index: Index, entity_id: str, *, groups: Iterable[str] = (), limit: int = 50,
                         ) -> dict[str, Any] | None:
    """One entity as a caller holding ``groups`` may see it, with up to ``limit`` of its relationships that some
    readable document states (heaviest first), the entities at their other ends and up to ``limit`` readable documents
    about it (most strongly first); None when the caller may not see
    the entity (or it does not exist: the two are told apart by nobody)."""
    _check_page(0, limit)
    access = reader_access(index.state, groups)
    entity = index.graph.get_entities([entity_id]).get(entity_id)
    if entity is None or not access.can_read_any(entity.doc_ids):
        return None
    [entity] = with_provenance(index.state, [entity], access)
    neighbourhood = index.graph.neighbourhoods([entity_id]).get(entity_id)
    relationship_ids = [rid for _, rid, _ in neighbourhood.edges] if neighbourhood else []
    stored = index.graph.get_relationships(relationship_ids)
    readable = [stored[rid] for rid in dict.fromkeys(relationship_ids)
                if rid in stored and access.can_read_any(stored[rid].doc_ids)][:limit]
    readable = with_provenance(index.state, readable, access)
    ends = index.graph.get_entities({r.source_id for r in readable} | {r.target_id for r in readable})
    about = sorted(((strength, doc_id) for doc_id, strength in index.documents_about(entity_id).items()
                    if access.can_read(doc_id)), key=lambda item: (-item[0], item[1]))[:limit]
    titles = index.state.document_titles(doc_id for _, doc_id in about)
    return {
        "entity": _entity_row(entity, access),
        # The documents about it (its title, path or a catalog link names it), the ones the caller may read.
        "documents": [{"doc_id": doc_id, "title": titles.get(doc_id, ""), "about": round(strength, 3)}
                      for strength, doc_id in about],
        "relationships": [
            _relationship_row(r, ends, access) for r in readable if r.source_id in ends and r.target_id in ends
        ],
    }


def _relationship_row(relationship: Relationship, names: Mapping[str, Entity], access: ReaderAccess) -> dict[str, Any]:
    """A relationship in the shape of a query's facts (``Fact``: source -[type]-> target, predicates), with its id,
    its ends' ids and how many documents the caller may read state it."""
    def name(entity_id: str) -> str:
        return names[entity_id].name if entity_id in names else entity_id

    return {"id": relationship.relationship_id, "source": name(relationship.source_id),
            "source_id": relationship.source_id, "type": relationship.type, "target": name(relationship.target_id),
            "target_id": relationship.target_id, "predicates": access.predicates(relationship)[:5],
            "weight": relationship.weight, "documents": sum(access.can_read(d) for d in relationship.doc_ids)}


def _entity_row(entity: Entity, access: ReaderAccess) -> dict[str, Any]:
    return {"id": entity.entity_id, "name": entity.name, "type": entity.type, "mention_count": entity.mention_count,
            "documents": sum(access.can_read(d) for d in entity.doc_ids),
            "description": access.description(entity)[:300]}


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
        "entities": [_entity_row(e, access) for e in entities],
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
            _relationship_row(r, names, access) for r in relationships
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
