"""The eight pipeline stages as plain functions over a `Workspace`.

Dagster assets are thin wrappers around these; the eval command and tests call them directly. Every stage diffs what
it should produce against what was produced last time (content hashes), does only the difference, and returns a
`StageReport` whose counts, timings and sample rows become materialization metadata.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from graphrag_pipeline.lib.chunking import chunk_document
from graphrag_pipeline.lib.communities import (
    community_content_hash,
    detect_communities,
    summarize_community_extractively,
)
from graphrag_pipeline.lib.config import PipelineSettings
from graphrag_pipeline.lib.ids import content_hash, stable_shard
from graphrag_pipeline.lib.merge import (
    LLM_INPUT_DESCRIPTION_CHARS,
    LLM_INPUT_DESCRIPTIONS,
    DEFAULT_LIMITS,
    capped_descriptions,
    element_payload,
    entity_from_payload,
    merge_extractions,
    relationship_from_payload,
)
from graphrag_pipeline.lib.models import Chunk, Community, CommunitySummary, Entity, Relationship, VectorPoint
from graphrag_pipeline.lib.sources.reader import STAGE as SOURCES_STAGE
from graphrag_pipeline.lib.sources.reader import ReadContext
from graphrag_pipeline.lib.sources.registry import read_source
from graphrag_pipeline.lib.stores.protocols import CHUNKS, COMMUNITIES, ENTITIES
from graphrag_pipeline.lib.workspace import Workspace

GLOBAL_SHARD = -1  # indexed_points shard for collections that are not partitioned (entities, communities)
EMBEDDING_CONTEXT_TOKENS = 32
# Texts per embed-and-upsert round: large enough for the model's own batching, small enough that progress moves and a
# killed run keeps most of its work (each round is cached and recorded).
EMBEDDING_BATCH = 512
EXTRACTION_BATCH = 128
COMMUNITY_EMBEDDING_CHARS = 800  # title, top entities and the strongest facts: what a global question matches


@dataclass
class StageReport:
    stage: str
    counts: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    sample: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    usage: dict[str, float] = field(default_factory=dict)  # model calls, cache hits, tokens, cost of this stage

    @contextmanager
    def timed(self, step: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[step] = round(self.seconds.get(step, 0.0) + time.perf_counter() - started, 3)

    @property
    def total_seconds(self) -> float:
        return round(sum(self.seconds.values()), 3)


def uses_remote_models(settings: PipelineSettings) -> bool:
    return (settings.extraction.extractor in ("llm", "hybrid") or settings.summaries.summarizer == "llm"
            or settings.embedder.provider != "local")


def accounted(stage: Callable[..., StageReport]) -> Callable[..., StageReport]:
    """Put in the stage's report what it spent on model calls (when the configuration uses any remote model):
    calls, cache hits, tokens and estimated cost, as a difference, so a workspace shared by stages reports each."""

    @functools.wraps(stage)
    def run(ws: Workspace, *args: Any) -> StageReport:
        before = ws.usage.as_metadata()
        report = stage(ws, *args)
        if uses_remote_models(ws.settings):
            after = ws.usage.as_metadata()
            report.usage = {key: value if key == "llm_budget_usd" else round(value - before.get(key, 0), 6)
                            for key, value in after.items()}
        return report

    return run


def chunk_embedding_text(title: str, chunk: Chunk) -> str:
    """What the embedder sees for a chunk: its document title and heading path give the passage its context."""
    context = [title] if title else []
    context += [h for h in chunk.headings if h and h != title]
    return "\n".join([" > ".join(context), chunk.text]) if context else chunk.text


# --- 1. raw_documents ------------------------------------------------------------------------------------------------

def ingest_documents(ws: Workspace, shards: Iterable[int]) -> StageReport:
    """Read every configured source, keep the documents of `shards`, and record new, changed and deleted ones."""
    report = StageReport("raw_documents")
    shard_set = set(shards)
    count = ws.settings.shard_count
    context = ReadContext(shards=frozenset(shard_set), marks=ws.state)
    progress = ws.progress(report.stage, "read sources", len(ws.settings.sources))
    for source in ws.settings.sources:
        with report.timed("read"):
            scan = read_source(source, context)
        in_shards = [d for d in scan.documents if stable_shard(d.doc_id, count) in shard_set]
        known = ws.state.document_hashes(shard_set, source=source.name)
        changed = [d for d in in_shards if known.get(d.doc_id) != d.content_hash]
        present = {d.doc_id for d in in_shards}
        quarantined_ids = {q.item_id for q in scan.quarantined}
        # ``hashes`` lists every item the source holds (an incremental read returns only the modified documents);
        # an item that failed to read this time is not deleted either: keep its last good version.
        deleted = sorted(set(known) - set(scan.hashes) - quarantined_ids)
        with report.timed("write"):
            if changed:
                ws.state.upsert_documents(changed, {d.doc_id: stable_shard(d.doc_id, count) for d in changed})
            if deleted:
                ws.state.delete_documents(deleted)
            extractions = {k: v for k, v in scan.extractions.items() if k in present}
            if extractions:
                ws.state.store_source_extractions(extractions)
            # Problems are re-reported on every read: forget the old verdicts on changed files, then record today's.
            ws.state.clear_quarantine(SOURCES_STAGE, [d.doc_id for d in changed])
            if scan.quarantined:
                ws.state.quarantine(scan.quarantined)
            seen = {doc_id: h for doc_id, h in scan.hashes.items() if stable_shard(doc_id, count) in shard_set}
            ws.state.record_seen_sources(shard_set, seen, {d: stable_shard(d, count) for d in seen}, source.name)
        new_ids = {d.doc_id for d in changed} - set(known)
        report.counts[f"{source.name}.documents"] = len(in_shards)
        report.counts.update({f"{source.name}.{name}": value for name, value in scan.counts.items()})
        report.counts["documents"] = report.counts.get("documents", 0) + len(in_shards)
        report.counts["new"] = report.counts.get("new", 0) + len(new_ids)
        report.counts["changed"] = report.counts.get("changed", 0) + len(changed) - len(new_ids)
        report.counts["unchanged"] = report.counts.get("unchanged", 0) + len(in_shards) - len(changed)
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


STALENESS_LISTED = 20  # documents named per kind of change in a run's notes (the counts are always complete)


# --- 2. chunks -------------------------------------------------------------------------------------------------------

def chunk_documents(ws: Workspace, shards: Iterable[int]) -> StageReport:
    report = StageReport("chunks")
    shard_set = set(shards)
    config = ws.settings.chunking
    # Room for the title and heading path the chunk is embedded with (see chunk_embedding_text).
    size = min(config.size, ws.embedder.max_tokens - EMBEDDING_CONTEXT_TOKENS)
    overlap = min(config.overlap, size // 4)
    key = content_hash(config.strategy, str(size), str(overlap), ws.embedder.name)
    with report.timed("select"):
        documents = ws.state.documents_to_chunk(shard_set, key)
    produced = 0
    tokenizer = ws.tokenizer
    progress = ws.progress(report.stage, "chunk documents", len(documents))
    with report.timed("chunk"):
        for doc in documents:
            chunks = chunk_document(doc, strategy=config.strategy, size=size, overlap=overlap, tokenizer=tokenizer)
            ws.state.replace_chunks(doc, stable_shard(doc.doc_id, ws.settings.shard_count), chunks, key)
            produced += len(chunks)
            if len(report.sample) < 5 and chunks:
                report.sample.append({"chunk_id": chunks[0].chunk_id, "doc_id": doc.doc_id,
                                      "tokens": chunks[0].token_count, "text": chunks[0].text[:80]})
            progress.advance()
    report.counts.update(documents_rechunked=len(documents), chunks_written=produced,
                         chunk_size=size, chunk_overlap=overlap)
    return report


# --- 3. embeddings ---------------------------------------------------------------------------------------------------

def embed_texts_cached(ws: Workspace, texts: Sequence[str], report: StageReport) -> np.ndarray:
    """Embed with the persistent cache: a text the model has seen before costs a lookup, not an inference."""
    hashes = [content_hash(t) for t in texts]
    cached = ws.state.cached_embeddings(ws.embedder.name, hashes)
    missing = {h: t for h, t in zip(hashes, texts) if h not in cached}
    if missing:
        with report.timed("embed"):
            vectors = ws.embedder.embed(list(missing.values()))
        fresh = dict(zip(missing.keys(), vectors))
        ws.state.cache_embeddings(ws.embedder.name, fresh)
        cached.update(fresh)
    report.counts["embedded"] = report.counts.get("embedded", 0) + len(missing)
    report.counts["embedding_cache_hits"] = report.counts.get("embedding_cache_hits", 0) + len(texts) - len(missing)
    if not texts:
        return np.zeros((0, ws.embedding_dimension), dtype=np.float32)
    return np.stack([cached[h] for h in hashes])


def sync_points(
    ws: Workspace,
    collection: str,
    wanted: dict[str, tuple[int, str, dict[str, Any]]],  # point id -> (shard, text to embed, payload)
    shards: set[int] | None,
    report: StageReport,
) -> None:
    """Make `collection` (restricted to `shards`) hold exactly `wanted`, embedding only what is new or changed."""
    report.counts.setdefault("embedded", 0)
    report.counts.setdefault("embedding_cache_hits", 0)
    indexed = ws.state.indexed_points(collection, shards)
    keys = {pid: content_hash(text, json.dumps(payload, sort_keys=True)) for pid, (_, text, payload) in wanted.items()}
    stale = sorted(pid for pid, key in keys.items() if indexed.get(pid) != key)
    removed = sorted(set(indexed) - set(wanted))
    ws.vector_store.ensure_collection(collection, ws.embedding_dimension)
    progress = ws.progress(report.stage, f"embed {collection}", len(stale))
    for start in range(0, len(stale), EMBEDDING_BATCH):
        batch = stale[start : start + EMBEDDING_BATCH]
        vectors = embed_texts_cached(ws, [wanted[pid][1] for pid in batch], report)
        with report.timed("upsert"):
            ws.vector_store.upsert(
                collection, [VectorPoint(pid, vec, wanted[pid][2]) for pid, vec in zip(batch, vectors)]
            )
        ws.state.record_indexed_points(collection, {pid: (wanted[pid][0], keys[pid]) for pid in batch}, [])
        progress.advance(len(batch))
    if removed:
        with report.timed("delete"):
            ws.vector_store.delete(collection, removed)
        ws.state.record_indexed_points(collection, {}, removed)
    with report.timed("publish"):
        ws.vector_store.publish()
    report.counts[f"{collection}_upserted"] = len(stale)
    report.counts[f"{collection}_deleted"] = len(removed)
    report.counts[f"{collection}_unchanged"] = len(wanted) - len(stale)


@accounted
def embed_chunks(ws: Workspace, shards: Iterable[int]) -> StageReport:
    report = StageReport("embeddings")
    shard_set = set(shards)
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


# --- 4. extracted_elements -------------------------------------------------------------------------------------------

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
            results, quarantined = ws.extract(batch)
            ws.state.store_extractions(key, results)
            report.counts["extracted"] = report.counts.get("extracted", 0) + len(results)
            ws.state.clear_quarantine("extraction", [e.chunk_id for e in results])  # an earlier failure now read
            if quarantined:
                ws.state.quarantine(quarantined)
                report.counts["quarantined"] = report.counts.get("quarantined", 0) + len(quarantined)
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


# --- 5. element_summaries --------------------------------------------------------------------------------------------

@accounted
def summarize_elements(ws: Workspace) -> StageReport:
    """Merge all current extractions into entities and relationships; store only what changed."""
    report = StageReport("element_summaries")
    by_llm = ws.settings.summaries.summarizer == "llm"
    with report.timed("prune"):
        report.counts["pruned_extractions"] = ws.state.prune_extractions()
    with report.timed("merge"):
        entities, relationships = merge_extractions(
            ((doc_id, extraction) for doc_id, _, extraction in ws.state.live_extractions(ws.extractor_key)),
            ws.settings.ontology,
            ws.settings.extraction.aliases,
            # The model reads every description it is to combine; elements it does not summarize are capped after.
            description_limits=(LLM_INPUT_DESCRIPTIONS, LLM_INPUT_DESCRIPTION_CHARS) if by_llm else DEFAULT_LIMITS,
        )
    if by_llm:
        with report.timed("llm_summaries"):
            entities, relationships = summarize_descriptions_by_llm(ws, entities, relationships, report)
    with report.timed("store"):
        for kind, elements in (("entity", entities), ("relationship", relationships)):
            previous = ws.state.element_hashes(kind)
            payloads = {_element_id(e): element_payload(e) for e in elements}
            upserts = {eid: hp for eid, hp in payloads.items() if previous.get(eid) != hp[0]}
            removed = sorted(set(previous) - set(payloads))
            ws.state.replace_elements(kind, upserts, removed)
            report.counts[f"{kind}_total"] = len(payloads)
            report.counts[f"{kind}_changed"] = len(upserts)
            report.counts[f"{kind}_removed"] = len(removed)
    report.sample = [
        {"entity": e.name, "type": e.type, "mentions": e.mention_count, "documents": len(e.doc_ids)}
        for e in sorted(entities, key=lambda e: (-e.mention_count, e.name))[:10]
    ]
    return report


def summarize_descriptions_by_llm(
    ws: Workspace, entities: list[Entity], relationships: list[Relationship], report: StageReport
) -> tuple[list[Entity], list[Relationship]]:
    """Elements with many or long merged descriptions get one description written by the model (cached, so an
    unchanged element costs nothing); a failed call keeps the merged text."""
    from graphrag_pipeline.lib.llm.summaries import needs_llm_summary, summarize_element_descriptions

    config = ws.settings.summaries
    names = {e.entity_id: e.name for e in entities}

    def label(element: Entity | Relationship) -> str:
        if isinstance(element, Entity):
            return f"{element.name} ({element.type})"
        return f"{names.get(element.source_id, '?')} {element.type} {names.get(element.target_id, '?')}"

    todo = [e for e in (*entities, *relationships) if needs_llm_summary(e.description.split("\n"), config)]
    written = ws.llm.map(lambda e: summarize_element_descriptions(ws.llm, label(e), e.description.split("\n")), todo)
    replaced = {_element_id(e): text for e, text in zip(todo, written) if text}
    report.counts["llm_summarized"] = len(replaced)
    report.counts["llm_summary_failures"] = len(todo) - len(replaced)

    def updated(element):
        text = replaced.get(_element_id(element)) or capped_descriptions(element.description.split("\n"))
        return dataclasses.replace(element, description=text)

    return [updated(e) for e in entities], [updated(r) for r in relationships]


def _element_id(element: Entity | Relationship) -> str:
    return element.entity_id if isinstance(element, Entity) else element.relationship_id


# --- 6. graph --------------------------------------------------------------------------------------------------------

@accounted
def sync_graph(ws: Workspace) -> StageReport:
    """Write changed entities, relationships and chunk mentions to the graph store, delete what disappeared, and
    index entity names for question linking."""
    report = StageReport("graph")
    graph = ws.graph_store
    with report.timed("diff"):
        current = {kind: ws.state.element_hashes(kind) for kind in ("entity", "relationship")}
        synced = {kind: ws.state.element_hashes(kind, table="synced") for kind in ("entity", "relationship")}
    changed = {k: sorted(e for e, h in current[k].items() if synced[k].get(e) != h) for k in current}
    removed = {k: sorted(set(synced[k]) - set(current[k])) for k in current}
    progress = ws.progress(report.stage, "write elements", len(changed["entity"]) + len(changed["relationship"]))
    with report.timed("write"):
        if removed["relationship"]:
            graph.delete_relationships(removed["relationship"])
        if removed["entity"]:
            graph.delete_entities(removed["entity"])
        for start in range(0, len(changed["entity"]), 5000):
            ids = changed["entity"][start : start + 5000]
            graph.upsert_entities([entity_from_payload(p) for p in ws.state.element_payloads("entity", ids).values()])
            progress.advance(len(ids))
        for start in range(0, len(changed["relationship"]), 5000):
            ids = changed["relationship"][start : start + 5000]
            graph.upsert_relationships(
                [relationship_from_payload(p) for p in ws.state.element_payloads("relationship", ids).values()]
            )
            progress.advance(len(ids))
        ws.state.record_synced("entity", {e: current["entity"][e] for e in changed["entity"]}, removed["entity"])
        ws.state.record_synced(
            "relationship", {r: current["relationship"][r] for r in changed["relationship"]}, removed["relationship"]
        )
    entities = {eid: entity_from_payload(p) for eid, p in ws.state.element_payloads("entity").items()}
    with report.timed("mentions"):
        _sync_mentions(ws, entities, report)
    wanted = {
        eid: (GLOBAL_SHARD, e.name, {"doc_ids": list(e.doc_ids[:200]), "name": e.name, "type": e.type})
        for eid, e in entities.items()
    }
    sync_points(ws, ENTITIES, wanted, None, report)
    stats = graph.stats()
    report.counts.update(
        entities=stats.entity_count,
        relationships=stats.relationship_count,
        entities_written=len(changed["entity"]),
        relationships_written=len(changed["relationship"]),
        entities_deleted=len(removed["entity"]),
        relationships_deleted=len(removed["relationship"]),
    )
    report.sample = [{"type": t, "entities": n} for t, n in sorted(stats.entity_types.items(), key=lambda kv: -kv[1])]
    return report


def _sync_mentions(ws: Workspace, entities: dict[str, Entity], report: StageReport) -> None:
    by_chunk: dict[str, list[str]] = defaultdict(list)
    for eid, entity in entities.items():
        for chunk_id in entity.chunk_ids:
            by_chunk[chunk_id].append(eid)
    current = {cid: content_hash(*sorted(eids)) for cid, eids in by_chunk.items()}
    synced = ws.state.element_hashes("mentions", table="synced")
    changed = {cid: sorted(by_chunk[cid]) for cid, h in current.items() if synced.get(cid) != h}
    removed = sorted(set(synced) - set(current))
    if removed:
        ws.graph_store.delete_chunks(removed)
    if changed:
        ws.graph_store.set_chunk_mentions(changed)
    ws.state.record_synced("mentions", {cid: current[cid] for cid in changed}, removed)
    report.counts["chunk_mentions_written"] = len(changed)


# --- 7. communities --------------------------------------------------------------------------------------------------

def build_communities(ws: Workspace) -> StageReport:
    report = StageReport("communities")
    config = ws.settings.communities
    with report.timed("edges"):
        edges = ws.graph_store.weighted_edges()
    progress = ws.progress(report.stage, "hierarchical Leiden over edges", len(edges))
    with report.timed("leiden"):
        communities = detect_communities(edges, max_cluster_size=config.max_cluster_size, seed=config.seed)
    progress.advance(len(edges))
    with report.timed("store"):
        ws.state.replace_communities({c.community_id: (c.level, json.dumps(c.to_dict())) for c in communities})
    levels: dict[int, int] = defaultdict(int)
    for community in communities:
        levels[community.level] += 1
    report.counts.update(communities=len(communities), levels=len(levels), edges=len(edges))
    report.sample = [{"level": level, "communities": n} for level, n in sorted(levels.items())]
    return report


def community_from_payload(data: dict) -> Community:
    return Community(data["community_id"], data["level"], data["parent_id"], tuple(data["entity_ids"]),
                     tuple(data.get("child_ids", ())))


# --- 8. community_summaries ------------------------------------------------------------------------------------------

@accounted
def summarize_communities(ws: Workspace) -> StageReport:
    """Summarize only communities whose membership or member content changed, and index the summaries."""
    from graphrag_pipeline.lib.llm.summaries import report_version

    report = StageReport("community_summaries")
    config = ws.settings.communities
    communities = [
        c for c in (community_from_payload(p) for p in ws.state.community_payloads().values())
        if len(c.entity_ids) >= config.min_size
    ]
    entities = {eid: entity_from_payload(p) for eid, p in ws.state.element_payloads("entity").items()}
    descriptions = {eid: e.description for eid, e in entities.items()}
    previous = ws.state.community_summary_hashes()
    reported_by_llm = {
        c.community_id for c in communities
        if ws.settings.summaries.summarizer == "llm" and c.level in ws.settings.summaries.report_levels
    }
    # The summarizer (model, prompt version, input budget) is part of a summary's identity: changing it redoes
    # exactly the summaries it writes.
    summarizer_key = f"llm:{ws.settings.llm.provider}:{ws.settings.llm.model}:{report_version(ws.settings.summaries)}"
    hashes = {
        c.community_id: content_hash(community_content_hash(c, descriptions), summarizer_key)
        if c.community_id in reported_by_llm else community_content_hash(c, descriptions)
        for c in communities
    }
    todo = [c for c in communities if previous.get(c.community_id) != hashes[c.community_id]]
    removed = sorted(set(previous) - set(hashes))
    with report.timed("relationships"):
        relationships_of = _relationships_by_community(ws, todo)
    progress = ws.progress(report.stage, "summarize communities", len(todo))
    new_summaries = {}
    with report.timed("summarize"):
        for community in todo:
            new_summaries[community.community_id] = summarize_community_extractively(
                community,
                entities,
                relationships_of[community.community_id],
                top_entities=config.top_entities,
                max_sentences=config.summary_sentences,
            )
            progress.advance()
    by_llm = [c for c in todo if c.community_id in reported_by_llm]
    if by_llm:
        with report.timed("llm_reports"):
            reports = ws.llm.map(
                lambda c: _community_report(ws, c, new_summaries[c.community_id], entities, relationships_of), by_llm
            )
        for community, written in zip(by_llm, reports):
            if written is not None:
                new_summaries[community.community_id] = written
            else:  # stored under its extractive hash, so the next run asks the model again
                hashes[community.community_id] = community_content_hash(community, descriptions)
        report.counts["llm_reports"] = sum(r is not None for r in reports)
        report.counts["llm_report_failures"] = sum(r is None for r in reports)
    upserts = {cid: (hashes[cid], json.dumps(summary.to_dict())) for cid, summary in new_summaries.items()}
    ws.state.replace_community_summaries(upserts, removed)
    summaries = ws.state.community_summary_payloads()
    members = {c.community_id: c.entity_ids for c in communities}
    wanted = {
        cid: (GLOBAL_SHARD, f"{s['title']}\n{s['summary']}"[:COMMUNITY_EMBEDDING_CHARS],
              {"doc_ids": sorted({d for eid in members.get(cid, ()) for d in entities[eid].doc_ids})[:200],
               "level": s["level"], "title": s["title"]})
        for cid, s in summaries.items()
    }
    sync_points(ws, COMMUNITIES, wanted, None, report)
    report.counts.update(communities=len(communities), summarized=len(todo), reused=len(communities) - len(todo),
                         removed=len(removed))
    report.sample = [
        {"community": cid[:16], "level": json.loads(p)["level"], "title": json.loads(p)["title"][:80]}
        for cid, (_, p) in list(upserts.items())[:5]
    ]
    return report


def _community_report(
    ws: Workspace,
    community: Community,
    extractive: CommunitySummary,
    entities: dict[str, Entity],
    relationships_of: dict[str, list[Relationship]],
) -> CommunitySummary | None:
    """The model's report on a community (title, summary, findings, importance), or None to keep the extractive
    summary. Members and relationships are listed most important first, since the input is cut to a token budget."""
    from graphrag_pipeline.lib.llm.summaries import community_report

    members = sorted((entities[e] for e in community.entity_ids), key=lambda e: (-e.mention_count, e.name))
    internal = sorted(relationships_of[community.community_id], key=lambda r: (-r.weight, r.relationship_id))
    entities_text = "\n".join(f"{e.name} ({e.type}): {e.description}".replace("\n", " ") for e in members)
    relationships_text = "\n".join(
        f"{entities[r.source_id].name} -[{r.type}]-> {entities[r.target_id].name}: {r.description}".replace("\n", " ")
        for r in internal
    )
    written = community_report(ws.llm, extractive.title, entities_text, relationships_text,
                               max_input_tokens=ws.settings.summaries.report_max_input_tokens)
    if written is None:
        return None
    findings = [f"- {f.summary}" + (f" {f.explanation}" if f.explanation else "") for f in written.findings]
    return dataclasses.replace(
        extractive,
        title=written.title,
        summary="\n".join([written.summary, *findings]),
        rating=written.rating,
    )


def _relationships_by_community(ws: Workspace, communities: Sequence[Community]) -> dict[str, list[Relationship]]:
    """Group relationships under each community containing both ends, reading each relationship once."""
    owner: dict[str, list[str]] = defaultdict(list)
    for community in communities:
        for eid in community.entity_ids:
            owner[eid].append(community.community_id)
    grouped: dict[str, list[Relationship]] = {c.community_id: [] for c in communities}
    if not communities:
        return grouped
    for payload in ws.state.element_payloads("relationship").values():
        shared = set(owner.get(payload["source_id"], ())) & set(owner.get(payload["target_id"], ()))
        if shared:
            relationship = relationship_from_payload(payload)
            for cid in shared:
                grouped[cid].append(relationship)
    return grouped


def all_shards(ws: Workspace) -> range:
    return range(ws.settings.shard_count)


def build_everything(ws: Workspace, shards: Iterable[int] | None = None) -> list[StageReport]:
    """Run the eight stages in lineage order (what a full materialization does), returning each stage's report."""
    shard_list = list(all_shards(ws) if shards is None else shards)
    return [
        ingest_documents(ws, shard_list),
        chunk_documents(ws, shard_list),
        embed_chunks(ws, shard_list),
        extract_elements(ws, shard_list),
        summarize_elements(ws),
        sync_graph(ws),
        build_communities(ws),
        summarize_communities(ws),
    ]

