"""Stage 7, `communities`: hierarchical Leiden over the entity graph, kept incrementally."""

from __future__ import annotations

import json
import time
from collections import defaultdict

from graphrag_pipeline.lib.algorithms.communities import CommunityUpdate, detect_communities, update_communities
from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core.config import CommunityConfig
from graphrag_pipeline.lib.core.models import Community
from graphrag_pipeline.lib.stages.report import StageReport
from graphrag_pipeline.lib.stores.state.sql import COMMUNITY_PAYLOADS, payload_json

# When the last full re-clustering ran and how many entities incremental runs have re-clustered since.
FULL_RUN_MARK = "communities:full_run"
DAY_SECONDS = 86_400


def build_communities(ws: Workspace) -> StageReport:
    report = StageReport("communities")
    config = ws.settings.communities
    with report.timed("edges"):
        edges = ws.graph_store.weighted_edges()
        previous = [community_from_payload(p) for p in ws.state.payloads(COMMUNITY_PAYLOADS).values()]
    entity_count = len({end for source, target, _ in edges for end in (source, target)})
    since_full = json.loads(ws.state.stage_mark(FULL_RUN_MARK) or "null")
    full = why_full(config, previous, since_full, entity_count, time.time())
    progress = ws.progress(report.stage, "hierarchical Leiden over edges", len(edges))
    with report.timed("leiden"):
        if full:
            update = CommunityUpdate(detect_communities(edges, max_cluster_size=config.max_cluster_size,
                                                        seed=config.seed), kept=0, reclustered_entities=entity_count)
        else:
            update = update_communities(previous, edges, max_cluster_size=config.max_cluster_size, seed=config.seed)
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
    levels: dict[int, int] = defaultdict(int)
    for community in communities:
        levels[community.level] += 1
    report.counts.update(communities=len(communities), levels=len(levels), edges=len(edges),
                         kept=update.kept, reclustered_entities=update.reclustered_entities,
                         re_formed=len({c.community_id for c in communities} - {c.community_id for c in previous}))
    report.sample = [{"level": level, "communities": n} for level, n in sorted(levels.items())]
    report.notes.append(f"full re-clustering: {full}" if full else
                        f"incremental: {update.kept} communities kept, "
                        f"{update.reclustered_entities} entities re-clustered")
    return report


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
