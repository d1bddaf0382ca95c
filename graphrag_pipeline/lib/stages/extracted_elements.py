"""Stage 4, `extracted_elements`: typed entity and relationship mentions per chunk."""

from __future__ import annotations

from typing import Iterable, Sequence

from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core.models import Chunk, ChunkExtraction
from graphrag_pipeline.lib.stages.report import StageReport, accounted

EXTRACTION_BATCH = 128


@accounted
def extract_elements(ws: Workspace, shards: Iterable[int]) -> StageReport:
    report = StageReport("extracted_elements")
    shard_set = set(shards)
    key = ws.extractor_key
    with report.timed("select"):
        chunks = ws.state.chunks(shard_set)
        done = ws.state.extractions([c.chunk_id for c in chunks], key)
        # A quarantined chunk is tried again (hybrid stores its spotter extraction meanwhile); a model answer that
        # was unusable comes back from the completion cache, so only failed calls cost anything twice.
        retry = {q.item_id for q in ws.state.quarantined("extraction")}
        todo = [c for c in chunks if c.chunk_id not in done or c.chunk_id in retry]
    progress = ws.progress(report.stage, "extract chunks", len(todo))
    with report.timed("extract"):
        for start in range(0, len(todo), EXTRACTION_BATCH):
            batch = todo[start : start + EXTRACTION_BATCH]
            results = extract_and_store(ws, batch, report)
            for extraction in results[: max(0, 5 - len(report.sample))]:
                report.sample.append({
                    "chunk_id": extraction.chunk_id,
                    "entities": ", ".join(f"{e.name} ({e.type})" for e in extraction.entities[:6]),
                    "relations": len(extraction.relations),
                })
            report.counts["entity_mentions"] = report.counts.get("entity_mentions", 0) + sum(
                len(e.entities) for e in results)
            report.counts["relation_mentions"] = report.counts.get("relation_mentions", 0) + sum(
                len(e.relations) for e in results)
            progress.advance(len(batch))
    report.counts.setdefault("extracted", 0)
    report.counts.update(chunks=len(chunks), cached=len(chunks) - len(todo))
    return report


def extract_and_store(ws: Workspace, chunks: Sequence[Chunk], report: StageReport) -> list[ChunkExtraction]:
    """Extract chunks under the current extractor key, clearing their earlier failures and quarantining new ones."""
    results, quarantined = ws.extract(chunks)
    if ws.settings.extraction.extractor == "llm" and not report.counts.get("extracted"):
        from graphrag_pipeline.lib.extract.llm import fail_if_model_unreachable

        fail_if_model_unreachable(chunks, quarantined)  # an empty graph would look like success
    ws.state.store_extractions(ws.extractor_key, results)
    report.counts["extracted"] = report.counts.get("extracted", 0) + len(results)
    ws.state.clear_quarantine("extraction", [e.chunk_id for e in results])  # an earlier failure now read
    if quarantined:
        ws.state.quarantine(quarantined)
        report.counts["quarantined"] = report.counts.get("quarantined", 0) + len(quarantined)
    return results
