"""What the daemon missed while it was down, caught once a day: `daily_refresh` compares the sources with the index,
`daily_corpus_refresh` brings the corpus-wide chain level with the shards."""

from __future__ import annotations

from typing import Mapping

from dagster import (
    AssetKey,
    DagsterEventType,
    DagsterRunStatus,
    DefaultScheduleStatus,
    RunRequest,
    RunsFilter,
    ScheduleEvaluationContext,
    SkipReason,
    schedule,
)

from graphrag_pipeline.defs.automation.conditions import CORPUS_WIDE_ASSETS, PER_DOCUMENT_ASSETS
from graphrag_pipeline.defs.automation.jobs import refresh_corpus, refresh_shards
from graphrag_pipeline.defs.automation.sensors import indexed_fingerprints, shard_run_requests
from graphrag_pipeline.defs.resources import GraphRAGResource
from graphrag_pipeline.lib.index.changes import shard_fingerprints, source_hashes


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
