"""Graph exploration for people and agents: what is in the graph, paginated."""

from __future__ import annotations

from typing import Any

from graphrag_pipeline.lib.stores.protocols import GraphStore

ENTITY_ORDERS = ("mention_count", "name")


def graph_stats(graph: GraphStore, top_types: int = 10) -> dict[str, Any]:
    stats = graph.stats()
    return {
        "entities": stats.entity_count,
        "relationships": stats.relationship_count,
        "chunks_with_mentions": stats.chunk_count,
        "top_entity_types": dict(sorted(stats.entity_types.items(), key=lambda kv: (-kv[1], kv[0]))[:top_types]),
        "relationship_types": dict(sorted(stats.relationship_types.items(), key=lambda kv: (-kv[1], kv[0]))),
    }


def list_entities(graph: GraphStore, *, offset: int = 0, limit: int = 50, order_by: str = "mention_count",
                  ) -> dict[str, Any]:
    if order_by not in ENTITY_ORDERS:
        raise ValueError(f"order_by must be one of {ENTITY_ORDERS}")
    _check_page(offset, limit)
    entities = graph.list_entities(offset=offset, limit=limit, order_by=order_by)
    return {
        "offset": offset,
        "limit": limit,
        "order_by": order_by,
        "entities": [
            {"id": e.entity_id, "name": e.name, "type": e.type, "mention_count": e.mention_count,
             "documents": len(e.doc_ids), "description": e.description[:300]}
            for e in entities
        ],
    }


def list_relationships(graph: GraphStore, *, offset: int = 0, limit: int = 50) -> dict[str, Any]:
    _check_page(offset, limit)
    relationships = graph.list_relationships(offset=offset, limit=limit)
    names = graph.get_entities({r.source_id for r in relationships} | {r.target_id for r in relationships})
    return {
        "offset": offset,
        "limit": limit,
        "relationships": [
            {"subject": names[r.source_id].name if r.source_id in names else r.source_id,
             "predicate": r.type,
             "object": names[r.target_id].name if r.target_id in names else r.target_id,
             "original_predicates": list(r.predicates[:5]), "weight": r.weight, "documents": len(r.doc_ids)}
            for r in relationships
        ],
    }


def _check_page(offset: int, limit: int) -> None:
    if offset < 0 or not 1 <= limit <= 1000:
        raise ValueError("offset must be >= 0 and limit between 1 and 1000")
