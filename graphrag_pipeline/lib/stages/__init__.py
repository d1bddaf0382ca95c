"""The eight pipeline stages, one module each, as plain functions over a `Workspace`, and their order, declared once.

Dagster assets are thin wrappers around these (their names, partitioning and dependencies come from `STAGES`); the
eval and build commands and the tests call them directly. Every stage diffs what it should produce against what was
produced last time (content hashes), does only the difference, and returns a `StageReport` whose counts, timings and
sample rows become materialization metadata.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable, Iterable

from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core.memory import cycle_collector_paused
from graphrag_pipeline.lib.stages.chunks import chunk_documents
from graphrag_pipeline.lib.stages.communities import build_communities
from graphrag_pipeline.lib.stages.community_summaries import summarize_communities
from graphrag_pipeline.lib.stages.element_summaries import summarize_elements
from graphrag_pipeline.lib.stages.embeddings import embed_chunks
from graphrag_pipeline.lib.stages.extracted_elements import extract_elements
from graphrag_pipeline.lib.stages.graph import sync_graph
from graphrag_pipeline.lib.stages.ingest import ingest_documents
from graphrag_pipeline.lib.stages.report import StageReport, uses_remote_models


@dataclass(frozen=True)
class Stage:
    name: str  # the asset it materializes
    run: Callable[..., StageReport]  # (workspace, shards) for per-document stages, (workspace) for the others
    per_document: bool  # partitioned by shard; the others are corpus-wide
    reads: tuple[str, ...]  # the stages whose output it reads: its asset's dependencies

    def execute(self, ws: Workspace, shards: Iterable[int] = ()) -> StageReport:
        """Run the stage: a per-document one over ``shards`` (concurrent runs each own their shards' rows), a
        corpus-wide one alone among the index's writers, so concurrent runs take turns and the last one to run reads
        everything the per-document stages of all of them wrote.

        With the models in process, Python's cycle collector is paused meanwhile (``cycle_collector_paused``); a
        remote model's HTTP client leaves a few dozen objects in reference cycles per call (measured: 60 per httpx
        request), which a stage of a hundred thousand calls would keep until it ended, and such a stage waits on the
        network rather than on the collector."""
        with nullcontext() if uses_remote_models(ws.settings) else cycle_collector_paused():
            if self.per_document:
                return self.run(ws, list(shards))
            with ws.state.exclusive(CORPUS_WIDE_LOCK):
                return self.run(ws)


CORPUS_WIDE_LOCK = "graphrag corpus-wide stages"


# In lineage order.
STAGES: tuple[Stage, ...] = (
    Stage("raw_documents", ingest_documents, True, ()),
    Stage("chunks", chunk_documents, True, ("raw_documents",)),
    Stage("embeddings", embed_chunks, True, ("chunks",)),
    # Extraction reads the chunks; depending on embeddings too orders it after them in a run.
    Stage("extracted_elements", extract_elements, True, ("chunks", "embeddings")),
    Stage("element_summaries", summarize_elements, False, ("extracted_elements",)),
    Stage("graph", sync_graph, False, ("element_summaries",)),
    Stage("communities", build_communities, False, ("graph",)),
    Stage("community_summaries", summarize_communities, False, ("communities",)),
)
PER_DOCUMENT = tuple(s.name for s in STAGES if s.per_document)
CORPUS_WIDE = tuple(s.name for s in STAGES if not s.per_document)


def stage(name: str) -> Stage:
    return next(s for s in STAGES if s.name == name)


def all_shards(ws: Workspace) -> range:
    return range(ws.settings.shard_count)


def build_everything(ws: Workspace, shards: Iterable[int] | None = None) -> list[StageReport]:
    """Run every stage in lineage order (what a full materialization does), returning each stage's report."""
    shard_list = list(all_shards(ws) if shards is None else shards)
    return [s.execute(ws, shard_list) for s in STAGES]


__all__ = [
    "CORPUS_WIDE", "PER_DOCUMENT", "STAGES", "Stage", "StageReport", "all_shards", "build_everything", "stage",
    # each stage's function, for callers that run one stage by itself
    "build_communities", "chunk_documents", "embed_chunks", "extract_elements", "ingest_documents",
    "summarize_communities", "summarize_elements", "sync_graph",
]
