from dagster import AssetExecutionContext, MaterializeResult, asset

from graphrag_pipeline.defs.automation.conditions import FOLLOWS_SHARD_RUNS
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
