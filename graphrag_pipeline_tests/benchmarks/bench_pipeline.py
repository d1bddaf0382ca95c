"""Benchmark of a whole index build and of query latency on an eval set (not a test: run it by hand).

    python -m graphrag_pipeline_tests.benchmarks.bench_pipeline <eval-set-dir> [--use-extraction] [--work-dir D]
                                                                [--queries N] [--runtime onnx|torch]

Builds the set's corpus with the stage functions the Dagster assets run, one at a time, and prints each stage's
wall time, items/s and the share spent inside the embedder; then, in the same process, the raw model throughput on
the same chunk texts (length-sorted batches, no pipeline around it), the ratios the speed targets are stated in,
the index's size on disk per chunk and the peak RSS; then a cold query as a new process (`python -m
graphrag_pipeline.cli query`) and query latency percentiles per mode over the set's questions. Model loads and
first-query caches are timed apart: they are paid once per process, not per build or per question.
"""

from __future__ import annotations

import argparse
import functools
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from graphrag_pipeline.evaluation import eval_settings, load_questions, source_name_for
from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core.config import load_settings
from graphrag_pipeline.lib.embed.embedders import configured_embedder
from graphrag_pipeline.lib.stages import STAGES, StageReport, all_shards
from graphrag_pipeline.lib.stages.embeddings import chunk_embedding_text
from graphrag_pipeline.lib.stores.protocols import Embedder
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
    return [functools.partial(stage.execute, ws, shards) for stage in STAGES]


def compact_counts(counts: dict[str, int], limit: int = 6) -> str:
    shown = [f"{name}={value}" for name, value in counts.items() if value][:limit]
    return " ".join(shown)


# The item each stage's rate is counted in (a report count), for items/s.
STAGE_ITEMS = {"raw_documents": "documents", "chunks": "chunks_written", "embeddings": "chunks",
               "extracted_elements": "chunks", "element_summaries": "merged_chunks", "graph": "entities",
               "communities": "communities", "community_summaries": "communities"}


def build_index(set_dir: Path, index_dir: Path, use_extraction: bool, raw_model_ratios: bool = True,
                runtime: str | None = None):
    """``raw_model_ratios``: time the model alone on every chunk text after the build (as long as embedding them);
    ``runtime``: the offline model's (default: the configured one)."""
    base = load_settings()
    if runtime is not None:
        base = base.with_overrides(embedder={"runtime": runtime})
    settings = eval_settings(set_dir, index_dir, use_extraction, base=base)
    incremental = (index_dir / "state.sqlite").is_file()
    print(f"index {index_dir}" + (" (already built: this measures an incremental rebuild)" if incremental else ""))
    local = configured_embedder(settings, query=False)
    started = time.perf_counter()
    local.embed(["warm-up"])  # the model load is a one-time cost per process, kept out of the stage times
    print(f"embedding model load ({settings.embedder.runtime}) {time.perf_counter() - started:.1f} s "
          "(not counted below)\n")
    embedder = TimedEmbedder(local)
    workspace = Workspace(settings, embedder=embedder)

    print(f"{'stage':<22}{'wall s':>9}{'embed s':>9}{'items/s':>10}  counts")
    build_seconds = 0.0
    stage_seconds, stage_embed_seconds = {}, {}
    try:
        for run in stage_runs(workspace):
            embed_before = embedder.seconds
            started = time.perf_counter()
            report = run()
            wall = time.perf_counter() - started
            build_seconds += wall
            stage_seconds[report.stage] = wall
            stage_embed_seconds[report.stage] = embedder.seconds - embed_before
            items = report.counts.get(STAGE_ITEMS.get(report.stage, ""), 0)
            print(f"{report.stage:<22}{wall:>9.1f}{stage_embed_seconds[report.stage]:>9.1f}"
                  f"{items / wall if wall else 0:>10.1f}  {compact_counts(report.counts)}")
            print(f"{'':<22}steps: " + " · ".join(f"{step} {s:.1f}" for step, s in report.seconds.items() if s >= 0.05))
        texts = chunk_texts(workspace)
    finally:
        workspace.close()
    share = embedder.seconds / build_seconds if build_seconds else 0.0
    rate = embedder.texts / embedder.seconds if embedder.seconds else 0.0
    print(f"{'total':<22}{build_seconds:>9.1f}{embedder.seconds:>9.1f}  embedder share {share:.0%} "
          f"({embedder.texts} texts in {embedder.calls} calls, {rate:.0f} texts/s)")
    if not use_extraction:
        print("(extracted_elements includes loading the spaCy model)")
    # The models' inference is the floor; the target is for what the pipeline adds around it: every stage but the
    # chunk embeddings and (without a shipped extraction) the NER of extracted_elements, less the embedder's time.
    inference = stage_seconds["embeddings"] + (0.0 if use_extraction else stage_seconds["extracted_elements"])
    others = build_seconds - inference - (embedder.seconds - stage_embed_seconds["embeddings"])
    print(f"stages other than chunk embedding, NER and the embedder: {others:.1f} s = "
          f"{others / stage_seconds['embeddings']:.2f} of the chunk-embedding stage")
    if raw_model_ratios:
        print_ratios(local, texts, build_seconds, stage_seconds["embeddings"], index_dir)
    return settings


def chunk_texts(ws: Workspace) -> list[str]:
    """Every chunk as the embeddings stage gives it to the model."""
    shards = list(all_shards(ws))
    titles = {d.doc_id: d.title for d in ws.state.documents(shards)}
    return [chunk_embedding_text(titles[c.doc_id], c) for c in ws.state.chunks(shards)]


def print_ratios(model: Embedder, texts: Sequence[str], build_seconds: float, embedding_stage_seconds: float,
                 index_dir: Path) -> None:
    """The model alone on the chunk texts, right after the build on the same machine, and the target ratios."""
    ordered = sorted(texts, key=len)
    started = time.perf_counter()
    for start in range(0, len(ordered), 512):
        model.embed(ordered[start : start + 512])
    raw_seconds = time.perf_counter() - started
    raw_rate, stage_rate = len(texts) / raw_seconds, len(texts) / embedding_stage_seconds
    on_disk = du(index_dir)
    print(f"\nraw model on the {len(texts)} chunk texts (length-sorted batches): {raw_seconds:.1f} s, "
          f"{raw_rate:.1f} chunks/s")
    print(f"chunk-embedding stage: {stage_rate:.1f} chunks/s = {stage_rate / raw_rate:.2f} of the raw model")
    print(f"full build / chunk-embedding stage: {build_seconds / embedding_stage_seconds:.2f}x")
    print(f"index on disk: {on_disk / 1e6:.1f} MB = {on_disk / 1e3 / max(len(texts), 1):.1f} KB per chunk "
          f"({', '.join(f'{p.name} {du(p) / 1e6:.1f} MB' for p in sorted(index_dir.iterdir()) if du(p) > 1e5)})")
    print(f"peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


def du(path: Path) -> int:
    """Bytes allocated on disk under ``path`` (sparse files count what they hold)."""
    files = [path] if path.is_file() else [f for f in path.rglob("*") if f.is_file()]
    return sum(f.stat().st_blocks * 512 for f in files)


def cold_query(settings, question: str) -> None:
    """A new process asks one question, as a user at a shell does: interpreter start, imports, model, answer."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "graphrag_pipeline.cli", "--index-dir", settings.index_dir, "query",
                    question], check=True, capture_output=True)
    print(f"\ncold CLI query (new process, first answer): {time.perf_counter() - started:.2f} s")


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
    parser.add_argument("--runtime", choices=("onnx", "torch"), default=None,
                        help="the offline model's runtime (default: the configured one, embedder.runtime)")
    args = parser.parse_args()
    if not (args.set_dir / "corpus.jsonl").is_file():
        parser.error(f"{args.set_dir / 'corpus.jsonl'} is missing: not an eval-set folder")
    if args.queries is not None and args.queries < 1:
        parser.error("--queries must be at least 1")
    questions = [q.question for q in load_questions(args.set_dir, source_name_for(args.set_dir))][: args.queries]
    # Other processes competing for the cores change these numbers a lot (see the load average).
    print(f"eval set {args.set_dir} · {'shared extraction' if args.use_extraction else 'offline extractor'} · "
          f"{os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}")

    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as scratch:
        index_dir = args.work_dir or Path(scratch) / "index"
        settings = build_index(args.set_dir, index_dir, args.use_extraction, runtime=args.runtime)
        cold_query(settings, questions[0])
        measure_queries(settings, questions)


if __name__ == "__main__":
    main()
