"""The query module agents import.

    from graphrag_pipeline.query import open_index
    with open_index() as index:                     # reads graphrag.yaml / $GRAPHRAG_CONFIG like the pipeline
        response = index.query("alert on payments-api: which services depend on it?")
        for result in response.results:
            print(result.combined_score, result.source["title"], result.entity_path)

Importing this package loads no model and no Dagster; the embedder loads on the first question. One open index is
thread-safe: share it between the threads that answer questions.
"""

from __future__ import annotations

from pathlib import Path

from graphrag_pipeline.lib.config import PipelineSettings, load_settings
from graphrag_pipeline.query.engine import QueryEngine
from graphrag_pipeline.query.models import (
    MODES,
    Citation,
    Fact,
    Fusion,
    LinkedEntity,
    Mode,
    QueryParameters,
    QueryResponse,
    QueryResult,
)
from graphrag_pipeline.query.retrievers import RETRIEVERS, Retrieval, Retriever


class IndexNotFoundError(FileNotFoundError):
    pass


def open_index(
    config_path: str | Path | None = None,
    *,
    index_dir: str | Path | None = None,
    settings: PipelineSettings | None = None,
) -> QueryEngine:
    """Open the index the pipeline built (read-only; safe while the pipeline keeps writing a newer version)."""
    if settings is None:
        overrides = {"index_dir": str(index_dir)} if index_dir is not None else {}
        settings = load_settings(config_path, **overrides)
    elif index_dir is not None:
        settings = settings.with_overrides(index_dir=str(index_dir))
    from graphrag_pipeline.lib.backends import open_graph_store, open_state, open_vector_store, state_path
    from graphrag_pipeline.lib.embedders import configured_embedder

    if not state_path(settings).is_file():
        raise IndexNotFoundError(f"no index at {Path(settings.index_dir).resolve()}: materialize the pipeline's "
                                 f"assets first")
    return QueryEngine(
        settings,
        state=open_state(settings, read_only=True),
        graph_store=open_graph_store(settings, read_only=True),
        vector_store=open_vector_store(settings, reader=True),
        embedder=configured_embedder(settings, query=True),
    )


__all__ = [
    "MODES",
    "RETRIEVERS",
    "Citation",
    "Fact",
    "Fusion",
    "IndexNotFoundError",
    "LinkedEntity",
    "Mode",
    "QueryEngine",
    "QueryParameters",
    "QueryResponse",
    "QueryResult",
    "Retrieval",
    "Retriever",
    "open_index",
]
