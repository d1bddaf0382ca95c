import pytest

from graphrag_pipeline.defs.resources import (
    EmbeddedGraphStoreResource,
    EmbeddedVectorStoreResource,
    Neo4jGraphStoreResource,
    QdrantVectorStoreResource,
    graphrag_from_environment,
)
from graphrag_pipeline.lib.backends import graph_backend, open_graph_store
from graphrag_pipeline.lib.config import load_settings


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("GRAPH_BACKEND", "VECTOR_BACKEND", "NEO4J_URI", "NEO4J_USER", "NEO4J_PASSWORD", "NEO4J_DATABASE",
                 "QDRANT_URL", "QDRANT_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_embedded_is_the_default(clean_env):
    resource = graphrag_from_environment()
    assert isinstance(resource.graph_store, EmbeddedGraphStoreResource)
    assert isinstance(resource.vector_store, EmbeddedVectorStoreResource)


def test_backends_and_their_settings_come_from_the_environment(clean_env):
    clean_env.setenv("GRAPH_BACKEND", "neo4j")
    clean_env.setenv("VECTOR_BACKEND", "Qdrant")
    clean_env.setenv("NEO4J_URI", "bolt://graph.internal:7687")
    clean_env.setenv("NEO4J_USER", "svc")
    clean_env.setenv("NEO4J_PASSWORD", "not-in-code")
    clean_env.setenv("QDRANT_URL", "http://vectors.internal:6333")
    resource = graphrag_from_environment()
    assert isinstance(resource.graph_store, Neo4jGraphStoreResource)
    assert isinstance(resource.vector_store, QdrantVectorStoreResource)
    # EnvVar values resolve at run time, from the environment, not from code.
    assert resource.graph_store.uri.env_var_name == "NEO4J_URI"
    assert resource.graph_store.password.env_var_name == "NEO4J_PASSWORD"
    assert resource.vector_store.url.env_var_name == "QDRANT_URL"


def test_unknown_backend_and_missing_settings_are_clear_errors(clean_env, tmp_path):
    clean_env.setenv("GRAPH_BACKEND", "cassandra")
    with pytest.raises(ValueError, match="GRAPH_BACKEND='cassandra'"):
        graph_backend()
    clean_env.setenv("GRAPH_BACKEND", "neo4j")
    with pytest.raises(ValueError, match="NEO4J_URI must be set"):
        open_graph_store(load_settings(index_dir=str(tmp_path)), read_only=True)
