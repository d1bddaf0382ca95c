"""Export an index as Parquet and import it elsewhere: the same answers, nothing embedded or extracted again."""

import json
import shutil

import pandas
import pyarrow
import pyarrow.parquet
import pytest
import yaml

from graphrag_pipeline.cli import main
from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.index.parquet_io import ExportMismatchError, export_index, import_index
from graphrag_pipeline.lib.stores.protocols import SCORE_TOLERANCE
from graphrag_pipeline.query import open_index
from graphrag_pipeline_tests.conftest import build, folder_settings
from graphrag_pipeline_tests.postgres import throwaway_database
from graphrag_pipeline_tests.server_index import (
    assert_same_answers,
    runbooks_with_a_restricted_page,
    server_environment,
)

QUESTIONS = ("What to do when a pod is crash looping?", "Which disk array is degraded?")
# restricted-only questions: the access rule must survive the round trip
RESTRICTED = "Where is the payments ledger database?"


def _answers(settings, **kwargs) -> list[dict]:
    with open_index(settings=settings, **kwargs) as index:
        return [index.query(question, mode=mode, groups=groups).to_dict()
                for question in (*QUESTIONS, RESTRICTED) for mode in ("vector", "graph", "hybrid")
                for groups in ([], ["payments-oncall"])]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    corpus = runbooks_with_a_restricted_page(tmp_path_factory.mktemp("corpus"))
    settings = folder_settings(tmp_path_factory.mktemp("embedded") / "index", corpus)
    build(settings)
    export_dir = tmp_path_factory.mktemp("export")
    config = export_dir.parent / "graphrag.yaml"  # the build's settings, as an operator's configuration file
    config.write_text(yaml.safe_dump({"index_dir": settings.index_dir, "shard_count": settings.shard_count,
                                      "sources": [{"name": "t", "kind": "folder", "path": str(corpus)}]}))
    assert main(["--config", str(config), "export", str(export_dir), "--all"]) == 0
    return settings, corpus, export_dir


def test_export_writes_every_table_and_a_manifest_pandas_reads(built):
    settings, _, export_dir = built
    manifest = json.loads((export_dir / "manifest.json").read_text())
    assert manifest["embedder"]["dimension"] > 0 and manifest["extractor_key"]
    assert manifest["contains_restricted_text"] is True
    entities = pandas.read_parquet(export_dir / "entities.parquet")
    assert len(entities) == manifest["counts"]["entities"] > 0
    assert {"name", "type", "description"} <= set(entities.columns)
    chunks = pandas.read_parquet(export_dir / "chunks.parquet")
    assert chunks["vector"].map(len).eq(manifest["embedder"]["dimension"]).all()
    documents = pandas.read_parquet(export_dir / "documents.parquet").set_index("doc_id")
    assert list(documents.loc["t:ledger.md", "access_groups"]) == ["payments-oncall"]
    assert all(manifest["counts"][t] > 0 for t in ("documents", "mentions", "relationships", "communities"))


def test_the_exported_relationships_join_to_the_entities(built):
    """``relationships.source`` and ``target`` were null in every row; now each end is an id that joins
    ``entities.element_id`` and a name, and both tables list their documents."""
    _, _, export_dir = built
    entities = pandas.read_parquet(export_dir / "entities.parquet")
    relationships = pandas.read_parquet(export_dir / "relationships.parquet")
    assert relationships[["source_id", "target_id", "source", "target"]].notna().all().all()
    joined = relationships.merge(entities, left_on="source_id", right_on="element_id", suffixes=("", "_entity"))
    assert len(joined) == len(relationships) and (joined["source"] == joined["name"]).all()
    assert relationships["target_id"].isin(entities["element_id"]).all()
    assert relationships["doc_ids"].map(len).gt(0).all() and entities["doc_ids"].map(len).gt(0).all()


def test_export_without_all_is_refused(built, capsys):
    settings, _, export_dir = built
    assert main(["--index-dir", settings.index_dir, "export", str(export_dir / "again")]) == 2
    assert "--all" in capsys.readouterr().err


def test_import_into_a_fresh_index_answers_the_same_without_embedding_or_extracting(built, tmp_path):
    settings, corpus, export_dir = built
    target = folder_settings(tmp_path / "index", corpus)
    workspace = Workspace(target)
    try:
        reports = import_index(workspace, export_dir)
    finally:
        workspace.close()
    counts = {r.stage: r.counts for r in reports}
    assert counts["embeddings"].get("embedded", 0) == 0 and counts["embeddings"]["embedding_cache_hits"] > 0
    assert counts["graph"]["embedded"] == 0 and counts["graph"]["entities_upserted"] > 0  # names from the export
    assert counts["extracted_elements"].get("extracted", 0) == 0
    assert_same_answers(_answers(target), _answers(settings))


@pytest.mark.slow
@pytest.mark.server
def test_import_into_postgresql_bolt_and_qdrant_answers_the_same(built, tmp_path, postgres_server, monkeypatch):
    """The backend migration path: an embedded index into the production tier, configured by the environment."""
    from graphrag_pipeline_tests.contract.bolt_server import arcadedb_bolt_server

    settings, corpus, export_dir = built
    bolt = arcadedb_bolt_server()
    with throwaway_database(postgres_server) as database:
        environment = server_environment(postgres_server, database, bolt, bolt.create_database("import"))
        for name, value in {**environment, "VECTOR_BACKEND": "qdrant", "QDRANT_PATH": str(tmp_path / "qdrant")}.items():
            monkeypatch.setenv(name, value)
        target = folder_settings(tmp_path / "index", corpus)
        assert (target.backends.state, target.backends.graph, target.backends.vector) == ("postgres", "neo4j", "qdrant")
        with Workspace(target) as workspace:
            import_index(workspace, export_dir)
        on_servers = _answers(target)
    assert not (tmp_path / "index").exists()  # everything went to the servers
    assert_same_answers(on_servers, _answers(settings), score_tolerance=SCORE_TOLERANCE)


def test_import_refuses_an_export_of_another_embedder(built, tmp_path):
    _, corpus, export_dir = built
    copy = tmp_path / "export"
    shutil.copytree(export_dir, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["embedder"]["model"] = "some-other-model"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    workspace = Workspace(folder_settings(tmp_path / "index", corpus))
    try:
        with pytest.raises(ExportMismatchError, match="some-other-model"):
            import_index(workspace, copy)
        assert workspace.state.document_count() == 0  # refused before anything was written
    finally:
        workspace.close()


def test_export_is_idempotent_and_import_twice_changes_nothing(built, tmp_path):
    settings, corpus, export_dir = built
    target = folder_settings(tmp_path / "index", corpus)
    for _ in range(2):
        workspace = Workspace(target)
        try:
            import_index(workspace, export_dir)
        finally:
            workspace.close()
    workspace = Workspace(target)
    try:
        again = export_index(workspace, tmp_path / "re-export")
    finally:
        workspace.close()
    original = json.loads((export_dir / "manifest.json").read_text())
    assert again["counts"] == original["counts"]
    for table in ("documents", "chunks", "entities", "relationships", "communities", "community_summaries"):
        assert pandas.read_parquet(tmp_path / "re-export" / f"{table}.parquet").equals(
            pandas.read_parquet(export_dir / f"{table}.parquet")), table


def test_import_of_an_unfinished_export_names_the_missing_manifest(tmp_path):
    workspace = Workspace(folder_settings(tmp_path / "index", tmp_path))
    try:
        with pytest.raises(FileNotFoundError, match="manifest.json"):
            import_index(workspace, tmp_path)
    finally:
        workspace.close()


def test_vectors_are_fixed_size_and_communities_are_typed_columns(built):
    """`vector` was a variable-length list and communities were JSON inside a string column: an array reader needs
    the size in the schema, and a community's members and a summary's text are columns of their own."""
    _, _, export_dir = built
    manifest = json.loads((export_dir / "manifest.json").read_text())
    dimension = manifest["embedder"]["dimension"]
    for table in ("chunks", "embeddings"):
        field = pyarrow.parquet.read_schema(export_dir / f"{table}.parquet").field("vector")
        assert pyarrow.types.is_fixed_size_list(field.type) and field.type.list_size == dimension, table
    communities = pandas.read_parquet(export_dir / "communities.parquet")
    assert communities["entity_ids"].map(len).gt(0).all()
    top = communities[communities["level"] == 0]
    assert top["parent_id"].isna().all() and communities[communities["level"] > 0]["parent_id"].notna().all()
    summaries = pandas.read_parquet(export_dir / "community_summaries.parquet")
    assert summaries["title"].str.len().gt(0).all() and summaries["summary"].str.len().gt(0).all()
    assert summaries["written_from"].map(len).gt(0).all() and summaries["level"].ge(0).all()
    assert set(summaries["community_id"]) <= set(communities["community_id"])
    documents = pyarrow.parquet.read_table(export_dir / "documents.parquet")
    assert documents.schema.field("last_modified").type == pyarrow.timestamp("ms", tz="UTC")
    folder_documents = [row for row in documents.to_pylist() if "modified" in json.loads(row["metadata"])]
    assert folder_documents and all(
        row["last_modified"].isoformat(timespec="seconds") == json.loads(row["metadata"])["modified"]
        for row in folder_documents)
