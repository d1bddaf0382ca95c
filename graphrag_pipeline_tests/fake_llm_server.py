"""A real HTTP server on 127.0.0.1 that speaks the OpenAI and Ollama wire protocols with scripted answers.

Tests talk to it through a real socket, so retries, timeouts, headers and request bodies are exercised end to end.
Each route answers from its queue of scripted ``Reply`` objects first, then from a default: chat routes ask
``chat_responder`` (request JSON -> completion text) and wrap the text in the route's protocol envelope; embedding
routes return deterministic hashed bag-of-words vectors. Every request is logged with its JSON body, and the largest
number of requests in flight at once is recorded.

``llm_server`` is the pytest fixture: a started server, stopped after the test.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from graphrag_pipeline.lib.core.config import LLMConfig

OPENAI_CHAT = "/v1/chat/completions"
OPENAI_EMBEDDINGS = "/v1/embeddings"
OLLAMA_CHAT = "/api/chat"
OLLAMA_EMBED = "/api/embed"
ROUTES = (OPENAI_CHAT, OPENAI_EMBEDDINGS, OLLAMA_CHAT, OLLAMA_EMBED)
EMBEDDING_DIMENSION = 32
EMPTY_GRAPH = '{"entities": [], "relationships": []}'


@dataclass
class Reply:
    """One scripted answer. ``content`` is chat text wrapped in the route's envelope; ``body`` (a JSON value or a
    raw string) is sent as is instead. Token counts default to characters / 4."""

    status: int = 200
    content: str | None = None
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before answering: longer than the client's timeout makes a timeout
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


def hashed_embedding(text: str, dimension: int = EMBEDDING_DIMENSION) -> list[float]:
    """Bag of words hashed into ``dimension`` buckets, L2-normalized: same text, same vector."""
    vector = np.zeros(dimension)
    for word in re.findall(r"\w+", text.lower()):
        vector[int(hashlib.sha256(word.encode()).hexdigest()[:8], 16) % dimension] += 1.0
    norm = np.linalg.norm(vector)
    return (vector / norm if norm else vector).tolist()


def prompt_of(request: dict[str, Any]) -> str:
    """The text of a chat request's messages."""
    return "\n".join(m.get("content", "") for m in request.get("messages", []))


class FakeLLMServer:
    def __init__(self) -> None:
        self.chat_responder: Callable[[dict[str, Any]], str] = lambda request: EMPTY_GRAPH
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.authorizations: list[str | None] = []  # Authorization header of each request, in order
        self.max_in_flight = 0
        self._scripts: dict[str, deque[Reply]] = {route: deque() for route in ROUTES}
        self._in_flight = 0
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-llm-server", daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def script(self, path: str, *replies: Reply) -> None:
        """Queue answers for ``path``; each request takes the next one until the queue is empty."""
        with self._lock:
            self._scripts[path].extend(replies)

    def count(self, path: str) -> int:
        with self._lock:
            return sum(1 for logged_path, _ in self.requests if logged_path == path)

    def bodies(self, path: str) -> list[dict[str, Any]]:
        with self._lock:
            return [body for logged_path, body in self.requests if logged_path == path]

    def start(self) -> "FakeLLMServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _answer(self, path: str, request: dict[str, Any], authorization: str | None) -> tuple[Reply, bytes]:
        with self._lock:
            self.requests.append((path, request))
            self.authorizations.append(authorization)
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
            scripted = self._scripts[path].popleft() if self._scripts[path] else None
        reply = scripted or Reply()
        if reply.body is not None:
            payload = reply.body
        elif path in (OPENAI_CHAT, OLLAMA_CHAT):
            text = reply.content if reply.content is not None else self.chat_responder(request)
            payload = _chat_envelope(path, request, text, reply)
        else:
            payload = _embedding_envelope(path, request)
        return reply, (payload if isinstance(payload, str) else json.dumps(payload)).encode()

    def _done(self) -> None:
        with self._lock:
            self._in_flight -= 1


def _chat_envelope(path: str, request: dict[str, Any], text: str, reply: Reply) -> dict[str, Any]:
    prompt_tokens = reply.prompt_tokens if reply.prompt_tokens is not None else len(prompt_of(request)) // 4
    completion_tokens = reply.completion_tokens if reply.completion_tokens is not None else len(text) // 4
    if path == OPENAI_CHAT:
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "model": request.get("model"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }
    return {
        "model": request.get("model"),
        "message": {"role": "assistant", "content": text},
        "done": True,
        "prompt_eval_count": prompt_tokens,
        "eval_count": completion_tokens,
    }


def _embedding_envelope(path: str, request: dict[str, Any]) -> dict[str, Any]:
    texts = request["input"] if isinstance(request["input"], list) else [request["input"]]
    vectors = [hashed_embedding(text) for text in texts]
    tokens = sum(len(text) // 4 + 1 for text in texts)
    if path == OPENAI_EMBEDDINGS:
        return {
            "object": "list",
            "model": request.get("model"),
            "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
    return {"model": request.get("model"), "embeddings": vectors, "prompt_eval_count": tokens}


def _handler_for(server: FakeLLMServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, like real servers

        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if self.path not in ROUTES:
                self._send(404, b'{"error": "no such route"}', {})
                return
            reply, payload = server._answer(self.path, json.loads(raw or b"{}"), self.headers.get("Authorization"))
            try:
                time.sleep(reply.delay)
                self._send(reply.status, payload, reply.headers)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout) before the answer came
            finally:
                server._done()

        def _send(self, status: int, payload: bytes, headers: dict[str, str]) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

    return Handler


def llm_config(server: FakeLLMServer, provider: str = "ollama", **overrides: Any) -> LLMConfig:
    """Settings pointed at ``server`` that keep tests fast: generous timeout, few retries, millisecond backoff."""
    settings: dict[str, Any] = {
        "provider": provider,
        "base_url": server.base_url,
        "timeout_seconds": 5.0,
        "max_retries": 2,
        "backoff_seconds": 0.01,
        "max_backoff_seconds": 0.05,
        "concurrency": 1,
    }
    return LLMConfig.model_validate({**settings, **overrides})


@pytest.fixture
def llm_server() -> Iterator[FakeLLMServer]:
    server = FakeLLMServer().start()
    try:
        yield server
    finally:
        server.stop()
