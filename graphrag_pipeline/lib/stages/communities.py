"""Stage 7, `communities`: hierarchical Leiden over the entity graph, kept incrementally."""

from __future__ import annotations

import json
import time
from collections import defaultdict

from graphrag_pipeline.lib.algorithms.communities import (
    CommunityUpdate,
    detect_communities,
    leaves_around,
    update_communities,
    update_communities_around,
)
from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core.config import CommunityConfig
from graphrag_pipeline.lib.core.ids import content_hash
from graphrag_pipeline.lib.core.models import Community
from graphrag_pipeline.lib.stages.report import StageReport
from graphrag_pipeline.lib.stores.state.sql import COMMUNITY_PAYLOADS, payload_json

# When the last full re-clustering ran and how many entities incremental runs have re-clustered since.
FULL_RUN_MARK = "communities:full_run"
DAY_SECONDS = 86_400
# The entities whose edges graph syncs changed since this stage wrote the partition that the mark names by its
# fingerprint (JSON: {"partition": ..., "touched": [...]}). No mark (an index from before it was kept, a sync that
# rewrote the whole graph) or another partition (one written by anything else) means every entity.
TOUCHED_MARK = "communities:touched_entities"


def record_touched_entities(ws: Workspace, touched: set[str] | None) -> None:
    """Add ``touched`` (None: every entity) to the entities this stage must look at again; the graph stage calls it
    before it writes, so a sync killed midway has recorded what it may have changed."""
    recorded = ws.state.stage_mark(TOUCHED_MARK)
    if recorded is None:
        return
    if touched is None:
        ws.state.record_stage_mark(TOUCHED_MARK, None)
        return
    mark = json.loads(recorded)
    together = sorted(set(mark["touched"]) | touched)
    if together != mark["touched"]:
        ws.state.record_stage_mark(TOUCHED_MARK, json.dumps({**mark, "touched": together}))


def _touched_entities(ws: Workspace, previous: list[Community]) -> set[str] | None:
    """What graph syncs touched since ``previous`` was written by this stage (None: unknown, so every entity)."""
    recorded = ws.state.stage_mark(TOUCHED_MARK)
    if recorded is None:
        return None
    mark = json.loads(recorded)
    return set(mark["touched"]) if mark["partition"] == _fingerprint(previous) else None


def _fingerprint(communities: list[Community]) -> str:
    return content_hash(*sorted(f"{c.community_id}:{c.edges_hash}" for c in communities))


def build_communities(ws: Workspace) -> StageReport:
    report = StageReport("communities")
    config = ws.settings.communities
    with report.timed("edges"):
        previous = [community_from_payload(p) for p in ws.state.payloads(COMMUNITY_PAYLOADS).values()]
        # After an incremental graph sync, only the edges around what it touched: the rest of the partition stands.
        touched = _touched_entities(ws, previous) if previous else None
        around = None if touched is None else leaves_around(previous, touched)[1]
        edges = ws.graph_store.weighted_edges(around)
    entity_count = _entities_with_edges(previous, around, edges)
    since_full = json.loads(ws.state.stage_mark(FULL_RUN_MARK) or "null")
    full = why_full(config, previous, since_full, entity_count, time.time())
    if full and around is not None:
        with report.timed("edges"):
            edges, around = ws.graph_store.weighted_edges(), None
    progress = ws.progress(report.stage, "hierarchical Leiden over edges", len(edges))
    with report.timed("leiden"):
        if full:
            update = CommunityUpdate(detect_communities(edges, max_cluster_size=config.max_cluster_size,
                                                        seed=config.seed), kept=0, reclustered_entities=entity_count)
        elif around is None:
            update = update_communities(previous, edges, max_cluster_size=config.max_cluster_size, seed=config.seed)
        else:
            update = update_communities_around(previous, touched, edges, max_cluster_size=config.max_cluster_size,
                                               seed=config.seed)
    progress.advance(len(edges))
    communities = update.communities
    with report.timed("store"):
        # Only what changed is written: an incremental run keeps most communities as they were.
        before = {c.community_id: c for c in previous}
        after = {c.community_id: c for c in communities}
        ws.state.write_payloads(
            COMMUNITY_PAYLOADS,
            {cid: ("", payload_json(c.to_dict())) for cid, c in after.items() if before.get(cid) != c},
            [cid for cid in before if cid not in after])
        ws.state.record_stage_mark(FULL_RUN_MARK, json.dumps(
            {"at": time.time(), "reclustered": 0} if full else
            {**since_full, "reclustered": since_full["reclustered"] + update.reclustered_entities}))
        # Taken in; killed before this, a rerun takes it in again, and finds the partition it wrote is not the one
        # the mark names, so reads every edge.
        ws.state.record_stage_mark(TOUCHED_MARK, json.dumps({"partition": _fingerprint(communities), "touched": []}))
    levels: dict[int, int] = defaultdict(int)
    for community in communities:
        levels[community.level] += 1
    report.counts.update(communities=len(communities), levels=len(levels), edges_read=len(edges),
                         kept=update.kept, reclustered_entities=update.reclustered_entities,
                         re_formed=len({c.community_id for c in communities} - {c.community_id for c in previous}))
    report.sample = [{"level": level, "communities": n} for level, n in sorted(levels.items())]
    report.notes.append(f"full re-clustering: {full}" if full else
                        f"incremental: {update.kept} communities kept, "
                        f"{update.reclustered_entities} entities re-clustered"
                        + ("" if around is None else
                           f", from the {len(edges)} edges around the {len(touched)} entities graph syncs touched"))
    return report


def _entities_with_edges(previous: list[Community], around: set[str] | None,
                         edges: list[tuple[str, str, float]]) -> int:
    """How many entities have an edge: those of ``edges``, or, when these are only the edges ``around`` some
    entities, those of them with an edge and the members of ``previous`` beyond them, whose edges are unchanged."""
    ends = {end for source, target, _ in edges for end in (source, target)}
    if around is None:
        return len(ends)
    members = {entity_id for community in previous if not community.child_ids for entity_id in community.entity_ids}
    return len(members - around) + len(ends & around)


def why_full(config: CommunityConfig, previous: list[Community], since_full: dict | None, entity_count: int, now: float) -> str:
    """Why this run re-clusters everything ("" when it need not): no partition to start from, none recorded as
    complete, incremental runs switched off, the last full run too old, or too much re-clustered since."""
    if not config.incremental:
        return "incremental runs are off"
    if not previous or since_full is None or any(not c.edges_hash for c in previous if not c.child_ids):
        return "no partition to start from"
    if now - since_full["at"] > config.full_every_days * DAY_SECONDS:
        return f"the last full run is older than {config.full_every_days:g} days"
    if since_full["reclustered"] > config.max_drift * max(entity_count, 1):
        return f"more than {config.max_drift:.0%} of the entities re-clustered since the last full run"
    return ""


def community_from_payload(data: dict) -> Community:
    return Community(data["community_id"], data["level"], data["parent_id"], tuple(data["entity_ids"]),
                     tuple(data.get("child_ids", ())), data.get("edges_hash", ""))
