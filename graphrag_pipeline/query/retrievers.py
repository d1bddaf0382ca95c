"""The retrieval modes: one class per mode behind the `Retriever` protocol, registered in `RETRIEVERS`.

A retriever ranks candidates for a question (chunks, or community summaries for `global`) and gives the texts of
the ones the engine keeps; the engine does the rest the same way for every mode (the caller's access filter as the
last step, the linked entities and facts, the response). A new mode is one class here, one line in `RETRIEVERS`
and its name in `query.models.Mode`.

The chunk modes are two-phase GraphRAG retrieval:

1. Vector search gives the entry chunks (top `vector_top_k`) and a wider pool used to score chunks the graph brings
   in. `vector` mode ranks the entry chunks by similarity and stops here.
2. Seed entities: entities linked in the question (n-gram names, then the entities collection by embedding), with
   0.8 × their link confidence, and the entities mentioned by the best entry chunks, with the chunk's first-hop
   similarity (cosine + 0.5 × BM25 as a share of the question's best match) relative to the best chunk's, cubed (the
   top chunk's entities seed at 1, a chunk at 80 % of it at 0.5).
3. Bounded traversal from the seeds (`max_hops`, activation × `hop_decay` per hop, hub suppression: `query.traversal`).
4. Graph score of a chunk = the best, over the reached entities it mentions, of activation × specificity, where
   specificity = 1 / (1 + log10(df)) for an entity mentioned in df chunks (1 for one chunk, 1/2 at ten, 1/3 at a
   hundred: independent of the corpus size, so it means the same in a small and a growing index), × SUBJECT_BONUS
   when the entity is the subject of the chunk's document (its title), clipped to [0, 1]. This is the multi-hop
   step: a passage that shares a rare entity with the passages that answer the question's first hop (or with the
   question itself) is likely its next hop. `graph` mode ranks by this score.
5. `hybrid` mode fuses the two: `vector_weight·vector + graph_weight·graph` (default) or reciprocal-rank fusion of
   the two rankings. A chunk whose graph score came from an entry chunk's entities ranks no higher than that entry
   chunk (unless its other signals alone put it higher): the next hop follows the hop that led to it instead of
   pushing it out of the top results.
No entity linked → plain vector search, flagged in the retrieval.

`global` mode ranks community summaries by similarity to the question, for broad questions.
"""

from __future__ import annotations

import functools
import json
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType
from typing import Any, Protocol

import numpy as np

from graphrag_pipeline.lib.core.config import Ontology, RetrievalConfig
from graphrag_pipeline.lib.core.models import Chunk, Document, EntityNames, Relationship
from graphrag_pipeline.lib.sources.catalog import RECORD_KEY as CATALOG_RECORD_KEY
from graphrag_pipeline.lib.stores.protocols import CHUNKS, COMMUNITIES, ENTITIES, GraphStore, TraversalHit, VectorStore
from graphrag_pipeline.lib.stores.state.protocol import StateStore
from graphrag_pipeline.lib.stores.state.sql import (
    COMMUNITY_PAYLOADS,
    COMMUNITY_SUMMARY_PAYLOADS,
    SOURCE_EXTRACTION_PAYLOADS,
)
from graphrag_pipeline.query.aboutness import LINK_RELATIONSHIP_TYPES, Aboutness
from graphrag_pipeline.query.fusion import (
    cap_at_origin,
    normalize_by_max,
    rank,
    reciprocal_rank_fusion,
    top_ranked,
    weighted_fusion,
)
from graphrag_pipeline.query.intent import IntentReader, RelationIntent
from graphrag_pipeline.query.keyword import KeywordIndex, identifiers
from graphrag_pipeline.query.linking import CorpusCase, NameIndex, NameLink
from graphrag_pipeline.query.models import Citation, Mode, QueryParameters
from graphrag_pipeline.query.signals import SIGNALS, signal_weights
from graphrag_pipeline.query.traversal import walk

SCORING_POOL = 100  # vector hits fetched to score graph-reached chunks by similarity too
HIDDEN_SCAN = 1_000_000  # relationships read among the entities restricted documents mention, to find the hidden ones
# Candidates fetched beyond the pool for a caller with hidden chunks, so the pool is the pool of what it may read;
# bounded, so a caller who may not read a hundred thousand chunks does not make every search that long.
HIDDEN_OVERFETCH = 1000
ENTITY_LINK_MIN_SCORE = 0.6  # cosine below this is not the same entity by another name
ENTRY_CHUNKS_FOR_SEEDS = 5  # the entry chunks whose entities seed the traversal
# Question entities seed at this share of their link confidence, below the best entry passage's entities (1.0): the
# question's own names are what similarity already matched; the next hop is named only in the passages it found.
QUESTION_SEED_FACTOR = 0.8
# A passage's BM25 share counts this much beside its similarity in choosing the entry passages whose entities seed
# the walk (chosen over 0.2 and 1.0 on the development sets: docs/evaluation.md).
ENTRY_KEYWORD_SHARE = 0.5
ENTRY_SEED_SHARPNESS = 3.0  # seed weight = (chunk similarity / best similarity) ** this: near-ties count, the tail not
SUBJECT_BONUS = 1.5  # a chunk is more about its document's subject than about anything it merely mentions
# Entities in more chunks than this are hubs: they point at no particular next hop (specificity <= 0.3), and fetching
# thousands of chunk ids per hub would cost more than it could change.
MAX_CHUNKS_PER_ENTITY = 200
# Entities reached with less activation cannot move a chunk (at most 0.05 × graph_weight of its combined score):
# the traversal neither keeps nor expands them, so a 2-hop walk's long tail costs nothing.
MIN_ACTIVATION = 0.05
# A catalog page about an entity a relationship reached ranks below the entity's own documents: its facts are already
# in the response's relationships, and a service's README or runbook is what there is to read.
CATALOG_PAGE_FACTOR = 0.2
CHAIN_STEP_FACTOR = 0.5  # the relation signal of the documents about what each further step of a chain reached
# Community summaries fetched per result asked for: room for summaries the caller may not read.
SUMMARIES_PER_RESULT = 4
CITATIONS_PER_SUMMARY = 5


@dataclass(frozen=True)
class Hidden:
    """What one caller's ranking may not use: the chunks of the documents it may not read, and the entities and
    relationships only those documents support (ids of both kinds in ``elements``). Retrieval leaves them out, so
    nothing a restricted document alone says moves a result or shows in a score."""

    chunks: frozenset[str] = frozenset()
    elements: frozenset[str] = frozenset()

    def visible_links(self, links: Sequence[NameLink]) -> list[NameLink]:
        """The question's links without the hidden entities (a name only a hidden document gives links nothing)."""
        if not self.elements:
            return list(links)
        return [replace(link, entity_ids=link.entity_ids - self.elements) for link in links
                if link.entity_ids - self.elements]

    def has_relationships_among(
        self, relationships: Mapping[str, Relationship],
    ) -> Callable[[frozenset[str], str], bool]:
        """Whether any of some entities has a visible relationship of a type, answered from relationships already
        read that hold all of theirs of that type: what makes a question's reference ("it") point at one of its links
        (``IntentReader.read``, over the walk's asked relationships)."""

        def has(entity_ids: frozenset[str], relationship_type: str) -> bool:
            visible = entity_ids - self.elements
            return any(r.type == relationship_type and rid not in self.elements and r.source_id != r.target_id
                       and ((r.source_id in visible and r.target_id not in self.elements)
                            or (r.target_id in visible and r.source_id not in self.elements))
                       for rid, r in relationships.items())

        return has

    def has_relationships(self, graph: GraphStore) -> Callable[[frozenset[str], str], bool]:
        """``has_relationships_among`` over what ``graph`` holds, read per question (the incident context)."""

        def has(entity_ids: frozenset[str], relationship_type: str) -> bool:
            read = graph.relationships_of(entity_ids - self.elements, [relationship_type], provenance=False)
            return self.has_relationships_among(read)(entity_ids, relationship_type)

        return has


NOTHING_HIDDEN = Hidden()


class IndexReader:
    """What retrieval reads from one open index: its stores, and lookups built from them once and then shared by
    every question (thread-safe)."""

    def __init__(
        self, config: RetrievalConfig, ontology: Ontology, *, state: StateStore, graph: GraphStore,
        vectors: VectorStore,
    ):
        self.config = config
        self.state = state
        self.graph = graph
        self.vectors = vectors
        self.intents = IntentReader(ontology)
        self._lookup_lock = threading.Lock()

    def name_index(self) -> NameIndex:
        with self._lookup_lock:  # cached_property is not thread-safe on first build
            return self._entity_lookups[0]

    def keyword_index(self) -> KeywordIndex:
        with self._lookup_lock:
            return self._keyword_index

    def directory(self) -> ChunkDirectory:
        with self._lookup_lock:
            return self._directory

    def aboutness(self) -> Aboutness:
        with self._lookup_lock:
            return self._aboutness

    def hidden(self, unreadable: frozenset[str]) -> Hidden:
        """What a caller who may not read ``unreadable`` must not rank by (cached per set of documents)."""
        return self._hidden(unreadable) if unreadable else NOTHING_HIDDEN

    @functools.lru_cache(maxsize=32)  # noqa: B019 (one reader per open index version; a few distinct callers)
    def _hidden(self, unreadable: frozenset[str]) -> Hidden:
        directory = self.directory()
        chunks = frozenset(c for doc_id in unreadable for c in directory.chunks_of.get(doc_id, ()))
        # What those documents support is mentioned in their chunks; relationships they state join two of those.
        mentioned = {eid for eids in self.graph.entities_of_chunks(chunks).values() for eid in eids}
        entities = {eid for eid, e in self.graph.get_entities(mentioned).items() if set(e.doc_ids) <= unreadable}
        relationships = {r.relationship_id for r in self.graph.relationships_between(mentioned, limit=HIDDEN_SCAN)
                         if set(r.doc_ids) <= unreadable}
        return Hidden(chunks, frozenset(entities | relationships))

    def mention_counts(self, entity_ids: Iterable[str]) -> dict[str, int]:
        """How many chunks mention each entity: from the read that built the name index, and from the graph for
        an entity written since (a build running while questions are asked)."""
        with self._lookup_lock:
            known = self._entity_lookups[1]
        counts = {}
        missing = []
        for eid in entity_ids:
            if eid in known:
                counts[eid] = known[eid]
            else:
                missing.append(eid)
        if missing:
            counts.update((eid, e.mention_count) for eid, e in self.graph.get_entities(missing).items())
        return counts

    @cached_property
    def _entity_lookups(self) -> tuple[NameIndex, dict[str, int]]:
        """The name index and every entity's mention count, from one read of the entities' names (reading whole
        entities took ten times as long, most of a first question's time, and the rest of them is not needed)."""
        entities: list[EntityNames] = []
        offset = 0
        while True:
            page = self.graph.list_entity_names(offset=offset, limit=5000)
            entities.extend(page)
            if len(page) < 5000:
                names = NameIndex(entities, self._corpus_case, self.config.generic_head_words)
                return names, {e.entity_id: e.mention_count for e in entities}
            offset += len(page)

    # The two lookups over the chunk texts are built from separate reads: the keyword index is needed only by
    # keyword scoring and by questions that write an identifier, and it was a third of a first question's time.
    @cached_property
    def _keyword_index(self) -> KeywordIndex:
        """The keyword index over chunk texts, each with its document's title."""
        rows = self.state.query(
            "SELECT c.chunk_id, d.doc_id, d.title, c.text FROM chunks c JOIN documents d ON d.doc_id = c.doc_id"
        )
        return KeywordIndex(((chunk_id, f"{title}\n{text}") for chunk_id, _, title, text in rows),
                            groups={chunk_id: doc_id for chunk_id, doc_id, _, _ in rows})

    @cached_property
    def _corpus_case(self) -> CorpusCase:
        """How the corpus writes its words."""
        return CorpusCase(text for (text,) in self.state.query("SELECT text FROM chunks"))

    @cached_property
    def _directory(self) -> ChunkDirectory:
        rows = self.state.query(
            "SELECT c.chunk_id, d.doc_id, d.metadata FROM chunks c JOIN documents d ON d.doc_id = c.doc_id "
            "ORDER BY d.doc_id, c.position"
        )
        return ChunkDirectory(rows)

    @cached_property
    def _aboutness(self) -> Aboutness:
        names = self._entity_lookups[0]
        links = []
        # (catalog source, entity type) -> the names of its entities -> their ids: a catalog's services share words
        # among themselves, not with its teams or systems.
        catalogs: dict[tuple[str, str], dict[str, set[str]]] = {}
        # Only catalog pages state links (an eval set's shipped extractions, one per document, state none).
        for doc_id, record in self.state.payloads(SOURCE_EXTRACTION_PAYLOADS, self._directory.catalog_pages).items():
            typed = record.get(CATALOG_RECORD_KEY) or {}
            for subject in typed.get("names", {}):
                group = (doc_id.split(":", 1)[0], typed.get("types", {}).get(subject, ""))
                catalogs.setdefault(group, {})[subject] = names.ids(subject)
            for (subject, _, target), relationship_type in zip(record.get("triples", ()),
                                                                typed.get("relation_types", ())):
                if relationship_type in LINK_RELATIONSHIP_TYPES:
                    ids = names.ids(subject) | names.ids(target)
                    links.append((target, ids))
        documents = self.state.query("SELECT doc_id, title FROM documents")
        return Aboutness(documents, names.ids_by_name, self.config.generic_head_words, links, catalogs.values(),
                         self._directory.catalog_pages)


class ChunkDirectory:
    """Which chunks make up which document, and which documents are catalog pages: looked up per question without a
    database round trip."""

    def __init__(self, rows: Sequence[tuple[str, str, str]]):
        """``rows``: (chunk id, doc id, metadata JSON), each document's chunks in order."""
        self.chunks_of: dict[str, list[str]] = {}
        self.doc_of: dict[str, str] = {}
        self.catalog_pages: set[str] = set()
        # entity id -> ``chunks_wholly_about`` it, by the Aboutness it was computed with
        self._wholly_about: tuple[Aboutness | None, dict[str, frozenset[str]]] = (None, {})
        for chunk_id, doc_id, metadata in rows:
            self.doc_of[chunk_id] = doc_id
            if doc_id not in self.chunks_of and json.loads(metadata).get("catalog"):
                self.catalog_pages.add(doc_id)
            self.chunks_of.setdefault(doc_id, []).append(chunk_id)

    def siblings(self, chunk_id: str) -> frozenset[str]:
        """The chunks of the chunk's document, itself included."""
        return frozenset(self.chunks_of.get(self.doc_of.get(chunk_id, ""), (chunk_id,)))

    def chunks_wholly_about(self, aboutness: Aboutness, entity_id: str) -> frozenset[str]:
        """The chunks of the documents wholly about the entity (strength 1: its title, its own path name, a catalog
        link), not of those a shared folder makes about it only in part. Kept per entity: graph scoring asks for
        every entity a walk reaches, and at 100k chunks an entity's 51 copies of a document made it 0.9 ms of a
        question."""
        about, found = self._wholly_about
        if about is not aboutness:  # the index's Aboutness is built once per version, like this directory
            found = {}
            self._wholly_about = (aboutness, found)
        chunk_ids = found.get(entity_id)
        if chunk_ids is None:
            chunk_ids = found[entity_id] = frozenset(
                chunk_id for doc_id, strength in aboutness.documents_about(entity_id).items() if strength >= 1.0
                for chunk_id in self.chunks_of.get(doc_id, ()))
        return chunk_ids


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
    # BM25 as a share of the question's best match (a share of a perfect match rates how many of the question's words
    # a passage holds, which for a question that describes, such as an alert's text, is never many)
    keyword_scores: dict[str, float] = field(default_factory=dict)
    identifier_scores: dict[str, float] = field(default_factory=dict)  # share of the question's identifiers held
    # The relationships the question asked for, the ones followed, and the documents about what they reached.
    intents: list[RelationIntent] = field(default_factory=list)
    followed: list[Relationship] = field(default_factory=list)
    followed_step: dict[str, int] = field(default_factory=dict)  # relationship id -> 1, or 2.. along a chain
    relation_scores: dict[str, float] = field(default_factory=dict)
    # chunk id -> the entry chunk whose entities the walk that scored it started from
    reached_from: dict[str, str] = field(default_factory=dict)

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

    def retrieve(self, question: str, query_vector: np.ndarray, parameters: QueryParameters,
                 hidden: Hidden = NOTHING_HIDDEN) -> Retrieval:
        """Every candidate with the score the mode ranks by and the signals behind it, none of them from what
        ``hidden`` holds."""
        ...

    def passages(self, candidate_ids: Sequence[str]) -> dict[str, Passage]:
        """The texts of these candidates; a candidate the index no longer holds is absent."""
        ...


class VectorRetriever:
    """Chunks ranked by their similarity to the question."""

    def __init__(self, index: IndexReader):
        self.index = index

    def retrieve(self, question: str, query_vector: np.ndarray, parameters: QueryParameters,
                 hidden: Hidden = NOTHING_HIDDEN) -> Retrieval:
        return self._entry_chunks(question, query_vector, parameters, hidden)[0]

    def _entry_chunks(
        self, question: str, query_vector: np.ndarray, parameters: QueryParameters, hidden: Hidden
    ) -> tuple[Retrieval, list[str]]:
        """The vector retrieval (the entry chunks by similarity; the wider pool's similarities kept for scoring the
        chunks the graph brings in), and the entry chunks in the vector store's order, which seeding follows."""
        config = self.index.config
        timings: dict[str, float] = {}
        started = time.perf_counter()
        size = max(SCORING_POOL, config.vector_top_k)
        pool = self.index.vectors.search(CHUNKS, query_vector, size + min(len(hidden.chunks), HIDDEN_OVERFETCH),
                                         with_payload=False)
        pool = [hit for hit in pool if hit.point_id not in hidden.chunks][:size]
        vector_scores = {hit.point_id: max(0.0, hit.score) for hit in pool}
        entry = [hit.point_id for hit in pool[: config.vector_top_k]]
        timings["vector_search"] = elapsed_ms(started)
        return Retrieval(question, parameters.mode, {c: vector_scores[c] for c in entry}, vector_scores, timings), entry

    def passages(self, candidate_ids: Sequence[str]) -> dict[str, Passage]:
        chunks = self.index.state.chunks(chunk_ids=candidate_ids)
        documents = {d.doc_id: d
                     for d in self.index.state.documents(doc_ids={c.doc_id for c in chunks}, with_text=False)}
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


class KeywordRetriever(VectorRetriever):
    """Chunks ranked by BM25 alone: the flat keyword search the other modes are measured against."""

    def retrieve(self, question: str, query_vector: np.ndarray, parameters: QueryParameters,
                 hidden: Hidden = NOTHING_HIDDEN) -> Retrieval:
        started = time.perf_counter()
        scores = keyword_shares(self.index.keyword_index(), question, hidden)
        retrieval = Retrieval(question, parameters.mode, dict(scores), {}, {"keyword_search": elapsed_ms(started)})
        retrieval.keyword_scores = scores
        return retrieval


class GraphRetriever(VectorRetriever):
    """Chunks ranked by their graph score: the walk from the question's entities and the entry chunks' entities,
    and the documents about what the relationships the question asks for reach."""

    def retrieve(self, question: str, query_vector: np.ndarray, parameters: QueryParameters,
                 hidden: Hidden = NOTHING_HIDDEN) -> Retrieval:
        result, entry = self._entry_chunks(question, query_vector, parameters, hidden)
        config, graph, timings = self.index.config, self.index.graph, result.timings

        started = time.perf_counter()
        if config.keyword_weight:
            result.keyword_scores = keyword_shares(self.index.keyword_index(), question, hidden)
        if identifiers(question):  # none: nothing to match, and a process's first question need not build the index
            result.identifier_scores = {c: s for c, s in self.index.keyword_index().identifier_matches(question).items()
                                        if c not in hidden.chunks}
        timings["keyword_search"] = elapsed_ms(started)

        started = time.perf_counter()
        links = hidden.visible_links(self.index.name_index().link(question))
        linked = {eid: how for eid, how in self._link_question(links, query_vector).items()
                  if eid not in hidden.elements}
        seed_similarity = self._seed_similarity(result)
        entry_entities = graph.entities_of_chunks(top_ranked(seed_similarity, ENTRY_CHUNKS_FOR_SEEDS))
        timings["link"] = elapsed_ms(started)
        result.linked = linked

        # A question's links are its linked entities, so one that asks for relationships always has a walk, which
        # reads them too.
        if not linked and not any(entry_entities.values()):
            result.fell_back_to_vector = True
            result.vector_floor = min(result.vector_scores.values(), default=0.0)
            # Hybrid still fuses similarity with keywords; graph mode, with nothing to walk, ranks by similarity.
            result.combined = self._ranking_scores(result, entry, [], parameters) or result.combined
            return result

        started = time.perf_counter()
        seeds, origin = self._seed_weights(linked, entry_entities, seed_similarity)
        result.seed_via = self._seed_via(origin, entry_entities, linked)
        walked = walk(
            graph, seeds, max_hops=parameters.max_hops, decay=config.hop_decay, fanout=config.fanout,
            min_score=MIN_ACTIVATION, hidden=hidden.elements, chunks_up_to=MAX_CHUNKS_PER_ENTITY,
            asked=self.index.intents.asked(question, links),
        )
        result.reached = {hit.entity_id: hit for hit in walked.hits}
        timings["traverse"] = elapsed_ms(started)

        started = time.perf_counter()
        result.intents = self.index.intents.read(question, links, hidden.has_relationships_among(walked.asked))
        if result.intents:
            self._follow_intents(result, walked.asked, hidden.elements)
            result.relation_scores = {c: s for c, s in result.relation_scores.items() if c not in hidden.chunks}
        timings["follow"] = elapsed_ms(started)

        started = time.perf_counter()
        # What only a question link seeded is worth no more than that link's confidence (an entry chunk's entities
        # are vouched for by the chunk's similarity instead).
        link_bounds = {eid: confidence for eid, (_, confidence) in linked.items()
                       if seeds[eid] <= QUESTION_SEED_FACTOR * confidence}
        graph_scores, best_entity = self.chunk_graph_scores(result.reached, origin, link_bounds, walked.chunks_read)
        result.graph_scores = ({c: s for c, s in graph_scores.items() if c not in hidden.chunks} if hidden.chunks
                               else graph_scores)
        result.best_entity = {**best_entity, **result.best_entity}
        # The entry chunk each entity's walk set out from, for the entities a chunk-seeded walk reached.
        came_from = {eid: origin[hit.path[0]][0] for eid, hit in result.reached.items() if hit.path[0] in origin}
        result.reached_from = {chunk_id: came_from[eid] for chunk_id, eid in best_entity.items()
                               if eid in came_from and came_from[eid] != chunk_id}
        timings["graph_scores"] = elapsed_ms(started)

        started = time.perf_counter()
        result.vector_floor = min(result.vector_scores.values(), default=0.0)
        graph_pool = top_ranked(result.graph_scores, SCORING_POOL)
        result.combined = self._ranking_scores(result, entry, graph_pool, parameters)
        timings["fuse"] = elapsed_ms(started)
        return result

    def _ranking_scores(
        self, retrieval: Retrieval, entry: list[str], graph_pool: list[str], parameters: QueryParameters
    ) -> dict[str, float]:
        """Candidate → the score this mode ranks by, once the graph scores are known."""
        relation_weight = self.index.config.relation_weight
        candidates = set(graph_pool) | set(retrieval.relation_scores)
        return {
            c: retrieval.graph_scores.get(c, 0.0) + relation_weight * retrieval.relation_scores.get(c, 0.0)
            for c in candidates
        }

    def _link_question(self, links: Sequence[NameLink], query_vector: np.ndarray) -> dict[str, tuple[str, float]]:
        """Entity id → (how it was linked, confidence)."""
        linked: dict[str, tuple[str, float]] = {}
        for link in links:
            for eid in link.entity_ids:
                if link.confidence > linked.get(eid, ("", 0.0))[1]:
                    linked[eid] = (f"name:{link.phrase}", link.confidence)
        if self.index.config.entity_top_k:
            hits = self.index.vectors.search(ENTITIES, query_vector, self.index.config.entity_top_k, with_payload=False)
            for hit in hits:
                if hit.score >= ENTITY_LINK_MIN_SCORE and hit.point_id not in linked:
                    linked[hit.point_id] = ("embedding", float(hit.score))
        return linked

    @staticmethod
    def _seed_similarity(result: Retrieval) -> dict[str, float]:
        """How well each candidate answers the question's first hop: its similarity, plus ENTRY_KEYWORD_SHARE × its
        BM25 as a share of the question's best match when keywords are weighed (the passage that uses the question's
        own rare words is an entry point however its embedding ranks it)."""
        share = result.keyword_scores
        if not share:
            return result.vector_scores
        return {c: result.vector_scores.get(c, 0.0) + ENTRY_KEYWORD_SHARE * share.get(c, 0.0)
                for c in result.vector_scores.keys() | share.keys()}

    def _follow_intents(
        self, result: Retrieval, asked: Mapping[str, Relationship], hidden: frozenset[str] = frozenset(),
    ) -> None:
        """Follow each asked-for relationship one hop from its subjects in the asked-for direction, over the
        relationships the walk read for them (``IntentReader.asked``); the documents about the entities reached get
        the relation signal, as strong as they are about them (``Aboutness``), a catalog page a fifth as strong as
        the entity's own documents."""
        directory, aboutness = self.index.directory(), self.index.aboutness()
        reached: dict[str, tuple[str, str]] = {}  # entity -> (subject it was reached from, relationship id)
        reached_step: dict[str, int] = {}
        step, previous = 0, frozenset()  # the step of the intent before, and what it reached
        for intent in result.intents:
            # "which services depend on X, and who owns them": the owners of what the step before reached.
            chain = intent.chained and bool(previous)
            subjects = previous if chain else intent.subjects
            step = step + 1 if chain else 1
            this_step: set[str] = set()
            for relationship in sorted((r for rid, r in asked.items()
                                        if r.type == intent.relationship_type and rid not in hidden),
                                       key=lambda r: r.relationship_id):
                ends = (relationship.source_id, relationship.target_id)
                subject, other = ends if intent.direction == "outgoing" else ends[::-1]
                if subject in subjects and other not in subjects and other not in hidden:
                    result.followed.append(relationship)
                    result.followed_step.setdefault(relationship.relationship_id, step)
                    if other not in reached:
                        reached[other] = (subject, relationship.relationship_id)
                        reached_step[other] = step
                    this_step.add(other)
            previous = frozenset(this_step)
        for entity_id in sorted(reached):
            # What a later step reached (the owners of the dependents) answers a follow-up: its documents rank
            # after the first step's.
            chain_factor = CHAIN_STEP_FACTOR ** (reached_step[entity_id] - 1)
            for doc_id, strength in aboutness.documents_about(entity_id).items():
                score = strength * chain_factor * (CATALOG_PAGE_FACTOR if doc_id in directory.catalog_pages else 1.0)
                for chunk_id in directory.chunks_of.get(doc_id, ()):
                    if score > result.relation_scores.get(chunk_id, 0.0):
                        result.relation_scores[chunk_id] = score
                        result.best_entity[chunk_id] = entity_id
        for entity_id in reached:
            path, via = [entity_id], []
            while path[-1] in reached and len(path) <= len(reached):  # back along the chain to a question entity
                subject, relationship_id = reached[path[-1]]
                path.append(subject)
                via.append(relationship_id)
            result.reached[entity_id] = TraversalHit(entity_id, len(via), 1.0, tuple(reversed(path)),
                                                     tuple(reversed(via)))

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
        self, reached: dict[str, TraversalHit], origin: dict[str, tuple[str, float]], link_bounds: dict[str, float],
        chunks_read: Mapping[str, list[str]] = MappingProxyType({}),
    ) -> tuple[dict[str, float], dict[str, str]]:
        """Chunk → best activation × specificity over the reached entities it mentions (× SUBJECT_BONUS when the
        entity is what the chunk's document is about: its title is one of the entity's names), at most the
        confidence of the question link the walk started from when only that link seeded it (``link_bounds``: a
        passage reached from a weak link stays weak), clipped to 1, and the entity that gave it that score.
        A seed taken from an entry chunk does not score that chunk's document with its own weight (the chunk already
        has its similarity, and a document does not vouch for its other passages), only with what another entry chunk
        gave the entity: entry chunks of different documents that share rare entities support each other.
        ``origin``: chunk-seeded entity → (its entry chunk, the weight another one gave it); ``chunks_read``: the
        chunks of entities the walk's store read ahead (``Walk.chunks_read``), read again for none of them."""
        graph = self.index.graph
        mentions = self.index.mention_counts([eid for eid, hit in reached.items() if hit.score >= MIN_ACTIVATION])
        specific = {eid: specificity(count) for eid, count in mentions.items() if count <= MAX_CHUNKS_PER_ENTITY}
        chunks_of = {eid: chunks_read[eid] for eid in specific if chunks_read.get(eid)}
        unread = [eid for eid in specific if eid not in chunks_read]
        if unread:
            chunks_of.update(graph.chunks_of_entities(unread))
        directory, aboutness = self.index.directory(), self.index.aboutness()
        # Each chunk keeps its largest contribution, ties going to the smallest entity id. Most of an entity's chunks
        # get the same one, so those are assigned in bulk, entities in rising order of it (the later overwrite);
        # the few that differ (its subject's chunks, the entry chunk it came from) are compared one by one after.
        plain: list[tuple[float, str, list[str]]] = []
        singular: list[tuple[float, str, str]] = []
        for eid, chunk_ids in chunks_of.items():
            hit = reached[eid]
            about_it = directory.chunks_wholly_about(aboutness, eid)
            bound = link_bounds.get(hit.path[0], 1.0)
            came_from, other_weight = origin.get(eid, ("", 0.0)) if hit.hops == 0 else ("", 0.0)
            own = directory.siblings(came_from) if came_from else frozenset()
            if about_it or own:
                others = []
                for chunk_id in chunk_ids:
                    if chunk_id in about_it or chunk_id in own:
                        activation = other_weight if chunk_id in own else hit.score
                        bonus = SUBJECT_BONUS if chunk_id in about_it else 1.0
                        singular.append((min(activation * specific[eid] * bonus, bound), eid, chunk_id))
                    else:
                        others.append(chunk_id)
                chunk_ids = others
            plain.append((min(hit.score * specific[eid], bound), eid, chunk_ids))
        return strongest_contributions(plain, singular)


def keyword_shares(index: KeywordIndex, question: str, hidden: Hidden) -> dict[str, float]:
    """BM25 as a share of the question's best match among the chunks not hidden (a restricted page's better match
    would otherwise lower every public score, and show that it exists)."""
    if not hidden.chunks:
        return index.best_match_shares(question, SCORING_POOL)
    scores = index.scores(question, SCORING_POOL + min(len(hidden.chunks), HIDDEN_OVERFETCH))
    visible = dict(sorted(((c, s) for c, s in scores.items() if c not in hidden.chunks),
                          key=lambda item: (-item[1], item[0]))[:SCORING_POOL])
    return normalize_by_max(visible)


def specificity(mention_count: int) -> float:
    """1 / (1 + log10(chunks mentioning the entity)): 1 for one chunk, 1/2 at ten, 1/3 at a hundred."""
    return 1.0 / (1.0 + math.log10(max(1, mention_count)))


def strongest_contributions(
    plain: list[tuple[float, str, list[str]]], singular: list[tuple[float, str, str]]
) -> tuple[dict[str, float], dict[str, str]]:
    """Chunk → its largest positive contribution, clipped to 1, and chunk → the smallest entity id giving it:
    ``plain`` holds one contribution an entity gives each of its chunks, ``singular`` single (contribution, entity,
    chunk) triples. Thousands of chunks at 100k chunks: a plain entity's are assigned in bulk, in C."""
    largest: dict[str, float] = {}
    giver: dict[str, str] = {}
    ordered = sorted(plain, key=lambda item: item[1], reverse=True)
    ordered.sort(key=lambda item: item[0])  # stable: of equal contributions, the smallest entity id comes last
    for contribution, eid, chunk_ids in ordered:
        if contribution > 0.0:
            largest.update(dict.fromkeys(chunk_ids, contribution))
            giver.update(dict.fromkeys(chunk_ids, eid))
    for contribution, eid, chunk_id in singular:
        held = largest.get(chunk_id)
        if contribution > 0.0 and (held is None or contribution > held
                                   or (contribution == held and eid < giver[chunk_id])):
            largest[chunk_id], giver[chunk_id] = contribution, eid
    if any(item[0] > 1.0 for item in plain) or any(item[0] > 1.0 for item in singular):
        largest = {chunk_id: min(1.0, contribution) for chunk_id, contribution in largest.items()}
    return largest, giver


class HybridRetriever(GraphRetriever):
    """Chunks ranked by their similarity, their keywords, their graph score and the relation signal together
    (weighted sum or reciprocal-rank fusion)."""

    def _ranking_scores(
        self, retrieval: Retrieval, entry: list[str], graph_pool: list[str], parameters: QueryParameters
    ) -> dict[str, float]:
        config = self.index.config
        candidates = set(entry) | set(graph_pool) | set(retrieval.keyword_scores) | set(retrieval.relation_scores)
        candidates |= set(retrieval.identifier_scores)
        signals = {signal.name: signal.scores(retrieval, candidates) for signal in SIGNALS}
        weights = signal_weights(config)

        def fuse(signals: dict[str, dict[str, float]]) -> dict[str, float]:
            if parameters.fusion == "rrf":
                return reciprocal_rank_fusion(
                    {name: rank(scores) if name == "vector" else rank({c: s for c, s in scores.items() if s > 0})
                     for name, scores in signals.items()},
                    k=config.rrf_k,
                    weights=weights,
                )
            return weighted_fusion(signals, weights)

        without_graph = fuse({name: scores for name, scores in signals.items() if name != "graph"})
        return cap_at_origin(fuse(signals), without_graph, retrieval.reached_from)


class GlobalRetriever:
    """Community summaries ranked by their similarity to the question: for broad questions about a whole topic."""

    def __init__(self, index: IndexReader):
        self.index = index

    def retrieve(self, question: str, query_vector: np.ndarray, parameters: QueryParameters,
                 hidden: Hidden = NOTHING_HIDDEN) -> Retrieval:
        # A summary is shown only when its caller may read every document it was written from (query.engine).
        started = time.perf_counter()
        hits = self.index.vectors.search(COMMUNITIES, query_vector, SUMMARIES_PER_RESULT * parameters.top_k,
                                         with_payload=False)
        scores = {hit.point_id: float(hit.score) for hit in hits}
        return Retrieval(question, parameters.mode, scores, dict(scores), {"communities": elapsed_ms(started)})

    def passages(self, candidate_ids: Sequence[str]) -> dict[str, Passage]:
        state = self.index.state
        summaries = state.payloads(COMMUNITY_SUMMARY_PAYLOADS, candidate_ids)
        members = {cid: c["entity_ids"] for cid, c in state.payloads(COMMUNITY_PAYLOADS, summaries).items()}
        documents_of = self.index.graph.documents_of_entities({eid for ids in members.values() for eid in ids})
        cited_ids = {cid: summaries[cid]["chunk_ids"][:CITATIONS_PER_SUMMARY] for cid in members}
        cited_chunks = {c.chunk_id: c for c in state.chunks(chunk_ids=[c for ids in cited_ids.values() for c in ids])}
        documents = {d.doc_id: d for d in state.documents(doc_ids={c.doc_id for c in cited_chunks.values()},
                                                          with_text=False)}
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
                # The documents stored with the text (every one it was written from) and its members' current ones.
                written_from=frozenset(summary.get("written_from", ()))
                | frozenset(d for eid in entity_ids for d in documents_of.get(eid, ())),
                about=tuple(summary["top_entities"]),
            )
        return passages


RETRIEVERS: Mapping[Mode, Callable[[IndexReader], Retriever]] = {
    "vector": VectorRetriever,
    "keyword": KeywordRetriever,
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
