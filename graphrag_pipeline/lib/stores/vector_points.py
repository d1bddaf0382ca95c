"""What every vector store shares: how points are stored (the named vector, the payload keys) and which arguments
are accepted, so the embedded store and a Qdrant server behave alike without importing each other."""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from graphrag_pipeline.lib.core.errors import GraphRAGError
from graphrag_pipeline.lib.core.models import VectorPoint

VECTOR_NAME = "dense"
ID_KEY = "_id"  # payload key holding the pipeline's own point id
DOC_IDS_KEY = "doc_ids"

_COLLECTION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


class CollectionNotFoundError(GraphRAGError, KeyError):
    """The collection was never created (writer) or is not in the published version (reader)."""

    kind = "unavailable"


def check_collection_name(collection: str) -> None:
    # The name becomes a directory name: no separators, no dot-files, nothing a shell would trip over.
    if not _COLLECTION_NAME.match(collection):
        raise ValueError(f"invalid collection name {collection!r}: use letters, digits, '_', '-', '.' (max 128)")


def check_new_collection(collection: str, dimension: int) -> None:
    """The arguments of ``ensure_collection`` every vector store accepts."""
    check_collection_name(collection)
    if dimension < 1:
        raise ValueError(f"dimension must be positive, got {dimension}")


def as_vector(vector: Sequence[float] | np.ndarray, dimension: int, what: str) -> list[float]:
    array = np.asarray(vector, dtype=np.float32)
    if array.shape != (dimension,):
        raise ValueError(f"{what}: expected a vector of dimension {dimension}, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{what}: vector contains NaN or infinity")
    if not np.any(array):
        raise ValueError(f"{what}: the zero vector has no cosine similarity")
    return array.tolist()


def as_vectors(points: Sequence[VectorPoint], dimension: int) -> list[list[float]]:
    """The points' vectors as ``as_vector`` gives each, checked as one array: a collection's upsert converts tens of
    thousands at a time, and a check per vector cost twice as much (0.30 against 0.16 s for 10k 384-d vectors). A
    batch that fails a check is checked again point by point, so the error names the point as ``as_vector`` does."""
    if not points:
        return []
    try:
        array = np.asarray([point.vector for point in points], dtype=np.float32)
    except (ValueError, TypeError):  # vectors of different lengths, or not of numbers
        array = None
    if (array is None or array.shape != (len(points), dimension) or not np.isfinite(array).all()
            or not array.any(axis=1).all()):
        return [as_vector(point.vector, dimension, f"point {point.point_id!r}") for point in points]
    return array.tolist()
