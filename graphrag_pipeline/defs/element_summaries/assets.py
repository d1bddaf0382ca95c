from dagster import AssetExecutionContext, MaterializeResult, asset

from graphrag_pipeline.defs.automation.conditions import FOLLOWS_SHARD_RUNS
from graphrag_pipeline.defs.partitions import SINGLE_RUN, pool
from graphrag_pipeline.defs.reporting import run_stage
from graphrag_pipeline.defs.resources import GraphRAGResource
from graphrag_pipeline.lib.stages import stage


@asset(deps=stage("element_summaries").reads, backfill_policy=SINGLE_RUN, group_name="graph", kinds={"python", "sqlite"},
       pool=pool("element_summaries"), automation_condition=FOLLOWS_SHARD_RUNS)
def element_summaries(context: AssetExecutionContext, graphrag: GraphRAGResource) -> MaterializeResult:
    """One entity per real-world thing and one relationship per typed pair, descriptions merged with provenance;
    only changed elements are rewritten."""
    return run_stage(stage("element_summaries"), context, graphrag)
