from dagster import AssetExecutionContext, MaterializeResult, asset

from graphrag_pipeline.defs.partitions import SHARD_BACKFILL, SHARDS, pool
from graphrag_pipeline.defs.reporting import run_stage
from graphrag_pipeline.defs.resources import GraphRAGResource
from graphrag_pipeline.lib.stages import stage


@asset(deps=stage("extracted_elements").reads, partitions_def=SHARDS, backfill_policy=SHARD_BACKFILL, group_name="graph",
       pool=pool("extracted_elements"), kinds={"python", "spacy"})
def extracted_elements(context: AssetExecutionContext, graphrag: GraphRAGResource) -> MaterializeResult:
    """Typed entity and relationship mentions per chunk (dictionary and pattern spotters, spaCy NER, sentence
    co-occurrence), cached per chunk content and extractor configuration."""
    return run_stage(stage("extracted_elements"), context, graphrag)
