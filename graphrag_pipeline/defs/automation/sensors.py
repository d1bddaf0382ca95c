"""Rebuild only what changed, unattended: one sensor per source kind requests the shard runs of the shards whose
sources changed, and the automation sensor requests the corpus-wide chain in one run once they have landed. Every
sensor here is RUNNING on a fresh instance, so `dg dev` or `dagster-daemon run` keeps the index fresh with no clicks.
"""

from __future__ import annotations

import json
import time

from dagster import (
    AssetSelection,
    AutomationConditionSensorDefinition,
    DefaultSensorStatus,
    RunRequest,
    SensorDefinition,
    SensorEvaluationContext,
    SkipReason,
    sensor,
)

from graphrag_pipeline.defs.automation.conditions import CORPUS_WIDE_ASSETS
from graphrag_pipeline.defs.automation.jobs import refresh_shards
from graphrag_pipeline.defs.partitions import shard_key
from graphrag_pipeline.defs.resources import GraphRAGResource
from graphrag_pipeline.lib.compose.backends import open_state
from graphrag_pipeline.lib.index.changes import changed_shards, of_sources, shard_fingerprints, source_hashes
from graphrag_pipeline.lib.sources.registry import READERS, poll_seconds


def indexed_fingerprints(graphrag: GraphRAGResource, kind: str | None = None) -> dict[int, str]:
    """Fingerprints of what the index holds (of the sources of one kind, or all), the baseline when a sensor starts
    without a cursor."""
    settings = graphrag.settings()
    state = open_state(settings, read_only=True)
    try:
        if not state.exists():
            return {}
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


# How often the daemon asks each source sensor; the sensor itself scans only when its sources' configured poll
# interval (`poll_interval_seconds`, by kind 60 s to 1 h) has passed, so the interval is configuration, not code.
SENSOR_TICK_SECONDS = 10


def source_sensor(kind: str):
    """A sensor on the sources of one kind: hashes them cheaply, compares per-shard fingerprints with its cursor (or,
    on first start, with what the index holds) and requests a run for each shard that changed."""

    @sensor(name=f"{kind}_source_sensor", job=refresh_shards, minimum_interval_seconds=SENSOR_TICK_SECONDS,
            default_status=DefaultSensorStatus.RUNNING,
            description=f"Requests refresh_shards runs for the shards whose {kind} sources changed.")
    def _sensor(context: SensorEvaluationContext, graphrag: GraphRAGResource):
        settings = graphrag.settings()
        sources = [source for source in settings.sources if source.kind == kind]
        if not sources:
            return SkipReason(f"no {kind} source is configured")
        cursor = json.loads(context.cursor) if context.cursor else {}
        interval = min(poll_seconds(source) for source in sources)
        waited = time.time() - float(cursor.get("scanned_at", 0))
        if waited < interval:
            return SkipReason(f"next scan of the {kind} sources in {interval - waited:.0f} s")
        try:
            current = shard_fingerprints(source_hashes(settings, kind), settings.shard_count)
        except Exception as error:  # noqa: BLE001 (any source failure: a server down, revoked credentials, a bad mount)
            # Tried again after the poll interval, not on every tick (a down Confluence would otherwise be asked, with
            # retries and backoff, every 10 s); the cursor keeps what the last good scan saw.
            context.log.error(f"scan of the {kind} sources failed: {type(error).__name__}: {error}")
            context.update_cursor(json.dumps({**cursor, "scanned_at": time.time()}))
            return SkipReason(f"scan of the {kind} sources failed (next try in {interval} s): {error}")
        if "shards" in cursor:
            previous = {int(shard): fp for shard, fp in cursor["shards"].items()}
        else:
            previous = indexed_fingerprints(graphrag, kind)
        generation = int(cursor.get("generation", 0))
        requests = shard_run_requests(current, previous, generation, prefix=kind)
        if requests:
            generation += 1
        context.update_cursor(json.dumps({
            "generation": generation,
            "scanned_at": time.time(),
            "shards": {str(shard): fp for shard, fp in sorted(current.items())},
        }))
        if not requests:
            return SkipReason(f"no {kind} source changed")
        return requests

    return _sensor


# One sensor per registered source kind: a new kind's reader brings its sensor with it.
SOURCE_SENSORS = [source_sensor(kind) for kind in READERS]


def sensor_of(kind: str) -> SensorDefinition:
    """The source sensor of one kind (`<kind>_source_sensor`)."""
    return next(definition for definition in SOURCE_SENSORS if definition.name == f"{kind}_source_sensor")


graphrag_automation_sensor = AutomationConditionSensorDefinition(
    "graphrag_automation_sensor",
    target=AssetSelection.assets(*CORPUS_WIDE_ASSETS),
    default_status=DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=30,
    description="Requests the corpus-wide assets once shard runs have landed (their automation conditions).",
)
