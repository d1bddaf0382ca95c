"""The source sensor and the daily schedule, evaluated the way Dagster's daemon would, against real folders."""

import json
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from dagster import RunRequest, SkipReason, build_schedule_context, build_sensor_context

from graphrag_pipeline.defs.automation.schedules import daily_refresh
from graphrag_pipeline.defs.automation.sensors import sensor_of
from graphrag_pipeline.defs.partitions import SHARD_COUNT, SHARDS, shard_key, shard_of_key
from graphrag_pipeline.defs.resources import GraphRAGResource
from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core.config import load_settings
from graphrag_pipeline.lib.core.ids import stable_shard
from graphrag_pipeline.lib.index.changes import shard_fingerprints, source_hashes
from graphrag_pipeline.lib.stages import all_shards, ingest_documents
from graphrag_pipeline_tests.conftest import FIXTURES

SOURCE = "t"
TICK_TIME = datetime(2025, 3, 14, 3, 0, tzinfo=timezone.utc)
# With 64 shards these two documents share a shard, and acme-robotics.md is alone in its own.
SHARED_SHARD = ("helix-automation.md", "zentrix-labs.md")
ALONE = "acme-robotics.md"


def shard_of(name: str) -> str:
    return shard_key(stable_shard(f"{SOURCE}:{name}", SHARD_COUNT))


@pytest.fixture
def config(tmp_path) -> Path:
    corpus = tmp_path / "corpus"
    shutil.copytree(FIXTURES / "multihop", corpus)
    path = tmp_path / "graphrag.yaml"
    path.write_text(yaml.safe_dump({
        "index_dir": "index",
        "shard_count": SHARD_COUNT,
        # Every tick scans, so these tests need no waiting; the interval has its own test.
        "sources": [{"name": SOURCE, "kind": "folder", "path": "corpus", "poll_interval_seconds": 0}],
    }))
    return path


@pytest.fixture
def instance():
    from dagster import instance_for_test

    with instance_for_test() as test_instance:
        yield test_instance


def corpus(config: Path) -> Path:
    return config.parent / "corpus"


def documents(config: Path) -> list[str]:
    return sorted(p.name for p in corpus(config).glob("*.md"))


def fingerprints(config: Path) -> dict[str, str]:
    settings = load_settings(config)
    return {shard_key(s): fp for s, fp in shard_fingerprints(source_hashes(settings), settings.shard_count).items()}


def index_sources(config: Path) -> None:
    """Record the corpus as indexed. Document hashes are all the sensor and schedule read from an index, and the
    ingest stage is what writes them (the chain test checks the same against a full Dagster materialization)."""
    workspace = Workspace(load_settings(config))
    try:
        ingest_documents(workspace, all_shards(workspace))
    finally:
        workspace.close()


def sensor_tick(config: Path, cursor: str | None = None) -> tuple[list[RunRequest] | SkipReason, str | None]:
    resources = {"graphrag": GraphRAGResource(config_path=str(config))}
    with build_sensor_context(cursor=cursor, resources=resources) as context:
        return sensor_of("folder")(context), context.cursor


def schedule_tick(config: Path, instance) -> list[RunRequest] | SkipReason:
    resources = {"graphrag": GraphRAGResource(config_path=str(config))}
    with build_schedule_context(instance=instance, resources=resources, scheduled_execution_time=TICK_TIME) as context:
        return daily_refresh(context)


def without_scan_time(cursor: str) -> dict:
    return {key: value for key, value in json.loads(cursor).items() if key != "scanned_at"}


def requested(result: list[RunRequest] | SkipReason) -> dict[str, str]:
    """partition key -> run key of each request (fails on a SkipReason)."""
    assert isinstance(result, list), result
    keys = {request.partition_key: request.run_key for request in result}
    assert len(keys) == len(result), "one request per shard"
    return keys


def test_first_tick_without_index_requests_every_shard_with_documents(config):
    result, cursor = sensor_tick(config)
    current = fingerprints(config)
    assert set(requested(result)) == {shard_of(name) for name in documents(config)} == set(current)
    assert len(current) == len(documents(config)) - 1  # the two documents of SHARED_SHARD make one request
    for partition, run_key in requested(result).items():
        assert partition in SHARDS.get_partition_keys()
        assert run_key == f"folder:{partition}:{current[partition]}:0"
    stored = json.loads(cursor)
    assert {shard_key(int(s)): fp for s, fp in stored["shards"].items()} == current
    assert stored["generation"] == 1


def test_the_sensor_cursor_stays_small_with_documents_in_every_shard(config):
    """The cursor is shown on the sensor's page: every shard's fingerprint, not every shard's full digest."""
    for i in range(400):  # enough documents that every one of the 64 shards holds some
        (corpus(config) / f"company-{i}.md").write_text(f"# Company {i}\n\nCompany {i} makes part {i}.\n")
    result, cursor = sensor_tick(config)
    assert len(requested(result)) == len(json.loads(cursor)["shards"]) == SHARDS.get_num_partitions()
    assert len(cursor) <= 2000  # 4.8 KB with the full digests


def test_unchanged_sources_after_a_tick_request_nothing(config):
    _, cursor = sensor_tick(config)
    result, next_cursor = sensor_tick(config, cursor)
    assert isinstance(result, SkipReason)
    assert without_scan_time(next_cursor) == without_scan_time(cursor)


def test_an_edited_file_requests_its_shard_only(config):
    first, cursor = sensor_tick(config)
    path = corpus(config) / "boltworks.md"
    path.write_text(path.read_text() + "\nBoltworks is owned by Tanabe Holdings.\n")

    result, next_cursor = sensor_tick(config, cursor)

    shard = shard_of("boltworks.md")
    new_fingerprint = fingerprints(config)[shard]
    assert requested(result) == {shard: f"folder:{shard}:{new_fingerprint}:1"}
    assert requested(first)[shard] != requested(result)[shard]  # a new run key, so Dagster does not drop it
    assert json.loads(next_cursor)["shards"][str(shard_of_key(shard))] == new_fingerprint
    assert isinstance(sensor_tick(config, next_cursor)[0], SkipReason)


def test_an_edit_to_one_of_two_documents_in_a_shard_requests_that_shard_once(config):
    _, cursor = sensor_tick(config)
    path = corpus(config) / SHARED_SHARD[0]
    path.write_text(path.read_text().replace("Valencia", "Seville"))
    result, _ = sensor_tick(config, cursor)
    assert list(requested(result)) == [shard_of(SHARED_SHARD[1])]


def test_deleted_and_added_files_request_their_shards(config):
    _, cursor = sensor_tick(config)
    (corpus(config) / ALONE).unlink()
    (corpus(config) / SHARED_SHARD[0]).unlink()
    (corpus(config) / "new-company.md").write_text("# Quillon\n\nQuillon builds lab robots in Turin.\n")

    result, _ = sensor_tick(config, cursor)

    runs = requested(result)
    assert set(runs) == {shard_of(ALONE), shard_of(SHARED_SHARD[1]), shard_of("new-company.md")}
    # A shard whose documents are all gone still runs, so the index forgets them; its run key says so.
    assert runs[shard_of(ALONE)] == f"folder:{shard_of(ALONE)}:empty:1"
    assert runs[shard_of(SHARED_SHARD[1])] == (
        f"folder:{shard_of(SHARED_SHARD[1])}:{fingerprints(config)[shard_of(SHARED_SHARD[1])]}:1"
    )


def test_without_a_cursor_the_index_is_the_baseline(config):
    index_sources(config)
    result, cursor = sensor_tick(config)
    assert isinstance(result, SkipReason)
    assert cursor is not None  # later ticks compare with what this tick saw

    (corpus(config) / ALONE).write_text("# Acme Robotics\n\nAcme Robotics was sold to Boltworks.\n")
    result, _ = sensor_tick(config)
    assert list(requested(result)) == [shard_of(ALONE)]


def test_the_cursor_wins_over_the_index(config):
    index_sources(config)
    (corpus(config) / ALONE).write_text("# Acme Robotics\n\nAcme Robotics was sold to Boltworks.\n")
    first, cursor = sensor_tick(config)
    assert list(requested(first)) == [shard_of(ALONE)]
    # The requested run has not landed, so the index is still behind; the next tick must not ask again.
    result, _ = sensor_tick(config, cursor)
    assert isinstance(result, SkipReason)


def test_daily_schedule_requests_the_shards_that_differ_from_the_index(config, instance):
    index_sources(config)
    assert isinstance(schedule_tick(config, instance), SkipReason)

    (corpus(config) / ALONE).write_text("# Acme Robotics\n\nAcme Robotics was sold to Boltworks.\n")
    result = schedule_tick(config, instance)

    assert list(requested(result)) == [shard_of(ALONE)]
    (request,) = result
    assert request.tags["graphrag/trigger"] == "daily-2025-03-14"
    assert request.run_key == f"{shard_of(ALONE)}:{fingerprints(config)[shard_of(ALONE)]}:0"


def test_daily_schedule_without_an_index_requests_every_shard(config, instance):
    result = schedule_tick(config, instance)
    assert set(requested(result)) == {shard_of(name) for name in documents(config)}
    assert all(r.tags["graphrag/trigger"] == "daily-2025-03-14" for r in result)


def test_a_reverted_edit_gets_a_new_run_key(config):
    _, cursor = sensor_tick(config)
    path = corpus(config) / ALONE
    original = path.read_text()
    path.write_text(original + "\nAn edit that will be reverted.\n")
    edited, cursor = sensor_tick(config, cursor)
    path.write_text(original)
    reverted, _ = sensor_tick(config, cursor)
    (edit_request,) = edited
    (revert_request,) = reverted
    assert edit_request.partition_key == revert_request.partition_key == shard_of(ALONE)
    # Dagster drops a run whose key was ever used; the revert must not reuse the first tick's key for this content.
    first, _ = sensor_tick(config)
    first_key = requested(first)[shard_of(ALONE)]
    assert revert_request.run_key.rsplit(":", 1)[0] == first_key.rsplit(":", 1)[0]  # same content…
    assert revert_request.run_key != first_key  # …new key


def test_each_source_kind_has_its_own_sensor_and_one_without_sources_skips(config):
    
    resources = {"graphrag": GraphRAGResource(config_path=str(config))}
    for kind_sensor in (sensor_of("confluence"), sensor_of("catalog")):
        with build_sensor_context(resources=resources) as context:
            result = kind_sensor(context)
        assert isinstance(result, SkipReason) and "is configured" in result.skip_message
    catalog_dir = config.parent / "catalog"
    catalog_dir.mkdir()
    (catalog_dir / "services.yaml").write_text("services:\n  - {name: payments-api, owner: team-payments}\n")
    settings = yaml.safe_load(config.read_text())
    settings["sources"].append({"name": "svc", "kind": "catalog", "path": "catalog", "poll_interval_seconds": 0})
    config.write_text(yaml.safe_dump(settings))
    with build_sensor_context(resources=resources) as context:
        catalog_requests = sensor_of("catalog")(context)
    # Only the shards holding catalog entities are requested, with the catalog sensor's own run keys.
    catalog_shards = {shard_key(stable_shard(doc_id, SHARD_COUNT)) for doc_id in
                      source_hashes(
                          load_settings(config), "catalog")}
    assert set(requested(catalog_requests)) == catalog_shards
    assert all(key.startswith("catalog:") for key in requested(catalog_requests).values())


def test_a_source_is_scanned_again_only_after_its_poll_interval(config):
    settings = yaml.safe_load(config.read_text())
    settings["sources"][0]["poll_interval_seconds"] = 3600
    config.write_text(yaml.safe_dump(settings))
    _, cursor = sensor_tick(config)
    (corpus(config) / ALONE).write_text("# Acme Robotics\n\nAcme Robotics was sold to Boltworks.\n")

    waiting, same_cursor = sensor_tick(config, cursor)
    assert isinstance(waiting, SkipReason) and "next scan of the folder sources in" in waiting.skip_message
    assert same_cursor == cursor  # nothing was scanned, so nothing is forgotten

    an_hour_ago = {**json.loads(cursor), "scanned_at": json.loads(cursor)["scanned_at"] - 3600}
    result, _ = sensor_tick(config, json.dumps(an_hour_ago))
    assert list(requested(result)) == [shard_of(ALONE)]


def test_daily_corpus_refresh_requests_the_chain_only_when_it_lags_the_shards(instance):
    from dagster import AssetMaterialization

    from graphrag_pipeline.defs.automation.conditions import CORPUS_WIDE_ASSETS
    from graphrag_pipeline.defs.automation.schedules import daily_corpus_refresh


    def tick():
        with build_schedule_context(instance=instance, scheduled_execution_time=TICK_TIME) as context:
            return daily_corpus_refresh(context)

    def materialized(*names: str) -> None:
        for name in names:
            instance.report_runless_asset_event(AssetMaterialization(name, partition="shard-000")
                                                if name == "extracted_elements" else AssetMaterialization(name))

    assert isinstance(tick(), SkipReason)  # nothing built yet
    materialized("extracted_elements", *CORPUS_WIDE_ASSETS)
    assert isinstance(tick(), SkipReason)  # level

    materialized("extracted_elements")  # a shard run landed, and its corpus-wide run never happened
    request = tick()
    assert isinstance(request, RunRequest)
    assert request.tags["graphrag/behind"] == "element_summaries"
    assert request.run_key == "corpus:2025-03-14"

    materialized(*CORPUS_WIDE_ASSETS[:2])  # the chain stopped after the graph (communities failed)
    assert tick().tags["graphrag/behind"] == "communities"


def test_daily_schedule_reruns_a_shard_whose_run_stopped_after_reading(config, instance):
    """The run read the shard's documents (so the index lists them and the sources match) but failed before
    extracting them: comparing sources alone would never run it again."""
    from dagster import AssetMaterialization

    index_sources(config)
    stopped, finished = shard_of(ALONE), shard_of(SHARED_SHARD[0])
    for partition in (stopped, finished):
        instance.report_runless_asset_event(AssetMaterialization("raw_documents", partition=partition))
    instance.report_runless_asset_event(AssetMaterialization("extracted_elements", partition=finished))

    result = schedule_tick(config, instance)

    assert list(requested(result)) == [stopped]
    assert result[0].run_key.startswith(f"unfinished:{stopped}:")
    assert result[0].tags["graphrag/trigger"] == "daily-2025-03-14"


def test_a_source_that_cannot_be_scanned_is_tried_again_after_its_poll_interval(config):
    _, cursor = sensor_tick(config)
    settings = yaml.safe_load(config.read_text())
    settings["sources"][0]["poll_interval_seconds"] = 600
    config.write_text(yaml.safe_dump(settings))
    shutil.rmtree(corpus(config))  # the mount went away
    stale = {**json.loads(cursor), "scanned_at": json.loads(cursor)["scanned_at"] - 600}

    failed, cursor_after = sensor_tick(config, json.dumps(stale))

    assert isinstance(failed, SkipReason)
    assert "scan of the folder sources failed (next try in 600 s)" in failed.skip_message
    assert "does not exist" in failed.skip_message
    # What the last good scan saw is kept, and the next tick waits instead of failing again at once.
    assert without_scan_time(cursor_after) == without_scan_time(cursor)
    waiting, _ = sensor_tick(config, cursor_after)
    assert "next scan of the folder sources in" in waiting.skip_message


def test_one_shard_run_brings_the_whole_corpus_wide_chain_in_one_request(instance):
    """The corpus-wide assets' condition, evaluated as the automation sensor does: shards never materialized (shards
    without documents) do not block it, the four assets are requested together, and once they have run nothing is
    requested again."""
    from dagster import AssetKey, AssetMaterialization, evaluate_automation_conditions

    from graphrag_pipeline.definitions import definitions_with
    from graphrag_pipeline.defs.automation.conditions import CORPUS_WIDE_ASSETS

    defs = definitions_with(GraphRAGResource())
    first = evaluate_automation_conditions(defs=defs, instance=instance)
    assert first.total_requested == 0  # a fresh instance: nothing was updated yet

    instance.report_runless_asset_event(AssetMaterialization("extracted_elements", partition=shard_key(3)))
    after_shard_run = evaluate_automation_conditions(defs=defs, instance=instance, cursor=first.cursor)
    assert after_shard_run.total_requested == len(CORPUS_WIDE_ASSETS)
    assert all(after_shard_run.get_num_requested(AssetKey(name)) == 1 for name in CORPUS_WIDE_ASSETS)

    for name in CORPUS_WIDE_ASSETS:
        instance.report_runless_asset_event(AssetMaterialization(name))
    settled = evaluate_automation_conditions(defs=defs, instance=instance, cursor=after_shard_run.cursor)
    assert settled.total_requested == 0


def test_a_shard_run_landing_on_the_tick_the_chain_ended_brings_the_chain_again(instance):
    """Between two evaluations the corpus-wide run ends and then another shard run lands: the later event wins, so
    the new change is not taken as handled by the run that ended before it. When the chain ends after the shard run
    (a run that built both), nothing is requested."""
    from dagster import AssetKey, AssetMaterialization, evaluate_automation_conditions

    from graphrag_pipeline.definitions import definitions_with
    from graphrag_pipeline.defs.automation.conditions import CORPUS_WIDE_ASSETS

    defs = definitions_with(GraphRAGResource())
    cursor = evaluate_automation_conditions(defs=defs, instance=instance).cursor
    instance.report_runless_asset_event(AssetMaterialization("extracted_elements", partition=shard_key(3)))
    requested = evaluate_automation_conditions(defs=defs, instance=instance, cursor=cursor)
    assert requested.total_requested == len(CORPUS_WIDE_ASSETS)

    for name in CORPUS_WIDE_ASSETS:
        instance.report_runless_asset_event(AssetMaterialization(name))
    instance.report_runless_asset_event(AssetMaterialization("extracted_elements", partition=shard_key(5)))
    again = evaluate_automation_conditions(defs=defs, instance=instance, cursor=requested.cursor)
    assert all(again.get_num_requested(AssetKey(name)) == 1 for name in CORPUS_WIDE_ASSETS)

    instance.report_runless_asset_event(AssetMaterialization("extracted_elements", partition=shard_key(7)))
    for name in CORPUS_WIDE_ASSETS:
        instance.report_runless_asset_event(AssetMaterialization(name))
    settled = evaluate_automation_conditions(defs=defs, instance=instance, cursor=again.cursor)
    assert settled.total_requested == 0


def test_daily_corpus_refresh_skips_the_day_while_a_run_is_in_progress(instance):
    from dagster import AssetMaterialization, DagsterRunStatus
    from dagster._core.test_utils import create_run_for_test

    from graphrag_pipeline.defs.automation.schedules import daily_corpus_refresh

    instance.report_runless_asset_event(AssetMaterialization("extracted_elements", partition=shard_key(0)))
    running = create_run_for_test(instance, job_name="refresh_shards", status=DagsterRunStatus.STARTED)

    with build_schedule_context(instance=instance, scheduled_execution_time=TICK_TIME) as context:
        result = daily_corpus_refresh(context)

    assert isinstance(result, SkipReason) and running.run_id in result.skip_message


def test_the_chain_is_not_requested_again_on_the_ticks_after_it_ran(instance):
    """Each corpus-wide asset's parent was updated after it was requested (by the chain run itself): that must not
    bring it again on a later tick, once the asset itself was updated after the parent."""
    from dagster import AssetMaterialization, evaluate_automation_conditions

    from graphrag_pipeline.definitions import definitions_with
    from graphrag_pipeline.defs.automation.conditions import CORPUS_WIDE_ASSETS

    defs = definitions_with(GraphRAGResource())
    cursor = evaluate_automation_conditions(defs=defs, instance=instance).cursor
    instance.report_runless_asset_event(AssetMaterialization("extracted_elements", partition=shard_key(3)))
    requested = evaluate_automation_conditions(defs=defs, instance=instance, cursor=cursor)
    assert requested.total_requested == len(CORPUS_WIDE_ASSETS)
    cursor = requested.cursor

    for name in CORPUS_WIDE_ASSETS:
        instance.report_runless_asset_event(AssetMaterialization(name))
    for _ in range(3):
        later = evaluate_automation_conditions(defs=defs, instance=instance, cursor=cursor)
        assert later.total_requested == 0
        cursor = later.cursor


@pytest.mark.parametrize("steps_per_tick", [1, 2, 5])
@pytest.mark.parametrize("another_shard_mid_chain", [False, True])
def test_a_backfill_brings_one_corpus_wide_run_while_ticks_fall_inside_it(instance, steps_per_tick,
                                                                          another_shard_mid_chain):
    """The daemon's timeline with real run records: a backfill of 4 shard runs lands; every tick's request becomes a
    run that materializes `steps_per_tick` assets between two ticks (1: a tick after each asset, 5: the whole run
    between two ticks). One corpus-wide run in all, however the ticks fall; a shard run landing after the chain's
    first asset is one more whole chain after it, not the rest of the chain in pieces beside it."""
    from dagster import (
        AssetKey,
        AssetMaterialization,
        DagsterEvent,
        DagsterEventType,
        DagsterRunStatus,
        evaluate_automation_conditions,
    )
    from dagster._core.events import StepMaterializationData

    from graphrag_pipeline.definitions import definitions_with
    from graphrag_pipeline.defs.automation.conditions import CORPUS_WIDE_ASSETS, PER_DOCUMENT_ASSETS

    defs = definitions_with(GraphRAGResource())

    def start(job_name, **kwargs):  # records the run and its planned materializations, as a launched run does
        return instance.create_run_for_job(job_def=defs.resolve_job_def(job_name), status=DagsterRunStatus.STARTED,
                                           **kwargs)

    def materialize(run, name, partition=None):
        instance.report_dagster_event(DagsterEvent(
            DagsterEventType.ASSET_MATERIALIZATION.value, job_name=run.job_name,
            event_specific_data=StepMaterializationData(AssetMaterialization(name, partition=partition))), run.run_id)

    def finish(run):
        instance.report_dagster_event(DagsterEvent(DagsterEventType.RUN_SUCCESS.value, job_name=run.job_name),
                                      run.run_id)

    launched, running = [], []  # the assets of each run launched; [run, assets not yet materialized]
    expected = [CORPUS_WIDE_ASSETS]
    cursor = None

    def tick():
        nonlocal cursor
        result = evaluate_automation_conditions(defs=defs, instance=instance, cursor=cursor)
        cursor = result.cursor
        wanted = [name for name in CORPUS_WIDE_ASSETS if result.get_num_requested(AssetKey(name))]
        if wanted:
            launched.append(wanted)
            running.append([start("refresh_corpus", asset_selection={AssetKey(name) for name in wanted}), wanted[:]])

    tick()
    shards = [3, 5, 7, 9]
    shard_runs = [start("refresh_shards", tags={"dagster/partition": shard_key(shard)}) for shard in shards]
    tick()  # the backfill is in progress
    assert launched == []
    for shard, run in zip(shards, shard_runs):
        for name in PER_DOCUMENT_ASSETS:
            materialize(run, name, shard_key(shard))
        finish(run)
    for _ in range(12):
        tick()
        for _ in range(steps_per_tick):
            for entry in list(running):
                run, remaining = entry
                if remaining:
                    materialize(run, remaining.pop(0))
                else:
                    finish(run)
                    running.remove(entry)
                if another_shard_mid_chain and len(launched) == 1 and len(remaining) == len(CORPUS_WIDE_ASSETS) - 1:
                    another_shard_mid_chain = False
                    late = start("refresh_shards", tags={"dagster/partition": shard_key(11)})
                    for name in PER_DOCUMENT_ASSETS:
                        materialize(late, name, shard_key(11))
                    finish(late)
                    expected.append(CORPUS_WIDE_ASSETS)

    assert launched == expected
