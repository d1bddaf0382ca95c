"""JSON answers parsed into pydantic models, with one repair attempt when the first answer is unusable.

Models wrap JSON in prose and code fences even when told not to, so the first JSON value in the text is parsed
(inside a fenced block when there is one). When that fails, or the JSON does not fit the model, the model is shown
its output, the error and the schema once and asked for a corrected object. When that fails too the caller gets the
reason and every raw output, to quarantine or fall back; model-call errors (``LLMError``, ``BudgetExceeded``)
propagate, because what to do about them is the caller's decision.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from graphrag_pipeline.lib.core.errors import GraphRAGError
from graphrag_pipeline.lib.llm.prompts import PromptTemplate, packaged_template
from graphrag_pipeline.lib.llm.runner import LLMRunner

M = TypeVar("M", bound=BaseModel)

_FENCED = re.compile(r"```[A-Za-z]*[ \t]*\n?(.*?)```", re.DOTALL)
_REPAIR_PLACEHOLDERS = frozenset({"schema", "error", "raw"})
ERROR_CHARS = 600  # pydantic lists every failing field; the first few are what a repair needs


class OutputError(GraphRAGError, ValueError):
    """A model answer that is not the JSON object asked for."""


@dataclass(frozen=True)
class StructuredResult(Generic[M]):
    value: M | None
    raw: str  # the model's output; after a failed repair both outputs, separated by a marker line
    error: str = ""  # why value is None


def parse_json_answer(text: str, output_model: type[M]) -> M:
    """The first JSON value in ``text`` (fences and surrounding prose ignored), validated as ``output_model``."""
    fenced = _FENCED.search(text)
    candidate = fenced.group(1) if fenced else text
    start = next((i for i, ch in enumerate(candidate) if ch in "{["), None)
    if start is None:
        raise OutputError("no JSON object in the output")
    try:
        data, _ = json.JSONDecoder().raw_decode(candidate, start)
    except json.JSONDecodeError as error:
        raise OutputError(f"invalid JSON: {error}") from error
    try:
        return output_model.model_validate(_without_lone_surrogates(data))
    except ValidationError as error:
        raise OutputError(f"JSON does not match the schema: {str(error)[:ERROR_CHARS]}") from error


def _without_lone_surrogates(data: Any) -> Any:
    """``data`` with each half of a surrogate pair that a JSON escape left alone ("\\ud83d" without its partner)
    replaced by "?": a text holding one is not UTF-8, which neither the stores nor the payloads' JSON can write."""
    text = json.dumps(data, ensure_ascii=False)
    try:
        text.encode("utf-8")
        return data
    except UnicodeEncodeError:
        return json.loads(text.encode("utf-8", "replace").decode("utf-8"))


def repair_template() -> PromptTemplate:
    return packaged_template("repair_json", _REPAIR_PLACEHOLDERS)


def complete_structured(
    runner: LLMRunner,
    template: PromptTemplate,
    values: Mapping[str, object],
    output_model: type[M],
    *,
    json_schema: dict[str, Any],
    schema_name: str,
) -> StructuredResult[M]:
    """Ask, parse, and on failure ask once for a repair; ``value`` is None when both answers were unusable."""
    first = runner.complete_cached(template, values, json_schema=json_schema, schema_name=schema_name)
    try:
        return StructuredResult(parse_json_answer(first.text, output_model), first.text)
    except OutputError as error:
        first_error = str(error)
    repair_values = {"schema": json.dumps(json_schema, indent=1), "error": first_error, "raw": first.text}
    second = runner.complete_cached(repair_template(), repair_values, json_schema=json_schema, schema_name=schema_name)
    try:
        return StructuredResult(parse_json_answer(second.text, output_model), second.text)
    except OutputError as error:
        raw = f"{first.text}\n--- repair attempt ---\n{second.text}"
        return StructuredResult(None, raw, f"{first_error}; after one repair attempt: {error}")
