from dagster import AssetExecutionContext, MaterializeResult, asset

from graphrag_pipeline.defs.partitions import SHARD_BACKFILL, SHARDS, pool
from graphrag_pipeline.defs.reporting import run_stage
from graphrag_pipeline.defs.resources import GraphRAGResource
from graphrag_pipeline.lib.stages import stage


@asset(partitions_def=SHARDS, backfill_policy=SHARD_BACKFILL, pool=pool("raw_documents"), group_name="ingest",
       kinds={"python", "sqlite"})
def raw_documents(context: AssetExecutionContext, graphrag: GraphRAGResource) -> MaterializeResult:
    """Documents of the configured sources (folders of Markdown/text/HTML, eval sets), with front matter as metadata.
    New, changed and deleted documents are detected by content hash; unreadable files are quarantined."""
    return run_stage(stage("raw_documents"), context, graphrag)
