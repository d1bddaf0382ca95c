"""Keeping a vector collection equal to what a stage wants in it, embedding only what is new or changed (used by the
embeddings, graph and community-summaries stages)."""

from __future__ import annotations

import json
from contextlib import nullcontext
from typing import Any, Callable, Collection, Sequence

import numpy as np

from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core.faults import crash_point
from graphrag_pipeline.lib.core.ids import content_hash, short_hash
from graphrag_pipeline.lib.core.models import VectorPoint
from graphrag_pipeline.lib.stages.report import StageReport
from graphrag_pipeline.lib.stores.state.sql import UNSYNCED

GLOBAL_SHARD = -1  # indexed_points shard for collections that are not partitioned (entities, communities)
# Texts per embed-and-upsert round: large enough for the model's own batching, small enough that progress moves and a
# killed run keeps most of its work (each round is cached and recorded).
EMBEDDING_BATCH = 512


def embed_texts_cached(ws: Workspace, texts: Sequence[str], report: StageReport, keep_new: bool = True) -> np.ndarray:
    """Embed with the persistent cache: a text the model has seen before costs a lookup, not an inference.
    ``keep_new=False`` reads the cache but does not add the new texts' vectors to it."""
    hashes = [content_hash(t) for t in texts]
    cached = ws.state.cached_embeddings(ws.embedder.name, hashes)
    missing = {h: t for h, t in zip(hashes, texts) if h not in cached}
    if missing:
        with report.timed("embed"):
            vectors = ws.embedder.embed(list(missing.values()))
        fresh = dict(zip(missing.keys(), vectors))
        if keep_new:
            ws.state.cache_embeddings(ws.embedder.name, fresh)
        cached.update(fresh)
    report.counts["embedded"] = report.counts.get("embedded", 0) + len(missing)
    report.counts["embedding_cache_hits"] = report.counts.get("embedding_cache_hits", 0) + len(texts) - len(missing)
    if not texts:
        return np.zeros((0, ws.embedding_dimension), dtype=np.float32)
    return np.stack([cached[h] for h in hashes])


def reconcile_collection(ws: Workspace, collection: str, report: StageReport) -> set[int]:
    """Make the bookkeeping of ``collection`` agree with what the vector store holds: points the store lost (a
    deleted ``vectors/`` folder, a replaced server) are forgotten, so they are written again, and points it holds
    without bookkeeping are deleted. Returns the shards of the lost points. Counts decide whether ids are compared
    at all: after a clean run they agree, and a killed ``sync_points`` leaves the store holding more points than the
    bookkeeping names (written, not yet booked) or fewer (deleted, not yet unbooked), never both."""
    ws.vector_store.ensure_collection(collection, ws.embedding_dimension)
    if ws.vector_store.count(collection) == ws.state.indexed_point_count(collection):
        return set()
    booked = ws.state.indexed_point_shards(collection)
    stored = ws.vector_store.point_ids(collection)
    lost = sorted(set(booked) - stored)
    unbooked = sorted(stored - set(booked))
    if unbooked:
        ws.vector_store.delete(collection, unbooked)
    ws.state.record_indexed_points(collection, {}, lost)
    report.counts[f"{collection}_lost_points_restored"] = len(lost)
    report.counts[f"{collection}_unbooked_points_deleted"] = len(unbooked)
    return {booked[pid] for pid in lost}


def text_key(model: str, text: str) -> str:
    """What a point's vector was computed from: the model and the text."""
    return short_hash(model, text)


def point_key(model: str, text: str, payload: dict[str, Any]) -> str:
    """What a point was built from, as booked in ``indexed_points``: its ``text_key``, then its payload's hash, so a
    point whose payload alone changed is seen to keep its vector."""
    return f"{text_key(model, text)}:{short_hash(json.dumps(payload, sort_keys=True))}"


def built_from(booked: str | None, text: str) -> bool:
    """Whether a booked point key has this ``text_key`` (never for None, ``UNSYNCED`` or a key from before keys had
    two parts)."""
    return booked is not None and booked.partition(":")[0] == text and ":" in booked


def embedding_rounds(point_ids: Sequence[str], text_of: Callable[[str], str]) -> list[list[str]]:
    """The points in rounds of ``EMBEDDING_BATCH`` distinct texts, cut from the order of the texts' lengths (in
    characters; then text, then id). The embedder sorts a call's texts by tokens and pads each batch to its longest,
    so rounds of about one length pad far less than rounds in id order, whose every batch mixed one-line passages
    with full chunks; and points that share a text share a round, so a round embeds a full call's worth of texts
    however many points repeat them."""
    ordered = sorted(point_ids, key=lambda pid: (len(text_of(pid)), text_of(pid), pid))
    rounds: list[list[str]] = []
    texts: set[str] = set()
    for pid in ordered:
        text = text_of(pid)
        if not rounds or (text not in texts and len(texts) == EMBEDDING_BATCH):
            rounds.append([])
            texts = set()
        rounds[-1].append(pid)
        texts.add(text)
    return rounds


def sync_points(
    ws: Workspace,
    collection: str,
    wanted: dict[str, tuple[int, str, dict[str, Any]]],  # point id -> (shard, text to embed, payload)
    shards: set[int] | None,
    report: StageReport,
    vectors_of: Callable[[Sequence[str]], np.ndarray] | None = None,
    cache_new_texts: bool = True,
    only: Collection[str] | None = None,
) -> None:
    """Make `collection` (restricted to `shards`) hold exactly `wanted`, embedding only what is new or changed: a
    point whose text is unchanged keeps its stored vector, whatever happened to its payload. Each batch is booked
    ``UNSYNCED`` before it is written and with its key after (a corpus-wide collection's batches once their session
    has ended: see ``VectorStore.session``), so a rerun after a kill rewrites the unfinished batches
    and deletes what a killed run wrote for points that have since disappeared.
    A corpus-wide collection's points that nothing booked yet (a first build's tens of thousands) are not booked
    before they are written: the stage is their one writer, and were it killed after writing them, the collection
    would hold more points than its bookkeeping names, which the next run's ``reconcile_collection`` finds by count
    and deletes.
    ``vectors_of``: computes the vectors of a batch of point ids instead of embedding their texts, which then only
    decide (with the payload) whether a point changed. ``cache_new_texts=False``: the vectors of new texts are not
    added to the embedding cache (texts that only ever key one point: the store keeps their vector already).
    ``only``: the ids `wanted` is about; the collection's other points are left as they are."""
    report.counts.setdefault("embedded", 0)
    report.counts.setdefault("embedding_cache_hits", 0)
    report.counts.setdefault("vectors_kept", 0)
    reconcile_collection(ws, collection, report)
    indexed = ws.state.indexed_points(collection, shards)
    booked = indexed.keys()
    if only is not None:
        indexed = {pid: key for pid, key in indexed.items() if pid in only}
    keys = {pid: point_key(ws.embedder.name, text, payload) for pid, (_, text, payload) in wanted.items()}
    stale = [pid for pid, key in keys.items() if indexed.get(pid) != key]
    removed = sorted(set(indexed) - set(wanted))
    progress = ws.progress(report.stage, f"embed {collection}", len(stale))
    # A corpus-wide collection (``shards`` None) has one writer, this stage: its batches share one open collection,
    # whose writes are durable once the session has ended, and are booked then (``written``). The deletes come after
    # that booking: a killed run leaves either more points than bookkeeping or fewer, never both, which would hide
    # each other from the count that ``reconcile_collection`` checks first.
    in_session = shards is None and bool(stale)
    written: dict[str, tuple[int, str]] = {}
    with ws.vector_store.session(collection) if in_session else nullcontext():
        for batch in embedding_rounds(stale, lambda pid: wanted[pid][1]):
            same_text = [pid for pid in batch if built_from(indexed.get(pid), keys[pid].partition(":")[0])]
            kept = ws.vector_store.vectors(collection, same_text) if same_text else {}  # a first build has none
            report.counts["vectors_kept"] += len(kept)
            to_compute = [pid for pid in batch if pid not in kept]
            computed = {}
            if to_compute:
                computed = dict(zip(to_compute, vectors_of(to_compute) if vectors_of is not None else
                                    embed_texts_cached(ws, [wanted[pid][1] for pid in to_compute], report,
                                                       keep_new=cache_new_texts)))
            vectors = [kept[pid] if pid in kept else computed[pid] for pid in batch]
            unsynced = {pid: (wanted[pid][0], UNSYNCED) for pid in batch if shards is not None or pid in booked}
            if unsynced:
                ws.state.record_indexed_points(collection, unsynced, [])
            with report.timed("upsert"):
                ws.vector_store.upsert(
                    collection, [VectorPoint(pid, vec, wanted[pid][2]) for pid, vec in zip(batch, vectors)]
                )
            crash_point(f"{report.stage}:{collection}:upserted")
            keyed = {pid: (wanted[pid][0], keys[pid]) for pid in batch}
            if in_session:
                written.update(keyed)
            else:
                ws.state.record_indexed_points(collection, keyed, [])
            progress.advance(len(batch))
    if written:
        ws.state.record_indexed_points(collection, written, [])
    if removed:
        with report.timed("delete"):
            ws.vector_store.delete(collection, removed)
        crash_point(f"{report.stage}:{collection}:deleted")
        ws.state.record_indexed_points(collection, {}, removed)
    crash_point(f"{report.stage}:{collection}:before-publish")
    with report.timed("publish"):
        ws.vector_store.publish()
    report.counts[f"{collection}_upserted"] = len(stale)
    report.counts[f"{collection}_deleted"] = len(removed)
    report.counts[f"{collection}_unchanged"] = len(wanted) - len(stale)
