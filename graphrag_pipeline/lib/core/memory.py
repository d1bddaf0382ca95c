"""The cycle collector's pauses around a stage."""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def cycle_collector_paused() -> Iterator[None]:
    """Python's cycle collector off for the block (reference counting frees memory as usual).

    A stage builds hundreds of thousands of small containers that live until it ends (merged elements with their
    dicts, sets and tuples; rows read from a store), and the collector, which runs every few hundred allocations and
    now and then over every object, scanned them again and again: with it, musique-100's merge took 1.7-2.6 s, and
    1.1-1.4 s without. Only reference cycles wait for the collector, and the pipeline's own data makes none; cycles
    a library makes meanwhile stay until the collector's first run after the block (so ``Stage.execute`` does not
    pause it for remote models, whose HTTP client makes some on every call). Does nothing when the collector is
    already off (a nested pause, or a caller that turned it off)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
