"""What every stage returns (`StageReport`), and the accounting of its model calls."""

from __future__ import annotations

import functools
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core.config import PipelineSettings


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
