"""Benchmark: the embedded Edge store vs qdrant-client (local mode, or a server) on random unit vectors.

    python -m graphrag_pipeline_tests.benchmarks.bench_vectors_qdrant [--points 20000] [--dimension 384]
        [--queries 300] [--qdrant-disk] [--skip-edge]

Not a test: run it by hand. For each backend it prints the upsert rate (through the ``VectorStore`` protocol, in
batches of 5,000 points), the time until the data is searchable (Edge: ``publish`` with HNSW build plus opening a
reader; Qdrant: nothing, ``publish`` is a no-op), and top-10 search latency p50/p95/p99 without and with a
``doc_ids`` filter. Qdrant runs in qdrant-client's local mode (in memory; ``--qdrant-disk`` for its SQLite-backed
on-disk mode, which commits every point and is much slower to write); when ``QDRANT_URL`` (and optionally
``QDRANT_API_KEY``) is set, a real server is measured as well, in a throw-away collection prefix.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np

from graphrag_pipeline.lib.core.models import VectorPoint
from graphrag_pipeline.lib.stores.edge_vectors import EdgeVectorReader, EdgeVectorStore
from graphrag_pipeline.lib.stores.qdrant_vectors import QdrantVectorStore

COLLECTION = "chunks"
DOCUMENTS = 2_000
WRITE_BATCH = 5_000
MAX_POINTS = 100_000

Search = Callable[..., object]


def random_points(count: int, dimension: int, rng: np.random.Generator) -> list[VectorPoint]:
    vectors = rng.standard_normal((count, dimension)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return [
        VectorPoint(f"chunk-{i:07d}", vector, {"doc_ids": [f"doc-{i % DOCUMENTS:05d}"], "source": "bench"})
        for i, vector in enumerate(vectors)
    ]


def percentiles(latencies: list[float]) -> str:
    p50, p95, p99 = np.percentile(np.array(latencies) * 1000, [50, 95, 99])
    return f"p50 {p50:7.2f} ms   p95 {p95:7.2f} ms   p99 {p99:7.2f} ms"


def timed_searches(search: Search, queries: np.ndarray, filtered: bool) -> list[float]:
    latencies = []
    for i, query in enumerate(queries):
        must_match = {"doc_ids": f"doc-{i % DOCUMENTS:05d}"} if filtered else None
        started = time.perf_counter()
        search(COLLECTION, query, limit=10, must_match=must_match)
        latencies.append(time.perf_counter() - started)
    return latencies


def timed_upsert(store: EdgeVectorStore | QdrantVectorStore, points: list[VectorPoint]) -> float:
    started = time.perf_counter()
    for start in range(0, len(points), WRITE_BATCH):
        store.upsert(COLLECTION, points[start : start + WRITE_BATCH])
    return time.perf_counter() - started


def report_searches(name: str, search: Search, queries: np.ndarray) -> None:
    timed_searches(search, queries[:10], filtered=False)  # warm-up
    print(f"  {name} search top-10:             {percentiles(timed_searches(search, queries, filtered=False))}")
    print(f"  {name} search top-10 + doc filter: {percentiles(timed_searches(search, queries, filtered=True))}")


def bench_edge(points: list[VectorPoint], queries: np.ndarray, dimension: int, root: Path) -> None:
    store = EdgeVectorStore(root / "edge")
    store.ensure_collection(COLLECTION, dimension)
    started = time.perf_counter()
    with store.session(COLLECTION):
        for start in range(0, len(points), WRITE_BATCH):
            store.upsert(COLLECTION, points[start : start + WRITE_BATCH])
    elapsed = time.perf_counter() - started
    print(f"edge: upsert {len(points):,} points in {elapsed:.1f} s ({len(points) / elapsed:,.0f} points/s)")
    started = time.perf_counter()
    store.publish()
    reader = EdgeVectorReader(root / "edge", scratch_dir=root)
    print(f"  edge searchable after publish (HNSW build) + reader open: {time.perf_counter() - started:.1f} s")
    assert reader.count(COLLECTION) == len(points)
    report_searches("edge", reader.search, queries)
    reader.close()
    store.close()


def bench_qdrant(name: str, store: QdrantVectorStore, points: list[VectorPoint], queries: np.ndarray, dim: int) -> None:
    store.ensure_collection(COLLECTION, dim)
    elapsed = timed_upsert(store, points)
    print(f"{name}: upsert {len(points):,} points in {elapsed:.1f} s ({len(points) / elapsed:,.0f} points/s)")
    started = time.perf_counter()
    store.publish()
    assert store.count(COLLECTION) == len(points)
    print(f"  {name} searchable after publish (no-op) + count: {time.perf_counter() - started:.2f} s")
    report_searches(name, store.search, queries)
    # Idempotency at scale: the same points again leave the same count.
    elapsed = timed_upsert(store, points[: min(len(points), 5_000)])
    assert store.count(COLLECTION) == len(points)
    print(f"  {name} re-upsert of {min(len(points), 5_000):,} unchanged points: {elapsed:.1f} s, count unchanged")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, default=20_000, help=f"chunks to index (at most {MAX_POINTS:,})")
    parser.add_argument("--dimension", type=int, default=384)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--qdrant-disk", action="store_true", help="also measure local mode on disk (slow writes)")
    parser.add_argument("--skip-edge", action="store_true")
    args = parser.parse_args()
    if not 1 <= args.points <= MAX_POINTS:
        parser.error(f"--points must be between 1 and {MAX_POINTS:,}")
    rng = np.random.default_rng(0)
    points = random_points(args.points, args.dimension, rng)
    queries = rng.standard_normal((args.queries, args.dimension)).astype(np.float32)
    print(f"{args.points:,} chunks, dimension {args.dimension}, {args.queries} queries, {os.cpu_count()} CPUs")

    with tempfile.TemporaryDirectory(prefix="bench-vectors-qdrant-") as directory:
        root = Path(directory)
        if not args.skip_edge:
            bench_edge(points, queries, args.dimension, root)
        with QdrantVectorStore(location=":memory:") as store:
            bench_qdrant("qdrant-local (memory)", store, points, queries, args.dimension)
        if args.qdrant_disk:
            with QdrantVectorStore(path=str(root / "qdrant")) as store:
                bench_qdrant("qdrant-local (disk)", store, points, queries, args.dimension)
        if os.environ.get("QDRANT_URL"):
            prefix = f"graphrag_bench_{uuid.uuid4().hex[:8]}_"
            with QdrantVectorStore(os.environ["QDRANT_URL"], os.environ.get("QDRANT_API_KEY"), prefix=prefix) as store:
                try:
                    bench_qdrant("qdrant-server", store, points, queries, args.dimension)
                finally:
                    store.drop_collections()


if __name__ == "__main__":
    main()
