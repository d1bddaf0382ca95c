"""``index.context`` latency on a built index (not a test: run it by hand).

    python -m graphrag_pipeline_tests.benchmarks.bench_context [--index-dir .graphrag/index] [--repeats 20]

Asks for the incident context of every catalog service of the index (by name, and as the headline question), after
one warm-up call (the first call builds the name index and aboutness, shared by queries): p50 and p95 in ms.
"""

from __future__ import annotations

import argparse
import statistics
import time

from graphrag_pipeline.query import open_index

HEADLINE = "Alert on {name}: which services depend on it, who owns them, and which runbooks apply?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index-dir", default=None)
    parser.add_argument("--config", default=None)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    with open_index(args.config, index_dir=args.index_dir) as index:
        services = sorted({e.name for e in index.graph.list_entities(limit=100_000) if e.type == "Service"})
        started = time.perf_counter()
        index.context(services[0])
        print(f"first call (builds the lookups): {(time.perf_counter() - started) * 1000:.0f} ms")
        for label, subjects in (("by name", services), ("headline question", [HEADLINE.format(name=s)
                                                                              for s in services])):
            timings = []
            for _ in range(args.repeats):
                for subject in subjects:
                    started = time.perf_counter()
                    index.context(subject)
                    timings.append((time.perf_counter() - started) * 1000)
            timings.sort()
            print(f"{label}: {len(subjects)} services × {args.repeats}: p50 {statistics.median(timings):.1f} ms, "
                  f"p95 {timings[int(0.95 * (len(timings) - 1))]:.1f} ms")


if __name__ == "__main__":
    main()
