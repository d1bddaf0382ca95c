"""The sample corpus built and queried on the embedded tier and on servers, side by side (not a test: run it by hand).

    python -m graphrag_pipeline_tests.benchmarks.bench_backends [--repeats N]
    NEO4J_URI=bolt://… NEO4J_USER=… NEO4J_PASSWORD=… python -m … --neo4j   # a real Neo4j instead of ArcadeDB

Builds `data/corpus` + `data/catalog` twice in this process with one loaded embedder: embedded (SQLite state, the
embedded graph, Qdrant Edge) and on servers (PostgreSQL state from the tests' throw-away PostgreSQL 18, ArcadeDB's Bolt
server in a process of its own, or with ``--neo4j`` the Neo4j that ``NEO4J_URI`` names, qdrant-client's local mode).
Prints each build's per-stage seconds, then query latency percentiles per mode over the same questions, and those of
incident contexts, with Bolt statements per question and per context on the servers; the time the server's read
transactions took by their first statement, the server's floor (a statement that reads nothing, and one that only lists
the relationships of each walk's seeds, the least a walk from them reads), and whether both indexes gave the same top
document for each question.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
from neo4j import GraphDatabase

from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core.config import load_settings
from graphrag_pipeline.lib.embed.embedders import configured_embedder
from graphrag_pipeline.lib.stages import build_everything
from graphrag_pipeline.lib.stores.neo4j_graph import ENTITY_LABEL, Neo4jGraphStore
from graphrag_pipeline.query import open_index
from graphrag_pipeline_tests.conftest import SAMPLE_CATALOG, SAMPLE_CORPUS
from graphrag_pipeline_tests.contract.bolt_server import (
    arcadedb_bolt_server_process,
    real_neo4j_graph_store,
    real_neo4j_settings,
)
from graphrag_pipeline_tests.postgres import embedded_server, throwaway_database

QUESTIONS = (
    "Prometheus cannot send alerts to Alertmanager: which runbook applies?",
    "Checkout Service is degraded. Which services does it depend on, and where are they documented?",
    "What to do when a pod is crash looping?",
    "Which runbook applies when etcd has no leader?",
    "Who owns the payment service?",
    "How does the frontend talk to the cart service?",
    "A node's disk array is degraded: what should I check?",
    "How is the OpenTelemetry collector configured in the demo?",
)
MODES = ("vector", "graph", "hybrid")
# Incident contexts (``index.context``): services of the sample catalog by name, and the headline question.
CONTEXT_SUBJECTS = ("payment", "checkout", "frontend", "cart", "currency",
                    "Alert on payment: which services depend on it, and who owns them?")
STATEMENT_LABEL = 100  # characters of a statement that name it in the timings
# The floor of a walk on the server: one statement that reads nothing, and one that lists each seed's relationships
# and their other ends, without aggregating, ordering or going a hop further.
NOTHING = "RETURN 1 AS one"
SEEDS_RELATIONSHIPS = (f"UNWIND $ids AS id MATCH (e:{ENTITY_LABEL} {{entity_id: id}})-[r]-(n:{ENTITY_LABEL}) "
                       "RETURN e.entity_id AS entity_id, n.entity_id AS other, r.relationship_id AS relationship_id, "
                       "r.weight AS weight")


@dataclass(frozen=True)
class BoltServer:
    uri: str
    user: str
    password: str
    database: str | None  # None: the server's default database


@contextmanager
def _bolt_server(real_neo4j: bool) -> Iterator[BoltServer]:
    """ArcadeDB's Bolt server in a process of its own, or (``real_neo4j``) the Neo4j that ``NEO4J_URI`` names (the
    tests' variables; its nodes of this store's labels are deleted first, as the tests do: point it at a disposable
    database). Asked for by a flag, since ``NEO4J_URI`` is also what a deployment's own configuration reads."""
    if not real_neo4j:
        with arcadedb_bolt_server_process() as child:
            yield BoltServer(child.uri, child.user, child.password, child.create_database("bench"))
        return
    real = real_neo4j_settings()
    if real is None:
        raise SystemExit("--neo4j needs NEO4J_URI (with NEO4J_USER, NEO4J_PASSWORD and NEO4J_DATABASE as the tests "
                         "read them)")
    real_neo4j_graph_store().close()  # the tests' store on it, which empties it first
    yield BoltServer(**real)


def _build(settings, embedder) -> dict[str, float]:
    with Workspace(settings, embedder=embedder) as workspace:
        started = time.perf_counter()
        reports = build_everything(workspace)
        total = time.perf_counter() - started
    return {**{r.stage: sum(r.seconds.values()) for r in reports}, "total": total}


class ReadCounter:
    """Counts the graph store's read transactions (one Bolt round trip each, or more when one runs several
    statements: ``statements`` counts those), and times each by the start of its first statement (``milliseconds``):
    what the server spends where."""

    def __init__(self) -> None:
        self.transactions = self.statements = 0
        self.milliseconds: dict[str, list[float]] = defaultdict(list)
        self.walk_seeds: list[list[str]] = []  # the seed ids of each walk statement, for the floor
        original = Neo4jGraphStore._read

        def counted(store, work):
            self.transactions += 1

            def counting_work(tx):
                run = tx.run
                first: list[str] = []

                def counted_run(cypher, *args, **kwargs):
                    self.statements += 1
                    parameters = args[0] if args else kwargs
                    if "seeds" in parameters:
                        self.walk_seeds.append([seed for seed, _ in parameters["seeds"]])
                    first.append(" ".join(cypher.split())[:STATEMENT_LABEL])
                    return run(cypher, *args, **kwargs)

                tx.run = counted_run
                started = time.perf_counter()
                try:
                    return work(tx)  # the store's reads consume their results inside the transaction
                finally:
                    if first:
                        self.milliseconds[first[0]].append((time.perf_counter() - started) * 1000)

            return original(store, counting_work)

        Neo4jGraphStore._read = counted


def _latencies(settings, embedder, questions, repeats: int, reads: ReadCounter,
               ) -> tuple[dict[str, list[float]], dict[str, list[int]], list[str], dict[str, dict[str, list[float]]]]:
    times: dict[str, list[float]] = {mode: [] for mode in (*MODES, "context")}
    steps: dict[str, dict[str, list[float]]] = {mode: defaultdict(list) for mode in MODES}
    round_trips: dict[str, list[int]] = {mode: [] for mode in (*MODES, "context")}
    tops = []
    with open_index(settings=settings, embedder=embedder) as index:
        index.query(questions[0])  # lookups built on the first question: paid once per process
        index.context(CONTEXT_SUBJECTS[0])
        reads.milliseconds.clear()
        reads.walk_seeds.clear()
        for _ in range(repeats):
            for question in questions:
                for mode in MODES:
                    before = reads.statements
                    started = time.perf_counter()
                    response = index.query(question, mode=mode)
                    times[mode].append((time.perf_counter() - started) * 1000)
                    round_trips[mode].append(reads.statements - before)
                    for step, ms in response.timings_ms.items():
                        steps[mode][step].append(ms)
                    if mode == "hybrid" and len(tops) < len(questions):
                        tops.append(response.results[0].doc_id if response.results else "")
            for subject in CONTEXT_SUBJECTS:
                before = reads.statements
                started = time.perf_counter()
                index.context(subject)
                times["context"].append((time.perf_counter() - started) * 1000)
                round_trips["context"].append(reads.statements - before)
    return times, round_trips, tops, steps


def _floor(bolt: BoltServer, walk_seeds: list[list[str]], repeats: int) -> dict[str, tuple[float, float]]:
    """Median milliseconds (and rows) of ``NOTHING`` and of ``SEEDS_RELATIONSHIPS`` for each walk's seeds, each run
    ``repeats`` times in a read transaction of its own, as the store runs its reads."""
    def rows_of(tx, cypher: str, parameters: dict) -> list:
        return list(tx.run(cypher, parameters))

    timings: dict[str, list[tuple[float, int]]] = defaultdict(list)
    with GraphDatabase.driver(bolt.uri, auth=(bolt.user, bolt.password)) as driver:
        for _ in range(repeats):
            for seeds in walk_seeds:
                for name, cypher, parameters in (("nothing", NOTHING, {}),
                                                 ("seeds", SEEDS_RELATIONSHIPS, {"ids": seeds})):
                    with driver.session(database=bolt.database) as session:
                        started = time.perf_counter()
                        rows = session.execute_read(rows_of, cypher, parameters)
                        timings[name].append(((time.perf_counter() - started) * 1000, len(rows)))
    return {name: (float(np.median([ms for ms, _ in values])), float(np.median([n for _, n in values])))
            for name, values in timings.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="times each question is asked per mode")
    parser.add_argument("--neo4j", action="store_true", help="the real Neo4j of NEO4J_URI instead of ArcadeDB")
    args = parser.parse_args()
    sources = [{"name": "t", "kind": "folder", "path": str(SAMPLE_CORPUS)},
               {"name": "sample-catalog", "kind": "catalog", "path": str(SAMPLE_CATALOG)}]
    base = load_settings(sources=sources)
    embedder = configured_embedder(base, query=False)
    embedder.embed(["warm up"])
    rows = {}
    reads = ReadCounter()
    # The Bolt server runs in a process of its own, as servers do: in this one, a collection of its JVM made JPype
    # collect all of this process's Python objects, 0.10-0.14 s every few walk statements.
    with tempfile.TemporaryDirectory(prefix="bench-backends-") as scratch, embedded_server() as server, \
            throwaway_database(server) as database, _bolt_server(args.neo4j) as bolt:
        embedded = base.with_overrides(index_dir=str(Path(scratch) / "embedded"))
        os.environ.update({
            "DATABASE_URL": f"postgresql://{server.user}:{server.password}@{server.host}:{server.port}/{database}",
            "NEO4J_PASSWORD": bolt.password})
        servers = base.with_overrides(index_dir=str(Path(scratch) / "servers"), backends={
            "state": "postgres", "graph": "neo4j", "vector": "qdrant",
            "neo4j": {"uri": bolt.uri, "user": bolt.user, "database": bolt.database},
            "qdrant": {"path": str(Path(scratch) / "qdrant")}})
        for name, settings in (("embedded", embedded), ("PostgreSQL + Bolt + qdrant-client", servers)):
            stages = _build(settings, embedder)
            rows[name] = (stages, *_latencies(settings, embedder, QUESTIONS, args.repeats, reads))
        floor = _floor(bolt, reads.walk_seeds, args.repeats)
    for name, (stages, times, round_trips, _, steps) in rows.items():
        print(f"\n{name}: build {stages.pop('total'):.1f} s — " + ", ".join(f"{k} {v:.1f}" for k, v in stages.items()))
        for mode, values in times.items():
            asked, each = ("contexts", "context") if mode == "context" else ("queries", "question")
            print(f"  {mode:7s} p50 {np.percentile(values, 50):7.1f} ms   p95 {np.percentile(values, 95):7.1f} ms"
                  f"   ({len(values)} {asked})   Bolt statements per {each}: median "
                  f"{np.median(round_trips[mode]):.0f}, max {max(round_trips[mode])}")
            if mode in steps:
                print("          steps p50: " + " · ".join(f"{step} {np.percentile(ms, 50):.1f}"
                                                          for step, ms in steps[mode].items()))
    print("\nBolt read transactions over the server's questions and contexts, by their first statement:")
    for label, values in sorted(reads.milliseconds.items(), key=lambda item: -sum(item[1])):
        print(f"  {len(values):5d} × median {np.median(values):6.1f} ms, {sum(values):8.0f} ms in all   {label}")
    print(f"  the server's floor: a statement that reads nothing, median {floor['nothing'][0]:.1f} ms; the seeds' "
          f"relationships of each walk ({len(reads.walk_seeds)} walks, median {floor['seeds'][1]:.0f} rows), "
          f"listed without aggregating, median {floor['seeds'][0]:.1f} ms")
    (_, _, _, first, _), (_, _, _, second, _) = rows.values()
    print(f"\nsame top hybrid document for {sum(a == b for a, b in zip(first, second))} of {len(first)} questions")


if __name__ == "__main__":
    main()
