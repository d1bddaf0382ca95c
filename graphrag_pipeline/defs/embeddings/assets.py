from dagster import AssetExecutionContext, MaterializeResult, asset

from graphrag_pipeline.defs.partitions import SHARD_BACKFILL, SHARDS, pool
from graphrag_pipeline.defs.reporting import run_stage
from graphrag_pipeline.defs.resources import GraphRAGResource
from graphrag_pipeline.lib.stages import stage


@asset(deps=stage("embeddings").reads, partitions_def=SHARDS, backfill_policy=SHARD_BACKFILL, group_name="index",
       pool=pool("embeddings"), kinds={"python", "qdrant"})
def embeddings(context: AssetExecutionContext, graphrag: GraphRAGResource) -> MaterializeResult:
    """Chunk vectors (title and headings as context) upserted into the `chunks` collection; vectors of removed chunks
    are deleted, and a persistent cache means unchanged text is never embedded twice."""
    return run_stage(stage("embeddings"), context, graphrag)
