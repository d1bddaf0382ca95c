"""Stage 6, `graph`: the merged elements in the graph store, and entity names in the `entities` collection."""

from __future__ import annotations

from collections import defaultdict

from graphrag_pipeline.lib.ids import content_hash
from graphrag_pipeline.lib.merge import entity_from_payload, relationship_from_payload
from graphrag_pipeline.lib.models import Entity
from graphrag_pipeline.lib.stages.report import StageReport, accounted
from graphrag_pipeline.lib.stages.vectors import GLOBAL_SHARD, sync_points
from graphrag_pipeline.lib.stores.protocols import ENTITIES
from graphrag_pipeline.lib.workspace import Workspace


@accounted
def sync_graph(ws: Workspace) -> StageReport:
    """Write changed entities, relationships and chunk mentions to the graph store, delete what disappeared, and
    index entity names for question linking."""
    report = StageReport("graph")
    graph = ws.graph_store
    with report.timed("diff"):
        current = {kind: ws.state.element_hashes(kind) for kind in ("entity", "relationship")}
        synced = {kind: ws.state.element_hashes(kind, table="synced") for kind in ("entity", "relationship")}
    changed = {k: sorted(e for e, h in current[k].items() if synced[k].get(e) != h) for k in current}
    removed = {k: sorted(set(synced[k]) - set(current[k])) for k in current}
    progress = ws.progress(report.stage, "write elements", len(changed["entity"]) + len(changed["relationship"]))
    with report.timed("write"):
        if removed["relationship"]:
            graph.delete_relationships(removed["relationship"])
        if removed["entity"]:
            graph.delete_entities(removed["entity"])
        for start in range(0, len(changed["entity"]), 5000):
            ids = changed["entity"][start : start + 5000]
            graph.upsert_entities([entity_from_payload(p) for p in ws.state.element_payloads("entity", ids).values()])
            progress.advance(len(ids))
        for start in range(0, len(changed["relationship"]), 5000):
            ids = changed["relationship"][start : start + 5000]
            graph.upsert_relationships(
                [relationship_from_payload(p) for p in ws.state.element_payloads("relationship", ids).values()]
            )
            progress.advance(len(ids))
        ws.state.record_synced("entity", {e: current["entity"][e] for e in changed["entity"]}, removed["entity"])
        ws.state.record_synced(
            "relationship", {r: current["relationship"][r] for r in changed["relationship"]}, removed["relationship"]
        )
    entities = {eid: entity_from_payload(p) for eid, p in ws.state.element_payloads("entity").items()}
    with report.timed("mentions"):
        _sync_mentions(ws, entities, report)
    wanted = {
        eid: (GLOBAL_SHARD, e.name, {"doc_ids": list(e.doc_ids[:200]), "name": e.name, "type": e.type})
        for eid, e in entities.items()
    }
    sync_points(ws, ENTITIES, wanted, None, report)
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


def _sync_mentions(ws: Workspace, entities: dict[str, Entity], report: StageReport) -> None:
    by_chunk: dict[str, list[str]] = defaultdict(list)
    for eid, entity in entities.items():
        for chunk_id in entity.chunk_ids:
            by_chunk[chunk_id].append(eid)
    current = {cid: content_hash(*sorted(eids)) for cid, eids in by_chunk.items()}
    synced = ws.state.element_hashes("mentions", table="synced")
    changed = {cid: sorted(by_chunk[cid]) for cid, h in current.items() if synced.get(cid) != h}
    removed = sorted(set(synced) - set(current))
    if removed:
        ws.graph_store.delete_chunks(removed)
    if changed:
        ws.graph_store.set_chunk_mentions(changed)
    ws.state.record_synced("mentions", {cid: current[cid] for cid in changed}, removed)
    report.counts["chunk_mentions_written"] = len(changed)
