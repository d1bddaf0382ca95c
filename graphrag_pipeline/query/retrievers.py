"""The retrieval modes: one class per mode behind the `Retriever` protocol, registered in `RETRIEVERS`.

A retriever ranks candidates for a question (chunks, or community summaries for `global`) and gives the texts of
the ones the engine keeps; the engine does the rest the same way for every mode (the caller's access filter as the
last step, the linked entities and facts, the response). A new mode is one class here, one line in `RETRIEVERS`
and its name in `query.models.Mode`.

The chunk modes are two-phase GraphRAG retrieval:

1. Vector search gives the entry chunks (top `vector_top_k`) and a wider pool used to score chunks the graph brings
   in. `vector` mode ranks the entry chunks by similarity and stops here.
2. Seed entities: entities linked in the question (n-gram names, then the entities collection by embedding), with
   0.8 × their link confidence, and the entities mentioned by the best entry chunks, with the chunk's similarity
   relative to the best chunk, cubed (the top chunk's entities seed at 1, a chunk at 80 % of its similarity at 0.5).
3. Bounded traversal from the seeds (`max_hops`, activation × `hop_decay` per hop, hub suppression: `query.traversal`).
4. Graph score of a chunk = the best, over the reached entities it mentions, of activation × specificity, where
   specificity = 1 / (1 + log10(df)) for an entity mentioned in df chunks (1 for one chunk, 1/2 at ten, 1/3 at a
   hundred: independent of the corpus size, so it means the same in a small and a growing index), × SUBJECT_BONUS
   when the entity is the subject of the chunk's document (its title), clipped to [0, 1]. This is the multi-hop
   step: a passage that shares a rare entity with the passages that answer the question's first hop (or with the
   question itself) is likely its next hop. `graph` mode ranks by this score.
5. `hybrid` mode fuses the two: `vector_weight·vector + graph_weight·graph` (default) or reciprocal-rank fusion of
   the two rankings.
No entity linked → plain vector search, flagged in the retrieval.

`global` mode ranks community summaries by similarity to the question, for broad questions.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

import numpy as np

from graphrag_pipeline.lib.config import RetrievalConfig
from graphrag_pipeline.lib.fusion import rank, reciprocal_rank_fusion, weighted_fusion
from graphrag_pipeline.lib.ids import subject_key
from graphrag_pipeline.lib.models import Chunk, Document, Entity
from graphrag_pipeline.lib.state import StateStore
from graphrag_pipeline.lib.stores.protocols import CHUNKS, COMMUNITIES, ENTITIES, GraphStore, TraversalHit, VectorStore
from graphrag_pipeline.query.linking import NameIndex
from graphrag_pipeline.query.models import Citation, Mode, QueryParameters
from graphrag_pipeline.query.traversal import spread_activation

SCORING_POOL = 100  # vector hits fetched to score graph-reached chunks by similarity too
ENTITY_LINK_MIN_SCORE = 0.6  # cosine below this is not the same entity by another name
ENTRY_CHUNKS_FOR_SEEDS = 5  # the entry chunks whose entities seed the traversal
# Question entities seed at this share of their link confidence, below the best entry passage's entities (1.0): the
# question's own names are what similarity already matched; the next hop is named only in the passages it found.
QUESTION_SEED_FACTOR = 0.8
ENTRY_SEED_SHARPNESS = 3.0  # seed weight = (chunk similarity / best similarity) ** this: near-ties count, the tail not
SUBJECT_BONUS = 1.5  # a chunk is more about its document's subject than about anything it merely mentions
# Entities in more chunks than this are hubs: they point at no particular next hop (specificity <= 0.3), and fetching
# thousands of chunk ids per hub would cost more than it could change.
MAX_CHUNKS_PER_ENTITY = 200
# Entities reached with less activation cannot move a chunk (at most 0.05 × graph_weight of its combined score):
# the traversal neither keeps nor expands them, so a 2-hop walk's long tail costs nothing.
MIN_ACTIVATION = 0.05
# Community summaries fetched per result asked for: room for summaries the caller may not read.
SUMMARIES_PER_RESULT = 4
CITATIONS_PER_SUMMARY = 5


class IndexReader:
    """What retrieval reads from one open index: its stores, and lookups built from them once and then shared by
    every question (thread-safe)."""

    def __init__(self, config: RetrievalConfig, *, state: StateStore, graph: GraphStore, vectors: VectorStore):
        self.config = config
        self.state = state
        self.graph = graph
        self.vectors = vectors
        self._lookup_lock = threading.Lock()

    def name_index(self) -> NameIndex:
        with self._lookup_lock:  # cached_property is not thread-safe on first build
            return self._name_index

    def subject_chunks(self) -> dict[str, frozenset[str]]:
        """Subject key of a document title → the chunks of the documents with that title (a title-subject test per
        reached chunk would cost a database round trip per query)."""
        with self._lookup_lock:
            return self._subject_chunks

    @cached_property
    def _name_index(self) -> NameIndex:
        entities: list[Entity] = []
        offset = 0
        while True:
            page = self.graph.list_entities(offset=offset, limit=5000, order_by="name")
            entities.extend(page)
            if len(page) < 5000:
                return NameIndex(entities)
            offset += len(page)

    @cached_property
    def _subject_chunks(self) -> dict[str, frozenset[str]]:
        grouped: dict[str, set[str]] = {}
        rows = self.state.query("SELECT c.chunk_id, d.title FROM chunks c JOIN documents d ON d.doc_id = c.doc_id")
        for chunk_id, title in rows:
            grouped.setdefault(subject_key(title), set()).add(chunk_id)
        return {key: frozenset(chunk_ids) for key, chunk_ids in grouped.items()}


@dataclass
class Retrieval:
    """The scores behind one question's ranking, before texts are fetched and before access control."""

    question: str
    mode: Mode
    combined: dict[str, float]  # candidate id -> the score the mode ranks by
    vector_scores: dict[str, float]
    timings: dict[str, float]
    linked: dict[str, tuple[str, float]] = field(default_factory=dict)  # entity id -> (how linked, confidence)
    reached: dict[str, TraversalHit] = field(default_factory=dict)
    graph_scores: dict[str, float] = field(default_factory=dict)
    best_entity: dict[str, str] = field(default_factory=dict)  # chunk id -> entity that contributed most
    # seed entity -> the question entity whose entry chunk seeded it: "Acme Robotics" (in the question) is how the
    # walk reached "Mirela Vantongeren" (named in Acme Robotics' passage), even though no edge was followed.
    seed_via: dict[str, str] = field(default_factory=dict)
    vector_floor: float = 0.0  # similarity assumed for chunks outside the vector pool
    fell_back_to_vector: bool = False

    def entity_path(self, candidate_id: str) -> tuple[str, ...]:
        """Entity ids from the question to the entity that brought the candidate in (none: similarity alone did):
        the traversal's path, led by the question entity whose passage seeded its first entity, if that is how it
        was reached."""
        entity_id = self.best_entity.get(candidate_id)
        if entity_id is None:
            return ()
        path = self.reached[entity_id].path
        via = self.seed_via.get(path[0])
        return (via, *path) if via else path


@dataclass(frozen=True)
class Passage:
    """The text one result shows: a chunk, or a community summary."""

    text: str
    doc_id: str
    source: dict[str, Any]
    citations: list[Citation]
    # The documents the text was written from: the caller sees it only when allowed to read every one of them.
    written_from: frozenset[str]
    # The entities the text is about when that does not depend on the question (a summary's top entities): they
    # lead its entity path, ahead of the traversal's path to a chunk.
    about: tuple[str, ...] = ()


class Retriever(Protocol):
    """One retrieval mode."""

    def retrieve(self, question: str, query_vector: np.ndarray, parameters: QueryParameters) -> Retrieval:
        """Every candidate with the score the mode ranks by and the signals behind it."""
        ...

    def passages(self, candidate_ids: Sequence[str]) -> dict[str, Passage]:
        """The texts of these candidates; a candidate the index no longer holds is absent."""
        ...


class VectorRetriever:
    """Chunks ranked by their similarity to the question."""

    def __init__(self, index: IndexReader):
        self.index = index

    def retrieve(self, question: str, query_vector: np.ndarray, parameters: QueryParameters) -> Retrieval:
        return self._entry_chunks(question, query_vector, parameters)[0]

    def _entry_chunks(
        self, question: str, query_vector: np.ndarray, parameters: QueryParameters
    ) -> tuple[Retrieval, list[str]]:
        """The vector retrieval (the entry chunks by similarity; the wider pool's similarities kept for scoring the
        chunks the graph brings in), and the entry chunks in the vector store's order, which seeding follows."""
        config = self.index.config
        timings: dict[str, float] = {}
        started = time.perf_counter()
        pool = self.index.vectors.search(CHUNKS, query_vector, max(SCORING_POOL, config.vector_top_k))
        vector_scores = {hit.point_id: max(0.0, hit.score) for hit in pool}
        entry = [hit.point_id for hit in pool[: config.vector_top_k]]
        timings["vector_search"] = elapsed_ms(started)
        return Retrieval(question, parameters.mode, {c: vector_scores[c] for c in entry}, vector_scores, timings), entry

    def passages(self, candidate_ids: Sequence[str]) -> dict[str, Passage]:
        chunks = self.index.state.chunks(chunk_ids=candidate_ids)
        documents = {d.doc_id: d for d in self.index.state.documents(doc_ids={c.doc_id for c in chunks})}
        return {
            chunk.chunk_id: Passage(
                text=chunk.text,
                doc_id=chunk.doc_id,
                source=_source(documents.get(chunk.doc_id)),
                citations=[_citation(documents.get(chunk.doc_id), chunk)],
                written_from=frozenset({chunk.doc_id}),
            )
            for chunk in chunks
        }


class GraphRetriever(VectorRetriever):
    """Chunks ranked by their graph score: the walk from the question's entities and the entry chunks' entities."""

    def retrieve(self, question: str, query_vector: np.ndarray, parameters: QueryParameters) -> Retrieval:
        result, entry = self._entry_chunks(question, query_vector, parameters)
        config, graph, timings = self.index.config, self.index.graph, result.timings

        started = time.perf_counter()
        linked = self._link_question(question, query_vector)
        entry_entities = graph.entities_of_chunks(entry[:ENTRY_CHUNKS_FOR_SEEDS])
        timings["link"] = elapsed_ms(started)
        result.linked = linked
        if not linked and not any(entry_entities.values()):
            result.fell_back_to_vector = True
            return result

        started = time.perf_counter()
        seeds, origin = self._seed_weights(linked, entry_entities, result.vector_scores)
        result.seed_via = self._seed_via(origin, entry_entities, linked)
        hits = spread_activation(
            graph, seeds, max_hops=parameters.max_hops, decay=config.hop_decay, fanout=config.fanout,
            min_score=MIN_ACTIVATION,
        )
        result.reached = {hit.entity_id: hit for hit in hits}
        timings["traverse"] = elapsed_ms(started)

        started = time.perf_counter()
        result.graph_scores, result.best_entity = self.chunk_graph_scores(result.reached, origin)
        timings["graph_scores"] = elapsed_ms(started)

        started = time.perf_counter()
        result.vector_floor = min(result.vector_scores.values(), default=0.0)
        graph_pool = rank(result.graph_scores)[:SCORING_POOL]
        result.combined = self._ranking_scores(result, entry, graph_pool, parameters)
        timings["fuse"] = elapsed_ms(started)
        return result

    def _ranking_scores(
        self, retrieval: Retrieval, entry: list[str], graph_pool: list[str], parameters: QueryParameters
    ) -> dict[str, float]:
        """Candidate → the score this mode ranks by, once the graph scores are known."""
        return {c: retrieval.graph_scores[c] for c in graph_pool}

    def _link_question(self, question: str, query_vector: np.ndarray) -> dict[str, tuple[str, float]]:
        """Entity id → (how it was linked, confidence)."""
        linked: dict[str, tuple[str, float]] = {
            eid: (f"name:{phrase}", 1.0) for eid, phrase in self.index.name_index().link(question).items()
        }
        if self.index.config.entity_top_k:
            for hit in self.index.vectors.search(ENTITIES, query_vector, self.index.config.entity_top_k):
                if hit.score >= ENTITY_LINK_MIN_SCORE and hit.point_id not in linked:
                    linked[hit.point_id] = ("embedding", float(hit.score))
        return linked

    @staticmethod
    def _seed_weights(
        linked: dict[str, tuple[str, float]],
        entry_entities: dict[str, list[str]],
        vector_scores: dict[str, float],
    ) -> tuple[dict[str, float], dict[str, tuple[str, float]]]:
        """Linked entities seed with a share of their confidence; entities of the entry chunks with the chunk's
        similarity relative to the best entry chunk, sharpened, so the passages that answer the first hop lead the
        way. Also returns, per chunk-seeded entity, the chunk it came from and the weight another entry chunk gave
        it."""
        seeds: dict[str, float] = {eid: QUESTION_SEED_FACTOR * confidence for eid, (_, confidence) in linked.items()}
        origin: dict[str, tuple[str, float]] = {}  # entity -> (chunk it was seeded from, next best seed weight)
        best = max(vector_scores.values(), default=0.0)  # the best entry chunk's, whether or not it names entities
        if best <= 0:
            return seeds, origin
        for chunk_id, entity_ids in entry_entities.items():
            weight = (max(0.0, vector_scores.get(chunk_id, 0.0)) / best) ** ENTRY_SEED_SHARPNESS
            for eid in entity_ids:
                if eid in linked:
                    seeds[eid] = max(seeds[eid], weight)
                elif weight > seeds.get(eid, 0.0):
                    origin[eid] = (chunk_id, seeds.get(eid, 0.0))
                    seeds[eid] = weight
                elif eid in origin:
                    origin[eid] = (origin[eid][0], max(origin[eid][1], weight))
        return seeds, origin

    @staticmethod
    def _seed_via(
        origin: dict[str, tuple[str, float]], entry_entities: dict[str, list[str]], linked: dict[str, tuple[str, float]]
    ) -> dict[str, str]:
        """Chunk-seeded entity → the most confidently linked question entity its entry chunk also mentions."""
        via: dict[str, str] = {}
        for eid, (chunk_id, _) in origin.items():
            in_question = [e for e in entry_entities.get(chunk_id, ()) if e in linked]
            if in_question:
                via[eid] = max(in_question, key=lambda e: (linked[e][1], e))
        return via

    def chunk_graph_scores(
        self, reached: dict[str, TraversalHit], origin: dict[str, tuple[str, float]]
    ) -> tuple[dict[str, float], dict[str, str]]:
        """Chunk → best activation × specificity over the reached entities it mentions (× SUBJECT_BONUS when the
        entity is what the chunk's document is about), clipped to 1, and the entity that gave it that score. A seed
        taken from an entry chunk does not score that chunk with its own weight (the chunk already has its
        similarity), only with what another entry chunk gave the entity: entry chunks that share rare entities
        support each other. ``origin``: chunk-seeded entity → (its entry chunk, the weight another one gave it)."""
        graph = self.index.graph
        entities = graph.get_entities([eid for eid, hit in reached.items() if hit.score >= MIN_ACTIVATION])
        specific = {
            eid: 1.0 / (1.0 + math.log10(max(1, e.mention_count)))
            for eid, e in entities.items()
            if e.mention_count <= MAX_CHUNKS_PER_ENTITY
        }
        chunks_of = graph.chunks_of_entities(list(specific))
        subject_chunks = self.index.subject_chunks()
        best: dict[str, tuple[float, str]] = {}
        for eid, chunk_ids in chunks_of.items():
            hit = reached[eid]
            about_it = subject_chunks.get(entities[eid].canonical, frozenset())
            came_from, other_weight = origin.get(eid, ("", 0.0)) if hit.hops == 0 else ("", 0.0)
            for chunk_id in chunk_ids:
                activation = other_weight if chunk_id == came_from else hit.score
                contribution = activation * specific[eid] * (SUBJECT_BONUS if chunk_id in about_it else 1.0)
                if contribution > best.get(chunk_id, (0.0, ""))[0]:
                    best[chunk_id] = (contribution, eid)
        scores = {c: min(1.0, score) for c, (score, _) in best.items()}
        return scores, {c: eid for c, (_, eid) in best.items()}


class HybridRetriever(GraphRetriever):
    """Chunks ranked by their similarity and their graph score together (weighted sum or reciprocal-rank fusion)."""

    def _ranking_scores(
        self, retrieval: Retrieval, entry: list[str], graph_pool: list[str], parameters: QueryParameters
    ) -> dict[str, float]:
        config = self.index.config
        candidates = set(entry) | set(graph_pool)
        vector_signal = {c: retrieval.vector_scores.get(c, retrieval.vector_floor) for c in candidates}
        graph_signal = {c: retrieval.graph_scores.get(c, 0.0) for c in candidates}
        weights = {"vector": config.vector_weight, "graph": config.graph_weight}
        if parameters.fusion == "rrf":
            return reciprocal_rank_fusion(
                {"vector": rank(vector_signal), "graph": rank({c: s for c, s in graph_signal.items() if s > 0})},
                k=config.rrf_k,
                weights=weights,
            )
        return weighted_fusion({"vector": vector_signal, "graph": graph_signal}, weights)


class GlobalRetriever:
    """Community summaries ranked by their similarity to the question: for broad questions about a whole topic."""

    def __init__(self, index: IndexReader):
        self.index = index

    def retrieve(self, question: str, query_vector: np.ndarray, parameters: QueryParameters) -> Retrieval:
        started = time.perf_counter()
        hits = self.index.vectors.search(COMMUNITIES, query_vector, SUMMARIES_PER_RESULT * parameters.top_k)
        scores = {hit.point_id: float(hit.score) for hit in hits}
        return Retrieval(question, parameters.mode, scores, dict(scores), {"communities": elapsed_ms(started)})

    def passages(self, candidate_ids: Sequence[str]) -> dict[str, Passage]:
        state = self.index.state
        summaries = state.community_summary_payloads(candidate_ids)
        members = {cid: c["entity_ids"] for cid, c in state.community_payloads(summaries).items()}
        entities = self.index.graph.get_entities({eid for ids in members.values() for eid in ids})
        cited_ids = {cid: summaries[cid]["chunk_ids"][:CITATIONS_PER_SUMMARY] for cid in members}
        cited_chunks = {c.chunk_id: c for c in state.chunks(chunk_ids=[c for ids in cited_ids.values() for c in ids])}
        documents = {d.doc_id: d for d in state.documents(doc_ids={c.doc_id for c in cited_chunks.values()})}
        passages = {}
        for cid, entity_ids in members.items():
            summary = summaries[cid]
            citations = [
                _citation(documents.get(cited_chunks[c].doc_id), cited_chunks[c]) for c in cited_ids[cid]
                if c in cited_chunks
            ]
            passages[cid] = Passage(
                text=f"{summary['title']}\n{summary['summary']}",
                doc_id=citations[0].doc_id if citations else "",
                source={"kind": "community", "level": summary["level"], "title": summary["title"]},
                citations=citations,
                written_from=frozenset(d for eid in entity_ids if eid in entities for d in entities[eid].doc_ids),
                about=tuple(summary["top_entities"]),
            )
        return passages


RETRIEVERS: Mapping[Mode, Callable[[IndexReader], Retriever]] = {
    "vector": VectorRetriever,
    "graph": GraphRetriever,
    "hybrid": HybridRetriever,
    "global": GlobalRetriever,
}


def _source(doc: Document | None) -> dict[str, Any]:
    if doc is None:
        return {}
    return {"source": doc.source, "uri": doc.uri, "title": doc.title, "metadata": doc.metadata}


def _citation(doc: Document | None, chunk: Chunk) -> Citation:
    return Citation(doc_id=chunk.doc_id, chunk_id=chunk.chunk_id, title=doc.title if doc else "",
                    uri=doc.uri if doc else "")


def elapsed_ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
