"""An open index that answers each question from one published version, and moves to a newer one between questions.

The embedded vector store publishes immutable versions (``lib/stores/edge_vectors.py``), and a reader works on its
own copy of one of them; the state and graph files are SQLite files every process reads live. An engine kept across
a rebuild would therefore rank with the old vectors (and the name and keyword lookups it built from the old index)
while reading chunks, documents and the graph of the new one. ``OpenIndex`` avoids that mixing: before each question
it compares its version with the published one (one small file read) and, when a newer one is out, opens it and
builds a new ``QueryEngine`` over it (new vector copy, fresh lookups), which then answers that question and the
following ones. A question already running keeps the engine it started with; the old copy is closed when the last
such question ends. Only one question at a time opens a newer version; questions arriving meanwhile are answered
from the current one.

What a build publishes last is the `community_summaries` vectors, after every state and graph write, so once a build
has finished the next question sees all of it. Questions asked *while* a build runs read the live state and graph
files, as a freshly opened index would, and their answers say so (``index_updating``: source changes are recorded that
no finished build has taken in). A Qdrant server has one live view and no versions: there the engine's
lookups are built once, and the index must be opened again to see a rebuild's new names.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphrag_pipeline.lib.core.config import PipelineSettings
from graphrag_pipeline.lib.core.errors import GraphRAGError
from graphrag_pipeline.lib.stores.protocols import CHUNKS, COMMUNITIES, ENTITIES, Embedder, GraphStore, VectorStore
from graphrag_pipeline.lib.stores.state.protocol import StateStore
from graphrag_pipeline.lib.stores.state.sqlite import build_holder
from graphrag_pipeline.query.context import IncidentContext
from graphrag_pipeline.query.engine import QueryEngine, QuestionVectors
from graphrag_pipeline.query.models import QueryResponse
from graphrag_pipeline.query.retrievers import Retrieval

# What a complete build publishes and the retrievers read: passages, question linking, global summaries.
PUBLISHED_COLLECTIONS = (CHUNKS, ENTITIES, COMMUNITIES)


class IndexNotFoundError(GraphRAGError, FileNotFoundError):
    """There is no index where the settings point."""

    kind = "unavailable"


class IndexNotPublishedError(IndexNotFoundError):
    """The index exists but no build has published all of it yet (its first build is running, or failed)."""

    def __init__(self, index_dir: str | Path, detail: str):
        holder = build_holder(Path(index_dir))
        if holder is None:
            state = ("no build is running, so the last one stopped before the end (its output says why): run "
                     "`graphrag-pipeline build` (or the Dagster job) again")
        else:
            state = f"its first build is running ({holder}): wait for it to finish"
        super().__init__(f"the index at {Path(index_dir).resolve()} has no published version to answer from "
                         f"({detail}): {state}")


@dataclass(eq=False)
class _Version:
    """One published version as this process reads it: its vector copy and the engine (with its lookups) over it."""

    name: str | None  # None: a server backend, which has no versions
    engine: QueryEngine
    in_flight: int = 0  # questions answering from it now
    retired: bool = False  # a newer version answers new questions; closed once in_flight reaches 0


class OpenIndex:
    """What ``open_index`` returns: ``query`` and ``retrieve`` as on ``QueryEngine``, each question answered from the
    newest version published when it starts (see the module docstring). Thread-safe; close it (or use ``with``)."""

    def __init__(
        self,
        settings: PipelineSettings,
        *,
        state: StateStore,
        graph_store: GraphStore,
        embedder: Embedder,
        open_vectors: Callable[[], VectorStore],
        published_version: Callable[[], str | None],
    ):
        self.settings = settings
        self.state = state
        self.graph = graph_store
        self.embedder = embedder
        self._open_vectors = open_vectors
        # one embedder for every version, so a question's vector outlives the version it was first asked of
        self._question_vectors = QuestionVectors(embedder, settings.retrieval.question_cache_size)
        self._published_version = published_version
        self._lock = threading.Lock()  # guards _current and the versions' in_flight / retired
        self._opening = threading.Lock()  # held by the one question that opens a newer version
        self._incomplete: str | None = None  # a newer version that lacked collections: not tried again
        self._closed = False
        self._current = self._open_version()

    @property
    def version(self) -> str | None:
        """The published version new questions are answered from (None on a server backend)."""
        return self._current.name

    @property
    def vectors(self) -> VectorStore:
        return self._current.engine.vectors

    def query(self, question: str, **options: Any) -> QueryResponse:
        """``QueryEngine.query`` (same options) on the newest published version."""
        with self._answering() as engine:
            response = engine.query(question, **options)
        return dataclasses.replace(response, index_updating=self.state.behind_sources())

    def retrieve(self, question: str, **options: Any) -> Retrieval:
        """``QueryEngine.retrieve`` (same options) on the newest published version."""
        with self._answering() as engine:
            return engine.retrieve(question, **options)

    def context(self, subject: str, **options: Any) -> IncidentContext:
        """``QueryEngine.context`` (same options) on the newest published version."""
        with self._answering() as engine:
            found = engine.context(subject, **options)
        return dataclasses.replace(found, index_updating=self.state.behind_sources())

    def documents_about(self, entity_id: str) -> dict[str, float]:
        """``QueryEngine.documents_about`` on the newest published version."""
        with self._answering() as engine:
            return engine.documents_about(entity_id)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            current = self._current
            current.retired = True
            idle = current.in_flight == 0
        if idle:
            current.engine.vectors.close()
        self.graph.close()
        self.state.close()

    def __enter__(self) -> "OpenIndex":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @contextmanager
    def _answering(self) -> Iterator[QueryEngine]:
        """The engine of the newest version, kept open until the question is answered."""
        self._follow_published()
        with self._lock:
            if self._closed:
                raise RuntimeError("the index is closed")
            version = self._current
            version.in_flight += 1
        try:
            yield version.engine
        finally:
            with self._lock:
                version.in_flight -= 1
                done = version.retired and version.in_flight == 0
            if done:
                version.engine.vectors.close()

    def _follow_published(self) -> None:
        published = self._published_version()
        if published is None or published in (self._current.name, self._incomplete):
            return  # a server backend, nothing newer, or a newer version not yet complete
        if not self._opening.acquire(blocking=False):
            return  # another question is opening it; this one is answered from the current version
        try:
            try:
                newer = self._open_version()
            except IndexNotPublishedError:
                self._incomplete = published  # rebuilt from nothing and not finished: keep answering as before
                return
            with self._lock:
                closed = self._closed  # while the newer version was being copied
                if not closed:
                    older, self._current = self._current, newer
                    older.retired = True
                    idle = older.in_flight == 0
            if closed:
                newer.engine.vectors.close()
            elif idle:
                older.engine.vectors.close()
        finally:
            self._opening.release()

    def _open_version(self) -> _Version:
        # Read before the copy: should a publish slip in between, the next question opens that version again.
        name = self._published_version()
        try:
            vectors = self._open_vectors()
        except FileNotFoundError as error:  # nothing published yet
            raise IndexNotPublishedError(self.settings.index_dir, str(error)) from error
        try:
            missing = [c for c in PUBLISHED_COLLECTIONS if c not in set(vectors.collections())]
            if missing:
                raise IndexNotPublishedError(self.settings.index_dir,
                                             f"the published vectors have no {', '.join(missing)} collection yet")
        except BaseException:
            vectors.close()
            raise
        engine = QueryEngine(self.settings, state=self.state, graph_store=self.graph, vector_store=vectors,
                             embedder=self.embedder, question_vectors=self._question_vectors)
        return _Version(name, engine)
