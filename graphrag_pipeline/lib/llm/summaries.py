"""Summaries written by a language model: merged element descriptions and community reports.

Both are optional refinements of the extractive summaries, so neither ever fails a run: a failed call or an
unusable answer (after one repair attempt, for reports) returns None, is counted in ``Usage.failures``, and the
caller keeps its extractive text. ``BudgetExceeded`` propagates so the caller can stop cleanly.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator

from graphrag_pipeline.lib.core.config import SummariesConfig
from graphrag_pipeline.lib.llm.accounting import CHARS_PER_TOKEN, approximate_tokens
from graphrag_pipeline.lib.llm.errors import LLMError
from graphrag_pipeline.lib.llm.prompts import packaged_template
from graphrag_pipeline.lib.llm.runner import LLMRunner
from graphrag_pipeline.lib.llm.structured import complete_structured

log = logging.getLogger(__name__)

MAX_RATING = 10.0
REPORT_SCHEMA_NAME = "community_report"
TRUNCATION_MARK = "\n…"

_DESCRIPTION_PLACEHOLDERS = frozenset({"name", "descriptions"})
_REPORT_PLACEHOLDERS = frozenset({"title_hint", "entities", "relationships"})


class Finding(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    summary: str
    explanation: str = ""


class CommunityReport(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    title: str = Field(min_length=1)
    summary: str = Field(min_length=1)
    findings: list[Finding] = Field(default_factory=list)
    rating: float = 0.0  # importance, 0 (negligible) to 10 (critical)
    rating_explanation: str = ""

    @field_validator("rating")
    @classmethod
    def _within_scale(cls, value: float) -> float:
        # A model that rates 11 out of 10 meant "very important", not "reject the whole report".
        return min(max(value, 0.0), MAX_RATING)


def report_schema() -> dict:
    string = {"type": "string"}
    return {
        "type": "object",
        "properties": {
            "title": string,
            "summary": string,
            "findings": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"summary": string, "explanation": string},
                    "required": ["summary", "explanation"],
                },
            },
            "rating": {"type": "number", "minimum": 0, "maximum": MAX_RATING},
            "rating_explanation": string,
        },
        "required": ["title", "summary", "findings", "rating", "rating_explanation"],
    }


def report_version(config: SummariesConfig) -> str:
    """Changes whenever a community report could come out differently: the prompt template and the input budget."""
    template = packaged_template("community_report", _REPORT_PLACEHOLDERS)
    return f"{template.version}-{config.report_max_input_tokens}"


def needs_llm_summary(descriptions: Sequence[str], config: SummariesConfig) -> bool:
    """Whether an element's descriptions are worth a model call under ``config``: the llm summarizer is on and
    there are many distinct descriptions or their merged text is long."""
    if config.summarizer != "llm":
        return False
    distinct = {d.strip() for d in descriptions if d.strip()}
    return (
        len(distinct) >= config.llm_min_descriptions
        or approximate_tokens(" ".join(sorted(distinct))) > config.llm_max_description_tokens
    )


def summarize_element_descriptions(runner: LLMRunner, name: str, descriptions: Sequence[str]) -> str | None:
    """One description of an entity or relationship combining all of ``descriptions``; None when the model
    fails (the caller keeps its merged extractive text)."""
    distinct = list(dict.fromkeys(d.strip() for d in descriptions if d.strip()))
    if not distinct:
        return None
    template = packaged_template("summarize_descriptions", _DESCRIPTION_PLACEHOLDERS)
    values = {"name": name, "descriptions": "\n".join(f"- {d}" for d in distinct)}
    try:
        text = runner.complete_cached(template, values).text.strip()
    except LLMError as error:
        return _failed(f"summary of {name!r}", str(error), runner)
    if not text:
        return _failed(f"summary of {name!r}", "empty answer", runner)
    return text


def community_report(
    runner: LLMRunner,
    community_title_hint: str,
    entities_text: str,
    relationships_text: str,
    *,
    max_input_tokens: int | None = None,
) -> CommunityReport | None:
    """A titled report (summary, findings, importance rating) on one community, from text tables of its entities
    and relationships; None when the model fails (the caller keeps the extractive summary).

    With ``max_input_tokens`` the tables are cut at line boundaries to fit, relationships getting what the entities
    leave but at least half when both are long (the caller lists the most important rows first)."""
    if max_input_tokens is not None:
        relationship_share = min(approximate_tokens(relationships_text), max_input_tokens // 2)
        entities_text = _truncate(entities_text, max_input_tokens - relationship_share)
        relationships_text = _truncate(relationships_text, max_input_tokens - approximate_tokens(entities_text))
    template = packaged_template("community_report", _REPORT_PLACEHOLDERS)
    values = {"title_hint": community_title_hint, "entities": entities_text, "relationships": relationships_text}
    try:
        result = complete_structured(
            runner, template, values, CommunityReport, json_schema=report_schema(), schema_name=REPORT_SCHEMA_NAME
        )
    except LLMError as error:
        return _failed(f"report {community_title_hint!r}", str(error), runner)
    if result.value is None:
        return _failed(f"report {community_title_hint!r}", result.error, runner)
    return result.value


def _truncate(text: str, max_tokens: int) -> str:
    max_chars = max(0, max_tokens) * CHARS_PER_TOKEN
    if len(text) <= max_chars:
        return text
    cut = text.rfind("\n", 0, max_chars)
    return text[: cut if cut > 0 else max_chars] + TRUNCATION_MARK


def _failed(what: str, reason: str, runner: LLMRunner) -> None:
    runner.usage.record_failure()
    log.warning("LLM %s failed, keeping the extractive text: %s", what, reason)
    return None
