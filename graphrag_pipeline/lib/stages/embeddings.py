"""Stage 3, `embeddings`: chunk vectors in the `chunks` collection."""

from __future__ import annotations

from typing import Iterable

from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core.ids import stable_shard
from graphrag_pipeline.lib.core.models import Chunk
from graphrag_pipeline.lib.stages.report import StageReport, accounted
from graphrag_pipeline.lib.stages.vectors import reconcile_collection, sync_points
from graphrag_pipeline.lib.stores.protocols import CHUNKS

EMBEDDING_CONTEXT_TOKENS = 32  # room for the title and heading path a chunk is embedded with


def chunk_embedding_text(title: str, chunk: Chunk) -> str:
    """What the embedder sees for a chunk: its document title and heading path give the passage its context."""
    context = [title] if title else []
    context += [h for h in chunk.headings if h and h != title]
    return "\n".join([" > ".join(context), chunk.text]) if context else chunk.text


@accounted
def embed_chunks(ws: Workspace, shards: Iterable[int]) -> StageReport:
    report = StageReport("embeddings")
    # Shards whose vectors the store lost are rebuilt with these: their chunks are unchanged, so nothing else would
    # ask for them again.
    shard_set = set(shards) | reconcile_collection(ws, CHUNKS, report)
    with report.timed("select"):
        chunks = ws.state.chunks(shard_set)
        documents = {d.doc_id: d for d in ws.state.documents(shard_set)}
    wanted = {}
    for chunk in chunks:
        doc = documents[chunk.doc_id]
        payload = {"doc_ids": [chunk.doc_id], "source": doc.source, "title": doc.title}
        shard = stable_shard(chunk.doc_id, ws.settings.shard_count)
        wanted[chunk.chunk_id] = (shard, chunk_embedding_text(doc.title, chunk), payload)
    sync_points(ws, CHUNKS, wanted, shard_set, report)
    report.counts["chunks"] = len(chunks)
    report.counts["dimension"] = ws.embedding_dimension
    report.sample = [{"chunk_id": c.chunk_id, "title": documents[c.doc_id].title} for c in chunks[:5]]
    return report
