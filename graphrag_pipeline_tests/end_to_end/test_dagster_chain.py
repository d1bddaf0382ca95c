"""The eight assets materialized by Dagster itself (not the stage functions), over the full shard range in one run."""

import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from dagster import (
    AssetKey,
    DagsterInstance,
    ExecuteInProcessResult,
    SkipReason,
    build_schedule_context,
    build_sensor_context,
    instance_for_test,
)

from graphrag_pipeline.definitions import definitions_with
from graphrag_pipeline.defs.automation.schedules import daily_refresh
from graphrag_pipeline.defs.automation.sensors import sensor_of
from graphrag_pipeline.defs.partitions import SHARD_COUNT, shard_key, shard_of_key
from graphrag_pipeline.defs.resources import GraphRAGResource
from graphrag_pipeline.lib.core.ids import stable_shard
from graphrag_pipeline.query import open_index
from graphrag_pipeline_tests.conftest import FIXTURES

pytestmark = pytest.mark.slow

SOURCE = "t"
ASSETS = ["raw_documents", "chunks", "embeddings", "extracted_elements",
          "element_summaries", "graph", "communities", "community_summaries"]
PER_DOCUMENT = ASSETS[:4]
ALL_SHARDS = [shard_key(i) for i in range(SHARD_COUNT)]
EDITED = "zentrix-labs.md"
ADDED_SENTENCE = "\nZentrix Labs is owned by Orbital Holdings, an investment group based in Geneva.\n"


def range_tags(first: str, last: str) -> dict[str, str]:
    # Dagster's documented run tags for a single run over a partition range (what a single-run backfill launches).
    return {"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last}


@dataclass(frozen=True)
class Project:
    config: Path
    corpus: Path
    instance: DagsterInstance

    @property
    def documents(self) -> list[str]:
        return sorted(p.name for p in self.corpus.glob("*.md"))

    def materialize(self, first: str, last: str) -> ExecuteInProcessResult:
        """Launch the `build_index` job as shipped, with the resource pointed at this project's configuration."""
        defs = definitions_with(GraphRAGResource(config_path=str(self.config)))
        job = defs.resolve_job_def("build_index")
        result = job.execute_in_process(instance=self.instance, tags=range_tags(first, last))
        assert result.success
        return result


def metadata(result: ExecuteInProcessResult) -> dict[str, dict[str, object]]:
    """Asset name -> its materialization metadata (a range run repeats the same metadata for every partition)."""
    by_asset: dict[str, dict[str, object]] = {}
    for event in result.get_asset_materialization_events():
        materialization = event.step_materialization_data.materialization
        values = {key: value.value for key, value in materialization.metadata.items()}
        name = materialization.asset_key.to_user_string()
        assert by_asset.setdefault(name, values) == values, name
    return by_asset


def materialized_partitions(result: ExecuteInProcessResult, asset: str) -> list[str | None]:
    return sorted(
        (e.step_materialization_data.materialization.partition for e in result.get_asset_materialization_events()
         if e.asset_key == AssetKey(asset)),
        key=str,
    )


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("dagster_chain")
    corpus = root / "corpus"
    corpus.mkdir()
    for folder in ("runbooks", "multihop"):
        for path in (FIXTURES / folder).glob("*.md"):
            shutil.copy(path, corpus / path.name)
    config = root / "graphrag.yaml"
    config.write_text(yaml.safe_dump({
        "index_dir": "index",
        "shard_count": SHARD_COUNT,
        "sources": [{"name": SOURCE, "kind": "folder", "path": "corpus"}],
    }))
    # In-memory run and event storage: a full-range run writes 64 events per partitioned asset, which SQLite-backed
    # instances make several times slower without testing anything more.
    return Project(config=config, corpus=corpus, instance=DagsterInstance.ephemeral())


@pytest.fixture(scope="module")
def first_run(project):
    return project.materialize(ALL_SHARDS[0], ALL_SHARDS[-1])


@pytest.fixture(scope="module")
def second_run(project, first_run):
    return project.materialize(ALL_SHARDS[0], ALL_SHARDS[-1])


@pytest.fixture(scope="module")
def edit_run(project, second_run):
    path = project.corpus / EDITED
    path.write_text(path.read_text() + ADDED_SENTENCE)
    shard = shard_key(stable_shard(f"{SOURCE}:{EDITED}", SHARD_COUNT))
    return shard, project.materialize(shard, shard)


def test_one_run_materializes_every_asset_over_the_whole_shard_range(project, first_run):
    for asset in PER_DOCUMENT:
        assert materialized_partitions(first_run, asset) == ALL_SHARDS, asset
    for asset in ASSETS[4:]:
        assert materialized_partitions(first_run, asset) == [None], asset

    meta = metadata(first_run)
    assert set(meta) == set(ASSETS)
    # The asset checks run with the assets they guard, and a fresh build passes every one.
    evaluations = {e.check_name: e for e in first_run.get_asset_check_evaluations()}
    assert len(evaluations) == 8
    assert all(e.passed for e in evaluations.values()), {n: e.description for n, e in evaluations.items()}
    docs = len(project.documents)
    assert meta["raw_documents"]["documents"] == meta["raw_documents"]["new"] == docs
    assert meta["raw_documents"]["quarantined"] == 0
    assert meta["chunks"]["documents_rechunked"] == docs
    assert meta["chunks"]["chunks_written"] >= docs
    assert meta["embeddings"]["chunks_upserted"] == meta["chunks"]["chunks_written"]
    assert meta["embeddings"]["dimension"] == 384
    assert meta["extracted_elements"]["extracted"] == meta["chunks"]["chunks_written"]
    assert meta["extracted_elements"]["entity_mentions"] > 0
    assert meta["element_summaries"]["entity_total"] > 0
    assert meta["graph"]["entities"] == meta["element_summaries"]["entity_total"]
    assert meta["graph"]["relationships"] > 0
    assert meta["communities"]["communities"] > 0
    # Communities below `min_size` entities are kept but not summarized.
    assert 0 < meta["community_summaries"]["summarized"] == meta["community_summaries"]["communities"]
    assert meta["community_summaries"]["communities"] <= meta["communities"]["communities"]
    for asset in ASSETS:
        assert "seconds_total" in meta[asset], asset
    assert meta["raw_documents"]["sample"].startswith("| doc_id | title | chars |")
    assert "Acme Robotics" in meta["element_summaries"]["sample"]


def test_a_range_runs_counts_say_they_are_the_runs_and_each_partition_observes_what_it_holds(
        project, first_run, edit_run):
    """Dagster gives one run's materialization to every partition it covers (it has no per-partition metadata for a
    single-run backfill), so shard-010 said `embedded 406` holding 4 chunks: a range run's counts now say they cover
    the run, and each partition's documents and chunks are its own observation; a one-shard run's counts are its."""
    meta = metadata(first_run)
    for asset in PER_DOCUMENT:
        assert meta[asset]["partitions_in_run"] == len(ALL_SHARDS), asset
        assert meta[asset]["counts_cover"].startswith("the whole run"), asset
    held = {}
    for event in first_run.all_events:
        if event.event_type_value == "ASSET_OBSERVATION" and event.asset_key == AssetKey("chunks"):
            observation = event.event_specific_data.asset_observation
            held[observation.partition] = {k: v.value for k, v in observation.metadata.items()}
    assert sorted(held) == ALL_SHARDS
    assert sum(h["documents"] for h in held.values()) == len(project.documents)
    assert sum(h["chunks"] for h in held.values()) == meta["chunks"]["chunks_written"]
    assert any(h["documents"] == 0 for h in held.values())  # an empty shard says it holds nothing
    _, one_shard = edit_run
    assert "partitions_in_run" not in metadata(one_shard)["chunks"]


def test_the_materialized_index_answers_questions(project, first_run):
    with open_index(project.config) as index:
        response = index.query("Who founded Acme Robotics?", top_k=5)
        assert response.doc_ids[0] == "t:acme-robotics.md"
        # Hybrid retrieval reached the graph the `graph` asset wrote, not only the chunk vectors.
        assert not response.fell_back_to_vector
        assert "Acme Robotics" in [e.name for e in response.entities_mentioned]
        crash = index.query("What should I check when a pod is crash looping?", mode="vector", top_k=3)
        assert crash.doc_ids[0] == "t:KubePodCrashLooping.md"


def test_automation_sees_nothing_to_do_after_a_full_materialization(project, first_run):
    resources = {"graphrag": GraphRAGResource(config_path=str(project.config))}
    # Without a cursor the sensor's baseline is the index itself, so a full build must leave it nothing to request.
    with build_sensor_context(resources=resources) as context:
        assert isinstance(sensor_of("folder")(context), SkipReason)
    tick_time = datetime(2025, 1, 1, 3, tzinfo=timezone.utc)
    # A schedule context needs an instance it can reference (the project's is in memory); the schedule's comparison
    # of sources with the index is what this test is about.
    with instance_for_test() as instance, build_schedule_context(
        instance=instance, resources=resources, scheduled_execution_time=tick_time
    ) as context:
        assert isinstance(daily_refresh(context), SkipReason)


def test_rematerializing_unchanged_sources_changes_nothing(first_run, second_run, project):
    before, after = metadata(first_run), metadata(second_run)
    docs = len(project.documents)
    assert after["raw_documents"]["unchanged"] == docs
    assert after["raw_documents"]["new"] == after["raw_documents"]["changed"] == after["raw_documents"]["deleted"] == 0
    assert after["chunks"]["documents_rechunked"] == after["chunks"]["chunks_written"] == 0
    assert after["embeddings"].get("embedded", 0) == 0
    assert after["embeddings"]["chunks_upserted"] == 0
    assert after["embeddings"]["chunks_unchanged"] == before["embeddings"]["chunks_upserted"]
    assert after["extracted_elements"]["extracted"] == 0
    assert after["element_summaries"]["entity_changed"] == after["element_summaries"]["relationship_changed"] == 0
    assert after["graph"]["entities"] == before["graph"]["entities"]
    assert after["graph"]["relationships"] == before["graph"]["relationships"]
    assert after["graph"]["entities_written"] == after["graph"]["relationships_written"] == 0
    assert after["communities"]["communities"] == before["communities"]["communities"]
    assert after["community_summaries"]["summarized"] == 0


def test_an_edit_rebuilds_only_its_document(project, second_run, edit_run):
    shard, result = edit_run
    for asset in PER_DOCUMENT:
        assert materialized_partitions(result, asset) == [shard], asset
    meta = metadata(result)
    in_shard = [name for name in project.documents
                if stable_shard(f"{SOURCE}:{name}", SHARD_COUNT) == shard_of_key(shard)]
    assert meta["raw_documents"]["documents"] == len(in_shard)
    assert meta["raw_documents"]["changed"] == 1
    assert meta["raw_documents"]["unchanged"] == len(in_shard) - 1
    assert meta["chunks"]["documents_rechunked"] == 1
    assert meta["embeddings"]["embedded"] >= 1
    assert meta["extracted_elements"]["extracted"] >= 1
    assert meta["graph"]["entities_written"] >= 1
    assert meta["graph"]["entities"] > metadata(second_run)["graph"]["entities"]

    with open_index(project.config) as index:
        response = index.query("Who owns Zentrix Labs?", mode="vector", top_k=3)
        assert response.results[0].doc_id == f"{SOURCE}:{EDITED}"
        assert "Orbital Holdings" in response.results[0].text
