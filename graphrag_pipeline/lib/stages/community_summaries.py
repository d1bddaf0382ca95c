"""Stage 8, `community_summaries`: summaries of changed communities in the `communities` collection."""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from typing import Sequence

from graphrag_pipeline.lib.communities import (
    community_content_hash,
    source_titles_of,
    summarize_community_extractively,
)
from graphrag_pipeline.lib.config import PipelineSettings
from graphrag_pipeline.lib.ids import content_hash
from graphrag_pipeline.lib.merge import entity_from_payload, relationship_from_payload
from graphrag_pipeline.lib.models import Community, CommunitySummary, Entity, Relationship
from graphrag_pipeline.lib.stages.communities import community_from_payload
from graphrag_pipeline.lib.stages.report import StageReport, accounted
from graphrag_pipeline.lib.stages.vectors import GLOBAL_SHARD, sync_points
from graphrag_pipeline.lib.stores.protocols import COMMUNITIES
from graphrag_pipeline.lib.workspace import Workspace

COMMUNITY_EMBEDDING_CHARS = 800  # title, top entities and the strongest facts: what a global question matches


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
    previous = ws.state.community_summary_hashes()
    reported_by_llm = {
        c.community_id for c in communities
        if ws.settings.summaries.summarizer == "llm" and c.level in ws.settings.summaries.report_levels
    }
    # The summarizer (model, prompt version, input budget) is part of a summary's identity: changing it redoes
    # exactly the summaries it writes.
    summarizer_key = f"llm:{ws.settings.llm.provider}:{ws.settings.llm.model}:{report_version(ws.settings.summaries)}"
    titles = ws.state.document_titles({doc for c in communities for eid in c.entity_ids
                                       for doc in entities[eid].doc_ids})
    sources = {c.community_id: source_titles_of(c, entities, titles) for c in communities}
    hashes = {
        c.community_id: content_hash(community_content_hash(c, entities, sources[c.community_id]), summarizer_key)
        if c.community_id in reported_by_llm else community_content_hash(c, entities, sources[c.community_id])
        for c in communities
    }
    todo = [c for c in communities if previous.get(c.community_id) != hashes[c.community_id]]
    removed = sorted(set(previous) - set(hashes))
    with report.timed("relationships"):
        relationships_of = _relationships_by_community(ws, todo)
    generic_types = generic_entity_types(ws.settings)
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
                generic_types=generic_types,
                source_titles=sources[community.community_id],
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
                hashes[community.community_id] = community_content_hash(community, entities,
                                                                        sources[community.community_id])
        report.counts["llm_reports"] = sum(r is not None for r in reports)
        report.counts["llm_report_failures"] = sum(r is None for r in reports)
    members = {c.community_id: c.entity_ids for c in communities}
    # Every document the text was written from, stored with it: the query module shows a summary only to a caller
    # who may read all of them, and so does this report's sample.
    written_from = {cid: sorted({d for eid in members[cid] for d in entities[eid].doc_ids}) for cid in new_summaries}
    upserts = {cid: (hashes[cid], json.dumps({**summary.to_dict(), "written_from": written_from[cid]}))
               for cid, summary in new_summaries.items()}
    ws.state.replace_community_summaries(upserts, removed)
    summaries = ws.state.community_summary_payloads()
    wanted = {
        cid: (GLOBAL_SHARD, f"{s['title']}\n{s['summary']}"[:COMMUNITY_EMBEDDING_CHARS],
              {"doc_ids": sorted({d for eid in members.get(cid, ()) for d in entities[eid].doc_ids})[:200],
               "level": s["level"], "title": s["title"]})
        for cid, s in summaries.items()
    }
    sync_points(ws, COMMUNITIES, wanted, None, report)
    report.counts.update(communities=len(communities), summarized=len(todo), reused=len(communities) - len(todo),
                         removed=len(removed))
    # Run metadata is for operators, not for the groups: only summaries written from unrestricted documents alone.
    restricted = ws.state.restricted_documents()
    report.sample = [
        {"community": cid[:16], "level": new_summaries[cid].level, "title": new_summaries[cid].title[:80]}
        for cid in upserts if not restricted.keys() & written_from[cid]
    ][:5]
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
    for payload in ws.state.element_payloads("relationship").values():
        touched = set(owner.get(payload["source_id"], ())) | set(owner.get(payload["target_id"], ()))
        if touched:
            relationship = relationship_from_payload(payload)
            for cid in touched:
                grouped[cid].append(relationship)
    return grouped
