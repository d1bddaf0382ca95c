from dagster import AssetExecutionContext, MaterializeResult, asset

from graphrag_pipeline.defs.partitions import SHARD_BACKFILL, SHARDS, pool
from graphrag_pipeline.defs.reporting import run_stage
from graphrag_pipeline.defs.resources import GraphRAGResource
from graphrag_pipeline.lib.stages import stage


@asset(deps=stage("chunks").reads, partitions_def=SHARDS, backfill_policy=SHARD_BACKFILL, group_name="index",
       pool=pool("chunks"), kinds={"python", "sqlite"})
def chunks(context: AssetExecutionContext, graphrag: GraphRAGResource) -> MaterializeResult:
    """Recursive (heading → paragraph → sentence) or fixed-size chunks in the embedder's tokens; only documents whose
    content or chunking configuration changed are re-chunked."""
    return run_stage(stage("chunks"), context, graphrag)
