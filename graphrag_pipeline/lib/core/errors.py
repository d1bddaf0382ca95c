"""The root of the pipeline's own errors, and the kind of failure each one is.

Every error the pipeline raises on purpose derives from ``GraphRAGError`` (as well as from the built-in class callers
already catch: a ``ConfigError`` is still a ``ValueError``), so a caller can catch them all, and the HTTP API and
the CLI map them by ``kind`` in one place instead of one handler per class.
"""

from __future__ import annotations

from typing import ClassVar, Literal

ErrorKind = Literal["invalid", "busy", "unavailable", "damaged", "failed"]


class GraphRAGError(Exception):
    """``kind``: invalid (the input or the configuration is wrong: fix it), busy (try again later), unavailable (a
    server, a model or the index is not there), damaged (a store must be repaired), failed (anything else)."""

    kind: ClassVar[ErrorKind] = "failed"
