"""The Neo4j-protocol graph store: any Bolt server that speaks Cypher (Neo4j 5, AuraDB, ArcadeDB's Bolt plugin).

Layout in the database:

* ``(:Entity {entity_id, name, canonical, type, description, mention_count, chunk_ids, doc_ids, aliases, title})``
  (``title``: a catalog's display name, absent when none) plus
  the entity's ontology type as a second label in one style, PascalCase (``:Entity:Service``, ``:Entity:Person``
  for spaCy's PERSON), when that type is a validated identifier of the ontology; the ``type`` property keeps the type
  as spelled and is the source of truth for reads.
* ``(:Entity)-[:DEPENDS_ON {relationship_id, type, weight, description, predicates, chunk_ids, doc_ids}]->(:Entity)``:
  the Neo4j relationship type is the relationship's ontology type, or the ontology's fallback type when the
  relationship's type is not in the ontology; the ``type`` property keeps the relationship's own type.
* The lexical graph Neo4j users know from neo4j-graphrag: ``(:Chunk {chunk_id, doc_id, position, text})-[:MENTIONS]->
  (:Entity)`` and ``(:Chunk)-[:PART_OF]->(:Document {doc_id, title, uri, access_groups})``. A chunk node without
  mentions is removed, and a document node without chunks with it. ``access_groups`` lists who may read the
  document (empty: everyone): the database holds restricted text, and a user who queries it applies that rule.

Nothing from a document or an LLM is ever interpolated into Cypher text: labels and relationship types come only
from the ontology, are re-validated against ``IDENTIFIER`` right before use and quoted; every value is a parameter.

Writes are batched ``UNWIND $rows … MERGE`` statements keyed by the pipeline's content-derived ids (one write
transaction per batch, retried by the driver on transient errors); reads run in read transactions, so a cluster
routes them to followers. ``neighbourhoods`` (what query-side traversal reads, once per hop) is one Cypher query
for the whole frontier that lists only the heaviest relationships each entity needs.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from neo4j import Driver, GraphDatabase, ManagedTransaction
from neo4j.exceptions import ServiceUnavailable, SessionExpired

from graphrag_pipeline.lib.core.config import IDENTIFIER, Ontology, default_config_data
from graphrag_pipeline.lib.core.models import ChunkText, Entity, EntityNames, Relationship
from graphrag_pipeline.lib.stores.protocols import (
    AskedRelationships, GraphStats, Neighbourhood, ReadAhead, Subgraph, WalkPlan, check_page,
)

T = TypeVar("T")

ENTITY_LABEL = "Entity"
CHUNK_LABEL = "Chunk"
DOCUMENT_LABEL = "Document"
MENTIONS = "MENTIONS"
PART_OF = "PART_OF"
_RESERVED_LABELS = frozenset({ENTITY_LABEL, CHUNK_LABEL, DOCUMENT_LABEL})

# Idempotent schema: uniqueness constraints carry the id indexes the MERGEs use.
_SCHEMA = (
    f"CREATE CONSTRAINT entity_id_unique IF NOT EXISTS FOR (e:{ENTITY_LABEL}) REQUIRE e.entity_id IS UNIQUE",
    f"CREATE CONSTRAINT chunk_id_unique IF NOT EXISTS FOR (c:{CHUNK_LABEL}) REQUIRE c.chunk_id IS UNIQUE",
    f"CREATE CONSTRAINT document_id_unique IF NOT EXISTS FOR (d:{DOCUMENT_LABEL}) REQUIRE d.doc_id IS UNIQUE",
    f"CREATE INDEX entity_name IF NOT EXISTS FOR (e:{ENTITY_LABEL}) ON (e.name)",
    f"CREATE INDEX entity_mention_count IF NOT EXISTS FOR (e:{ENTITY_LABEL}) ON (e.mention_count)",
    f"CREATE INDEX entity_title IF NOT EXISTS FOR (e:{ENTITY_LABEL}) ON (e.title)",
)

# Record field -> its Cypher expression, over ``e`` for an entity and ``(s)-[r]->(t)`` for a relationship.
_ENTITY_COLUMNS = {"entity_id": "e.entity_id", **{field: f"e.{field}" for field in (
    "name", "canonical", "type", "description", "mention_count", "chunk_ids", "doc_ids", "aliases", "title")}}
_RELATIONSHIP_COLUMNS = {
    "relationship_id": "r.relationship_id", "source_id": "s.entity_id", "target_id": "t.entity_id", "type": "r.type",
    "description": "r.description", "weight": "r.weight", "chunk_ids": "r.chunk_ids", "doc_ids": "r.doc_ids",
    "predicates": "r.predicates",
}
_ENTITY_RETURN = ", ".join(f"{expression} AS {field}" for field, expression in _ENTITY_COLUMNS.items())
_RELATIONSHIP_RETURN = ", ".join(f"{expression} AS {field}" for field, expression in _RELATIONSHIP_COLUMNS.items())
_PROVENANCE_FIELDS = ("chunk_ids", "doc_ids", "predicates")
_RELATIONSHIP_RETURN_WITHOUT_PROVENANCE = ", ".join(f"{expression} AS {field}" for field, expression
                                                   in _RELATIONSHIP_COLUMNS.items() if field not in _PROVENANCE_FIELDS)
_ORDER_ENTITIES = {
    "mention_count": "e.mention_count DESC, e.name, e.entity_id",
    "name": "e.name, e.entity_id",
}


def checked_identifier(name: str) -> str:
    """``name`` quoted for Cypher, after re-validating it as a plain identifier (the only text ever interpolated)."""
    if not isinstance(name, str) or not IDENTIFIER.match(name):
        raise ValueError(f"{name!r} is not a valid label or relationship type (must match {IDENTIFIER.pattern})")
    return f"`{name}`"


def node_label(entity_type: str) -> str:
    """An ontology type as a node label: PascalCase (PERSON → Person, WORK_OF_ART → WorkOfArt, Service → Service)."""
    if entity_type.isupper() or "_" in entity_type:
        return "".join(part.capitalize() for part in entity_type.split("_") if part)
    return entity_type[0].upper() + entity_type[1:]


def default_ontology() -> Ontology:
    return Ontology.model_validate(default_config_data()["ontology"])


def _unique(ids: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(ids))


def _entity_from_record(record: dict[str, Any]) -> Entity:
    return Entity(
        entity_id=record["entity_id"],
        name=record["name"],
        canonical=record["canonical"],
        type=record["type"],
        description=record["description"],
        mention_count=int(record["mention_count"]),
        chunk_ids=tuple(record["chunk_ids"] or ()),
        doc_ids=tuple(record["doc_ids"] or ()),
        aliases=tuple(record["aliases"] or ()),
        title=record["title"] or "",
    )


def _relationship_from_record(record: dict[str, Any]) -> Relationship:
    return Relationship(
        relationship_id=record["relationship_id"],
        source_id=record["source_id"],
        target_id=record["target_id"],
        type=record["type"],
        description=record["description"],
        weight=float(record["weight"]),
        chunk_ids=tuple(record.get("chunk_ids") or ()),  # absent from a read without provenance
        doc_ids=tuple(record.get("doc_ids") or ()),
        predicates=tuple(record.get("predicates") or ()),
    )


def _entity_row(entity: Entity) -> dict[str, Any]:
    if not entity.entity_id:
        raise ValueError(f"entity without an id: {entity.name!r}")
    return {
        "entity_id": entity.entity_id,
        "props": {
            "name": entity.name,
            "canonical": entity.canonical,
            "type": entity.type,
            "description": entity.description,
            "mention_count": int(entity.mention_count),
            "chunk_ids": list(entity.chunk_ids),
            "doc_ids": list(entity.doc_ids),
            "aliases": list(entity.aliases),
            # Absent rather than empty when no catalog titles the entity, as Neo4j users expect of a property.
            "title": entity.title or None,
        },
    }


def _relationship_row(relationship: Relationship) -> dict[str, Any]:
    if not relationship.relationship_id:
        raise ValueError(f"relationship without an id: {relationship.source_id} -> {relationship.target_id}")
    weight = float(relationship.weight)
    if not (math.isfinite(weight) and weight > 0):
        raise ValueError(f"relationship {relationship.relationship_id} has weight {weight!r}; weights must be > 0")
    return {
        "relationship_id": relationship.relationship_id,
        "source_id": relationship.source_id,
        "target_id": relationship.target_id,
        "props": {
            "type": relationship.type,
            "description": relationship.description,
            "weight": weight,
            "chunk_ids": list(relationship.chunk_ids),
            "doc_ids": list(relationship.doc_ids),
            "predicates": list(relationship.predicates),
        },
    }


# The neighbourhood of each row's entity ``e`` (which carries its ``activation`` along): every relationship to another
# entity (both directions, self-loops excluded), the degree and heaviest weight over all of them, and the heaviest
# ``$limit`` edges of the allowed types (``$types`` are relationship ``type`` properties, a parameter like every
# value). OPTIONAL MATCH keeps the entities without relationships: traversal learns from them that a seed exists.
_NEIGHBOURHOOD_OF_E = f"""
OPTIONAL MATCH (e)-[r]-(n:{ENTITY_LABEL})
WHERE n <> e
WITH e, activation, r, n ORDER BY r.weight DESC, n.entity_id, r.relationship_id
WITH e, activation, count(r) AS degree, max(r.weight) AS heaviest,
     collect(CASE WHEN r IS NULL THEN NULL ELSE [n.entity_id, r.relationship_id, r.type, r.weight] END) AS edges
WITH e, activation, degree, heaviest, [x IN edges WHERE $types IS NULL OR x[2] IN $types] AS allowed
"""
_RETURN_NEIGHBOURHOOD = """
RETURN e.entity_id AS entity_id, degree, heaviest, size(allowed) AS total,
       CASE WHEN $limit IS NULL THEN allowed ELSE allowed[0..$limit] END AS edges
"""
# For entity ids, each once (a repeated id would count its relationships twice).
_NEIGHBOURHOODS = (
    f"UNWIND $ids AS id MATCH (e:{ENTITY_LABEL} {{entity_id: id}}) WITH e, 0.0 AS activation"
    + _NEIGHBOURHOOD_OF_E + _RETURN_NEIGHBOURHOOD
)

_SEEDS = f"UNWIND $seeds AS seed MATCH (e:{ENTITY_LABEL} {{entity_id: seed[0]}}) WITH e, seed[1] AS activation"
# The chunks mentioning ``e`` when at most ``$chunks_up_to`` do (null: not read); the condition comes first, so a hub's
# thousands of mentions are never listed.
_CHUNK_IDS = (f"CASE WHEN e.mention_count <= $chunks_up_to THEN [(e)<-[:{MENTIONS}]-(c:{CHUNK_LABEL}) | c.chunk_id] "
              "ELSE NULL END")
# What one hop of spreading activation (``query.traversal``'s scoring) from ``e`` reaches: [entity id, activation] per
# relationship of an allowed type. The walk takes only the heaviest listed ones, so this is a superset of what it
# reaches, and costs no read: the neighbourhood just read lists them all.
_REACH = "[x IN allowed | [x[0], activation * $decay * (x[3] / heaviest) / (1.0 + log10(degree))]]"


def scoped_subqueries(agent: str) -> bool:
    """Whether the Bolt server that calls itself ``agent`` takes a subquery's imports as ``CALL (x) { … }``: Neo4j
    since 5.23 (the importing ``WITH x`` of earlier versions is deprecated there, and gone from Cypher 25), and the
    servers that report no Neo4j version or a later one (ArcadeDB reports "Neo4j/5.26.0 compatible", Memgraph an
    earlier one, as "Neo4j/v5.11.0 compatible")."""
    version = re.match(r"Neo4j/v?(\d+)\.(\d+)", agent)
    return version is None or (int(version[1]), int(version[2])) >= (5, 23)


def _subquery(imported: str, body: str, scoped: bool) -> str:
    """``body`` as a ``CALL`` subquery that imports the variable ``imported`` (see ``scoped_subqueries``)."""
    return f"CALL ({imported}) {{{body}\n}}" if scoped else f"CALL {{\n  WITH {imported}{body}\n}}"


def _hop(level: int, reach: int) -> str:
    """The entities that a hop from the rows of ``level{level}`` reaches with at least ``$floor``, each as ``e`` with
    its best ``activation``; ``reach`` is the index of a row's ``_REACH``."""
    return f"""
  UNWIND level{level} AS row UNWIND row[{reach}] AS x
  WITH x WHERE x[1] >= $floor
  WITH x[0] AS id, max(x[1]) AS activation
  MATCH (e:{ENTITY_LABEL} {{entity_id: id}})
  WITH e, activation"""


def _neighbourhoods_ahead_query(max_hops: int, with_chunks: bool, asked_depth: int = 0, scoped: bool = True) -> str:
    """The neighbourhoods of the seeds and of what ``max_hops - 1`` hops reach, in one statement that reads each
    entity's relationships once: level 0 lists the seeds' neighbourhoods, and each further level (a subquery) those
    of what a hop from the level before reaches, scored from the relationships that level listed, and the walk will
    expand; what it reaches and will not expand gets only its chunks read (``unexpanded``). A row of a level is
    a list: the neighbourhood's columns, with ``with_chunks`` its entity's ``chunk_ids`` (see ``_CHUNK_IDS``), then its
    ``_REACH``; with ``with_chunks``, a last level lists only the chunks of what the walk's last hop may reach.
    ``asked_depth``: as many ``UNION ALL`` branches more, branch k taking k - 1 asked steps before reading the asked
    relationships (``_asked_branches``). ``scoped``: the subqueries' form (``scoped_subqueries``)."""
    chunk_ids = f", {_CHUNK_IDS}" if with_chunks else ""
    reach = 6 if with_chunks else 5
    row = f"[e.entity_id, degree, heaviest, size(allowed), allowed[0..$limit]{chunk_ids}, {_REACH}]"
    chunks_only = f"[e.entity_id, NULL, NULL, 0, []{chunk_ids}, []]"
    levels = [f"{_SEEDS}{_NEIGHBOURHOOD_OF_E}WITH collect({row}) AS level0"]
    listed = ["level0"]
    for level in range(1, max_hops):
        # The walk expands only what passes on at least the floor (``query.traversal``): the rest of a level gets
        # no neighbourhood read, only its chunks.
        levels.append(_subquery(f"level{level - 1}", f"{_hop(level - 1, reach)} WHERE activation * $decay >= $floor"
                                f"{_NEIGHBOURHOOD_OF_E}  RETURN collect({row}) AS level{level}", scoped))
        listed.append(f"level{level}")
        if with_chunks:
            levels.append(_subquery(f"level{level - 1}", f"{_hop(level - 1, reach)} WHERE activation * $decay < $floor "
                                    f"AND e.mention_count <= $chunks_up_to\n  RETURN collect({chunks_only}) "
                                    f"AS unexpanded{level}", scoped))
            listed.append(f"unexpanded{level}")
    if with_chunks and max_hops > 0:
        levels.append(_subquery(f"level{max_hops - 1}", f"{_hop(max_hops - 1, reach)} WHERE e.mention_count <= "
                                f"$chunks_up_to\n  RETURN collect({chunks_only}) AS level{max_hops}", scoped))
        listed.append(f"level{max_hops}")
    columns = ["entity_id", "degree", "heaviest", "total", "edges", *(["chunk_ids"] if with_chunks else [])]
    levels.append(f"UNWIND {' + '.join(listed)} AS row\n"
                  f"RETURN {', '.join(f'row[{index}] AS {column}' for index, column in enumerate(columns))}")
    asked_return = _ASKED_IN_WALK + (", NULL AS chunk_ids" if with_chunks else "")
    return "\nUNION ALL\n".join(["\n".join(levels),
                                  *(branch + asked_return for branch in _asked_branches(asked_depth, "asked"))])


# Asked relationships (``AskedRelationships``), as ``UNION ALL`` branches whose parameters are named ``$<name>_…``
# (``_asked_parameters``): from ``$<name>_ids``, each step goes along a relationship of an asked type in an asked
# direction; the last reads every relationship of the asked types of the entities reached, as ``r`` with its ends
# ``s`` and ``t``, for the caller's ``RETURN``.
def _asked_branches(depth: int, name: str) -> list[str]:
    start = f"UNWIND ${name}_ids AS id MATCH (e:{ENTITY_LABEL} {{entity_id: id}})"
    step = f"""
MATCH (e)-[r]-(n:{ENTITY_LABEL})
WHERE n <> e AND ((startNode(r) = e AND r.type IN ${name}_outgoing) OR (endNode(r) = e AND r.type IN ${name}_incoming))
WITH DISTINCT n AS e
"""
    relationships_of_e = f"""
MATCH (e)-[r]-(n:{ENTITY_LABEL}) WHERE n <> e AND r.type IN ${name}_types
WITH DISTINCT r
WITH r, startNode(r) AS s, endNode(r) AS t
"""
    return [start + step * steps + relationships_of_e for steps in range(depth)]


def _asked_parameters(asked: AskedRelationships, name: str) -> dict[str, list[str]]:
    return {f"{name}_ids": list(asked.entity_ids), f"{name}_types": list(asked.types),
            f"{name}_outgoing": [rtype for rtype, direction in asked.steps if direction == "outgoing"],
            f"{name}_incoming": [rtype for rtype, direction in asked.steps if direction == "incoming"]}


# In the walk statement, the question's asked relationships are rows with a null ``entity_id`` and the relationship's
# fields, in the order of ``_RELATIONSHIP_COLUMNS``, as ``edges``.
_ASKED_IN_WALK = ("RETURN NULL AS entity_id, NULL AS degree, NULL AS heaviest, 0 AS total, "
                  f"[{', '.join(_RELATIONSHIP_COLUMNS.values())}] AS edges")


# Floating-point order differs between the server and Python: a reach this close under the bound is read too (a
# neighbourhood read and not expanded costs nothing; one missed costs the walk a round trip).
_FLOOR_SLACK = 1e-9


# The relationships of given types touching given entities, found from the entities (indexed by id) rather than by
# relationship id, which ArcadeDB answers by scanning every relationship of every type.
_RELATIONSHIPS_OF_MATCH = f"""
UNWIND $ids AS id
MATCH (e:{ENTITY_LABEL} {{entity_id: id}})-[r]-(n:{ENTITY_LABEL})
WHERE n <> e AND ($types IS NULL OR r.type IN $types)
WITH DISTINCT r
WITH r, startNode(r) AS s, endNode(r) AS t
"""
# Those relationships of every type, with their ends and weights only (``weighted_edges(around=...)``).
_EDGES_AROUND = (f"{_RELATIONSHIPS_OF_MATCH}RETURN r.relationship_id AS relationship_id, s.entity_id AS source, "
                 "t.entity_id AS target, r.weight AS weight")
_RELATIONSHIPS_OF = {True: f"{_RELATIONSHIPS_OF_MATCH}RETURN {_RELATIONSHIP_RETURN}",  # by ``provenance``
                     False: f"{_RELATIONSHIPS_OF_MATCH}RETURN {_RELATIONSHIP_RETURN_WITHOUT_PROVENANCE}"}


# An answer's entities (``answer_subgraph``): the given ones and those of ``$among`` that the given chunks mention
# (OPTIONAL MATCH and an aggregate keep one row when no chunk is given or none mentions them).
_ANSWER_ENTITY_IDS = f"""
UNWIND $chunks AS chunk_id
OPTIONAL MATCH (:{CHUNK_LABEL} {{chunk_id: chunk_id}})-[:{MENTIONS}]->(m:{ENTITY_LABEL}) WHERE m.entity_id IN $among
WITH $ids + collect(DISTINCT m.entity_id) AS wanted
UNWIND wanted AS id
"""
# The entities, then the heaviest relationships among them, as rows of one kind of column: a row is a list of an
# entity's or a relationship's fields, in the order of ``_ENTITY_COLUMNS`` or ``_RELATIONSHIP_COLUMNS``.
_ANSWER_SUBGRAPH = f"""{_ANSWER_ENTITY_IDS}MATCH (e:{ENTITY_LABEL} {{entity_id: id}})
RETURN 'entity' AS kind, [{", ".join("[]" if field == "chunk_ids" else expression
                                     for field, expression in _ENTITY_COLUMNS.items())}] AS fields
UNION ALL
{_ANSWER_ENTITY_IDS}MATCH (s:{ENTITY_LABEL} {{entity_id: id}})-[r]->(t:{ENTITY_LABEL}) WHERE t.entity_id IN wanted
WITH s, r, t ORDER BY r.weight DESC, r.relationship_id LIMIT $limit
RETURN 'relationship' AS kind, [{", ".join(_RELATIONSHIP_COLUMNS.values())}] AS fields
"""


class Neo4jGraphStore:
    """``GraphStore`` over the Bolt protocol with the official ``neo4j`` driver.

    ``database=None`` uses the server's default database. ``batch_size`` rows go into each write transaction.
    ``ontology`` (default: the packaged default ontology) decides which entity types become labels and which
    relationship types become Neo4j relationship types. ``max_retries`` bounds this store's own retries of a whole
    transaction when the server is unreachable (``ServiceUnavailable``/``SessionExpired``), on top of the driver's
    retries of transient errors inside ``execute_read``/``execute_write``. Thread-safe: the driver is shared, each
    call opens its own session.
    """

    def __init__(
        self,
        uri: str,
        user: str,
        password: str,
        database: str | None = None,
        *,
        batch_size: int = 1000,
        ontology: Ontology | None = None,
        max_retries: int = 3,
        retry_delay: float = 1.0,
        driver: Driver | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.uri = uri
        self.database = database
        self.batch_size = batch_size
        self.max_retries = max_retries
        self.retry_delay = retry_delay
        self.ontology = ontology if ontology is not None else default_ontology()
        # type -> its node label, in one style (PascalCase) whether the ontology spells the type as spaCy does
        # (PERSON, WORK_OF_ART) or as a catalog does (Service): :Person, :WorkOfArt, :Service
        self._entity_labels = {
            name: label for name in self.ontology.entity_type_names
            if IDENTIFIER.match(name) and (label := node_label(name)) not in _RESERVED_LABELS
        }
        relationship_types = {name for name in self.ontology.relationship_type_names if IDENTIFIER.match(name)}
        self._fallback_type = self.ontology.fallback_relationship_type
        checked_identifier(self._fallback_type)
        relationship_types.add(self._fallback_type)
        self._relationship_types = tuple(sorted(relationship_types))
        self._driver = driver if driver is not None else GraphDatabase.driver(uri, auth=(user, password))
        try:
            self._ensure_schema()
            self.scoped_subqueries = scoped_subqueries(self._driver.get_server_info().agent)
        except BaseException:
            self._driver.close()
            raise

    def __enter__(self) -> "Neo4jGraphStore":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- plumbing -------------------------------------------------------------------------------------------------

    def _retrying(self, call: Callable[[], T]) -> T:
        for attempt in range(self.max_retries + 1):
            try:
                return call()
            except (ServiceUnavailable, SessionExpired):
                if attempt == self.max_retries:
                    raise
                time.sleep(self.retry_delay * (2**attempt))
        raise AssertionError("unreachable")

    def _read(self, work: Callable[[ManagedTransaction], T]) -> T:
        def call() -> T:
            with self._driver.session(database=self.database) as session:
                return session.execute_read(work)

        return self._retrying(call)

    def _write(self, work: Callable[[ManagedTransaction], T]) -> T:
        def call() -> T:
            with self._driver.session(database=self.database) as session:
                return session.execute_write(work)

        return self._retrying(call)

    def _query(self, cypher: str, **parameters: Any) -> list[dict[str, Any]]:
        return self._read(lambda tx: tx.run(cypher, parameters).data())

    def _batches(self, rows: Sequence[T]) -> Iterable[Sequence[T]]:
        for offset in range(0, len(rows), self.batch_size):
            yield rows[offset : offset + self.batch_size]

    def _ensure_schema(self) -> None:
        statements = list(_SCHEMA)
        for rtype in self._relationship_types:
            quoted = checked_identifier(rtype)
            statements.append(
                f"CREATE INDEX rel_{rtype}_id IF NOT EXISTS FOR ()-[r:{quoted}]-() ON (r.relationship_id)"
            )
        # Entities an earlier version labelled with the type as spelled (:PERSON) move to the label's style (:Person).
        statements += [f"MATCH (e:{ENTITY_LABEL}:{checked_identifier(name)}) REMOVE e:{checked_identifier(name)} "
                       f"SET e:{checked_identifier(label)}"
                       for name, label in self._entity_labels.items() if label != name]
        for statement in statements:
            # Schema statements run one per auto-commit transaction (they cannot share a transaction with data).
            self._retrying(lambda statement=statement: self._run_auto_commit(statement))

    def _entity_label(self, entity_type: str) -> str | None:
        return self._entity_labels.get(entity_type)

    def _relationship_type(self, relationship_type: str) -> str:
        return relationship_type if relationship_type in self._relationship_types else self._fallback_type

    def _union_over_types(self, body: Callable[[str], str]) -> str:
        """One ``UNION ALL`` branch per relationship type the store may have written (index-backed lookups)."""
        return "\nUNION ALL\n".join(body(checked_identifier(rtype)) for rtype in self._relationship_types)

    @staticmethod
    def _missing_entities(tx: ManagedTransaction, entity_ids: Iterable[str]) -> list[str]:
        return tx.run(
            f"UNWIND $ids AS id OPTIONAL MATCH (e:{ENTITY_LABEL} {{entity_id: id}}) WITH id, e WHERE e IS NULL "
            "RETURN id",
            ids=_unique(entity_ids),
        ).value()

    def _require_entities(self, entity_ids: Sequence[str], what: str) -> None:
        missing: list[str] = []
        for batch in self._batches(_unique(entity_ids)):
            missing += self._read(lambda tx, batch=batch: self._missing_entities(tx, batch))
        if missing:
            raise ValueError(f"{what} name {len(missing)} unknown entities (upsert them first): {missing[:5]}")

    # -- writes ---------------------------------------------------------------------------------------------------

    def upsert_entities(self, entities: Sequence[Entity]) -> None:
        rows = [_entity_row(entity) for entity in entities]
        for batch in self._batches(list({row["entity_id"]: row for row in rows}.values())):
            relabel = self._write(lambda tx, batch=batch: self._upsert_entity_batch(tx, batch))
            # A type change moves the entity to another label. Done after the batch, one auto-commit statement per
            # (old, new) label pair: ArcadeDB re-creates a relabelled vertex and cannot do so inside an explicit
            # transaction. Setting labels is idempotent, so a retry or a crash in between converges on the next
            # upsert (the ``type`` property, which reads use, is already correct).
            for (old_label, new_label), ids in relabel.items():
                statement = f"UNWIND $ids AS id MATCH (e:{ENTITY_LABEL} {{entity_id: id}})"
                if old_label is not None:
                    statement += f" REMOVE e:{checked_identifier(old_label)}"
                if new_label is not None:
                    statement += f" SET e:{checked_identifier(new_label)}"
                self._retrying(lambda statement=statement, ids=ids: self._run_auto_commit(statement, ids=ids))

    def _upsert_entity_batch(
        self, tx: ManagedTransaction, rows: Sequence[dict[str, Any]]
    ) -> dict[tuple[str | None, str | None], list[str]]:
        previous = {
            record["id"]: self._entity_label(record["type"] or "")
            for record in tx.run(
                f"UNWIND $ids AS id MATCH (e:{ENTITY_LABEL} {{entity_id: id}}) "
                "RETURN e.entity_id AS id, e.type AS type",
                ids=[row["entity_id"] for row in rows],
            ).data()
        }
        relabel: dict[tuple[str | None, str | None], list[str]] = {}
        created: dict[str | None, list[dict[str, Any]]] = {}
        updated: list[dict[str, Any]] = []
        for row in rows:
            label = self._entity_label(row["props"]["type"])
            if row["entity_id"] not in previous:
                created.setdefault(label, []).append(row)
                continue
            updated.append(row)
            if previous[row["entity_id"]] != label:
                relabel.setdefault((previous[row["entity_id"]], label), []).append(row["entity_id"])
        if updated:
            tx.run(
                f"UNWIND $rows AS row MATCH (e:{ENTITY_LABEL} {{entity_id: row.entity_id}}) SET e += row.props",
                rows=updated,
            ).consume()
        for label, group in created.items():
            labels = ENTITY_LABEL + (f":{checked_identifier(label)}" if label is not None else "")
            tx.run(
                f"UNWIND $rows AS row MERGE (e:{labels} {{entity_id: row.entity_id}}) SET e += row.props", rows=group
            ).consume()
        return relabel

    def _run_auto_commit(self, statement: str, **parameters: Any) -> None:
        with self._driver.session(database=self.database) as session:
            session.run(statement, parameters).consume()

    def upsert_relationships(self, relationships: Sequence[Relationship]) -> None:
        """Insert or replace relationships; both endpoints must already be stored (``ValueError`` otherwise)."""
        rows = list({row["relationship_id"]: row for row in map(_relationship_row, relationships)}.values())
        if not rows:
            return
        self._require_entities([row["source_id"] for row in rows] + [row["target_id"] for row in rows], "relationships")
        for batch in self._batches(rows):
            self._write(lambda tx, batch=batch: self._upsert_relationship_batch(tx, batch))

    def _upsert_relationship_batch(self, tx: ManagedTransaction, rows: Sequence[dict[str, Any]]) -> None:
        missing = self._missing_entities(tx, [row["source_id"] for row in rows] + [row["target_id"] for row in rows])
        if missing:  # deleted since the check: nothing of this batch is written
            raise ValueError(f"relationships name {len(missing)} unknown entities (upsert them first): {missing[:5]}")
        # The same id stored with other endpoints or under another type is removed before the MERGE.
        wanted = {
            row["relationship_id"]: (self._relationship_type(row["props"]["type"]), row["source_id"], row["target_id"])
            for row in rows
        }
        existing = tx.run(
            self._union_over_types(
                lambda quoted: f"MATCH (s:{ENTITY_LABEL})-[r:{quoted}]->(t:{ENTITY_LABEL}) "
                "WHERE r.relationship_id IN $ids RETURN r.relationship_id AS id, type(r) AS neo_type, "
                "s.entity_id AS source_id, t.entity_id AS target_id"
            ),
            ids=list(wanted),
        ).data()
        stale: dict[str, list[str]] = {}
        for record in existing:
            if wanted[record["id"]] != (record["neo_type"], record["source_id"], record["target_id"]):
                stale.setdefault(record["neo_type"], []).append(record["id"])
        for neo_type, ids in stale.items():
            tx.run(
                f"MATCH ()-[r:{checked_identifier(neo_type)}]->() WHERE r.relationship_id IN $ids DELETE r", ids=ids
            ).consume()
        by_type: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            by_type.setdefault(wanted[row["relationship_id"]][0], []).append(row)
        for neo_type, group in by_type.items():
            tx.run(
                f"UNWIND $rows AS row "
                f"MATCH (s:{ENTITY_LABEL} {{entity_id: row.source_id}}) "
                f"MATCH (t:{ENTITY_LABEL} {{entity_id: row.target_id}}) "
                f"MERGE (s)-[r:{checked_identifier(neo_type)} {{relationship_id: row.relationship_id}}]->(t) "
                "SET r += row.props",
                rows=group,
            ).consume()

    def set_chunk_mentions(self, mentions: dict[str, Sequence[str]]) -> None:
        """Replace the entities mentioned by each given chunk (an empty sequence clears the chunk)."""
        if not mentions:
            return
        self._require_entities([entity_id for ids in mentions.values() for entity_id in ids], "chunk mentions")
        items = list(mentions.items())
        chunk_batch = max(1, self.batch_size // 10)  # a chunk brings several mentions
        for offset in range(0, len(items), chunk_batch):
            batch = items[offset : offset + chunk_batch]
            self._write(lambda tx, batch=batch: self._set_mentions_batch(tx, batch))

    def _set_mentions_batch(self, tx: ManagedTransaction, items: Sequence[tuple[str, Sequence[str]]]) -> None:
        pairs = [
            {"chunk_id": chunk_id, "entity_id": entity_id}
            for chunk_id, entity_ids in items
            for entity_id in _unique(entity_ids)
        ]
        missing = self._missing_entities(tx, [pair["entity_id"] for pair in pairs])
        if missing:
            raise ValueError(f"chunk mentions name {len(missing)} unknown entities (upsert them first): {missing[:5]}")
        chunk_ids = [chunk_id for chunk_id, _ in items]
        tx.run(
            f"UNWIND $ids AS id MATCH (c:{CHUNK_LABEL} {{chunk_id: id}})-[m:{MENTIONS}]->() DELETE m", ids=chunk_ids
        ).consume()
        tx.run(
            f"UNWIND $pairs AS p MERGE (c:{CHUNK_LABEL} {{chunk_id: p.chunk_id}}) WITH c, p "
            f"MATCH (e:{ENTITY_LABEL} {{entity_id: p.entity_id}}) MERGE (c)-[:{MENTIONS}]->(e)",
            pairs=pairs,
        ).consume()
        self._drop_orphan_chunks(tx, chunk_ids)

    @staticmethod
    def _drop_orphan_chunks(tx: ManagedTransaction, chunk_ids: Sequence[str]) -> None:
        doc_ids = Neo4jGraphStore._documents_of(tx, chunk_ids)
        tx.run(
            f"UNWIND $ids AS id MATCH (c:{CHUNK_LABEL} {{chunk_id: id}}) "
            f"WHERE NOT EXISTS {{ (c)-[:{MENTIONS}]->() }} DETACH DELETE c",
            ids=_unique(chunk_ids),
        ).consume()
        Neo4jGraphStore._drop_orphan_documents(tx, doc_ids)

    @staticmethod
    def _documents_of(tx: ManagedTransaction, chunk_ids: Sequence[str]) -> list[str]:
        return tx.run(
            f"UNWIND $ids AS id MATCH (:{CHUNK_LABEL} {{chunk_id: id}})-[:{PART_OF}]->(d:{DOCUMENT_LABEL}) "
            "RETURN DISTINCT d.doc_id",
            ids=_unique(chunk_ids),
        ).value()

    @staticmethod
    def _drop_orphan_documents(tx: ManagedTransaction, doc_ids: Sequence[str]) -> None:
        tx.run(
            f"UNWIND $ids AS id MATCH (d:{DOCUMENT_LABEL} {{doc_id: id}}) "
            f"WHERE NOT EXISTS {{ (:{CHUNK_LABEL})-[:{PART_OF}]->(d) }} DELETE d",
            ids=_unique(doc_ids),
        ).consume()

    keeps_chunk_texts = True  # its users read text from the graph

    def describe_chunks(self, chunks: Sequence[ChunkText]) -> None:
        """Each chunk's text and its document, for the chunks that are in the graph (they mention entities)."""
        rows = [{"chunk_id": c.chunk_id, "doc_id": c.doc_id,
                 "chunk": {"doc_id": c.doc_id, "position": c.position, "text": c.text},
                 "document": {"title": c.title, "uri": c.uri, "access_groups": list(c.access_groups)}}
                for c in {c.chunk_id: c for c in chunks}.values()]
        for batch in self._batches(rows):
            self._write(lambda tx, batch=batch: self._describe_batch(tx, batch))

    @staticmethod
    def _describe_batch(tx: ManagedTransaction, rows: Sequence[dict[str, Any]]) -> None:
        chunk_ids = [row["chunk_id"] for row in rows]
        previous = Neo4jGraphStore._documents_of(tx, chunk_ids)
        tx.run(
            f"UNWIND $ids AS id MATCH (:{CHUNK_LABEL} {{chunk_id: id}})-[p:{PART_OF}]->() DELETE p", ids=chunk_ids
        ).consume()
        tx.run(
            f"UNWIND $rows AS row MATCH (c:{CHUNK_LABEL} {{chunk_id: row.chunk_id}}) SET c += row.chunk "
            f"MERGE (d:{DOCUMENT_LABEL} {{doc_id: row.doc_id}}) SET d += row.document MERGE (c)-[:{PART_OF}]->(d)",
            rows=list(rows),
        ).consume()
        Neo4jGraphStore._drop_orphan_documents(tx, previous)

    def delete_entities(self, entity_ids: Sequence[str]) -> None:
        """Delete entities together with every relationship touching them and every mention of them."""
        for batch in self._batches(_unique(entity_ids)):
            self._write(lambda tx, batch=batch: self._delete_entity_batch(tx, batch))

    def _delete_entity_batch(self, tx: ManagedTransaction, entity_ids: Sequence[str]) -> int:
        chunk_ids = tx.run(
            f"UNWIND $ids AS id MATCH (c:{CHUNK_LABEL})-[:{MENTIONS}]->(:{ENTITY_LABEL} {{entity_id: id}}) "
            "RETURN DISTINCT c.chunk_id",
            ids=list(entity_ids),
        ).value()
        deleted = tx.run(
            f"UNWIND $ids AS id MATCH (e:{ENTITY_LABEL} {{entity_id: id}}) DETACH DELETE e RETURN count(*) AS n",
            ids=list(entity_ids),
        ).single()
        self._drop_orphan_chunks(tx, chunk_ids)
        return int(deleted["n"]) if deleted else 0

    def delete_relationships(self, relationship_ids: Sequence[str]) -> None:
        def work(tx: ManagedTransaction, ids: list[str]) -> None:
            for rtype in self._relationship_types:  # one index-backed statement per type the store may have written
                quoted = checked_identifier(rtype)
                tx.run(f"MATCH ()-[r:{quoted}]->() WHERE r.relationship_id IN $ids DELETE r", ids=ids).consume()

        for batch in self._batches(_unique(relationship_ids)):
            self._write(lambda tx, batch=batch: work(tx, list(batch)))

    def delete_chunks(self, chunk_ids: Sequence[str]) -> None:
        """Forget the chunks' mentions and texts (entities keep their ``chunk_ids`` provenance until re-merged), and
        the documents left without chunks."""

        def work(tx: ManagedTransaction, ids: list[str]) -> None:
            doc_ids = self._documents_of(tx, ids)
            tx.run(f"UNWIND $ids AS id MATCH (c:{CHUNK_LABEL} {{chunk_id: id}}) DETACH DELETE c", ids=ids).consume()
            self._drop_orphan_documents(tx, doc_ids)

        for batch in self._batches(_unique(chunk_ids)):
            self._write(lambda tx, batch=batch: work(tx, list(batch)))

    def delete_by_document(self, doc_id: str) -> dict[str, int]:
        """Remove ``doc_id`` from the provenance of every entity and relationship; delete those left with no
        document (an entity's relationships and mentions go with it). Returns the counts of what changed."""

        def work(tx: ManagedTransaction) -> dict[str, int]:
            relationships = tx.run(
                f"MATCH (:{ENTITY_LABEL})-[r]->(:{ENTITY_LABEL}) WHERE $doc IN r.doc_ids "
                "SET r.doc_ids = [d IN r.doc_ids WHERE d <> $doc] "
                "WITH r, size(r.doc_ids) = 0 AS orphan "
                "RETURN r.relationship_id AS id, orphan",
                doc=doc_id,
            ).data()
            orphan_relationships = [record["id"] for record in relationships if record["orphan"]]
            if orphan_relationships:
                tx.run(
                    f"MATCH (:{ENTITY_LABEL})-[r]->(:{ENTITY_LABEL}) "
                    "WHERE r.relationship_id IN $ids AND size(r.doc_ids) = 0 DELETE r",
                    ids=orphan_relationships,
                ).consume()
            entities = tx.run(
                f"MATCH (e:{ENTITY_LABEL}) WHERE $doc IN e.doc_ids "
                "SET e.doc_ids = [d IN e.doc_ids WHERE d <> $doc] "
                "RETURN e.entity_id AS id, size(e.doc_ids) = 0 AS orphan",
                doc=doc_id,
            ).data()
            orphan_entities = [record["id"] for record in entities if record["orphan"]]
            deleted_entities = self._delete_entity_batch(tx, orphan_entities) if orphan_entities else 0
            return {
                "entities_updated": len(entities) - len(orphan_entities),
                "entities_deleted": deleted_entities,
                "relationships_updated": len(relationships) - len(orphan_relationships),
                "relationships_deleted": len(orphan_relationships),
            }

        return self._write(work)

    # -- point reads ----------------------------------------------------------------------------------------------

    def get_entities(self, entity_ids: Iterable[str]) -> dict[str, Entity]:
        """The stored entities among ``entity_ids``; unknown ids are absent from the result."""
        found: dict[str, Entity] = {}
        for batch in self._batches(_unique(entity_ids)):
            for record in self._query(
                f"UNWIND $ids AS id MATCH (e:{ENTITY_LABEL} {{entity_id: id}}) RETURN {_ENTITY_RETURN}", ids=list(batch)
            ):
                found[record["entity_id"]] = _entity_from_record(record)
        return found

    def documents_of_entities(self, entity_ids: Iterable[str]) -> dict[str, tuple[str, ...]]:
        found: dict[str, tuple[str, ...]] = {}
        for batch in self._batches(_unique(entity_ids)):
            for record in self._query(
                f"UNWIND $ids AS id MATCH (e:{ENTITY_LABEL} {{entity_id: id}}) RETURN id, e.doc_ids AS doc_ids",
                ids=list(batch),
            ):
                found[record["id"]] = tuple(record["doc_ids"] or ())
        return found

    def get_relationships(self, relationship_ids: Iterable[str]) -> dict[str, Relationship]:
        """The stored relationships among ``relationship_ids``; unknown ids are absent from the result."""
        found: dict[str, Relationship] = {}
        for batch in self._batches(_unique(relationship_ids)):
            query = self._union_over_types(
                lambda quoted: f"MATCH (s:{ENTITY_LABEL})-[r:{quoted}]->(t:{ENTITY_LABEL}) "
                f"WHERE r.relationship_id IN $ids RETURN {_RELATIONSHIP_RETURN}"
            )
            for record in self._query(query, ids=list(batch)):
                found[record["relationship_id"]] = _relationship_from_record(record)
        return found

    def _grouped(self, cypher: str, keys: Iterable[str]) -> dict[str, list[str]]:
        """key -> its values (sorted, each once), from ``cypher``'s rows of a key and the list of its values: a row
        per key, not per pair, since ArcadeDB spends more on each row it returns than on reading it (a question's
        chunks of entities, 336 pairs of 44 entities: 42 ms as pairs, 17 ms grouped)."""
        grouped: dict[str, list[str]] = {}
        for batch in self._batches(_unique(keys)):
            for record in self._query(cypher, ids=list(batch)):  # a key without values matches no row
                grouped[record["key"]] = sorted(set(record["values"]))
        return grouped

    def entities_of_chunks(self, chunk_ids: Iterable[str]) -> dict[str, list[str]]:
        """Chunk id → entity ids it mentions (sorted); chunks without mentions are absent."""
        return self._grouped(
            f"UNWIND $ids AS id MATCH (c:{CHUNK_LABEL} {{chunk_id: id}})-[:{MENTIONS}]->(e:{ENTITY_LABEL}) "
            "RETURN id AS key, collect(e.entity_id) AS values",
            chunk_ids,
        )

    def chunks_of_entities(self, entity_ids: Iterable[str]) -> dict[str, list[str]]:
        """Entity id → chunk ids mentioning it (sorted); entities without mentions are absent."""
        # The pattern starts at the indexed entity: ArcadeDB matches left to right, and from `(c:Chunk)` it scanned
        # every chunk, most of a server-tier question's time (docs/benchmarks.md).
        return self._grouped(
            f"UNWIND $ids AS id MATCH (e:{ENTITY_LABEL} {{entity_id: id}})<-[:{MENTIONS}]-(c:{CHUNK_LABEL}) "
            "RETURN id AS key, collect(c.chunk_id) AS values",
            entity_ids,
        )

    def relationships_of(
        self, entity_ids: Iterable[str], relationship_types: Sequence[str] | None = None, provenance: bool = True
    ) -> dict[str, Relationship]:
        """Relationships of those types between one of ``entity_ids`` and another entity (see ``GraphStore``), from
        the indexed entities: one query per ``batch_size`` ids."""
        types = None if relationship_types is None else sorted(set(relationship_types))
        found: dict[str, Relationship] = {}
        for batch in self._batches(_unique(entity_ids)):
            for record in self._query(_RELATIONSHIPS_OF[provenance], ids=list(batch), types=types):
                found[record["relationship_id"]] = _relationship_from_record(record)
        return found

    def asked_relationships(self, asked: Sequence[AskedRelationships]) -> dict[str, Relationship]:
        """Every one of ``asked`` (see ``GraphStore``) in one statement, a ``UNION ALL`` branch per depth of each."""
        branches = [(f"asked{index}", one) for index, one in enumerate(asked) if one.entity_ids and one.depth > 0]
        if not branches:
            return {}
        cypher = "\nUNION ALL\n".join(branch + f"RETURN {_RELATIONSHIP_RETURN}"
                                       for name, one in branches for branch in _asked_branches(one.depth, name))
        parameters = {key: value for name, one in branches for key, value in _asked_parameters(one, name).items()}
        return {record["relationship_id"]: _relationship_from_record(record)
                for record in self._query(cypher, **parameters)}

    def relationships_between(self, entity_ids: Iterable[str], limit: int = 50) -> list[Relationship]:
        """Relationships with both ends in ``entity_ids``, heaviest first (ties by relationship id)."""
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        ids = _unique(entity_ids)
        if limit == 0 or not ids:
            return []
        # From each indexed source entity: ArcadeDB answers "WHERE s.entity_id IN $ids" by scanning every
        # relationship, a cost that grows with the graph rather than with the answer.
        records = self._query(
            f"UNWIND $ids AS id MATCH (s:{ENTITY_LABEL} {{entity_id: id}})-[r]->(t:{ENTITY_LABEL}) "
            f"WHERE t.entity_id IN $ids "
            f"RETURN {_RELATIONSHIP_RETURN} ORDER BY r.weight DESC, r.relationship_id LIMIT $limit",
            ids=ids,
            limit=limit,
        )
        relationships = [_relationship_from_record(record) for record in records]
        return sorted(relationships, key=lambda r: (-r.weight, r.relationship_id))

    def answer_subgraph(
        self, entity_ids: Iterable[str], chunk_ids: Iterable[str], mentioned_among: Iterable[str], limit: int = 50
    ) -> Subgraph:
        """The entities an answer names and the relationships among them (see ``GraphStore``), in one statement."""
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        ids = _unique(entity_ids)
        # Disjoint from ``ids``: an id in both would be matched twice, and its relationships listed twice.
        among = sorted(set(mentioned_among) - set(ids))
        chunks = _unique(chunk_ids)
        if not ids and not (chunks and among):  # a vector-mode answer names no entity: no round trip
            return Subgraph({}, [])
        entities: dict[str, Entity] = {}
        relationships: list[Relationship] = []
        for record in self._query(_ANSWER_SUBGRAPH, ids=ids, chunks=chunks, among=among, limit=limit):
            if record["kind"] == "entity":
                entity = _entity_from_record(dict(zip(_ENTITY_COLUMNS, record["fields"])))
                entities[entity.entity_id] = entity
            else:
                relationships.append(_relationship_from_record(dict(zip(_RELATIONSHIP_COLUMNS, record["fields"]))))
        return Subgraph(entities, sorted(relationships, key=lambda r: (-r.weight, r.relationship_id)))

    # -- listings -------------------------------------------------------------------------------------------------

    def stats(self) -> GraphStats:
        def work(tx: ManagedTransaction) -> GraphStats:
            entity_types = {
                record["type"]: record["n"]
                for record in tx.run(f"MATCH (e:{ENTITY_LABEL}) RETURN e.type AS type, count(*) AS n").data()
            }
            relationship_types = {
                record["type"]: record["n"]
                for record in tx.run(
                    f"MATCH (:{ENTITY_LABEL})-[r]->(:{ENTITY_LABEL}) RETURN r.type AS type, count(*) AS n"
                ).data()
            }
            chunk_count = tx.run(
                f"MATCH (c:{CHUNK_LABEL}) WHERE EXISTS {{ (c)-[:{MENTIONS}]->(:{ENTITY_LABEL}) }} RETURN count(c) AS n"
            ).single()["n"]
            return GraphStats(
                entity_count=sum(entity_types.values()),
                relationship_count=sum(relationship_types.values()),
                chunk_count=int(chunk_count),
                entity_types=dict(sorted(entity_types.items())),
                relationship_types=dict(sorted(relationship_types.items())),
            )

        return self._read(work)

    def list_entities(self, offset: int = 0, limit: int = 50, order_by: str = "mention_count") -> list[Entity]:
        """A page of entities: by mention_count desc then name, or by name (ties by entity id)."""
        order = _ORDER_ENTITIES.get(order_by)
        if order is None:
            raise ValueError(f"order_by must be one of {sorted(_ORDER_ENTITIES)}, got {order_by!r}")
        records = self._page(f"MATCH (e:{ENTITY_LABEL}) RETURN {_ENTITY_RETURN} ORDER BY {order}", offset, limit)
        return [_entity_from_record(record) for record in records]

    def list_entity_names(self, offset: int = 0, limit: int = 50) -> list[EntityNames]:
        """A page of entities' names and mention counts, by entity id."""
        records = self._page(
            f"MATCH (e:{ENTITY_LABEL}) RETURN e.entity_id AS entity_id, e.name AS name, e.canonical AS canonical, "
            "e.aliases AS aliases, e.mention_count AS mention_count ORDER BY e.entity_id", offset, limit,
        )
        return [EntityNames(r["entity_id"], r["name"], r["canonical"], tuple(r["aliases"] or ()),
                            int(r["mention_count"])) for r in records]

    def list_relationships(self, offset: int = 0, limit: int = 50) -> list[Relationship]:
        """A page of relationships by weight desc, ties by relationship id."""
        records = self._page(
            f"MATCH (s:{ENTITY_LABEL})-[r]->(t:{ENTITY_LABEL}) RETURN {_RELATIONSHIP_RETURN} "
            "ORDER BY r.weight DESC, r.relationship_id", offset, limit,
        )
        return [_relationship_from_record(record) for record in records]

    def _page(self, ordered_query: str, offset: int, limit: int) -> list[dict[str, Any]]:
        """One page of a listing's records; ``ordered_query`` is the listing up to its ORDER BY."""
        check_page(offset, limit)
        if limit == 0:
            return []
        return self._query(f"{ordered_query} SKIP $offset LIMIT $limit", offset=offset, limit=limit)

    def all_entity_ids(self) -> set[str]:
        return set(self._read(lambda tx: tx.run(f"MATCH (e:{ENTITY_LABEL}) RETURN e.entity_id").value()))

    def all_relationship_ids(self) -> set[str]:
        return set(
            self._read(
                lambda tx: tx.run(f"MATCH (:{ENTITY_LABEL})-[r]->(:{ENTITY_LABEL}) RETURN r.relationship_id").value()
            )
        )

    def weighted_edges(self, around: Iterable[str] | None = None) -> list[tuple[str, str, float]]:
        """Undirected (a, b, total weight) with a < b: parallel relationships summed, self-loops left out; with
        ``around``, those with an end among these entities (found from them, by their indexed ids)."""
        if around is None:
            records = self._query(
                f"MATCH (s:{ENTITY_LABEL})-[r]->(t:{ENTITY_LABEL}) WHERE s <> t "
                "RETURN s.entity_id AS source, t.entity_id AS target, r.weight AS weight"
            )
        else:  # by relationship id: an edge between entities of two batches is read by both
            records = list({record["relationship_id"]: record for batch in self._batches(_unique(around))
                            for record in self._query(_EDGES_AROUND, ids=list(batch), types=None)}.values())
        totals: dict[tuple[str, str], float] = {}
        for record in records:
            a, b = sorted((record["source"], record["target"]))
            totals[(a, b)] = totals.get((a, b), 0.0) + float(record["weight"])
        return [(a, b, weight) for (a, b), weight in sorted(totals.items())]

    # -- neighbourhoods -------------------------------------------------------------------------------------------

    def neighbourhoods(
        self,
        entity_ids: Iterable[str],
        relationship_types: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> dict[str, Neighbourhood]:
        """Entity id → its ``Neighbourhood`` for the stored entities among ``entity_ids`` (see ``GraphStore``);
        one query per ``batch_size`` ids."""
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        types = None if relationship_types is None else sorted(set(relationship_types))
        found: dict[str, Neighbourhood] = {}
        for batch in self._batches(_unique(entity_ids)):
            for record in self._query(_NEIGHBOURHOODS, ids=list(batch), types=types, limit=limit):
                found[record["entity_id"]] = self._neighbourhood(record)
        return found

    def neighbourhoods_ahead(self, seeds: Mapping[str, float], plan: WalkPlan) -> ReadAhead:
        """The neighbourhoods a walk from ``seeds`` may expand, and with ``plan.chunks_up_to`` the chunks of what it
        may reach (see ``GraphStore``), in one statement."""
        if plan.limit < 0:
            raise ValueError(f"limit must be >= 0, got {plan.limit}")
        asked = plan.asked or AskedRelationships((), (), 0)
        records = self._query(
            _neighbourhoods_ahead_query(plan.max_hops, plan.chunks_up_to > 0, asked.depth, self.scoped_subqueries),
            seeds=[[seed, float(activation)] for seed, activation in seeds.items()],
            types=None if plan.relationship_types is None else list(plan.relationship_types),
            limit=plan.limit, decay=float(plan.decay), floor=plan.min_score * (1 - _FLOOR_SLACK),
            chunks_up_to=plan.chunks_up_to, **_asked_parameters(asked, "asked"),
        )
        read = ReadAhead({})
        for record in records:
            if record["entity_id"] is None:  # an asked relationship
                relationship = _relationship_from_record(dict(zip(_RELATIONSHIP_COLUMNS, record["edges"])))
                read.asked[relationship.relationship_id] = relationship
                continue
            if record.get("chunk_ids") is not None:
                read.chunks_of[record["entity_id"]] = sorted(set(record["chunk_ids"]))
            if record["degree"] is not None:  # null: a row of the last hop's chunks
                read.neighbourhoods[record["entity_id"]] = self._neighbourhood(record)
        return read

    @staticmethod
    def _neighbourhood(record: dict[str, Any]) -> Neighbourhood:
        edges = tuple((edge[0], edge[1], float(edge[3])) for edge in record["edges"])
        return Neighbourhood(
            degree=int(record["degree"]),
            heaviest=float(record["heaviest"] or 0.0),
            edges=edges,
            complete=len(edges) == int(record["total"]),
        )

    def close(self) -> None:
        self._driver.close()
