"""The production vector store: a Qdrant server through ``qdrant-client`` (or its local mode, for CI and laptops).

Same semantics as the embedded ``EdgeVectorStore``, so one contract suite covers both:

* One Qdrant collection per pipeline collection (``chunks``, ``entities``, ``communities``), named ``prefix + name``
  and created on demand by ``ensure_collection``, with one named cosine vector (``dense``) and keyword payload
  indexes on ``doc_ids``, ``source`` and ``access_groups`` (plus any ``keyword_fields``).
* Point ids are the pipeline's string ids mapped to deterministic UUIDs (``lib.ids.point_uuid``; Qdrant accepts only
  UUIDs and integers); the original id is kept in the payload under ``_id`` and removed again from returned payloads.
  Re-upserting the same content therefore overwrites the same points instead of duplicating them.
* Writes are batched (``batch_size`` points per request) and wait for the server to apply them, so ``publish`` is a
  no-op: every write is visible to every reader once the call returns.
* An unknown collection raises ``CollectionNotFoundError`` (a ``KeyError``), bad vectors (wrong dimension, NaN or
  infinity, all zeros) raise ``ValueError`` before anything is written.

Modes: ``url`` (plus optional ``api_key``) talks to a server; ``path`` opens qdrant-client's on-disk local mode and
``location=":memory:"`` its in-memory mode. Local mode is a pure-Python brute-force engine that ignores payload
indexes and lets only one client open a ``path`` at a time (it holds a file lock): fine for tests and small corpora,
not for Dagster steps running in several processes — use a server there.
"""

from __future__ import annotations

import re
import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any, ContextManager

import numpy as np
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import UnexpectedResponse

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

DEFAULT_KEYWORD_FIELDS = (DOC_IDS_KEY, "source", "access_groups")
SCROLL_PAGE = 1_000
_PREFIX = re.compile(r"^[A-Za-z0-9_.-]{0,64}$")


def _match_filter(must_match: dict[str, Any] | None) -> models.Filter | None:
    """Keyword equality on every field (for a list field: the list contains the value), all conditions ANDed."""
    if not must_match:
        return None
    conditions: list[models.Condition] = []
    for key, value in must_match.items():
        if not isinstance(value, (str, int, bool)):
            raise TypeError(f"must_match[{key!r}] must be a str, int or bool, got {type(value).__name__}")
        conditions.append(models.FieldCondition(key=key, match=models.MatchValue(value=value)))
    return models.Filter(must=conditions)


def _is_not_found(error: Exception) -> bool:
    if isinstance(error, UnexpectedResponse):
        return error.status_code == 404
    # Local mode raises ValueError("Collection <name> not found"); gRPC raises an RpcError with NOT_FOUND.
    if isinstance(error, ValueError):
        return "not found" in str(error)
    code = getattr(error, "code", None)
    return callable(code) and getattr(code(), "name", None) == "NOT_FOUND"


class QdrantVectorStore:
    """Named collections of the pipeline's vectors in Qdrant; implements the ``VectorStore`` protocol.

    Give exactly one of ``url`` (a server, e.g. ``http://qdrant:6333``), ``path`` (local mode on disk) or
    ``location`` (``":memory:"`` for local mode in memory, or a server URL). ``prefix`` namespaces the collections
    so several indexes can share one server; ``batch_size`` is the number of points per upsert request.
    """

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        path: str | None = None,
        location: str | None = None,
        prefix: str = "graphrag_",
        batch_size: int = 256,
        keyword_fields: Sequence[str] = (),
        timeout: int | None = None,
    ) -> None:
        given = [name for name, value in (("url", url), ("path", path), ("location", location)) if value]
        if len(given) != 1:
            raise ValueError(f"give exactly one of url, path or location (got {', '.join(given) or 'none'})")
        if not _PREFIX.match(prefix):
            raise ValueError(f"invalid collection prefix {prefix!r}: use letters, digits, '_', '-', '.' (max 64)")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.local = bool(path) or location == ":memory:"
        if api_key and self.local:
            raise ValueError("api_key applies to a Qdrant server, not to local mode")
        self.prefix = prefix
        self.batch_size = batch_size
        self.keyword_fields = tuple(dict.fromkeys((*DEFAULT_KEYWORD_FIELDS, *keyword_fields)))
        if self.local:
            # Local mode keeps a SQLite connection; one lock serializes this store's threads on it instead.
            target = {"path": str(path)} if path else {"location": ":memory:"}
            self._client = QdrantClient(**target, force_disable_check_same_thread=True)
        else:
            self._client = QdrantClient(url=url, location=location, api_key=api_key or None, timeout=timeout)
        self._lock = threading.RLock() if self.local else None
        self._dimensions: dict[str, int] = {}
        self._closed = False

    # -- VectorStore protocol ------------------------------------------------------------------------------------

    def ensure_collection(self, collection: str, dimension: int) -> None:
        """Creates the collection, or checks that the existing one has this dimension; adds missing payload indexes."""
        check_new_collection(collection, dimension)
        name = self._name(collection)
        with self._call(collection):
            if not self._client.collection_exists(name):
                try:
                    vector = models.VectorParams(size=dimension, distance=models.Distance.COSINE)
                    self._client.create_collection(name, vectors_config={VECTOR_NAME: vector})
                except (UnexpectedResponse, ValueError) as error:
                    # Another process created it between the check and the create: fall through to the checks.
                    if not self._client.collection_exists(name):
                        raise error
            info = self._client.get_collection(name)
            existing = self._dimension_of(collection, info)
            if existing != dimension:
                raise ValueError(f"collection {collection!r} has dimension {existing}, not {dimension}")
            indexed = set(info.payload_schema or {})
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Payload indexes have no effect")
                for field_name in self.keyword_fields:
                    if field_name not in indexed:
                        self._client.create_payload_index(
                            name, field_name, field_schema=models.PayloadSchemaType.KEYWORD, wait=True
                        )
            self._dimensions[collection] = dimension

    def upsert(self, collection: str, points: Sequence[VectorPoint]) -> None:
        dimension = self.dimension(collection)
        vectors = as_vectors(points, dimension)  # validate everything before writing
        converted = [self._to_point(point, vector) for point, vector in zip(points, vectors)]
        if not converted:
            return
        with self._call(collection):
            for start in range(0, len(converted), self.batch_size):
                self._client.upsert(self._name(collection), converted[start : start + self.batch_size], wait=True)

    def delete(self, collection: str, point_ids: Sequence[str]) -> None:
        self.dimension(collection)
        uuids = [point_uuid(point_id) for point_id in point_ids]
        if not uuids:
            return
        with self._call(collection):
            for start in range(0, len(uuids), self.batch_size):
                selector = models.PointIdsList(points=uuids[start : start + self.batch_size])
                self._client.delete(self._name(collection), points_selector=selector, wait=True)

    def delete_by_document(self, collection: str, doc_id: str) -> None:
        """Removes every point whose ``doc_ids`` list contains ``doc_id``, even if it also lists other documents."""
        self.dimension(collection)
        condition = models.FieldCondition(key=DOC_IDS_KEY, match=models.MatchValue(value=doc_id))
        selector = models.FilterSelector(filter=models.Filter(must=[condition]))
        with self._call(collection):
            self._client.delete(self._name(collection), points_selector=selector, wait=True)

    def search(
        self,
        collection: str,
        vector: Sequence[float] | np.ndarray,
        limit: int,
        must_match: dict[str, Any] | None = None,
        with_payload: bool = True,
    ) -> list[VectorHit]:
        """Nearest points by cosine similarity, best first; ``must_match`` values must equal (or be in) the field."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        query = as_vector(vector, self.dimension(collection), "query")
        query_filter = _match_filter(must_match)
        with self._call(collection):
            response = self._client.query_points(
                self._name(collection),
                query=query,
                using=VECTOR_NAME,
                query_filter=query_filter,
                limit=limit,
                with_payload=True if with_payload else [ID_KEY],
                with_vectors=False,
            )
        hits = []
        for scored in response.points:
            payload = dict(scored.payload or {})
            hits.append(VectorHit(point_id=payload.pop(ID_KEY), score=float(scored.score), payload=payload))
        return hits

    def count(self, collection: str) -> int:
        self.dimension(collection)
        with self._call(collection):
            return self._client.count(self._name(collection), exact=True).count

    def point_ids(self, collection: str) -> set[str]:
        self.dimension(collection)
        ids: set[str] = set()
        offset = None
        while True:
            with self._call(collection):
                records, offset = self._client.scroll(
                    self._name(collection),
                    limit=SCROLL_PAGE,
                    offset=offset,
                    with_payload=[ID_KEY],
                    with_vectors=False,
                )
            ids.update(record.payload[ID_KEY] for record in records if record.payload)
            if offset is None:
                return ids

    def vectors(self, collection: str, point_ids: Sequence[str]) -> dict[str, np.ndarray]:
        self.dimension(collection)
        ids = list(point_ids)
        found: dict[str, np.ndarray] = {}
        for start in range(0, len(ids), SCROLL_PAGE):
            with self._call(collection):
                records = self._client.retrieve(
                    self._name(collection),
                    ids=[point_uuid(point_id) for point_id in ids[start : start + SCROLL_PAGE]],
                    with_payload=[ID_KEY],
                    with_vectors=[VECTOR_NAME],
                )
            found.update((record.payload[ID_KEY], np.asarray(record.vector[VECTOR_NAME], dtype=np.float32))
                         for record in records if record.payload)
        return found

    def session(self, collection: str) -> ContextManager[None]:
        """Nothing to hold: each write is a request the server has applied when it returns."""
        self.dimension(collection)  # fail fast on a missing collection, as the embedded store does
        return nullcontext()

    def publish(self) -> None:
        """Nothing to do: every write waited for the server, so readers in other processes already see it."""
        self._check_open()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._client.close()

    # -- beyond the protocol -------------------------------------------------------------------------------------

    def collections(self) -> list[str]:
        """This store's collections (names without the prefix)."""
        with self._call(None):
            names = [description.name for description in self._client.get_collections().collections]
        return sorted(name[len(self.prefix) :] for name in names if name.startswith(self.prefix))

    def dimension(self, collection: str) -> int:
        if collection not in self._dimensions:
            check_collection_name(collection)
            with self._call(collection):
                if not self._client.collection_exists(self._name(collection)):
                    raise CollectionNotFoundError(f"collection {collection!r} does not exist ({self._where()})")
                info = self._client.get_collection(self._name(collection))
                self._dimensions[collection] = self._dimension_of(collection, info)
        return self._dimensions[collection]

    def payload_indexes(self, collection: str) -> dict[str, str]:
        """Indexed payload field -> index type (e.g. ``{"doc_ids": "keyword"}``)."""
        self.dimension(collection)
        with self._call(collection):
            schema = self._client.get_collection(self._name(collection)).payload_schema or {}
        return {field: str(getattr(info.data_type, "value", info.data_type)) for field, info in schema.items()}

    def drop_collection(self, collection: str) -> None:
        """Deletes the collection and its points (no error if it does not exist)."""
        check_collection_name(collection)
        with self._call(None):
            self._client.delete_collection(self._name(collection))
        self._dimensions.pop(collection, None)

    def drop_collections(self) -> None:
        """Deletes every collection under this store's prefix."""
        for collection in self.collections():
            self.drop_collection(collection)

    def __enter__(self) -> QdrantVectorStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------------------------------

    def _name(self, collection: str) -> str:
        return self.prefix + collection

    def _where(self) -> str:
        return "qdrant-client local mode" if self.local else "Qdrant server"

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("QdrantVectorStore is closed")

    @contextmanager
    def _call(self, collection: str | None) -> Iterator[None]:
        """Serializes local-mode calls and turns "collection not found" from any transport into one error type."""
        self._check_open()
        try:
            if self._lock is None:
                yield
            else:
                with self._lock:
                    yield
        except CollectionNotFoundError:
            raise
        except Exception as error:
            if collection is not None and _is_not_found(error):
                self._dimensions.pop(collection, None)  # dropped behind our back: forget the cached dimension
                raise CollectionNotFoundError(f"collection {collection!r} does not exist ({self._where()})") from error
            raise

    def _dimension_of(self, collection: str, info: models.CollectionInfo) -> int:
        vectors = info.config.params.vectors
        params = vectors.get(VECTOR_NAME) if isinstance(vectors, dict) else None
        if params is None:
            raise ValueError(f"collection {self._name(collection)!r} has no named vector {VECTOR_NAME!r}")
        return int(params.size)

    @staticmethod
    def _to_point(point: VectorPoint, vector: list[float]) -> models.PointStruct:
        if not isinstance(point.point_id, str) or not point.point_id:
            raise ValueError(f"point id must be a non-empty string, got {point.point_id!r}")
        if ID_KEY in point.payload:
            raise ValueError(f"point {point.point_id!r}: payload key {ID_KEY!r} is reserved for the point id")
        return models.PointStruct(
            id=point_uuid(point.point_id),
            vector={VECTOR_NAME: vector},
            payload={**point.payload, ID_KEY: point.point_id},
        )
