from dagster import AssetExecutionContext, MaterializeResult, asset

from graphrag_pipeline.defs.automation.conditions import FOLLOWS_SHARD_RUNS
from graphrag_pipeline.defs.partitions import SINGLE_RUN, pool
from graphrag_pipeline.defs.reporting import run_stage
from graphrag_pipeline.defs.resources import GraphRAGResource
from graphrag_pipeline.defs.settings import STORE_KINDS
from graphrag_pipeline.lib.stages import stage


@asset(deps=stage("graph").reads, backfill_policy=SINGLE_RUN, pool=pool("graph"), group_name="graph",
       kinds={"python", STORE_KINDS["graph"], STORE_KINDS["vectors"]}, automation_condition=FOLLOWS_SHARD_RUNS)
def graph(context: AssetExecutionContext, graphrag: GraphRAGResource) -> MaterializeResult:
    """Entities, relationships and chunk mentions written to the graph store (only what changed), and entity names
    indexed in the `entities` collection for linking questions to the graph."""
    return run_stage(stage("graph"), context, graphrag)
