"""The embedded vector store: one Qdrant Edge shard per collection, written by one process at a time, read from copies.

An ``EdgeShard`` directory may be open in only one process at a time, while Dagster runs steps in separate processes
and agents query from their own. So:

* ``EdgeVectorStore`` (the writer) keeps each collection's *working* shard closed between operations. Every operation
  takes an exclusive ``flock`` on the collection's lock file, loads the shard, works, flushes and closes it, so writers
  in different processes (and threads) queue instead of failing. ``session`` keeps a shard open across many small
  operations when the load/flush/close per call would dominate.
* ``publish`` optimizes every working shard (Edge never optimizes in the background: without it a collection is one
  unindexed segment searched by brute force) and copies them all into a new immutable version directory, then
  atomically switches the ``CURRENT`` pointer. Only the current version is kept: the one before it is deleted as
  soon as no reader can be copying it (see *Versions* below).
* At rest every collection is stored once. Once a version is current, the working shards it was copied from are
  deleted (they equal it); the next operation on a collection copies its working shard back from the current
  version (and marks it ``restored-from`` that version until something writes to it). A collection nobody wrote
  since the last publish goes into the next version as hard links to the current version's files, which are never
  written once published (readers open copies): a build that only reads a collection copies it once, not twice.
* A delete only marks points deleted: their payloads (document ids) stay in the segment files until an optimizer
  rebuilds the segment. So the first publish after a delete (``deleted-since-publish`` marks it) optimizes that
  collection with a vacuum threshold of zero, which rebuilds every segment holding a deleted point from its live
  points, and no published version carries a deleted document. (A shard an earlier version created with a
  write-ahead log is written anew from its live points instead: its log still holds what was deleted.)
* Shards are created without a write-ahead log. Every writing operation flushes before it returns (a ``session``, when
  it ends), and that flush is what makes it durable: the WAL would only add a second copy of every vector written
  since the shard was created, which doubled the size of the collections at rest and of every copy. Shards created
  with a WAL by an earlier version keep it (Edge fixes the setting at creation).
* Vectors are stored as float16: half the size of float32, and the scores of unit-length 384-dimension embeddings
  move by about 1e-5 (a model's own noise is larger). Shards created as float32 by an earlier version stay so.
* ``EdgeVectorReader`` copies the current version into a private scratch directory and opens that, so any number of
  reader processes can run next to a writer that keeps writing the working copies.

Layout under the root::

    collections/<name>/shard/      working EdgeShard directory, from the first operation after a publish to the next
    collections/<name>/write.lock  flock serializing everything that opens the working shard
    published/CURRENT              name of the version readers open
    published/v000001/<name>/      an immutable, optimized copy of each collection
    published/publish.lock         serializes publishers
    published/read.lock            shared while a reader copies a version, exclusive while CURRENT switches

Versions: a reader copies only the version ``CURRENT`` names while it holds ``read.lock`` shared, and ``CURRENT``
changes only under ``read.lock`` exclusive. So the previous version lives on only while the publisher waits for that
exclusive lock (readers still copying it); once ``CURRENT`` has switched, no reader is copying or can start copying
any other version, and every version but the current one is deleted (under ``publish.lock``, after ``read.lock`` is
released so new readers need not wait for the deletion). There is no older version to roll back to.

Disk: Edge preallocates its files (32 MiB per vector chunk and payload page, and per WAL file where there is one)
but leaves them sparse, so a three-point collection has about 138 MB of apparent size in a few hundred KB of blocks.
Every copy (publish and reader) therefore preserves the holes (``_copy_sparse``); a plain ``shutil.copytree`` would
allocate all 138 MB per copy.

Point ids are the pipeline's string ids mapped to UUIDs (Qdrant accepts only UUIDs and integers); the original id is
kept in the payload under ``_id`` and removed again from returned payloads.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
import tempfile
import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from qdrant_edge import (
    CountRequest,
    Distance,
    EdgeConfig,
    EdgeOptimizersConfig,
    EdgeShard,
    EdgeVectorParams,
    FieldCondition,
    Filter,
    MatchValue,
    PayloadSchemaType,
    PayloadSelector,
    Point,
    Query,
    QueryRequest,
    ScrollRequest,
    UpdateOperation,
    VectorStorageDatatype,
)

from graphrag_pipeline.lib.core.ids import point_uuid
from graphrag_pipeline.lib.core.models import VectorHit, VectorPoint
from graphrag_pipeline.lib.stores.vector_points import (
    DOC_IDS_KEY,
    ID_KEY,
    VECTOR_NAME,
    CollectionNotFoundError,
    as_vector,
    as_vectors,
    check_collection_name,
    check_new_collection,
)

BATCH_SIZE = 1_000
_COPY_BLOCK = 1 << 20  # sparse copies write in blocks of this size and skip the all-zero ones
_ZERO_BLOCK = bytes(_COPY_BLOCK)

_VERSION_NAME = re.compile(r"^v(\d{6,})$")
_EDGE_CONFIG_FILE = "edge_config.json"  # written by Qdrant Edge into every shard directory
# Ours, beside Edge's files in a shard directory (Edge leaves other files alone), so it is copied with the shard into
# each version and back: the payload fields the shard has keyword indexes on. It spares ensure_collection loading the
# shard to ask, which a stage's run paid before anything else (about 30 ms for the entities of 3k documents).
_KEYWORD_FIELDS_FILE = "keyword-fields"
# Ours too, in a collection's copy in a version only (removed when a working shard is restored from it, and written
# anew into each version a working shard is copied to): how many points it holds. Every stage first compares a
# collection's count with its bookkeeping, and a collection nobody has written since the last publish is counted from
# here instead of being copied back and loaded (30-50 ms for each collection of 3k documents, twice for the entities).
_POINT_COUNT_FILE = "point-count"


# An optimize rebuilds every segment holding a deleted point, however few: the rebuilt segment's files hold the live
# points only (see the module docstring).
_PURGING_OPTIMIZERS = EdgeOptimizersConfig(deleted_threshold=0.0, vacuum_min_vector_number=0)


def _collection_config(dimension: int, float16: bool = True) -> EdgeConfig:
    datatype = VectorStorageDatatype.Float16 if float16 else VectorStorageDatatype.Float32
    vector = EdgeVectorParams(size=dimension, distance=Distance.Cosine, datatype=datatype)
    return EdgeConfig(vectors={VECTOR_NAME: vector}, optimizers=_PURGING_OPTIMIZERS, wal_enabled=False)


def _match_filter(must_match: dict[str, Any] | None) -> Filter | None:
    if not must_match:
        return None
    conditions = []
    for key, value in must_match.items():
        if not isinstance(value, (str, int, bool)):
            raise TypeError(f"must_match[{key!r}] must be a str, int or bool, got {type(value).__name__}")
        conditions.append(FieldCondition(key=key, match=MatchValue(value)))
    return Filter(must=conditions)


def _search(
    shard: EdgeShard,
    dimension: int,
    vector: Sequence[float] | np.ndarray,
    limit: int,
    must_match: dict[str, Any] | None,
    with_payload: bool,
) -> list[VectorHit]:
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    request = QueryRequest(
        limit=limit,
        query=Query.Nearest(as_vector(vector, dimension, "query"), using=VECTOR_NAME),
        filter=_match_filter(must_match),
        # The id alone when the payload is not wanted: a hub entity's carries 200 document ids, and turning them into
        # Python objects was a third of a search at 100k chunks (0.36 of 1.1 ms for an entity search).
        with_payload=True if with_payload else PayloadSelector.Include([ID_KEY]),
        with_vector=False,
    )
    hits = []
    for scored in shard.query(request):
        payload = dict(scored.payload or {})
        hits.append(VectorHit(point_id=payload.pop(ID_KEY), score=float(scored.score), payload=payload))
    return hits


def _count(shard: EdgeShard) -> int:
    return shard.count(CountRequest(exact=True))


def _point_ids(shard: EdgeShard) -> set[str]:
    ids: set[str] = set()
    offset = None
    while True:
        records, offset = shard.scroll(
            ScrollRequest(offset=offset, limit=BATCH_SIZE, with_payload=PayloadSelector.Include([ID_KEY]))
        )
        ids.update(record.payload[ID_KEY] for record in records)
        if offset is None:
            return ids


def _vectors(shard: EdgeShard, point_ids: Sequence[str]) -> dict[str, np.ndarray]:
    found: dict[str, np.ndarray] = {}
    for start in range(0, len(point_ids), BATCH_SIZE):
        uuids = [point_uuid(point_id) for point_id in point_ids[start : start + BATCH_SIZE]]
        for record in shard.retrieve(uuids, with_payload=PayloadSelector.Include([ID_KEY]), with_vector=True):
            found[record.payload[ID_KEY]] = np.asarray(record.vector[VECTOR_NAME], dtype=np.float32)
    return found


def _points(shard: EdgeShard) -> dict[str, VectorPoint]:
    points: dict[str, VectorPoint] = {}
    offset = None
    while True:
        records, offset = shard.scroll(
            ScrollRequest(offset=offset, limit=BATCH_SIZE, with_payload=True, with_vector=True)
        )
        for record in records:
            payload = dict(record.payload)
            point_id = payload.pop(ID_KEY)
            points[point_id] = VectorPoint(point_id, np.asarray(record.vector[VECTOR_NAME], dtype=np.float32), payload)
        if offset is None:
            return points


def _shard_dimension(shard_dir: Path) -> int:
    config = json.loads((shard_dir / _EDGE_CONFIG_FILE).read_text(encoding="utf-8"))
    return int(config["vectors"][VECTOR_NAME]["size"])


def _indexed_fields(shard_dir: Path) -> set[str]:
    """The payload fields the shard at ``shard_dir`` has keyword indexes on, as its own file says (none: unknown)."""
    try:
        return set((shard_dir / _KEYWORD_FIELDS_FILE).read_text(encoding="utf-8").split())
    except FileNotFoundError:
        return set()


def _same_vectors_config(shard_dir: Path) -> EdgeConfig:
    """This version's settings with the vectors of the shard at ``shard_dir`` (an earlier version's float32 stays)."""
    vectors = json.loads((shard_dir / _EDGE_CONFIG_FILE).read_text(encoding="utf-8"))["vectors"][VECTOR_NAME]
    return _collection_config(int(vectors["size"]), vectors.get("datatype") == "float16")


@contextmanager
def _flock(lock_path: Path, mode: int) -> Iterator[None]:
    """Holds ``flock(mode)`` on the file; a fresh descriptor per call, so threads of one process exclude each other."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def _copy_sparse(source: str, target: str) -> None:
    """Copies a file (contents and permission bits) without allocating blocks for its holes or all-zero blocks.

    ``SEEK_DATA``/``SEEK_HOLE`` jump over the holes without reading them; inside data extents, 1 MiB blocks that are
    all zeros are skipped as well (a file system without hole support reports the whole file as one extent). The
    target's holes read back as zeros, so the copy is byte-for-byte identical.
    """
    with open(source, "rb") as source_file, open(target, "wb") as target_file:
        source_fd, target_fd = source_file.fileno(), target_file.fileno()
        size = os.fstat(source_fd).st_size
        offset = 0
        while offset < size:
            try:
                start = os.lseek(source_fd, offset, os.SEEK_DATA)
            except OSError as error:
                if error.errno == errno.ENXIO:  # nothing but a hole up to the end of the file
                    break
                raise
            end = os.lseek(source_fd, start, os.SEEK_HOLE)
            for block_start in range(start, end, _COPY_BLOCK):
                block = os.pread(source_fd, min(_COPY_BLOCK, end - block_start), block_start)
                if block != _ZERO_BLOCK[: len(block)]:
                    os.pwrite(target_fd, block, block_start)
            offset = end
        os.ftruncate(target_fd, size)
    shutil.copymode(source, target)


def _copy_tree_sparse(source: Path, target: Path) -> None:
    shutil.copytree(source, target, copy_function=_copy_sparse)


def _point_count(shard_dir: Path) -> int | None:
    """The number of points in a collection's copy in a version (None: copied by an earlier version of this code)."""
    try:
        return int((shard_dir / _POINT_COUNT_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def _read_current(published: Path) -> str | None:
    try:
        version = (published / "CURRENT").read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    if not _VERSION_NAME.match(version):
        raise ValueError(f"corrupt pointer {published / 'CURRENT'}: {version!r}")
    return version


def published_version(root: str | Path) -> str | None:
    """The version a reader opened now would copy (None before the first publish): one small read, so a long-lived
    reader can ask before each question whether a newer version is out."""
    return _read_current(Path(root) / "published")


def _published_versions(published: Path) -> list[str]:
    names = [entry.name for entry in published.iterdir() if entry.is_dir() and _VERSION_NAME.match(entry.name)]
    return sorted(names, key=lambda name: int(name[1:]))


def _remove_versions_except_current(published: Path) -> None:
    """Deletes every version but ``CURRENT``'s; the caller holds ``publish.lock`` (see *Versions* in the module doc)."""
    current = _read_current(published)
    for version in _published_versions(published):
        if version != current:
            shutil.rmtree(published / version)


@dataclass
class _CollectionState:
    """Per-process bookkeeping of one collection: a mutex for this process's threads and the session's shard."""

    mutex: threading.RLock = field(default_factory=threading.RLock)
    session_shard: EdgeShard | None = None


class EdgeVectorStore:
    """Writer: named collections of the pipeline's vectors, each an Edge shard under ``root/collections``.

    ``keyword_fields`` get a keyword payload index in every collection (``doc_ids`` is needed by
    ``delete_by_document``); list other fields that ``search`` filters on with ``must_match``.
    """

    def __init__(self, root: str | Path, keyword_fields: Sequence[str] = (DOC_IDS_KEY,)) -> None:
        self.root = Path(root)
        self.keyword_fields = tuple(dict.fromkeys((DOC_IDS_KEY, *keyword_fields)))
        self._collections_dir = self.root / "collections"
        self._published_dir = self.root / "published"
        self._collections_dir.mkdir(parents=True, exist_ok=True)
        self._published_dir.mkdir(parents=True, exist_ok=True)
        self._states: dict[str, _CollectionState] = {}
        self._states_lock = threading.Lock()
        self._dimensions: dict[str, int] = {}
        self._closed = False

    # -- VectorStore protocol ------------------------------------------------------------------------------------

    def ensure_collection(self, collection: str, dimension: int) -> None:
        """Creates the collection, or checks that the existing one has this dimension; adds missing payload indexes."""
        check_new_collection(collection, dimension)
        shard_dir = self._shard_dir(collection)
        with self._locked(collection):  # no publish meanwhile: the current version stays current
            state = self._state(collection)
            current = self._current_shard_dir(collection)
            if current is not None and _indexed_fields(current) >= set(self.keyword_fields):
                if _shard_dimension(current) != dimension:
                    raise ValueError(
                        f"collection {collection!r} has dimension {_shard_dimension(current)}, not {dimension}")
                self._dimensions[collection] = dimension
                return
            self._restore_working_shard(collection)
            if (shard_dir / _EDGE_CONFIG_FILE).exists():
                existing = _shard_dimension(shard_dir)
                if existing != dimension:
                    raise ValueError(f"collection {collection!r} has dimension {existing}, not {dimension}")
                shard = state.session_shard if state.session_shard is not None else EdgeShard.load(str(shard_dir))
            else:
                shard = EdgeShard.create(str(shard_dir), _collection_config(dimension))
            try:
                indexed = set(shard.info().payload_schema)
                for field_name in self.keyword_fields:
                    if field_name not in indexed:
                        self._restored_marker(collection).unlink(missing_ok=True)
                        shard.update(UpdateOperation.create_field_index(field_name, PayloadSchemaType.Keyword))
                shard.flush()
                _write_atomically(shard_dir / _KEYWORD_FIELDS_FILE,
                                  "".join(f"{name}\n" for name in sorted(indexed | set(self.keyword_fields))))
            finally:
                if shard is not state.session_shard:
                    shard.close()
            self._dimensions[collection] = dimension

    def upsert(self, collection: str, points: Sequence[VectorPoint]) -> None:
        dimension = self.dimension(collection)
        vectors = as_vectors(points, dimension)
        converted = [self._to_point(point, vector) for point, vector in zip(points, vectors)]
        if not converted:
            return
        with self._shard(collection, writing=True) as shard:
            for start in range(0, len(converted), BATCH_SIZE):
                shard.update(UpdateOperation.upsert_points(converted[start : start + BATCH_SIZE]))

    def delete(self, collection: str, point_ids: Sequence[str]) -> None:
        uuids = [point_uuid(point_id) for point_id in point_ids]
        if not uuids:
            return
        with self._shard(collection, writing=True) as shard:
            self._deleted_marker(collection).touch()  # before: a crash after the delete still purges at publish
            for start in range(0, len(uuids), BATCH_SIZE):
                shard.update(UpdateOperation.delete_points(uuids[start : start + BATCH_SIZE]))

    def delete_by_document(self, collection: str, doc_id: str) -> None:
        """Removes every point whose ``doc_ids`` list contains ``doc_id``, even if it also lists other documents.

        A point shared by several documents (say, an entity) is rebuilt by the stage that owns it from the documents
        that remain; keeping a stale vector around would be worse than a short gap.
        """
        condition = Filter(must=[FieldCondition(key=DOC_IDS_KEY, match=MatchValue(doc_id))])
        with self._shard(collection, writing=True) as shard:
            self._deleted_marker(collection).touch()
            shard.update(UpdateOperation.delete_points_by_filter(condition))

    def search(
        self,
        collection: str,
        vector: Sequence[float] | np.ndarray,
        limit: int,
        must_match: dict[str, Any] | None = None,
        with_payload: bool = True,
    ) -> list[VectorHit]:
        """Nearest points by cosine similarity, best first; ``must_match`` values must equal (or be in) the field."""
        dimension = self.dimension(collection)
        with self._shard(collection, writing=False) as shard:
            return _search(shard, dimension, vector, limit, must_match, with_payload)

    def count(self, collection: str) -> int:
        self.dimension(collection)
        with self._locked(collection):
            if self._state(collection).session_shard is None and not (
                    self._shard_dir(collection) / _EDGE_CONFIG_FILE).exists():
                with _flock(self._published_dir / "read.lock", fcntl.LOCK_SH):
                    version = _read_current(self._published_dir)
                    published = None if version is None else _point_count(self._published_dir / version / collection)
                if published is not None:
                    return published
        with self._shard(collection, writing=False) as shard:
            return _count(shard)

    def point_ids(self, collection: str) -> set[str]:
        with self._shard(collection, writing=False) as shard:
            return _point_ids(shard)

    def vectors(self, collection: str, point_ids: Sequence[str]) -> dict[str, np.ndarray]:
        with self._shard(collection, writing=False) as shard:
            return _vectors(shard, list(point_ids))

    def close(self) -> None:
        self._closed = True

    # -- beyond the protocol -------------------------------------------------------------------------------------

    def collections(self) -> list[str]:
        working = {entry.name for entry in self._collections_dir.iterdir()
                   if (entry / "shard" / _EDGE_CONFIG_FILE).exists()}
        with _flock(self._published_dir / "read.lock", fcntl.LOCK_SH):  # the version listed is not pruned meanwhile
            version = _read_current(self._published_dir)
            published = {entry.name for entry in (self._published_dir / version).iterdir()
                         if (entry / _EDGE_CONFIG_FILE).exists()} if version else set()
        return sorted(working | published)

    def dimension(self, collection: str) -> int:
        if collection not in self._dimensions:
            check_collection_name(collection)
            with _flock(self._published_dir / "read.lock", fcntl.LOCK_SH):
                shard_dir = self._current_shard_dir(collection)
                if shard_dir is None:
                    raise CollectionNotFoundError(f"collection {collection!r} does not exist under {self.root}")
                self._dimensions[collection] = _shard_dimension(shard_dir)
        return self._dimensions[collection]

    @contextmanager
    def session(self, collection: str) -> Iterator[None]:
        """Keeps the collection's shard open (and other writers out) while the block runs.

        Inside the block this thread's operations on the collection reuse the open shard instead of paying a load
        and close each, and the writes are flushed once, as the block ends or raises (a flush costs 4-12 ms whatever
        it writes: one per batch was a third of the graph stage's upsert on musique-100). A process killed inside the
        block may lose them all (Edge keeps no write-ahead log), so a caller books the block's writes after it.
        """
        self.dimension(collection)  # fail fast on a missing collection
        state = self._state(collection)
        with self._locked(collection):
            if state.session_shard is not None:
                raise RuntimeError(f"a session on collection {collection!r} is already open in this thread")
            self._restore_working_shard(collection)
            self._restored_marker(collection).unlink(missing_ok=True)  # a session may write
            shard = EdgeShard.load(str(self._shard_dir(collection)))
            state.session_shard = shard
            try:
                yield
            finally:
                state.session_shard = None
                try:
                    shard.flush()
                finally:
                    shard.close()

    def publish(self, optimize: bool = True) -> str:
        """Copies every collection into a new immutable version, switches ``CURRENT`` to it and returns its name.

        The previous version is deleted once no reader is copying it (see *Versions* in the module docstring), and
        the working shards once the new version is current, so each collection is stored once at rest. Every
        collection's lock is held from its copy until its working shard is gone: a write landing in between would
        otherwise be in neither.

        ``optimize`` builds the HNSW index (and vacuums deletions) first, so readers do not search by brute force;
        it is the slow part for large collections (about two minutes for 50k 384-d vectors on two cores) and is
        incremental: segments already indexed are not rebuilt unless they are merged.
        """
        self._check_open()
        with _flock(self._published_dir / "publish.lock", fcntl.LOCK_EX):
            for leftover in self._published_dir.glob(".staging-*"):
                shutil.rmtree(leftover)  # a publisher that died mid-copy; we hold the publish lock
            _remove_versions_except_current(self._published_dir)  # one that died between switch and cleanup
            versions = _published_versions(self._published_dir)
            version = f"v{int(versions[-1][1:]) + 1 if versions else 1:06d}"
            current = _read_current(self._published_dir)
            staging = self._published_dir / f".staging-{version}"
            staging.mkdir()
            with ExitStack() as locks:
                retiring = []
                for collection in self.collections():
                    locks.enter_context(self._locked(collection))
                    if self._state(collection).session_shard is not None:
                        raise RuntimeError(f"cannot publish while a session on {collection!r} is open in this thread")
                    working = (self._shard_dir(collection) / _EDGE_CONFIG_FILE).exists()
                    if working and not self._unwritten_since(collection, current):
                        self._copy_working_shard(collection, staging / collection, optimize)
                    else:  # unchanged since the current version, whose files are never written again
                        shutil.copytree(self._published_dir / str(current) / collection, staging / collection,
                                        copy_function=os.link)
                    if working:
                        retiring.append(collection)
                staging.rename(self._published_dir / version)
                # Waits until no reader is copying the previous version; readers that come after see the new one.
                with _flock(self._published_dir / "read.lock", fcntl.LOCK_EX):
                    _write_atomically(self._published_dir / "CURRENT", version + "\n")
                for collection in retiring:  # the new version holds what each of them holds
                    self._retire_working_shard(collection)
            _remove_versions_except_current(self._published_dir)
        return version

    def __enter__(self) -> EdgeVectorStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------------------------------

    def _shard_dir(self, collection: str) -> Path:
        return self._collections_dir / collection / "shard"

    def _state(self, collection: str) -> _CollectionState:
        with self._states_lock:
            return self._states.setdefault(collection, _CollectionState())

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("EdgeVectorStore is closed")

    @contextmanager
    def _locked(self, collection: str) -> Iterator[None]:
        """This process's mutex, then the cross-process flock; re-entered freely inside this thread's session."""
        self._check_open()
        state = self._state(collection)
        with state.mutex:
            if state.session_shard is not None:
                yield  # this thread already holds the flock for its session
                return
            lock_path = self._collections_dir / collection / "write.lock"
            lock_path.parent.mkdir(parents=True, exist_ok=True)
            with _flock(lock_path, fcntl.LOCK_EX):
                yield

    @contextmanager
    def _shard(self, collection: str, writing: bool) -> Iterator[EdgeShard]:
        self.dimension(collection)
        state = self._state(collection)
        with self._locked(collection):
            if state.session_shard is not None:
                yield state.session_shard  # flushed as the session ends
                return
            self._restore_working_shard(collection)
            if writing:
                self._restored_marker(collection).unlink(missing_ok=True)
            shard = EdgeShard.load(str(self._shard_dir(collection)))
            try:
                yield shard
                if writing:
                    shard.flush()
            finally:
                shard.close()

    def _copy_working_shard(self, collection: str, target: Path, optimize: bool) -> None:
        """Optimizes the working shard and copies it to ``target``; the caller holds the collection's lock.

        After a delete the shard is optimized whatever ``optimize`` says, with the purging vacuum settings (a shard
        created by an earlier version takes them as it is loaded): a deleted point's payload (a deleted document's id
        and title) stays in the segment files until its segment is rebuilt, and a published version must not carry
        it. A shard with a write-ahead log is written anew from its live points instead."""
        working = self._shard_dir(collection)
        deleted = self._deleted_marker(collection).exists()
        if deleted and (working / "wal").exists():
            self._write_live_points(collection, target)
            source, config, vacuum = target, None, False
        else:
            source, config, vacuum = working, _same_vectors_config(working) if deleted else None, deleted
        shard = EdgeShard.load(str(source), config)
        try:
            if optimize or vacuum:
                shard.optimize()
            shard.flush()
            points = _count(shard)
        finally:
            shard.close()
        if source != target:
            _copy_tree_sparse(source, target)
        _write_atomically(target / _POINT_COUNT_FILE, str(points))

    def _write_live_points(self, collection: str, target: Path) -> None:
        """A new shard at ``target`` holding the working shard's points, with its vector settings and payload
        indexes; the caller holds the collection's lock. Points go over as the working shard returns them (ids,
        vectors and payloads were checked when they were written), a batch at a time."""
        shard_dir = self._shard_dir(collection)
        with ExitStack() as shards:
            working = EdgeShard.load(str(shard_dir))
            shards.callback(working.close)
            fresh = EdgeShard.create(str(target), _same_vectors_config(shard_dir))
            shards.callback(fresh.close)
            for field_name in sorted(working.info().payload_schema):
                fresh.update(UpdateOperation.create_field_index(field_name, PayloadSchemaType.Keyword))
            offset = None
            while True:
                records, offset = working.scroll(
                    ScrollRequest(offset=offset, limit=BATCH_SIZE, with_payload=True, with_vector=True))
                if records:
                    fresh.update(UpdateOperation.upsert_points(
                        [Point(id=str(r.id), vector=r.vector, payload=r.payload) for r in records]))
                if offset is None:
                    break
            fresh.flush()

    def _retire_working_shard(self, collection: str) -> None:
        """Deletes a working shard that the current version holds a copy of; the caller holds the collection's
        lock. Renamed away first, so a crash mid-delete leaves no half shard that looks like a working one."""
        retired = self._collections_dir / collection / ".retired"
        shutil.rmtree(retired, ignore_errors=True)
        self._shard_dir(collection).rename(retired)
        self._restored_marker(collection).unlink(missing_ok=True)
        self._deleted_marker(collection).unlink(missing_ok=True)  # the published copy holds live points only
        shutil.rmtree(retired)

    def _current_shard_dir(self, collection: str) -> Path | None:
        """Where the collection is now: its working shard, or else its copy in the current version (None: nowhere);
        the caller holds the collection's lock or the read lock, so that version is not deleted meanwhile."""
        candidates = [self._shard_dir(collection)]
        if version := _read_current(self._published_dir):
            candidates.append(self._published_dir / version / collection)
        return next((d for d in candidates if (d / _EDGE_CONFIG_FILE).exists()), None)

    def _restored_marker(self, collection: str) -> Path:
        return self._collections_dir / collection / "restored-from"

    def _deleted_marker(self, collection: str) -> Path:
        """Present from a delete until a publish has written the collection without the deleted points."""
        return self._collections_dir / collection / "deleted-since-publish"

    def _unwritten_since(self, collection: str, version: str | None) -> bool:
        """Whether the working shard was copied from ``version`` and nothing has written to it since."""
        try:
            return version is not None and self._restored_marker(collection).read_text(encoding="utf-8") == version
        except FileNotFoundError:
            return False

    def _restore_working_shard(self, collection: str) -> None:
        """Copies the collection's working shard back from the current version when publish retired it; the
        caller holds the collection's lock. A collection in no version and without a working shard stays absent."""
        shard_dir = self._shard_dir(collection)
        if (shard_dir / _EDGE_CONFIG_FILE).exists():
            return
        restoring = self._collections_dir / collection / ".restoring"
        with _flock(self._published_dir / "read.lock", fcntl.LOCK_SH):
            version = _read_current(self._published_dir)
            source = self._published_dir / version / collection if version else None
            if source is None or not (source / _EDGE_CONFIG_FILE).exists():
                return
            shutil.rmtree(restoring, ignore_errors=True)  # a restore that died mid-copy
            _copy_tree_sparse(source, restoring)
        (restoring / _POINT_COUNT_FILE).unlink(missing_ok=True)  # the working shard's count changes with each write
        shutil.rmtree(shard_dir, ignore_errors=True)  # a shard whose creation died before its config was written
        restoring.rename(shard_dir)
        _write_atomically(self._restored_marker(collection), str(version))

    @staticmethod
    def _to_point(point: VectorPoint, vector: list[float]) -> Point:
        if not isinstance(point.point_id, str) or not point.point_id:
            raise ValueError(f"point id must be a non-empty string, got {point.point_id!r}")
        if ID_KEY in point.payload:
            raise ValueError(f"point {point.point_id!r}: payload key {ID_KEY!r} is reserved for the point id")
        return Point(
            id=point_uuid(point.point_id),
            vector={VECTOR_NAME: vector},
            payload={**point.payload, ID_KEY: point.point_id},
        )


class EdgeVectorReader:
    """Read-only view of the published version current when it was opened, safe to search from many threads.

    The version is copied into a private scratch directory (removed on ``close``, on garbage collection or at
    interpreter exit) because an Edge shard directory can be open in only one process. To see a newer version,
    open a new reader.
    """

    def __init__(self, root: str | Path, scratch_dir: str | Path | None = None) -> None:
        self.root = Path(root)
        published = self.root / "published"
        self._scratch = Path(tempfile.mkdtemp(prefix="graphrag-edge-reader-", dir=scratch_dir))
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._scratch, ignore_errors=True)
        self._shards: dict[str, EdgeShard] = {}
        self._dimensions: dict[str, int] = {}
        self._lock = threading.Lock()
        try:
            if _read_current(published) is None:
                raise FileNotFoundError(f"no vector index has been published under {self.root}")
            with _flock(published / "read.lock", fcntl.LOCK_SH):
                # Read again under the lock: a publisher may have switched versions (and pruned this one) meanwhile.
                self.version = str(_read_current(published))
                _copy_tree_sparse(published / self.version, self._scratch / self.version)
            for shard_dir in sorted((self._scratch / self.version).iterdir()):
                self._dimensions[shard_dir.name] = _shard_dimension(shard_dir)
                self._shards[shard_dir.name] = EdgeShard.load(str(shard_dir))
        except BaseException:
            self.close()
            raise

    def collections(self) -> list[str]:
        return sorted(self._dimensions)

    def search(
        self,
        collection: str,
        vector: Sequence[float] | np.ndarray,
        limit: int,
        must_match: dict[str, Any] | None = None,
        with_payload: bool = True,
    ) -> list[VectorHit]:
        shard = self._shard(collection)
        return _search(shard, self._dimensions[collection], vector, limit, must_match, with_payload)

    def count(self, collection: str) -> int:
        return _count(self._shard(collection))

    def point_ids(self, collection: str) -> set[str]:
        return _point_ids(self._shard(collection))

    def vectors(self, collection: str, point_ids: Sequence[str]) -> dict[str, np.ndarray]:
        return _vectors(self._shard(collection), list(point_ids))

    def points(self, collection: str) -> dict[str, VectorPoint]:
        """Every point of the collection with its vector and payload (what "equals a fresh build" compares)."""
        return _points(self._shard(collection))

    def close(self) -> None:
        with self._lock:
            shards, self._shards = self._shards, {}
        for shard in shards.values():
            shard.close()
        self._cleanup()

    def __enter__(self) -> EdgeVectorReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _shard(self, collection: str) -> EdgeShard:
        if not self._cleanup.alive:
            raise RuntimeError("EdgeVectorReader is closed")
        shard = self._shards.get(collection)
        if shard is None:
            raise CollectionNotFoundError(f"collection {collection!r} is not in published version {self.version}")
        return shard
