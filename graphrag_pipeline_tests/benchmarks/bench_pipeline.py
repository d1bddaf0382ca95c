"""Benchmark of a whole index build and of query latency on an eval set (not a test: run it by hand).

    python -m graphrag_pipeline_tests.benchmarks.bench_pipeline <eval-set-dir> [--use-extraction] [--work-dir D]
                                                                [--queries N] [--torch-threads N]

Builds the set's corpus with the stage functions the Dagster assets run, one at a time, and prints each stage's
wall time, the share of the build spent inside the embedder, then query latency percentiles per mode over the set's
questions. Model loads and first-query caches are timed apart: they are paid once per process, not per build or
per question.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from graphrag_pipeline.evaluation import eval_settings, load_questions, source_name_for
from graphrag_pipeline.lib.embedders import LocalEmbedder
from graphrag_pipeline.lib.stages import (
    StageReport,
    all_shards,
    build_communities,
    chunk_documents,
    embed_chunks,
    extract_elements,
    ingest_documents,
    summarize_communities,
    summarize_elements,
    sync_graph,
)
from graphrag_pipeline.lib.stores.protocols import Embedder
from graphrag_pipeline.lib.workspace import Workspace
from graphrag_pipeline.query import MODES, open_index


class TimedEmbedder:
    """An `Embedder` that forwards to another one and adds up the wall time spent in `embed`."""

    def __init__(self, inner: Embedder):
        self._inner = inner
        self.seconds = 0.0
        self.calls = 0
        self.texts = 0

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def dimension(self) -> int:
        return self._inner.dimension

    @property
    def max_tokens(self) -> int:
        return self._inner.max_tokens

    def count_tokens(self, text: str) -> int:
        return self._inner.count_tokens(text)

    def encode_offsets(self, text: str) -> list[tuple[int, int]]:
        # The chunker cuts on the embedder's own token boundaries (Workspace.tokenizer is the embedder).
        return self._inner.encode_offsets(text)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        started = time.perf_counter()
        try:
            return self._inner.embed(texts)
        finally:
            self.seconds += time.perf_counter() - started
            self.calls += 1
            self.texts += len(texts)


def stage_runs(ws: Workspace) -> list[Callable[[], StageReport]]:
    """The eight stages in lineage order, as `build_everything` runs them."""
    shards = list(all_shards(ws))
    return [
        lambda: ingest_documents(ws, shards),
        lambda: chunk_documents(ws, shards),
        lambda: embed_chunks(ws, shards),
        lambda: extract_elements(ws, shards),
        lambda: summarize_elements(ws),
        lambda: sync_graph(ws),
        lambda: build_communities(ws),
        lambda: summarize_communities(ws),
    ]


def compact_counts(counts: dict[str, int], limit: int = 6) -> str:
    shown = [f"{name}={value}" for name, value in counts.items() if value][:limit]
    return " ".join(shown)


def build_index(set_dir: Path, index_dir: Path, use_extraction: bool):
    settings = eval_settings(set_dir, index_dir, use_extraction)
    incremental = (index_dir / "state.sqlite").is_file()
    print(f"index {index_dir}" + (" (already built: this measures an incremental rebuild)" if incremental else ""))
    local = LocalEmbedder(settings.embedder)
    started = time.perf_counter()
    local.embed(["warm-up"])  # the model load is a one-time cost per process, kept out of the stage times
    print(f"embedding model load {time.perf_counter() - started:.1f} s (not counted below)\n")
    embedder = TimedEmbedder(local)
    workspace = Workspace(settings, embedder=embedder)

    print(f"{'stage':<22}{'wall s':>9}{'embed s':>9}  counts")
    build_seconds = 0.0
    try:
        for run in stage_runs(workspace):
            embed_before = embedder.seconds
            started = time.perf_counter()
            report = run()
            wall = time.perf_counter() - started
            build_seconds += wall
            print(f"{report.stage:<22}{wall:>9.1f}{embedder.seconds - embed_before:>9.1f}  "
                  f"{compact_counts(report.counts)}")
    finally:
        workspace.close()
    share = embedder.seconds / build_seconds if build_seconds else 0.0
    rate = embedder.texts / embedder.seconds if embedder.seconds else 0.0
    print(f"{'total':<22}{build_seconds:>9.1f}{embedder.seconds:>9.1f}  embedder share {share:.0%} "
          f"({embedder.texts} texts in {embedder.calls} calls, {rate:.0f} texts/s)")
    if not use_extraction:
        print("(extracted_elements includes loading the spaCy model)")
    return settings


def percentiles(values_ms: Sequence[float]) -> str:
    p50, p95 = np.percentile(values_ms, [50, 95])
    return f"{p50:>8.1f}{p95:>8.1f}{max(values_ms):>8.1f}"


def measure_queries(settings, questions: Sequence[str]) -> None:
    with open_index(settings=settings) as engine:
        started = time.perf_counter()
        engine.embedder.embed(["warm-up"])
        print(f"\nquery engine: embedder ready in {time.perf_counter() - started:.1f} s (shared with the build's model)")
        # The first question of each mode fills per-process caches (entity name index, graph adjacency).
        first_ms = {}
        for mode in MODES:
            started = time.perf_counter()
            engine.query(questions[0], mode=mode)
            first_ms[mode] = (time.perf_counter() - started) * 1000
        latencies: dict[str, list[float]] = {mode: [] for mode in MODES}
        steps: dict[str, dict[str, list[float]]] = {mode: defaultdict(list) for mode in MODES}
        for question in questions:
            for mode in MODES:
                started = time.perf_counter()
                response = engine.query(question, mode=mode)
                latencies[mode].append((time.perf_counter() - started) * 1000)
                for step, ms in response.timings_ms.items():
                    steps[mode][step].append(ms)
    print(f"query latency over {len(questions)} questions, ms (first query per mode excluded)")
    print(f"{'mode':<8}{'p50':>8}{'p95':>8}{'max':>8}{'first':>9}  steps p50/p95")
    for mode in MODES:
        breakdown = " · ".join(f"{step} {np.percentile(ms, 50):.1f}/{np.percentile(ms, 95):.1f}"
                               for step, ms in steps[mode].items())
        print(f"{mode:<8}{percentiles(latencies[mode])}{first_ms[mode]:>9.1f}  {breakdown}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("set_dir", type=Path, help="eval-set folder: corpus.jsonl, questions.jsonl[, extraction.jsonl]")
    parser.add_argument("--use-extraction", action="store_true", help="use the set's extraction.jsonl")
    parser.add_argument("--work-dir", type=Path, help="build the index here and keep it (default: a temporary folder)")
    parser.add_argument("--queries", type=int, default=None, help="time only the first N questions")
    parser.add_argument("--torch-threads", type=int, default=None,
                        help="torch intra-op threads (default: torch's choice, one per core)")
    args = parser.parse_args()
    if not (args.set_dir / "corpus.jsonl").is_file():
        parser.error(f"{args.set_dir / 'corpus.jsonl'} is missing: not an eval-set folder")
    if args.queries is not None and args.queries < 1:
        parser.error("--queries must be at least 1")
    questions = [q.question for q in load_questions(args.set_dir, source_name_for(args.set_dir))][: args.queries]
    if args.torch_threads is not None:
        torch.set_num_threads(args.torch_threads)
    # Other processes competing for the cores change these numbers a lot (see the load average).
    print(f"eval set {args.set_dir} · {'shared extraction' if args.use_extraction else 'offline extractor'} · "
          f"{os.cpu_count()} cores, torch threads {torch.get_num_threads()}, "
          f"load average {os.getloadavg()[0]:.1f}")

    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as scratch:
        index_dir = args.work_dir or Path(scratch) / "index"
        settings = build_index(args.set_dir, index_dir, args.use_extraction)
        measure_queries(settings, questions)


if __name__ == "__main__":
    main()
