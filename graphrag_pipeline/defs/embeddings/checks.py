from dagster import AssetCheckResult, asset_check

from graphrag_pipeline.defs.reporting import run_check
from graphrag_pipeline.defs.resources import GraphRAGResource
from graphrag_pipeline.lib.index.checks import chunk_vectors


@asset_check(asset="embeddings", description="Every chunk has a vector in the published `chunks` collection, and the "
                                             "collection holds nothing else.")
def every_chunk_has_a_published_vector(graphrag: GraphRAGResource) -> AssetCheckResult:
    return run_check(lambda ws: chunk_vectors(ws.state, ws.published_vectors), graphrag)
