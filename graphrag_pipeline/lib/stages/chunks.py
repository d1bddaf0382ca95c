"""Stage 2, `chunks`: token-aware chunks of each new or changed document."""

from __future__ import annotations

from typing import Iterable, Iterator, Sequence

from graphrag_pipeline.lib.algorithms.chunking import ChunkLimitExceeded, chunk_document, document_token_spans
from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core.ids import content_hash, stable_shard
from graphrag_pipeline.lib.core.models import Document, Quarantined
from graphrag_pipeline.lib.stages.embeddings import EMBEDDING_CONTEXT_TOKENS
from graphrag_pipeline.lib.stages.report import StageReport


TOKENIZE_BATCH_CHARS = 1_000_000  # documents are tokenized together up to about this much text


def chunk_documents(ws: Workspace, shards: Iterable[int]) -> StageReport:
    report = StageReport("chunks")
    shard_set = set(shards)
    config = ws.settings.chunking
    # Room for the title and heading path the chunk is embedded with (see chunk_embedding_text).
    size = min(config.size, ws.embedder.max_tokens - EMBEDDING_CONTEXT_TOKENS)
    overlap = min(config.overlap, size // 4)
    limit = config.max_chunks_per_document
    # The limit is part of the key: raising it re-chunks the documents it stopped.
    key = content_hash(config.strategy, str(size), str(overlap), ws.embedder.name, f"max {limit}")
    with report.timed("select"):
        documents = ws.state.documents_to_chunk(shard_set, key)
    produced = quarantined = 0
    tokenizer = ws.tokenizer
    progress = ws.progress(report.stage, "chunk documents", len(documents))
    with report.timed("chunk"):
        # Verdicts are re-reached for every document chunked now.
        ws.state.clear_quarantine(report.stage, [doc.doc_id for doc in documents])
        for batch in _batches(documents, TOKENIZE_BATCH_CHARS):
            # Tokenized together: a fast tokenizer spreads a batch over the cores.
            spans = document_token_spans([doc.text for doc in batch], tokenizer, [doc.doc_id for doc in batch])
            chunked = []
            for doc, doc_spans in zip(batch, spans):
                try:
                    chunks = chunk_document(doc, strategy=config.strategy, size=size, overlap=overlap,
                                            max_chunks_per_document=limit, tokenizer=tokenizer, spans=doc_spans)
                except ChunkLimitExceeded as error:
                    # No chunks (earlier ones withdrawn with the rest of the old version) and the reason, recorded
                    # before the document is marked chunked; the run goes on.
                    ws.state.quarantine([Quarantined(report.stage, doc.doc_id, f"{error}; not indexed")])
                    chunks = []
                    quarantined += 1
                chunked.append((doc, stable_shard(doc.doc_id, ws.settings.shard_count), chunks))
                produced += len(chunks)
                if len(report.sample) < 5 and chunks:
                    report.sample.append({"chunk_id": chunks[0].chunk_id, "doc_id": doc.doc_id,
                                          "tokens": chunks[0].token_count, "text": chunks[0].text[:80]})
            ws.state.replace_chunks(chunked, key)
            progress.advance(len(chunked))
    report.counts.update(documents_rechunked=len(documents), chunks_written=produced, quarantined=quarantined,
                         chunk_size=size, chunk_overlap=overlap)
    return report


def _batches(documents: Sequence[Document], max_chars: int) -> Iterator[list[Document]]:
    """``documents`` in order, in runs of about ``max_chars`` characters (a longer document alone)."""
    batch: list[Document] = []
    chars = 0
    for doc in documents:
        batch.append(doc)
        chars += len(doc.text)
        if chars >= max_chars:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch
