"""Turn a stage's report into materialization metadata the Dagster UI can tell a run's story with."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Sequence

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    AssetObservation,
    Failure,
    MaterializeResult,
    MetadataValue,
)

from graphrag_pipeline.defs.partitions import shard_of_key
from graphrag_pipeline.defs.resources import GraphRAGResource
from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core.progress import EveryFewSeconds
from graphrag_pipeline.lib.index.checks import CheckOutcome
from graphrag_pipeline.lib.llm.accounting import BudgetExceeded
from graphrag_pipeline.lib.stages import Stage, StageReport
from graphrag_pipeline.lib.stores.state.protocol import StateStore

PROGRESS_LOG_SECONDS = 10  # a progress line in the run's event log at most this often per step


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    if not rows:
        return "_(nothing new)_"
    columns = list(dict.fromkeys(key for row in rows for key in row))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = [str(row.get(c, "")).replace("|", "\\|").replace("\n", " ")[:120] for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_stage(stage: Stage, context: AssetExecutionContext, graphrag: GraphRAGResource) -> MaterializeResult:
    """Run a stage on a fresh workspace (a per-document stage over the run's shards), close its stores, and report;
    the total is wall time, so a model loaded on first use is counted too. Model spend counts against the budget of
    the whole Dagster run."""
    started = time.perf_counter()
    progress = EveryFewSeconds(context.log.info, seconds=PROGRESS_LOG_SECONDS)
    with graphrag.workspace(run_id=context.run_id, progress_listeners=[progress]) as workspace:
        try:
            report = stage.execute(workspace, shards_of(context) if stage.per_document else ())
        except BudgetExceeded as error:
            # A clean stop, not a crash: what was already paid for is in the completion cache, so raising the
            # budget and re-running continues where this run stopped without paying twice.
            raise Failure(
                description=f"LLM budget reached, stopped before the next call: {error}",
                metadata=_usage_metadata(workspace.usage.as_metadata()),
                allow_retries=False,
            ) from error
        report = public_report(report, workspace.state, [source.name for source in workspace.settings.sources])
        if stage.per_document and len(context.partition_keys) > 1:
            _observe_partitions(context, workspace.state)
    result = to_result(report, wall_seconds=time.perf_counter() - started)
    if stage.per_document and len(context.partition_keys) > 1:
        result = _as_run_totals(result, len(context.partition_keys))
    return result


def _as_run_totals(result: MaterializeResult, partitions: int) -> MaterializeResult:
    """A run over several shards records one materialization that Dagster gives every partition of the run (it has
    no per-partition metadata for a single-run backfill): its counts are the run's, and it says so."""
    return MaterializeResult(metadata={
        **(result.metadata or {}),
        "partitions_in_run": MetadataValue.int(partitions),
        "counts_cover": MetadataValue.text(f"the whole run ({partitions} partitions together); each partition's own "
                                           "documents and chunks are its observation"),
    })


def _observe_partitions(context: AssetExecutionContext, state: StateStore) -> None:
    """What each partition of a multi-shard run holds, as that partition's observation: true of it alone."""
    holdings = state.shard_holdings(shards_of(context))
    for key in context.partition_keys:
        held = holdings[shard_of_key(key)]
        context.log_event(AssetObservation(asset_key=context.asset_key, partition=key,
                                           metadata={name: MetadataValue.int(n) for name, n in held.items()}))


def public_report(report: StageReport, state: StateStore, source_names: Sequence[str]) -> StageReport:
    """The report as run metadata, which every operator of the Dagster instance reads, may show it: sample rows and
    notes that name a document (by its id, or a chunk of it) only when the index holds that document without access
    groups. A row or note naming a restricted document, or one the index no longer holds (deleted or quarantined:
    its groups are unknown), is withheld and counted. Counts stay complete."""
    restricted = state.restricted_documents()
    public = set(state.document_hashes()) - restricted.keys()
    chunk_ids = [row["chunk_id"] for row in report.sample if "chunk_id" in row]
    document_of = {chunk.chunk_id: chunk.doc_id for chunk in state.chunks(chunk_ids=chunk_ids)} if chunk_ids else {}

    def shown_row(row: dict[str, Any]) -> bool:
        return (("doc_id" not in row or row["doc_id"] in public)
                and ("chunk_id" not in row or document_of.get(row["chunk_id"]) in public))

    prefixes = tuple(f"{name}:" for name in source_names)
    sample = [row for row in report.sample if shown_row(row)]
    notes = [note for note in report.notes if _names_only_public_documents(note, prefixes, public)]
    withheld = len(report.sample) - len(sample) + len(report.notes) - len(notes)
    if withheld:
        notes.append(f"{withheld} sample rows or notes about restricted, deleted or quarantined documents withheld")
    return dataclasses.replace(report, sample=sample, notes=notes)


def _names_only_public_documents(note: str, prefixes: Sequence[str], public: set[str]) -> bool:
    """Whether every document id in the note (``<source name>:…`` at a word's start) is one of ``public``: an id
    ends at the note's end, a space or a colon, so each of those ends is tried."""
    for prefix in prefixes:
        start = note.find(prefix)
        while start != -1:
            if start == 0 or note[start - 1].isspace():
                ends = [i for i in range(start + len(prefix), len(note)) if note[i] in ": \t\n"] + [len(note)]
                if not any(note[start:end] in public for end in ends):
                    return False
            start = note.find(prefix, start + 1)
    return True


def run_check(check: Callable[[Workspace], CheckOutcome], graphrag: GraphRAGResource) -> AssetCheckResult:
    """Run an index check on a fresh workspace."""
    with graphrag.workspace() as workspace:
        return check_result(check(workspace))


def check_result(outcome: CheckOutcome, **identity: Any) -> AssetCheckResult:
    """A failed check is an ERROR the UI shows on the asset, with its reason; `identity` names the check when one
    function evaluates several (a multi-asset check)."""
    return AssetCheckResult(passed=outcome.passed, description=outcome.description, metadata=outcome.metadata,
                            severity=AssetCheckSeverity.ERROR, **identity)


def to_result(report: StageReport, wall_seconds: float) -> MaterializeResult:
    metadata: dict[str, Any] = {name: MetadataValue.int(value) for name, value in report.counts.items()}
    metadata.update({f"seconds_{step}": MetadataValue.float(s) for step, s in report.seconds.items()})
    metadata["seconds_total"] = MetadataValue.float(round(wall_seconds, 3))
    metadata.update(_usage_metadata(report.usage))
    metadata["sample"] = MetadataValue.md(markdown_table(report.sample))
    if report.notes:
        metadata["notes"] = MetadataValue.md("\n".join(f"- {note}" for note in report.notes))
    return MaterializeResult(metadata=metadata)


def _usage_metadata(usage: dict[str, float]) -> dict[str, MetadataValue]:
    return {
        name: MetadataValue.float(float(value)) if name.endswith("_usd") else MetadataValue.int(int(value))
        for name, value in usage.items()
    }


def shards_of(context: AssetExecutionContext) -> list[int]:
    """The shards a (possibly multi-partition, single-run backfill) run covers."""
    return [shard_of_key(key) for key in context.partition_keys]
