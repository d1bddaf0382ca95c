"""Stage 5, `element_summaries`: one entity per real-world thing, one relationship per typed pair."""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Callable

from graphrag_pipeline.lib.algorithms.merge import (
    DEFAULT_LIMITS,
    LLM_INPUT_DESCRIPTION_CHARS,
    LLM_INPUT_DESCRIPTIONS,
    MAX_PROVENANCE,
    CatalogResolution,
    ElementKeys,
    capped_parts,
    element_record,
    merge_extractions,
    resolve_catalog_names,
)
from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core.faults import crash_point
from graphrag_pipeline.lib.core.ids import content_hash
from graphrag_pipeline.lib.core.models import Entity, Relationship
from graphrag_pipeline.lib.sources.catalog import catalog_names, catalog_titles
from graphrag_pipeline.lib.stages.extracted_elements import EXTRACTION_BATCH, extract_and_store
from graphrag_pipeline.lib.stages.incremental import Changes, unrestricted_sample
from graphrag_pipeline.lib.stages.report import StageReport, accounted
from graphrag_pipeline.lib.stores.state.sql import extraction_from_json


@accounted
def summarize_elements(ws: Workspace) -> StageReport:
    """Merge the current extractions into entities and relationships; store only what changed.

    Only the elements the changed extractions touch are merged again, from the chunks that mention them (an element
    depends on its own mentions alone, in any order); the whole corpus is merged when what the merge is made with
    changed, when a replaced extraction's earlier text is gone, or when an element lists too many chunks to re-read."""
    report = StageReport("element_summaries")
    by_llm = ws.settings.summaries.summarizer == "llm"
    with report.timed("catalog_names"):
        report.counts["re_extracted_chunks"] = _extract_again_with_catalog_names(ws, report)
    with report.timed("catalog_resolution"):
        records = ws.catalog_records()
        catalog = resolve_catalog_names(catalog_names(records), catalog_titles(records))
        report.counts["catalog_names_resolved"] = len(catalog.keys)
    # The model reads every description it is to combine; elements it does not summarize are capped after.
    limits = (LLM_INPUT_DESCRIPTIONS, LLM_INPUT_DESCRIPTION_CHARS) if by_llm else DEFAULT_LIMITS
    merge = functools.partial(merge_extractions, ontology=ws.settings.ontology,
                              aliases=ws.settings.extraction.aliases, description_limits=limits, catalog=catalog)
    mark = merge_mark(ws, limits, catalog)
    with report.timed("diff"):
        live = ws.state.live_extraction_hashes(ws.extractor_key, ws.extractor_family)
        plan = _incremental_plan(ws, live, mark, merge)
    with report.timed("merge"):
        if plan is None:
            entities, relationships = merge(
                (doc_id, extraction)
                for doc_id, _, extraction in ws.state.live_extractions(ws.extractor_key, ws.extractor_family))
            previous = {kind: ws.state.element_hashes(kind) for kind in ("entity", "relationship")}
        else:
            entities, relationships = merge(
                ((doc_id, extraction) for doc_id, _, extraction in
                 ws.state.live_extractions(ws.extractor_key, ws.extractor_family, plan.chunks_to_read)),
                only=plan.touched)
            previous = plan.previous
        report.counts["merged_chunks"] = len(live) if plan is None else len(plan.chunks_to_read)
    if by_llm:
        with report.timed("llm_summaries"):
            entities, relationships = summarize_descriptions_by_llm(ws, entities, relationships, report)
    with report.timed("store"):
        changes = {}
        for kind, elements in (("entity", entities), ("relationship", relationships)):
            payloads = {_element_id(e): element_record(e) for e in elements}
            diff = Changes.between({eid: digest for eid, (digest, _) in payloads.items()}, previous[kind])
            changes[kind] = ({eid: payloads[eid] for eid in diff.changed}, diff.removed)
            report.counts[f"{kind}_changed"] = len(diff.changed)
            report.counts[f"{kind}_removed"] = len(diff.removed)
        merged = live if plan is None else plan.added
        unmerged = [] if plan is None else [c for c in plan.gone if c not in live]
        ws.state.record_merge(changes, merged, unmerged, mark, every_extraction=plan is None)
        report.counts.update({f"{kind}_total": ws.state.element_count(kind) for kind in changes})
    crash_point("element_summaries:merged")
    with report.timed("prune"):
        report.counts["pruned_extractions"] = ws.state.prune_extractions(ws.extractor_key, ws.extractor_family)
    report.counts["full_merge"] = int(plan is None)
    report.sample = unrestricted_sample(
        (({"entity": e.name, "type": e.type, "mentions": e.mention_count, "documents": len(e.doc_ids)}, e.doc_ids)
         for e in sorted(entities, key=lambda e: (-e.mention_count, e.name))), ws.state.restricted_documents(), 10)
    return report


# Part of the merge's mark: bump it when the same extractions would merge into other elements, so the next run
# merges the whole corpus again.
MERGE_RULE_VERSION = 1


def merge_mark(ws: Workspace, limits: tuple[int, int], catalog: CatalogResolution) -> str:
    """Everything besides the extractions that the merged elements depend on."""
    return content_hash(str(MERGE_RULE_VERSION), ws.extractor_key, ws.extractor_family,
                        ws.settings.ontology.model_dump_json(), json.dumps(ws.settings.extraction.aliases, sort_keys=True),
                        json.dumps(limits), json.dumps(dataclasses.asdict(catalog), sort_keys=True))


@dataclasses.dataclass(frozen=True)
class _IncrementalPlan:
    added: dict[str, tuple[str, str]]  # chunk id -> (extractor key, digest): live extractions not merged yet
    gone: dict[str, tuple[str, str]]  # merged extractions no longer live as they were
    touched: ElementKeys  # the elements the changed extractions mention, before or after the change
    chunks_to_read: set[str]  # every chunk that mentions one of them
    previous: dict[str, dict[str, str | None]]  # kind -> touched element id -> its stored hash (None: new)


def _incremental_plan(
    ws: Workspace,
    live: dict[str, tuple[str, str]],
    mark: str,
    merge: Callable[..., tuple[list[Entity], list[Relationship]]],
) -> _IncrementalPlan | None:
    """What to merge again after the extractions changed, or None for the whole corpus; ``merge`` is the stage's
    `merge_extractions` with its settings."""
    if ws.state.stage_mark("element_summaries") != mark:
        return None
    merged = ws.state.merged_extractions()
    added = {c: v for c, v in live.items() if merged.get(c) != v}
    gone = {c: v for c, v in merged.items() if live.get(c) != v}
    earlier = ws.state.extraction_payloads({c: key for c, (key, _) in gone.items()})
    if any(earlier.get(c, (None,))[0] != digest for c, (_, digest) in gone.items()):
        return None  # replaced in place (an extraction tried again): what it said before is unknown
    changed = [("", extraction_from_json(c, payload)) for c, (_, payload) in earlier.items()]
    changed += [(doc_id, extraction) for doc_id, _, extraction in
                ws.state.live_extractions(ws.extractor_key, ws.extractor_family, added)]
    touched_entities, touched_relationships = merge(changed)
    chunks = set(added)
    previous: dict[str, dict[str, str | None]] = {}
    for kind, ids in (("entity", [e.entity_id for e in touched_entities]),
                      ("relationship", [r.relationship_id for r in touched_relationships])):
        stored = ws.state.element_payloads(kind, ids)
        for payload in stored.values():
            if len(payload["chunk_ids"]) >= MAX_PROVENANCE:
                return None  # its list of chunks is cut short
            chunks.update(payload["chunk_ids"])
        hashes = ws.state.element_hashes(kind, element_ids=ids)
        previous[kind] = {eid: hashes.get(eid) for eid in ids}
    return _IncrementalPlan(added, gone, ElementKeys.of(touched_entities, touched_relationships), chunks, previous)


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
