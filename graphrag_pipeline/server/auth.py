"""API keys → callers and their access groups.

Keys are configured by their SHA-256 only (``server.api_keys`` or the JSON list in ``$GRAPHRAG_API_KEYS``), so a
configuration file or a leaked environment dump holds no usable key. A request presents its key as
``Authorization: Bearer <key>`` or ``X-API-Key: <key>``; the key decides the groups, which a caller cannot choose.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pydantic import TypeAdapter, ValidationError

from graphrag_pipeline.lib.core.config import ApiKey, ServerConfig


@dataclass(frozen=True)
class Caller:
    name: str  # the key's name, for access logs
    groups: tuple[str, ...]


class KeyRing:
    def __init__(self, keys: Iterable[ApiKey]):
        self._by_digest: dict[str, ApiKey] = {}
        for key in keys:
            if key.sha256 in self._by_digest:
                raise ValueError(f"api keys {self._by_digest[key.sha256].name!r} and {key.name!r} are the same key")
            self._by_digest[key.sha256] = key

    @classmethod
    def from_config(cls, config: ServerConfig, environ: Mapping[str, str] = os.environ) -> "KeyRing":
        keys = list(config.api_keys)
        raw = environ.get(config.api_keys_env) if config.api_keys_env else None
        if raw:
            try:
                keys += TypeAdapter(list[ApiKey]).validate_json(raw)
            except ValidationError as error:
                # The message names the variable and the fields, never the value (it may hold a key by mistake).
                problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()[:3])
                raise ValueError(f"${config.api_keys_env} is not a JSON list of API keys ({problems})") from None
        return cls(keys)

    def __len__(self) -> int:
        return len(self._by_digest)

    def caller(self, presented: str | None) -> Caller | None:
        """The caller a presented key stands for; None for no key or an unknown one."""
        if not presented:
            return None
        key = self._by_digest.get(key_digest(presented))
        return Caller(key.name, key.groups) if key else None


def key_digest(key: str) -> str:
    """What the configuration stores of a key (``printf %s "$KEY" | sha256sum``)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()
