"""The state store in PostgreSQL: the same tables and statements as the SQLite store (``sql.py``), on a server.

The methods of ``SQLStateStore`` are inherited unchanged; their statements reach the server through
`_PostgresConnection`, which translates the few SQLite forms they use (`?` placeholders, `INSERT OR REPLACE`, an
empty `IN ()`), so the two implementations cannot drift apart in what they store. The state contract suite runs
against both.
Opening touches no local file and takes no build lock: concurrent Dagster runs on several hosts share one
index, per-document stages on their own shards, corpus-wide stages one at a time (`exclusive`).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import threading
from pathlib import Path
from typing import Any, Iterator, Sequence

import psycopg2

from graphrag_pipeline.lib.stores.state.sql import (
    PAYLOAD_TABLES,
    SCHEMA_VERSION,
    SHORTER_ELEMENT_HASHES,
    IndexBusyError,
    SQLStateStore,
    fold_into_payloads,
    schema,
)

# Per table written with INSERT OR REPLACE: its primary key, then its other columns, in the schema's order.
_UPSERT_COLUMNS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "chunks": (("chunk_id",), ("doc_id", "shard", "position", "text", "token_count", "start_char", "end_char",
                               "headings")),
    "embedding_cache": (("model", "text_hash"), ("vector",)),
    "indexed_points": (("collection", "point_id"), ("shard", "point_key")),
    "extractions": (("chunk_id", "extractor_key"), ("payload",)),
    "elements": (("kind", "element_id"), ("content_hash", "payload")),
    "synced": (("kind", "element_id"), ("content_hash",)),
    "quarantine": (("stage", "item_id"), ("reason", "raw", "recorded_at")),
    "source_marks": (("source", "shard"), ("modified_through", "full_read_at")),
    "seen_sources": (("doc_id",), ("shard", "content_hash")),
    "payloads": (("namespace", "item_id"), ("content_hash", "payload")),
    "merged_extractions": (("chunk_id",), ("extractor_key", "payload_hash")),
    "stage_marks": (("stage",), ("mark",)),
}
_INSERT_OR_REPLACE = re.compile(r"INSERT OR REPLACE INTO (\w+) VALUES")


def to_postgres(sql: str) -> str:
    """A statement of the SQLite store in PostgreSQL's dialect."""
    match = _INSERT_OR_REPLACE.search(sql)
    if match:
        key, others = _UPSERT_COLUMNS[match.group(1)]
        updates = ", ".join(f"{column} = excluded.{column}" for column in others)
        sql = sql.replace("INSERT OR REPLACE INTO", "INSERT INTO") + f" ON CONFLICT ({', '.join(key)}) DO UPDATE SET {updates}"
    return sql.replace("%", "%%").replace("?", "%s").replace("IN ()", "IN (NULL)")


WHOLE_BUILD_LOCK = "graphrag whole build"


def advisory_key(name: str) -> int:
    """The 64-bit key of a named advisory lock."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


class _PostgresConnection:
    """The part of sqlite3.Connection the methods of ``SQLStateStore`` use, on a psycopg2 connection."""

    def __init__(self, connection: Any):
        self.connection = connection

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        cursor = self.connection.cursor()
        cursor.execute(to_postgres(sql), tuple(params))
        return cursor

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> Any:
        cursor = self.connection.cursor()
        cursor.executemany(to_postgres(sql), [tuple(row) for row in rows])
        return cursor

    def close(self) -> None:
        self.connection.close()


class PostgresStateStore(SQLStateStore):
    """The state of one index in a PostgreSQL database (one connection per thread)."""

    BEGIN = "BEGIN"

    # Version 2 stores payloads compressed, which a TEXT column refuses: they become BYTEA, the JSON already there
    # as its UTF-8 bytes (unpack_payload reads both). Version 4 changes how payloads are compressed, and of
    # the tables here only the length of elements' hashes. Version 5 folds three payload tables into one. Version 6
    # changes only how payloads are written, and version 7 only how SQLite keeps hashes (SQLiteStateStore.MIGRATIONS):
    # a PostgreSQL TEXT column keeps text. Version 8's table of description texts is created by the schema.
    MIGRATIONS = {2: "; ".join(f"ALTER TABLE IF EXISTS {table} ALTER COLUMN payload TYPE BYTEA "
                               "USING convert_to(payload, 'UTF8')" for table in PAYLOAD_TABLES),
                  3: "", 4: SHORTER_ELEMENT_HASHES, 5: fold_into_payloads("BYTEA"), 6: "", 7: "", 8: ""}

    def __init__(self, url: str, *, read_only: bool = False):
        self.url = url
        self.path = Path(re.sub(r"//[^@/]*@", "//", url))  # for messages only: the URL without its credentials
        self.read_only = read_only
        self._local = threading.local()
        self._lock = None
        if not read_only:
            try:
                # The DDL is idempotent but not free: CREATE INDEX IF NOT EXISTS locks its table before it looks,
                # so it waits on (and can deadlock with) other runs' open transactions. A current index needs none.
                if not self._schema_is_current():
                    # CREATE TABLE IF NOT EXISTS is not safe against a concurrent session creating the same table
                    # (both pass the check, one fails on pg_type): the writers of a first build create them in turn.
                    with self.exclusive("state schema"):
                        self._connection().execute(schema("postgresql"))
                        self._migrate()
            except BaseException:
                self.close()
                raise

    def _schema_is_current(self) -> bool:
        """Whether every table and migration of SCHEMA_VERSION is here: the DDL and the migrations each commit
        whole, and the last migration's row is written with it."""
        if not self.query("SELECT to_regclass('schema_version') IS NOT NULL")[0][0]:
            return False
        return self.schema_version() == SCHEMA_VERSION

    def _connection(self) -> _PostgresConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            raw = psycopg2.connect(self.url)
            raw.autocommit = True  # explicit transactions below, as in the SQLite store
            if self.read_only:
                raw.set_session(readonly=True, autocommit=True)
            conn = self._local.conn = _PostgresConnection(raw)
        return conn

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        return self._connection().execute(sql, params).fetchall()

    @contextlib.contextmanager
    def exclusive(self, name: str) -> Iterator[None]:
        """A PostgreSQL advisory lock named ``name`` in this database, so the processes of concurrent Dagster runs
        (on any host) take turns. Held on a connection of its own: the server releases it when that session ends,
        also when its process is killed, and waiting for it keeps no transaction open."""
        holder = psycopg2.connect(self.url)
        try:
            holder.autocommit = True
            with holder.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_lock(%s)", (advisory_key(name),))
            yield
        finally:
            holder.close()

    @contextlib.contextmanager
    def whole_build(self) -> Iterator[None]:
        """Held by a whole build (`graphrag-pipeline build`, `import`) for as long as it runs: a second one fails at
        once with ``IndexBusyError`` instead of interleaving with it, on any host. Dagster's shard runs do not take it
        (they are meant to run side by side; their corpus-wide stages take turns through ``exclusive``)."""
        holder = psycopg2.connect(self.url)
        try:
            holder.autocommit = True
            with holder.cursor() as cursor:
                cursor.execute("SELECT pg_try_advisory_lock(%s)", (advisory_key(WHOLE_BUILD_LOCK),))
                if not cursor.fetchone()[0]:
                    raise IndexBusyError(
                        "another build is writing the index (it holds the PostgreSQL advisory lock "
                        f"{WHOLE_BUILD_LOCK!r}); wait for it to finish")
            yield
        finally:
            holder.close()

    def exists(self) -> bool:
        """Whether a build has created the tables in this database (the last table of the schema, so a first
        build killed while creating them counts as none)."""
        return self.query("SELECT to_regclass('payloads') IS NOT NULL")[0][0]
