"""Turn a stage's report into materialization metadata the Dagster UI can tell a run's story with."""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

from dagster import AssetCheckResult, AssetCheckSeverity, AssetExecutionContext, Failure, MaterializeResult, MetadataValue

from graphrag_pipeline.defs.partitions import shard_of_key
from graphrag_pipeline.defs.resources import GraphRAGResource
from graphrag_pipeline.lib.checks import CheckOutcome
from graphrag_pipeline.lib.llm.accounting import BudgetExceeded
from graphrag_pipeline.lib.progress import EveryFewSeconds
from graphrag_pipeline.lib.stages import Stage, StageReport
from graphrag_pipeline.lib.workspace import Workspace


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
    args = (shards_of(context),) if stage.per_document else ()
    started = time.perf_counter()
    progress = EveryFewSeconds(context.log.info, seconds=PROGRESS_LOG_SECONDS)
    with graphrag.workspace(run_id=context.run_id, progress_listeners=[progress]) as workspace:
        try:
            report = stage.run(workspace, *args)
        except BudgetExceeded as error:
            # A clean stop, not a crash: what was already paid for is in the completion cache, so raising the
            # budget and re-running continues where this run stopped without paying twice.
            raise Failure(
                description=f"LLM budget reached, stopped before the next call: {error}",
                metadata=_usage_metadata(workspace.usage.as_metadata()),
                allow_retries=False,
            ) from error
    return to_result(report, wall_seconds=time.perf_counter() - started)


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
