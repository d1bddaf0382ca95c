"""Stage 5, `element_summaries`: one entity per real-world thing, one relationship per typed pair."""

from __future__ import annotations

import dataclasses

from graphrag_pipeline.lib.merge import (
    DEFAULT_LIMITS,
    LLM_INPUT_DESCRIPTION_CHARS,
    LLM_INPUT_DESCRIPTIONS,
    capped_parts,
    element_payload,
    merge_extractions,
    resolve_catalog_names,
)
from graphrag_pipeline.lib.sources.catalog import catalog_names
from graphrag_pipeline.lib.models import Entity, Relationship
from graphrag_pipeline.lib.stages.extracted_elements import EXTRACTION_BATCH, extract_and_store
from graphrag_pipeline.lib.stages.report import StageReport, accounted
from graphrag_pipeline.lib.workspace import Workspace


@accounted
def summarize_elements(ws: Workspace) -> StageReport:
    """Merge all current extractions into entities and relationships; store only what changed."""
    report = StageReport("element_summaries")
    by_llm = ws.settings.summaries.summarizer == "llm"
    with report.timed("catalog_names"):
        report.counts["re_extracted_chunks"] = _extract_again_with_catalog_names(ws, report)
    with report.timed("prune"):
        report.counts["pruned_extractions"] = ws.state.prune_extractions(ws.extractor_key, ws.extractor_family)
    with report.timed("catalog_resolution"):
        catalog = resolve_catalog_names(catalog_names(ws.catalog_records()))
        report.counts["catalog_names_resolved"] = len(catalog.keys)
    with report.timed("merge"):
        entities, relationships = merge_extractions(
            ((doc_id, extraction)
             for doc_id, _, extraction in ws.state.live_extractions(ws.extractor_key, ws.extractor_family)),
            ws.settings.ontology,
            ws.settings.extraction.aliases,
            # The model reads every description it is to combine; elements it does not summarize are capped after.
            description_limits=(LLM_INPUT_DESCRIPTIONS, LLM_INPUT_DESCRIPTION_CHARS) if by_llm else DEFAULT_LIMITS,
            catalog=catalog,
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
    # Run metadata is for operators, not for the groups: only entities that unrestricted documents alone support.
    restricted = ws.state.restricted_documents()
    report.sample = [
        {"entity": e.name, "type": e.type, "mentions": e.mention_count, "documents": len(e.doc_ids)}
        for e in sorted(entities, key=lambda e: (-e.mention_count, e.name)) if not restricted.keys() & set(e.doc_ids)
    ][:10]
    return report


def _extract_again_with_catalog_names(ws: Workspace, report: StageReport) -> int:
    """Extract again the chunks whose extraction predates the catalog's current names (the catalog changed, or was
    read after their shard): the spotters find its names in them, and nothing waits for the shard's next run."""
    stale = ws.state.stale_extraction_chunks(ws.extractor_key, ws.extractor_family)
    progress = ws.progress(report.stage, "extract again with the catalog's names", len(stale))
    for start in range(0, len(stale), EXTRACTION_BATCH):
        chunks = ws.state.chunks(chunk_ids=stale[start : start + EXTRACTION_BATCH])
        extract_and_store(ws, chunks, report)
        progress.advance(len(chunks))
    return len(stale)


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
        # The parts stay, capped, beside the model's text: a reader who may not read every document the model read
        # is shown the parts it may read instead (query.access).
        parts = capped_parts(element.description_parts)
        text = replaced.get(_element_id(element)) or "\n".join(text for text, _ in parts)
        return dataclasses.replace(element, description=text, description_parts=parts)

    return [updated(e) for e in entities], [updated(r) for r in relationships]


def _element_id(element: Entity | Relationship) -> str:
    return element.entity_id if isinstance(element, Entity) else element.relationship_id
