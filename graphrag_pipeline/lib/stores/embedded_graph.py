"""The embedded graph store: one SQLite file, with an in-memory adjacency for fast traversal.

SQLite in WAL mode lets a Dagster step write while agents in other processes read: readers never block the writer
and a busy timeout makes concurrent writers queue instead of failing. Every write method is one transaction.

Traversal runs on an in-memory undirected adjacency built lazily from the file on the first ``traverse`` and kept
up to date by this store's own writes. Writes by *other* connections are detected with ``PRAGMA data_version``
(which changes only when another connection commits), and the adjacency is then rebuilt on the next traversal.
"""

from __future__ import annotations

import json
import math
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from graphrag_pipeline.lib.models import Entity, Relationship
from graphrag_pipeline.lib.stores.protocols import GraphStats, TraversalHit

SCHEMA_VERSION = 1

# Comfortably below SQLite's bound-parameter limit, so id lists of any length are queried in slices.
_IN_BATCH = 500

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entities (
    entity_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    canonical TEXT NOT NULL,
    type TEXT NOT NULL,
    description TEXT NOT NULL,
    mention_count INTEGER NOT NULL,
    chunk_ids TEXT NOT NULL,
    doc_ids TEXT NOT NULL,
    aliases TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS entities_by_mentions ON entities (mention_count DESC, name, entity_id);
CREATE INDEX IF NOT EXISTS entities_by_name ON entities (name, entity_id);
CREATE TABLE IF NOT EXISTS relationships (
    relationship_id TEXT PRIMARY KEY,
    source_id TEXT NOT NULL,
    target_id TEXT NOT NULL,
    type TEXT NOT NULL,
    description TEXT NOT NULL,
    weight REAL NOT NULL,
    chunk_ids TEXT NOT NULL,
    doc_ids TEXT NOT NULL,
    predicates TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS relationships_by_source ON relationships (source_id);
CREATE INDEX IF NOT EXISTS relationships_by_target ON relationships (target_id);
CREATE INDEX IF NOT EXISTS relationships_by_weight ON relationships (weight DESC, relationship_id);
CREATE TABLE IF NOT EXISTS mentions (
    chunk_id TEXT NOT NULL,
    entity_id TEXT NOT NULL,
    PRIMARY KEY (chunk_id, entity_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS mentions_by_entity ON mentions (entity_id, chunk_id);
"""

_ENTITY_COLUMNS = "entity_id, name, canonical, type, description, mention_count, chunk_ids, doc_ids, aliases"
_RELATIONSHIP_COLUMNS = "relationship_id, source_id, target_id, type, description, weight, chunk_ids, doc_ids, predicates"

_UPSERT_ENTITY = f"""
INSERT INTO entities ({_ENTITY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (entity_id) DO UPDATE SET
    name = excluded.name, canonical = excluded.canonical, type = excluded.type,
    description = excluded.description, mention_count = excluded.mention_count,
    chunk_ids = excluded.chunk_ids, doc_ids = excluded.doc_ids, aliases = excluded.aliases
"""

_UPSERT_RELATIONSHIP = f"""
INSERT INTO relationships ({_RELATIONSHIP_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (relationship_id) DO UPDATE SET
    source_id = excluded.source_id, target_id = excluded.target_id, type = excluded.type,
    description = excluded.description, weight = excluded.weight,
    chunk_ids = excluded.chunk_ids, doc_ids = excluded.doc_ids, predicates = excluded.predicates
"""

_ORDER_ENTITIES = {
    "mention_count": "mention_count DESC, name, entity_id",
    "name": "name, entity_id",
}


def edge_strength(weight: float) -> float:
    """A relationship weight in (0, inf) mapped into (0, 1): ``w / (1 + w)``.

    Monotonic, so heavier relationships always carry more activation, yet never amplifies it (weight 1 → 0.5,
    weight 4 → 0.8); ``min(1, w)`` would flatten every merged relationship (weights ≥ 1) to the same strength.
    """
    return weight / (1.0 + weight)


def hub_damping(degree: int) -> float:
    """``log2(2 + degree)``: the divisor that makes densely connected entities (hubs) pass on less activation."""
    return math.log2(2 + degree)


def spread_score(parent_score: float, decay: float, weight: float, neighbor_degree: int) -> float:
    """Activation a neighbour receives over one relationship (see ``EmbeddedGraphStore.traverse``)."""
    return parent_score * decay * edge_strength(weight) / hub_damping(neighbor_degree)


def _dump(values: Sequence[str]) -> str:
    return json.dumps(list(values), ensure_ascii=False, separators=(",", ":"))


def _load(text: str) -> tuple[str, ...]:
    return tuple(json.loads(text))


def _slices(ids: Sequence[str]) -> Iterator[Sequence[str]]:
    for start in range(0, len(ids), _IN_BATCH):
        yield ids[start : start + _IN_BATCH]


def _placeholders(count: int) -> str:
    return ",".join("?" * count)


def _unique(ids: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(ids))


def _entity_row(entity: Entity) -> tuple[Any, ...]:
    if not entity.entity_id:
        raise ValueError(f"entity without an id: {entity.name!r}")
    return (
        entity.entity_id,
        entity.name,
        entity.canonical,
        entity.type,
        entity.description,
        int(entity.mention_count),
        _dump(entity.chunk_ids),
        _dump(entity.doc_ids),
        _dump(entity.aliases),
    )


def _relationship_row(relationship: Relationship) -> tuple[Any, ...]:
    if not relationship.relationship_id:
        raise ValueError(f"relationship without an id: {relationship.source_id} -> {relationship.target_id}")
    weight = float(relationship.weight)
    if not (math.isfinite(weight) and weight > 0):
        raise ValueError(f"relationship {relationship.relationship_id} has weight {weight!r}; weights must be > 0")
    return (
        relationship.relationship_id,
        relationship.source_id,
        relationship.target_id,
        relationship.type,
        relationship.description,
        weight,
        _dump(relationship.chunk_ids),
        _dump(relationship.doc_ids),
        _dump(relationship.predicates),
    )


def _entity_from_row(row: Sequence[Any]) -> Entity:
    return Entity(
        entity_id=row[0],
        name=row[1],
        canonical=row[2],
        type=row[3],
        description=row[4],
        mention_count=row[5],
        chunk_ids=_load(row[6]),
        doc_ids=_load(row[7]),
        aliases=_load(row[8]),
    )


def _relationship_from_row(row: Sequence[Any]) -> Relationship:
    return Relationship(
        relationship_id=row[0],
        source_id=row[1],
        target_id=row[2],
        type=row[3],
        description=row[4],
        weight=row[5],
        chunk_ids=_load(row[6]),
        doc_ids=_load(row[7]),
        predicates=_load(row[8]),
    )


class _Adjacency:
    """Undirected in-memory view of the graph for traversal; self-loops are left out (they lead nowhere)."""

    def __init__(self) -> None:
        self.entities: set[str] = set()
        self._edges: dict[str, tuple[str, str, str, float]] = {}  # relationship id -> (source, target, type, weight)
        self._incident: dict[str, set[str]] = {}  # entity id -> relationship ids touching it
        # Per-entity neighbour lists, heaviest first, sorted on first use and dropped when the entity's edges change.
        self._ordered: dict[str, list[tuple[str, str, str, float]]] = {}

    def degree(self, entity_id: str) -> int:
        incident = self._incident.get(entity_id)
        return len(incident) if incident else 0

    def neighbours(self, entity_id: str) -> list[tuple[str, str, str, float]]:
        """(neighbour id, relationship id, relationship type, weight), by weight desc, then neighbour, then id."""
        ordered = self._ordered.get(entity_id)
        if ordered is None:
            ordered = []
            for rid in self._incident.get(entity_id, ()):
                source, target, rtype, weight = self._edges[rid]
                ordered.append((target if source == entity_id else source, rid, rtype, weight))
            ordered.sort(key=lambda item: (-item[3], item[0], item[1]))
            self._ordered[entity_id] = ordered
        return ordered

    def add_entities(self, entity_ids: Iterable[str]) -> None:
        self.entities.update(entity_ids)

    def remove_entities(self, entity_ids: Iterable[str]) -> None:
        for entity_id in entity_ids:
            for rid in list(self._incident.get(entity_id, ())):
                self.remove_edge(rid)
            self.entities.discard(entity_id)
            self._incident.pop(entity_id, None)
            self._ordered.pop(entity_id, None)

    def put_edge(self, rid: str, source: str, target: str, rtype: str, weight: float) -> None:
        self.remove_edge(rid)
        if source == target:
            return
        self._edges[rid] = (source, target, rtype, weight)
        for end in (source, target):
            self._incident.setdefault(end, set()).add(rid)
            self._ordered.pop(end, None)

    def remove_edge(self, rid: str) -> None:
        edge = self._edges.pop(rid, None)
        if edge is None:
            return
        for end in edge[:2]:
            self._incident[end].discard(rid)
            self._ordered.pop(end, None)


class EmbeddedGraphStore:
    """``GraphStore`` on a single SQLite file; safe to share between threads and to open from several processes.

    ``read_only=True`` opens the file read-only (it must exist) and every write raises ``PermissionError``; such a
    reader still sees what writers in other processes commit.
    """

    def __init__(self, path: str | Path, *, read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self._lock = threading.RLock()
        self._graph: _Adjacency | None = None
        self._graph_version: int | None = None
        if read_only:
            if not self.path.is_file():
                raise FileNotFoundError(f"graph store {self.path} does not exist (opened read-only)")
            uri = f"{self.path.resolve().as_uri()}?mode=ro"
            self._conn = sqlite3.connect(uri, uri=True, timeout=30.0, isolation_level=None, check_same_thread=False)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
        try:
            self._conn.execute("PRAGMA busy_timeout = 30000")
            self._open_schema()
        except BaseException:
            self._conn.close()
            raise

    def _open_schema(self) -> None:
        version = self._conn.execute("PRAGMA user_version").fetchone()[0]
        if self.read_only:
            if version != SCHEMA_VERSION:
                raise ValueError(f"{self.path} is not a graph store of schema version {SCHEMA_VERSION} (has {version})")
            return
        if version not in (0, SCHEMA_VERSION):
            raise ValueError(f"{self.path} has graph store schema version {version}; this code reads {SCHEMA_VERSION}")
        # WAL: readers in other processes never block the writer; NORMAL sync is durable across crashes in WAL mode.
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = NORMAL")
        if version == 0:
            try:
                self._conn.executescript(f"BEGIN IMMEDIATE; {_SCHEMA} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;")
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise

    def __enter__(self) -> "EmbeddedGraphStore":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- transactions ---------------------------------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """Lock, then one IMMEDIATE transaction: taking the write lock up front lets busy_timeout queue writers."""
        if self.read_only:
            raise PermissionError(f"graph store {self.path} is open read-only")
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """Lock, then one read transaction, so multi-statement reads see a single snapshot."""
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                yield self._conn
            finally:
                self._conn.execute("COMMIT")

    def _existing_entities(self, conn: sqlite3.Connection, entity_ids: Sequence[str]) -> set[str]:
        found: set[str] = set()
        for part in _slices(entity_ids):
            rows = conn.execute(f"SELECT entity_id FROM entities WHERE entity_id IN ({_placeholders(len(part))})", part)
            found.update(row[0] for row in rows)
        return found

    def _require_entities(self, conn: sqlite3.Connection, entity_ids: Iterable[str], what: str) -> None:
        wanted = _unique(entity_ids)
        existing = self._existing_entities(conn, wanted)
        missing = [eid for eid in wanted if eid not in existing]
        if missing:
            raise ValueError(f"{what} name {len(missing)} unknown entities (upsert them first): {missing[:5]}")

    # -- writes ---------------------------------------------------------------------------------------------------

    def upsert_entities(self, entities: Sequence[Entity]) -> None:
        rows = [_entity_row(entity) for entity in entities]
        if not rows:
            return
        with self._write() as conn:
            conn.executemany(_UPSERT_ENTITY, rows)
            if self._graph is not None:
                self._graph.add_entities(row[0] for row in rows)

    def upsert_relationships(self, relationships: Sequence[Relationship]) -> None:
        """Insert or replace relationships; both endpoints must already be stored (``ValueError`` otherwise)."""
        rows = [_relationship_row(relationship) for relationship in relationships]
        if not rows:
            return
        with self._write() as conn:
            endpoints = [row[1] for row in rows] + [row[2] for row in rows]
            self._require_entities(conn, endpoints, "relationships")
            conn.executemany(_UPSERT_RELATIONSHIP, rows)
            if self._graph is not None:
                for row in rows:
                    self._graph.put_edge(row[0], row[1], row[2], row[3], row[5])

    def set_chunk_mentions(self, mentions: dict[str, Sequence[str]]) -> None:
        """Replace the entities mentioned by each given chunk (an empty sequence clears the chunk)."""
        if not mentions:
            return
        pairs = [(chunk_id, entity_id) for chunk_id, entity_ids in mentions.items() for entity_id in entity_ids]
        with self._write() as conn:
            self._require_entities(conn, (pair[1] for pair in pairs), "chunk mentions")
            conn.executemany("DELETE FROM mentions WHERE chunk_id = ?", [(chunk_id,) for chunk_id in mentions])
            conn.executemany("INSERT INTO mentions (chunk_id, entity_id) VALUES (?, ?) ON CONFLICT DO NOTHING", pairs)

    def delete_entities(self, entity_ids: Sequence[str]) -> None:
        """Delete entities together with every relationship touching them and every mention of them."""
        keys = [(entity_id,) for entity_id in _unique(entity_ids)]
        if not keys:
            return
        with self._write() as conn:
            conn.executemany("DELETE FROM relationships WHERE source_id = ?", keys)
            conn.executemany("DELETE FROM relationships WHERE target_id = ?", keys)
            conn.executemany("DELETE FROM mentions WHERE entity_id = ?", keys)
            conn.executemany("DELETE FROM entities WHERE entity_id = ?", keys)
            if self._graph is not None:
                self._graph.remove_entities(key[0] for key in keys)

    def delete_relationships(self, relationship_ids: Sequence[str]) -> None:
        keys = [(rid,) for rid in _unique(relationship_ids)]
        if not keys:
            return
        with self._write() as conn:
            conn.executemany("DELETE FROM relationships WHERE relationship_id = ?", keys)
            if self._graph is not None:
                for key in keys:
                    self._graph.remove_edge(key[0])

    def delete_chunks(self, chunk_ids: Sequence[str]) -> None:
        """Forget the chunks' mentions (entities keep their ``chunk_ids`` provenance until re-merged)."""
        keys = [(chunk_id,) for chunk_id in _unique(chunk_ids)]
        if not keys:
            return
        with self._write() as conn:
            conn.executemany("DELETE FROM mentions WHERE chunk_id = ?", keys)

    # -- point reads ----------------------------------------------------------------------------------------------

    def get_entities(self, entity_ids: Iterable[str]) -> dict[str, Entity]:
        """The stored entities among ``entity_ids``; unknown ids are absent from the result."""
        ids = _unique(entity_ids)
        found: dict[str, Entity] = {}
        with self._read() as conn:
            for part in _slices(ids):
                sql = f"SELECT {_ENTITY_COLUMNS} FROM entities WHERE entity_id IN ({_placeholders(len(part))})"
                for row in conn.execute(sql, part):
                    found[row[0]] = _entity_from_row(row)
        return found

    def get_relationships(self, relationship_ids: Iterable[str]) -> dict[str, Relationship]:
        """The stored relationships among ``relationship_ids``; unknown ids are absent from the result."""
        ids = _unique(relationship_ids)
        found: dict[str, Relationship] = {}
        with self._read() as conn:
            for part in _slices(ids):
                sql = (
                    f"SELECT {_RELATIONSHIP_COLUMNS} FROM relationships "
                    f"WHERE relationship_id IN ({_placeholders(len(part))})"
                )
                for row in conn.execute(sql, part):
                    found[row[0]] = _relationship_from_row(row)
        return found

    def _pairs(self, sql: str, keys: Iterable[str]) -> dict[str, list[str]]:
        ids = _unique(keys)
        grouped: dict[str, list[str]] = {}
        with self._read() as conn:
            for part in _slices(ids):
                for key, value in conn.execute(sql.format(_placeholders(len(part))), part):
                    grouped.setdefault(key, []).append(value)
        return grouped

    def entities_of_chunks(self, chunk_ids: Iterable[str]) -> dict[str, list[str]]:
        """Chunk id → entity ids it mentions (sorted); chunks without mentions are absent."""
        sql = "SELECT chunk_id, entity_id FROM mentions WHERE chunk_id IN ({}) ORDER BY chunk_id, entity_id"
        return self._pairs(sql, chunk_ids)

    def chunks_of_entities(self, entity_ids: Iterable[str]) -> dict[str, list[str]]:
        """Entity id → chunk ids mentioning it (sorted); entities without mentions are absent."""
        sql = "SELECT entity_id, chunk_id FROM mentions WHERE entity_id IN ({}) ORDER BY entity_id, chunk_id"
        return self._pairs(sql, entity_ids)

    def relationships_between(self, entity_ids: Iterable[str], limit: int = 50) -> list[Relationship]:
        """Relationships with both ends in ``entity_ids``, heaviest first (ties by relationship id)."""
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        ids = _unique(entity_ids)
        members = set(ids)
        found: list[Relationship] = []
        with self._read() as conn:
            for part in _slices(ids):
                sql = (
                    f"SELECT {_RELATIONSHIP_COLUMNS} FROM relationships "
                    f"WHERE source_id IN ({_placeholders(len(part))})"
                )
                found.extend(_relationship_from_row(row) for row in conn.execute(sql, part) if row[2] in members)
        found.sort(key=lambda rel: (-rel.weight, rel.relationship_id))
        return found[:limit]

    # -- listings -------------------------------------------------------------------------------------------------

    def stats(self) -> GraphStats:
        with self._read() as conn:
            entity_types = dict(conn.execute("SELECT type, COUNT(*) FROM entities GROUP BY type ORDER BY type"))
            relationship_types = dict(
                conn.execute("SELECT type, COUNT(*) FROM relationships GROUP BY type ORDER BY type")
            )
            chunk_count = conn.execute("SELECT COUNT(DISTINCT chunk_id) FROM mentions").fetchone()[0]
        return GraphStats(
            entity_count=sum(entity_types.values()),
            relationship_count=sum(relationship_types.values()),
            chunk_count=chunk_count,
            entity_types=entity_types,
            relationship_types=relationship_types,
        )

    @staticmethod
    def _check_page(offset: int, limit: int) -> None:
        if offset < 0 or limit < 0:
            raise ValueError(f"offset and limit must be >= 0, got offset={offset}, limit={limit}")

    def list_entities(self, offset: int = 0, limit: int = 50, order_by: str = "mention_count") -> list[Entity]:
        """A page of entities: by mention_count desc then name, or by name (ties by entity id)."""
        self._check_page(offset, limit)
        order = _ORDER_ENTITIES.get(order_by)
        if order is None:
            raise ValueError(f"order_by must be one of {sorted(_ORDER_ENTITIES)}, got {order_by!r}")
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {_ENTITY_COLUMNS} FROM entities ORDER BY {order} LIMIT ? OFFSET ?", (limit, offset)
            ).fetchall()
        return [_entity_from_row(row) for row in rows]

    def list_relationships(self, offset: int = 0, limit: int = 50) -> list[Relationship]:
        """A page of relationships by weight desc, ties by relationship id."""
        self._check_page(offset, limit)
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {_RELATIONSHIP_COLUMNS} FROM relationships ORDER BY weight DESC, relationship_id "
                "LIMIT ? OFFSET ?",
                (limit, offset),
            ).fetchall()
        return [_relationship_from_row(row) for row in rows]

    def all_entity_ids(self) -> set[str]:
        with self._lock:
            return {row[0] for row in self._conn.execute("SELECT entity_id FROM entities")}

    def all_relationship_ids(self) -> set[str]:
        with self._lock:
            return {row[0] for row in self._conn.execute("SELECT relationship_id FROM relationships")}

    def weighted_edges(self) -> list[tuple[str, str, float]]:
        """Undirected (a, b, total weight) with a < b: parallel relationships summed, self-loops left out."""
        sql = """
            SELECT MIN(source_id, target_id) AS a, MAX(source_id, target_id) AS b, SUM(weight)
            FROM relationships WHERE source_id != target_id
            GROUP BY a, b ORDER BY a, b
        """
        with self._lock:
            return [(a, b, float(weight)) for a, b, weight in self._conn.execute(sql)]

    # -- traversal ------------------------------------------------------------------------------------------------

    def _current_graph(self) -> _Adjacency:
        """The adjacency, (re)built when missing or when another connection has committed since it was built."""
        version = self._conn.execute("PRAGMA data_version").fetchone()[0]
        if self._graph is not None and version == self._graph_version:
            return self._graph
        graph = _Adjacency()
        with self._read() as conn:
            graph.add_entities(row[0] for row in conn.execute("SELECT entity_id FROM entities"))
            for rid, source, target, rtype, weight in conn.execute(
                "SELECT relationship_id, source_id, target_id, type, weight FROM relationships"
            ):
                graph.put_edge(rid, source, target, rtype, weight)
        # The version was read before the snapshot: a commit in between only costs one extra rebuild later.
        self._graph, self._graph_version = graph, version
        return graph

    def traverse(
        self,
        seeds: dict[str, float],
        max_hops: int,
        decay: float = 0.5,
        fanout: int = 50,
        relationship_types: Sequence[str] | None = None,
    ) -> list[TraversalHit]:
        """Spread activation from ``seeds`` over relationships (in both directions) for at most ``max_hops`` hops.

        Scoring (the query module relies on it):

        * A seed that exists in the graph is a hit with ``hops=0``, ``score`` = its activation, ``path=(seed,)``;
          seeds keep that score even when another seed could reach them. Unknown seed ids are ignored.
        * Reaching neighbour ``n`` from entity ``u`` over a relationship of weight ``w`` gives
          ``score(u) * decay * w / (1 + w) / log2(2 + degree(n))``, where ``degree(n)`` counts all relationships
          touching ``n`` (any type, self-loops excluded). ``w / (1 + w)`` maps weights into (0, 1) (heavier is
          stronger, nothing is amplified); the logarithm damps hubs so they spread little activation. Since every
          factor is < 1, scores fall strictly with each hop.
        * Each entity keeps its best score over all paths of at most ``max_hops`` hops, with that path's hop count,
          entity ids (seed first) and relationship ids. An entity improved at hop h is re-expanded from there.
        * Expanding ``u`` considers its relationships heaviest first (ties by neighbour id, then relationship id),
          skips entities already on ``u``'s path and types outside ``relationship_types`` (``None``: all types),
          and stops after ``fanout`` distinct neighbours.
        * Hits are sorted by score desc, then hops, then entity id — deterministic for the same graph.
        """
        if max_hops < 0:
            raise ValueError(f"max_hops must be >= 0, got {max_hops}")
        if not 0 < decay <= 1:
            raise ValueError(f"decay must be in (0, 1], got {decay}")
        if fanout < 1:
            raise ValueError(f"fanout must be >= 1, got {fanout}")
        for seed, activation in seeds.items():
            if not (math.isfinite(activation) and activation >= 0):
                raise ValueError(f"seed {seed} has activation {activation!r}; activations must be finite and >= 0")
        allowed = None if relationship_types is None else frozenset(relationship_types)

        with self._lock:
            graph = self._current_graph()
            # entity id -> (score, hops, path, relationship ids)
            best: dict[str, tuple[float, int, tuple[str, ...], tuple[str, ...]]] = {
                seed: (float(activation), 0, (seed,), ()) for seed, activation in seeds.items() if seed in graph.entities
            }
            frontier = sorted(best.items(), key=lambda item: (-item[1][0], item[0]))
            for hop in range(1, max_hops + 1):
                improved: set[str] = set()
                for node, (score, _, path, via) in frontier:
                    if score <= 0:
                        continue
                    taken: set[str] = set()
                    for neighbour, rid, rtype, weight in graph.neighbours(node):
                        if len(taken) >= fanout:
                            break
                        if neighbour in taken or neighbour in path or (allowed is not None and rtype not in allowed):
                            continue
                        taken.add(neighbour)
                        if neighbour in seeds:
                            continue
                        candidate = spread_score(score, decay, weight, graph.degree(neighbour))
                        current = best.get(neighbour)
                        if current is None or candidate > current[0]:
                            best[neighbour] = (candidate, hop, path + (neighbour,), via + (rid,))
                            improved.add(neighbour)
                frontier = sorted(((node, best[node]) for node in improved), key=lambda item: (-item[1][0], item[0]))

        hits = [
            TraversalHit(entity_id=eid, hops=hops, score=score, path=path, via_relationships=via)
            for eid, (score, hops, path, via) in best.items()
        ]
        hits.sort(key=lambda hit: (-hit.score, hit.hops, hit.entity_id))
        return hits

    def close(self) -> None:
        with self._lock:
            self._graph = None
            self._conn.close()
