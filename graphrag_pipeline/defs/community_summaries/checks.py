from dagster import AssetCheckResult, asset_check

from graphrag_pipeline.defs.reporting import run_check
from graphrag_pipeline.defs.resources import GraphRAGResource
from graphrag_pipeline.lib.index.checks import community_vectors


@asset_check(asset="community_summaries", description="Every community summary has a vector in the published "
                                                      "`communities` collection, and the collection holds nothing else.")
def every_summary_has_a_published_vector(graphrag: GraphRAGResource) -> AssetCheckResult:
    return run_check(lambda ws: community_vectors(ws.state, ws.published_vectors), graphrag)
