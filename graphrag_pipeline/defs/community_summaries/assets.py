from dagster import AssetExecutionContext, MaterializeResult, asset

from graphrag_pipeline.defs.automation.conditions import FOLLOWS_SHARD_RUNS
from graphrag_pipeline.defs.partitions import SINGLE_RUN, pool
from graphrag_pipeline.defs.reporting import run_stage
from graphrag_pipeline.defs.resources import GraphRAGResource
from graphrag_pipeline.lib.stages import stage


@asset(deps=stage("community_summaries").reads, backfill_policy=SINGLE_RUN, group_name="communities",
       pool=pool("community_summaries"), kinds={"python", "qdrant"}, automation_condition=FOLLOWS_SHARD_RUNS)
def community_summaries(context: AssetExecutionContext, graphrag: GraphRAGResource) -> MaterializeResult:
    """Summaries of the communities whose membership or member content changed — extractive (top entities,
    strongest relationships) or LLM reports (title, summary, findings, rating) — embedded into the `communities`
    collection for global questions."""
    return run_stage(stage("community_summaries"), context, graphrag)
