"""Stage 7, `communities`: hierarchical Leiden over the entity graph."""

from __future__ import annotations

import json
from collections import defaultdict

from graphrag_pipeline.lib.communities import detect_communities
from graphrag_pipeline.lib.models import Community
from graphrag_pipeline.lib.stages.report import StageReport
from graphrag_pipeline.lib.workspace import Workspace


def build_communities(ws: Workspace) -> StageReport:
    report = StageReport("communities")
    config = ws.settings.communities
    with report.timed("edges"):
        edges = ws.graph_store.weighted_edges()
    progress = ws.progress(report.stage, "hierarchical Leiden over edges", len(edges))
    with report.timed("leiden"):
        communities = detect_communities(edges, max_cluster_size=config.max_cluster_size, seed=config.seed)
    progress.advance(len(edges))
    with report.timed("store"):
        ws.state.replace_communities({c.community_id: (c.level, json.dumps(c.to_dict())) for c in communities})
    levels: dict[int, int] = defaultdict(int)
    for community in communities:
        levels[community.level] += 1
    report.counts.update(communities=len(communities), levels=len(levels), edges=len(edges))
    report.sample = [{"level": level, "communities": n} for level, n in sorted(levels.items())]
    return report


def community_from_payload(data: dict) -> Community:
    return Community(data["community_id"], data["level"], data["parent_id"], tuple(data["entity_ids"]),
                     tuple(data.get("child_ids", ())))
