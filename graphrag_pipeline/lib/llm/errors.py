"""The errors of model calls, apart from the clients that raise them: a caller that only catches them (the CLI)
need not import the HTTP stack."""

from __future__ import annotations

import re

from graphrag_pipeline.lib.core.errors import GraphRAGError

# A 400/422 whose body names one of these is taken as the server not supporting structured output.
_STRUCTURED_OUTPUT_REJECTION = re.compile(r"format|schema", re.IGNORECASE)


class LLMError(GraphRAGError, RuntimeError):
    """A model call that failed for good: retries exhausted, a request the server rejects, or an unusable reply."""

    kind = "unavailable"


class LLMUnavailable(LLMError):
    """The server could not be reached or kept failing (connection errors, timeouts, 5xx) through every retry, or the
    circuit breaker is open because earlier calls did: nothing about the request itself was wrong."""


class LLMRequestRejected(LLMError):
    """The server refused the request itself (a 4xx other than 429): sending it again unchanged cannot help."""

    def __init__(self, message: str, status_code: int, body_excerpt: str):
        super().__init__(message)
        self.status_code = status_code
        self.body_excerpt = body_excerpt

    @property
    def rejects_structured_output(self) -> bool:
        """Whether the complaint is about the requested output format (a server without structured output)."""
        return self.status_code in (400, 422) and bool(_STRUCTURED_OUTPUT_REJECTION.search(self.body_excerpt))
