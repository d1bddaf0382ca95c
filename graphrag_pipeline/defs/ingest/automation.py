"""Rebuild only what changed: one sensor per source kind and a daily schedule, requesting runs for changed shards.

Shard runs materialize the four per-document assets; the four corpus-wide assets (element summaries → graph →
communities → community summaries) carry an eager automation condition, so they follow once after the shard runs
land instead of once per shard.
"""

from __future__ import annotations

import json
from pathlib import Path

from dagster import (
    AssetSelection,
    DefaultScheduleStatus,
    DefaultSensorStatus,
    RunRequest,
    ScheduleEvaluationContext,
    SensorEvaluationContext,
    SkipReason,
    define_asset_job,
    schedule,
    sensor,
)

from graphrag_pipeline.defs.partitions import SHARDS, shard_key
from graphrag_pipeline.defs.resources import GraphRAGResource
from graphrag_pipeline.lib.changes import changed_shards, of_sources, shard_fingerprints, source_hashes
from graphrag_pipeline.lib.state import StateStore

PER_DOCUMENT_ASSETS = ["raw_documents", "chunks", "embeddings", "extracted_elements"]

refresh_shards = define_asset_job(
    "refresh_shards",
    selection=AssetSelection.assets(*PER_DOCUMENT_ASSETS),
    partitions_def=SHARDS,
    description="Re-read, re-chunk, re-embed and re-extract the documents of the given shards (unchanged ones are free).",
)

build_index = define_asset_job(
    "build_index",
    selection=AssetSelection.all(),
    description="The whole chain; launch it over a shard range (all shards for a full build).",
)


def indexed_fingerprints(graphrag: GraphRAGResource, kind: str | None = None) -> dict[int, str]:
    """Fingerprints of what the index holds (of the sources of one kind, or all), the baseline when a sensor starts
    without a cursor."""
    settings = graphrag.pipeline.settings()
    path = Path(settings.index_dir) / "state.sqlite"
    if not path.is_file():
        return {}
    state = StateStore(path, read_only=True)
    try:
        seen = state.seen_source_hashes()
    finally:
        state.close()
    if kind is not None:
        seen = of_sources(seen, {source.name for source in settings.sources if source.kind == kind})
    return shard_fingerprints(seen, settings.shard_count)


def shard_run_requests(
    current: dict[int, str], previous: dict[int, str], generation: int, prefix: str = ""
) -> list[RunRequest]:
    # The run key names the sensor, the content and the sensor generation: a shard is never rebuilt twice for one
    # change, yet an edit that is reverted later (same content as an earlier key) still gets its run.
    return [
        RunRequest(
            partition_key=shard_key(shard),
            run_key=f"{prefix + ':' if prefix else ''}{shard_key(shard)}:{current.get(shard, 'empty')}:{generation}",
        )
        for shard in changed_shards(current, previous)
    ]


# How often each kind of source is looked at: a folder scan is a directory walk, a Confluence scan costs API calls.
SENSOR_INTERVAL_SECONDS = {"folder": 60, "catalog": 60, "confluence": 300, "eval_set": 3600}


def source_sensor(kind: str):
    """A sensor on the sources of one kind: hashes them cheaply, compares per-shard fingerprints with its cursor (or,
    on first start, with what the index holds) and requests a run for each shard that changed."""

    @sensor(name=f"{kind}_source_sensor", job=refresh_shards, minimum_interval_seconds=SENSOR_INTERVAL_SECONDS[kind],
            default_status=DefaultSensorStatus.RUNNING,
            description=f"Requests refresh_shards runs for the shards whose {kind} sources changed.")
    def _sensor(context: SensorEvaluationContext, graphrag: GraphRAGResource):
        settings = graphrag.pipeline.settings()
        if not any(source.kind == kind for source in settings.sources):
            return SkipReason(f"no {kind} source is configured")
        current = shard_fingerprints(source_hashes(settings, kind), settings.shard_count)
        cursor = json.loads(context.cursor) if context.cursor else {}
        if "shards" in cursor:
            previous = {int(shard): fp for shard, fp in cursor["shards"].items()}
        else:
            previous = indexed_fingerprints(graphrag, kind)
        generation = int(cursor.get("generation", 0))
        requests = shard_run_requests(current, previous, generation, prefix=kind)
        if requests:
            generation += 1
        context.update_cursor(json.dumps(
            {"generation": generation, "shards": {str(shard): fp for shard, fp in sorted(current.items())}}
        ))
        if not requests:
            return SkipReason(f"no {kind} source changed")
        return requests

    return _sensor


folder_source_sensor = source_sensor("folder")
confluence_source_sensor = source_sensor("confluence")
catalog_source_sensor = source_sensor("catalog")
eval_set_source_sensor = source_sensor("eval_set")


@schedule(job=refresh_shards, cron_schedule="0 3 * * *", default_status=DefaultScheduleStatus.RUNNING)
def daily_refresh(context: ScheduleEvaluationContext, graphrag: GraphRAGResource):
    """Once a day, compare the sources with what the index holds, whatever the sensor saw: catches changes made while
    the sensor was off, and retries shards whose last run failed."""
    settings = graphrag.pipeline.settings()
    current = shard_fingerprints(source_hashes(settings), settings.shard_count)
    day = context.scheduled_execution_time.strftime("%Y-%m-%d")
    requests = [
        request.with_replaced_attrs(tags={**request.tags, "graphrag/trigger": f"daily-{day}"})
        for request in shard_run_requests(current, indexed_fingerprints(graphrag), generation=0)
    ]
    return requests or SkipReason("index matches the sources")
