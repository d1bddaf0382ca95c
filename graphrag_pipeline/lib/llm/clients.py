"""HTTP clients for chat and embedding models: OpenAI-compatible servers and Ollama, on httpx.

Wire protocols:

- OpenAI: ``POST /v1/chat/completions`` (structured output as ``response_format`` ``json_schema``, ``strict: false``
  so schemas need not list every property as required; the length cap as ``max_completion_tokens``, since o-series
  models reject the deprecated ``max_tokens``) and ``POST /v1/embeddings``; tokens from ``usage``.
- Ollama: ``POST /api/chat`` (structured output as ``format: <schema>``) and ``POST /api/embed``; tokens from
  ``prompt_eval_count`` / ``eval_count``.

Every request goes through ``JsonHttp``: at most ``concurrency`` requests in flight per client, a timeout, and retries (``lib/core/http.py``)
on 429, 5xx, timeouts and connection errors with exponential backoff and full jitter (a server's ``Retry-After`` is
waited out instead, capped at ``max_backoff_seconds`` so a server cannot park the pipeline for an hour). Other 4xx
are the caller's mistake and fail at once. After ``CIRCUIT_BREAKER_THRESHOLD`` consecutive calls have failed for
good because the server was unreachable (connection errors, timeouts, 5xx), further calls fail at once without a
request ("server unavailable") until a probe after ``CIRCUIT_BREAKER_COOLDOWN_SECONDS`` succeeds, so a server that is
down does not cost every chunk a full backoff sequence. Before each call the budget is checked (``Usage.reserve``),
so a run stops before it overspends rather than after.

A server that rejects the structured-output request (HTTP 400 naming the format or schema: older Ollama, llama.cpp
builds) gets the call again without the schema, and no schema for the rest of the client's life; the prompts ask for
JSON anyway. Replies that are not what the protocol promises (content that is not text, missing fields) raise
``LLMError``, which callers retry later or quarantine; token counts that are missing or not numbers fall back to
estimates.

The API key is read from the environment variable the configuration names (``llm.api_key_env``) and sent as a Bearer
token to the openai provider only, never to Ollama; it is never logged or put into an error message.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import httpx
import numpy as np

from graphrag_pipeline.lib.core.config import EmbedderConfig, LLMConfig
from graphrag_pipeline.lib.core.http import RetryPolicy, send_with_retries
from graphrag_pipeline.lib.llm.accounting import Usage, approximate_tokens
from graphrag_pipeline.lib.llm.errors import LLMError, LLMRequestRejected, LLMUnavailable

log = logging.getLogger(__name__)

DEFAULT_OLLAMA_BASE_URL = "http://localhost:11434"
DEFAULT_OPENAI_BASE_URL = "https://api.openai.com"
DEFAULT_EMBEDDING_MAX_TOKENS = 8192
ERROR_BODY_CHARS = 500  # enough of a server's error body to see what it complained about
# Consecutive calls that failed after all their retries because the server was unreachable (connection errors,
# timeouts, 5xx) before the client stops trying: five full backoff sequences are evidence enough that the server is
# down, and each further one would only cost minutes before the same error.
CIRCUIT_BREAKER_THRESHOLD = 5
# While the breaker is open, one call per this many seconds goes out as a probe; its success closes the breaker (a
# long-lived process, e.g. a query server embedding questions, recovers once the server is back).
CIRCUIT_BREAKER_COOLDOWN_SECONDS = 30.0
_clock = time.monotonic  # module level so tests can move time forward


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int


@runtime_checkable
class ChatClient(Protocol):
    """A chat model behind some wire protocol; every call is accounted in ``usage``."""

    @property
    def provider(self) -> str: ...

    @property
    def model(self) -> str: ...

    @property
    def usage(self) -> Usage: ...

    @property
    def generation_settings(self) -> dict[str, Any]:
        """What besides the prompt and the schema changes an answer (part of the completion cache key)."""
        ...

    def complete(
        self, messages: Sequence[ChatMessage], *, json_schema: dict[str, Any] | None = None, schema_name: str = "output"
    ) -> Completion: ...

    def close(self) -> None: ...


def resolve_base_url(provider: str, configured: str | None) -> str:
    """The configured base URL, else the provider's environment variable, else its public default.

    OpenAI's own SDK takes base URLs ending in ``/v1``; that suffix is accepted and dropped, since the paths here
    carry it."""
    if configured:
        url = configured
    elif provider == "ollama":
        url = os.environ.get("OLLAMA_BASE_URL") or DEFAULT_OLLAMA_BASE_URL
    else:
        url = os.environ.get("OPENAI_BASE_URL") or DEFAULT_OPENAI_BASE_URL
    url = url.rstrip("/")
    return url[: -len("/v1")] if provider == "openai" and url.endswith("/v1") else url


class JsonHttp:
    """POST JSON, get JSON: bounded concurrency, timeouts, retries with backoff (each retry counted in usage)."""

    def __init__(
        self,
        base_url: str,
        config: LLMConfig,
        usage: Usage,
        *,
        api_key: str | None = None,
        sleep: Callable[[float], None] = time.sleep,  # injectable so tests can see the waits without waiting
    ):
        self.base_url = base_url
        self._config = config
        self._usage = usage
        self._sleep = sleep
        self._retry = RetryPolicy(config.max_retries + 1, config.backoff_seconds, config.max_backoff_seconds)
        self._slots = threading.BoundedSemaphore(config.concurrency)
        self._closed = False
        # Circuit breaker state, under its lock: see CIRCUIT_BREAKER_THRESHOLD.
        self._circuit_lock = threading.Lock()
        self._consecutive_unavailable = 0
        self._circuit_open_until = 0.0
        self._last_unavailable_error = ""
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(
            base_url=base_url,
            headers=headers,
            timeout=config.timeout_seconds,
            limits=httpx.Limits(max_connections=config.concurrency, max_keepalive_connections=config.concurrency),
        )

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self._closed:
            raise LLMError(f"POST {self.base_url}{path} not attempted: the client is closed")
        self._check_circuit(path)
        def send() -> httpx.Response:
            with self._slots:
                return self._client.post(path, json=body)

        def retrying(retry: int, error: str, wait: float) -> None:
            self._usage.record_retry()
            log.warning("POST %s%s failed (%s); retry %d/%d in %.2fs", self.base_url, path, error, retry,
                        self._config.max_retries, wait)

        try:
            attempts = send_with_retries(send, self._retry, sleep=self._sleep, on_retry=retrying,
                                         excerpt_chars=ERROR_BODY_CHARS)
        except httpx.RequestError as error:  # a reply that could not be read (bad encoding, redirect loop)
            raise LLMError(f"POST {self.base_url}{path} failed: {type(error).__name__}: {error}") from error
        response = attempts.response
        if response is None:
            message = f"POST {self.base_url}{path} failed after {self._retry.attempts} attempts: {attempts.last_error}"
            if attempts.server_failing:
                self._server_unavailable(attempts.last_error)
                raise LLMUnavailable(message)
            raise LLMError(message)  # rate-limited to the end: the server is there
        self._server_answered()
        if response.is_success:
            return _json_body(response, path)
        excerpt = response.text[:ERROR_BODY_CHARS]
        raise LLMRequestRejected(
            f"POST {self.base_url}{path} was rejected with HTTP {response.status_code}: {excerpt}",
            response.status_code, excerpt,
        )

    def _check_circuit(self, path: str) -> None:
        """Fail at once while the breaker is open; once the cooldown is over, let one call through as a probe."""
        with self._circuit_lock:
            if self._consecutive_unavailable < CIRCUIT_BREAKER_THRESHOLD:
                return
            now = _clock()
            if now < self._circuit_open_until:
                raise LLMUnavailable(
                    f"POST {self.base_url}{path} not attempted: server unavailable "
                    f"({self._consecutive_unavailable} consecutive calls failed after all retries, last: "
                    f"{self._last_unavailable_error}); next try in {self._circuit_open_until - now:.0f}s"
                )
            self._circuit_open_until = now + CIRCUIT_BREAKER_COOLDOWN_SECONDS  # the others wait for this probe

    def _server_answered(self) -> None:
        with self._circuit_lock:
            if self._consecutive_unavailable >= CIRCUIT_BREAKER_THRESHOLD:
                log.warning("%s answers again; calls resume", self.base_url)
            self._consecutive_unavailable = 0
            self._circuit_open_until = 0.0

    def _server_unavailable(self, error: str) -> None:
        with self._circuit_lock:
            self._consecutive_unavailable += 1
            self._last_unavailable_error = error
            if self._consecutive_unavailable >= CIRCUIT_BREAKER_THRESHOLD:
                self._circuit_open_until = _clock() + CIRCUIT_BREAKER_COOLDOWN_SECONDS
                if self._consecutive_unavailable == CIRCUIT_BREAKER_THRESHOLD:
                    log.warning("%s looks down: %d consecutive calls failed after all retries (last: %s); further "
                                "calls fail at once, one probe every %.0fs", self.base_url,
                                self._consecutive_unavailable, error, CIRCUIT_BREAKER_COOLDOWN_SECONDS)

    def close(self) -> None:
        self._closed = True
        self._client.close()


def _json_body(response: httpx.Response, path: str) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError as error:
        raise LLMError(f"POST {path} answered HTTP {response.status_code} with a body that is not JSON: "
                       f"{response.text[:ERROR_BODY_CHARS]!r}") from error
    if not isinstance(data, dict):
        raise LLMError(f"POST {path} answered with JSON that is not an object: {response.text[:ERROR_BODY_CHARS]!r}")
    return data



def _api_key(provider: str, config: LLMConfig) -> str | None:
    """The key for ``provider``: only the openai provider gets one; Ollama needs none and must not see it."""
    if provider != "openai":
        return None
    return os.environ.get(config.api_key_env) or None


def _token_count(value: Any, fallback: int) -> int:
    """A token count from a reply when it is a positive finite number, else ``fallback`` (absent, null, garbled)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return fallback
    return int(value)


def _excerpt(data: Any) -> str:
    return str(data)[:ERROR_BODY_CHARS]


def _prompt_tokens_estimate(messages: Sequence[ChatMessage]) -> int:
    return sum(approximate_tokens(m.content) for m in messages)


class HttpChatClient:
    """What both chat wire protocols share: budget reservation, the HTTP call, accounting."""

    provider = ""
    _path = ""

    def __init__(self, config: LLMConfig, *, usage: Usage | None = None, sleep: Callable[[float], None] = time.sleep):
        self._config = config
        self._usage = usage or Usage(config.prices, config.budget_usd)
        self._usage.require_price(config.model)
        self._http = JsonHttp(
            resolve_base_url(self.provider, config.base_url), config, self._usage,
            api_key=_api_key(self.provider, config), sleep=sleep,
        )
        self._schema_unsupported = False  # the server rejected structured output once: stop sending schemas
        self._schema_lock = threading.Lock()

    @property
    def model(self) -> str:
        return self._config.model

    @property
    def usage(self) -> Usage:
        return self._usage

    @property
    def generation_settings(self) -> dict[str, Any]:
        return {
            "temperature": self._config.temperature,
            "max_completion_tokens": self._config.max_completion_tokens,
            "structured_output": self._config.structured_output,
        }

    def complete(
        self, messages: Sequence[ChatMessage], *, json_schema: dict[str, Any] | None = None, schema_name: str = "output"
    ) -> Completion:
        """One chat completion. With ``json_schema`` and ``structured_output`` on, the server is asked to produce
        JSON matching it; the text is returned as is either way (parsing and repair are the caller's)."""
        max_completion = self._config.max_completion_tokens
        reserved = self._usage.reserve(self.model, _prompt_tokens_estimate(messages), max_completion)
        try:
            send_schema = self._config.structured_output and not self._schema_unsupported
            data = self._post(messages, json_schema if send_schema else None, schema_name)
            completion = self._parse(data, messages)
        except BaseException:
            self._usage.release(reserved)
            raise
        self._usage.record_call(self.model, completion.prompt_tokens, completion.completion_tokens, reserved)
        return completion

    def _post(
        self, messages: Sequence[ChatMessage], json_schema: dict[str, Any] | None, schema_name: str
    ) -> dict[str, Any]:
        """The call; when the server rejects the structured-output request, the same call once without the schema."""
        try:
            return self._http.post(self._path, self._request_body(messages, json_schema, schema_name))
        except LLMRequestRejected as error:
            if json_schema is None or not error.rejects_structured_output:
                raise
            rejection = f"HTTP {error.status_code}: {error.body_excerpt}"
        self._usage.record_retry()
        data = self._http.post(self._path, self._request_body(messages, None, schema_name))
        # Only now is it clear the schema was the problem (the same request without it went through).
        with self._schema_lock:
            first = not self._schema_unsupported
            self._schema_unsupported = True
        if first:
            log.warning("%s at %s rejected the structured-output request (%s); sending no JSON schema for the rest "
                        "of this run (the prompts still ask for JSON)", self.model, self._http.base_url, rejection)
        return data

    def close(self) -> None:
        self._http.close()

    def _request_body(
        self, messages: Sequence[ChatMessage], json_schema: dict[str, Any] | None, schema_name: str
    ) -> dict[str, Any]:
        raise NotImplementedError

    def _parse(self, data: dict[str, Any], messages: Sequence[ChatMessage]) -> Completion:
        raise NotImplementedError


def _wire_messages(messages: Sequence[ChatMessage]) -> list[dict[str, str]]:
    """Chat messages as both wire protocols spell them."""
    return [{"role": m.role, "content": m.content} for m in messages]


class OpenAIChatClient(HttpChatClient):
    """``/v1/chat/completions`` of OpenAI or any compatible server (vLLM, llama.cpp server, LiteLLM, …)."""

    provider = "openai"
    _path = "/v1/chat/completions"

    def _request_body(
        self, messages: Sequence[ChatMessage], json_schema: dict[str, Any] | None, schema_name: str
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": _wire_messages(messages),
            "temperature": self._config.temperature,
            "max_completion_tokens": self._config.max_completion_tokens,  # not max_tokens: o-series reject it
        }
        if json_schema is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": schema_name, "schema": json_schema, "strict": False},
            }
        return body

    def _parse(self, data: dict[str, Any], messages: Sequence[ChatMessage]) -> Completion:
        choices = data.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict) or "content" not in message:
            raise LLMError(f"chat completion without choices[0].message.content: {_excerpt(data)}")
        text = _message_text(message)
        usage = data.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        return Completion(
            text=text,
            prompt_tokens=_token_count(usage.get("prompt_tokens"), _prompt_tokens_estimate(messages)),
            completion_tokens=_token_count(usage.get("completion_tokens"), approximate_tokens(text)),
        )


def _message_text(message: dict[str, Any]) -> str:
    """An OpenAI message's text: a string, or an array of content parts whose text parts are joined."""
    content = message["content"]
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        if all(isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
               for part in content):
            return "".join(part["text"] for part in content)
        raise LLMError(f"chat completion whose content parts are not all text: {_excerpt(content)}")
    if content is None and message.get("refusal"):
        raise LLMError(f"the model refused: {_excerpt(message['refusal'])}")
    raise LLMError(f"chat completion whose message.content is {type(content).__name__}, not text: "
                   f"{_excerpt(message)}")


class OllamaChatClient(HttpChatClient):
    """Ollama's native ``/api/chat`` (not streamed)."""

    provider = "ollama"
    _path = "/api/chat"

    def _request_body(
        self, messages: Sequence[ChatMessage], json_schema: dict[str, Any] | None, schema_name: str
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": _wire_messages(messages),
            "stream": False,
            "options": {"temperature": self._config.temperature, "num_predict": self._config.max_completion_tokens},
        }
        if json_schema is not None:
            body["format"] = json_schema  # Ollama has no schema name
        return body

    def _parse(self, data: dict[str, Any], messages: Sequence[ChatMessage]) -> Completion:
        message = data.get("message")
        if not isinstance(message, dict) or not isinstance(message.get("content"), str):
            raise LLMError(f"Ollama chat reply without message.content: {str(data)[:ERROR_BODY_CHARS]}")
        text = message["content"]
        return Completion(
            text=text,
            prompt_tokens=_token_count(data.get("prompt_eval_count"), _prompt_tokens_estimate(messages)),
            completion_tokens=_token_count(data.get("eval_count"), approximate_tokens(text)),
        )


def chat_client(
    config: LLMConfig, *, usage: Usage | None = None, sleep: Callable[[float], None] = time.sleep
) -> ChatClient:
    """The chat client for the configured provider."""
    client_class = OpenAIChatClient if config.provider == "openai" else OllamaChatClient
    return client_class(config, usage=usage, sleep=sleep)


class HttpEmbedder:
    """`Embedder` over an embedding endpoint: batches, accounting, float32 unit vectors.

    ``count_tokens`` is an approximation (characters / 4): remote models do not expose their tokenizer, and the
    pipeline only uses the count to keep chunks under ``max_tokens``, which for these models is far above chunk
    sizes."""

    provider = ""
    _path = ""

    def __init__(
        self,
        config: EmbedderConfig,
        llm: LLMConfig,
        *,
        usage: Usage | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self._config = config
        self._model = config.model or llm.embedding_model
        self._usage = usage or Usage(llm.prices, llm.budget_usd)
        self._usage.require_price(self._model)
        # llm.base_url belongs to the chat provider: an embedder on the same provider shares it, one on another
        # provider resolves its own ($OLLAMA_BASE_URL / $OPENAI_BASE_URL, else the public default). The key, too, goes
        # by the embedder's provider. Timeouts, retries and concurrency are llm's.
        base_url = resolve_base_url(self.provider, llm.base_url if llm.provider == self.provider else None)
        self._http = JsonHttp(base_url, llm, self._usage, api_key=_api_key(self.provider, llm), sleep=sleep)
        self._dimension = config.dimension
        self._dimension_lock = threading.Lock()

    @property
    def name(self) -> str:
        return f"{self.provider}/{self._model}"

    @property
    def usage(self) -> Usage:
        return self._usage

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            # Not configured and nothing embedded yet: one call tells (the size belongs to the model, not the text).
            self._embed_batch(["dimension probe"])
        assert self._dimension is not None  # set by every successful batch
        return self._dimension

    @property
    def max_tokens(self) -> int:
        return self._config.max_tokens or DEFAULT_EMBEDDING_MAX_TOKENS

    def count_tokens(self, text: str) -> int:
        return approximate_tokens(text)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        batch_size = self._config.batch_size
        batches = [self._embed_batch(texts[i: i + batch_size]) for i in range(0, len(texts), batch_size)]
        return np.concatenate(batches, axis=0)

    def close(self) -> None:
        self._http.close()

    def _embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        reserved = self._usage.reserve(self._model, sum(approximate_tokens(t) for t in texts), 0)
        try:
            data = self._http.post(self._path, {"model": self._model, "input": list(texts)})
            raw_vectors, prompt_tokens = self._parse(data)
            if len(raw_vectors) != len(texts):
                raise LLMError(f"{self.name} returned {len(raw_vectors)} vectors for {len(texts)} texts")
            try:
                vectors = np.asarray(raw_vectors, dtype=np.float32)
            except (TypeError, ValueError, OverflowError) as error:  # ragged, non-numeric or huge
                raise LLMError(f"{self.name} returned vectors that are not one numeric matrix: {error}") from error
            if vectors.ndim != 2 or vectors.shape[1] == 0:
                raise LLMError(f"{self.name} returned vectors that are not one numeric matrix")
            if not np.isfinite(vectors).all():
                raise LLMError(f"{self.name} returned vectors with NaN or infinite components")
        except BaseException:
            self._usage.release(reserved)
            raise
        self._usage.record_call(self._model, prompt_tokens or sum(approximate_tokens(t) for t in texts), 0, reserved)
        self._check_dimension(vectors.shape[1])
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.where(norms == 0, 1.0, norms)  # an all-zero vector stays zero instead of becoming NaN

    def _check_dimension(self, dimension: int) -> None:
        with self._dimension_lock:
            if self._dimension is None:
                self._dimension = dimension
            elif dimension != self._dimension:
                raise LLMError(f"{self.name} returned vectors of dimension {dimension}, expected {self._dimension}")

    def _parse(self, data: dict[str, Any]) -> tuple[list[list[float]], int]:
        raise NotImplementedError


class OpenAIEmbedder(HttpEmbedder):
    provider = "openai"
    _path = "/v1/embeddings"

    def _parse(self, data: dict[str, Any]) -> tuple[list[list[float]], int]:
        try:
            items = sorted(data["data"], key=lambda item: item.get("index", 0))
            vectors = [item["embedding"] for item in items]
        except (KeyError, TypeError, AttributeError) as error:
            raise LLMError(f"embedding reply without data[].embedding: {str(data)[:ERROR_BODY_CHARS]}") from error
        usage = data.get("usage")
        return vectors, _token_count(usage.get("prompt_tokens") if isinstance(usage, dict) else None, 0)


class OllamaEmbedder(HttpEmbedder):
    provider = "ollama"
    _path = "/api/embed"

    def _parse(self, data: dict[str, Any]) -> tuple[list[list[float]], int]:
        vectors = data.get("embeddings")
        if not isinstance(vectors, list):
            raise LLMError(f"Ollama embed reply without embeddings: {str(data)[:ERROR_BODY_CHARS]}")
        return vectors, _token_count(data.get("prompt_eval_count"), 0)


def http_embedder(
    config: EmbedderConfig,
    llm: LLMConfig,
    *,
    usage: Usage | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> HttpEmbedder:
    """The embedder for an HTTP provider (``embedder.provider`` ollama or openai)."""
    if config.provider == "openai":
        return OpenAIEmbedder(config, llm, usage=usage, sleep=sleep)
    if config.provider == "ollama":
        return OllamaEmbedder(config, llm, usage=usage, sleep=sleep)
    raise ValueError(f"embedder provider {config.provider!r} is not an HTTP provider")
