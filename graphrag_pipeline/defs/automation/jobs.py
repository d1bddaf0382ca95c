"""The jobs the sensors and schedules launch, and the whole chain for a full build or a backfill."""

from __future__ import annotations

from dagster import AssetSelection, define_asset_job

from graphrag_pipeline.defs.automation.conditions import CORPUS_WIDE_ASSETS, PER_DOCUMENT_ASSETS
from graphrag_pipeline.defs.partitions import SHARDS

refresh_shards = define_asset_job(
    "refresh_shards",
    selection=AssetSelection.assets(*PER_DOCUMENT_ASSETS),
    partitions_def=SHARDS,
    description="Re-read, re-chunk, re-embed and re-extract the documents of the given shards (unchanged ones are free).",
)

refresh_corpus = define_asset_job(
    "refresh_corpus",
    selection=AssetSelection.assets(*CORPUS_WIDE_ASSETS),
    description="Bring the corpus-wide assets level with the shards (merge, graph, communities, their summaries).",
)

build_index = define_asset_job(
    "build_index",
    selection=AssetSelection.all(),
    description="The whole chain; launch it over a shard range (all shards for a full build).",
)
