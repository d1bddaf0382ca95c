"""Two-phase GraphRAG retrieval over an open index.

1. Embed the question; vector search gives the entry chunks (top `vector_top_k`) and a wider pool used to score
   chunks the graph brings in.
2. Seed entities: entities linked in the question (n-gram names, then the entities collection by embedding), with
   0.8 × their link confidence, and the entities mentioned by the best entry chunks, with the chunk's similarity relative
   to the best chunk, cubed (the top chunk's entities seed at 1, a chunk at 80 % of its similarity at 0.5).
3. Bounded traversal from the seeds (`max_hops`, activation × `hop_decay` per hop, hub suppression: `query.traversal`).
4. Graph score of a chunk = the best, over the reached entities it mentions, of activation × specificity, where
   specificity = 1 / (1 + log10(df)) for an entity mentioned in df chunks (1 for one chunk, 1/2 at ten, 1/3 at a
   hundred: independent of the corpus size, so it means the same in a small and a growing index), × SUBJECT_BONUS
   when the entity is the subject of the chunk's document (its title), clipped to [0, 1]. This is the multi-hop step: a passage that shares a rare entity with the passages
   that answer the question's first hop (or with the question itself) is likely its next hop.
5. Fusion: `vector_weight·vector + graph_weight·graph` (default) or reciprocal-rank fusion of the two rankings.
No entity linked → plain vector search, flagged in the response.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from graphrag_pipeline.lib.config import PipelineSettings
from graphrag_pipeline.lib.ids import subject_key
from graphrag_pipeline.lib.fusion import rank, reciprocal_rank_fusion, weighted_fusion
from graphrag_pipeline.lib.models import Chunk, Document, Entity
from graphrag_pipeline.lib.state import StateStore
from graphrag_pipeline.lib.stores.protocols import (
    CHUNKS,
    COMMUNITIES,
    ENTITIES,
    Embedder,
    GraphStore,
    TraversalHit,
    VectorStore,
)
from graphrag_pipeline.query.access import ReaderAccess
from graphrag_pipeline.query.linking import NameIndex
from graphrag_pipeline.query.models import MODES, Citation, QueryResponse, QueryResult
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
RELATIONSHIPS_IN_RESPONSE = 60  # enough for a service's dependencies and their owners; an agent reads them all


@dataclass
class Retrieval:
    """The scores behind one question's ranking, before texts are fetched."""

    question: str
    mode: str
    combined: dict[str, float]  # chunk id -> the score the mode ranks by
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
    ):
        self.settings = settings
        self.state = state
        self.graph = graph_store
        self.vectors = vector_store
        self.embedder = embedder
        self._lookup_lock = threading.Lock()

    @cached_property
    def subject_chunks(self) -> dict[str, frozenset[str]]:
        """Subject key of a document title → the chunks of the documents with that title (built once per engine,
        like the name index: a title-subject test per reached chunk would cost a database round trip per query)."""
        grouped: dict[str, set[str]] = {}
        rows = self.state.query("SELECT c.chunk_id, d.title FROM chunks c JOIN documents d ON d.doc_id = c.doc_id")
        for chunk_id, title in rows:
            grouped.setdefault(subject_key(title), set()).add(chunk_id)
        return {key: frozenset(chunk_ids) for key, chunk_ids in grouped.items()}

    @cached_property
    def name_index(self) -> NameIndex:
        entities: list[Entity] = []
        offset = 0
        while True:
            page = self.graph.list_entities(offset=offset, limit=5000, order_by="name")
            entities.extend(page)
            if len(page) < 5000:
                return NameIndex(entities)
            offset += len(page)

    def close(self) -> None:
        for store in (self.vectors, self.graph, self.state):
            store.close()

    def __enter__(self) -> "QueryEngine":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _name_index(self) -> NameIndex:
        with self._lookup_lock:  # cached_property is not thread-safe on first build
            return self.name_index

    def _subject_chunks(self) -> dict[str, frozenset[str]]:
        with self._lookup_lock:
            return self.subject_chunks

    def query(
        self,
        question: str,
        *,
        mode: str = "hybrid",
        top_k: int | None = None,
        max_hops: int | None = None,
        fusion: str | None = None,
        groups: Iterable[str] = (),
    ) -> QueryResponse:
        """Answer one question; `mode` is vector | graph | hybrid (default) | global. ``groups`` are the caller's
        access groups: nothing derived only from documents the caller may not read is returned (documents without
        access groups are readable by everyone, so a caller with no groups sees exactly those)."""
        top_k = top_k or self.settings.retrieval.top_k
        if isinstance(groups, str):
            raise TypeError("groups must be a collection of group names, not one string")
        access = ReaderAccess(self.state.restricted_documents(), groups)  # read per question: revocations apply now
        if mode == "global":
            self._check_question(question)
            timings: dict[str, float] = {}
            started = time.perf_counter()
            query_vector = self.embedder.embed([question])[0]
            timings["embed"] = _ms(started)
            return self._global(question, query_vector, top_k, timings, access)
        retrieval = self.retrieve(question, mode=mode, max_hops=max_hops, fusion=fusion)
        return self._respond(retrieval, top_k, access)

    def retrieve(
        self,
        question: str,
        *,
        mode: str = "hybrid",
        max_hops: int | None = None,
        fusion: str | None = None,
    ) -> Retrieval:
        """Every score behind a ranking, before access control (the eval command reads these to measure the graph's
        reach); answers for callers come from ``query``, which filters by the caller's groups as its last step."""
        if mode not in MODES or mode == "global":
            raise ValueError(f"mode must be one of vector, graph, hybrid, global; not {mode!r}")
        self._check_question(question)
        config = self.settings.retrieval
        max_hops = config.max_hops if max_hops is None else max_hops
        if not 0 <= max_hops <= 3:
            raise ValueError("max_hops must be between 0 and 3")
        fusion = fusion or config.fusion
        if fusion not in ("weighted", "rrf"):
            raise ValueError(f"fusion must be weighted or rrf, not {fusion!r}")
        timings: dict[str, float] = {}
        started = time.perf_counter()
        query_vector = self.embedder.embed([question])[0]
        timings["embed"] = _ms(started)

        started = time.perf_counter()
        pool = self.vectors.search(CHUNKS, query_vector, max(SCORING_POOL, config.vector_top_k))
        vector_scores = {hit.point_id: max(0.0, hit.score) for hit in pool}
        entry = [hit.point_id for hit in pool[: config.vector_top_k]]
        timings["vector_search"] = _ms(started)
        result = Retrieval(question, mode, {c: vector_scores[c] for c in entry}, vector_scores, timings)
        if mode == "vector":
            return result

        started = time.perf_counter()
        linked = self._link_question(question, query_vector)
        entry_entities = self.graph.entities_of_chunks(entry[:ENTRY_CHUNKS_FOR_SEEDS])
        timings["link"] = _ms(started)
        result.linked = linked
        if not linked and not any(entry_entities.values()):
            result.fell_back_to_vector = True
            return result

        started = time.perf_counter()
        seeds, origin = self._seed_weights(linked, entry_entities, vector_scores)
        result.seed_via = self._seed_via(origin, entry_entities, linked)
        hits = spread_activation(
            self.graph, seeds, max_hops=max_hops, decay=config.hop_decay, fanout=config.fanout, min_score=MIN_ACTIVATION
        )
        result.reached = {hit.entity_id: hit for hit in hits}
        timings["traverse"] = _ms(started)

        started = time.perf_counter()
        result.graph_scores, result.best_entity = self._chunk_graph_scores(result.reached, origin)
        timings["graph_scores"] = _ms(started)

        started = time.perf_counter()
        result.vector_floor = min(vector_scores.values(), default=0.0)
        graph_pool = rank(result.graph_scores)[:SCORING_POOL]
        if mode == "graph":
            result.combined = {c: result.graph_scores[c] for c in graph_pool}
        else:
            candidates = set(entry) | set(graph_pool)
            vector_signal = {c: vector_scores.get(c, result.vector_floor) for c in candidates}
            graph_signal = {c: result.graph_scores.get(c, 0.0) for c in candidates}
            if fusion == "rrf":
                result.combined = reciprocal_rank_fusion(
                    {"vector": rank(vector_signal), "graph": rank({c: s for c, s in graph_signal.items() if s > 0})},
                    k=config.rrf_k,
                    weights={"vector": config.vector_weight, "graph": config.graph_weight},
                )
            else:
                result.combined = weighted_fusion(
                    {"vector": vector_signal, "graph": graph_signal},
                    {"vector": config.vector_weight, "graph": config.graph_weight},
                )
        timings["fuse"] = _ms(started)
        return result

    @staticmethod
    def _check_question(question: str) -> None:
        if not isinstance(question, str) or not question.strip():
            raise ValueError("question is empty")

    # --- seeding and scoring ------------------------------------------------------------------------------------

    def _link_question(self, question: str, query_vector: np.ndarray) -> dict[str, tuple[str, float]]:
        """Entity id → (how it was linked, confidence)."""
        linked: dict[str, tuple[str, float]] = {
            eid: (f"name:{phrase}", 1.0) for eid, phrase in self._name_index().link(question).items()
        }
        if self.settings.retrieval.entity_top_k:
            for hit in self.vectors.search(ENTITIES, query_vector, self.settings.retrieval.entity_top_k):
                if hit.score >= ENTITY_LINK_MIN_SCORE and hit.point_id not in linked:
                    linked[hit.point_id] = ("embedding", float(hit.score))
        return linked

    def _seed_weights(
        self,
        linked: dict[str, tuple[str, float]],
        entry_entities: dict[str, list[str]],
        vector_scores: dict[str, float],
    ) -> tuple[dict[str, float], dict[str, tuple[str, float]]]:
        """Linked entities seed with a share of their confidence; entities of the entry chunks with the chunk's similarity
        relative to the best entry chunk, sharpened, so the passages that answer the first hop lead the way. Also
        returns, per chunk-seeded entity, the chunk it came from and the weight another entry chunk gave it."""
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

    def _chunk_graph_scores(
        self, reached: dict[str, TraversalHit], origin: dict[str, tuple[str, float]]
    ) -> tuple[dict[str, float], dict[str, str]]:
        """Chunk → best activation × specificity over the reached entities it mentions (× SUBJECT_BONUS when the
        entity is what the chunk's document is about), clipped to 1, and the entity that gave it that score. A seed
        taken from an entry chunk does not score that chunk with its own weight (the chunk already has its
        similarity), only with what another entry chunk gave the entity: entry chunks that share rare entities
        support each other."""
        entities = self.graph.get_entities([eid for eid, hit in reached.items() if hit.score >= MIN_ACTIVATION])
        specific = {
            eid: 1.0 / (1.0 + math.log10(max(1, e.mention_count)))
            for eid, e in entities.items()
            if e.mention_count <= MAX_CHUNKS_PER_ENTITY
        }
        chunks_of = self.graph.chunks_of_entities(list(specific))
        subject_chunks = self._subject_chunks()
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

    # --- responses ----------------------------------------------------------------------------------------------

    def _readable_ranking(self, combined: dict[str, float], top_k: int, access: ReaderAccess) -> dict[str, Chunk]:
        """The best ``top_k`` chunks the caller may read, in rank order (a caller's filter is applied after ranking,
        so it never changes how the others rank)."""
        ranking = rank(combined)
        kept: dict[str, Chunk] = {}
        for start in range(0, len(ranking), 4 * top_k):
            window = ranking[start : start + 4 * top_k]
            fetched = {c.chunk_id: c for c in self.state.chunks(chunk_ids=window)}
            for chunk_id in window:
                chunk = fetched.get(chunk_id)  # missing: the index moved on under us (a delete landed)
                if chunk is not None and access.can_read(chunk.doc_id):
                    kept[chunk_id] = chunk
                    if len(kept) == top_k:
                        return kept
        return kept

    def _respond(self, retrieval: Retrieval, top_k: int, access: ReaderAccess) -> QueryResponse:
        started = time.perf_counter()
        timings = retrieval.timings
        chunks = self._readable_ranking(retrieval.combined, top_k, access)
        ranking = list(chunks)
        graph_scores, best_entity = retrieval.graph_scores, retrieval.best_entity
        reached, linked, vector_scores = retrieval.reached, retrieval.linked, retrieval.vector_scores
        documents = {d.doc_id: d for d in self.state.documents(doc_ids={c.doc_id for c in chunks.values()})}
        paths = {c: self._entity_path(retrieval, reached[best_entity[c]]) for c in ranking if c in best_entity}
        path_ids = {eid for path in paths.values() for eid in path}
        linked_ids = set(linked)
        # The facts behind the answer join the entities on its paths, the question's, and the reached entities its
        # passages mention ("ledger-db is owned by team-payments" in a dependency's page, two hops out).
        mentioned = {eid for eids in self.graph.entities_of_chunks(ranking).values() for eid in eids if eid in reached}
        names = {eid: e for eid, e in self.graph.get_entities(path_ids | linked_ids | mentioned).items()
                 if access.can_read_any(e.doc_ids)}
        results = []
        for chunk_id, chunk in chunks.items():
            doc = documents.get(chunk.doc_id)
            vector = vector_scores.get(chunk_id, retrieval.vector_floor)
            graph = graph_scores.get(chunk_id, 0.0)
            path = paths.get(chunk_id, ())
            results.append(
                QueryResult(
                    chunk_id=chunk_id,
                    text=chunk.text,
                    doc_id=chunk.doc_id,
                    source=_source(doc),
                    entity_path=[names[e].name for e in path if e in names],
                    vector_score=round(vector, 6),
                    graph_score=round(graph, 6),
                    combined_score=round(retrieval.combined[chunk_id], 6),
                    hops_from_query=max(0, len(path) - 1),
                    citations=[_citation(doc, chunk)],
                )
            )
        visible_ids = set(names)
        relationships = [
            r for r in (self.graph.relationships_between(visible_ids, limit=RELATIONSHIPS_IN_RESPONSE) if visible_ids else [])
            if access.can_read_any(r.doc_ids)
        ]
        timings["respond"] = _ms(started)
        return QueryResponse(
            question=retrieval.question,
            mode=retrieval.mode,
            results=results,
            entities_mentioned=[
                {"id": eid, "name": names[eid].name, "type": names[eid].type, "linked_by": how, "confidence": conf}
                for eid, (how, conf) in linked.items()
                if eid in names
            ],
            relationships=[
                {
                    "source": names[r.source_id].name if r.source_id in names else r.source_id,
                    "type": r.type,
                    "target": names[r.target_id].name if r.target_id in names else r.target_id,
                    "predicates": list(r.predicates),
                    "weight": r.weight,
                    "doc_ids": [d for d in r.doc_ids if access.can_read(d)][:10],
                }
                for r in relationships
            ],
            fell_back_to_vector=retrieval.fell_back_to_vector,
            timings_ms=timings,
        )

    @staticmethod
    def _entity_path(retrieval: Retrieval, hit: TraversalHit) -> tuple[str, ...]:
        """Entity ids from the question to the hit: the traversal's path, led by the question entity whose passage
        seeded its first entity, if that is how it was reached."""
        via = retrieval.seed_via.get(hit.path[0])
        return (via, *hit.path) if via else hit.path

    def _global(
        self, question: str, query_vector: np.ndarray, top_k: int, timings: dict[str, float], access: ReaderAccess
    ) -> QueryResponse:
        started = time.perf_counter()
        hits = self.vectors.search(COMMUNITIES, query_vector, 4 * top_k)  # room for summaries the caller may not read
        summaries = self.state.community_summary_payloads([h.point_id for h in hits])
        members = {cid: c["entity_ids"] for cid, c in self.state.community_payloads(summaries).items()}
        entities = self.graph.get_entities({eid for ids in members.values() for eid in ids})
        readable = {
            cid for cid, ids in members.items()
            if access.can_read_all(d for eid in ids if eid in entities for d in entities[eid].doc_ids)
        }
        hits = [h for h in hits if h.point_id in readable and h.point_id in summaries][:top_k]
        cited_chunks = {c.chunk_id: c for c in self.state.chunks(
            chunk_ids=[cid for h in hits for cid in summaries[h.point_id]["chunk_ids"][:5]])}
        documents = {d.doc_id: d for d in self.state.documents(doc_ids={c.doc_id for c in cited_chunks.values()})}
        results = []
        for hit in hits:
            summary = summaries[hit.point_id]
            citations = [
                _citation(documents.get(cited_chunks[c].doc_id), cited_chunks[c])
                for c in summary["chunk_ids"][:5] if c in cited_chunks
            ]
            results.append(QueryResult(
                chunk_id=hit.point_id,
                text=f"{summary['title']}\n{summary['summary']}",
                doc_id=citations[0].doc_id if citations else "",
                source={"kind": "community", "level": summary["level"], "title": summary["title"]},
                entity_path=list(summary["top_entities"]),
                vector_score=round(float(hit.score), 6),
                graph_score=0.0,
                combined_score=round(float(hit.score), 6),
                hops_from_query=0,
                citations=citations,
            ))
        timings["communities"] = _ms(started)
        return QueryResponse(question, "global", results, [], [], False, timings)


def _source(doc: Document | None) -> dict[str, Any]:
    if doc is None:
        return {}
    return {"source": doc.source, "uri": doc.uri, "title": doc.title, "metadata": doc.metadata}


def _citation(doc: Document | None, chunk: Chunk) -> Citation:
    return Citation(doc_id=chunk.doc_id, chunk_id=chunk.chunk_id, title=doc.title if doc else "",
                    uri=doc.uri if doc else "")


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
