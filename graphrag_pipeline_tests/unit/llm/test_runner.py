"""The cache, the budget cap and bounded concurrency, end to end through the fake server."""

from __future__ import annotations

import json

import pytest

from graphrag_pipeline.lib.core.config import LLMConfig, PipelineSettings, PriceSpec, default_config_data
from graphrag_pipeline.lib.core.models import Chunk
from graphrag_pipeline.lib.extract.llm import LLMExtractor
from graphrag_pipeline.lib.llm.accounting import BudgetExceeded
from graphrag_pipeline.lib.llm.cache import LLMCache
from graphrag_pipeline.lib.llm.clients import chat_client
from graphrag_pipeline.lib.llm.prompts import PromptTemplate
from graphrag_pipeline.lib.llm.runner import LLMRunner, llm_runner
from graphrag_pipeline_tests.fake_llm_server import OLLAMA_CHAT, OPENAI_CHAT, Reply, llm_config

ONTOLOGY = PipelineSettings.model_validate(default_config_data()).ontology
GRAPH = json.dumps({"entities": [{"name": "payments-api", "type": "Service", "description": "Payments."}],
                    "relationships": []})
ECHO = PromptTemplate("echo", "Repeat: {text}", {"text"})


def chunks(count: int) -> list[Chunk]:
    return [Chunk(chunk_id=f"c{i}", doc_id="d", position=i, text=f"chunk number {i}", token_count=4, start_char=0,
                  end_char=15) for i in range(count)]


def test_second_run_on_unchanged_input_makes_no_calls(llm_server, tmp_path):
    llm_server.chat_responder = lambda request: GRAPH
    config = llm_config(llm_server)
    cache_path = tmp_path / "llm-cache.sqlite"

    first = llm_runner(config, cache_path)
    first_result = LLMExtractor(first, ONTOLOGY, max_gleanings=1).extract(chunks(3))
    first.close()
    calls_made = llm_server.count(OLLAMA_CHAT)
    assert calls_made == 6 and first.usage.cache_hits == 0  # extraction and one gleaning per chunk

    second = llm_runner(config, cache_path)  # a new process would open the same file
    second_result = LLMExtractor(second, ONTOLOGY, max_gleanings=1).extract(chunks(3))

    assert llm_server.count(OLLAMA_CHAT) == calls_made  # zero new requests
    assert second_result == first_result
    assert second.usage.cache_hits == 6 and second.usage.calls == 0
    assert second.usage.as_metadata()["llm_cache_hits"] == 6
    second.close()


def test_a_changed_template_version_calls_again(llm_server, tmp_path):
    cache = LLMCache(tmp_path / "cache.sqlite")
    runner = LLMRunner(chat_client(llm_config(llm_server)), cache)
    edited = PromptTemplate("echo", "Repeat exactly: {text}", {"text"})
    assert edited.version != ECHO.version

    runner.complete_cached(ECHO, {"text": "hi"})
    runner.complete_cached(ECHO, {"text": "hi"})
    assert llm_server.count(OLLAMA_CHAT) == 1 and runner.usage.cache_hits == 1
    runner.complete_cached(edited, {"text": "hi"})
    runner.complete_cached(ECHO, {"text": "other input"})

    assert llm_server.count(OLLAMA_CHAT) == 3 and runner.usage.cache_hits == 1
    assert len(cache) == 3


def test_cache_keys_include_provider_model_and_schema(llm_server, tmp_path):
    cache = LLMCache(tmp_path / "cache.sqlite")
    for config in (llm_config(llm_server), llm_config(llm_server, model="other"), llm_config(llm_server, "openai")):
        LLMRunner(chat_client(config), cache).complete_cached(ECHO, {"text": "hi"})
    LLMRunner(chat_client(llm_config(llm_server)), cache).complete_cached(
        ECHO, {"text": "hi"}, json_schema={"type": "object"}
    )
    assert llm_server.count(OLLAMA_CHAT) + llm_server.count(OPENAI_CHAT) == 4


@pytest.mark.parametrize("change", [{"max_completion_tokens": 4096}, {"temperature": 0.7},
                                    {"structured_output": False}])
def test_cache_keys_include_the_settings_that_change_answers(llm_server, tmp_path, change):
    # An answer cut off at the old length cap must not be served after the cap is raised.
    cache = LLMCache(tmp_path / "cache.sqlite")
    schema = {"type": "object"}
    for config in (llm_config(llm_server), llm_config(llm_server), llm_config(llm_server, **change)):
        LLMRunner(chat_client(config), cache).complete_cached(ECHO, {"text": "hi"}, json_schema=schema)
    assert llm_server.count(OLLAMA_CHAT) == 2 and len(cache) == 2


def test_failed_calls_are_not_cached(llm_server, tmp_path):
    runner = LLMRunner(chat_client(llm_config(llm_server, max_retries=0)), LLMCache(tmp_path / "cache.sqlite"))
    llm_server.script(OLLAMA_CHAT, Reply(status=500, body="{}"))
    extractions, quarantined = LLMExtractor(runner, ONTOLOGY).extract(chunks(1))
    assert extractions == [] and len(quarantined) == 1
    extractions, quarantined = LLMExtractor(runner, ONTOLOGY).extract(chunks(1))
    assert len(extractions) == 1 and quarantined == []  # a later run tries the chunk again


def test_budget_stops_before_the_call_that_could_overspend(llm_server):
    # Each call may cost up to 100 completion tokens at $1000/M = $0.10 and really costs 60 tokens = $0.06.
    config = llm_config(
        llm_server, model="pricey", prices={"pricey": PriceSpec(completion_per_million=1000.0)},
        max_completion_tokens=100, budget_usd=0.15,
    )
    llm_server.chat_responder = lambda request: GRAPH
    llm_server.script(OLLAMA_CHAT, *[Reply(content=GRAPH, completion_tokens=60)] * 3)
    runner = LLMRunner(chat_client(config))

    with pytest.raises(BudgetExceeded, match="budget"):
        LLMExtractor(runner, ONTOLOGY).extract(chunks(3))  # not quarantined: the run must stop

    assert llm_server.count(OLLAMA_CHAT) == 1  # $0.06 spent + $0.10 possible > $0.15: the second call never went out
    assert runner.usage.calls == 1 and runner.usage.cost_usd == pytest.approx(0.06)
    assert runner.usage.failures == 0


def test_budget_counts_calls_in_flight(llm_server):
    # Each call really costs its whole reservation, $0.10: four workers that each checked only what is already
    # spent would all go out and spend $0.40. Reservations let one call out at a time, and after it none fits.
    config = llm_config(
        llm_server, model="pricey", prices={"pricey": PriceSpec(completion_per_million=1000.0)},
        max_completion_tokens=100, budget_usd=0.15, concurrency=4,
    )
    llm_server.script(OLLAMA_CHAT, *[Reply(content="ok", completion_tokens=100, delay=0.2)] * 4)
    runner = LLMRunner(chat_client(config), concurrency=4)
    with pytest.raises(BudgetExceeded):
        runner.map(lambda text: runner.complete_cached(ECHO, {"text": text}), ["a", "b", "c", "d"])
    assert runner.usage.cost_usd <= 0.15
    assert runner.usage.calls == 1 and llm_server.count(OLLAMA_CHAT) == 1 and llm_server.max_in_flight == 1


def test_budget_needs_prices(llm_server):
    with pytest.raises(ValueError, match="no entry for model 'unpriced'"):
        llm_config(llm_server, model="unpriced", budget_usd=1.0)


@pytest.mark.parametrize("runner_concurrency, client_concurrency", [(2, 8), (8, 2)])
def test_concurrency_is_bounded(llm_server, runner_concurrency, client_concurrency):
    # Each answer takes a while, so requests allowed to overlap do overlap; the smaller limit caps them.
    llm_server.script(OLLAMA_CHAT, *[Reply(content="ok", delay=0.2)] * 6)
    runner = LLMRunner(chat_client(llm_config(llm_server, concurrency=client_concurrency)),
                       concurrency=runner_concurrency)

    answers = runner.map(lambda text: runner.complete_cached(ECHO, {"text": text}).text, [str(i) for i in range(6)])

    assert answers == ["ok"] * 6
    assert llm_server.max_in_flight == 2


def test_map_keeps_order_and_raises_the_first_error():
    runner = LLMRunner(chat_client(LLMConfig(base_url="http://127.0.0.1:9")), concurrency=3)  # never called
    assert runner.map(lambda x: x * 2, [3, 1, 2]) == [6, 2, 4]

    def fail_on_two(x: int) -> int:
        if x == 2:
            raise BudgetExceeded("stop")
        return x

    with pytest.raises(BudgetExceeded):
        runner.map(fail_on_two, list(range(10)))
