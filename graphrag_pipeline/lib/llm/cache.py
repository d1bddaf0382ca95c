"""Persistent cache of model completions, so re-running unchanged content makes no calls.

A completion is keyed by what determines it: provider, model, prompt-template version and a hash of the input (the
rendered prompt, the schema asked for, and the generation settings that change answers: temperature, the completion
length cap, structured output on or off). Editing a template changes its version and so every key that used it;
nothing needs to be invalidated by hand. One SQLite file (WAL, so readers never wait for the writer), shared by all
threads of a process through one connection behind a lock.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

from graphrag_pipeline.lib.core.ids import content_hash
from graphrag_pipeline.lib.llm.clients import Completion

_SCHEMA = """
CREATE TABLE IF NOT EXISTS completions (
    cache_key TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    template_version TEXT NOT NULL,
    text TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    created_at REAL NOT NULL
)
"""


def cache_key(provider: str, model: str, template_version: str, input_hash: str) -> str:
    return content_hash(provider, model, template_version, input_hash)


class LLMCache:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._connection = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._connection.execute("PRAGMA journal_mode=WAL")
        self._connection.execute("PRAGMA busy_timeout=30000")  # another process writing the same cache
        self._connection.execute(_SCHEMA)

    def get(self, provider: str, model: str, template_version: str, input_hash: str) -> Completion | None:
        key = cache_key(provider, model, template_version, input_hash)
        with self._lock:
            row = self._connection.execute(
                "SELECT text, prompt_tokens, completion_tokens FROM completions WHERE cache_key = ?", (key,)
            ).fetchone()
        if row is None:
            return None
        return Completion(text=row[0], prompt_tokens=row[1], completion_tokens=row[2])

    def put(self, provider: str, model: str, template_version: str, input_hash: str, completion: Completion) -> None:
        key = cache_key(provider, model, template_version, input_hash)
        with self._lock:
            self._connection.execute(
                "INSERT OR REPLACE INTO completions VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (key, provider, model, template_version, completion.text, completion.prompt_tokens,
                 completion.completion_tokens, time.time()),
            )

    def __len__(self) -> int:
        with self._lock:
            return self._connection.execute("SELECT COUNT(*) FROM completions").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._connection.close()
