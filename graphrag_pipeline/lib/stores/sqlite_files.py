"""Damaged SQLite files of an index (state, embedded graph, LLM caches): a clear error naming the file and the fix,
and what `graphrag-pipeline repair` does about it.

A file cut short (a full disk, a bad copy) or overwritten makes SQLite answer "database disk image is malformed" or
"file is not a database" on whatever statement touches the damaged pages, deep inside some stage. `naming_damage`
turns exactly those two errors (SQLITE_CORRUPT, SQLITE_NOTADB) into a `DamagedStoreError` that says which file and
what to run; every other SQLite error (a busy lock, a full disk) passes unchanged.
"""

from __future__ import annotations

import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from graphrag_pipeline.lib.core.errors import GraphRAGError

REPAIR_HINT = ("run `graphrag-pipeline repair` to set it aside, then build again: the build re-derives it "
               "(the state from the sources, the graph and vectors from the state)")
_DAMAGE_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})


class DamagedStoreError(GraphRAGError, ValueError):
    kind = "damaged"
    def __init__(self, path: Path, error: sqlite3.DatabaseError):
        super().__init__(f"{path} is damaged ({error}); {REPAIR_HINT}")
        self.path = path


def is_damage(error: sqlite3.DatabaseError) -> bool:
    code = getattr(error, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in _DAMAGE_CODES


@contextmanager
def naming_damage(path: Path) -> Iterator[None]:
    try:
        yield
    except sqlite3.DatabaseError as error:
        if is_damage(error):
            raise DamagedStoreError(path, error) from error
        raise


def integrity_problem(path: Path) -> str | None:
    """What SQLite's integrity check finds wrong with the file (None: nothing), or that it holds no tables at all (an
    emptied or truncated file is a valid empty database to SQLite). Reads every page: run it on demand (`repair`),
    not on every open."""
    try:
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=60)
        try:
            rows = connection.execute("PRAGMA integrity_check(5)").fetchall()
            tables = connection.execute("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0]
        finally:
            connection.close()
    except sqlite3.DatabaseError as error:
        if is_damage(error):
            return str(error)
        raise
    found = [row[0] for row in rows]
    if found == ["ok"] and not tables:
        return "it holds no tables"
    return None if found == ["ok"] else "; ".join(found)


def set_aside(path: Path) -> Path:
    """Move the file (with its WAL and shared-memory files) to ``<name>.damaged-<time>`` beside it; returns that."""
    target = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%dT%H%M%S')}")
    for suffix in ("-wal", "-shm"):
        companion = path.with_name(path.name + suffix)
        if companion.exists():
            companion.rename(target.with_name(target.name + suffix))
    path.rename(target)
    return target
