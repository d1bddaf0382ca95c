from dagster import AssetCheckResult, asset_check

from graphrag_pipeline.defs.reporting import run_check
from graphrag_pipeline.defs.resources import GraphRAGResource
from graphrag_pipeline.lib.checks import communities_cover_graph, community_vectors


# Not blocking: a concurrent run over other shards adds entities between this run's communities and its check.
@asset_check(asset="communities", description="Every entity with a relationship belongs to a community on level 0.")
def communities_cover_the_graph(graphrag: GraphRAGResource) -> AssetCheckResult:
    return run_check(lambda ws: communities_cover_graph(ws.state, ws.graph_store), graphrag)


@asset_check(asset="community_summaries", description="Every community summary has a vector in the published "
                                                      "`communities` collection, and the collection holds nothing else.")
def every_summary_has_a_published_vector(graphrag: GraphRAGResource) -> AssetCheckResult:
    return run_check(lambda ws: community_vectors(ws.state, ws.published_vectors), graphrag)
