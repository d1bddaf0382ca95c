"""What "this index equals a from-scratch build" means, in one place: whole records, not ids.

`index_snapshot` reads everything an index derived from its sources — documents, chunks, merged elements, the graph
store's entities and relationships with every field (descriptions, weights, mention counts, provenance), chunk
mentions, communities, summaries, quarantine, the stages' bookkeeping, and every published vector point with its
payload and vector — and `assert_same_index` compares two snapshots, naming the first records that differ. Vectors
are compared with a tolerance: the same text embedded in another batch may differ in the last bits.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core.config import PipelineSettings
from graphrag_pipeline.lib.stores.state.sql import COMMUNITY_PAYLOADS, COMMUNITY_SUMMARY_PAYLOADS

VECTOR_TOLERANCE = 1e-4


def index_snapshot(settings: PipelineSettings) -> dict[str, Any]:
    with Workspace(settings) as ws:
        state, graph, vectors = ws.state, ws.graph_store, ws.published_vectors
        entity_ids = graph.all_entity_ids()
        bookkeeping = {
            kind: ws.state.element_hashes(kind, table="synced") for kind in ("entity", "relationship", "mentions")
        }
        snapshot = {
            "documents": {d.doc_id: dataclasses.astuple(d) for d in state.documents()},
            "access": state.restricted_documents(),
            "chunks": {c.chunk_id: dataclasses.astuple(c) for c in state.chunks()},
            "elements": {kind: state.element_payloads(kind) for kind in ("entity", "relationship")},
            "entities": {eid: _record(e) for eid, e in graph.get_entities(entity_ids).items()},
            "relationships": {
                rid: _record(r) for rid, r in graph.get_relationships(graph.all_relationship_ids()).items()
            },
            "mentions": graph.chunks_of_entities(entity_ids),
            "communities": state.payloads(COMMUNITY_PAYLOADS),
            "summaries": state.payloads(COMMUNITY_SUMMARY_PAYLOADS),
            "quarantine": {(q.stage, q.item_id): q.reason for q in state.quarantined()},
            "synced": bookkeeping,
            "indexed_points": {c: state.indexed_points(c) for c in vectors.collections()},
            "vectors": {
                c: {pid: (p.payload, p.vector) for pid, p in vectors.points(c).items()} for c in vectors.collections()
            },
        }
    return snapshot


def _record(element) -> dict[str, Any]:
    """A graph store's record as it holds it (stores keep the merged description only, not its parts)."""
    record = dataclasses.asdict(element)
    for kept_elsewhere in ("description_parts", "predicate_doc_ids"):
        record.pop(kept_elsewhere, None)
    return record


def assert_same_index(actual: dict[str, Any], expected: dict[str, Any]) -> None:
    assert actual.keys() == expected.keys()
    for section in expected:
        if section == "vectors":
            continue
        assert actual[section] == expected[section], f"{section} differ: {_differences(actual[section], expected[section])}"
    for collection, points in expected["vectors"].items():
        got = actual["vectors"].get(collection, {})
        # Ids only: the values hold vectors, which ``_differences`` cannot compare (worked out only on a failure).
        assert got.keys() == points.keys(), \
            f"vector collection {collection!r} ids differ: {_differences(dict.fromkeys(got), dict.fromkeys(points))}"
        for pid, (payload, vector) in points.items():
            assert got[pid][0] == payload, f"{collection} point {pid} payload {got[pid][0]} != {payload}"
            assert np.allclose(got[pid][1], vector, atol=VECTOR_TOLERANCE), f"{collection} point {pid}: other vector"
    assert actual["vectors"].keys() == expected["vectors"].keys()


def _differences(actual: Any, expected: Any, shown: int = 3) -> str:
    if isinstance(actual, tuple) and isinstance(expected, tuple) and len(actual) == len(expected):
        return "; ".join(f"field {i}: {_differences(a, e)}" for i, (a, e) in enumerate(zip(actual, expected)) if a != e)
    if not (isinstance(actual, dict) and isinstance(expected, dict)):
        return f"{actual!r:.300} != {expected!r:.300}"
    only_actual = sorted(set(actual) - set(expected), key=str)[:shown]
    only_expected = sorted(set(expected) - set(actual), key=str)[:shown]
    changed = [k for k in sorted(set(actual) & set(expected), key=str) if actual[k] != expected[k]][:shown]
    return (f"only here {only_actual}; only in the expected {only_expected}; "
            + "; ".join(f"{k}: {_differences(actual[k], expected[k])}" for k in changed))
