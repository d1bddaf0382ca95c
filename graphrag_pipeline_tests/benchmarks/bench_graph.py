"""Benchmark of the embedded graph store on a synthetic power-law graph (not a test: run it by hand).

    python -m graphrag_pipeline_tests.benchmarks.bench_graph [--entities 100000] [--relationships 300000]

Prints write rates, the cold adjacency build, and latency percentiles of interactive 2-hop traversals.
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from graphrag_pipeline.lib.core.ids import entity_id, relationship_id
from graphrag_pipeline.lib.core.models import Entity, Relationship
from graphrag_pipeline.lib.stores.embedded_graph import EmbeddedGraphStore
from graphrag_pipeline.query.traversal import spread_activation

BATCH = 10_000


def synthetic_entities(count: int, rng: np.random.Generator) -> list[Entity]:
    types = ("PERSON", "ORGANIZATION", "TECHNOLOGY", "CONCEPT", "Service")
    mention_counts = rng.zipf(2.0, size=count)
    return [
        Entity(
            entity_id=entity_id(f"entity {i}"),
            name=f"Entity {i}",
            canonical=f"entity {i}",
            type=types[i % len(types)],
            description=f"Synthetic entity number {i}, mentioned {int(mention_counts[i])} times.",
            mention_count=int(mention_counts[i]),
            chunk_ids=tuple(f"chunk-{(i * 7 + k) % 50_000:06d}" for k in range(3)),
            doc_ids=(f"doc-{i % 5_000:05d}",),
        )
        for i in range(count)
    ]


def synthetic_relationships(entity_ids: list[str], count: int, rng: np.random.Generator) -> list[Relationship]:
    """Endpoints drawn with probability ∝ rank^-0.8: a few hubs with thousands of edges, a long tail of leaves."""
    entity_count = len(entity_ids)
    popularity = np.arange(1, entity_count + 1, dtype=np.float64) ** -0.8
    popularity /= popularity.sum()
    # Shuffle which entities are hubs so that hubs are not simply the first ones.
    order = rng.permutation(entity_count)
    sources = order[rng.choice(entity_count, size=count, p=popularity)]
    targets = order[rng.choice(entity_count, size=count, p=popularity)]
    weights = 1.0 + rng.exponential(1.5, size=count)
    types = ("RELATED_TO", "DEPENDS_ON", "OWNED_BY", "DOCUMENTED_IN")
    relationships = []
    for i, (source, target, weight) in enumerate(zip(sources, targets, weights)):
        if source == target:
            target = (target + 1) % entity_count
        source_id, target_id, rtype = entity_ids[source], entity_ids[target], types[i % len(types)]
        relationships.append(
            Relationship(
                # The index keeps parallel relationships of one type apart, as distinct chunks' evidence would.
                relationship_id=relationship_id(source_id, rtype, f"{target_id}#{i}"),
                source_id=source_id,
                target_id=target_id,
                type=rtype,
                description=f"synthetic relationship {i}",
                weight=float(round(weight, 3)),
                chunk_ids=(f"chunk-{i % 50_000:06d}",),
                doc_ids=(f"doc-{i % 5_000:05d}",),
            )
        )
    return relationships


def timed_batches(label: str, items: list, write: Callable[[list], None]) -> None:
    start = time.perf_counter()
    for offset in range(0, len(items), BATCH):
        write(items[offset : offset + BATCH])
    elapsed = time.perf_counter() - start
    print(f"{label:<34} {len(items):>9,} in {elapsed:6.2f} s  = {len(items) / elapsed:>10,.0f} /s")


def percentiles(samples_ms: list[float]) -> str:
    p50, p95, p99 = np.percentile(samples_ms, [50, 95, 99])
    return f"p50 {p50:6.2f} ms  p95 {p95:6.2f} ms  p99 {p99:6.2f} ms  max {max(samples_ms):6.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entities", type=int, default=100_000)
    parser.add_argument("--relationships", type=int, default=300_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)

    entities = synthetic_entities(args.entities, rng)
    entity_ids = [e.entity_id for e in entities]
    relationships = synthetic_relationships(entity_ids, args.relationships, rng)
    mentions = {
        f"chunk-{c:06d}": [entity_ids[i] for i in rng.choice(args.entities, size=5, replace=False)]
        for c in range(50_000)
    }
    mention_items = list(mentions.items())

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "graph.sqlite"
        with EmbeddedGraphStore(path) as store:
            timed_batches("upsert_entities", entities, store.upsert_entities)
            timed_batches("upsert_relationships", relationships, store.upsert_relationships)
            timed_batches("set_chunk_mentions (chunks)", mention_items, lambda b: store.set_chunk_mentions(dict(b)))
            timed_batches("re-upsert_relationships (no-op)", relationships, store.upsert_relationships)
            first_relationship = relationships[:1]
            # An agent process holds no corpus objects; keeping them would inflate garbage-collection pauses.
            del entities, relationships, mentions, mention_items
            gc.collect()

            start = time.perf_counter()
            spread_activation(store, {entity_ids[0]: 1.0}, max_hops=0)  # the first traversal builds the adjacency
            print(f"{'cold adjacency build':<34} {time.perf_counter() - start:6.2f} s")

            position = {eid: i for i, eid in enumerate(entity_ids)}
            degree = np.zeros(args.entities, dtype=np.int64)
            for a, b, _ in store.weighted_edges():
                degree[position[a]] += 1
                degree[position[b]] += 1
            print(f"{'distinct neighbours':<34} max {degree.max():,}  median {int(np.median(degree))}  "
                  f"isolated {(degree == 0).sum():,}")

            def run_queries(label: str, pick_seeds: Callable[[], list[str]]) -> None:
                latencies, reached = [], []
                for _ in range(args.queries):
                    seeds = {seed: 1.0 for seed in pick_seeds()}
                    start = time.perf_counter()
                    hits = spread_activation(store, seeds, max_hops=2, decay=0.5, fanout=50)
                    latencies.append((time.perf_counter() - start) * 1000)
                    reached.append(len(hits))
                print(f"{label:<34} {percentiles(latencies)}  (median {int(np.median(reached))} hits)")

            hubs = [entity_ids[i] for i in np.argsort(-degree)[:100]]
            run_queries("2-hop, 3 random seeds", lambda: [entity_ids[i] for i in rng.choice(args.entities, 3)])
            run_queries("2-hop, 2 random + 1 top-100 hub",
                        lambda: [entity_ids[i] for i in rng.choice(args.entities, 2)] + [str(rng.choice(hubs))])

            latencies = []
            for _ in range(args.queries):
                hits = spread_activation(store, {entity_ids[i]: 1.0 for i in rng.choice(args.entities, 3)}, max_hops=2)
                top = [hit.entity_id for hit in hits[:50]]
                start = time.perf_counter()
                store.get_entities(top)
                store.relationships_between(top)
                store.chunks_of_entities(top[:10])
                latencies.append((time.perf_counter() - start) * 1000)
            print(f"{'context fetch for 50 hits':<34} {percentiles(latencies)}")

            with EmbeddedGraphStore(path, read_only=True) as reader:
                spread_activation(reader, {entity_ids[0]: 1.0}, max_hops=2)
                store.upsert_relationships(first_relationship)
                start = time.perf_counter()
                spread_activation(reader, {entity_ids[0]: 1.0}, max_hops=2)
                print(f"{'reader rebuild after foreign write':<34} {time.perf_counter() - start:6.2f} s")
        print(f"{'file size':<34} {path.stat().st_size / 2**20:6.1f} MiB")


if __name__ == "__main__":
    main()
