"""The bounds every server channel (HTTP, MCP) puts on a caller: question length, answers at once (in all, and per
key, so one key's long questions cannot starve another's), and a time limit, with the work in a thread pool so the
event loop keeps answering (``/healthz``, other keys) while a question runs."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from graphrag_pipeline.lib.core.config import ServerConfig
from graphrag_pipeline.lib.core.errors import GraphRAGError

T = TypeVar("T")


class Busy(GraphRAGError):
    """No slot is free (all of the server's, or all of this key's): answered at once, not queued."""

    kind = "busy"


class TimedOut(GraphRAGError):
    """The work took longer than ``request_timeout_seconds``; it goes on in its thread, its answer is dropped."""

    kind = "busy"


def check_question(text: str, config: ServerConfig, what: str = "question") -> None:
    """A question (or subject) the servers accept: ``ValueError`` with the reason otherwise."""
    if len(text) > config.max_question_chars:
        raise ValueError(f"{what} is {len(text)} characters; at most {config.max_question_chars}")
    if not text.strip():
        raise ValueError(f"{what} is blank")


class AnswerSlots:
    def __init__(self, config: ServerConfig, thread_name: str):
        self.config = config
        self._pool = ThreadPoolExecutor(config.max_concurrent_requests, thread_name_prefix=thread_name)
        self._slots = threading.BoundedSemaphore(config.max_concurrent_requests)
        self._per_key: dict[str, int] = {}
        self._lock = threading.Lock()

    def _take(self, key: str) -> None:
        with self._lock:
            if self._per_key.get(key, 0) >= self.config.max_concurrent_requests_per_key:
                raise Busy(f"this key has {self.config.max_concurrent_requests_per_key} requests running, its "
                           "limit; try again shortly")
            if not self._slots.acquire(blocking=False):
                raise Busy(f"the server is answering {self.config.max_concurrent_requests} requests at once, its "
                           "limit; try again shortly")
            self._per_key[key] = self._per_key.get(key, 0) + 1

    def _give_back(self, key: str) -> None:
        with self._lock:
            self._per_key[key] -= 1
            if not self._per_key[key]:
                del self._per_key[key]
            self._slots.release()

    async def run(self, key: str, work: Callable[[], T]) -> T:
        """``work()`` in the pool for the caller ``key``: ``Busy`` when no slot is free, ``TimedOut`` after
        ``request_timeout_seconds`` (its slot stays taken until the thread finishes: a timed-out question still
        holds the CPU it uses)."""
        self._take(key)
        try:
            future = asyncio.get_running_loop().run_in_executor(self._pool, work)
        except BaseException:
            self._give_back(key)
            raise
        future.add_done_callback(lambda _: self._give_back(key))
        try:
            return await asyncio.wait_for(asyncio.shield(future), self.config.request_timeout_seconds)
        except asyncio.TimeoutError:
            raise TimedOut(f"the request took longer than {self.config.request_timeout_seconds:g} s") from None

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` is refused with 413 before anything reads it — before
    authentication, so a caller without a key cannot make the server hold hundreds of megabytes. A declared
    Content-Length is refused at once; a streamed body is read only up to the limit."""

    def __init__(self, app: Any, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            return await self._refuse(send)
        messages, size = [], 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                return await self._refuse(send)
            if not message.get("more_body"):
                break

        async def replay() -> dict:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Callable) -> None:
        body = json.dumps({"error": f"the request body is over {self.max_bytes} bytes"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})
