"""What the project's HTTP clients (LLM and embedding servers, Confluence) share: one retry loop with one policy.

A request is retried on what can pass by itself — timeouts, refused or dropped connections, 429 and 5xx — with
exponential backoff and full jitter (concurrent workers that failed together do not come back together); a server's
``Retry-After`` is waited out instead, capped so that a server cannot park the pipeline for an hour. Anything else (a
success, a 4xx that is not 429) is the answer, for the client to turn into its own result or error.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Callable

import httpx


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


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int  # in all, the first included
    backoff_seconds: float  # the first retry waits up to this; it doubles with each retry
    max_backoff_seconds: float  # also caps a server's Retry-After

    def wait(self, retry: int, retry_after: float | None) -> float:
        """Seconds before retry number `retry` (0 for the first)."""
        if retry_after is not None:
            return min(retry_after, self.max_backoff_seconds)
        return random.uniform(0, min(self.max_backoff_seconds, self.backoff_seconds * 2**retry))


@dataclass(frozen=True)
class Attempts:
    """How a retried request ended: the final answer, or (when every attempt failed) the last error, and whether
    that error says the server is unreachable or failing (a transport error or 5xx, not a 429)."""

    response: httpx.Response | None
    last_error: str = ""
    server_failing: bool = False


def send_with_retries(
    send: Callable[[], httpx.Response],
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], None] = time.sleep,
    on_retry: Callable[[int, str, float], None] = lambda retry, error, wait: None,
    excerpt_chars: int = 500,
) -> Attempts:
    """Call `send` until it answers with a success or a final status, or the attempts run out; `on_retry(retry,
    last error, wait)` is told before each wait. A request error that is not a transport error (a reply that cannot
    be read, a redirect loop) is raised: trying again would not change it."""
    last_error, failing = "", False
    for attempt in range(max(1, policy.attempts)):
        retry_after: float | None = None
        try:
            response = send()
        except httpx.TransportError as error:  # timeouts, refused or dropped connections
            last_error, failing = f"{type(error).__name__}: {error}", True
        else:
            if response.is_success or (response.status_code != 429 and response.status_code < 500):
                return Attempts(response)
            last_error = f"HTTP {response.status_code}: {response.text[:excerpt_chars]}"
            failing = response.status_code >= 500
            retry_after = retry_after_seconds(response.headers.get("Retry-After"))
        if attempt + 1 >= policy.attempts:
            break
        wait = policy.wait(attempt, retry_after)
        on_retry(attempt + 1, last_error, wait)
        sleep(wait)
    return Attempts(None, last_error, failing)
