"""Stage 8, `community_summaries`: summaries of changed communities in the `communities` collection."""

from __future__ import annotations

import dataclasses
import functools
from collections import defaultdict
from typing import Mapping, Sequence

import numpy as np

from graphrag_pipeline.lib.algorithms.communities import (
    SUMMARY_RULE_VERSION,
    community_content_hash,
    source_titles_of,
    summarize_community_extractively,
)
from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core.config import PipelineSettings
from graphrag_pipeline.lib.core.ids import content_hash, short_hash
from graphrag_pipeline.lib.core.models import Community, CommunitySummary, Entity, Relationship
from graphrag_pipeline.lib.stages.communities import community_from_payload
from graphrag_pipeline.lib.stages.embeddings import chunk_embedding_text
from graphrag_pipeline.lib.stages.incremental import Changes, unrestricted_sample
from graphrag_pipeline.lib.stages.report import StageReport, accounted
from graphrag_pipeline.lib.stages.vectors import GLOBAL_SHARD, embed_texts_cached, sync_points
from graphrag_pipeline.lib.stores.protocols import COMMUNITIES
from graphrag_pipeline.lib.stores.state.sql import (
    CAUGHT_UP_MARK,
    CHUNKS_REMOVED_MARK,
    COMMUNITY_PAYLOADS,
    COMMUNITY_SUMMARY_PAYLOADS,
    SOURCES_CHANGED_MARK,
    payload_json,
)

# A community's vector is the mean vector of the chunks where its members meet most (the first ones its summary
# cites), which the embeddings stage has already embedded. Embedding each summary's text instead cost about as much
# as embedding the corpus again and found no more gold documents among the top communities' citations
# (benchmarks/bench_global.py); adding the title's embedding, or more chunks, found fewer. The figures are in
# docs/benchmarks.md.
COMMUNITY_VECTOR_CHUNKS = 3
COMMUNITY_EMBEDDING_CHARS = 800  # a summary citing no chunk is embedded from its text, up to this much of it


@accounted
def summarize_communities(ws: Workspace) -> StageReport:
    """Summarize only communities whose membership or member content changed, and index the summaries."""
    report = StageReport("community_summaries")
    taken_in = ws.state.stage_mark(SOURCES_CHANGED_MARK)  # what this, the last stage, finishes taking in
    with report.timed("diff"):
        plan = _plan(ws)
    written = _write_summaries(ws, plan, report)
    with report.timed("store"):
        stored = plan.to_store(written)
        ws.state.write_payloads(COMMUNITY_SUMMARY_PAYLOADS,
                                {cid: (digest, payload_json(summary)) for cid, (digest, summary) in stored.items()},
                                plan.changes.removed)
        summaries = {cid: summary for cid, summary in plan.stored.items() if cid not in plan.changes.removed}
        summaries = dict(sorted({**summaries, **{cid: summary for cid, (_, summary) in stored.items()}}.items()))
    _index_summaries(ws, summaries, report)
    report.counts.update(communities=len(plan.communities), inputs_changed=len(plan.inputs),
                         summarized=len(plan.changes.changed),
                         reused=len(plan.communities) - len(plan.changes.changed), removed=len(plan.changes.removed))
    report.counts["withdrawn_forgotten"] = _forget_withdrawn(ws, summaries)
    report.counts["embeddings_forgotten"] = _forget_unused_embeddings(ws, summaries)
    ws.state.record_stage_mark(CAUGHT_UP_MARK, taken_in)
    report.sample = unrestricted_sample(
        (({"community": cid[:16], "level": s.level, "title": s.title[:80]}, plan.written_from(cid))
         for cid, s in written.items()), ws.state.restricted_documents(), 5)
    return report


@dataclasses.dataclass
class _SummaryPlan:
    """The communities to summarize and what their summaries are written from."""

    communities: list[Community]  # every community large enough to summarize
    stored: dict[str, dict]  # community id -> its stored summary
    entities: dict[str, Entity]  # the members of the communities whose inputs changed (``inputs``)
    sources: dict[str, list[str]]  # of those communities: the titles of the documents most members come from
    hashes: dict[str, str]  # community id -> the content hash its summary is stored under
    inputs: dict[str, str]  # community id -> ``summary_inputs``, of the communities whose inputs changed
    documents: dict[str, list[str]]  # of those communities: the documents their members come from, sorted
    reported_by_llm: set[str]  # the communities whose summary the model writes
    changes: Changes  # the communities whose hash changed, and the summaries of those that are gone
    # Communities whose summary is not the one their hash asks for (the model failed): stored without their inputs,
    # so the next run reads their members again, finds the model's hash missing and asks again.
    unsettled: set[str] = dataclasses.field(default_factory=set)

    def written_from(self, community_id: str) -> list[str]:
        """Every document a community's summary is written from: the query module shows a summary only to a caller
        who may read all of them, and the stage's sample only what unrestricted documents alone give."""
        if community_id in self.documents:
            return self.documents[community_id]
        return self.stored[community_id]["written_from"]  # its members' records are unchanged, and so their documents

    @functools.cached_property
    def by_id(self) -> dict[str, Community]:
        return {c.community_id: c for c in self.communities}

    def to_store(self, written: dict[str, CommunitySummary]) -> dict[str, tuple[str, dict]]:
        """Community id -> (hash, stored summary) of each written summary, and of each kept one whose inputs changed
        without changing it, with those inputs (so the next run reads none of its members)."""
        kept = {cid: (self.hashes[cid], {**self.stored[cid], "inputs": self.inputs[cid]})
                for cid in self.inputs if cid not in written and cid in self.stored
                and self.stored[cid].get("inputs") != self.inputs[cid]}
        return kept | {cid: (self.hashes[cid], {**summary.to_dict(), "written_from": self.written_from(cid),
                                                "inputs": None if cid in self.unsettled else self.inputs[cid]})
                       for cid, summary in written.items()}


def summary_inputs(community: Community, member_hashes: Mapping[str, str], summarizer: str,
                   written_from: Sequence[str], titles: Mapping[str, str]) -> str:
    """What a community's summary is written from, hashed cheaply: its members' records (by the hash the graph stage
    synced each under), the titles of their documents and the summarizer. Equal inputs give an equal content hash
    (``community_content_hash`` reads only those records and titles), so a run re-reads only the members of the
    communities whose inputs changed."""
    return short_hash(str(SUMMARY_RULE_VERSION), summarizer, community.community_id,
                      *(member_hashes.get(eid, "") for eid in sorted(community.entity_ids)), "|",
                      *(titles.get(doc, "") for doc in written_from))


def _plan(ws: Workspace) -> _SummaryPlan:
    """Which communities changed: their members' records and sources, and the summarizer, hashed; the records are
    read only for the communities whose ``summary_inputs`` differ from those their stored summary recorded."""
    from graphrag_pipeline.lib.llm.summaries import report_version

    config = ws.settings.communities
    communities = [c for c in (community_from_payload(p) for p in ws.state.payloads(COMMUNITY_PAYLOADS).values())
                   if len(c.entity_ids) >= config.min_size]
    stored = ws.state.payloads(COMMUNITY_SUMMARY_PAYLOADS)
    stored_hashes = ws.state.payload_hashes(COMMUNITY_SUMMARY_PAYLOADS)
    reported_by_llm = {c.community_id for c in communities
                       if ws.settings.summaries.summarizer == "llm" and c.level in ws.settings.summaries.report_levels}
    # The summarizer is part of a summary's identity: changing the model, its prompt version or its input budget redoes
    # exactly the summaries the model writes, and changing the extractive summary's limits or the types that lead a
    # title only when alone redoes the others.
    summarizer_key = f"llm:{ws.settings.llm.provider}:{ws.settings.llm.model}:{report_version(ws.settings.summaries)}"
    extractive_key = (f"extractive:{config.top_entities}:{config.summary_sentences}:"
                      + ",".join(sorted(generic_entity_types(ws.settings))))
    summarizer = {c.community_id: summarizer_key if c.community_id in reported_by_llm else extractive_key
                  for c in communities}
    member_hashes = ws.state.element_hashes("entity", table="synced")
    titles = ws.state.document_titles({d for c in communities if c.community_id in stored
                                       for d in stored[c.community_id].get("written_from", ())})
    kept = {c.community_id for c in communities
            if (recorded := stored.get(c.community_id, {}).get("inputs")) is not None and recorded == summary_inputs(
                c, member_hashes, summarizer[c.community_id], stored[c.community_id]["written_from"], titles)}
    rechecked = [c for c in communities if c.community_id not in kept]
    # Read from the graph store, which the graph stage has made equal to the merged elements: its records are the
    # fields a summary reads, without the payloads' description parts.
    entities = ws.graph_store.get_entities({eid for c in rechecked for eid in c.entity_ids})
    titles.update(ws.state.document_titles({doc for c in rechecked for eid in c.entity_ids
                                            for doc in entities[eid].doc_ids} - titles.keys()))
    sources = {c.community_id: source_titles_of(c, entities, titles) for c in rechecked}
    hashes = {cid: stored_hashes[cid] for cid in kept}
    inputs, documents = {}, {}
    for c in rechecked:
        hashes[c.community_id] = content_hash(community_content_hash(c, entities, sources[c.community_id]),
                                              summarizer[c.community_id])
        documents[c.community_id] = sorted({d for eid in c.entity_ids for d in entities[eid].doc_ids})
        inputs[c.community_id] = summary_inputs(c, member_hashes, summarizer[c.community_id],
                                                documents[c.community_id], titles)
    changes = Changes.between(hashes, stored_hashes)
    return _SummaryPlan(communities, stored, entities, sources, hashes, inputs, documents, reported_by_llm, changes)


def _write_summaries(ws: Workspace, plan: _SummaryPlan, report: StageReport) -> dict[str, CommunitySummary]:
    """Community id -> its new summary, of every changed community: extractive, or the model's report where it
    writes one (a failed report keeps the extractive summary, stored under its extractive hash so the next run asks
    the model again)."""
    config = ws.settings.communities
    todo = [plan.by_id[cid] for cid in plan.changes.changed]
    with report.timed("relationships"):
        relationships_of = _relationships_by_community(ws, todo)
    generic_types = generic_entity_types(ws.settings)
    progress = ws.progress(report.stage, "summarize communities", len(todo))
    written = {}
    with report.timed("summarize"):
        for community in todo:
            written[community.community_id] = summarize_community_extractively(
                community,
                plan.entities,
                relationships_of[community.community_id],
                top_entities=config.top_entities,
                max_sentences=config.summary_sentences,
                generic_types=generic_types,
                source_titles=plan.sources[community.community_id],
            )
            progress.advance()
    by_llm = [c for c in todo if c.community_id in plan.reported_by_llm]
    if by_llm:
        with report.timed("llm_reports"):
            reports = ws.llm.map(
                lambda c: _community_report(ws, c, written[c.community_id], plan.entities, relationships_of), by_llm
            )
        for community, model_report in zip(by_llm, reports):
            if model_report is not None:
                written[community.community_id] = model_report
            else:
                plan.hashes[community.community_id] = community_content_hash(
                    community, plan.entities, plan.sources[community.community_id])
                plan.unsettled.add(community.community_id)
        report.counts["llm_reports"] = sum(r is not None for r in reports)
        report.counts["llm_report_failures"] = sum(r is None for r in reports)
    return written


def _index_summaries(ws: Workspace, summaries: dict[str, dict], report: StageReport) -> None:
    """Make the ``communities`` collection hold a point per stored summary."""
    wanted = {
        # The text keys the point: a new title or summary (new chunks behind it) gives it a new vector. The payload
        # says what the point is, without the documents a summary is written from, which the query reads from the
        # state (as for entities: see the graph stage's _write).
        cid: (GLOBAL_SHARD, "\n".join([s["title"], s["summary"], *s["chunk_ids"][:COMMUNITY_VECTOR_CHUNKS]]),
              {"level": s["level"], "title": s["title"]})
        for cid, s in summaries.items()
    }
    sync_points(ws, COMMUNITIES, wanted, None, report,
                vectors_of=lambda ids: community_vectors(ws, [summaries[cid] for cid in ids], report))


def _forget_withdrawn(ws: Workspace, summaries: dict[str, dict]) -> int:
    """Deleted documents stay withdrawn from everyone while anything in the index was derived from them; once no
    entity of the graph (and so no relationship: its documents name both its ends) and no summary names one, its
    mark goes."""
    withdrawn = ws.state.withdrawn_documents()
    if not withdrawn:
        return 0
    referenced = {d for s in summaries.values() for d in s.get("written_from", ())}
    offset = 0
    while page := ws.graph_store.list_entities(offset=offset, limit=GRAPH_PAGE, order_by="name"):
        referenced.update(d for entity in page for d in entity.doc_ids)
        offset += len(page)
    return ws.state.forget_withdrawn(withdrawn - referenced)


def _forget_unused_embeddings(ws: Workspace, summaries: dict[str, dict]) -> int:
    """The embedding cache keeps the vector of every text it was given, so a deleted or edited passage's vector would
    outlive the passage (a restricted one's too, and a vector says much about its text). After chunks went, the cache
    is cut back to the current chunks' texts and the summaries' own texts, as ``community_vectors`` embeds them."""
    if ws.state.stage_mark(CHUNKS_REMOVED_MARK) is None:
        return 0
    chunks = ws.state.chunks()
    titles = ws.state.document_titles({chunk.doc_id for chunk in chunks})
    keep = {content_hash(chunk_embedding_text(titles.get(chunk.doc_id, ""), chunk)) for chunk in chunks}
    keep.update(content_hash(community_own_text(summary)) for summary in summaries.values())
    forgotten = ws.state.forget_embeddings(ws.embedder.name, keep)
    ws.state.record_stage_mark(CHUNKS_REMOVED_MARK, None)
    return forgotten


GRAPH_PAGE = 5000  # entities read at a time to find what the graph still holds of deleted documents


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
    inside = set(community.entity_ids)
    internal = sorted(
        (r for r in relationships_of[community.community_id] if r.source_id in inside and r.target_id in inside),
        key=lambda r: (-r.weight, r.relationship_id),
    )
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


def community_own_text(summary: dict) -> str:
    """What a summary that cites no chunk is embedded from."""
    return f"{summary['title']}\n{summary['summary']}"[:COMMUNITY_EMBEDDING_CHARS]


def community_vectors(ws: Workspace, summaries: Sequence[dict], report: StageReport) -> np.ndarray:
    """Unit vectors for community summaries: the mean of the vectors of each one's first ``COMMUNITY_VECTOR_CHUNKS``
    cited chunks, taken from the embedding cache where the embeddings stage put them (a chunk missing there is
    embedded again); a summary that cites no chunk is embedded from its own text."""
    cited = {c for s in summaries for c in s["chunk_ids"][:COMMUNITY_VECTOR_CHUNKS]}
    chunks = {c.chunk_id: c for c in ws.state.chunks(chunk_ids=cited)}
    document_titles = ws.state.document_titles({c.doc_id for c in chunks.values()})
    chunk_ids = sorted(chunks)
    by_chunk = dict(zip(chunk_ids, embed_texts_cached(
        ws, [chunk_embedding_text(document_titles.get(chunks[c].doc_id, ""), chunks[c]) for c in chunk_ids], report)))
    around = [[by_chunk[c] for c in s["chunk_ids"][:COMMUNITY_VECTOR_CHUNKS] if c in by_chunk] for s in summaries]
    uncited = [i for i, vectors in enumerate(around) if not vectors]
    own_text = embed_texts_cached(ws, [community_own_text(summaries[i]) for i in uncited], report)
    vectors = np.zeros((len(summaries), ws.embedding_dimension), dtype=np.float32)
    for row, vector in zip(uncited, own_text):
        vectors[row] = vector
    for row, chunk_vectors in enumerate(around):
        if chunk_vectors:
            vectors[row] = _unit(np.mean(chunk_vectors, axis=0))
    return vectors


def _unit(vector: np.ndarray) -> np.ndarray:
    return vector / max(float(np.linalg.norm(vector)), 1e-12)


def generic_entity_types(settings: PipelineSettings) -> frozenset[str]:
    """Types that lead a community's title only when it has no other: the default type (nothing more was known)
    and, when the offline spotters run, the types that only the statistical NER model assigns, which on technical
    text mistakes commands, variables and products for people, places and companies."""
    extraction, ontology = settings.extraction, settings.ontology
    generic = {ontology.default_entity_type}
    if extraction.extractor in ("offline", "hybrid"):
        deliberate = {ontology.entity_type(t) for t in (*extraction.dictionary, *(p.type for p in extraction.patterns))}
        generic |= {ontology.entity_type(t) for t in extraction.ner_labels.values() if t is not None} - deliberate
    return frozenset(generic)


def _relationships_by_community(ws: Workspace, communities: Sequence[Community]) -> dict[str, list[Relationship]]:
    """Group relationships under each community they touch, reading each relationship once: those leaving a
    community tell its summary how much a member belongs elsewhere."""
    owner: dict[str, list[str]] = defaultdict(list)
    for community in communities:
        for eid in community.entity_ids:
            owner[eid].append(community.community_id)
    grouped: dict[str, list[Relationship]] = {c.community_id: [] for c in communities}
    if not communities:
        return grouped
    # Only the relationships touching a member: an incremental run summarizes a few communities of many.
    members = [eid for community in communities for eid in community.entity_ids]
    for relationship in ws.graph_store.relationships_of(members, provenance=False).values():
        touched = set(owner.get(relationship.source_id, ())) | set(owner.get(relationship.target_id, ()))
        if touched:
            for cid in touched:
                grouped[cid].append(relationship)
    return grouped
