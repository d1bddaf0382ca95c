"""Backend selection for processes outside Dagster (the query module, the CLI), by the same environment variables
the Dagster definitions read: GRAPH_BACKEND=embedded|neo4j, VECTOR_BACKEND=embedded|qdrant, NEO4J_URI/USER/
PASSWORD/DATABASE, QDRANT_URL/API_KEY. Secrets and addresses come only from the environment."""

from __future__ import annotations

import os
from pathlib import Path

from graphrag_pipeline.lib.config import PipelineSettings
from graphrag_pipeline.lib.stores.protocols import GraphStore, VectorStore

GRAPH_BACKENDS = ("embedded", "neo4j")
VECTOR_BACKENDS = ("embedded", "qdrant")


def _choice(variable: str, allowed: tuple[str, ...]) -> str:
    value = os.environ.get(variable, "embedded").strip().lower() or "embedded"
    if value not in allowed:
        raise ValueError(f"{variable}={value!r}: expected one of {', '.join(allowed)}")
    return value


def _required(variable: str) -> str:
    value = os.environ.get(variable)
    if not value:
        raise ValueError(f"{variable} must be set for this backend")
    return value


def graph_backend() -> str:
    return _choice("GRAPH_BACKEND", GRAPH_BACKENDS)


def vector_backend() -> str:
    return _choice("VECTOR_BACKEND", VECTOR_BACKENDS)


def open_graph_store(settings: PipelineSettings, *, read_only: bool) -> GraphStore:
    if graph_backend() == "neo4j":
        connection = (_required("NEO4J_URI"), _required("NEO4J_USER"), _required("NEO4J_PASSWORD"),
                      os.environ.get("NEO4J_DATABASE") or None)
        from graphrag_pipeline.lib.stores.neo4j_graph import Neo4jGraphStore

        return Neo4jGraphStore(*connection, ontology=settings.ontology)
    from graphrag_pipeline.lib.stores.embedded_graph import EmbeddedGraphStore

    return EmbeddedGraphStore(Path(settings.index_dir) / "graph.sqlite", read_only=read_only)


def open_vector_store(settings: PipelineSettings, *, reader: bool) -> VectorStore:
    if vector_backend() == "qdrant":
        url, api_key = _required("QDRANT_URL"), os.environ.get("QDRANT_API_KEY") or None
        from graphrag_pipeline.lib.stores.qdrant_vectors import QdrantVectorStore

        return QdrantVectorStore(url=url, api_key=api_key)
    from graphrag_pipeline.lib.stores.edge_vectors import EdgeVectorReader, EdgeVectorStore

    root = Path(settings.index_dir) / "vectors"
    return EdgeVectorReader(root) if reader else EdgeVectorStore(root)
