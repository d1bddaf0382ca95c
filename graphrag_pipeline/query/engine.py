"""Answers questions over an open index, the same way for every retrieval mode.

The mode's retriever (`query.retrievers`) ranks candidates from what the caller may read: the chunks of documents it
may not read, and the entities and relationships only those documents support, take no part in any signal
(``Hidden``), so its ranking and scores are those of an index built without them. Then, whatever the mode: the best
`top_k` candidates the caller may read (a chunk or a summary is readable when every document it was written from
is), the entities the question linked and the facts among the entities behind the results (those some readable
document supports), and the response.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import replace
from typing import TypeVar

import numpy as np

from graphrag_pipeline.lib.algorithms.merge import entity_from_payload, relationship_from_payload
from graphrag_pipeline.lib.core.config import PipelineSettings
from graphrag_pipeline.lib.core.models import Entity, Relationship
from graphrag_pipeline.lib.stores.protocols import Embedder, GraphStore, Subgraph, VectorStore
from graphrag_pipeline.lib.stores.state.protocol import StateStore
from graphrag_pipeline.query.access import ReaderAccess, reader_access
from graphrag_pipeline.query.context import ContextBuilder, IncidentContext, catalog_systems
from graphrag_pipeline.query.fusion import rank
from graphrag_pipeline.query.models import (
    Fact,
    Fusion,
    Granularity,
    LinkedEntity,
    Mode,
    QueryParameters,
    QueryResponse,
    QueryResult,
)
from graphrag_pipeline.query.retrievers import (
    NOTHING_HIDDEN,
    RETRIEVERS,
    Hidden,
    IndexReader,
    Passage,
    Retrieval,
    Retriever,
    elapsed_ms,
)
from graphrag_pipeline.query.signals import signal_scores

RELATIONSHIPS_IN_RESPONSE = 60  # enough for a service's dependencies and their owners; an agent reads them all
FACT_DOCUMENTS = 10  # documents cited per fact: enough to check it, few enough to read
# Candidates fetched at a time per result asked for: room for the ones the caller may not read, and for the several
# passages of one document.
CANDIDATES_PER_RESULT = 4
PASSAGES_PER_DOCUMENT = 3  # citations of a document result: its best passages, best first
PATH_RELATIONSHIPS = 1000  # relationships read among the entities on a response's paths (a few dozen entities)
ElementT = TypeVar("ElementT", Entity, Relationship)


class QuestionVectors:
    """The embedder's vectors of the most recently asked questions (least recently used first out): a repeated
    question skips the model. Thread-safe; the vectors are read-only."""

    def __init__(self, embedder: Embedder, size: int):
        self._embedder = embedder
        self._size = size
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def vector(self, question: str) -> np.ndarray:
        with self._lock:
            if question in self._vectors:
                self._vectors.move_to_end(question)
                return self._vectors[question]
        vector = self._embedder.embed([question])[0]
        vector.flags.writeable = False
        if self._size:
            with self._lock:
                self._vectors[question] = vector
                while len(self._vectors) > self._size:
                    self._vectors.popitem(last=False)
        return vector


class QueryEngine:
    """Answers questions from an index; thread-safe, so one engine can serve many concurrent questions."""

    def __init__(
        self,
        settings: PipelineSettings,
        *,
        state: StateStore,
        graph_store: GraphStore,
        vector_store: VectorStore,
        embedder: Embedder,
        question_vectors: QuestionVectors | None = None,
    ):
        """``question_vectors``: a cache shared with other engines of the same embedder (an open index's versions);
        by default one of the engine's own."""
        self.settings = settings
        self.state = state
        self.graph = graph_store
        self.vectors = vector_store
        self.embedder = embedder
        self._question_vectors = question_vectors or QuestionVectors(embedder, settings.retrieval.question_cache_size)
        self._index = IndexReader(settings.retrieval, settings.ontology, state=state, graph=graph_store,
                                  vectors=vector_store)
        self._retrievers: dict[Mode, Retriever] = {mode: make(self._index) for mode, make in RETRIEVERS.items()}
        self._context = ContextBuilder(
            settings.retrieval.context, state=state, graph=graph_store, names=self._index.name_index,
            intents=self._index.intents, aboutness=self._index.aboutness,
            catalog_pages=lambda: self._index.directory().catalog_pages, hidden=self._index.hidden)

    def close(self) -> None:
        for store in (self.vectors, self.graph, self.state):
            store.close()

    def __enter__(self) -> "QueryEngine":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def query(
        self,
        question: str,
        *,
        mode: Mode = "hybrid",
        top_k: int | None = None,
        max_hops: int | None = None,
        fusion: Fusion | None = None,
        groups: Iterable[str] = (),
        results: Granularity | None = None,
    ) -> QueryResponse:
        """Answer one question; `mode` is vector | keyword | graph | hybrid (default) | global. ``groups`` are the
        caller's access groups: nothing derived only from documents the caller may not read is returned (documents
        without access groups are readable by everyone, so a caller with no groups sees exactly those).
        ``results``: "documents" (the configured default) gives ``top_k`` distinct documents, each with its best
        passages as citations; "chunks" gives the ``top_k`` best passages."""
        parameters = self._parameters(mode, top_k, max_hops, fusion, results)
        access = reader_access(self.state, groups)
        retriever = self._retrievers[parameters.mode]
        # Ranked from what the caller may read only: no score moves because of a document it may not read.
        retrieval = self._retrieve(retriever, question, parameters, self._index.hidden(access.unreadable()))
        return self._respond(retriever, retrieval, parameters, access)

    def context(self, subject: str, *, groups: Iterable[str] = (), max_hops: int | None = None) -> IncidentContext:
        """The incident context of the service ``subject`` names, or of the one a question is about: its
        dependencies and dependents within ``max_hops`` (configured default), their owners with contacts, runbooks,
        documents and incidents, and the facts behind them with citations — what ``groups`` may read
        (``query.context``)."""
        return self._context.build(subject, reader_access(self.state, groups), max_hops=max_hops)

    def documents_about(self, entity_id: str) -> dict[str, float]:
        """Doc id → how strongly the document is about the entity (``query.aboutness``: the evidence the relation
        signal and the graph scores use), whoever may read it: callers filter by access."""
        return self._index.aboutness().documents_about(entity_id)

    def retrieve(
        self,
        question: str,
        *,
        mode: Mode = "hybrid",
        top_k: int | None = None,
        max_hops: int | None = None,
        fusion: Fusion | None = None,
    ) -> Retrieval:
        """Every score behind a ranking, before access control (the eval command reads these to measure the graph's
        reach); answers for callers come from ``query``, which filters by the caller's groups as its last step."""
        parameters = self._parameters(mode, top_k, max_hops, fusion)
        return self._retrieve(self._retrievers[parameters.mode], question, parameters)

    def _parameters(
        self, mode: Mode, top_k: int | None, max_hops: int | None, fusion: Fusion | None,
        results: Granularity | None = None,
    ) -> QueryParameters:
        """The caller's choices, the configuration's where the caller left them unset."""
        config = self.settings.retrieval
        return QueryParameters(
            mode=mode,
            top_k=config.top_k if top_k is None else top_k,
            max_hops=config.max_hops if max_hops is None else max_hops,
            fusion=config.fusion if fusion is None else fusion,
            results=config.results if results is None else results,
        )

    def _retrieve(self, retriever: Retriever, question: str, parameters: QueryParameters,
                  hidden: Hidden = NOTHING_HIDDEN) -> Retrieval:
        if not isinstance(question, str) or not question.strip():
            raise ValueError("question is empty")
        started = time.perf_counter()
        query_vector = self._question_vectors.vector(question)
        embed_ms = elapsed_ms(started)
        retrieval = retriever.retrieve(question, query_vector, parameters, hidden)
        retrieval.timings = {"embed": embed_ms, **retrieval.timings}  # the steps in the order they ran
        return retrieval

    @staticmethod
    def _readable_passages(
        retriever: Retriever, retrieval: Retrieval, parameters: QueryParameters, access: ReaderAccess
    ) -> dict[str, Passage]:
        """The best ``top_k`` results the caller may read, in rank order, with their texts (a caller's filter is
        applied after ranking, so it never changes how the others rank). A document result is its best passage,
        citing its next best ones from the same window of candidates."""
        by_document = parameters.results == "documents" and parameters.mode != "global"  # summaries span documents
        ranking = rank(retrieval.combined)
        window_size = CANDIDATES_PER_RESULT * parameters.top_k
        kept: dict[str, Passage] = {}
        result_of_document: dict[str, str] = {}
        for start in range(0, len(ranking), window_size):
            window = ranking[start : start + window_size]
            passages = retriever.passages(window)
            for candidate_id in window:
                passage = passages.get(candidate_id)  # missing: the index moved on under us (a delete landed)
                if passage is None or not access.can_read_all(passage.written_from):
                    continue
                first = result_of_document.get(passage.doc_id) if by_document else None
                if first is not None:
                    cited = kept[first]
                    if len(cited.citations) < PASSAGES_PER_DOCUMENT:
                        kept[first] = replace(cited, citations=[*cited.citations, *passage.citations])
                elif len(kept) < parameters.top_k:
                    kept[candidate_id] = passage
                    result_of_document[passage.doc_id] = candidate_id
            if len(kept) == parameters.top_k:
                return kept
        return kept

    def _respond(
        self, retriever: Retriever, retrieval: Retrieval, parameters: QueryParameters, access: ReaderAccess
    ) -> QueryResponse:
        started = time.perf_counter()
        passages = self._readable_passages(retriever, retrieval, parameters, access)
        paths = self._readable_paths(retrieval, passages, access)
        visible, among = self._visible_subgraph(retrieval, paths, access)
        results = [
            QueryResult(
                chunk_id=candidate_id,
                text=passage.text,
                doc_id=passage.doc_id,
                source=passage.source,
                entity_path=[*passage.about, *(visible[e].name for e in paths[candidate_id] if e in visible)],
                combined_score=round(retrieval.combined[candidate_id], 6),
                scores=signal_scores(retrieval, candidate_id),
                hops_from_query=max(0, len(paths[candidate_id]) - 1),
                citations=passage.citations,
            )
            for candidate_id, passage in passages.items()
        ]
        followed = {r.relationship_id: r for r in retrieval.followed
                    if r.source_id in visible and r.target_id in visible}
        relationships = [*followed.values(), *(r for r in among if r.relationship_id not in followed)]
        shown = with_provenance(self.state, [r for r in relationships
                                             if access.can_read_any(r.doc_ids)][:RELATIONSHIPS_IN_RESPONSE], access)
        systems = catalog_systems(self.state, [visible[e] for r in shown for e in (r.source_id, r.target_id)
                                               if e in visible], self._index.directory().catalog_pages, access)
        retrieval.timings["respond"] = elapsed_ms(started)
        return QueryResponse(
            question=retrieval.question,
            mode=retrieval.mode,
            results=results,
            entities_mentioned=[
                LinkedEntity(id=eid, name=visible[eid].name, type=visible[eid].type, linked_by=how, confidence=conf)
                for eid, (how, conf) in retrieval.linked.items()
                if eid in visible
            ],
            relationships=[_fact(r, visible, access, retrieval.followed_step.get(r.relationship_id, 0)
                                 if r.relationship_id in followed else 0, systems) for r in shown],
            fell_back_to_vector=retrieval.fell_back_to_vector,
            timings_ms=retrieval.timings,
        )

    def _readable_paths(
        self, retrieval: Retrieval, passages: dict[str, Passage], access: ReaderAccess
    ) -> dict[str, tuple[str, ...]]:
        """Each result's entity path up to its first hop that no relationship the caller may read makes: a walk
        ranks over every relationship, but a path naming a hop only a restricted document states would tell it. The
        hop from a question entity to the entity its entry passage named is held to the same rule, since that
        passage may be one the caller may not read."""
        paths = {candidate_id: retrieval.entity_path(candidate_id) for candidate_id in passages}
        on_paths = {entity_id for path in paths.values() for entity_id in path}
        if len(on_paths) < 2 or access.reads_everything():
            return paths
        readable_hops = {frozenset((r.source_id, r.target_id))
                         for r in self.graph.relationships_between(on_paths, limit=PATH_RELATIONSHIPS)
                         if access.can_read_any(r.doc_ids)}

        def readable_prefix(path: tuple[str, ...]) -> tuple[str, ...]:
            for hop, (source, target) in enumerate(zip(path, path[1:])):
                if frozenset((source, target)) not in readable_hops:
                    return path[: hop + 1]
            return path

        return {candidate_id: readable_prefix(path) for candidate_id, path in paths.items()}

    def _visible_subgraph(
        self, retrieval: Retrieval, paths: dict[str, tuple[str, ...]], access: ReaderAccess
    ) -> tuple[dict[str, Entity], list[Relationship]]:
        """The entities an answer names that the caller may see: those on its paths, the question's, the ends of the
        relationships it followed, and the reached entities its results mention; with the heaviest relationships
        among them, the facts behind the answer ("ledger-db is owned by team-payments" in a dependency's page, two
        hops out)."""
        wanted = {eid for path in paths.values() for eid in path} | set(retrieval.linked)
        # The ends of every fact the question asked for, whichever results fit in top_k: the facts are the answer.
        wanted |= {eid for r in retrieval.followed for eid in (r.source_id, r.target_id)}
        # Only a walk reaches entities; without one no result can mention any.
        subgraph = self.graph.answer_subgraph(wanted, list(paths) if retrieval.reached else [], retrieval.reached,
                                              limit=RELATIONSHIPS_IN_RESPONSE)
        return visible_subgraph(self.graph, subgraph, access, RELATIONSHIPS_IN_RESPONSE)


def visible_subgraph(
    graph: GraphStore, subgraph: Subgraph, access: ReaderAccess, limit: int
) -> tuple[dict[str, Entity], list[Relationship]]:
    """The entities of ``subgraph`` the reader may see, and the heaviest ``limit`` relationships among them that the
    reader may read. The subgraph's relationships were cut to ``limit`` among all its entities, whoever may read
    them, so when that cut kept some the reader may not, the ones among the visible entities are read again, four
    times as many each time, until ``limit`` are readable or none are left: others may have fallen below the cut."""
    visible = {eid: e for eid, e in subgraph.entities.items() if access.can_read_any(e.doc_ids)}

    def readable(relationships: list[Relationship]) -> list[Relationship]:
        return [r for r in relationships
                if r.source_id in visible and r.target_id in visible and access.can_read_any(r.doc_ids)]

    read, cut = subgraph.relationships, limit
    among = readable(read)
    while len(among) < limit and len(read) >= cut:
        cut *= 4
        read = graph.relationships_between(set(visible), limit=cut)
        among = readable(read)
    return visible, among[:limit]


def with_provenance(state: StateStore, elements: list[ElementT], access: ReaderAccess) -> list[ElementT]:
    """The elements with the provenance of their parts (the index's merged elements; graph stores keep the merged
    text only), where the reader may not read every document behind one and so sees only some of its parts."""
    partial = [e for e in elements if not access.can_read_all(e.doc_ids)]
    if not partial:
        return elements
    if isinstance(partial[0], Entity):
        kind, key, parse = "entity", (lambda e: e.entity_id), entity_from_payload
    else:
        kind, key, parse = "relationship", (lambda e: e.relationship_id), relationship_from_payload
    merged = {eid: parse(p) for eid, p in state.element_payloads(kind, [key(e) for e in partial]).items()}
    # An element the index no longer holds (a rebuild landed meanwhile) stays without parts, so shows none.
    return [merged.get(key(e), e) for e in elements]


def _fact(relationship: Relationship, visible: dict[str, Entity], access: ReaderAccess, step: int,
          systems: dict[str, str]) -> Fact:
    """A relationship between two visible entities, citing only documents the caller may read, in the words those
    documents use."""
    return Fact(
        source=visible[relationship.source_id].name,
        type=relationship.type,
        target=visible[relationship.target_id].name,
        predicates=access.predicates(relationship),
        weight=relationship.weight,
        doc_ids=[d for d in relationship.doc_ids if access.can_read(d)][:FACT_DOCUMENTS],
        followed=step > 0,
        step=step,
        source_system=systems.get(relationship.source_id, ""),
        target_system=systems.get(relationship.target_id, ""),
    )
