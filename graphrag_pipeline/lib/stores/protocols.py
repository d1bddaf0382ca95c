"""The small protocols every store and model implements; one contract test suite runs against each implementation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ContextManager, Iterable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from graphrag_pipeline.lib.core.models import ChunkText, Entity, EntityNames, Relationship, VectorHit, VectorPoint

# Vector collections every backend holds.
CHUNKS = "chunks"
ENTITIES = "entities"
COMMUNITIES = "communities"


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalized vectors."""

    @property
    def name(self) -> str: ...  # provider/model, part of every embedding cache key

    @property
    def dimension(self) -> int: ...

    @property
    def max_tokens(self) -> int: ...  # longest input the model accepts; chunk sizes are capped to it

    def count_tokens(self, text: str) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...  # shape (len(texts), dimension), float32, unit norm


# float16 keeps each component of a unit vector to 2**-11 of its size, so a cosine of two unit vectors to 2**-11.
SCORE_TOLERANCE = 2**-11


@runtime_checkable
class VectorStore(Protocol):
    """Named collections of vectors with JSON payloads; point ids are the pipeline's own string ids.

    Scores are cosine similarities. A store may keep vectors at half precision (the embedded store does), so a score
    is exact only to ``SCORE_TOLERANCE``, and ``vectors`` returns what was stored, not what was given.
    """

    def ensure_collection(self, collection: str, dimension: int) -> None: ...

    def upsert(self, collection: str, points: Sequence[VectorPoint]) -> None: ...

    def delete(self, collection: str, point_ids: Sequence[str]) -> None: ...

    def delete_by_document(self, collection: str, doc_id: str) -> None: ...  # payload field "doc_ids" contains doc_id

    def search(
        self,
        collection: str,
        vector: Sequence[float] | np.ndarray,
        limit: int,
        must_match: dict[str, Any] | None = None,  # payload field -> value that must match (keyword equality)
        with_payload: bool = True,  # False: hits carry an empty payload (a query ranks by ids and scores alone)
    ) -> list[VectorHit]: ...

    def count(self, collection: str) -> int: ...

    def point_ids(self, collection: str) -> set[str]: ...

    # The stored vectors of those of ``point_ids`` that exist (a stage reuses a point's vector when only its payload
    # changed, instead of embedding its text again).
    def vectors(self, collection: str, point_ids: Sequence[str]) -> dict[str, np.ndarray]: ...

    def collections(self) -> list[str]: ...  # names of the collections that exist

    # A block of this thread's writes to one collection, durable once the block has ended (or raised): the embedded
    # store keeps the collection's shard open through it (and other writers out), where each write would load, flush
    # and close it. A process killed inside the block may have kept any part of them, so a caller books what the
    # block wrote after it. For a collection with one writer, its stage.
    def session(self, collection: str) -> ContextManager[None]: ...

    def publish(self) -> None: ...  # make all writes visible to readers in other processes (no-op for servers)

    def close(self) -> None: ...


@dataclass(frozen=True)
class Neighbourhood:
    """One entity's relationships as spreading activation needs them (see ``GraphStore.neighbourhoods``).

    ``degree`` and ``heaviest`` describe every relationship touching the entity, whatever the type filter, because
    the activation an entity passes on is scored against all of them; ``edges`` holds only the allowed types.
    Self-loops are left out everywhere: they lead nowhere.
    """

    degree: int  # relationships touching the entity in either direction, any type, self-loops excluded
    heaviest: float  # heaviest weight among those relationships (0.0 when there are none)
    # (neighbour id, relationship id, weight) of the allowed types, heaviest first, ties by neighbour id then
    # relationship id; a neighbour joined by parallel relationships appears once per relationship
    edges: tuple[tuple[str, str, float], ...]
    complete: bool  # False when the limit cut allowed relationships off the end of ``edges``


@dataclass(frozen=True)
class AskedRelationships:
    """The relationships a question asks for (``query.intent.IntentReader.asked``), which a store reads with the
    question's walk (``WalkPlan.asked``) rather than in round trips of their own: every relationship of ``types``
    between another entity and one of ``entity_ids``, or one of the entities ``depth - 1`` or fewer ``steps`` reach
    from them. A step goes from an entity along a relationship of a (type, direction) pair in ``steps``: to its
    target when the entity is its source and the direction "outgoing", to its source when it is its target and the
    direction "incoming". A question's chain ("which services depend on X, and who owns them") follows the
    relationships the step before it reached, which lie within that many steps. ``also``: more types read, along
    which no step goes (the incident context reads the owners and runbooks of every service its walk may reach)."""

    entity_ids: tuple[str, ...]  # sorted
    steps: tuple[tuple[str, str], ...]  # (relationship type, "outgoing" | "incoming"), sorted
    depth: int  # >= 1
    also: tuple[str, ...] = ()  # sorted

    @property
    def types(self) -> tuple[str, ...]:
        return tuple(sorted({*(relationship_type for relationship_type, _ in self.steps), *self.also}))

    def reached(self, relationships: Iterable[Relationship], entity_ids: set[str]) -> set[str]:
        """The entities one step along ``relationships`` reaches from ``entity_ids``."""
        reached: set[str] = set()
        for relationship in relationships:
            if (relationship.type, "outgoing") in self.steps and relationship.source_id in entity_ids:
                reached.add(relationship.target_id)
            if (relationship.type, "incoming") in self.steps and relationship.target_id in entity_ids:
                reached.add(relationship.source_id)
        return reached


def read_asked_relationships(graph: GraphStore, asked: AskedRelationships) -> dict[str, Relationship]:
    """``AskedRelationships`` read with ``relationships_of``, a round trip per step: for a store whose reads cost
    none, and as the reference a store's own single read is tested against."""
    found: dict[str, Relationship] = {}
    read: set[str] = set()
    frontier = set(asked.entity_ids)
    for _ in range(asked.depth):
        if not frontier:
            break
        relationships = graph.relationships_of(sorted(frontier), asked.types)
        found.update(relationships)
        read |= frontier
        frontier = asked.reached(relationships.values(), frontier) - read
    return found


@dataclass(frozen=True)
class WalkPlan:
    """What a walk will do, told to the store before it starts (``GraphStore.neighbourhoods_ahead``) so a server can
    read, in one round trip, the neighbourhoods it is going to expand."""

    relationship_types: tuple[str, ...] | None  # sorted; None: every type
    max_hops: int
    decay: float
    min_score: float
    limit: int  # edges listed per neighbourhood
    # Scoring asks next for the chunks of the entities the walk reached that at most this many chunks mention
    # (``Entity.mention_count``); a store may read them ahead for the entities it reads ahead. 0: it is not asked.
    chunks_up_to: int = 0
    asked: AskedRelationships | None = None  # read with the walk when given (``ReadAhead.asked``)


@dataclass(frozen=True)
class ReadAhead:
    """What a store read for a walk before it started (``GraphStore.neighbourhoods_ahead``)."""

    neighbourhoods: dict[str, Neighbourhood]
    # Entity id -> the chunks mentioning it as ``chunks_of_entities`` lists them ([] for none), for the entities whose
    # chunks the store read ahead (``WalkPlan.chunks_up_to``): an entity absent was not read.
    chunks_of: dict[str, list[str]] = field(default_factory=dict)
    # Relationship id -> relationship, with provenance, for ``WalkPlan.asked`` (empty when none was given).
    asked: dict[str, Relationship] = field(default_factory=dict)


@dataclass(frozen=True)
class TraversalHit:
    """An entity reached from the seeds: how far, by which path, with how much decayed activation."""

    entity_id: str
    hops: int
    score: float
    path: tuple[str, ...]  # entity ids from a seed to this entity
    via_relationships: tuple[str, ...] = ()  # relationship ids along the path


@dataclass(frozen=True)
class Subgraph:
    """The entities an answer names and the relationships among them (``GraphStore.answer_subgraph``)."""

    entities: dict[str, Entity]
    relationships: list[Relationship]  # both ends among ``entities``, heaviest first, ties by id; at most the limit


@dataclass(frozen=True)
class GraphStats:
    entity_count: int
    relationship_count: int
    chunk_count: int
    entity_types: dict[str, int] = field(default_factory=dict)
    relationship_types: dict[str, int] = field(default_factory=dict)


def check_page(offset: int, limit: int) -> None:
    """The pagination arguments every GraphStore listing accepts."""
    if offset < 0 or limit < 0:
        raise ValueError(f"offset and limit must be >= 0, got offset={offset}, limit={limit}")


@runtime_checkable
class GraphStore(Protocol):
    """Typed entities and relationships with provenance, chunk→entity mentions, per-entity neighbourhoods."""

    def upsert_entities(self, entities: Sequence[Entity]) -> None: ...

    def upsert_relationships(self, relationships: Sequence[Relationship]) -> None: ...

    def set_chunk_mentions(self, mentions: dict[str, Sequence[str]]) -> None: ...  # chunk id -> entity ids (replaces)

    # The text and document of chunks that mention entities, for a database its users query directly (Neo4j's
    # (:Document)<-[:PART_OF]-(:Chunk {text})-[:MENTIONS]->(:Entity)); a store that keeps ids only (the embedded one:
    # the state holds the text) says so with ``keeps_chunk_texts`` and is not given them. Chunks without mentions are
    # not written.
    keeps_chunk_texts: bool

    def describe_chunks(self, chunks: Sequence[ChunkText]) -> None: ...

    def delete_entities(self, entity_ids: Sequence[str]) -> None: ...  # with their relationships and mentions

    def delete_relationships(self, relationship_ids: Sequence[str]) -> None: ...

    def delete_chunks(self, chunk_ids: Sequence[str]) -> None: ...  # their mentions

    def get_entities(self, entity_ids: Iterable[str]) -> dict[str, Entity]: ...

    def get_relationships(self, relationship_ids: Iterable[str]) -> dict[str, Relationship]: ...

    # Entity id -> the documents it comes from (``Entity.doc_ids``), of those of ``entity_ids`` that are stored: what
    # an access check reads, without the rest of each record (global mode checks hundreds of members a question).
    def documents_of_entities(self, entity_ids: Iterable[str]) -> dict[str, tuple[str, ...]]: ...

    def entities_of_chunks(self, chunk_ids: Iterable[str]) -> dict[str, list[str]]: ...

    def chunks_of_entities(self, entity_ids: Iterable[str]) -> dict[str, list[str]]: ...

    def neighbourhoods(
        self,
        entity_ids: Iterable[str],
        relationship_types: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> dict[str, Neighbourhood]:
        """Entity id → its ``Neighbourhood``, for every stored entity among ``entity_ids`` (one without
        relationships included); unknown ids are absent. ``relationship_types`` filters ``edges`` (``None``: all
        types; unknown names match nothing), ``limit`` caps ``edges`` per entity (``None``: no cap; negative:
        ``ValueError``). Query-side traversal (``graphrag_pipeline.query.traversal``) calls it once per hop."""
        ...

    def neighbourhoods_ahead(self, seeds: Mapping[str, float], plan: WalkPlan) -> ReadAhead:
        """The seeds' neighbourhoods as ``neighbourhoods(seeds, plan.relationship_types, plan.limit)`` gives them,
        and, where it saves round trips, the neighbourhoods of entities a walk from seeds of those activations may
        expand: at least those within ``plan.max_hops - 1`` steps along listed edges whose best activation over such
        steps, scored as ``query.traversal`` scores a hop, reaches ``plan.min_score``; with ``plan.chunks_up_to``, the
        chunks of those of them, and of the entities one more such step reaches, that at most that many chunks
        mention. Traversal reads whatever else it expands hop by hop with ``neighbourhoods``, and scoring the chunks
        it did not get, so a walk is the same over a store that returns only the seeds' (an in-process one, for
        which a read costs no round trip) and over one that reads ahead. With ``plan.asked``, also those
        relationships (``ReadAhead.asked``), as ``read_asked_relationships`` gives them."""
        ...

    def relationships_of(
        self, entity_ids: Iterable[str], relationship_types: Sequence[str] | None = None, provenance: bool = True
    ) -> dict[str, Relationship]:
        """Relationship id → every stored relationship of one of ``relationship_types`` (``None``: any type) between
        one of ``entity_ids`` and another entity: ``get_relationships`` of the ids ``neighbourhoods`` lists for them,
        in one read. The query's typed one-hop steps (asked-for relationships, the incident context) take it: on a
        server, one round trip instead of two, and a lookup from the entities instead of by relationship id.
        ``provenance=False``: each without its chunk ids, document ids and predicates (empty), which community
        summaries, reading every relationship of the communities they rewrite, do not use."""
        ...

    def asked_relationships(self, asked: Sequence[AskedRelationships]) -> dict[str, Relationship]:
        """Relationship id → relationship, with provenance, of every one of ``asked`` as ``read_asked_relationships``
        reads it, in one read: the incident context's walks, owners and runbooks in one round trip on a server
        instead of one per hop and direction."""
        ...

    def relationships_between(self, entity_ids: Iterable[str], limit: int = 50) -> list[Relationship]: ...

    def answer_subgraph(
        self, entity_ids: Iterable[str], chunk_ids: Iterable[str], mentioned_among: Iterable[str], limit: int = 50
    ) -> Subgraph:
        """``entity_ids`` and those of ``mentioned_among`` that one of ``chunk_ids`` mentions, as ``get_entities``
        gives them but without their ``chunk_ids`` (a hub's run to thousands), with ``relationships_between`` them
        and ``limit``: what a query's answer names, in one read (on a server, one round trip instead of three)."""
        ...

    def stats(self) -> GraphStats: ...

    def list_entities(self, offset: int = 0, limit: int = 50, order_by: str = "mention_count") -> list[Entity]: ...

    def list_entity_names(self, offset: int = 0, limit: int = 50) -> list[EntityNames]: ...  # by entity id

    def list_relationships(self, offset: int = 0, limit: int = 50) -> list[Relationship]: ...

    def all_entity_ids(self) -> set[str]: ...

    def all_relationship_ids(self) -> set[str]: ...

    # (a, b, weight) with a < b for community detection: parallel relationships summed, self-loops left out; with
    # ``around``, only the edges with an end among those entities (what an incremental run re-clusters).
    def weighted_edges(self, around: Iterable[str] | None = None) -> list[tuple[str, str, float]]: ...

    def close(self) -> None: ...
