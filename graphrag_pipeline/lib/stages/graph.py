"""Stage 6, `graph`: the merged elements in the graph store, and entity names in the `entities` collection."""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Sequence

from graphrag_pipeline.lib.algorithms.merge import entity_from_payload, relationship_from_payload
from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core.faults import crash_point
from graphrag_pipeline.lib.core.ids import short_hash
from graphrag_pipeline.lib.core.models import ChunkText, Entity, Relationship
from graphrag_pipeline.lib.stages.communities import record_touched_entities
from graphrag_pipeline.lib.stages.incremental import Changes
from graphrag_pipeline.lib.stages.report import StageReport, accounted
from graphrag_pipeline.lib.stages.vectors import GLOBAL_SHARD, reconcile_collection, sync_points
from graphrag_pipeline.lib.stores.protocols import ENTITIES, GraphStore
from graphrag_pipeline.lib.stores.state.sql import UNSYNCED

# The graph stage's mark once a sync has finished. It is forgotten before a sync's first write, so the sync after a
# killed one is whole: only a finished sync leaves the store, its mentions and the entity points all equal to what the
# bookkeeping says, which is what lets the next one touch only the changed elements' neighbourhood.
GRAPH_SYNCED = "synced"


@accounted
def sync_graph(ws: Workspace) -> StageReport:
    """Write changed entities, relationships and chunk mentions to the graph store, delete what disappeared, and
    index entity names for question linking.

    After a finished sync only the changed elements are read, and only the chunks they are or were mentioned in get
    their mentions written again; otherwise (a first build, a killed sync, a store that lost or gained entries)
    every element is. Crash-safe: an element's bookkeeping is marked ``UNSYNCED`` before it is written and gets its
    hash only after, and a deleted element leaves the bookkeeping only after the store deleted it, so a rerun after a
    kill anywhere redoes exactly the unfinished writes. An element with no bookkeeping yet is unsynced as it is (a
    first build's tens of thousands of marks each cost a write): were it written and gone from the merge before the
    next sync, the store would hold more than the bookkeeping, which that sync's reconciliation finds by count. A
    store that lost or gained entries behind the bookkeeping's back (a deleted or replaced graph file) is reconciled
    first, by counts and then by ids."""
    report = StageReport("graph")
    graph = ws.graph_store
    with report.timed("diff"):
        current = {kind: ws.state.element_hashes(kind) for kind in ("entity", "relationship")}
        synced = {kind: ws.state.element_hashes(kind, table="synced") for kind in ("entity", "relationship", "mentions")}
    with report.timed("verify"):
        store_differed = _reconcile_with_store(ws, synced, report)
        store_differed |= bool(reconcile_collection(ws, ENTITIES, report))  # lost points: only a whole sync rewrites them
    changes = {kind: Changes.between(current[kind], synced[kind]) for kind in current}
    changed = {kind: c.changed for kind, c in changes.items()}
    removed = {kind: c.removed for kind, c in changes.items()}
    whole = store_differed or ws.state.stage_mark(report.stage) != GRAPH_SYNCED
    report.counts["whole_sync"] = int(whole)
    if whole or any(changes.values()):
        _write(ws, changed, removed, current, synced, whole, report)
    stats = graph.stats()
    report.counts.update(
        entities=stats.entity_count,
        relationships=stats.relationship_count,
        entities_written=len(changed["entity"]),
        relationships_written=len(changed["relationship"]),
        entities_deleted=len(removed["entity"]),
        relationships_deleted=len(removed["relationship"]),
    )
    report.sample = [{"type": t, "entities": n} for t, n in sorted(stats.entity_types.items(), key=lambda kv: -kv[1])]
    return report


def _write(
    ws: Workspace,
    changed: dict[str, list[str]],
    removed: dict[str, list[str]],
    current: dict[str, dict[str, str]],
    synced: dict[str, dict[str, str]],
    whole: bool,
    report: StageReport,
) -> None:
    graph = ws.graph_store
    with report.timed("read"):
        entities = {eid: entity_from_payload(p, provenance=False)
                    for eid, p in ws.state.element_payloads("entity", None if whole else changed["entity"]).items()}
        if whole:
            mentions, scope = _mentions_of(entities.values()), None
        else:
            mentions, scope = _mentions_after(graph, entities, removed["entity"])
        # An incremental sync reads its changed relationships once: for their ends here, and to write them below.
        relationships = None if whole else _relationships(ws, changed["relationship"])
        record_touched_entities(ws, None if whole else _touched_entities(graph, relationships.values(), removed))
    ws.state.record_stage_mark(report.stage, None)
    progress = ws.progress(report.stage, "write elements", len(changed["entity"]) + len(changed["relationship"]))
    with report.timed("write"):
        for kind in ("entity", "relationship"):
            ws.state.record_synced(kind, {e: UNSYNCED for e in changed[kind] if e in synced[kind]}, [])
        crash_point("graph:intent-recorded")
        if removed["relationship"]:
            graph.delete_relationships(removed["relationship"])
            crash_point("graph:relationships-deleted")
            ws.state.record_synced("relationship", {}, removed["relationship"])
        if removed["entity"]:
            graph.delete_entities(removed["entity"])
            crash_point("graph:entities-deleted")
            ws.state.record_synced("entity", {}, removed["entity"])
        for start in range(0, len(changed["entity"]), 5000):
            ids = changed["entity"][start : start + 5000]
            graph.upsert_entities([entities[eid] for eid in ids])
            crash_point("graph:entities-written")
            ws.state.record_synced("entity", {e: current["entity"][e] for e in ids}, [])
            progress.advance(len(ids))
        for start in range(0, len(changed["relationship"]), 5000):
            ids = changed["relationship"][start : start + 5000]
            batch = relationships if relationships is not None else _relationships(ws, ids)
            graph.upsert_relationships([batch[r] for r in ids if r in batch])
            crash_point("graph:relationships-written")
            ws.state.record_synced("relationship", {r: current["relationship"][r] for r in ids}, [])
            progress.advance(len(ids))
    with report.timed("mentions"):
        _sync_mentions(ws, mentions, synced["mentions"], scope, report)
    crash_point("graph:mentions-written")
    # What the point is, without its documents: the query links questions to entities without reading payloads and
    # takes documents (and so what a caller may read) from the graph and the state, and qdrant-edge converts each
    # payload value in 2-7 µs (musique-100's entities' document lists cost 0.4 s of the graph stage, and a re-sync
    # wrote every entity an edited document mentions again, for one more document id).
    wanted = {eid: (GLOBAL_SHARD, e.name, {"name": e.name, "type": e.type}) for eid, e in entities.items()}
    # A name keys one entity's point, which keeps its vector while the name stays: caching it as well held a second
    # copy of every entity's vector, most of the embedding cache, that nothing read.
    sync_points(ws, ENTITIES, wanted, None, report, cache_new_texts=False,
                only=None if whole else {*changed["entity"], *removed["entity"]})
    ws.state.record_stage_mark(report.stage, GRAPH_SYNCED)


def _reconcile_with_store(ws: Workspace, synced: dict[str, dict[str, str]], report: StageReport) -> bool:
    """Mark ``UNSYNCED`` (in ``synced``) every entity, relationship and chunk whose presence in the graph store
    differs from the bookkeeping, so the diff rewrites what the store lost and deletes what it holds unbooked.
    Counts decide whether ids are compared at all: after a clean run or a kill they agree, or every disagreeing
    id is already ``UNSYNCED``."""
    graph = ws.graph_store
    stats = graph.stats()
    stored_entities = None
    differed = False
    for kind, count, list_ids in (
        ("entity", stats.entity_count, graph.all_entity_ids),
        ("relationship", stats.relationship_count, graph.all_relationship_ids),
    ):
        if count == len(synced[kind]):
            continue
        stored = list_ids()
        if kind == "entity":
            stored_entities = stored
        differing = stored.symmetric_difference(synced[kind])
        synced[kind].update(dict.fromkeys(differing, UNSYNCED))
        report.counts[f"{kind}_store_differences"] = len(differing)
        differed |= bool(differing)
    if stats.chunk_count != len(synced["mentions"]):
        # Which chunks the store holds, by inverting the mentions of every stored entity.
        stored_chunks = {
            chunk_id
            for chunk_ids in graph.chunks_of_entities(stored_entities or graph.all_entity_ids()).values()
            for chunk_id in chunk_ids
        }
        differing = stored_chunks.symmetric_difference(synced["mentions"])
        synced["mentions"].update(dict.fromkeys(differing, UNSYNCED))
        report.counts["mentions_store_differences"] = len(differing)
        differed |= bool(differing)
    return differed


def _relationships(ws: Workspace, relationship_ids: Sequence[str]) -> dict[str, Relationship]:
    return {rid: relationship_from_payload(p, provenance=False)
            for rid, p in ws.state.element_payloads("relationship", relationship_ids).items()}


def _touched_entities(graph: GraphStore, written: Iterable[Relationship], removed: dict[str, list[str]]) -> set[str]:
    """The entities whose edges this sync changes: both ends of every relationship it writes or deletes, and every
    entity it deletes with the other end of each of its relationships, which go with it. Read before anything is
    written, while the store still holds what is deleted."""
    touched = set(removed["entity"])
    ends = [(r.source_id, r.target_id) for r in written]
    ends += [(r.source_id, r.target_id) for r in graph.get_relationships(removed["relationship"]).values()]
    ends += [(r.source_id, r.target_id) for r in graph.relationships_of(removed["entity"], provenance=False).values()]
    touched.update(end for pair in ends for end in pair)
    return touched


def _mentions_of(entities: Iterable[Entity]) -> dict[str, list[str]]:
    """Chunk id -> the ids of the entities mentioned in it, sorted."""
    by_chunk: dict[str, list[str]] = defaultdict(list)
    for entity in entities:
        for chunk_id in entity.chunk_ids:
            by_chunk[chunk_id].append(entity.entity_id)
    return {chunk_id: sorted(eids) for chunk_id, eids in by_chunk.items()}


def _mentions_after(
    graph: GraphStore, changed: dict[str, Entity], removed: Sequence[str]
) -> tuple[dict[str, list[str]], set[str]]:
    """The mentions of every chunk a changed or removed entity is or was mentioned in (the scope), from what the store
    holds for the other entities, which are unchanged, and the changed ones' new chunks."""
    touched = {*changed, *removed}
    scope = {chunk_id for chunk_ids in graph.chunks_of_entities(touched).values() for chunk_id in chunk_ids}
    scope.update(chunk_id for entity in changed.values() for chunk_id in entity.chunk_ids)
    by_chunk: dict[str, list[str]] = {
        chunk_id: [eid for eid in eids if eid not in touched] for chunk_id, eids in graph.entities_of_chunks(scope).items()
    }
    for eid, entity in changed.items():
        for chunk_id in entity.chunk_ids:
            by_chunk.setdefault(chunk_id, []).append(eid)
    return {chunk_id: sorted(eids) for chunk_id, eids in by_chunk.items() if eids}, scope


def chunk_texts(ws: Workspace, chunk_ids: Sequence[str]) -> list[ChunkText]:
    """The chunks with their documents' titles, URIs and access groups: the lexical graph's nodes."""
    chunks = ws.state.chunks(chunk_ids=chunk_ids)
    documents = {d.doc_id: d for d in ws.state.documents(doc_ids={c.doc_id for c in chunks}, with_text=False)}
    restricted = ws.state.restricted_documents()
    return [ChunkText(c.chunk_id, c.doc_id, c.position, c.text, documents[c.doc_id].title, documents[c.doc_id].uri,
                      tuple(sorted(restricted.get(c.doc_id, ()))))
            for c in chunks if c.doc_id in documents]


def _sync_mentions(
    ws: Workspace, mentions: dict[str, list[str]], synced: dict[str, str], scope: set[str] | None, report: StageReport
) -> None:
    """Make the store's mentions equal ``mentions``: of every chunk, or (``scope``) of those chunks, each written."""
    current = {cid: short_hash(*eids) for cid, eids in mentions.items()}
    if scope is None:
        changes = Changes.between(current, synced)
        changed, removed = {cid: mentions[cid] for cid in changes.changed}, changes.removed
    else:
        changed = mentions
        removed = sorted(scope - set(current))
    ws.state.record_synced("mentions", {cid: UNSYNCED for cid in changed if cid in synced}, [])
    if removed:
        ws.graph_store.delete_chunks(removed)
        ws.state.record_synced("mentions", {}, removed)
    if changed:
        ws.graph_store.set_chunk_mentions(changed)
        crash_point("graph:mentions-set")
        if ws.graph_store.keeps_chunk_texts:  # the embedded store does not: no chunk is read for it
            ws.graph_store.describe_chunks(chunk_texts(ws, [cid for cid, eids in changed.items() if eids]))
    ws.state.record_synced("mentions", {cid: current[cid] for cid in changed}, [])
    report.counts["chunk_mentions_written"] = len(changed)
