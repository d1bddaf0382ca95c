"""The one place that builds stores: every store of an index, from its validated settings.

Dagster resources, `Workspace` (stages, `graphrag-pipeline build` and `eval`), the sensors and the query module all
open their stores here, so a backend chosen in the configuration (or by GRAPH_BACKEND / VECTOR_BACKEND, see
`lib/core/config.py`) is the backend every process uses. Secrets are read from the environment variables the settings
name, at the moment a store is opened, and never kept in settings.

Index directory layout (embedded tier)::

    <index_dir>/state.sqlite      documents, chunks, caches, merged elements, communities, quarantine
    <index_dir>/graph.sqlite      the embedded graph store
    <index_dir>/vectors/          Qdrant Edge shards: chunks, entities, communities (published versions for readers)
    <index_dir>/llm_cache.sqlite  completions of the configured LLM: unchanged input, no call
    <index_dir>/llm_runs.sqlite   spend per Dagster run, when llm.budget_usd caps it
"""

from __future__ import annotations

import os
from pathlib import Path

from graphrag_pipeline.lib.core.config import PipelineSettings
from graphrag_pipeline.lib.stores.protocols import GraphStore, VectorStore
from graphrag_pipeline.lib.stores.state.protocol import StateStore
from graphrag_pipeline.lib.stores.state.sqlite import SQLiteStateStore

DATABASE_URL = "DATABASE_URL"  # the PostgreSQL state store's server and database, with credentials


def state_path(settings: PipelineSettings) -> Path:
    return Path(settings.index_dir) / "state.sqlite"


def llm_cache_path(settings: PipelineSettings) -> Path:
    return Path(settings.index_dir) / "llm_cache.sqlite"


def llm_runs_path(settings: PipelineSettings) -> Path:
    return Path(settings.index_dir) / "llm_runs.sqlite"


def graph_path(settings: PipelineSettings) -> Path:
    return Path(settings.index_dir) / "graph.sqlite"


def vectors_path(settings: PipelineSettings) -> Path:
    return Path(settings.index_dir) / "vectors"


def open_state(settings: PipelineSettings, *, read_only: bool = False) -> StateStore:
    if settings.backends.state == "postgres":
        from graphrag_pipeline.lib.stores.state.postgres import PostgresStateStore

        # The URL carries the password, so it is a secret: from the environment only, never from settings files.
        return PostgresStateStore(_secret(DATABASE_URL, required=True), read_only=read_only)
    return SQLiteStateStore(state_path(settings), read_only=read_only)


def open_graph_store(settings: PipelineSettings, *, read_only: bool = False) -> GraphStore:
    backends = settings.backends
    if backends.graph == "neo4j":
        from graphrag_pipeline.lib.stores.neo4j_graph import Neo4jGraphStore

        neo4j = backends.neo4j
        return Neo4jGraphStore(
            _required(neo4j.uri, "backends.neo4j.uri", "NEO4J_URI"),
            _required(neo4j.user, "backends.neo4j.user", "NEO4J_USER"),
            _secret(neo4j.password_env, required=True),
            neo4j.database,
            batch_size=neo4j.batch_size,
            ontology=settings.ontology,
        )
    from graphrag_pipeline.lib.stores.embedded_graph import EmbeddedGraphStore

    return EmbeddedGraphStore(graph_path(settings), read_only=read_only)


def open_vector_store(settings: PipelineSettings, *, reader: bool = False) -> VectorStore:
    """The vector store; `reader=True`: the view queries get (the published version of the embedded store, which a
    process keeps until it opens a new reader; a server has one view for writers and readers)."""
    backends = settings.backends
    if backends.vector == "qdrant":
        from graphrag_pipeline.lib.stores.qdrant_vectors import QdrantVectorStore

        qdrant = backends.qdrant
        if qdrant.path and not qdrant.url:
            return QdrantVectorStore(path=qdrant.path)
        url = _required(qdrant.url, "backends.qdrant.url", "QDRANT_URL")
        return QdrantVectorStore(url=url, api_key=_secret(qdrant.api_key_env, required=False))
    from graphrag_pipeline.lib.stores.edge_vectors import EdgeVectorReader, EdgeVectorStore

    return EdgeVectorReader(vectors_path(settings)) if reader else EdgeVectorStore(vectors_path(settings))


def published_vector_version(settings: PipelineSettings) -> str | None:
    """The vector version a reader opened now would see: the embedded store's current published version, None before
    its first publish and always None for a Qdrant server (writers and readers share its one view)."""
    if settings.backends.vector == "qdrant":
        return None
    from graphrag_pipeline.lib.stores.edge_vectors import published_version

    return published_version(vectors_path(settings))


def store_kinds(settings: PipelineSettings) -> dict[str, str]:
    """What each store is, by the names Dagster shows as asset kinds."""
    return {"graph": "neo4j" if settings.backends.graph == "neo4j" else "sqlite", "vectors": "qdrant",
            "state": settings.backends.state}


def _required(value: str | None, setting: str, variable: str) -> str:
    if not value:
        raise ValueError(f"{setting} must be set for this backend (in the configuration, or ${variable})")
    return value


def _secret(variable: str, *, required: bool) -> str | None:
    value = os.environ.get(variable) or None
    if value is None and required:
        raise ValueError(f"${variable} must be set for this backend (the secret is read from the environment only)")
    return value
