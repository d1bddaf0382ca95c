"""Stage 1, `raw_documents`: read every configured source into the document table."""

from __future__ import annotations

import dataclasses
import json
from typing import Iterable

from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core.ids import stable_shard
from graphrag_pipeline.lib.core.models import Quarantined
from graphrag_pipeline.lib.sources.reader import STAGE as SOURCES_STAGE
from graphrag_pipeline.lib.sources.reader import ReadContext, SourceScan
from graphrag_pipeline.lib.sources.registry import read_source
from graphrag_pipeline.lib.stages.report import StageReport
from graphrag_pipeline.lib.stores.state.sql import SOURCE_EXTRACTION_PAYLOADS


def ingest_documents(ws: Workspace, shards: Iterable[int]) -> StageReport:
    """Read every configured source, keep the documents of `shards`, and record new, changed and deleted ones."""
    report = StageReport("raw_documents")
    shard_set = set(shards)
    count = ws.settings.shard_count
    progress = ws.progress(report.stage, "read sources", len(ws.settings.sources))
    for source in ws.settings.sources:
        known = ws.state.document_hashes(shard_set, source=source.name)
        context = ReadContext(shards=frozenset(shard_set), marks=ws.state, shard_count=count, known=known)
        with report.timed("read"):
            scan = without_oversized(read_source(source, context), source.max_document_bytes)
        in_shards = [d for d in scan.documents if stable_shard(d.doc_id, count) in shard_set]
        changed = [d for d in in_shards if known.get(d.doc_id) != d.content_hash]
        seen = {doc_id: h for doc_id, h in scan.hashes.items() if stable_shard(doc_id, count) in shard_set}
        # What the shards hold: the documents read, and the unchanged ones a reader need not return (see ReadContext).
        present = {d.doc_id for d in in_shards} | {
            doc_id for doc_id, h in seen.items() if known.get(doc_id) == h and doc_id not in scan.withdrawn}
        quarantined_ids = {q.item_id for q in scan.quarantined}
        # ``hashes`` lists every item the source holds (an incremental read returns only the modified documents);
        # an item that failed to read this time is not deleted either: keep its last good version, unless the reader
        # withdrew it (a link out of its folder, unreadable access groups, over the size limit).
        deleted = sorted((set(known) - set(scan.hashes) - quarantined_ids) | (set(known) & scan.withdrawn))
        with report.timed("write"):
            if changed:
                ws.state.upsert_documents(changed, {d.doc_id: stable_shard(d.doc_id, count) for d in changed})
            if deleted:
                ws.state.delete_documents(deleted)
            extractions = {k: v for k, v in scan.extractions.items() if k in present}
            if extractions:
                ws.state.write_payloads(SOURCE_EXTRACTION_PAYLOADS,
                                        {doc_id: ("", json.dumps(record)) for doc_id, record in extractions.items()})
            # Problems are re-reported on every read: forget the old verdicts on changed and deleted items, then
            # record today's.
            ws.state.clear_quarantine(SOURCES_STAGE, [d.doc_id for d in changed] + deleted)
            if scan.quarantined:
                ws.state.quarantine(scan.quarantined)
            ws.state.record_seen_sources(shard_set, seen, {d: stable_shard(d, count) for d in seen}, source.name)
        new_ids = {d.doc_id for d in changed} - set(known)
        report.counts[f"{source.name}.documents"] = len(present)
        report.counts.update({f"{source.name}.{name}": value for name, value in scan.counts.items()})
        report.counts["documents"] = report.counts.get("documents", 0) + len(present)
        report.counts["new"] = report.counts.get("new", 0) + len(new_ids)
        report.counts["changed"] = report.counts.get("changed", 0) + len(changed) - len(new_ids)
        report.counts["unchanged"] = report.counts.get("unchanged", 0) + len(present) - len(changed)
        report.counts["deleted"] = report.counts.get("deleted", 0) + len(deleted)
        report.counts["quarantined"] = report.counts.get("quarantined", 0) + len(scan.quarantined)
        report.sample += [{"doc_id": d.doc_id, "title": d.title, "chars": len(d.text)} for d in changed[:5]]
        # What this run brought the index up to date with, for the UI's staleness report.
        if scan.revision:
            report.notes.append(f"{source.name} read at git revision {scan.revision}")
        report.notes += [f"new {d}" for d in sorted(new_ids)[:STALENESS_LISTED]]
        report.notes += [f"changed {d.doc_id}" for d in changed if d.doc_id not in new_ids][:STALENESS_LISTED]
        report.notes += [f"deleted {d}" for d in deleted[:STALENESS_LISTED]]
        report.notes += [f"quarantined {q.item_id}: {q.reason}" for q in scan.quarantined[:10]]
        progress.advance()
    return report


def without_oversized(scan: SourceScan, max_bytes: int) -> SourceScan:
    """The scan with documents of more than ``max_bytes`` of UTF-8 text quarantined and withdrawn instead (every
    kind's limit; a folder reader does not even read such files)."""
    oversized = {d.doc_id: size for d in scan.documents if (size := _bytes_over(d.text, max_bytes)) is not None}
    if not oversized:
        return scan
    problems = tuple(
        Quarantined(SOURCES_STAGE, doc_id, f"over max_document_bytes: {size} bytes of text, more than the source's "
                                           f"limit ({max_bytes}); not indexed")
        for doc_id, size in oversized.items()
    )
    return dataclasses.replace(
        scan,
        documents=tuple(d for d in scan.documents if d.doc_id not in oversized),
        quarantined=scan.quarantined + problems,
        extractions={k: v for k, v in scan.extractions.items() if k not in oversized},
        withdrawn=scan.withdrawn | set(oversized),
    )


def _bytes_over(text: str, limit: int) -> int | None:
    """The UTF-8 size of ``text`` when it is over ``limit``, else None."""
    if 4 * len(text) <= limit:  # a character is at most 4 bytes: most texts are decided without encoding them
        return None
    size = len(text.encode("utf-8"))
    return size if size > limit else None


STALENESS_LISTED = 20  # documents named per kind of change in a run's notes (the counts are always complete)
