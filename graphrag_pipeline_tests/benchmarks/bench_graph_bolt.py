"""Benchmark of the Neo4j-protocol graph store against the embedded one (not a test: run it by hand).

    python -m graphrag_pipeline_tests.benchmarks.bench_graph_bolt [--entities 5000] [--relationships 15000]
    NEO4J_URI=bolt://… NEO4J_USER=… NEO4J_PASSWORD=… python -m … --neo4j   # a real Neo4j instead of ArcadeDB

Same synthetic power-law graph as ``bench_graph``; prints write rates (entities/s, relationships/s, no-op
re-upserts) and 2-hop traversal latency p50/p95 for the embedded store and for ``Neo4jGraphStore`` on ArcadeDB's
Bolt server (in a process of its own) or on the real Neo4j named by the environment. The defaults finish in about
two minutes on a small machine; the issue's figure is ``--entities 100000 --relationships 300000``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from graphrag_pipeline.lib.stores.embedded_graph import EmbeddedGraphStore
from graphrag_pipeline.lib.stores.neo4j_graph import Neo4jGraphStore
from graphrag_pipeline.lib.stores.protocols import GraphStore
from graphrag_pipeline.query.traversal import spread_activation
from graphrag_pipeline_tests.benchmarks.bench_graph import percentiles, synthetic_entities, synthetic_relationships


def timed(label: str, items: list, write: Callable[[list], None], batch: int) -> float:
    start = time.perf_counter()
    for offset in range(0, len(items), batch):
        write(items[offset : offset + batch])
        done, so_far = offset + batch, time.perf_counter() - start
        if done < len(items):  # a slow server at 100k items takes many minutes: show the rate as it goes
            print(f"    {label}: {done:,} in {so_far:.0f} s = {done / so_far:,.0f} /s", flush=True)
    elapsed = time.perf_counter() - start
    print(f"  {label:<32} {len(items):>9,} in {elapsed:7.2f} s = {len(items) / elapsed:>9,.0f} /s")
    return elapsed


def run(name: str, store: GraphStore, entities: list, relationships: list, args: argparse.Namespace) -> None:
    print(name)
    rng = np.random.default_rng(args.seed + 1)
    entity_ids = [entity.entity_id for entity in entities]
    timed("upsert_entities", entities, store.upsert_entities, args.batch)
    timed("upsert_relationships", relationships, store.upsert_relationships, args.batch)
    timed("re-upsert_relationships", relationships, store.upsert_relationships, args.batch)
    spread_activation(store, {entity_ids[0]: 1.0}, max_hops=2)  # warm-up (the embedded store builds its adjacency)
    latencies, reached = [], []
    for _ in range(args.queries):
        seeds = {entity_ids[i]: 1.0 for i in rng.choice(len(entity_ids), 3, replace=False)}
        start = time.perf_counter()
        hits = spread_activation(store, seeds, max_hops=2, decay=0.5, fanout=50)
        latencies.append((time.perf_counter() - start) * 1000)
        reached.append(len(hits))
    label = "2-hop traversal, 3 random seeds"
    print(f"  {label:<32} {percentiles(latencies)}  (median {int(np.median(reached))} hits)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entities", type=int, default=5_000)
    parser.add_argument("--relationships", type=int, default=15_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--batch", type=int, default=5_000, help="items per store call")
    parser.add_argument("--batch-size", type=int, default=1_000, help="rows per Bolt write transaction")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--neo4j", action="store_true", help="the real Neo4j of NEO4J_URI instead of ArcadeDB")
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    entities = synthetic_entities(args.entities, rng)
    relationships = synthetic_relationships([e.entity_id for e in entities], args.relationships, rng)
    print(f"{args.entities:,} entities, {args.relationships:,} relationships, {args.queries} traversals")

    with tempfile.TemporaryDirectory() as directory:
        with EmbeddedGraphStore(Path(directory) / "graph.sqlite") as embedded:
            run("embedded (SQLite)", embedded, entities, relationships, args)

    from graphrag_pipeline_tests.contract import bolt_server

    if args.neo4j:
        store = bolt_server.real_neo4j_graph_store(batch_size=args.batch_size)
        try:
            run(f"Neo4jGraphStore on {store.uri}", store, entities, relationships, args)
        finally:
            store.close()
        return
    # In a process of its own, as servers run: see bolt_server.arcadedb_bolt_server_process.
    start = time.perf_counter()
    with bolt_server.arcadedb_bolt_server_process() as server:
        store = Neo4jGraphStore(server.uri, server.user, server.password, server.create_database(),
                                batch_size=args.batch_size)
        name = f"Neo4jGraphStore on ArcadeDB Bolt (server start {time.perf_counter() - start:.1f} s)"
        try:
            run(name, store, entities, relationships, args)
        finally:
            store.close()


if __name__ == "__main__":
    main()
