"""Stage 6, `graph`: the merged elements in the graph store, and entity names in the `entities` collection."""

from __future__ import annotations

from collections import defaultdict

from graphrag_pipeline.lib.faults import crash_point
from graphrag_pipeline.lib.ids import content_hash
from graphrag_pipeline.lib.merge import entity_from_payload, relationship_from_payload
from graphrag_pipeline.lib.models import Entity
from graphrag_pipeline.lib.stages.report import StageReport, accounted
from graphrag_pipeline.lib.state import UNSYNCED
from graphrag_pipeline.lib.stages.vectors import GLOBAL_SHARD, sync_points
from graphrag_pipeline.lib.stores.protocols import ENTITIES
from graphrag_pipeline.lib.workspace import Workspace


@accounted
def sync_graph(ws: Workspace) -> StageReport:
    """Write changed entities, relationships and chunk mentions to the graph store, delete what disappeared, and
    index entity names for question linking.

    Crash-safe: an element's bookkeeping is marked ``UNSYNCED`` before it is written and gets its hash only after,
    and a deleted element leaves the bookkeeping only after the store deleted it, so a rerun after a kill anywhere
    redoes exactly the unfinished writes. A store that lost or gained entries behind the bookkeeping's back (a
    deleted or replaced graph file) is reconciled first, by counts and then by ids."""
    report = StageReport("graph")
    graph = ws.graph_store
    with report.timed("diff"):
        current = {kind: ws.state.element_hashes(kind) for kind in ("entity", "relationship")}
        synced = {kind: ws.state.element_hashes(kind, table="synced") for kind in ("entity", "relationship", "mentions")}
    entities = {eid: entity_from_payload(p) for eid, p in ws.state.element_payloads("entity").items()}
    with report.timed("verify"):
        _reconcile_with_store(ws, synced, report)
    changed = {k: sorted(e for e, h in current[k].items() if synced[k].get(e) != h) for k in current}
    removed = {k: sorted(set(synced[k]) - set(current[k])) for k in current}
    progress = ws.progress(report.stage, "write elements", len(changed["entity"]) + len(changed["relationship"]))
    with report.timed("write"):
        for kind in ("entity", "relationship"):
            ws.state.record_synced(kind, dict.fromkeys(changed[kind], UNSYNCED), [])
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
            graph.upsert_relationships(
                [relationship_from_payload(p) for p in ws.state.element_payloads("relationship", ids).values()]
            )
            crash_point("graph:relationships-written")
            ws.state.record_synced("relationship", {r: current["relationship"][r] for r in ids}, [])
            progress.advance(len(ids))
    with report.timed("mentions"):
        _sync_mentions(ws, entities, synced["mentions"], report)
    crash_point("graph:mentions-written")
    wanted = {
        eid: (GLOBAL_SHARD, e.name, {"doc_ids": list(e.doc_ids[:200]), "name": e.name, "type": e.type})
        for eid, e in entities.items()
    }
    # A name keys one entity's point, which keeps its vector while the name stays: caching it as well held a second
    # copy of ten thousand vectors on musique-100 (most of the embedding cache) that nothing read.
    sync_points(ws, ENTITIES, wanted, None, report, cache_new_texts=False)
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


def _reconcile_with_store(ws: Workspace, synced: dict[str, dict[str, str]], report: StageReport) -> None:
    """Mark ``UNSYNCED`` (in ``synced``) every entity, relationship and chunk whose presence in the graph store
    differs from the bookkeeping, so the diff rewrites what the store lost and deletes what it holds unbooked.
    Counts decide whether ids are compared at all: after a clean run or a kill they agree, or every disagreeing
    id is already ``UNSYNCED``."""
    graph = ws.graph_store
    stats = graph.stats()
    stored_entities = None
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


def _sync_mentions(ws: Workspace, entities: dict[str, Entity], synced: dict[str, str], report: StageReport) -> None:
    by_chunk: dict[str, list[str]] = defaultdict(list)
    for eid, entity in entities.items():
        for chunk_id in entity.chunk_ids:
            by_chunk[chunk_id].append(eid)
    current = {cid: content_hash(*sorted(eids)) for cid, eids in by_chunk.items()}
    changed = {cid: sorted(by_chunk[cid]) for cid, h in current.items() if synced.get(cid) != h}
    removed = sorted(set(synced) - set(current))
    ws.state.record_synced("mentions", dict.fromkeys(changed, UNSYNCED), [])
    if removed:
        ws.graph_store.delete_chunks(removed)
        ws.state.record_synced("mentions", {}, removed)
    if changed:
        ws.graph_store.set_chunk_mentions(changed)
        crash_point("graph:mentions-set")
    ws.state.record_synced("mentions", {cid: current[cid] for cid in changed}, [])
    report.counts["chunk_mentions_written"] = len(changed)
