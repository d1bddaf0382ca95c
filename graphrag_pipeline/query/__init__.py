"""The query module agents import.

    from graphrag_pipeline.query import open_index
    with open_index() as index:                     # reads graphrag.yaml / $GRAPHRAG_CONFIG like the pipeline
        response = index.query("alert on payments-api: which services depend on it?")
        for result in response.results:
            print(result.combined_score, result.source["title"], result.entity_path)

Importing this package loads no model and no Dagster; the embedder loads on the first question. One open index is
thread-safe: share it between the threads that answer questions. It answers each question from the newest version
the pipeline has published when the question starts (``query.versions``), so it can stay open across rebuilds.
"""

from __future__ import annotations

import threading
from pathlib import Path

from graphrag_pipeline.lib.core.config import PipelineSettings, load_settings
from graphrag_pipeline.lib.stores.protocols import Embedder
from graphrag_pipeline.query.context import IncidentContext
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
from graphrag_pipeline.query.versions import IndexNotFoundError, IndexNotPublishedError, OpenIndex


def open_index(
    config_path: str | Path | None = None,
    *,
    index_dir: str | Path | None = None,
    settings: PipelineSettings | None = None,
    embedder: Embedder | None = None,
) -> OpenIndex:
    """Open the index the pipeline built (read-only; safe while the pipeline keeps writing a newer version).

    Raises ``IndexNotFoundError`` when there is no index, and ``IndexNotPublishedError`` (a subclass) when its first
    build has not published it yet. ``embedder``: one already loaded (it must be the one the index was built with);
    by default the configured one, loaded on the first question."""
    if settings is None:
        overrides = {"index_dir": str(index_dir)} if index_dir is not None else {}
        settings = load_settings(config_path, **overrides)
    elif index_dir is not None:
        settings = settings.with_overrides(index_dir=str(index_dir))
    from graphrag_pipeline.lib.compose.backends import (
        open_graph_store,
        open_state,
        open_vector_store,
        published_vector_version,
    )
    from graphrag_pipeline.lib.embed.embedders import configured_embedder

    state = open_state(settings, read_only=True)
    if not state.exists():
        state.close()
        # a PostgreSQL state is named by its URL without the credentials
        where = state.path if settings.backends.state == "postgres" else Path(settings.index_dir).resolve()
        raise IndexNotFoundError(f"no index at {where}: materialize the pipeline's assets first")
    try:
        graph_store = open_graph_store(settings, read_only=True)
    except FileNotFoundError as error:  # the first build has not reached the graph stage
        state.close()
        raise IndexNotPublishedError(settings.index_dir, str(error)) from error
    except BaseException:
        state.close()
        raise
    try:
        if embedder is None:
            embedder = configured_embedder(settings, query=True)
            _prepare_in_background(embedder)  # before the vectors are opened, which it can overlap too
        return OpenIndex(
            settings,
            state=state,
            graph_store=graph_store,
            embedder=embedder,
            open_vectors=lambda: open_vector_store(settings, reader=True),
            published_version=lambda: published_vector_version(settings),
        )
    except BaseException:
        graph_store.close()
        state.close()
        raise


__all__ = [
    "MODES",
    "RETRIEVERS",
    "Citation",
    "Fact",
    "Fusion",
    "IndexNotFoundError",
    "IndexNotPublishedError",
    "IncidentContext",
    "LinkedEntity",
    "Mode",
    "OpenIndex",
    "QueryEngine",
    "QueryParameters",
    "QueryResponse",
    "QueryResult",
    "Retrieval",
    "Retriever",
    "open_index",
]


def _prepare_in_background(embedder: Embedder) -> None:
    """Load a local question embedder in a thread of its own: a process's first question needs both the model (about
    0.6 s with ONNX Runtime, much of it outside the GIL) and the index's name and chunk lookups (about 1 s of Python),
    and loading them side by side made a cold `graphrag-pipeline query` that much shorter. An HTTP embedder is left
    alone: it has nothing to load, and a call would cost a request."""
    from graphrag_pipeline.lib.embed.numpy_encoder import NumpyEmbedder

    if not isinstance(embedder, NumpyEmbedder):
        return

    def prepare() -> None:
        try:
            embedder.prepare()
        except Exception:  # noqa: BLE001 (the first question loads it again, and raises in the caller's thread)
            pass

    # Not a daemon: a process that ends before the model is loaded waits for it rather than tearing the runtime
    # down in the middle of building a session.
    threading.Thread(target=prepare, name="prepare-question-embedder").start()
