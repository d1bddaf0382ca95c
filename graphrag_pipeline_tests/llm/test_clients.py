"""Chat and embedding clients against the fake server: both wire protocols, accounting, retries, timeouts."""

from __future__ import annotations

import numpy as np
import pytest

from graphrag_pipeline.lib.config import EmbedderConfig, PriceSpec
from graphrag_pipeline.lib.llm.clients import (
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
from graphrag_pipeline_tests.llm.fake_llm_server import (
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

    assert completion.text == "hello there" and not completion.cached
    assert (completion.prompt_tokens, completion.completion_tokens) == (1000, 500)
    assert completion.model == "priced-model"
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


def test_api_key_comes_from_the_named_environment_variable(llm_server, monkeypatch):
    monkeypatch.setenv("FAKE_LLM_KEY", "sk-test-123")
    chat_client(llm_config(llm_server, "openai", api_key_env="FAKE_LLM_KEY")).complete(HELLO)
    chat_client(llm_config(llm_server, "openai", api_key_env="UNSET_FAKE_LLM_KEY")).complete(HELLO)
    assert llm_server.authorizations == ["Bearer sk-test-123", None]


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
