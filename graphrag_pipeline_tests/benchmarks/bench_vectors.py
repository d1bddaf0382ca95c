"""Benchmark of the Edge vector store on random unit vectors (not a test: run it by hand).

    python -m graphrag_pipeline_tests.benchmarks.bench_vectors [--points 50000] [--dimension 384] [--threads 4]

Prints the upsert rate, the publish time (HNSW build), the reader's open time, search latency percentiles with and
without a payload filter, multi-threaded search throughput, and the cost of publishing a small incremental update.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from graphrag_pipeline.lib.core.models import VectorPoint
from graphrag_pipeline.lib.stores.edge_vectors import EdgeVectorReader, EdgeVectorStore

COLLECTION = "chunks"
DOCUMENTS = 5_000


def random_points(start: int, count: int, dimension: int, rng: np.random.Generator) -> list[VectorPoint]:
    vectors = rng.standard_normal((count, dimension)).astype(np.float32)
    return [
        VectorPoint(f"chunk-{i:07d}", vector, {"doc_ids": [f"doc-{i % DOCUMENTS:05d}"], "text": f"chunk {i}"})
        for i, vector in enumerate(vectors, start=start)
    ]


def percentiles(latencies: list[float]) -> str:
    p50, p95, p99 = np.percentile(np.array(latencies) * 1000, [50, 95, 99])
    return f"p50 {p50:.2f} ms, p95 {p95:.2f} ms, p99 {p99:.2f} ms"


def timed_searches(reader: EdgeVectorReader, queries: np.ndarray, filtered: bool) -> list[float]:
    latencies = []
    for i, query in enumerate(queries):
        must_match = {"doc_ids": f"doc-{i % DOCUMENTS:05d}"} if filtered else None
        started = time.perf_counter()
        reader.search(COLLECTION, query, limit=10, must_match=must_match)
        latencies.append(time.perf_counter() - started)
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, default=50_000)
    parser.add_argument("--dimension", type=int, default=384)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()
    rng = np.random.default_rng(0)

    with tempfile.TemporaryDirectory(prefix="bench-vectors-") as directory:
        root = Path(directory)
        store = EdgeVectorStore(root / "vectors")
        store.ensure_collection(COLLECTION, args.dimension)
        points = random_points(0, args.points, args.dimension, rng)

        started = time.perf_counter()
        with store.session(COLLECTION):
            for start in range(0, len(points), 5_000):
                store.upsert(COLLECTION, points[start : start + 5_000])
        elapsed = time.perf_counter() - started
        print(f"upsert: {args.points} points in {elapsed:.1f} s ({args.points / elapsed:,.0f} points/s)")

        started = time.perf_counter()
        store.publish()
        print(f"publish with optimize: {time.perf_counter() - started:.1f} s")

        started = time.perf_counter()
        reader = EdgeVectorReader(root / "vectors", scratch_dir=root)
        print(f"reader open (copy + load): {time.perf_counter() - started:.2f} s")

        queries = rng.standard_normal((args.queries, args.dimension)).astype(np.float32)
        timed_searches(reader, queries[:20], filtered=False)  # warm the page cache
        print(f"search top-10: {percentiles(timed_searches(reader, queries, filtered=False))}")
        print(f"search top-10 filtered on doc_ids: {percentiles(timed_searches(reader, queries, filtered=True))}")

        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=args.threads) as pool:
            list(pool.map(lambda query: reader.search(COLLECTION, query, limit=10), queries))
        elapsed = time.perf_counter() - started
        print(f"{args.threads} threads: {args.queries / elapsed:,.0f} searches/s")
        reader.close()

        store.upsert(COLLECTION, random_points(args.points, 500, args.dimension, rng))
        started = time.perf_counter()
        store.publish()
        print(f"publish after 500 more points: {time.perf_counter() - started:.1f} s")
        store.close()


if __name__ == "__main__":
    main()
