from dagster import AssetExecutionContext, MaterializeResult, asset

from graphrag_pipeline.defs.ingest.automation import FOLLOWS_SHARD_RUNS
from graphrag_pipeline.defs.partitions import SINGLE_RUN, pool
from graphrag_pipeline.defs.reporting import run_stage
from graphrag_pipeline.defs.resources import GraphRAGResource
from graphrag_pipeline.lib.stages import stage


@asset(deps=stage("communities").reads, backfill_policy=SINGLE_RUN, group_name="communities",
       pool=pool("communities"), kinds={"python", "graspologic"}, automation_condition=FOLLOWS_SHARD_RUNS)
def communities(context: AssetExecutionContext, graphrag: GraphRAGResource) -> MaterializeResult:
    """Hierarchical Leiden (graspologic, fixed seed) over the entity graph; every level kept with parent/child links
    and content-derived ids that stay stable while membership does."""
    return run_stage(stage("communities"), context, graphrag)


@asset(deps=stage("community_summaries").reads, backfill_policy=SINGLE_RUN, group_name="communities",
       pool=pool("community_summaries"), kinds={"python", "qdrant"}, automation_condition=FOLLOWS_SHARD_RUNS)
def community_summaries(context: AssetExecutionContext, graphrag: GraphRAGResource) -> MaterializeResult:
    """Summaries of the communities whose membership or member content changed — extractive (top entities,
    strongest relationships) or LLM reports (title, summary, findings, rating) — embedded into the `communities`
    collection for global questions."""
    return run_stage(stage("community_summaries"), context, graphrag)
