"""Rebuild only what changed, unattended: one sensor per source kind, the automation sensor, daily schedules.

Shard runs (`refresh_shards`, requested by the source sensors) materialize the four per-document assets. The four
corpus-wide assets (element summaries → graph → communities → community summaries) follow through
`graphrag_automation_sensor`: once the shard runs have landed and none is still in progress, it requests the
corpus-wide chain in one run. Every sensor and schedule here is RUNNING on a fresh instance, so `dagster dev` or
`dagster-daemon run` keeps the index fresh with no clicks. What the daemon missed while it was down is caught by the
daily schedules: `daily_refresh` compares the sources with the index, `daily_corpus_refresh` brings the corpus-wide
chain level with the shards.
"""

from __future__ import annotations

import functools
import json
import operator
import time
from typing import Mapping

from dagster import (
    AssetKey,
    AssetSelection,
    AutomationCondition,
    AutomationConditionSensorDefinition,
    DagsterEventType,
    DagsterRunStatus,
    DefaultScheduleStatus,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    ScheduleEvaluationContext,
    SensorDefinition,
    SensorEvaluationContext,
    SkipReason,
    define_asset_job,
    schedule,
    sensor,
)

from graphrag_pipeline.defs.partitions import SHARDS, shard_key
from graphrag_pipeline.defs.resources import GraphRAGResource
from graphrag_pipeline.lib.backends import open_state
from graphrag_pipeline.lib.changes import changed_shards, of_sources, shard_fingerprints, source_hashes
from graphrag_pipeline.lib.sources.registry import READERS, poll_seconds
from graphrag_pipeline.lib.stages import CORPUS_WIDE, PER_DOCUMENT

PER_DOCUMENT_ASSETS = list(PER_DOCUMENT)
CORPUS_WIDE_ASSETS = list(CORPUS_WIDE)

# When a corpus-wide asset follows: a parent was updated since this asset was last requested or updated (or is
# requested on this tick, so the chain goes in one run), and no parent (no shard run) is still running — several shard
# runs landing close together make one corpus-wide run. Unlike `eager()`, shard partitions that were never
# materialized (shards without documents) do not block it.
# The two SINCEs compare times: `since_last_handled()` resets on an "or" of events, which carries no times, so a
# shard run landing on the tick at which the previous corpus-wide run ended (or was requested) counted as handled by
# it, and the change waited for the daily schedule. Each single event here carries its time, and the later one wins.
# They are two SINCEs side by side (a parent update later than the last request AND later than the last update), not
# one nested in the other: a SINCE is a state that stays true until its reset, so as the trigger of an outer SINCE it
# fired again on every tick after the outer reset. The chain run's own parent update (element_summaries after graph
# was requested) then brought graph→… again a tick after the run, then communities→…, then community_summaries.
_PARENT_UPDATED = AutomationCondition.any_deps_match(AutomationCondition.newly_updated())
_PARENT_UPDATED_SINCE_HANDLED = (
    _PARENT_UPDATED.since(AutomationCondition.newly_requested())
    & _PARENT_UPDATED.since(AutomationCondition.newly_updated())
)
# Not while any corpus-wide asset is in a run: an asset that run has already materialized no longer counts as in
# progress, so a shard run landing mid-chain brought element_summaries→graph in a second run beside the first, then
# communities→community_summaries in a third. Waiting for the chain makes the change one more whole-chain run.
_CHAIN_IN_PROGRESS = functools.reduce(operator.or_, (
    AutomationCondition.asset_matches(name, AutomationCondition.in_progress()) for name in CORPUS_WIDE_ASSETS))
FOLLOWS_SHARD_RUNS = (
    (_PARENT_UPDATED_SINCE_HANDLED | AutomationCondition.any_deps_match(AutomationCondition.will_be_requested()))
    & ~AutomationCondition.any_deps_in_progress()
    & ~_CHAIN_IN_PROGRESS.with_label("a corpus-wide asset is in a run")
).with_label("after shard runs")

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


@schedule(job=refresh_shards, cron_schedule="0 3 * * *", default_status=DefaultScheduleStatus.RUNNING)
def daily_refresh(context: ScheduleEvaluationContext, graphrag: GraphRAGResource):
    """Once a day, compare the sources with what the index holds, whatever the sensor saw: catches changes made while
    the sensor was off; and re-run shards whose last run read their documents but did not get to extract them (a
    failed embedding or extraction step: the index already lists the new documents, so comparing alone misses it)."""
    settings = graphrag.settings()
    current = shard_fingerprints(source_hashes(settings), settings.shard_count)
    day = context.scheduled_execution_time.strftime("%Y-%m-%d")
    requests = shard_run_requests(current, indexed_fingerprints(graphrag), generation=0)
    requested = {request.partition_key for request in requests}
    latest = {name: context.instance.get_latest_storage_id_by_partition(
        AssetKey(name), DagsterEventType.ASSET_MATERIALIZATION) for name in (PER_DOCUMENT_ASSETS[0], PER_DOCUMENT_ASSETS[-1])}
    requests += [
        RunRequest(partition_key=partition, run_key=f"unfinished:{partition}:{read_at}")
        for partition, read_at in unfinished_shards(latest[PER_DOCUMENT_ASSETS[0]], latest[PER_DOCUMENT_ASSETS[-1]])
        if partition not in requested
    ]
    tagged = [request.with_replaced_attrs(tags={**request.tags, "graphrag/trigger": f"daily-{day}"})
              for request in requests]
    return tagged or SkipReason("index matches the sources, and every shard run got to its last asset")


def unfinished_shards(read: Mapping[str, int], finished: Mapping[str, int]) -> list[tuple[str, int]]:
    """(partition, storage id of its last read) of the shards whose first asset was materialized after their last
    asset, given each asset's latest materialization storage id per partition."""
    return sorted((partition, read_at) for partition, read_at in read.items() if read_at > finished.get(partition, -1))


graphrag_automation_sensor = AutomationConditionSensorDefinition(
    "graphrag_automation_sensor",
    target=AssetSelection.assets(*CORPUS_WIDE_ASSETS),
    default_status=DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=30,
    description="Requests the corpus-wide assets once shard runs have landed (their automation conditions).",
)


@schedule(job=refresh_corpus, cron_schedule="30 3 * * *", default_status=DefaultScheduleStatus.RUNNING)
def daily_corpus_refresh(context: ScheduleEvaluationContext):
    """Once a day, after `daily_refresh`: if a corpus-wide asset is older than what it is built from (its run failed,
    or the daemon was down when the shard runs landed), request the corpus-wide chain. Skips the day while a run is in
    progress: the automation sensor requests the chain after shard runs anyway."""
    instance = context.instance
    busy = instance.get_runs(
        filters=RunsFilter(statuses=[DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING,
                                     DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]),
        limit=1,
    )
    if busy:
        return SkipReason(f"run {busy[0].run_id} is still in progress; the automation sensor follows it")
    behind = corpus_assets_behind(
        {name: _latest_storage_id(instance, name) for name in [PER_DOCUMENT_ASSETS[-1], *CORPUS_WIDE_ASSETS]}
    )
    if not behind:
        return SkipReason("the corpus-wide assets are level with the shards")
    day = context.scheduled_execution_time.strftime("%Y-%m-%d")
    return RunRequest(run_key=f"corpus:{day}", tags={"graphrag/trigger": f"daily-{day}",
                                                     "graphrag/behind": ",".join(behind)})


def corpus_assets_behind(latest: dict[str, int | None]) -> list[str]:
    """The corpus-wide assets whose last materialization is older than their parent's (or missing while the parent
    exists), given each asset's latest materialization storage id in lineage order."""
    names = [PER_DOCUMENT_ASSETS[-1], *CORPUS_WIDE_ASSETS]
    return [
        child for parent, child in zip(names, names[1:])
        if latest[parent] is not None and (latest[child] is None or latest[child] < latest[parent])
    ]


def _latest_storage_id(instance, name: str) -> int | None:
    records = instance.fetch_materializations(AssetKey(name), limit=1, ascending=False).records
    return records[0].storage_id if records else None
