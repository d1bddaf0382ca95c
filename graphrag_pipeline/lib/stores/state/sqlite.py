"""The state in one SQLite file beside the index (the embedded tier): WAL mode lets Dagster steps in several processes
and a reader in an agent process use it at once, and a writer holds the index's build lock from open to close."""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

from graphrag_pipeline.lib.core.ids import hashed_id_bytes, hex_bytes
from graphrag_pipeline.lib.stores.sqlite_files import DamagedStoreError, naming_damage
from graphrag_pipeline.lib.stores.state.sql import (
    _INDEXED_POINTS_BY_SHARD,
    _KEY_ONLY_TABLES,
    ID_PREFIXES,
    SCHEMA_VERSION,
    SHORTER_ELEMENT_HASHES,
    IndexBusyError,
    SQLStateStore,
    _table_definition,
    fold_into_payloads,
    schema,
)

BUILD_LOCK_FILE = "build.lock"  # beside state.sqlite: held by every writer of the index (see `build_lock`)


def _stored_digest(digest: str | bytes) -> str | bytes:
    """A hex digest as SQLite keeps it (see ``SQLStateStore._stored_digest``); other text (``UNSYNCED``), and a digest
    kept so already (a migration's second pass), as it is."""
    packed = hex_bytes(digest) if isinstance(digest, str) else None
    return digest if packed is None else packed


def _stored_id(kind: str, identifier: str | bytes) -> str | bytes:
    """An id of the rows of ``kind`` as SQLite keeps it (see ``SQLStateStore._stored_id``): one the pipeline made as
    its bytes (``hashed_id_bytes``), any other (an import's, a test's) and one kept so already (a migration's second
    pass) as it is."""
    prefix = ID_PREFIXES.get(kind)
    if prefix and isinstance(identifier, str):
        return hashed_id_bytes(identifier, prefix) or identifier
    return identifier


def _stored_point_key(key: str | bytes) -> str | bytes:
    """A point key as SQLite keeps it (see ``SQLStateStore._stored_point_key``): two hex digests of one length joined
    by a colon as their bytes, any other key (``UNSYNCED``) and one kept so already as it is."""
    first, colon, second = key.partition(":") if isinstance(key, str) else ("", "", "")
    packed = hex_bytes(first + second) if colon and len(first) == len(second) else None
    return packed or key


class SQLiteStateStore(SQLStateStore):
    """Thread-safe access to the state database (one connection per thread).

    A writable store holds the index's build lock (`build_lock`) from open to close, so two builds of one index
    cannot write at once; read-only stores (queries, sensors) take no lock."""

    BEGIN = "BEGIN IMMEDIATE"  # the write lock at once: a transaction that reads first then writes cannot deadlock

    def __init__(self, path: str | Path, *, read_only: bool = False):
        self.path = Path(path)
        self.read_only = read_only
        self._local = threading.local()
        self._lock: contextlib.AbstractContextManager | None = None
        if not read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._lock = build_lock(self.path.parent)
            self._lock.__enter__()
            try:
                with naming_damage(self.path):
                    self._connection().executescript(schema("sqlite"))  # idempotent DDL; executescript manages its own transaction
                if 0 < self._migrate() < SCHEMA_VERSION:
                    # A migration copies tables into new ones, and SQLite keeps the old ones' pages as free space in
                    # the file (a version-7 state of musique-100 grew from 38.6 to 56.1 MB, 20 MB of it free).
                    self._connection().execute("VACUUM")
            except BaseException:
                self.close()
                raise

    def _connection(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            with naming_damage(self.path):
                if self.read_only:
                    conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=60)
                else:
                    conn = sqlite3.connect(self.path, timeout=60)
                    conn.execute("PRAGMA journal_mode=WAL")
                    conn.execute("PRAGMA synchronous=NORMAL")
                    # A deleted document's text is overwritten, not left in free pages for `strings` to find.
                    conn.execute("PRAGMA secure_delete=ON")
            conn.isolation_level = None  # explicit transactions below
            conn.create_function("stored_digest", 1, _stored_digest, deterministic=True)  # version 7's migration
            conn.create_function("stored_id", 2, _stored_id, deterministic=True)  # version 8's
            conn.create_function("stored_point_key", 1, _stored_point_key, deterministic=True)  # version 8's
            self._local.conn = conn
        return conn

    # Version -> the statements that bring an index of version - 1 to it. SQLite stores compressed payloads in their
    # TEXT columns as they are, so version 2 (compressed payloads) changes nothing in its tables; version 3 adds the
    # corpus-wide stages' bookkeeping, which the schema above creates: merged_extractions, and stage_marks (the
    # merge's and the graph sync's). An older pipeline would merge or sync without keeping it, and a newer one would
    # then trust it: the version refuses the older one the index. Version 4 compresses payloads with a preset
    # dictionary, which an older pipeline cannot read, keeps elements' hashes at 128 bits (``ids.short_hash``), and
    # keeps the bookkeeping of one row per element, point or chunk in its primary key's tree alone (WITHOUT ROWID),
    # not in a table and an index of the same key. Together they made the state a fifth smaller (docs/benchmarks.md).
    # Version 5 keeps communities, their summaries and sources' extractions as namespaces of one payloads table.
    # Version 6 writes payloads without spaces (orjson) from a dictionary spelled so, which an older pipeline cannot
    # read; the payloads already stored keep version 4's, which their streams name. Version 7 keeps the merged
    # elements in their key's tree alone too (WITHOUT ROWID: a table and an index of the same key took 2.6 MB more
    # on musique-100), and the elements' and the graph sync's content hashes as their 16 bytes, not 32 hex digits.
    # Version 8 keeps the texts of the elements' description parts once each, in element_texts, which the schema
    # above creates (the payloads already stored hold theirs and are read as they are), and the pipeline's ids in
    # elements, synced and indexed_points as their 16 bytes (point keys as their two digests' bytes), the rows copied
    # in key order so the trees' pages are full.
    MIGRATIONS: dict[int, str] = {2: "", 3: "", 4: "; ".join(
        [SHORTER_ELEMENT_HASHES]
        + [f"ALTER TABLE {table} RENAME TO {table}_v3; {_table_definition(table)}; "
           f"INSERT INTO {table} SELECT * FROM {table}_v3; DROP TABLE {table}_v3" for table in _KEY_ONLY_TABLES]
        + [_INDEXED_POINTS_BY_SHARD]),  # its index went with the table it was renamed with
        5: fold_into_payloads("BLOB"), 6: "",
        7: f"ALTER TABLE elements RENAME TO elements_v6; {_table_definition('elements')}; "
           "INSERT INTO elements SELECT kind, element_id, stored_digest(content_hash), payload FROM elements_v6; "
           "DROP TABLE elements_v6; UPDATE synced SET content_hash = stored_digest(content_hash)",
        8: "; ".join([f"ALTER TABLE {table} RENAME TO {table}_v7; {_table_definition(table)}; "
                      f"INSERT INTO {table} SELECT {columns} FROM {table}_v7 ORDER BY 1, 2; DROP TABLE {table}_v7"
                      for table, columns in (
                          ("elements", "kind, stored_id(kind, element_id), content_hash, payload"),
                          ("synced", "kind, stored_id(kind, element_id), content_hash"),
                          ("indexed_points",
                           "collection, stored_id(collection, point_id), shard, stored_point_key(point_key)"))]
                     + [_INDEXED_POINTS_BY_SHARD])}  # its index went with the table it was renamed with

    def exists(self) -> bool:
        """Whether a build has created this index's state (a read-only store of a missing file creates none); a file
        that holds no index tables (emptied, overwritten) is damage, not a missing index: ``DamagedStoreError``."""
        if not self.path.is_file():
            return False
        with naming_damage(self.path):
            tables = self.query("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'")
        if not tables:
            raise DamagedStoreError(self.path, sqlite3.DatabaseError("it holds no index tables"))
        return True

    @contextlib.contextmanager
    def whole_build(self) -> Iterator[None]:
        """Held by a whole build for as long as it runs. A writable SQLite store holds the build lock already (a
        second writer fails at once), so there is nothing more to take; the PostgreSQL store takes an advisory lock."""
        yield

    @contextlib.contextmanager
    def exclusive(self, name: str) -> Iterator[None]:
        """Held by one process at a time among the writers of this index, for work that must not interleave with
        another run's (the corpus-wide stages). A writable SQLite store already excludes every other writer for as
        long as it is open (the build lock), so there is nothing more to take."""
        if self.read_only:
            raise RuntimeError(f"{self.path} is open read-only: only a writer takes the index's locks")
        yield

    def _stored_digest(self, digest: str) -> str | bytes:
        return _stored_digest(digest)

    def _stored_id(self, kind: str, identifier: str) -> str | bytes:
        return _stored_id(kind, identifier)

    def _stored_point_key(self, key: str) -> str | bytes:
        return _stored_point_key(key)

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        with naming_damage(self.path):
            return self._connection().execute(sql, params).fetchall()

    def _naming_damage(self) -> contextlib.AbstractContextManager[None]:
        return naming_damage(self.path)


# Lock file -> [descriptor, holders in this process]: stores and workspaces of one process share the lock (a stage
# and its checks, a test beside its build); flock excludes other processes only.
_held_build_locks: dict[Path, list[int]] = {}
_held_build_locks_guard = threading.Lock()


@contextlib.contextmanager
def build_lock(index_dir: Path) -> Iterator[None]:
    """Hold the index's build lock: an exclusive ``flock`` on ``<index_dir>/build.lock``, so a second process that
    would write the same index fails at once with `IndexBusyError` naming the holder, instead of interleaving its
    writes. The operating system releases it when the holder ends, even by kill -9."""
    path = (Path(index_dir) / BUILD_LOCK_FILE).resolve()
    with _held_build_locks_guard:
        held = _held_build_locks.get(path)
        if held is not None:
            held[1] += 1
        else:
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(descriptor, 1000, 0).decode("utf-8", "replace").strip() or "holder unknown"
                os.close(descriptor)
                raise IndexBusyError(
                    f"another build is writing the index in {path.parent} ({holder}); two builds of one index "
                    f"cannot run at once: run this one when that one has finished (its lock, {path}, is released "
                    "when its process ends)"
                ) from None
            os.ftruncate(descriptor, 0)
            started = time.strftime("%Y-%m-%d %H:%M:%S")
            os.pwrite(descriptor, f"pid {os.getpid()} since {started}: {' '.join(sys.argv)[:300]}".encode(), 0)
            _held_build_locks[path] = [descriptor, 1]
    try:
        yield
    finally:
        with _held_build_locks_guard:
            held = _held_build_locks[path]
            held[1] -= 1
            if held[1] == 0:
                del _held_build_locks[path]
                os.close(held[0])


def build_holder(index_dir: Path) -> str | None:
    """Who holds the index's build lock (as its holder wrote itself down), or None when no process does; a server
    state (no lock file) gives None."""
    path = Path(index_dir) / BUILD_LOCK_FILE
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return os.pread(descriptor, 1000, 0).decode("utf-8", "replace").strip() or "holder unknown"
    finally:
        os.close(descriptor)  # closing drops a shared lock taken here
    return None
