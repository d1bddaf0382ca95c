"""A workspace bundles what the stages need: settings, the state store, the graph and vector stores, the embedder
and the extractor. Embedded implementations are the defaults; any store or model can be injected instead (the
Dagster resources do that for production backends).

Index directory layout (embedded tier)::

    <index_dir>/state.sqlite   documents, chunks, caches, merged elements, communities, quarantine
    <index_dir>/graph.sqlite   the embedded graph store
    <index_dir>/vectors/       Qdrant Edge shards: chunks, entities, communities (published versions for readers)
"""

from __future__ import annotations

import inspect
from functools import cached_property
from pathlib import Path
from typing import Callable, Sequence, TypeVar

from graphrag_pipeline.lib.config import PipelineSettings
from graphrag_pipeline.lib.ids import content_hash
from graphrag_pipeline.lib.models import Chunk, ChunkExtraction, Quarantined
from graphrag_pipeline.lib.state import StateStore
from graphrag_pipeline.lib.stores.protocols import Embedder, GraphStore, VectorStore

T = TypeVar("T")
Provided = T | Callable[[], T] | None  # an instance, a factory called on first use, or None for the embedded default

EXTRACTOR_VERSION = "1"  # bump when the offline extractor's behaviour changes, so cached extractions are redone


class Workspace:
    def __init__(
        self,
        settings: PipelineSettings,
        *,
        state: Provided[StateStore] = None,
        graph_store: Provided[GraphStore] = None,
        vector_store: Provided[VectorStore] = None,
        embedder: Provided[Embedder] = None,
    ):
        self.settings = settings
        self.index_dir = Path(settings.index_dir)
        self._state = state
        self._graph_store = graph_store
        self._vector_store = vector_store
        self._embedder = embedder

    @cached_property
    def state(self) -> StateStore:
        if self._state is not None:
            return _resolve(self._state)
        return StateStore(self.index_dir / "state.sqlite")

    @cached_property
    def graph_store(self) -> GraphStore:
        if self._graph_store is not None:
            return _resolve(self._graph_store)
        from graphrag_pipeline.lib.stores.embedded_graph import EmbeddedGraphStore

        return EmbeddedGraphStore(self.index_dir / "graph.sqlite")

    @cached_property
    def vector_store(self) -> VectorStore:
        if self._vector_store is not None:
            return _resolve(self._vector_store)
        from graphrag_pipeline.lib.stores.edge_vectors import EdgeVectorStore

        return EdgeVectorStore(self.index_dir / "vectors")

    @cached_property
    def embedder(self) -> Embedder:
        if self._embedder is not None:
            return _resolve(self._embedder)
        from graphrag_pipeline.lib.embedders import LocalEmbedder

        return LocalEmbedder(self.settings.embedder, threads=self.settings.embedder.threads)

    @property
    def tokenizer(self):
        """Token spans in the embedder's own vocabulary, so chunk sizes are what the model will really see."""
        return self.embedder

    @cached_property
    def extractor_key(self) -> str:
        config = self.settings.extraction
        if config.extractor == "precomputed":
            return "precomputed"
        fingerprint = config.model_dump_json() + self.settings.ontology.model_dump_json()
        return f"offline-v{EXTRACTOR_VERSION}-{content_hash(fingerprint)[:16]}"

    @cached_property
    def _offline_extractor(self):
        from graphrag_pipeline.lib.extraction import OfflineExtractor

        return OfflineExtractor(self.settings.extraction, self.settings.ontology)

    def extract(self, chunks: Sequence[Chunk]) -> tuple[list[ChunkExtraction], list[Quarantined]]:
        if self.settings.extraction.extractor == "precomputed":
            from graphrag_pipeline.lib.extraction import precomputed_extractions

            records = self.state.source_extractions({c.doc_id for c in chunks})
            result = precomputed_extractions(chunks, records, self.settings.ontology)
            return list(result.extractions), list(result.quarantined)
        titles = self.state.document_titles({c.doc_id for c in chunks})
        return self._offline_extractor.extract(chunks, titles), []

    def close(self) -> None:
        for name in ("graph_store", "vector_store", "state"):
            if name in self.__dict__:
                self.__dict__[name].close()

    def __enter__(self) -> "Workspace":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _resolve(provided):
    return provided() if inspect.isfunction(provided) else provided
