"""Small helpers shared by the project's HTTP clients (LLM servers, Confluence)."""

from __future__ import annotations

import time
from email.utils import parsedate_to_datetime


def retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` as seconds: a number of seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None
