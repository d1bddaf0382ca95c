"""Chat and embedding clients against the fake server: both wire protocols, accounting, retries, timeouts."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import numpy as np
import pytest

from graphrag_pipeline.lib.core.config import EmbedderConfig, PriceSpec
from graphrag_pipeline.lib.core.http import retry_after_seconds
from graphrag_pipeline.lib.llm import clients
from graphrag_pipeline.lib.llm.clients import (
    CIRCUIT_BREAKER_COOLDOWN_SECONDS,
    CIRCUIT_BREAKER_THRESHOLD,
    ChatClient,
    ChatMessage,
    LLMError,
    OllamaChatClient,
    OpenAIChatClient,
    chat_client,
    http_embedder,
    resolve_base_url,
)
from graphrag_pipeline.lib.stores.protocols import Embedder
from graphrag_pipeline_tests.fake_llm_server import (
    EMBEDDING_DIMENSION,
    OLLAMA_CHAT,
    OLLAMA_EMBED,
    OPENAI_CHAT,
    OPENAI_EMBEDDINGS,
    Reply,
    hashed_embedding,
    llm_config,
)

CHAT_PATHS = {"openai": OPENAI_CHAT, "ollama": OLLAMA_CHAT}
EMBED_PATHS = {"openai": OPENAI_EMBEDDINGS, "ollama": OLLAMA_EMBED}
HELLO = [ChatMessage("user", "Say hello.")]
SCHEMA = {"type": "object", "properties": {"greeting": {"type": "string"}}, "required": ["greeting"]}


@pytest.mark.parametrize("provider", ["openai", "ollama"])
def test_completion_text_and_token_accounting(llm_server, provider):
    prices = {"priced-model": PriceSpec(prompt_per_million=2.0, completion_per_million=10.0)}
    client = chat_client(llm_config(llm_server, provider, model="priced-model", prices=prices))
    assert isinstance(client, ChatClient)
    assert isinstance(client, OpenAIChatClient if provider == "openai" else OllamaChatClient)
    llm_server.script(CHAT_PATHS[provider], Reply(content="hello there", prompt_tokens=1000, completion_tokens=500))

    completion = client.complete(HELLO)

    assert completion.text == "hello there"
    assert (completion.prompt_tokens, completion.completion_tokens) == (1000, 500)
    usage = client.usage
    assert (usage.calls, usage.prompt_tokens, usage.completion_tokens, usage.retries) == (1, 1000, 500, 0)
    assert usage.cost_usd == pytest.approx((1000 * 2.0 + 500 * 10.0) / 1e6)
    assert usage.as_metadata()["llm_cost_usd"] == pytest.approx(0.007)
    [body] = llm_server.bodies(CHAT_PATHS[provider])
    assert body["model"] == "priced-model"
    assert body["messages"] == [{"role": "user", "content": "Say hello."}]


def test_structured_output_requests_carry_the_schema(llm_server):
    openai = chat_client(llm_config(llm_server, "openai"))
    ollama = chat_client(llm_config(llm_server, "ollama"))
    plain = chat_client(llm_config(llm_server, "ollama", structured_output=False))

    openai.complete(HELLO, json_schema=SCHEMA, schema_name="greeting")
    ollama.complete(HELLO, json_schema=SCHEMA)
    plain.complete(HELLO, json_schema=SCHEMA)

    [openai_body] = llm_server.bodies(OPENAI_CHAT)
    assert openai_body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "greeting", "schema": SCHEMA, "strict": False},
    }
    structured, unstructured = llm_server.bodies(OLLAMA_CHAT)
    assert structured["format"] == SCHEMA and structured["stream"] is False
    assert "format" not in unstructured


def test_length_cap_is_sent_in_each_protocol_s_own_field(llm_server):
    chat_client(llm_config(llm_server, "openai", max_completion_tokens=321)).complete(HELLO)
    chat_client(llm_config(llm_server, "ollama", max_completion_tokens=321)).complete(HELLO)
    [openai_body] = llm_server.bodies(OPENAI_CHAT)
    assert openai_body["max_completion_tokens"] == 321 and "max_tokens" not in openai_body  # o-series reject it
    [ollama_body] = llm_server.bodies(OLLAMA_CHAT)
    assert ollama_body["options"]["num_predict"] == 321


def test_api_key_comes_from_the_named_environment_variable(llm_server, monkeypatch):
    monkeypatch.setenv("FAKE_LLM_KEY", "sk-test-123")
    chat_client(llm_config(llm_server, "openai", api_key_env="FAKE_LLM_KEY")).complete(HELLO)
    chat_client(llm_config(llm_server, "openai", api_key_env="UNSET_FAKE_LLM_KEY")).complete(HELLO)
    assert llm_server.authorizations == ["Bearer sk-test-123", None]


def test_api_key_goes_to_the_openai_provider_only(llm_server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-ollama")
    monkeypatch.setenv("OLLAMA_BASE_URL", llm_server.base_url)
    monkeypatch.setenv("OPENAI_BASE_URL", llm_server.base_url)
    dead = "http://127.0.0.1:9"  # llm.base_url belongs to the chat provider: an embedder on another one ignores it

    chat_client(llm_config(llm_server, "ollama")).complete(HELLO)
    http_embedder(EmbedderConfig(provider="ollama"), llm_config(llm_server, "openai", base_url=dead)).embed(["a"])
    http_embedder(EmbedderConfig(provider="openai"), llm_config(llm_server, "ollama", base_url=dead)).embed(["a"])
    http_embedder(EmbedderConfig(provider="ollama"), llm_config(llm_server, "ollama")).embed(["a"])  # same provider

    assert [path for path, _ in llm_server.requests] == [OLLAMA_CHAT, OLLAMA_EMBED, OPENAI_EMBEDDINGS, OLLAMA_EMBED]
    assert llm_server.authorizations == [None, None, "Bearer sk-not-for-ollama", None]


def test_base_url_defaults_come_from_the_environment(llm_server, monkeypatch):
    monkeypatch.setenv("OLLAMA_BASE_URL", llm_server.base_url)
    client = chat_client(llm_config(llm_server, "ollama", base_url=None))
    assert client.complete(HELLO).text
    assert llm_server.count(OLLAMA_CHAT) == 1

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert resolve_base_url("openai", None) == "https://api.openai.com"
    assert resolve_base_url("openai", "http://vllm:8000/v1/") == "http://vllm:8000"  # OpenAI SDK style
    monkeypatch.delenv("OLLAMA_BASE_URL")
    assert resolve_base_url("ollama", None) == "http://localhost:11434"


@pytest.mark.parametrize("provider", ["openai", "ollama"])
def test_429_waits_for_retry_after_then_succeeds(llm_server, provider):
    waits: list[float] = []
    client = chat_client(llm_config(llm_server, provider, max_backoff_seconds=30), sleep=waits.append)
    llm_server.script(
        CHAT_PATHS[provider], Reply(status=429, body={"error": "slow down"}, headers={"Retry-After": "7"})
    )

    assert client.complete(HELLO).text
    assert llm_server.count(CHAT_PATHS[provider]) == 2
    assert waits == [7.0]  # the server's wait, not a jittered guess
    assert client.usage.retries == 1 and client.usage.calls == 1


def test_retry_after_is_capped_and_backoff_is_bounded(llm_server):
    waits: list[float] = []
    client = chat_client(
        llm_config(llm_server, "ollama", max_retries=3, backoff_seconds=1.0, max_backoff_seconds=1.5),
        sleep=waits.append,
    )
    llm_server.script(
        OLLAMA_CHAT,
        Reply(status=429, body="{}", headers={"Retry-After": "3600"}),
        Reply(status=503, body="{}"),
        Reply(status=502, body="{}"),
    )

    assert client.complete(HELLO).text
    assert waits[0] == 1.5  # an hour-long Retry-After does not park the pipeline
    assert 0 <= waits[1] <= 1.0 * 2 and 0 <= waits[2] <= 1.5  # full jitter under the doubling cap
    assert client.usage.retries == 3


def test_retry_after_on_a_503_is_honoured_too(llm_server):
    # An overloaded or restarting server says when to come back on 503 as much as on 429.
    waits: list[float] = []
    client = chat_client(llm_config(llm_server, "ollama", max_backoff_seconds=30), sleep=waits.append)
    llm_server.script(OLLAMA_CHAT, Reply(status=503, body="{}", headers={"Retry-After": "12"}))

    assert client.complete(HELLO).text
    assert waits == [12.0]  # backoff_seconds is 0.01: a jittered wait would be far shorter


def test_retry_after_as_an_http_date_waits_until_that_moment(llm_server):
    waits: list[float] = []
    client = chat_client(llm_config(llm_server, "openai", max_backoff_seconds=60), sleep=waits.append)
    in_twenty_seconds = format_datetime(datetime.now(timezone.utc) + timedelta(seconds=20), usegmt=True)
    llm_server.script(OPENAI_CHAT, Reply(status=429, body="{}", headers={"Retry-After": in_twenty_seconds}))

    assert client.complete(HELLO).text
    [wait] = waits
    assert 10 < wait <= 20  # the date has whole seconds; the rest is the time the request took


def test_retry_after_values_read_as_seconds():
    now = datetime.now(timezone.utc)
    assert retry_after_seconds("7") == 7.0
    assert retry_after_seconds("1.5") == 1.5
    assert 50 < retry_after_seconds(format_datetime(now + timedelta(minutes=1), usegmt=True)) <= 60
    assert retry_after_seconds(format_datetime(now - timedelta(minutes=1), usegmt=True)) == 0.0  # already past
    assert retry_after_seconds("-3") == 0.0
    assert retry_after_seconds("next tuesday") is None  # unreadable: the client's own backoff applies
    assert retry_after_seconds("") is None and retry_after_seconds(None) is None


@pytest.mark.parametrize("provider", ["openai", "ollama"])
def test_500_then_success_is_retried(llm_server, provider):
    client = chat_client(llm_config(llm_server, provider))
    llm_server.script(CHAT_PATHS[provider], Reply(status=500, body={"error": "boom"}))
    assert client.complete(HELLO).text
    assert llm_server.count(CHAT_PATHS[provider]) == 2
    assert client.usage.retries == 1


def test_timeout_then_success_is_retried(llm_server):
    client = chat_client(llm_config(llm_server, "openai", timeout_seconds=0.5))
    llm_server.script(OPENAI_CHAT, Reply(content="too late", delay=2.0))
    assert client.complete(HELLO).text != "too late"
    assert llm_server.count(OPENAI_CHAT) == 2
    assert client.usage.retries == 1


def test_persistent_500_raises_after_the_retries(llm_server):
    client = chat_client(llm_config(llm_server, "ollama", max_retries=2))
    llm_server.script(OLLAMA_CHAT, *[Reply(status=500, body={"error": "down"})] * 3)
    with pytest.raises(LLMError, match=r"after 3 attempts: HTTP 500"):
        client.complete(HELLO)
    assert llm_server.count(OLLAMA_CHAT) == 3
    assert client.usage.retries == 2 and client.usage.calls == 0


@pytest.mark.parametrize("provider, complaint", [
    ("openai", {"error": {"message": "Unrecognized request argument supplied: response_format"}}),
    ("ollama", {"error": "invalid format: expected \"json\" or a JSON schema"}),
])
def test_a_server_without_structured_output_gets_the_call_again_without_schema(llm_server, caplog, provider,
                                                                                complaint):
    client = chat_client(llm_config(llm_server, provider))
    path = CHAT_PATHS[provider]
    schema_field = "response_format" if provider == "openai" else "format"
    llm_server.script(path, Reply(status=400, body=complaint), Reply(content='{"greeting": "hi"}'))

    with caplog.at_level(logging.WARNING, logger=clients.__name__):
        assert client.complete(HELLO, json_schema=SCHEMA).text == '{"greeting": "hi"}'
        assert client.complete(HELLO, json_schema=SCHEMA).text  # remembered: no schema, no second rejection

    rejected, retried, later = llm_server.bodies(path)
    assert schema_field in rejected and schema_field not in retried and schema_field not in later
    assert client.usage.calls == 2 and client.usage.retries == 1
    assert sum("rejected the structured-output request" in r.getMessage() for r in caplog.records) == 1


def test_other_rejections_are_not_mistaken_for_missing_structured_output(llm_server):
    client = chat_client(llm_config(llm_server, "openai"))
    llm_server.script(OPENAI_CHAT, Reply(status=400, body={"error": "model 'x' not found"}))
    with pytest.raises(LLMError, match="HTTP 400"):
        client.complete(HELLO, json_schema=SCHEMA)
    assert llm_server.count(OPENAI_CHAT) == 1

    # A complaint about some other format: the call without schema fails too, so schemas keep being sent.
    bad_messages = Reply(status=400, body={"error": "invalid message format"})
    llm_server.script(OPENAI_CHAT, bad_messages, bad_messages)
    with pytest.raises(LLMError, match="invalid message format"):
        client.complete(HELLO, json_schema=SCHEMA)
    client.complete(HELLO, json_schema=SCHEMA)
    assert "response_format" in llm_server.bodies(OPENAI_CHAT)[-1]


def test_circuit_breaker_fails_fast_while_the_server_is_down(llm_server, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(clients, "_clock", lambda: now[0])
    client = chat_client(llm_config(llm_server, "ollama", max_retries=1), sleep=lambda seconds: None)  # 2 attempts
    down = Reply(status=500, body={"error": "down"})

    def failing_calls(count: int) -> None:
        llm_server.script(OLLAMA_CHAT, *[down] * (2 * count))
        for _ in range(count):
            with pytest.raises(LLMError, match="after 2 attempts"):
                client.complete(HELLO)

    failing_calls(CIRCUIT_BREAKER_THRESHOLD - 1)
    assert client.complete(HELLO).text  # a success resets the count
    failing_calls(CIRCUIT_BREAKER_THRESHOLD)
    requests = llm_server.count(OLLAMA_CHAT)
    assert requests == 2 * (2 * CIRCUIT_BREAKER_THRESHOLD - 1) + 1

    for _ in range(3):
        with pytest.raises(LLMError, match="server unavailable"):
            client.complete(HELLO)
    assert llm_server.count(OLLAMA_CHAT) == requests  # no network attempts
    assert client.usage.calls == 1

    now[0] += CIRCUIT_BREAKER_COOLDOWN_SECONDS  # one probe goes out; the server is back, so calls resume
    assert client.complete(HELLO).text and client.complete(HELLO).text
    assert llm_server.count(OLLAMA_CHAT) == requests + 2


def test_a_rate_limit_or_a_rejection_does_not_open_the_circuit(llm_server):
    client = chat_client(llm_config(llm_server, "ollama", max_retries=0))
    llm_server.script(OLLAMA_CHAT, *[Reply(status=500, body="{}")] * (CIRCUIT_BREAKER_THRESHOLD - 1),
                      Reply(status=400, body="{}"), *[Reply(status=500, body="{}")] * (CIRCUIT_BREAKER_THRESHOLD - 1))
    for _ in range(2 * CIRCUIT_BREAKER_THRESHOLD - 1):
        with pytest.raises(LLMError):
            client.complete(HELLO)
    assert client.complete(HELLO).text  # the 400 showed the server was up: the count started over
    assert llm_server.count(OLLAMA_CHAT) == 2 * CIRCUIT_BREAKER_THRESHOLD


def test_close_closes_the_connection_pool(llm_server):
    chat = chat_client(llm_config(llm_server, "ollama"))
    embedder = http_embedder(EmbedderConfig(provider="ollama"), llm_config(llm_server))
    chat.complete(HELLO)
    embedder.embed(["a"])

    chat.close()
    embedder.close()
    embedder.close()  # twice is harmless

    assert chat._http._client.is_closed and embedder._http._client.is_closed
    with pytest.raises(LLMError, match="closed"):
        chat.complete(HELLO)
    with pytest.raises(LLMError, match="closed"):
        embedder.embed(["b"])
    assert len(llm_server.requests) == 2


def _openai_reply(content, usage=None):
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3} if usage is None else usage}


@pytest.mark.parametrize("body, text, tokens", [
    (_openai_reply([{"type": "text", "text": '{"a": '}, {"type": "text", "text": "1}"}]), '{"a": 1}', (7, 3)),
    (_openai_reply("hi", {"prompt_tokens": "many", "completion_tokens": None}), "hi", (3, 1)),
    (_openai_reply("hi", ["not", "an", "object"]), "hi", (3, 1)),
    (_openai_reply("hi", {"prompt_tokens": 1e400, "completion_tokens": True}), "hi", (3, 1)),
])
def test_odd_openai_replies_are_read_where_they_can_be(llm_server, body, text, tokens):
    client = chat_client(llm_config(llm_server, "openai"))
    llm_server.script(OPENAI_CHAT, Reply(body=body))
    completion = client.complete(HELLO)  # "Say hello." is 3 tokens by estimate
    assert (completion.text, completion.prompt_tokens, completion.completion_tokens) == (text, *tokens)


@pytest.mark.parametrize("body", [
    _openai_reply([{"type": "image_url", "image_url": {"url": "x"}}]),
    _openai_reply(["plain string part"]),
    _openai_reply({"type": "text", "text": "a dict"}),
    _openai_reply(42),
    _openai_reply(None),
    {"choices": [{"message": {"role": "assistant", "content": None, "refusal": "I can't help with that."}}]},
    {"choices": [{"message": "text"}]},
    {"choices": {"0": {"message": {"content": "hi"}}}},
    {"choices": []},
    '"just a string"',
    "not json",
])
def test_unusable_openai_replies_are_llm_errors(llm_server, body):
    client = chat_client(llm_config(llm_server, "openai"))
    llm_server.script(OPENAI_CHAT, Reply(body=body))
    with pytest.raises(LLMError):
        client.complete(HELLO)
    assert client.usage.calls == 0


def test_odd_ollama_replies(llm_server):
    client = chat_client(llm_config(llm_server, "ollama"))
    llm_server.script(
        OLLAMA_CHAT,
        Reply(body={"message": {"role": "assistant", "content": "hi"}, "prompt_eval_count": "x", "eval_count": [1]}),
        Reply(body={"message": {"role": "assistant", "content": ["hi"]}}),
    )
    completion = client.complete(HELLO)
    assert (completion.text, completion.prompt_tokens, completion.completion_tokens) == ("hi", 3, 1)
    with pytest.raises(LLMError):
        client.complete(HELLO)


@pytest.mark.parametrize("provider, body", [
    ("openai", {"data": [{"index": 0, "embedding": [1.0, 0.0]}], "usage": {"prompt_tokens": "two"}}),
    ("openai", {"data": [{"index": 0, "embedding": [1.0, 0.0]}], "usage": "none"}),
    ("ollama", {"embeddings": [[1.0, 0.0]], "prompt_eval_count": {"n": 2}}),
])
def test_embedding_token_counts_that_are_not_numbers_fall_back_to_estimates(llm_server, provider, body):
    embedder = http_embedder(EmbedderConfig(provider=provider), llm_config(llm_server, provider))
    llm_server.script(EMBED_PATHS[provider], Reply(body=body))
    assert embedder.embed(["text"]).shape == (1, 2)
    assert embedder.usage.prompt_tokens == 2  # "text": 4 characters, 2 tokens by estimate


@pytest.mark.parametrize("provider, body, texts", [
    ("openai", {"data": "nope"}, ["a"]),
    ("openai", {"data": [{"index": "0", "embedding": [1.0]}, {"index": 1, "embedding": [1.0]}]}, ["a", "b"]),
    ("openai", '{"data": [{"index": 0, "embedding": [NaN, 1.0]}]}', ["a"]),
    ("ollama", {"embeddings": [{"values": [1.0]}]}, ["a"]),
    ("ollama", {"embeddings": [[]]}, ["a"]),
    ("ollama", {"embeddings": [[1.0, 2.0], [3.0]]}, ["a", "b"]),
])
def test_unusable_embedding_replies_are_llm_errors(llm_server, provider, body, texts):
    embedder = http_embedder(EmbedderConfig(provider=provider), llm_config(llm_server, provider))
    llm_server.script(EMBED_PATHS[provider], Reply(body=body))
    with pytest.raises(LLMError):
        embedder.embed(texts)
    assert embedder.usage.calls == 0


def test_client_errors_are_not_retried_and_never_show_the_key(llm_server, monkeypatch):
    monkeypatch.setenv("FAKE_LLM_KEY", "sk-secret-456")
    client = chat_client(llm_config(llm_server, "openai", api_key_env="FAKE_LLM_KEY"))
    llm_server.script(OPENAI_CHAT, Reply(status=400, body={"error": "unknown model"}))
    with pytest.raises(LLMError, match="HTTP 400") as raised:
        client.complete(HELLO)
    assert "sk-secret-456" not in str(raised.value)
    assert llm_server.count(OPENAI_CHAT) == 1 and client.usage.retries == 0


def test_connection_refused_is_an_llm_error(llm_server):
    client = chat_client(llm_config(llm_server, "ollama", base_url="http://127.0.0.1:9", max_retries=1))
    with pytest.raises(LLMError, match="after 2 attempts"):
        client.complete(HELLO)


@pytest.mark.parametrize("provider", ["openai", "ollama"])
def test_embedders_return_unit_vectors_in_batches(llm_server, provider):
    embedder = http_embedder(
        EmbedderConfig(provider=provider, model="embed-model", batch_size=2), llm_config(llm_server, provider)
    )
    assert embedder.name == f"{provider}/embed-model"
    texts = ["payments-api depends on redis", "checkout calls payments", "a", "b b", "the incident"]

    vectors = embedder.embed(texts)

    assert vectors.shape == (5, EMBEDDING_DIMENSION) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(vectors[0], hashed_embedding(texts[0]), rtol=1e-5)
    assert llm_server.count(EMBED_PATHS[provider]) == 3  # batches of 2
    assert [body["input"] for body in llm_server.bodies(EMBED_PATHS[provider])][-1] == ["the incident"]
    assert embedder.dimension == EMBEDDING_DIMENSION  # learned from the answers, no extra call
    assert llm_server.count(EMBED_PATHS[provider]) == 3
    assert embedder.usage.calls == 3 and embedder.usage.prompt_tokens > 0
    assert embedder.count_tokens("x" * 40) == 11 and embedder.max_tokens == 8192
    assert isinstance(embedder, Embedder)  # on Python 3.11 this reads every property, so it comes last


def test_embedder_dimension_is_discovered_with_one_call_or_taken_from_config(llm_server):
    discovered = http_embedder(EmbedderConfig(provider="ollama"), llm_config(llm_server))
    assert discovered.dimension == EMBEDDING_DIMENSION
    assert llm_server.count(OLLAMA_EMBED) == 1
    assert llm_server.bodies(OLLAMA_EMBED)[0]["model"] == "nomic-embed-text"  # llm.embedding_model

    configured = http_embedder(EmbedderConfig(provider="ollama", dimension=32, max_tokens=512), llm_config(llm_server))
    assert configured.dimension == 32 and configured.max_tokens == 512
    assert llm_server.count(OLLAMA_EMBED) == 1
    assert configured.embed([]).shape == (0, 32)

    wrong = http_embedder(EmbedderConfig(provider="ollama", dimension=768), llm_config(llm_server))
    with pytest.raises(LLMError, match="dimension 32, expected 768"):
        wrong.embed(["text"])


def test_embedder_retries_like_the_chat_client(llm_server):
    embedder = http_embedder(EmbedderConfig(provider="openai"), llm_config(llm_server, "openai"))
    llm_server.script(OPENAI_EMBEDDINGS, Reply(status=503, body="{}"))
    assert embedder.embed(["hello"]).shape == (1, EMBEDDING_DIMENSION)
    assert embedder.usage.retries == 1


def test_embedder_needs_an_http_provider(llm_server):
    with pytest.raises(ValueError, match="not an HTTP provider"):
        http_embedder(EmbedderConfig(provider="local"), llm_config(llm_server))
