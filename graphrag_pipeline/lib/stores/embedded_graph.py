"""The embedded graph store: one SQLite file, with an in-memory adjacency for fast traversal.

SQLite in WAL mode lets a Dagster step write while agents in other processes read: readers never block the writer
and a busy timeout makes concurrent writers queue instead of failing. Every write method is one transaction.

Neighbourhoods (what query-side traversal reads, once per hop) come from an immutable in-memory adjacency
(compressed sparse rows in numpy arrays) built from the file on the first ``neighbourhoods`` call. This store's own
writes drop it; writes by *other* connections are detected with ``PRAGMA data_version`` (which changes only when
another connection commits). Either way the next call rebuilds it from one consistent snapshot of the file. A
read-only store (a query process's) keeps the mentions by entity in memory the same way, for graph scoring's
``chunks_of_entities``.
"""

from __future__ import annotations

import hashlib
import math
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from graphrag_pipeline.lib.core.ids import hashed_id_bytes
from graphrag_pipeline.lib.core.models import ChunkText, Entity, EntityNames, Relationship
from graphrag_pipeline.lib.stores.protocols import (
    AskedRelationships, GraphStats, Neighbourhood, ReadAhead, Subgraph, WalkPlan, check_page,
    read_asked_relationships,
)
from graphrag_pipeline.lib.stores.sqlite_files import naming_damage

# 2: relationship descriptions stored once; 3: entity titles; 4: compact ids and entity keys; 5: chunk-id lists as bytes
SCHEMA_VERSION = 5

# Only the indexes that interactive reads and cascading deletes need: each secondary index on random hash ids
# roughly halves the bulk write rate, so listings sort on the fly instead.
_SCHEMA = """
-- Ids are the pipeline's own as their 16 bytes, any other as its text (see _stored_id): a TEXT column keeps a blob as
-- it is given. Relationships and mentions name an entity by its key, a small integer, not by its id: ids were most
-- of their rows and all of their indexes (docs/benchmarks.md). Keys are never reused (AUTOINCREMENT), so a key left
-- behind by damage names no other entity.
CREATE TABLE IF NOT EXISTS entities (
    entity_key INTEGER PRIMARY KEY AUTOINCREMENT,
    entity_id TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    canonical TEXT NOT NULL,
    type TEXT NOT NULL,
    description TEXT NOT NULL,
    mention_count INTEGER NOT NULL,
    chunk_ids TEXT NOT NULL,        -- their ids' bytes one after another, or a JSON array (_packed_chunk_ids)
    doc_ids TEXT NOT NULL,
    aliases TEXT NOT NULL,
    title TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS relationships (
    relationship_id TEXT PRIMARY KEY,
    source_key INTEGER NOT NULL,
    target_key INTEGER NOT NULL,
    type TEXT NOT NULL,
    description_id BLOB NOT NULL,   -- in relationship_descriptions
    weight REAL NOT NULL,
    chunk_ids TEXT NOT NULL,        -- as the entities'
    doc_ids TEXT NOT NULL,
    predicates TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS relationships_by_ends ON relationships (source_key, target_key);
CREATE INDEX IF NOT EXISTS relationships_by_target ON relationships (target_key);
-- Each description once: a sentence relating several entities is the description of every pair of them, so most
-- relationships share their description with others (the sizes are in docs/benchmarks.md).
-- A description no relationship names any more goes with the last one that did, which its index finds.
CREATE TABLE IF NOT EXISTS relationship_descriptions (
    description_id BLOB PRIMARY KEY,
    description TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS relationships_by_description ON relationships (description_id);
CREATE TRIGGER IF NOT EXISTS relationship_deleted AFTER DELETE ON relationships BEGIN
    DELETE FROM relationship_descriptions WHERE description_id = OLD.description_id
        AND NOT EXISTS (SELECT 1 FROM relationships WHERE description_id = OLD.description_id);
END;
CREATE TRIGGER IF NOT EXISTS relationship_redescribed AFTER UPDATE OF description_id ON relationships BEGIN
    DELETE FROM relationship_descriptions WHERE description_id = OLD.description_id
        AND NOT EXISTS (SELECT 1 FROM relationships WHERE description_id = OLD.description_id);
END;
CREATE TABLE IF NOT EXISTS mentions (
    chunk_id TEXT NOT NULL,
    entity_key INTEGER NOT NULL,
    PRIMARY KEY (chunk_id, entity_key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS mentions_by_entity ON mentions (entity_key, chunk_id);
"""


def _rebuilt_from(version: int) -> str:
    """The statements that bring a file of ``version`` (1 to 3, every id as its text) to the current layout: its
    tables are renamed out of the way, the current ones made, the rows copied over with their ids as stored now and
    their ends and mentions naming entities by key. Version 1 kept each relationship's description in its row, and
    titles came with version 3."""
    title = "title" if version >= 3 else "''"
    description_id = "description_id(r.description)" if version == 1 else "r.description_id"
    descriptions = ("INSERT OR IGNORE INTO relationship_descriptions SELECT description_id(description), description "
                    "FROM old_relationships;\n" if version == 1 else "")
    return f"""
DROP TRIGGER IF EXISTS relationship_deleted;
DROP TRIGGER IF EXISTS relationship_redescribed;
DROP INDEX IF EXISTS relationships_by_ends;
DROP INDEX IF EXISTS relationships_by_target;
DROP INDEX IF EXISTS relationships_by_description;
DROP INDEX IF EXISTS mentions_by_entity;
ALTER TABLE entities RENAME TO old_entities;
ALTER TABLE relationships RENAME TO old_relationships;
ALTER TABLE mentions RENAME TO old_mentions;
{_SCHEMA}
INSERT INTO entities (entity_id, name, canonical, type, description, mention_count, chunk_ids, doc_ids, aliases, title)
    SELECT stored_id('ent', entity_id), name, canonical, type, description, mention_count, packed_chunk_ids(chunk_ids),
        doc_ids, aliases, {title} FROM old_entities ORDER BY entity_id;
{descriptions}INSERT INTO relationships SELECT stored_id('rel', r.relationship_id), s.entity_key, t.entity_key, r.type,
    {description_id}, r.weight, packed_chunk_ids(r.chunk_ids), r.doc_ids, r.predicates FROM old_relationships r
    JOIN entities s ON s.entity_id = stored_id('ent', r.source_id)
    JOIN entities t ON t.entity_id = stored_id('ent', r.target_id);
INSERT INTO mentions SELECT stored_id('chunk', m.chunk_id), e.entity_key FROM old_mentions m
    JOIN entities e ON e.entity_id = stored_id('ent', m.entity_id);
DROP TABLE old_entities;
DROP TABLE old_relationships;
DROP TABLE old_mentions;
"""


# What a writer runs on a file of each older version to bring it to SCHEMA_VERSION.
_MIGRATIONS = {0: _SCHEMA, **{version: _rebuilt_from(version) for version in (1, 2, 3)},
               4: "UPDATE entities SET chunk_ids = packed_chunk_ids(chunk_ids);\n"
                  "UPDATE relationships SET chunk_ids = packed_chunk_ids(chunk_ids);\n"}


def _statements(script: str) -> list[str]:
    """The statements of ``script``, each whole (a trigger's body holds semicolons of its own)."""
    statements, pending = [], ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending)
            pending = ""
    return statements


# The ids the pipeline makes (a prefix, a dash and 32 hex digits) are stored as their 16 bytes from version 4, and any
# other id (an import's, a test's) as its text. A column holds one kind of id, so its prefix is implied: "ent" for
# entities, "rel" for relationships, "chunk" for chunks.
_HASHED_IDS = {prefix: f"{prefix}-" for prefix in ("ent", "rel", "chunk")}


def _stored_id(prefix: str, identifier: str) -> str | bytes:
    """``identifier`` as a file of version 4 stores it in a column of ``prefix`` ids."""
    return hashed_id_bytes(identifier, _HASHED_IDS[prefix]) or identifier


def _id_of(prefix: str, stored: str | bytes) -> str:
    """The id a column of ``prefix`` ids holds as ``stored``, in a file of any version. Decoded here rather than by
    SQL where a question waits: SQLite's hex() and lower() on each id cost more than this."""
    return stored if stored.__class__ is str else f"{prefix}-{stored.hex()}"


def _packed_chunk_ids(chunk_ids: Sequence[str]) -> str | bytes:
    """A list of chunk ids as a file of version 5 stores it: the pipeline's as their 16 bytes one after another
    (as JSON text the lists were a seventh of musique-100's file), a list holding any other id as a JSON array."""
    stored = [_stored_id("chunk", chunk_id) for chunk_id in chunk_ids]
    if all(item.__class__ is bytes for item in stored):
        return b"".join(stored)
    return _encode_json(list(chunk_ids))


def _repacked_chunk_ids(stored: str | bytes) -> str | bytes:
    """A stored list of chunk ids (a JSON array before version 5) as version 5 stores it: the migrations' function."""
    return stored if stored.__class__ is bytes else _packed_chunk_ids(orjson.loads(stored))


def _chunk_ids_of(stored: str | bytes) -> tuple[str, ...]:
    """The chunk ids a stored list holds (``_packed_chunk_ids``, or a JSON array in a file of any version)."""
    if stored.__class__ is str:
        return tuple(orjson.loads(stored))
    if not stored:
        return ()
    # The digits of each id spaced by hex() itself and split apart in C: slicing them in Python took 3.5× the time
    # of decoding the same list as JSON, this takes 2×.
    return tuple(("chunk-" + stored.hex(" ", 16).replace(" ", " chunk-")).split(" "))


def _id_lists(columns: str) -> str:
    """The JSON arrays in ``columns`` as one array of arrays, so a row takes one JSON decode instead of three (the
    decoder's per-call cost was half the time of turning rows into records)."""
    return "'[' || " + " || ',' || ".join(columns.split(", ")) + " || ']'"


def _layout(version: int) -> dict[str, str]:
    """The SQL that reads write in braces, for a file of ``version`` (a reader does not migrate, and reads a file of an
    older version as it is until a writer migrates it).

    Id lists travel as one JSON array parameter, expanded by json_each (no bound-parameter limit, one statement):
    ``{ent}``, ``{rel}`` and ``{chunk}`` are lists of such ids as the file stores them, ``{values}`` any other list,
    ``{ent_keys}`` what relationships and mentions name the listed entities by. A relationship's rows are read from
    ``{relationships}`` (aliased ``r``), its ends compared and read as ``{source}`` and ``{target}`` (keys from version 4:
    see ``_ends_named``); ``{relationship_columns}`` is one whole relationship. Mentions are read from ``{mentions}``
    (aliased ``m``), the entity's id as ``{mention_entity}`` and what ``{ent_keys}`` lists as
    ``{mention_entity_key}``. ``{relationship_columns_without_provenance}`` is one without its chunk ids, document
    ids and predicates. ``{entity_columns}`` is one whole entity, ``{entity_columns_without_chunk_ids}`` one
    without its chunk ids (``'[]'``); titles came with version 3."""
    keyed = version >= 4
    lists = {prefix: (f"(SELECT stored_id('{prefix}', value) FROM json_each(?))" if keyed
                      else "(SELECT value FROM json_each(?))") for prefix in _HASHED_IDS}
    descriptions = "relationships r" if version == 1 else (
        "relationships r JOIN relationship_descriptions USING (description_id)")
    description = "r.description" if version == 1 else "relationship_descriptions.description"
    source, target = ("r.source_key", "r.target_key") if keyed else ("r.source_id", "r.target_id")
    title = "title" if version >= 3 else "'' AS title"

    def entity_columns(chunk_ids: str) -> str:
        return (f"entity_id, name, canonical, type, description, mention_count, {chunk_ids}, "
                f"{_id_lists('doc_ids, aliases')}, {title}")

    return {
        **lists,
        "values": "(SELECT value FROM json_each(?))",
        "ent_keys": f"(SELECT entity_key FROM entities WHERE entity_id IN {lists['ent']})" if keyed else lists["ent"],
        "relationships": descriptions,
        "source": source,
        "target": target,
        "relationship_columns": f"r.relationship_id, {source}, {target}, r.type, {description}, r.weight, "
                                f"r.chunk_ids, {_id_lists('r.doc_ids, r.predicates')}",
        "relationship_columns_without_provenance": f"r.relationship_id, {source}, {target}, r.type, {description}, "
                                                   "r.weight",
        "mentions": "mentions m JOIN entities e ON e.entity_key = m.entity_key" if keyed else "mentions m",
        "mention_entity": "e.entity_id" if keyed else "m.entity_id",
        "mention_entity_key": "m.entity_key" if keyed else "m.entity_id",
        "entity_columns": entity_columns("chunk_ids"),
        "entity_columns_without_chunk_ids": entity_columns("'[]'"),
    }


_LAYOUTS = {version: _layout(version) for version in range(1, SCHEMA_VERSION + 1)}
_CURRENT = _LAYOUTS[SCHEMA_VERSION]  # a writer's file is of the current version
_ID_SEPARATOR = " "

_ENTITY_COLUMNS = "entity_id, name, canonical, type, description, mention_count, chunk_ids, doc_ids, aliases, title"


_UPSERT_ENTITY = f"""
INSERT INTO entities ({_ENTITY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (entity_id) DO UPDATE SET
    name = excluded.name, canonical = excluded.canonical, type = excluded.type,
    description = excluded.description, mention_count = excluded.mention_count,
    chunk_ids = excluded.chunk_ids, doc_ids = excluded.doc_ids, aliases = excluded.aliases, title = excluded.title
"""

_UPSERT_RELATIONSHIP = """
INSERT INTO relationships (relationship_id, source_key, target_key, type, description_id, weight, chunk_ids, doc_ids,
    predicates) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (relationship_id) DO UPDATE SET
    source_key = excluded.source_key, target_key = excluded.target_key, type = excluded.type,
    description_id = excluded.description_id, weight = excluded.weight,
    chunk_ids = excluded.chunk_ids, doc_ids = excluded.doc_ids, predicates = excluded.predicates
"""

_ORDER_ENTITIES = {
    "mention_count": "mention_count DESC, name, entity_id",
    "name": "name, entity_id",
}


def _encode_json(values: list) -> str:
    # A bulk write encodes three lists per row: orjson writes the same text (no spaces, UTF-8 rather than escapes)
    # about ten times as fast as the standard library's encoder.
    return orjson.dumps(values).decode()


def _ids_json(ids: Iterable[str]) -> str:
    return _encode_json(list(dict.fromkeys(ids)))


def _load(text: str) -> tuple[str, ...]:
    return tuple(orjson.loads(text))


def _entity_row(entity: Entity) -> tuple[Any, ...]:
    if not entity.entity_id:
        raise ValueError(f"entity without an id: {entity.name!r}")
    return (
        _stored_id("ent", entity.entity_id),
        entity.name,
        entity.canonical,
        entity.type,
        entity.description,
        int(entity.mention_count),
        _packed_chunk_ids(entity.chunk_ids),
        _encode_json(list(entity.doc_ids)),
        _encode_json(list(entity.aliases)),
        entity.title,
    )


def _description_id(description: str) -> bytes:
    return hashlib.blake2b(description.encode(), digest_size=16).digest()


def _relationship_row(relationship: Relationship, keys: Mapping[str, int]) -> tuple[Any, ...]:
    """The stored row of ``relationship``, whose ends ``keys`` (entity id -> key) names."""
    if not relationship.relationship_id:
        raise ValueError(f"relationship without an id: {relationship.source_id} -> {relationship.target_id}")
    weight = float(relationship.weight)
    if not (math.isfinite(weight) and weight > 0):
        raise ValueError(f"relationship {relationship.relationship_id} has weight {weight!r}; weights must be > 0")
    return (
        _stored_id("rel", relationship.relationship_id),
        keys[relationship.source_id],
        keys[relationship.target_id],
        relationship.type,
        _description_id(relationship.description),
        weight,
        _packed_chunk_ids(relationship.chunk_ids),
        _encode_json(list(relationship.doc_ids)),
        _encode_json(list(relationship.predicates)),
    )


def _entity_from_row(row: Sequence[Any]) -> Entity:
    """An entity from a row of ``entity_columns``."""
    doc_ids, aliases = orjson.loads(row[7])
    return Entity(
        entity_id=_id_of("ent", row[0]),
        name=row[1],
        canonical=row[2],
        type=row[3],
        description=row[4],
        mention_count=row[5],
        chunk_ids=_chunk_ids_of(row[6]),
        doc_ids=tuple(doc_ids),
        aliases=tuple(aliases),
        title=row[8],
    )


def _relationship_from_row(row: Sequence[Any]) -> Relationship:
    """A relationship from a row of ``relationship_columns`` whose ends ``_ends_named`` has named, or of
    ``relationship_columns_without_provenance`` (six columns)."""
    if len(row) == 6:
        return Relationship(relationship_id=_id_of("rel", row[0]), source_id=row[1], target_id=row[2], type=row[3],
                            description=row[4], weight=row[5], chunk_ids=(), doc_ids=())
    doc_ids, predicates = orjson.loads(row[7])
    return Relationship(
        relationship_id=_id_of("rel", row[0]),
        source_id=row[1],
        target_id=row[2],
        type=row[3],
        description=row[4],
        weight=row[5],
        chunk_ids=_chunk_ids_of(row[6]),
        doc_ids=tuple(doc_ids),
        predicates=tuple(predicates),
    )


class _Adjacency:
    """Immutable undirected adjacency in compressed sparse rows, one row of edges per entity.

    Entities and relationships are numbered in sorted id order, so sorting by number is sorting by id: each row is
    sorted by weight desc, then neighbour, then relationship, the order ``Neighbourhood.edges`` promises.
    Self-loops are left out: they lead nowhere.
    """

    def __init__(self, entity_ids: list[str], relationships: Sequence[tuple[str, str, str, str, float]]) -> None:
        """``entity_ids`` sorted; ``relationships`` as (id, source, target, type, weight) without self-loops."""
        self.index = {entity_id: position for position, entity_id in enumerate(entity_ids)}
        row_ids, source_ids, target_ids, type_names, weight_values = (
            zip(*relationships) if relationships else ((), (), (), (), ())
        )
        count = len(row_ids)
        by_id = sorted(range(count), key=row_ids.__getitem__)
        relationship_ids = list(map(row_ids.__getitem__, by_id))
        self._type_codes = {name: code for code, name in enumerate(sorted(set(type_names)))}

        rank = np.empty(count, dtype=np.int64)  # row -> position of its id in sorted order
        rank[np.array(by_id, dtype=np.int64)] = np.arange(count, dtype=np.int64)
        sources = np.fromiter(map(self.index.__getitem__, source_ids), dtype=np.int64, count=count)
        targets = np.fromiter(map(self.index.__getitem__, target_ids), dtype=np.int64, count=count)
        types = np.fromiter(map(self._type_codes.__getitem__, type_names), dtype=np.int32, count=count)
        weights = np.array(weight_values, dtype=np.float64)

        owner = np.concatenate([sources, targets])
        neighbour = np.concatenate([targets, sources])
        relationship = np.concatenate([rank, rank])
        weight = np.concatenate([weights, weights])
        order = np.lexsort((relationship, neighbour, -weight, owner))
        # Ids as object arrays of the existing strings: a slice converts straight to the ids a Neighbourhood lists.
        self._neighbour = np.array(entity_ids, dtype=object)[neighbour[order]]
        self._relationship = np.array(relationship_ids, dtype=object)[relationship[order]]
        self._type = np.concatenate([types, types])[order]
        self._weight = weight[order]
        degree = np.bincount(owner, minlength=len(entity_ids))
        heaviest = np.zeros(len(entity_ids), dtype=np.float64)
        np.maximum.at(heaviest, owner, weight)
        self._degree: list[int] = degree.tolist()
        self._heaviest: list[float] = heaviest.tolist()
        self._start: list[int] = np.concatenate([[0], np.cumsum(degree)]).tolist()

    def type_codes_of(self, relationship_types: Sequence[str]) -> np.ndarray:
        """The codes of the named types this graph has (names it lacks match nothing)."""
        codes = self._type_codes
        return np.array([codes[name] for name in relationship_types if name in codes], dtype=np.int32)

    def neighbourhood(self, node: int, allowed_types: np.ndarray | None, limit: int | None) -> Neighbourhood:
        """``node``'s neighbourhood; ``allowed_types`` are type codes (``None``: all types)."""
        low, high = self._start[node], self._start[node + 1]
        if allowed_types is None:
            total = high - low
            listed: slice | np.ndarray = slice(low, high if limit is None else min(high, low + limit))
        else:
            matching = low + np.flatnonzero(np.isin(self._type[low:high], allowed_types))
            total = len(matching)
            listed = matching[:limit]
        edges = tuple(
            zip(self._neighbour[listed].tolist(), self._relationship[listed].tolist(), self._weight[listed].tolist())
        )
        return Neighbourhood(self._degree[node], self._heaviest[node], edges, complete=len(edges) == total)


class EmbeddedGraphStore:
    """``GraphStore`` on a single SQLite file; safe to share between threads and to open from several processes.

    ``read_only=True`` opens the file read-only (it must exist) and every write raises ``PermissionError``; such a
    reader still sees what writers in other processes commit. Relationships and mentions may only name stored
    entities (``ValueError`` otherwise), so deleting an entity cannot leave dangling edges behind.
    """

    def __init__(self, path: str | Path, *, read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self._lock = threading.RLock()
        self._graph: _Adjacency | None = None
        self._graph_version: int | None = None
        self._chunks_by_entity: dict[str, str] | None = None  # a reader's only (see chunks_of_entities)
        self._chunks_by_entity_version: int | None = None
        if read_only:
            if not self.path.is_file():
                raise FileNotFoundError(f"graph store {self.path} does not exist (opened read-only)")
            uri = f"{self.path.resolve().as_uri()}?mode=ro"
            self._conn = sqlite3.connect(uri, uri=True, timeout=30.0, isolation_level=None, check_same_thread=False)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
        try:
            with naming_damage(self.path):
                self._conn.execute("PRAGMA busy_timeout = 30000")
                self._conn.execute("PRAGMA cache_size = -65536")  # 64 MiB: the id indexes of a 300k-edge graph fit
                self._conn.create_function("stored_id", 2, _stored_id, deterministic=True)
                self._open_schema()
        except BaseException:
            self._conn.close()
            raise

    def _open_schema(self) -> None:
        version = self._conn.execute("PRAGMA user_version").fetchone()[0]
        if self.read_only:
            if version not in _LAYOUTS:
                raise ValueError(f"{self.path} is not a graph store of schema version {SCHEMA_VERSION} (has {version})")
            return
        # WAL: readers in other processes never block the writer; NORMAL sync is durable across crashes in WAL mode.
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = NORMAL")
        self._conn.execute("PRAGMA secure_delete = ON")  # what a deleted document supplied is overwritten too
        if version != SCHEMA_VERSION:
            self._conn.create_function("description_id", 1, _description_id, deterministic=True)
            self._conn.create_function("packed_chunk_ids", 1, _repacked_chunk_ids, deterministic=True)
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                # Read again under the write lock: another writer may have created or migrated the file meanwhile.
                version = self._conn.execute("PRAGMA user_version").fetchone()[0]
                if version not in (*_MIGRATIONS, SCHEMA_VERSION):
                    raise ValueError(f"{self.path} has graph store schema version {version}; "
                                     f"this code reads {SCHEMA_VERSION}")
                for statement in _statements(_MIGRATIONS.get(version, "")):
                    self._conn.execute(statement)
                self._conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
            if version != 0 and version in _MIGRATIONS:
                # The rows moved or shrank, and SQLite keeps the pages they left as free space in the file.
                self._conn.execute("VACUUM")

    def __enter__(self) -> "EmbeddedGraphStore":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- transactions ---------------------------------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """Lock, then one IMMEDIATE transaction (taking the write lock up front lets busy_timeout queue writers).

        The adjacency is dropped on success: the next traversal rebuilds it, since commits on this connection do
        not change its data_version.
        """
        if self.read_only:
            raise PermissionError(f"graph store {self.path} is open read-only")
        with self._lock, naming_damage(self.path):
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
            self._graph = None

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """Lock, then one read transaction, so multi-statement reads see a single snapshot."""
        with self._lock, naming_damage(self.path):
            self._conn.execute("BEGIN")
            try:
                yield self._conn
            finally:
                self._conn.execute("COMMIT")

    @staticmethod
    def _entity_keys(conn: sqlite3.Connection, entity_ids: Iterable[str], what: str) -> dict[str, int]:
        """Entity id -> key, of every id given; ``ValueError`` naming those not stored."""
        wanted = list(dict.fromkeys(entity_ids))
        keys = {_id_of("ent", stored): key for stored, key in conn.execute(
            f"SELECT entity_id, entity_key FROM entities WHERE entity_id IN {_CURRENT['ent']}", (_ids_json(wanted),))}
        missing = [entity_id for entity_id in wanted if entity_id not in keys]
        if missing:
            raise ValueError(f"{what} name {len(missing)} unknown entities (upsert them first): {missing[:5]}")
        return keys

    # -- writes ---------------------------------------------------------------------------------------------------

    def upsert_entities(self, entities: Sequence[Entity]) -> None:
        rows = [_entity_row(entity) for entity in entities]
        if rows:
            with self._write() as conn:
                conn.executemany(_UPSERT_ENTITY, rows)

    def upsert_relationships(self, relationships: Sequence[Relationship]) -> None:
        """Insert or replace relationships; both endpoints must already be stored (``ValueError`` otherwise)."""
        if not relationships:
            return
        descriptions = {_description_id(r.description): r.description for r in relationships}
        with self._write() as conn:
            keys = self._entity_keys(conn, (end for r in relationships for end in (r.source_id, r.target_id)),
                                     "relationships")
            rows = [_relationship_row(relationship, keys) for relationship in relationships]
            conn.executemany("INSERT INTO relationship_descriptions VALUES (?, ?) ON CONFLICT DO NOTHING",
                             descriptions.items())
            conn.executemany(_UPSERT_RELATIONSHIP, rows)

    def set_chunk_mentions(self, mentions: dict[str, Sequence[str]]) -> None:
        """Replace the entities mentioned by each given chunk (an empty sequence clears the chunk)."""
        if not mentions:
            return
        with self._write() as conn:
            keys = self._entity_keys(conn, (entity_id for ids in mentions.values() for entity_id in ids),
                                     "chunk mentions")
            conn.execute(f"DELETE FROM mentions WHERE chunk_id IN {_CURRENT['chunk']}", (_ids_json(mentions),))
            conn.executemany("INSERT INTO mentions (chunk_id, entity_key) VALUES (?, ?) ON CONFLICT DO NOTHING",
                             [(_stored_id("chunk", chunk_id), keys[entity_id])
                              for chunk_id, entity_ids in mentions.items() for entity_id in entity_ids])

    # Kept thin: chunk texts and documents are in the state, which queries and exploration read.
    keeps_chunk_texts = False

    def describe_chunks(self, chunks: Sequence[ChunkText]) -> None:
        """Nothing to keep (``keeps_chunk_texts``)."""

    def delete_entities(self, entity_ids: Sequence[str]) -> None:
        """Delete entities together with every relationship touching them and every mention of them."""
        if not entity_ids:
            return
        ids = _ids_json(entity_ids)
        with self._write() as conn:
            keys = _CURRENT["ent_keys"]
            conn.execute(f"DELETE FROM relationships WHERE source_key IN {keys} OR target_key IN {keys}", (ids, ids))
            conn.execute(f"DELETE FROM mentions WHERE entity_key IN {keys}", (ids,))
            conn.execute(f"DELETE FROM entities WHERE entity_id IN {_CURRENT['ent']}", (ids,))

    def delete_relationships(self, relationship_ids: Sequence[str]) -> None:
        if relationship_ids:
            with self._write() as conn:
                sql = f"DELETE FROM relationships WHERE relationship_id IN {_CURRENT['rel']}"
                conn.execute(sql, (_ids_json(relationship_ids),))

    def delete_chunks(self, chunk_ids: Sequence[str]) -> None:
        """Forget the chunks' mentions (entities keep their ``chunk_ids`` provenance until re-merged)."""
        if chunk_ids:
            with self._write() as conn:
                conn.execute(f"DELETE FROM mentions WHERE chunk_id IN {_CURRENT['chunk']}", (_ids_json(chunk_ids),))

    # -- point reads ----------------------------------------------------------------------------------------------

    def _query(self, sql: str, parameters: Sequence[Any] = ()) -> list[Any]:
        """The rows of ``sql``, whose fields in braces are the file's version's (``_layout``); the version and the rows
        read in one snapshot (a writer may migrate the file under a reader's feet)."""
        with self._read() as conn:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            return conn.execute(sql.format_map(_LAYOUTS[version]), parameters).fetchall()

    def _entity_rows(self, clauses: str, parameters: Sequence[Any], columns: str = "entity_columns") -> list[Entity]:
        """``SELECT`` of whole entities (the layout's ``columns``), then ``clauses`` (see ``_query``)."""
        rows = self._query(f"SELECT {{{columns}}} FROM entities {clauses}", parameters)
        return [_entity_from_row(row) for row in rows]

    def _ends_named(self, sql: str, parameters: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of ``sql`` (see ``_query``), whose second and third columns are a relationship's ends, with the
        ends as the ids of the entities they name. From version 4 the ends are keys, read back to ids here rather
        than by joining each end to its entity: a lookup per distinct entity instead of two per row (the 30k
        relationships of 8,000 entities read in 0.63 s instead of 0.79–0.87 s). A row whose end names no stored entity
        (damage below the store) is left out, as a join would."""
        with self._read() as conn:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            rows = conn.execute(sql.format_map(_LAYOUTS[version]), parameters).fetchall()
            if version < 4:
                return [(row[0], _id_of("ent", row[1]), _id_of("ent", row[2]), *row[3:]) for row in rows]
            keys = {key for row in rows for key in (row[1], row[2])}
            ids = {key: _id_of("ent", stored) for key, stored in conn.execute(
                "SELECT entity_key, entity_id FROM entities WHERE entity_key IN (SELECT value FROM json_each(?))",
                (_encode_json(list(keys)),))}
        return [(row[0], ids[row[1]], ids[row[2]], *row[3:]) for row in rows if row[1] in ids and row[2] in ids]

    def _relationship_rows(
        self, clauses: str, parameters: Sequence[Any], columns: str = "relationship_columns"
    ) -> list[Relationship]:
        """``SELECT`` of whole relationships (the layout's ``columns``), then ``clauses`` (see ``_query``)."""
        rows = self._ends_named(f"SELECT {{{columns}}} FROM {{relationships}} " + clauses, parameters)
        return [_relationship_from_row(row) for row in rows]

    def get_entities(self, entity_ids: Iterable[str]) -> dict[str, Entity]:
        """The stored entities among ``entity_ids``; unknown ids are absent from the result."""
        return {entity.entity_id: entity
                for entity in self._entity_rows("WHERE entity_id IN {ent}", (_ids_json(entity_ids),))}

    def documents_of_entities(self, entity_ids: Iterable[str]) -> dict[str, tuple[str, ...]]:
        rows = self._query("SELECT entity_id, doc_ids FROM entities WHERE entity_id IN {ent}", (_ids_json(entity_ids),))
        return {_id_of("ent", entity_id): _load(doc_ids) for entity_id, doc_ids in rows}

    def get_relationships(self, relationship_ids: Iterable[str]) -> dict[str, Relationship]:
        """The stored relationships among ``relationship_ids``; unknown ids are absent from the result."""
        rows = self._relationship_rows("WHERE r.relationship_id IN {rel}", (_ids_json(relationship_ids),))
        return {relationship.relationship_id: relationship for relationship in rows}

    def relationships_of(
        self, entity_ids: Iterable[str], relationship_types: Sequence[str] | None = None, provenance: bool = True
    ) -> dict[str, Relationship]:
        """Relationships of those types between one of ``entity_ids`` and another entity (see ``GraphStore``)."""
        ids = _ids_json(entity_ids)
        clauses = "WHERE ({source} IN {ent_keys} OR {target} IN {ent_keys}) AND {source} != {target}"
        parameters = [ids, ids]
        if relationship_types is not None:
            clauses += " AND r.type IN {values}"
            parameters.append(_ids_json(relationship_types))
        columns = "relationship_columns" if provenance else "relationship_columns_without_provenance"
        return {relationship.relationship_id: relationship
                for relationship in self._relationship_rows(clauses, parameters, columns)}

    def _grouped(self, sql: str, keys: Iterable[str], key_prefix: str, value_prefix: str) -> dict[str, list[str]]:
        """key -> its values (sorted), from ``sql``'s (stored key, stored value) rows for the keys given. A row per
        pair, decoded here: SQLite's own hex() on each id took twice the time of the whole read."""
        grouped: dict[str, list[str]] = {}
        for stored_key, stored_value in self._query(sql, (_ids_json(keys),)):
            grouped.setdefault(_id_of(key_prefix, stored_key), []).append(_id_of(value_prefix, stored_value))
        for values in grouped.values():
            values.sort()
        return grouped

    def entities_of_chunks(self, chunk_ids: Iterable[str]) -> dict[str, list[str]]:
        """Chunk id → entity ids it mentions (sorted); chunks without mentions are absent."""
        return self._grouped("SELECT m.chunk_id, {mention_entity} FROM {mentions} WHERE m.chunk_id IN {chunk}",
                             chunk_ids, "chunk", "ent")

    def chunks_of_entities(self, entity_ids: Iterable[str]) -> dict[str, list[str]]:
        """Entity id → chunk ids mentioning it (sorted); entities without mentions are absent. A read-only store (a
        query process's, whose graph scoring asks for thousands of chunks a question at 100k chunks) answers from an
        in-memory copy of the mentions, read again when another connection has committed since; a writer, whose own
        writes would keep invalidating it, asks SQLite."""
        if not self.read_only:
            return self._grouped(
                "SELECT {mention_entity}, m.chunk_id FROM {mentions} WHERE {mention_entity_key} IN {ent_keys}",
                entity_ids, "ent", "chunk")
        with self._lock, naming_damage(self.path):
            version = self._conn.execute("PRAGMA data_version").fetchone()[0]
            if self._chunks_by_entity is None or version != self._chunks_by_entity_version:
                # One string per entity: 1.3M mentions (100k chunks) take about a second to read and 55 MB of text,
                # where numbering every chunk id took three times both. The chunk ids are joined as SQLite reads them
                # (hex digits, or text) and decoded by the first question that asks for the entity.
                self._chunks_by_entity = {
                    _id_of("ent", entity): joined for entity, joined in self._query(
                        "SELECT {mention_entity}, group_concat(CASE WHEN typeof(m.chunk_id) = 'blob' "
                        f"THEN hex(m.chunk_id) ELSE '-' || m.chunk_id END, '{_ID_SEPARATOR}') "
                        "FROM {mentions} GROUP BY {mention_entity_key}")}
                self._chunks_by_entity_version = version
            chunks_by_entity = self._chunks_by_entity
        found = {}
        for entity_id in entity_ids:
            joined = chunks_by_entity.get(entity_id)
            if joined is not None:
                found[entity_id] = chunk_ids = [chunk[1:] if chunk[0] == "-" else f"chunk-{chunk.lower()}"
                                                for chunk in joined.split(_ID_SEPARATOR)]
                chunk_ids.sort()
        return found

    def relationships_between(self, entity_ids: Iterable[str], limit: int = 50) -> list[Relationship]:
        """Relationships with both ends in ``entity_ids``, heaviest first (ties by relationship id)."""
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        ids = _ids_json(entity_ids)
        return self._relationship_rows(
            "WHERE {source} IN {ent_keys} AND {target} IN {ent_keys} ORDER BY r.weight DESC, r.relationship_id "
            "LIMIT ?",
            (ids, ids, limit))

    def answer_subgraph(
        self, entity_ids: Iterable[str], chunk_ids: Iterable[str], mentioned_among: Iterable[str], limit: int = 50
    ) -> Subgraph:
        """The entities an answer names and the relationships among them (see ``GraphStore``): three reads, each a
        lookup in this process's file."""
        among = set(mentioned_among)
        wanted = set(entity_ids) | {entity_id for mentioned in self.entities_of_chunks(chunk_ids).values()
                                    for entity_id in mentioned if entity_id in among}
        rows = self._entity_rows("WHERE entity_id IN {ent}", (_ids_json(wanted),), "entity_columns_without_chunk_ids")
        return Subgraph({entity.entity_id: entity for entity in rows}, self.relationships_between(wanted, limit))

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

    def list_entities(self, offset: int = 0, limit: int = 50, order_by: str = "mention_count") -> list[Entity]:
        """A page of entities: by mention_count desc then name, or by name (ties by entity id)."""
        check_page(offset, limit)
        order = _ORDER_ENTITIES.get(order_by)
        if order is None:
            raise ValueError(f"order_by must be one of {sorted(_ORDER_ENTITIES)}, got {order_by!r}")
        return self._entity_rows(f"ORDER BY {order} LIMIT ? OFFSET ?", (limit, offset))

    def list_entity_names(self, offset: int = 0, limit: int = 50) -> list[EntityNames]:
        """A page of entities' names and mention counts, by entity id (a tenth of the time of whole entities); ids
        stored as text (not the pipeline's own) come before the pipeline's, as the file orders them."""
        check_page(offset, limit)
        sql = ("SELECT entity_id, name, canonical, aliases, mention_count FROM entities "
               "ORDER BY entity_id LIMIT ? OFFSET ?")
        return [EntityNames(_id_of("ent", row[0]), row[1], row[2], _load(row[3]), row[4])
                for row in self._query(sql, (limit, offset))]

    def list_relationships(self, offset: int = 0, limit: int = 50) -> list[Relationship]:
        """A page of relationships by weight desc, ties by relationship id."""
        check_page(offset, limit)
        return self._relationship_rows("ORDER BY r.weight DESC, r.relationship_id LIMIT ? OFFSET ?", (limit, offset))

    def all_entity_ids(self) -> set[str]:
        return {_id_of("ent", stored) for stored, in self._query("SELECT entity_id FROM entities")}

    def all_relationship_ids(self) -> set[str]:
        return {_id_of("rel", stored) for stored, in self._query("SELECT relationship_id FROM relationships")}

    def weighted_edges(self, around: Iterable[str] | None = None) -> list[tuple[str, str, float]]:
        """Undirected (a, b, total weight) with a < b: parallel relationships summed, self-loops left out; with
        ``around``, those with an end among these entities."""
        sql = """
            SELECT NULL, MIN({source}, {target}), MAX({source}, {target}), SUM(r.weight) FROM relationships r
            WHERE {source} != {target}
        """
        parameters: list[Any] = []
        if around is not None:
            sql += " AND ({source} IN {ent_keys} OR {target} IN {ent_keys})"
            parameters = [_ids_json(around)] * 2
        # Ordered here, by id: the ends' keys say nothing of their ids' order.
        return sorted((min(a, b), max(a, b), float(weight))
                      for _, a, b, weight in self._ends_named(sql + " GROUP BY 2, 3", parameters))

    # -- neighbourhoods -------------------------------------------------------------------------------------------

    def _current_graph(self) -> _Adjacency:
        """The adjacency, (re)built when missing or when another connection has committed since it was built."""
        with self._lock, naming_damage(self.path):
            version = self._conn.execute("PRAGMA data_version").fetchone()[0]
            if self._graph is not None and version == self._graph_version:
                return self._graph
            # The version is read before the snapshot: a commit in between only costs one extra rebuild later.
            with self._read() as conn:
                layout_version = conn.execute("PRAGMA user_version").fetchone()[0]
                ids = {key: _id_of("ent", stored) for key, stored in conn.execute(
                    "SELECT entity_key, entity_id FROM entities" if layout_version >= 4
                    else "SELECT entity_id, entity_id FROM entities")}
                rows = conn.execute("SELECT r.relationship_id, {source}, {target}, r.type, r.weight FROM relationships r "
                                    "WHERE {source} != {target}".format_map(_LAYOUTS[layout_version])).fetchall()
            entity_ids = sorted(ids.values())
            relationships = [(_id_of("rel", relationship_id), ids[source], ids[target], type_name, weight)
                             for relationship_id, source, target, type_name, weight in rows
                             if source in ids and target in ids]
            self._graph, self._graph_version = _Adjacency(entity_ids, relationships), version
            return self._graph

    def neighbourhoods(
        self,
        entity_ids: Iterable[str],
        relationship_types: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> dict[str, Neighbourhood]:
        """Entity id → its ``Neighbourhood`` for the stored entities among ``entity_ids`` (see ``GraphStore``)."""
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        # The adjacency is immutable, so reading it needs no lock and traversals proceed in parallel.
        graph = self._current_graph()
        allowed_types = None if relationship_types is None else graph.type_codes_of(relationship_types)
        index = graph.index
        return {
            entity_id: graph.neighbourhood(index[entity_id], allowed_types, limit)
            for entity_id in dict.fromkeys(entity_ids)
            if entity_id in index
        }

    def neighbourhoods_ahead(self, seeds: Mapping[str, float], plan: WalkPlan) -> ReadAhead:
        """The seeds' neighbourhoods only: a hop read from memory costs no round trip, and reading ahead would read
        the neighbourhoods, and the chunks, of entities the walk then leaves behind; and the asked relationships."""
        asked = {} if plan.asked is None else read_asked_relationships(self, plan.asked)
        return ReadAhead(self.neighbourhoods(seeds, plan.relationship_types, plan.limit), asked=asked)

    def asked_relationships(self, asked: Sequence[AskedRelationships]) -> dict[str, Relationship]:
        """A step at a time (``read_asked_relationships``): a read from this file costs no round trip."""
        return {rid: relationship for one in asked for rid, relationship in read_asked_relationships(self, one).items()}

    def close(self) -> None:
        with self._lock:
            self._graph = self._chunks_by_entity = None
            self._conn.close()
