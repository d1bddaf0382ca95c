"""The index checks pass on a fresh build and fail, saying what is wrong, on an index damaged in each way they guard."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
import yaml

from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core.models import Quarantined, VectorPoint
from graphrag_pipeline.lib.index import checks
from graphrag_pipeline.lib.stores.edge_vectors import EdgeVectorStore
from graphrag_pipeline.lib.stores.protocols import CHUNKS, COMMUNITIES, ENTITIES
from graphrag_pipeline.lib.stores.state.sql import COMMUNITY_PAYLOADS
from graphrag_pipeline_tests.conftest import FIXTURES, build, folder_settings

pytestmark = pytest.mark.slow

def graph_contents(ws: Workspace) -> checks.GraphContents:
    return checks.GraphContents.read(ws.graph_store)


ALL_CHECKS = {
    "chunk_vectors": lambda ws: checks.chunk_vectors(ws.state, ws.published_vectors),
    "entity_vectors": lambda ws: checks.entity_vectors(ws.state, ws.published_vectors),
    "community_vectors": lambda ws: checks.community_vectors(ws.state, ws.published_vectors),
    "graph_matches_elements": lambda ws: checks.graph_matches_elements(ws.state, graph_contents(ws)),
    "relationships_have_entities": lambda ws: checks.relationships_have_entities(graph_contents(ws)),
    "elements_have_provenance": lambda ws: checks.elements_have_provenance(graph_contents(ws)),
    "communities_cover_graph": lambda ws: checks.communities_cover_graph(ws.state, ws.graph_store),
    "quarantine_share": lambda ws: checks.quarantine_share(ws.state, ws.settings.checks.max_quarantine_share),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    index = tmp_path_factory.mktemp("checked") / "index"
    build(folder_settings(index, FIXTURES / "multihop"))
    return index


@pytest.fixture
def index(built, tmp_path) -> Path:
    """A private copy of the built index, free to damage."""
    copy = tmp_path / "index"
    shutil.copytree(built, copy)
    return copy


def run_checks(index: Path) -> dict[str, checks.CheckOutcome]:
    with Workspace(folder_settings(index, FIXTURES / "multihop")) as ws:
        return {name: check(ws) for name, check in ALL_CHECKS.items()}


def failing(outcomes: dict[str, checks.CheckOutcome]) -> set[str]:
    return {name for name, outcome in outcomes.items() if not outcome.passed}


def test_a_fresh_build_passes_every_check(index):
    outcomes = run_checks(index)
    assert failing(outcomes) == set(), {n: o.description for n, o in outcomes.items() if not o.passed}
    assert outcomes["chunk_vectors"].metadata["expected"] > 0
    assert outcomes["communities_cover_graph"].metadata["connected_entities"] > 0


@pytest.mark.parametrize("collection, check", [(CHUNKS, "chunk_vectors"), (ENTITIES, "entity_vectors"),
                                               (COMMUNITIES, "community_vectors")])
def test_a_collection_missing_points_fails_its_check(index, collection, check):
    store = EdgeVectorStore(index / "vectors")
    removed = sorted(store.point_ids(collection))[:3]
    store.delete(collection, removed)
    store.publish()
    store.close()

    outcome = run_checks(index)[check]

    assert failing(run_checks(index)) == {check}
    assert outcome.metadata["missing"] == 3
    assert f"3 of {outcome.metadata['expected']:,}" in outcome.description
    assert f"published `{collection}` collection" in outcome.description
    assert removed[0] in outcome.description  # the operator gets ids to look at


def test_unpublished_writes_are_not_what_queries_see(index):
    """Points deleted in the writer's working copy but never published: readers still have them, so the check (which
    reads the published version) passes — and fails once the damage is published."""
    store = EdgeVectorStore(index / "vectors")
    store.delete(CHUNKS, sorted(store.point_ids(CHUNKS))[:1])
    assert run_checks(index)["chunk_vectors"].passed
    store.publish()
    store.close()
    assert not run_checks(index)["chunk_vectors"].passed


def test_a_relationship_to_a_deleted_entity_fails(index):
    with sqlite3.connect(index / "graph.sqlite") as conn:  # damage below the store's API, as a crash could
        (stored_id,) = conn.execute("SELECT e.entity_id FROM relationships r JOIN entities e ON e.entity_key = r.source_key "
                                    "ORDER BY r.relationship_id LIMIT 1").fetchone()
        conn.execute("DELETE FROM entities WHERE entity_id = ?", (stored_id,))
    source_id = f"ent-{stored_id.hex()}"  # the file keeps the pipeline's ids as their bytes

    outcomes = run_checks(index)

    assert {"relationships_have_entities", "graph_matches_elements"} <= failing(outcomes)
    assert "point at a missing entity" in outcomes["relationships_have_entities"].description
    assert source_id in outcomes["graph_matches_elements"].description


def test_an_entity_without_provenance_fails(index):
    with sqlite3.connect(index / "graph.sqlite") as conn:
        columns = [row[1] for row in conn.execute("PRAGMA table_info(entities)")]
        assert "doc_ids" in columns
        (stored_id,) = conn.execute("SELECT entity_id FROM entities ORDER BY entity_id LIMIT 1").fetchone()
        conn.execute("UPDATE entities SET doc_ids = '[]' WHERE entity_id = ?", (stored_id,))
    entity_id = f"ent-{stored_id.hex()}"

    outcome = run_checks(index)["elements_have_provenance"]

    assert not outcome.passed and entity_id in outcome.description


def test_communities_that_miss_connected_entities_fail(index):
    with Workspace(folder_settings(index, FIXTURES / "multihop")) as ws:
        ws.state.write_payloads(COMMUNITY_PAYLOADS, {}, replace_all=True)

    outcome = run_checks(index)["communities_cover_graph"]

    assert not outcome.passed
    assert outcome.metadata["uncovered"] == outcome.metadata["connected_entities"] > 0


def test_quarantine_above_the_threshold_fails_and_lists_the_reasons(index):
    with Workspace(folder_settings(index, FIXTURES / "multihop")) as ws:
        items = sorted(ws.state.seen_source_hashes())
        half = items[: len(items) // 2]
        ws.state.quarantine([Quarantined("sources", item, f"cannot read /srv/{item}: bad bytes") for item in half])
        chunk = ws.state.chunk_ids()[0]
        ws.state.quarantine([Quarantined("extraction", chunk, "unusable model output")])

    outcome = run_checks(index)["quarantine_share"]

    assert not outcome.passed
    assert outcome.description.startswith("quarantine above 5% in ")
    assert f"sources: {len(half)} of {len(items)} items (50.0%)" in outcome.description
    assert outcome.metadata["sources_share"] == 0.5
    assert f"cannot read ×{len(half)}" in outcome.description  # reasons grouped without the paths they name
    assert "unusable model output ×1" in outcome.description
    with Workspace(folder_settings(index, FIXTURES / "multihop", checks={"max_quarantine_share": 0.6})) as ws:
        assert ALL_CHECKS["quarantine_share"](ws).passed  # the threshold is the configured one


def test_quarantine_of_items_that_are_gone_no_longer_counts(index):
    """A bad file that was deleted since, or a failed chunk of a document edited since, stays on record but must not
    fail every later run."""
    with Workspace(folder_settings(index, FIXTURES / "multihop")) as ws:
        ws.state.quarantine([Quarantined("sources", f"t:deleted-{i}.md", "cannot decode") for i in range(10)])
        ws.state.quarantine([Quarantined("extraction", "chunk-of-an-old-version", "unusable model output")])
        assert len(ws.state.quarantined()) == 11

    outcome = run_checks(index)["quarantine_share"]  # at the default 5 %

    assert outcome.passed, outcome.description
    assert outcome.metadata["quarantined"] == 0


def test_a_dagster_run_over_a_damaged_index_fails_the_check_in_the_run(tmp_path):
    """Vectors lost from the published collection while the state still lists them, and as many strangers in their
    place: the build's reconciliation compares counts before ids, so a re-materialization sees nothing to restore
    and only the check tells — as an ERROR evaluation of the run, with the reason."""
    from graphrag_pipeline.definitions import definitions_with
    from graphrag_pipeline.defs.partitions import SHARD_COUNT, shard_key
    from graphrag_pipeline.defs.resources import GraphRAGResource

    config = tmp_path / "graphrag.yaml"
    source = {"name": "t", "kind": "folder", "path": str(FIXTURES / "multihop")}
    config.write_text(yaml.safe_dump({"index_dir": "index", "shard_count": SHARD_COUNT, "sources": [source]}))
    job = definitions_with(GraphRAGResource(config_path=str(config))).resolve_job_def("build_index")
    every_shard = {"dagster/asset_partition_range_start": shard_key(0),
                   "dagster/asset_partition_range_end": shard_key(SHARD_COUNT - 1)}
    assert all(e.passed for e in job.execute_in_process(tags=every_shard).get_asset_check_evaluations())

    store = EdgeVectorStore(tmp_path / "index" / "vectors")
    store.delete(CHUNKS, sorted(store.point_ids(CHUNKS))[:2])
    stranger = np.zeros(store.dimension(CHUNKS), dtype=np.float32)
    stranger[0] = 1.0
    store.upsert(CHUNKS, [VectorPoint(f"chunk-stranger-{n}", stranger, {"doc_ids": ["t:gone.md"]}) for n in range(2)])
    store.publish()
    store.close()
    result = job.execute_in_process(tags=every_shard)

    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert {name for name, e in evaluations.items() if not e.passed} == {"every_chunk_has_a_published_vector"}
    failed = evaluations["every_chunk_has_a_published_vector"]
    assert failed.severity.value == "ERROR"
    assert "2 of" in failed.description and "have no vector in the published `chunks` collection" in failed.description


def test_a_graph_check_runs_alone_and_a_broken_graph_blocks_the_communities(tmp_path):
    """The three graph checks were one unsubsettable multi-check (the UI's Execute greyed out), and none was blocking:
    a graph that is not the index's went on into communities. Now each runs alone, and a failed structural one (a
    relationship to a missing entity, an element without provenance) stops the chain."""
    from dagster import AssetCheckKey, AssetKey, AssetSelection, Definitions, define_asset_job

    from graphrag_pipeline.definitions import definitions_with
    from graphrag_pipeline.defs.partitions import SHARD_COUNT, shard_key
    from graphrag_pipeline.defs.resources import GraphRAGResource

    config = tmp_path / "graphrag.yaml"
    source = {"name": "t", "kind": "folder", "path": str(FIXTURES / "multihop")}
    config.write_text(yaml.safe_dump({"index_dir": "index", "shard_count": SHARD_COUNT, "sources": [source]}))
    alone = AssetCheckKey(AssetKey("graph"), "relationships_connect_existing_entities")
    defs = Definitions.merge(definitions_with(GraphRAGResource(config_path=str(config))),
                             Definitions(jobs=[define_asset_job("one_check", selection=AssetSelection.checks(alone))]))
    every_shard = {"dagster/asset_partition_range_start": shard_key(0),
                   "dagster/asset_partition_range_end": shard_key(SHARD_COUNT - 1)}
    assert defs.resolve_job_def("build_index").execute_in_process(tags=every_shard).success

    only = defs.resolve_job_def("one_check").execute_in_process()
    assert [(e.check_name, e.passed) for e in only.get_asset_check_evaluations()] == [(alone.name, True)]

    with sqlite3.connect(tmp_path / "index" / "graph.sqlite") as conn:  # damage no re-sync notices
        conn.execute("UPDATE entities SET doc_ids = '[]' WHERE entity_id = "
                     "(SELECT entity_id FROM entities ORDER BY entity_id LIMIT 1)")
    corpus_run = defs.resolve_job_def("refresh_corpus").execute_in_process(raise_on_error=False)
    evaluations = {e.check_name: e.passed for e in corpus_run.get_asset_check_evaluations()}
    assert evaluations["elements_name_their_documents"] is False
    materialized = {e.asset_key.to_user_string() for e in corpus_run.get_asset_materialization_events()}
    assert "graph" in materialized and not {"communities", "community_summaries"} & materialized
