"""Named crash points inside the stages' store writes, so tests can prove that a build killed at any of them converges
when it is run again (`graphrag_pipeline_tests/end_to_end/test_crash_consistency.py`).

With ``GRAPHRAG_CRASH_AT=<point>`` in the environment the process ends at that point with ``os._exit``: no cleanup,
no rollback handler, no flush, as after ``kill -9``. In-process, ``watching(listener)`` calls ``listener(point)``
at every point passed; a listener that raises stops the build there (SQLite rolls back only the open transaction,
and the points sit between transactions, so that is the same state a kill leaves).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Callable, Iterator

CRASH_ENV = "GRAPHRAG_CRASH_AT"
KILLED_EXIT_CODE = 137  # what a shell reports for a process ended by SIGKILL

_listeners: list[Callable[[str], None]] = []


def crash_point(point: str) -> None:
    if os.environ.get(CRASH_ENV) == point:
        os._exit(KILLED_EXIT_CODE)
    for listener in list(_listeners):
        listener(point)


@contextmanager
def watching(listener: Callable[[str], None]) -> Iterator[None]:
    _listeners.append(listener)
    try:
        yield
    finally:
        _listeners.remove(listener)
