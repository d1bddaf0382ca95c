"""One backend factory: the stores every process opens follow the validated settings (files, then the environment)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from graphrag_pipeline.lib.compose.backends import open_graph_store, open_vector_store, store_kinds
from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core.config import ENVIRONMENT_OVERRIDES, load_settings
from graphrag_pipeline.lib.stores.edge_vectors import EdgeVectorReader, EdgeVectorStore
from graphrag_pipeline.lib.stores.embedded_graph import EmbeddedGraphStore
from graphrag_pipeline.lib.stores.neo4j_graph import Neo4jGraphStore
from graphrag_pipeline_tests.cli_process import CLI, cli_env
from graphrag_pipeline_tests.conftest import FIXTURES

SECRETS = ("NEO4J_PASSWORD", "QDRANT_API_KEY")


@pytest.fixture
def clean_env(monkeypatch):
    for name in (*ENVIRONMENT_OVERRIDES, *SECRETS):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_embedded_is_the_default_for_every_process(clean_env, tmp_path):
    settings = load_settings(index_dir=str(tmp_path))
    assert (settings.backends.graph, settings.backends.vector) == ("embedded", "embedded")
    with Workspace(settings) as workspace:  # what the stages, `build` and `eval` open
        assert isinstance(workspace.graph_store, EmbeddedGraphStore)
        assert isinstance(workspace.vector_store, EdgeVectorStore)
    assert store_kinds(settings) == {"graph": "sqlite", "vectors": "qdrant", "state": "sqlite"}


def test_the_environment_overrides_the_configuration_file(clean_env, tmp_path):
    config = tmp_path / "graphrag.yaml"
    config.write_text("backends: {graph: embedded, neo4j: {uri: 'bolt://from-file:7687', user: file-user}}\n")
    clean_env.setenv("GRAPH_BACKEND", "Neo4j")
    clean_env.setenv("VECTOR_BACKEND", "qdrant")
    clean_env.setenv("NEO4J_URI", "bolt://graph.internal:7687")
    clean_env.setenv("QDRANT_URL", "http://vectors.internal:6333")
    clean_env.setenv("NEO4J_PASSWORD", "not-in-settings")

    settings = load_settings(config)

    assert settings.backends.graph == "neo4j" and settings.backends.vector == "qdrant"
    assert settings.backends.neo4j.uri == "bolt://graph.internal:7687"
    assert settings.backends.neo4j.user == "file-user"  # what the environment does not set, the file does
    assert settings.backends.qdrant.url == "http://vectors.internal:6333"
    assert "not-in-settings" not in settings.model_dump_json()  # secrets are read when a store opens, never kept
    assert store_kinds(settings)["graph"] == "neo4j"


def test_unknown_backend_and_missing_settings_are_clear_errors(clean_env, tmp_path):
    clean_env.setenv("GRAPH_BACKEND", "cassandra")
    with pytest.raises(ValueError, match="GRAPH_BACKEND='cassandra': expected one of embedded, neo4j"):
        load_settings(index_dir=str(tmp_path))
    clean_env.setenv("GRAPH_BACKEND", "neo4j")
    with pytest.raises(ValueError, match=r"backends.neo4j.uri must be set .*\$NEO4J_URI"):
        open_graph_store(load_settings(index_dir=str(tmp_path)), read_only=True)
    clean_env.setenv("NEO4J_URI", "bolt://127.0.0.1:1")
    clean_env.setenv("NEO4J_USER", "neo4j")
    with pytest.raises(ValueError, match=r"\$NEO4J_PASSWORD must be set"):
        open_graph_store(load_settings(index_dir=str(tmp_path)), read_only=True)
    clean_env.setenv("VECTOR_BACKEND", "qdrant")
    with pytest.raises(ValueError, match=r"backends.qdrant.url must be set"):
        open_vector_store(load_settings(index_dir=str(tmp_path)), reader=True)


def test_readers_get_the_published_version(clean_env, tmp_path):
    settings = load_settings(index_dir=str(tmp_path))
    writer = open_vector_store(settings)
    writer.ensure_collection("chunks", 2)
    writer.publish()
    writer.close()
    reader = open_vector_store(settings, reader=True)
    try:
        assert isinstance(reader, EdgeVectorReader)
    finally:
        reader.close()


def _mini_set(root: Path) -> Path:
    set_dir = root / "mini-set"
    shutil.copytree(FIXTURES / "eval_set", set_dir)
    questions = [
        ("q1", "Who developed person-centered therapy?", "musique-0001"),
        ("q2", "Which institute publishes the Journal of Mathematical Physics?", "musique-0000"),
        ("q3", "Who publishes the Journal of Small Business Management?", "musique-0002"),
    ]
    (set_dir / "questions.jsonl").write_text("".join(
        json.dumps({"id": qid, "question": text, "gold_ids": [gold], "type": "1hop"}) + "\n"
        for qid, text, gold in questions))
    return set_dir


def _eval(set_dir: Path, env: dict[str, str], cwd: Path) -> dict:
    result = subprocess.run([*CLI, "eval", str(set_dir), "--json"], cwd=cwd,
                            env={**env, "PYTHONPATH": cli_env()["PYTHONPATH"]}, capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.slow
@pytest.mark.server
def test_eval_with_graph_backend_neo4j_builds_into_and_queries_the_bolt_server(tmp_path):
    """`GRAPH_BACKEND=neo4j graphrag-pipeline eval <set>` (here against ArcadeDB's Bolt server) writes the graph to
    the server and answers from it, with the same recall as the embedded graph."""
    from graphrag_pipeline_tests.contract.bolt_server import arcadedb_bolt_server

    set_dir = _mini_set(tmp_path)
    base = {key: value for key, value in os.environ.items() if key not in (*ENVIRONMENT_OVERRIDES, *SECRETS)}
    embedded = _eval(set_dir, base, tmp_path)

    server = arcadedb_bolt_server()
    database = server.create_database("eval")
    on_bolt = _eval(set_dir, {**base, "GRAPH_BACKEND": "neo4j", "NEO4J_URI": server.uri, "NEO4J_USER": server.user,
                              "NEO4J_PASSWORD": server.password, "NEO4J_DATABASE": database}, tmp_path)

    graph = Neo4jGraphStore(server.uri, server.user, server.password, database)
    try:
        stats = graph.stats()
    finally:
        graph.close()
    assert stats.entity_count == on_bolt["index"]["entities"] == embedded["index"]["entities"] > 0
    assert stats.relationship_count == on_bolt["index"]["relationships"] > 0
    for mode in ("vector", "graph", "hybrid"):
        measured = ("recall@2", "recall@5", "recall@10", "mrr")
        assert {m: on_bolt["modes"][mode][m] for m in measured} == {m: embedded["modes"][mode][m] for m in measured}
    assert embedded["modes"]["graph"]["recall@5"] > 0  # the graph mode really answered from a graph
