"""Element description summaries and community reports through the fake server."""

from __future__ import annotations

import json

import pytest

from graphrag_pipeline.lib.core.config import SummariesConfig
from graphrag_pipeline.lib.llm.clients import chat_client
from graphrag_pipeline.lib.llm.runner import LLMRunner
from graphrag_pipeline.lib.llm.summaries import (
    CommunityReport,
    community_report,
    needs_llm_summary,
    summarize_element_descriptions,
)
from graphrag_pipeline_tests.fake_llm_server import OLLAMA_CHAT, OPENAI_CHAT, Reply, llm_config, prompt_of

REPORT = {
    "title": "Payments platform",
    "summary": "payments-api and its dependencies.",
    "findings": [{"summary": "Redis is a single point of failure", "explanation": "Every session lives there."}],
    "rating": 7.5,
    "rating_explanation": "Customer-facing.",
}
ENTITIES = "payments-api, Service, Takes card payments.\nRedis, TECHNOLOGY, Session cache."
RELATIONSHIPS = "payments-api, DEPENDS_ON, Redis, Caches sessions."


def runner(server, provider: str = "ollama", **config) -> LLMRunner:
    return LLMRunner(chat_client(llm_config(server, provider, **config)))


def test_descriptions_are_summarized_from_their_distinct_texts(llm_server):
    llm_server.chat_responder = lambda request: "  payments-api takes card payments and caches sessions in Redis.\n"
    summary = summarize_element_descriptions(
        runner(llm_server), "payments-api", ["Takes card payments.", "Uses Redis.", "Takes card payments.", " "]
    )
    assert summary == "payments-api takes card payments and caches sessions in Redis."
    prompt = prompt_of(llm_server.bodies(OLLAMA_CHAT)[0])
    assert '"payments-api"' in prompt and prompt.count("- Takes card payments.") == 1 and "- Uses Redis." in prompt


def test_description_summary_failure_returns_none(llm_server):
    llm_server.script(OLLAMA_CHAT, *[Reply(status=500, body="{}")] * 3)
    failing = runner(llm_server)
    assert summarize_element_descriptions(failing, "x", ["a", "b"]) is None
    assert failing.usage.failures == 1
    assert summarize_element_descriptions(failing, "x", []) is None  # nothing to summarize: no call
    assert llm_server.count(OLLAMA_CHAT) == 3


def test_when_a_summary_is_worth_a_call():
    llm = SummariesConfig(summarizer="llm", llm_min_descriptions=3, llm_max_description_tokens=50)
    assert not needs_llm_summary(["a", "b", "b"], llm)
    assert needs_llm_summary(["a", "b", "c"], llm)
    assert needs_llm_summary(["x" * 400], llm)
    assert not needs_llm_summary(["a", "b", "c", "x" * 400], SummariesConfig())  # extractive summarizer


@pytest.mark.parametrize("provider", ["openai", "ollama"])
def test_community_report_is_parsed(llm_server, provider):
    llm_server.chat_responder = lambda request: json.dumps({**REPORT, "rating": 12})
    report = community_report(runner(llm_server, provider), "payments-api, Redis", ENTITIES, RELATIONSHIPS)

    assert isinstance(report, CommunityReport)
    assert report.title == "Payments platform" and report.findings[0].summary.startswith("Redis")
    assert report.rating == 10.0  # clamped to the scale
    [body] = llm_server.bodies(OPENAI_CHAT if provider == "openai" else OLLAMA_CHAT)
    assert "Working title: payments-api, Redis" in prompt_of(body) and RELATIONSHIPS in prompt_of(body)
    schema = body["format"] if provider == "ollama" else body["response_format"]["json_schema"]["schema"]
    assert schema["required"] == ["title", "summary", "findings", "rating", "rating_explanation"]


def test_malformed_report_is_repaired(llm_server):
    truncated = '{"title": "Payments", "summary": '
    llm_server.script(OLLAMA_CHAT, Reply(content=truncated), Reply(content=json.dumps(REPORT)))
    report = community_report(runner(llm_server), "hint", ENTITIES, RELATIONSHIPS)
    assert report is not None and report.rating == 7.5
    assert llm_server.count(OLLAMA_CHAT) == 2


def test_unusable_report_returns_none_and_counts_a_failure(llm_server):
    llm_server.chat_responder = lambda request: '{"title": ""}'
    failing = runner(llm_server)
    assert community_report(failing, "hint", ENTITIES, RELATIONSHIPS) is None
    assert failing.usage.failures == 1 and llm_server.count(OLLAMA_CHAT) == 2


def test_report_input_is_cut_to_the_token_cap(llm_server):
    llm_server.chat_responder = lambda request: json.dumps(REPORT)
    entities = "\n".join(f"entity-{i}, CONCEPT, {'words ' * 20}" for i in range(200))
    relationships = "\n".join(f"entity-{i}, RELATED_TO, entity-{i + 1}, {'words ' * 20}" for i in range(200))
    assert community_report(runner(llm_server), "hint", entities, relationships, max_input_tokens=1000)

    prompt = prompt_of(llm_server.bodies(OLLAMA_CHAT)[0])
    assert len(prompt) < 1000 * 4 + 2000  # the cap plus the template itself
    assert "entity-0, CONCEPT" in prompt and "entity-0, RELATED_TO" in prompt  # both tables keep their first rows
