from dagster import AssetCheckResult, asset_check

from graphrag_pipeline.defs.reporting import run_check
from graphrag_pipeline.defs.resources import GraphRAGResource
from graphrag_pipeline.lib.index.checks import communities_cover_graph


# Not blocking: a concurrent run over other shards adds entities between this run's communities and its check.
@asset_check(asset="communities", description="Every entity with a relationship belongs to a community on level 0.")
def communities_cover_the_graph(graphrag: GraphRAGResource) -> AssetCheckResult:
    return run_check(lambda ws: communities_cover_graph(ws.state, ws.graph_store), graphrag)
