"""The state store's SQL, which its SQLite and PostgreSQL stores share: the schema in both dialects, payload packing,
and every read and write of documents, chunks, caches and stage bookkeeping.

Every stage reads its input from here and records what it produced, keyed by content-derived ids, so a re-run (or a
run killed half-way and started again) only does the work whose inputs changed, and converges to the same state.
"""

from __future__ import annotations

import abc
import contextlib
import hashlib
import json
import re
import time
import zlib
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar, Collection, ContextManager, Iterable, Iterator, Literal, Mapping, Sequence

import numpy as np
import orjson

from graphrag_pipeline.lib.core.errors import GraphRAGError
from graphrag_pipeline.lib.core.ids import SHORT_HASH_CHARS
from graphrag_pipeline.lib.core.models import (
    Chunk,
    ChunkExtraction,
    Document,
    EntityMention,
    Quarantined,
    RelationMention,
)
from graphrag_pipeline.lib.stores.protocols import CHUNKS, COMMUNITIES, ENTITIES

# The recorded hash of a store entry whose write has begun but is not known to have finished, or that the store was
# found to have lost: never equal to a content hash, so the next run writes the entry again. Recorded *before* a
# write, it also keeps the id in the bookkeeping, so an entry written by a killed run is deleted when its element
# disappears before the next run.
UNSYNCED = "unsynced"

# The version of the tables below. A change to them bumps it and adds the statements that bring an index of the
# previous version up to it to each store's MIGRATIONS (SQLiteStateStore, PostgresStateStore), so an existing index is
# migrated in place rather than rebuilt, and a pipeline older than the index it opens refuses it instead of writing rows in a layout it does not know.
SCHEMA_VERSION = 8
IN_BATCH = 900  # ids per "IN (...)" list: SQLite takes at most 999 parameters per statement
# The tables whose ``payload`` column holds JSON written by the pipeline: stored zlib-compressed since version 2.
# The tables whose payloads version 2 compressed (the last three live in ``payloads`` since version 5).
PAYLOAD_TABLES = ("extractions", "elements", "communities", "community_summaries", "source_extractions")
# Level 1: the payloads shrink about as much as at the default level (ids and repeated keys are most of them), at a
# fraction of the time, and element summaries write tens of thousands of them per build.
_PAYLOAD_COMPRESSION = 1
# A payload is a small JSON object whose key names cost about as much after compression as its values, so each
# stream starts from these spellings (zlib's preset dictionary): merged elements take a fifth less space for a little
# more time to write (docs/benchmarks.md). Spellings the pipeline itself
# writes, never corpus text. A stream names its dictionary's checksum, which zlib checks: another dictionary needs a
# new schema version, and the earlier ones kept for the payloads written with them.
_PAYLOAD_DICTIONARY_V4 = (
    '{"community_id": "comm-", "level": 0, "parent_id": "comm-", "entity_ids": ["ent-", "child_ids": ["comm-'
    '"title": "", "summary": "", "top_entities": [", "content_hash": "", "rating": null, "written_from": ["'
    '{"entities": [["", "relations": [["'
    '"predicate_doc_ids": [["", "predicates": ["", "type": "RELATED_TO", "weight": '
    '{"aliases": [], "canonical": "", "mention_count": 1, "name": "", "entity_id": "ent-'
    '{"chunk_ids": ["chunk-", "chunk-", "description": "", "description_parts": [["", ["'
    '"]]], "doc_ids": ["", "relationship_id": "rel-", "source_id": "ent-", "target_id": "ent-'
).encode()
# Version 6's: the same spellings without spaces, as orjson writes the payloads since then.
_PAYLOAD_DICTIONARY = _PAYLOAD_DICTIONARY_V4.replace(b": ", b":").replace(b", ", b",")
_PAYLOAD_DICTIONARIES = {zlib.adler32(d): d for d in (_PAYLOAD_DICTIONARY_V4, _PAYLOAD_DICTIONARY)}

_INDEXED_POINTS_BY_SHARD = "CREATE INDEX IF NOT EXISTS indexed_points_shard ON indexed_points(collection, shard)"
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS schema_version (   -- one row per migration applied to this index
    version    INTEGER PRIMARY KEY,
    applied_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS documents (
    doc_id TEXT PRIMARY KEY,
    shard INTEGER NOT NULL,
    source TEXT NOT NULL,
    uri TEXT NOT NULL,
    title TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    metadata TEXT NOT NULL,
    text TEXT NOT NULL,
    chunked_key TEXT            -- content hash + chunking config the current chunks were made from
);
CREATE INDEX IF NOT EXISTS documents_shard ON documents(shard);
CREATE TABLE IF NOT EXISTS document_access (   -- groups that may read a restricted document (none: everyone may;
                                               -- WITHDRAWN_GROUP: a deleted one, readable by nobody)
    doc_id TEXT NOT NULL,
    access_group TEXT NOT NULL,
    PRIMARY KEY (doc_id, access_group)
);
CREATE TABLE IF NOT EXISTS chunks (
    chunk_id TEXT PRIMARY KEY,
    doc_id TEXT NOT NULL,
    shard INTEGER NOT NULL,
    position INTEGER NOT NULL,
    text TEXT NOT NULL,
    token_count INTEGER NOT NULL,
    start_char INTEGER NOT NULL,
    end_char INTEGER NOT NULL,
    headings TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_doc ON chunks(doc_id);
CREATE INDEX IF NOT EXISTS chunks_shard ON chunks(shard);
CREATE TABLE IF NOT EXISTS embedding_cache (
    model TEXT NOT NULL,
    text_hash TEXT NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (model, text_hash)
);
CREATE TABLE IF NOT EXISTS indexed_points (    -- what each vector collection holds, so a stage can diff
    collection TEXT NOT NULL,
    point_id TEXT NOT NULL,
    shard INTEGER NOT NULL,
    point_key TEXT NOT NULL,    -- hash of what the point was built from
    PRIMARY KEY (collection, point_id)
) WITHOUT ROWID;
{_INDEXED_POINTS_BY_SHARD};
CREATE TABLE IF NOT EXISTS extractions (
    chunk_id TEXT NOT NULL,
    extractor_key TEXT NOT NULL,
    payload TEXT NOT NULL,
    PRIMARY KEY (chunk_id, extractor_key)
);
CREATE TABLE IF NOT EXISTS elements (          -- merged entities and relationships (element summaries)
    kind TEXT NOT NULL,         -- 'entity' | 'relationship'
    element_id TEXT NOT NULL,
    content_hash TEXT NOT NULL, -- hex digests: SQLite keeps them as their bytes (`_stored_digest`)
    payload TEXT NOT NULL,
    PRIMARY KEY (kind, element_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS element_texts (     -- each text of the elements' description parts once (`_stored_element`)
    text_id INTEGER PRIMARY KEY,               -- `description_text_id`
    refs INTEGER NOT NULL,                     -- the stored elements' parts that name it: at 0 it goes
    text TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS synced (            -- what the graph store holds, by content hash
    kind TEXT NOT NULL,
    element_id TEXT NOT NULL,
    content_hash TEXT NOT NULL, -- as in elements, or UNSYNCED
    PRIMARY KEY (kind, element_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS quarantine (
    stage TEXT NOT NULL,
    item_id TEXT NOT NULL,
    reason TEXT NOT NULL,
    raw TEXT NOT NULL,
    recorded_at REAL NOT NULL,
    PRIMARY KEY (stage, item_id)
);
CREATE TABLE IF NOT EXISTS source_marks (   -- how far an incremental source has been read, per shard
    source TEXT NOT NULL,
    shard INTEGER NOT NULL,
    modified_through TEXT NOT NULL,   -- newest last-modified time (the source's own clock) fully processed
    full_read_at TEXT NOT NULL,       -- when the last full read of this shard happened (our clock)
    PRIMARY KEY (source, shard)
);
CREATE TABLE IF NOT EXISTS seen_sources (          -- every item a source scan saw, readable or not, by content hash
    doc_id TEXT PRIMARY KEY,
    shard INTEGER NOT NULL,
    content_hash TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS merged_extractions (   -- the extraction of each chunk that the stored elements were merged from
    chunk_id TEXT PRIMARY KEY,
    extractor_key TEXT NOT NULL,
    payload_hash TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS stage_marks (          -- what a corpus-wide stage's output was made with, or that it is unfinished
    stage TEXT PRIMARY KEY,
    mark TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS payloads (             -- one JSON document per item of a namespace (below)
    namespace TEXT NOT NULL,
    item_id TEXT NOT NULL,
    content_hash TEXT NOT NULL,                   -- '' where the namespace keeps none
    payload BLOB NOT NULL,
    PRIMARY KEY (namespace, item_id)              -- a rowid table: WITHOUT ROWID suits small rows, not kilobytes
);
"""

# The namespaces of the payloads table: what each artifact is stored as. A new artifact kept as one JSON document per
# id is a name here, written and read with write_payloads / payloads / payload_hashes; no new table or method.
COMMUNITY_PAYLOADS = "community"  # community id -> Community.to_dict()
COMMUNITY_SUMMARY_PAYLOADS = "community_summary"  # community id -> its summary, hashed by what it was written from
SOURCE_EXTRACTION_PAYLOADS = "source_extraction"  # document id -> the extraction its source shipped (eval sets)

# The tables version 5 folded into ``payloads``: (table, namespace, its key column, its hash column or '').
_FOLDED_INTO_PAYLOADS = (
    ("communities", COMMUNITY_PAYLOADS, "community_id", "''"),
    ("community_summaries", COMMUNITY_SUMMARY_PAYLOADS, "community_id", "content_hash"),
    ("source_extractions", SOURCE_EXTRACTION_PAYLOADS, "doc_id", "''"),
)


# The prefix of the ids the pipeline makes for the rows of each kind in ``elements`` and ``synced`` (the graph sync's
# "mentions" are a chunk's) and of each vector collection in ``indexed_points``: since version 8 SQLite keeps such an
# id as the bytes of the hash after its prefix, which the row's kind or collection gives back.
ID_PREFIXES = {"entity": "ent-", "relationship": "rel-", "mentions": "chunk-",
               CHUNKS: "chunk-", ENTITIES: "ent-", COMMUNITIES: "comm-"}


def id_text(kind: str, stored: str | bytes) -> str:
    """An id as ``SQLStateStore._stored_id`` kept it, as its text again (an index of any version)."""
    return stored if isinstance(stored, str) else ID_PREFIXES[kind] + stored.hex()


def point_key_text(stored: str | bytes) -> str:
    """A point key (``vectors.point_key``: two hex digests joined by a colon) as ``SQLStateStore._stored_point_key``
    kept it, as its text again."""
    if isinstance(stored, str):
        return stored
    digits = stored.hex()
    return f"{digits[:len(digits) // 2]}:{digits[len(digits) // 2:]}"


def digest_text(stored: str | bytes) -> str:
    """A digest as ``SQLStateStore._stored_digest`` kept it, as its text again (an index of any version)."""
    return stored if isinstance(stored, str) else stored.hex()


# Version 4's element hashes are the first 128 bits of version 3's: cut in place, they still match what was synced.
SHORTER_ELEMENT_HASHES = "; ".join(f"UPDATE {table} SET content_hash = substr(content_hash, 1, {SHORT_HASH_CHARS})"
                                   for table in ("elements", "synced"))
# Bookkeeping whose rows are little more than their key (WITHOUT ROWID: see SQLiteStateStore.MIGRATIONS).
_KEY_ONLY_TABLES = ("indexed_points", "synced", "merged_extractions")


def fold_into_payloads(payload_type: str) -> str:
    """Version 5's statements: the rows of the communities, community_summaries and source_extractions tables
    become items of their namespaces in ``payloads``, and the tables go. A database created at version 5 runs them
    too (its migrations start from none), so each table is created first if it is not there."""
    statements = []
    for table, namespace, key, digest in _FOLDED_INTO_PAYLOADS:
        digest_column = "" if digest == "''" else f"{digest} TEXT NOT NULL, "
        statements += [
            f"CREATE TABLE IF NOT EXISTS {table} ({key} TEXT PRIMARY KEY, {digest_column}payload {payload_type} NOT NULL)",
            f"INSERT INTO payloads SELECT '{namespace}', {key}, {digest}, payload FROM {table}",
            f"DROP TABLE {table}",
        ]
    return "; ".join(statements)


# What the PostgreSQL schema says instead of SQLite's: its binary type, its double, and no rowid to leave out.
_POSTGRESQL_SPELLING = ((" BLOB ", " BYTEA "), (" REAL ", " DOUBLE PRECISION "), (") WITHOUT ROWID;", ");"),
                        ("text_id INTEGER ", "text_id BIGINT "))  # SQLite's INTEGER has 64 bits, PostgreSQL's 32


def schema(dialect: Literal["sqlite", "postgresql"]) -> str:
    """The idempotent DDL of every table of SCHEMA_VERSION in a database's dialect."""
    if dialect == "sqlite":
        return _SCHEMA
    ddl = _SCHEMA
    for sqlite_spelling, postgresql_spelling in _POSTGRESQL_SPELLING:
        ddl = ddl.replace(sqlite_spelling, postgresql_spelling)
    return ddl


def _table_definition(table: str) -> str:
    """The CREATE TABLE statement of ``table`` in the schema above (its comments hold no semicolon)."""
    return re.search(rf"CREATE TABLE IF NOT EXISTS {table} \([^;]*", _SCHEMA)[0]


def pack_payload(text: str) -> bytes:
    """A JSON payload as stored: compressed (payloads were most of an index's state, as text)."""
    compressor = zlib.compressobj(_PAYLOAD_COMPRESSION, zdict=_PAYLOAD_DICTIONARY)
    return compressor.compress(text.encode()) + compressor.flush()


def unpack_payload(stored: str | bytes | memoryview) -> str:
    """The JSON text of a stored payload. Rows written before schema version 2 hold the JSON itself: as text in
    SQLite (a column accepts either), as its UTF-8 bytes in PostgreSQL after the migration to ``BYTEA``; JSON starts
    with a bracket, which a zlib stream never does. Streams written before version 4 have no preset dictionary, and
    zlib reads them as they are: it asks for the dictionary only when a stream's header says it was made with one,
    and names it there by its checksum (RFC 1950), which picks version 4's or 6's."""
    if isinstance(stored, str):
        return stored
    data = bytes(stored)
    if data[:1] in (b"{", b"["):
        return data.decode()
    decompressor = zlib.decompressobj(zdict=_PAYLOAD_DICTIONARIES.get(int.from_bytes(data[2:6], "big"), b""))
    return (decompressor.decompress(data) + decompressor.flush()).decode()


def _loads(stored: str | bytes | memoryview) -> Any:
    return orjson.loads(unpack_payload(stored))  # a stage reads tens of thousands: twice as fast as json.loads


# A merged element's description parts are sentences of its chunks (the offline extractor's) or a model's words, and
# a sentence that names k entities describes up to k(k-1)/2 co-occurrence relationships: on musique-100 45,823 parts
# held 5,111 distinct texts. Since version 8 a stored payload names each text by its id in ``element_texts``, leaves
# out the description where it is its parts joined (the merge writes it so unless a model summarized), and its own
# id, which its key holds: musique-100's elements took 18.3 MB, and 11.1 MB after with 0.9 MB of texts beside them.
_OWN_ID = {"entity": "entity_id", "relationship": "relationship_id"}


def description_text_id(text: str) -> int:
    """A description text's key in ``element_texts``: 64 bits of its hash, signed, as both databases' integers are
    (two of a million texts share one with odds of about 1 in 3·10^7)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big", signed=True)


def _stored_element(kind: str, element_id: str, payload: Mapping[str, Any]) -> tuple[bytes, list[tuple[int, str]]]:
    """An element's fields (``element_record``) as stored (packed JSON, keys sorted), and the texts it names, with
    their ids. A payload without description parts (not the merge's: an import's, a test's) is stored whole."""
    if "description_parts" not in payload:
        return pack_payload(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS).decode()), []
    data = dict(payload)
    if data.get(_OWN_ID[kind]) == element_id:
        del data[_OWN_ID[kind]]
    texts = [text for text, _ in data["description_parts"]]
    if data.get("description") == "\n".join(texts):
        del data["description"]
    ids = [description_text_id(text) for text in texts]
    data["description_parts"] = [[text_id, docs] for text_id, (_, docs) in zip(ids, data["description_parts"])]
    return pack_payload(orjson.dumps(data, option=orjson.OPT_SORT_KEYS).decode()), list(zip(ids, texts))


def _text_ids(data: dict) -> list[int]:
    """The ids of the texts a stored element names (none in a payload written before version 8, which holds them)."""
    return [text for text, _ in data.get("description_parts", ()) if isinstance(text, int)]


def _element_as_merged(kind: str, element_id: str, data: dict, texts: Mapping[int, str]) -> dict:
    """A stored element's payload as the merge wrote it (``element_payload``), its named texts read from ``texts``."""
    if "description_parts" not in data:
        return data
    data.setdefault(_OWN_ID[kind], element_id)
    parts = [[texts[text] if isinstance(text, int) else text, docs] for text, docs in data["description_parts"]]
    data["description_parts"] = parts
    data.setdefault("description", "\n".join(text for text, _ in parts))
    return data


def payload_digest(stored: str | bytes | memoryview) -> str:
    """A short hash of a payload as stored, to tell whether a row changed without decompressing it."""
    data = stored.encode() if isinstance(stored, str) else bytes(stored)
    return hashlib.blake2b(data, digest_size=8).hexdigest()


class SQLStateStore(abc.ABC):
    """Every read and write of the state in the SQL both databases speak (SQLite's, which the PostgreSQL store
    translates); a subclass opens the connections, runs transactions and says how the index is locked."""

    path: Path
    read_only: bool
    MIGRATIONS: ClassVar[dict[int, str]]  # version -> the statements that bring an index of version - 1 to it
    BEGIN: ClassVar[str]  # the statement that opens a transaction

    @abc.abstractmethod
    def _connection(self) -> Any: ...  # this thread's connection (sqlite3's API: execute, executemany)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        """This thread's connection inside one transaction, committed when the block ends, rolled back if it raises."""
        with self._naming_damage():
            conn = self._connection()
            conn.execute(self.BEGIN)
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    @abc.abstractmethod
    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]: ...

    @abc.abstractmethod
    def exists(self) -> bool: ...

    @abc.abstractmethod
    def whole_build(self) -> ContextManager[None]: ...

    @abc.abstractmethod
    def exclusive(self, name: str) -> ContextManager[None]: ...

    def _naming_damage(self) -> ContextManager[None]:
        """Around a read that streams rows: a store kept in files says which file is damaged (``naming_damage``)."""
        return contextlib.nullcontext()

    def _migrate(self) -> int:
        """Bring the index's tables to SCHEMA_VERSION, recording each step; refuse an index written by a newer
        pipeline. An index from before versioning has every table of version 1, which the DDL above created.
        Returns the version the index had (0: none, a new index)."""
        with self.transaction() as conn:
            current = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()[0]
            if current > SCHEMA_VERSION:
                raise SchemaVersionError(
                    f"{self.path} has state schema version {current}, newer than this pipeline's {SCHEMA_VERSION}: "
                    "upgrade graphrag_pipeline to open it"
                )
            for version in range(current + 1, SCHEMA_VERSION + 1):
                if version in self.MIGRATIONS:
                    for statement in filter(str.strip, self.MIGRATIONS[version].split(";")):
                        conn.execute(statement)
                conn.execute("INSERT INTO schema_version VALUES (?, ?)", (version, time.time()))
        return current

    def schema_version(self) -> int:
        return self.query("SELECT COALESCE(MAX(version), 0) FROM schema_version")[0][0]

    def _stored_digest(self, digest: str) -> Any:
        """A hex digest (an element's content hash) as this database keeps it: as its text here; SQLite keeps the
        bytes where they give the same text back. Read back through ``digest_text`` either way."""
        return digest

    def _stored_id(self, kind: str, identifier: str) -> Any:
        """An id of the rows of ``kind`` (an element kind or a vector collection: ``ID_PREFIXES``) as this database
        keeps it: as its text here; SQLite keeps the pipeline's own as their bytes. Read back through ``id_text``."""
        return identifier

    def _stored_point_key(self, key: str) -> Any:
        """A point key as this database keeps it: as its text here; SQLite keeps one of two equal-length hex digests
        as their bytes. Read back through ``point_key_text``."""
        return key

    def _rows_with_ids(self, sql: str, ids: Iterable[Any], *leading: Any) -> list[tuple]:
        """The rows of ``sql`` for every id of ``ids``: its ``{ids}`` becomes the placeholders of one batch of ids
        at a time (``IN_BATCH``); ``leading`` are the parameters before them."""
        id_list = list(ids)
        rows: list[tuple] = []
        for start in range(0, len(id_list), IN_BATCH):
            batch = id_list[start : start + IN_BATCH]
            rows.extend(self.query(sql.format(ids=",".join("?" * len(batch))), [*leading, *batch]))
        return rows

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
        if self._lock is not None:
            lock, self._lock = self._lock, None
            lock.__exit__(None, None, None)

    def __enter__(self) -> "SQLStateStore":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- documents -------------------------------------------------------------------------------------------

    def document_hashes(self, shards: Iterable[int] | None = None, source: str | None = None) -> dict[str, str]:
        sql, params = "SELECT doc_id, content_hash FROM documents", []
        clauses = []
        if shards is not None:
            shard_list = sorted(set(shards))
            clauses.append(f"shard IN ({','.join('?' * len(shard_list))})")
            params += shard_list
        if source is not None:
            clauses.append("source = ?")
            params.append(source)
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        return dict(self.query(sql, params))

    def upsert_documents(self, documents: Sequence[Document], shard_of: dict[str, int]) -> None:
        rows = [
            (d.doc_id, shard_of[d.doc_id], d.source, d.uri, d.title, d.content_hash, json.dumps(d.metadata, default=str),
             d.text)
            for d in documents
        ]
        with self.transaction() as conn:
            conn.executemany(
                """INSERT INTO documents (doc_id, shard, source, uri, title, content_hash, metadata, text)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT(doc_id) DO UPDATE SET shard=excluded.shard, source=excluded.source, uri=excluded.uri,
                     title=excluded.title, content_hash=excluded.content_hash, metadata=excluded.metadata,
                     text=excluded.text,
                     chunked_key=CASE WHEN documents.content_hash = excluded.content_hash
                                      THEN documents.chunked_key ELSE NULL END""",
                rows,
            )
            conn.executemany("DELETE FROM document_access WHERE doc_id = ?", [(d.doc_id,) for d in documents])
            conn.executemany(
                "INSERT INTO document_access VALUES (?, ?)",
                [(d.doc_id, group) for d in documents for group in sorted(set(access_groups_of(d)))],
            )
            _mark_sources_changed(conn, [f"{d.doc_id}:{d.content_hash}" for d in documents])

    def restricted_documents(self) -> dict[str, frozenset[str]]:
        """doc id -> the groups that may read it, for every document readable only by some groups."""
        grouped: dict[str, set[str]] = {}
        for doc_id, group in self.query("SELECT doc_id, access_group FROM document_access"):
            grouped.setdefault(doc_id, set()).add(group)
        return {doc_id: frozenset(groups) for doc_id, groups in grouped.items()}

    def source_marks(self, source: str, shards: Iterable[int]) -> dict[int, tuple[str, str]]:
        """shard -> (modified_through, full_read_at) for the shards of ``source`` read incrementally before."""
        shard_list = sorted(set(shards))
        rows = self.query(
            f"SELECT shard, modified_through, full_read_at FROM source_marks WHERE source = ? "
            f"AND shard IN ({','.join('?' * len(shard_list))})",
            [source, *shard_list],
        )
        return {shard: (through, full) for shard, through, full in rows}

    def record_source_marks(self, source: str, marks: dict[int, tuple[str, str]]) -> None:
        with self.transaction() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO source_marks VALUES (?, ?, ?, ?)",
                [(source, shard, through, full) for shard, (through, full) in marks.items()],
            )

    def record_seen_sources(self, shards: Iterable[int], hashes: dict[str, str], shard_of: dict[str, int],
                            source: str) -> None:
        """Replace what the last scan of `source` saw in `shards` (quarantined items included), so change detection
        compares against what was looked at, not only against what could be indexed."""
        shard_list = sorted(set(shards))
        with self.transaction() as conn:
            conn.execute(
                f"DELETE FROM seen_sources WHERE doc_id LIKE ? AND shard IN ({','.join('?' * len(shard_list))})",
                [f"{source}:%", *shard_list],
            )
            conn.executemany(
                "INSERT OR REPLACE INTO seen_sources VALUES (?, ?, ?)",
                [(doc_id, shard_of[doc_id], digest) for doc_id, digest in hashes.items()],
            )

    def seen_source_hashes(self) -> dict[str, str]:
        return dict(self.query("SELECT doc_id, content_hash FROM seen_sources"))

    def delete_documents(self, doc_ids: Sequence[str]) -> None:
        """Forget documents and their chunks; downstream stages notice the missing chunks and clean up after them.
        Until they have, what was derived from a deleted document must be hidden from everyone, so its access row
        becomes the withdrawn mark rather than going (a document without one would be readable by all): in the
        same transaction, so no moment shows it, and a crash anywhere after leaves it hidden."""
        with self.transaction() as conn:
            conn.executemany("DELETE FROM chunks WHERE doc_id = ?", [(d,) for d in doc_ids])
            if doc_ids:
                conn.execute("INSERT OR REPLACE INTO stage_marks VALUES (?, ?)", (CHUNKS_REMOVED_MARK, "1"))
            conn.executemany("DELETE FROM documents WHERE doc_id = ?", [(d,) for d in doc_ids])
            conn.executemany("DELETE FROM payloads WHERE namespace = ? AND item_id = ?",
                             [(SOURCE_EXTRACTION_PAYLOADS, d) for d in doc_ids])
            conn.executemany("DELETE FROM document_access WHERE doc_id = ?", [(d,) for d in doc_ids])
            conn.executemany("INSERT INTO document_access VALUES (?, ?)", [(d, WITHDRAWN_GROUP) for d in doc_ids])
            _mark_sources_changed(conn, [f"{d}:deleted" for d in doc_ids])

    def withdrawn_documents(self) -> set[str]:
        """The deleted documents still marked withdrawn."""
        return {doc_id for (doc_id,) in self.query(
            "SELECT doc_id FROM document_access WHERE access_group = ?", (WITHDRAWN_GROUP,))}

    def forget_withdrawn(self, doc_ids: Iterable[str]) -> int:
        """Drop the withdrawn marks of these deleted documents, for which nothing derived is left in the index (the
        caller checked); returns how many went. A document that came back has its own access rows already."""
        with self.transaction() as conn:
            return sum(conn.execute(
                "DELETE FROM document_access WHERE access_group = ? AND doc_id = ? "
                "AND doc_id NOT IN (SELECT doc_id FROM documents)", (WITHDRAWN_GROUP, doc_id)).rowcount
                for doc_id in doc_ids)

    def documents(self, shards: Iterable[int] | None = None, doc_ids: Iterable[str] | None = None, *,
                  with_text: bool = True) -> list[Document]:
        text = "text" if with_text else "''"
        sql = f"SELECT doc_id, source, uri, title, {text}, content_hash, metadata FROM documents"
        params: list[Any] = []
        if shards is not None:
            shard_list = sorted(set(shards))
            sql += f" WHERE shard IN ({','.join('?' * len(shard_list))})"
            params = shard_list
        elif doc_ids is not None:
            id_list = list(doc_ids)
            if not id_list:
                return []
            sql += f" WHERE doc_id IN ({','.join('?' * len(id_list))})"
            params = id_list
        rows = self.query(sql + " ORDER BY doc_id", params)
        return [Document(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6])) for r in rows]

    def documents_to_chunk(self, shards: Iterable[int], chunking_key: str) -> list[Document]:
        shard_list = sorted(set(shards))
        rows = self.query(
            f"""SELECT doc_id, source, uri, title, text, content_hash, metadata FROM documents
                WHERE shard IN ({','.join('?' * len(shard_list))})
                  AND (chunked_key IS NULL OR chunked_key != content_hash || ':' || ?) ORDER BY doc_id""",
            [*shard_list, chunking_key],
        )
        return [Document(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6])) for r in rows]

    def document_titles(self, doc_ids: Iterable[str]) -> dict[str, str]:
        return dict(self._rows_with_ids("SELECT doc_id, title FROM documents WHERE doc_id IN ({ids})", set(doc_ids)))

    def document_count(self) -> int:
        return self.query("SELECT COUNT(*) FROM documents")[0][0]

    # --- chunks ------------------------------------------------------------------------------------------------

    def replace_chunks(self, chunked: Sequence[tuple[Document, int, Sequence[Chunk]]], chunking_key: str) -> None:
        """Swap each (document, shard, chunks)'s chunks and mark the documents chunked at their current content, all
        in one transaction (one per document was a third of the chunks stage)."""
        with self.transaction() as conn:
            # A statement per document: a statement's rowcount is the same in both databases, and executemany's not.
            if sum([conn.execute("DELETE FROM chunks WHERE doc_id = ?", (doc.doc_id,)).rowcount
                    for doc, _, _ in chunked]):
                conn.execute("INSERT OR REPLACE INTO stage_marks VALUES (?, ?)", (CHUNKS_REMOVED_MARK, "1"))
            conn.executemany(
                "INSERT OR REPLACE INTO chunks VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (c.chunk_id, c.doc_id, shard, c.position, c.text, c.token_count, c.start_char, c.end_char,
                     json.dumps(list(c.headings)))
                    for _, shard, chunks in chunked for c in chunks
                ],
            )
            conn.executemany("UPDATE documents SET chunked_key = content_hash || ':' || ? WHERE doc_id = ?",
                             [(chunking_key, doc.doc_id) for doc, _, _ in chunked])

    def chunks(self, shards: Iterable[int] | None = None, chunk_ids: Iterable[str] | None = None) -> list[Chunk]:
        sql = "SELECT chunk_id, doc_id, position, text, token_count, start_char, end_char, headings FROM chunks"
        params: list[Any] = []
        if shards is not None:
            shard_list = sorted(set(shards))
            sql += f" WHERE shard IN ({','.join('?' * len(shard_list))})"
            params = shard_list
        elif chunk_ids is not None:
            return self._chunks_by_id(list(chunk_ids))
        rows = self.query(sql + " ORDER BY doc_id, position", params)
        return [_chunk_from_row(r) for r in rows]

    def _chunks_by_id(self, chunk_ids: list[str]) -> list[Chunk]:
        return [_chunk_from_row(r) for r in self._rows_with_ids(
            "SELECT chunk_id, doc_id, position, text, token_count, start_char, end_char, headings FROM chunks "
            "WHERE chunk_id IN ({ids})", chunk_ids)]

    def chunk_ids(self) -> list[str]:
        return [row[0] for row in self.query("SELECT chunk_id FROM chunks")]

    def chunk_count(self) -> int:
        return self.query("SELECT COUNT(*) FROM chunks")[0][0]

    def shard_holdings(self, shards: Iterable[int]) -> dict[int, dict[str, int]]:
        """Per shard, how many documents and chunks the index holds in it."""
        shard_list = sorted(set(shards))
        held = {shard: {"documents": 0, "chunks": 0} for shard in shard_list}
        marks = ",".join("?" * len(shard_list))
        for table in ("documents", "chunks"):
            for shard, count in self.query(f"SELECT shard, COUNT(*) FROM {table} WHERE shard IN ({marks}) GROUP BY shard",
                                           shard_list):
                held[shard][table] = count
        return held

    # --- embeddings -----------------------------------------------------------------------------------------------

    def cached_embeddings(self, model: str, text_hashes: Sequence[str]) -> dict[str, np.ndarray]:
        rows = self._rows_with_ids("SELECT text_hash, vector FROM embedding_cache WHERE model = ? AND text_hash IN ({ids})",
                                   dict.fromkeys(text_hashes), model)
        return {h: np.frombuffer(v, dtype=np.float32) for h, v in rows}

    def forget_embeddings(self, model: str, keep: Collection[str]) -> int:
        """Drop the cached vectors of ``model`` whose text hashes are not in ``keep``, and every other model's;
        returns how many went."""
        gone = [(m, h) for m, h in self.query("SELECT model, text_hash FROM embedding_cache")
                if m != model or h not in keep]
        with self.transaction() as conn:
            conn.executemany("DELETE FROM embedding_cache WHERE model = ? AND text_hash = ?", gone)
        return len(gone)

    def cached_embedding_dimension(self, model: str) -> int | None:
        """Length of the vectors ``model`` made before, so a remote model need not be asked again."""
        rows = self.query("SELECT length(vector) FROM embedding_cache WHERE model = ? LIMIT 1", [model])
        return rows[0][0] // np.dtype(np.float32).itemsize if rows else None

    def cache_embeddings(self, model: str, vectors: dict[str, np.ndarray]) -> None:
        with self.transaction() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO embedding_cache VALUES (?, ?, ?)",
                [(model, h, np.asarray(v, dtype=np.float32).tobytes()) for h, v in vectors.items()],
            )

    def indexed_points(self, collection: str, shards: Iterable[int] | None = None) -> dict[str, str]:
        sql, params = "SELECT point_id, point_key FROM indexed_points WHERE collection = ?", [collection]
        if shards is not None:
            shard_list = sorted(set(shards))
            sql += f" AND shard IN ({','.join('?' * len(shard_list))})"
            params += shard_list
        return {id_text(collection, point): point_key_text(key) for point, key in self.query(sql, params)}

    def indexed_point_shards(self, collection: str) -> dict[str, int]:
        return {id_text(collection, point): shard for point, shard in
                self.query("SELECT point_id, shard FROM indexed_points WHERE collection = ?", [collection])}

    def indexed_point_count(self, collection: str) -> int:
        return self.query("SELECT COUNT(*) FROM indexed_points WHERE collection = ?", [collection])[0][0]

    def record_indexed_points(self, collection: str, points: dict[str, tuple[int, str]], removed: Sequence[str]) -> None:
        with self.transaction() as conn:
            conn.executemany("DELETE FROM indexed_points WHERE collection = ? AND point_id = ?",
                             [(collection, self._stored_id(collection, p)) for p in removed])
            conn.executemany(
                "INSERT OR REPLACE INTO indexed_points VALUES (?, ?, ?, ?)",
                [(collection, self._stored_id(collection, pid), shard, self._stored_point_key(key))
                 for pid, (shard, key) in points.items()],
            )

    # --- extractions ------------------------------------------------------------------------------------------------

    def extractions(self, chunk_ids: Sequence[str], extractor_key: str) -> dict[str, ChunkExtraction]:
        rows = self._rows_with_ids("SELECT chunk_id, payload FROM extractions WHERE extractor_key = ? AND chunk_id IN ({ids})",
                                   chunk_ids, extractor_key)
        return {cid: extraction_from_json(cid, payload) for cid, payload in rows}

    def store_extractions(self, extractor_key: str, extractions: Sequence[ChunkExtraction]) -> None:
        with self.transaction() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO extractions VALUES (?, ?, ?)",
                [(e.chunk_id, extractor_key, pack_payload(extraction_to_json(e))) for e in extractions],
            )

    def live_extractions(
        self, extractor_key: str, family: str | None = None, chunk_ids: Iterable[str] | None = None
    ) -> Iterator[tuple[str, str, ChunkExtraction]]:
        """(doc_id, chunk_id, extraction) for every current chunk (or those of ``chunk_ids``), streamed in document
        order: the merge stage reads all of them. A chunk without an extraction under ``extractor_key`` is read from
        another key of its ``family`` (``family`` and ``family+…``: the same extractor with other known names), so no
        chunk drops out while it waits to be extracted again."""
        family = family or extractor_key
        with self._naming_damage():
            for doc_id, chunk_id, _, payload in self._live_extraction_rows(extractor_key, family, chunk_ids):
                yield doc_id, chunk_id, extraction_from_json(chunk_id, payload)

    def live_extraction_hashes(self, extractor_key: str, family: str | None = None) -> dict[str, tuple[str, str]]:
        """chunk id -> (extractor key, payload digest) of the extraction `live_extractions` reads for it."""
        family = family or extractor_key
        with self._naming_damage():
            return {chunk_id: (key, payload_digest(payload))
                    for _, chunk_id, key, payload in self._live_extraction_rows(extractor_key, family, None)}

    _LIVE_EXTRACTIONS = """SELECT c.doc_id, c.chunk_id, e.extractor_key, e.payload FROM chunks c {scope}
        JOIN extractions e ON e.chunk_id = c.chunk_id AND (e.extractor_key = ? OR e.extractor_key = ? OR e.extractor_key LIKE ?)
        ORDER BY c.doc_id, c.position, e.extractor_key = ? DESC, e.extractor_key"""

    def _live_extraction_rows(
        self, extractor_key: str, family: str, chunk_ids: Iterable[str] | None
    ) -> Iterator[tuple[str, str, str, Any]]:
        """(doc_id, chunk_id, extractor key, payload), one row per chunk, the preferred key first, in the database's
        order, so that a read of some chunks keeps the order they have in a read of all (PostgreSQL orders the
        documents' ids by its collation, not by code point)."""
        conn = self._connection()
        scope = ""
        if chunk_ids is not None:
            conn.execute("CREATE TEMP TABLE IF NOT EXISTS chunk_scope (chunk_id TEXT PRIMARY KEY)")
            conn.execute("DELETE FROM chunk_scope")
            conn.executemany("INSERT INTO chunk_scope VALUES (?)", [(c,) for c in set(chunk_ids)])
            scope = "JOIN chunk_scope s ON s.chunk_id = c.chunk_id"
        rows = conn.execute(self._LIVE_EXTRACTIONS.format(scope=scope), (extractor_key, family, f"{family}+%", extractor_key))
        previous = None
        for row in rows:
            if row[1] != previous:
                yield row
            previous = row[1]

    def stale_extraction_chunks(self, extractor_key: str, family: str) -> list[str]:
        """Chunks extracted under another key of ``family`` but not under ``extractor_key``."""
        rows = self.query(
            """SELECT DISTINCT e.chunk_id FROM extractions e JOIN chunks c ON c.chunk_id = e.chunk_id
               WHERE (e.extractor_key = ? OR e.extractor_key LIKE ?) AND e.extractor_key != ?
                 AND NOT EXISTS (SELECT 1 FROM extractions x WHERE x.chunk_id = e.chunk_id AND x.extractor_key = ?)
               ORDER BY e.chunk_id""",
            (family, f"{family}+%", extractor_key, extractor_key),
        )
        return [chunk_id for (chunk_id,) in rows]

    def prune_extractions(self, extractor_key: str | None = None, family: str | None = None) -> int:
        """Drop cached extractions of chunks that no longer exist (after edits and deletes), and those of a
        ``family`` that an extraction under ``extractor_key`` has replaced."""
        with self.transaction() as conn:
            cursor = conn.execute("DELETE FROM extractions WHERE chunk_id NOT IN (SELECT chunk_id FROM chunks)")
            removed = cursor.rowcount
            if extractor_key and family:
                cursor = conn.execute(
                    """DELETE FROM extractions WHERE (extractor_key = ? OR extractor_key LIKE ?) AND extractor_key != ?
                       AND chunk_id IN (SELECT chunk_id FROM extractions WHERE extractor_key = ?)""",
                    (family, f"{family}+%", extractor_key, extractor_key),
                )
                removed += cursor.rowcount
            return removed

    def extraction_payloads(self, keyed: dict[str, str]) -> dict[str, tuple[str, Any]]:
        """chunk id -> (digest, payload) of the stored extraction under the key ``keyed`` gives for the chunk."""
        rows = self._rows_with_ids("SELECT chunk_id, extractor_key, payload FROM extractions WHERE chunk_id IN ({ids})",
                                   list(keyed))
        return {cid: (payload_digest(payload), payload) for cid, key, payload in rows if keyed[cid] == key}

    # --- what the stored elements were merged from -------------------------------------------------------------

    def merged_extractions(self) -> dict[str, tuple[str, str]]:
        """chunk id -> (extractor key, payload digest) of each extraction the stored elements were merged from."""
        return {cid: (key, digest) for cid, key, digest in
                self.query("SELECT chunk_id, extractor_key, payload_hash FROM merged_extractions")}

    def behind_sources(self) -> bool:
        """Whether source changes were recorded that the last finished build had not taken in: a build is writing
        them, or stopped before its end."""
        marks = dict(self.query("SELECT stage, mark FROM stage_marks WHERE stage IN (?, ?)",
                                (SOURCES_CHANGED_MARK, CAUGHT_UP_MARK)))
        return marks.get(SOURCES_CHANGED_MARK) != marks.get(CAUGHT_UP_MARK)

    def stage_mark(self, stage: str) -> str | None:
        rows = self.query("SELECT mark FROM stage_marks WHERE stage = ?", (stage,))
        return rows[0][0] if rows else None

    def record_stage_mark(self, stage: str, mark: str | None) -> None:
        with self.transaction() as conn:
            conn.execute("DELETE FROM stage_marks WHERE stage = ?", (stage,))
            if mark is not None:
                conn.execute("INSERT INTO stage_marks VALUES (?, ?)", (stage, mark))

    def record_merge(
        self,
        elements: dict[str, tuple[dict[str, tuple[str, dict]], Sequence[str]]],
        merged: dict[str, tuple[str, str]],
        unmerged: Sequence[str],
        mark: str,
        *,
        every_extraction: bool,
    ) -> None:
        """One transaction for a merge's output and what it was made from, so a run killed half-way leaves both as
        they were: ``elements`` kind -> (upserts: id -> (hash, fields as ``element_record`` gives them), removed
        ids); ``merged`` chunk id -> (extractor key, payload digest) of the extractions now merged (all of them when
        ``every_extraction``), ``unmerged`` the chunks no longer merged; ``mark`` what the merge was made with
        (`stage_mark`)."""
        with self.transaction() as conn:
            for kind, (upserts, removed) in elements.items():
                self._write_elements(conn, kind, upserts, removed)
            if every_extraction:
                conn.execute("DELETE FROM merged_extractions")
            conn.executemany("DELETE FROM merged_extractions WHERE chunk_id = ?", [(c,) for c in unmerged])
            conn.executemany("INSERT OR REPLACE INTO merged_extractions VALUES (?, ?, ?)",
                             [(cid, key, digest) for cid, (key, digest) in merged.items()])
            conn.execute("INSERT OR REPLACE INTO stage_marks VALUES (?, ?)", ("element_summaries", mark))

    # --- merged elements, graph sync, communities ---------------------------------------------------------------

    def element_hashes(self, kind: str, table: str = "elements", element_ids: Iterable[str] | None = None) -> dict[str, str]:
        if table not in ("elements", "synced"):
            raise ValueError(table)
        if element_ids is None:
            rows = self.query(f"SELECT element_id, content_hash FROM {table} WHERE kind = ?", (kind,))
        else:
            rows = self._rows_with_ids(
                f"SELECT element_id, content_hash FROM {table} WHERE kind = ? AND element_id IN ({{ids}})",
                [self._stored_id(kind, e) for e in element_ids], kind)
        return {id_text(kind, stored): digest_text(digest) for stored, digest in rows}

    def replace_elements(self, kind: str, upserts: dict[str, tuple[str, str]], removed: Sequence[str]) -> None:
        """upserts: element id -> (content hash, JSON payload). Elements written other than by a merge (an import)
        are not what `merged_extractions` says they were merged from: the next merge starts over."""
        with self.transaction() as conn:
            conn.execute("DELETE FROM stage_marks WHERE stage = ?", ("element_summaries",))
            self._write_elements(conn, kind, {eid: (digest, orjson.loads(payload))
                                              for eid, (digest, payload) in upserts.items()}, removed)

    def _write_elements(
        self, conn: Any, kind: str, upserts: dict[str, tuple[str, dict]], removed: Sequence[str]
    ) -> None:
        """Called inside a transaction (this thread's connection): the elements and the counts of the texts they name
        change together."""
        refs: Counter[int] = Counter()
        # A first build's elements replace none: no need to look up tens of thousands of ids to find so.
        if conn.execute("SELECT 1 FROM elements WHERE kind = ? LIMIT 1", (kind,)).fetchone() is not None:
            for _, data in self._stored_elements(kind, [*removed, *upserts]):
                refs.subtract(_text_ids(data))
        rows, texts = [], {}
        for eid, (digest, payload) in upserts.items():
            stored, named = _stored_element(kind, eid, payload)
            rows.append((kind, self._stored_id(kind, eid), self._stored_digest(digest), stored))
            refs.update(text_id for text_id, _ in named)
            texts.update(named)
        conn.executemany("DELETE FROM elements WHERE kind = ? AND element_id = ?",
                         [(kind, self._stored_id(kind, e)) for e in removed])
        conn.executemany("INSERT OR REPLACE INTO elements VALUES (?, ?, ?, ?)", rows)
        conn.executemany("INSERT INTO element_texts VALUES (?, ?, ?) "
                         "ON CONFLICT (text_id) DO UPDATE SET refs = element_texts.refs + excluded.refs",
                         [(text_id, n, texts[text_id]) for text_id, n in refs.items() if n > 0])
        dropped = [(n, text_id) for text_id, n in refs.items() if n < 0]
        conn.executemany("UPDATE element_texts SET refs = refs + ? WHERE text_id = ?", dropped)
        conn.executemany("DELETE FROM element_texts WHERE text_id = ? AND refs <= 0", [(t,) for _, t in dropped])

    def element_count(self, kind: str) -> int:
        return self.query("SELECT COUNT(*) FROM elements WHERE kind = ?", (kind,))[0][0]

    def element_payloads(self, kind: str, element_ids: Iterable[str] | None = None) -> dict[str, dict]:
        stored = self._stored_elements(kind, element_ids)
        named = {text_id for _, data in stored for text_id in _text_ids(data)}
        texts = dict(self._rows_with_ids("SELECT text_id, text FROM element_texts WHERE text_id IN ({ids})", named))
        return {eid: _element_as_merged(kind, eid, data, texts) for eid, data in stored}

    def _stored_elements(self, kind: str, element_ids: Iterable[str] | None) -> list[tuple[str, dict]]:
        """(id, payload as stored, unpacked) of the elements of ``kind`` (all, or those of ``element_ids`` there are)."""
        if element_ids is None:
            rows = self.query("SELECT element_id, payload FROM elements WHERE kind = ?", (kind,))
        else:
            rows = self._rows_with_ids("SELECT element_id, payload FROM elements WHERE kind = ? AND element_id IN ({ids})",
                                       [self._stored_id(kind, e) for e in element_ids], kind)
        return [(id_text(kind, stored), _loads(p)) for stored, p in rows]

    def record_synced(self, kind: str, hashes: dict[str, str], removed: Sequence[str]) -> None:
        with self.transaction() as conn:
            conn.executemany("DELETE FROM synced WHERE kind = ? AND element_id = ?",
                             [(kind, self._stored_id(kind, e)) for e in removed])
            conn.executemany("INSERT OR REPLACE INTO synced VALUES (?, ?, ?)",
                             [(kind, self._stored_id(kind, e), self._stored_digest(h)) for e, h in hashes.items()])

    # --- payloads: one JSON document per item of a namespace ------------------------------------------------------

    def write_payloads(self, namespace: str, upserts: Mapping[str, tuple[str, str]], removed: Iterable[str] = (),
                       *, replace_all: bool = False) -> None:
        """``upserts``: item id -> (content hash, JSON text); ``removed``: item ids to delete; ``replace_all``: the
        namespace holds exactly ``upserts`` afterwards. One transaction."""
        with self.transaction() as conn:
            if replace_all:
                conn.execute("DELETE FROM payloads WHERE namespace = ?", (namespace,))
            conn.executemany("DELETE FROM payloads WHERE namespace = ? AND item_id = ?",
                             [(namespace, item) for item in removed])
            conn.executemany("INSERT OR REPLACE INTO payloads VALUES (?, ?, ?, ?)",
                             [(namespace, item, digest, pack_payload(text)) for item, (digest, text) in upserts.items()])

    def payloads(self, namespace: str, item_ids: Iterable[str] | None = None) -> dict[str, Any]:
        """Item id -> its JSON document, of every item of ``namespace`` or (only the rows asked for: a global question
        reads a few summaries, and an index's are many and long) of ``item_ids``."""
        if item_ids is None:
            rows = self.query("SELECT item_id, payload FROM payloads WHERE namespace = ? ORDER BY item_id",
                              (namespace,))
        else:
            rows = self._rows_with_ids("SELECT item_id, payload FROM payloads WHERE namespace = ? AND item_id IN ({ids})",
                                       set(item_ids), namespace)
        return {item: _loads(payload) for item, payload in rows}

    def payload_hashes(self, namespace: str) -> dict[str, str]:
        return dict(self.query("SELECT item_id, content_hash FROM payloads WHERE namespace = ?", (namespace,)))

    # --- quarantine ---------------------------------------------------------------------------------------------

    def quarantine(self, records: Sequence[Quarantined]) -> None:
        now = time.time()
        with self.transaction() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO quarantine VALUES (?, ?, ?, ?, ?)",
                [(q.stage, q.item_id, q.reason, q.raw[:100_000], now) for q in records],
            )

    def clear_quarantine(self, stage: str, item_ids: Sequence[str]) -> None:
        with self.transaction() as conn:
            conn.executemany("DELETE FROM quarantine WHERE stage = ? AND item_id = ?", [(stage, i) for i in item_ids])

    def quarantined(self, stage: str | None = None) -> list[Quarantined]:
        sql, params = "SELECT stage, item_id, reason, raw FROM quarantine", []
        if stage is not None:
            sql, params = sql + " WHERE stage = ?", [stage]
        return [Quarantined(*row) for row in self.query(sql + " ORDER BY stage, item_id", params)]


class SchemaVersionError(GraphRAGError, RuntimeError):
    """The index's state was written by a newer pipeline whose tables this one does not know."""

    kind = "invalid"


class IndexBusyError(GraphRAGError, RuntimeError):
    kind = "busy"
    pass


# Stage marks: a digest of the latest source changes recorded (raw_documents), and the digest the last finished build
# had taken in when it started its last stage. While they differ, answers may miss or still show those changes.
SOURCES_CHANGED_MARK = "index:sources_changed"
CAUGHT_UP_MARK = "index:caught_up"

# A stage mark: chunks were deleted or replaced since the embedding cache was last cut back to the chunks' texts.
CHUNKS_REMOVED_MARK = "embedding_cache:chunks_removed"

# The access group of a deleted document whose derived rows may still exist: no caller holds it (query.access refuses
# it whatever groups a caller claims). Not NUL-prefixed: PostgreSQL text cannot hold NUL.
WITHDRAWN_GROUP = "graphrag:withdrawn"


def _mark_sources_changed(conn: Any, changes: Sequence[str]) -> None:
    """Advance the sources mark in the transaction that records ``changes``: a digest of the mark before and of
    them, so builds that record the same changes reach the same mark."""
    row = conn.execute("SELECT mark FROM stage_marks WHERE stage = ?", (SOURCES_CHANGED_MARK,)).fetchone()
    digest = hashlib.sha256("\n".join([row[0] if row else "", *changes]).encode()).hexdigest()[:SHORT_HASH_CHARS]
    conn.execute("INSERT OR REPLACE INTO stage_marks VALUES (?, ?)", (SOURCES_CHANGED_MARK, digest))


def access_groups_of(document: Document) -> list[str]:
    """The groups a document's source says may read it (metadata ``access_groups``; none: everyone)."""
    groups = document.metadata.get("access_groups") or []
    return [str(group) for group in groups] if isinstance(groups, (list, tuple)) else [str(groups)]


def _chunk_from_row(row: tuple) -> Chunk:
    return Chunk(row[0], row[1], row[2], row[3], row[4], row[5], row[6], tuple(json.loads(row[7])))


def payload_json(value: Any) -> str:
    """A payload's JSON as the pipeline writes it (the spelling ``_PAYLOAD_DICTIONARY`` holds)."""
    return orjson.dumps(value).decode()


def extraction_to_json(extraction: ChunkExtraction) -> str:
    return payload_json(
        {
            "entities": [[e.name, e.type, e.description, e.spotter] for e in extraction.entities],
            "relations": [[r.source, r.target, r.type, r.predicate, r.description, r.weight] for r in extraction.relations],
        }
    )


def extraction_from_json(chunk_id: str, payload: str | bytes | memoryview) -> ChunkExtraction:
    """The extraction of a stored payload (or of its JSON text)."""
    data = _loads(payload)
    return ChunkExtraction(
        chunk_id=chunk_id,
        entities=tuple(EntityMention(n, t, d, chunk_id, s) for n, t, d, s in data["entities"]),
        relations=tuple(RelationMention(s, t, ty, p, d, w, chunk_id) for s, t, ty, p, d, w in data["relations"]),
    )
