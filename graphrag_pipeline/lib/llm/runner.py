"""Calls through the cache, and work spread over a bounded number of threads.

``LLMRunner.complete_cached`` renders a template, looks the result up in the persistent cache (a hit is counted and
makes no request) and otherwise calls the model and stores what it said. ``LLMRunner.map`` runs a function over
items with at most ``concurrency`` in flight; the first exception stops the items not yet started and is raised, so
``BudgetExceeded`` ends a stage cleanly.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from graphrag_pipeline.lib.core.config import LLMConfig
from graphrag_pipeline.lib.core.ids import content_hash
from graphrag_pipeline.lib.llm.accounting import Usage
from graphrag_pipeline.lib.llm.cache import LLMCache
from graphrag_pipeline.lib.llm.clients import ChatClient, ChatMessage, Completion, chat_client
from graphrag_pipeline.lib.llm.prompts import PromptTemplate

T = TypeVar("T")
R = TypeVar("R")


class LLMRunner:
    def __init__(self, client: ChatClient, cache: LLMCache | None = None, *, concurrency: int = 1):
        self.client = client
        self.cache = cache
        self.concurrency = max(1, concurrency)

    @property
    def usage(self) -> Usage:
        """The client's accounting; cache hits and given-up outputs are recorded there too."""
        return self.client.usage

    def complete_cached(
        self,
        template: PromptTemplate,
        values: Mapping[str, object],
        *,
        json_schema: dict[str, Any] | None = None,
        schema_name: str = "output",
    ) -> Completion:
        prompt = template.format(**values)
        # The schema is input too: the same prompt under another schema may well produce different output. So are the
        # generation settings: an answer cut off at the old max_completion_tokens must not outlive raising it.
        input_hash = content_hash(
            prompt,
            json.dumps(json_schema, sort_keys=True) if json_schema else "",
            json.dumps(self.client.generation_settings, sort_keys=True),
        )
        key = (self.client.provider, self.client.model, template.version, input_hash)
        if self.cache is not None:
            cached = self.cache.get(*key)
            if cached is not None:
                self.usage.record_cache_hit()
                return cached
        completion = self.client.complete(
            [ChatMessage("user", prompt)], json_schema=json_schema, schema_name=schema_name
        )
        if self.cache is not None:
            self.cache.put(*key, completion)
        return completion

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """``[fn(item) for item in items]`` with up to ``concurrency`` running at once, results in input order."""
        if self.concurrency == 1 or len(items) <= 1:
            return [fn(item) for item in items]
        with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="llm") as pool:
            futures: list[Future[R]] = [pool.submit(fn, item) for item in items]
            try:
                return [future.result() for future in futures]
            except BaseException:
                for future in futures:
                    future.cancel()  # items not started yet; running ones finish (their calls are paid for)
                raise

    def close(self) -> None:
        self.client.close()
        if self.cache is not None:
            self.cache.close()


def llm_runner(config: LLMConfig, cache_path: str | Path | None = None, *, usage: Usage | None = None) -> LLMRunner:
    """Client, cache (when ``config.cache`` and a path are given) and runner for one run."""
    cache = LLMCache(cache_path) if config.cache and cache_path is not None else None
    return LLMRunner(chat_client(config, usage=usage), cache, concurrency=config.concurrency)
