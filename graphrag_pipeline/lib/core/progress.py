"""Progress of a stage's long steps, for whoever watches the build: Dagster's event log, a terminal's progress bar.

A stage counts its items through `Workspace.progress(stage, step, total)`; every listener the workspace was given
receives each `ProgressUpdate` and decides itself how often to show one (a log line every few seconds, a bar that
redraws). Without listeners, counting costs nothing.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Callable, Sequence, TextIO

ProgressListener = Callable[["ProgressUpdate"], None]


@dataclass(frozen=True)
class ProgressUpdate:
    stage: str
    step: str
    done: int
    total: int
    elapsed_seconds: float

    @property
    def finished(self) -> bool:
        return self.done >= self.total

    @property
    def rate(self) -> float:
        """Items per second so far."""
        return self.done / self.elapsed_seconds if self.elapsed_seconds > 0 else 0.0

    @property
    def eta_seconds(self) -> float | None:
        """Seconds left at the rate so far (None before the first item)."""
        if self.finished:
            return 0.0
        return (self.total - self.done) / self.rate if self.rate > 0 else None

    def message(self) -> str:
        share = f" ({100 * self.done / self.total:.0f} %)" if self.total else ""
        eta = self.eta_seconds
        left = f", {_duration(eta)} left" if eta is not None and not self.finished else ""
        return (f"{self.stage}: {self.step} {self.done:,}/{self.total:,}{share}, {self.rate:,.1f}/s"
                f"{left}, {_duration(self.elapsed_seconds)} elapsed")


# While a step works inside one batch (a round of 512 texts can embed for a minute), its listeners still hear from it
# this often, so a log that shows a line every 10 s never goes quiet.
HEARTBEAT_SECONDS = 5.0


class StepProgress:
    """One step's counter: `advance(n)` after each batch tells every listener, and so does a heartbeat between
    batches (every `heartbeat_seconds`, from a daemon thread that ends with the step or when the counter is
    dropped: a step that raised stops beating once its stage lets go of it)."""

    def __init__(self, stage: str, step: str, total: int, listeners: Sequence[ProgressListener],
                 heartbeat_seconds: float = HEARTBEAT_SECONDS):
        self.stage, self.step, self.total = stage, step, total
        self.done = 0
        self._listeners = listeners
        self._started = time.perf_counter()
        self._telling = threading.Lock()  # the heartbeat and the step's own thread tell one at a time
        self._tell()
        if listeners and total > 0 and heartbeat_seconds > 0:
            threading.Thread(target=_beat, args=(weakref.ref(self), heartbeat_seconds), daemon=True,
                             name=f"progress-{stage}").start()

    def advance(self, items: int = 1) -> None:
        self.done += items
        self._tell()

    def _tell(self, beat: bool = False) -> None:
        if not self._listeners:
            return
        with self._telling:
            if beat and self.done >= self.total:
                return  # the step finished while the beat was waking: its last update was its own
            update = ProgressUpdate(self.stage, self.step, self.done, self.total,
                                    time.perf_counter() - self._started)
            for listener in self._listeners:
                listener(update)


def _beat(progress: weakref.ref[StepProgress], seconds: float) -> None:
    while True:
        time.sleep(seconds)
        step = progress()
        if step is None or step.done >= step.total:
            return
        step._tell(beat=True)
        del step  # hold no reference while asleep: dropping the counter ends the beat


class EveryFewSeconds:
    """A listener that passes on the first and last update of a step and at most one every `seconds` in between:
    what a log can carry (the event log of a 10-minute embedding step gets ~60 lines, not 4,000). A step with
    nothing to do says nothing."""

    def __init__(self, emit: Callable[[str], None], seconds: float = 10.0,
                 clock: Callable[[], float] = time.monotonic):
        self._emit = emit
        self._seconds = seconds
        self._clock = clock  # injectable so tests decide what the interval sees without waiting
        self._last: dict[tuple[str, str], float] = {}

    def __call__(self, update: ProgressUpdate) -> None:
        if update.total == 0:
            return  # nothing to do in this step (nothing changed): no line
        key = (update.stage, update.step)
        now = self._clock()
        first = key not in self._last
        if first or update.finished or now - self._last[key] >= self._seconds:
            self._emit(update.message())
            self._last[key] = now
            if update.finished:
                del self._last[key]


class TerminalProgressBar:
    """A listener that redraws one line on a terminal (stderr): stage and step, a bar, done/total, rate and time left.

    It draws only when `stream` is a terminal: carriage returns and a redraw every 0.1 s would fill a log file or a
    captured stream with thousands of partial lines. Redraws are throttled to `redraws_per_second` (a step that
    advances per item would otherwise spend more on drawing than on its items); a step's first and final updates are
    always drawn, and the final one ends the line, so every finished step leaves one line with its count and time.
    A step with nothing to do (total 0: nothing changed since the last build) draws nothing.
    """

    def __init__(self, stream: TextIO, *, redraws_per_second: float = 10.0, bar_width: int = 24,
                 clock: Callable[[], float] = time.monotonic):
        self.enabled = stream.isatty()
        self._stream = stream
        self._interval = 1.0 / redraws_per_second
        self._bar_width = bar_width
        self._clock = clock  # injectable so tests decide what the throttle sees without waiting
        self._step: tuple[str, str] | None = None  # the step on the open line
        self._last_draw = 0.0
        self._drawn = 0  # length of the open line (0: none), to blank what a shorter redraw would leave behind

    def __call__(self, update: ProgressUpdate) -> None:
        if not self.enabled or update.total == 0:
            return
        step = (update.stage, update.step)
        now = self._clock()
        if step == self._step and not update.finished and now - self._last_draw < self._interval:
            return
        if self._drawn and step != self._step:
            self.close()  # a step that stopped short of its total keeps its last state on its own line
        self._step, self._last_draw = step, now
        self._draw(self.render(update, self._columns()), end_line=update.finished)

    def render(self, update: ProgressUpdate, columns: int = 80) -> str:
        """The line for `update`, at most `columns - 1` wide: a line that wraps cannot be redrawn in place by "\r",
        so in a narrow window the bar shrinks (and goes) before the figures are cut."""
        label = f"{update.stage}: {update.step}"
        if update.finished:
            tail = f"done in {_duration(update.elapsed_seconds)}"
        else:
            eta = update.eta_seconds
            tail = f"ETA {_duration(eta)}" if eta is not None else "ETA ?"
        figures = f"{update.done:,}/{update.total:,} {update.rate:,.1f}/s {tail}"
        width = min(self._bar_width, columns - 1 - len(label) - len(figures) - len(" [] "))
        if width < 5:
            return f"{label} {figures}"[: columns - 1]
        filled = width * min(update.done, update.total) // update.total
        return f"{label} [{'#' * filled}{'-' * (width - filled)}] {figures}"

    def close(self) -> None:
        """End a line left open (a step that failed or stopped short), so what is printed next starts on its own."""
        if self._drawn:
            self._stream.write("\n")
            self._stream.flush()
        self._drawn, self._step = 0, None

    def _draw(self, line: str, *, end_line: bool) -> None:
        self._stream.write("\r" + line.ljust(self._drawn))
        self._drawn = len(line)
        if end_line:
            self.close()
        else:
            self._stream.flush()

    def _columns(self) -> int:
        """The terminal's width, read per draw (the window may be resized); 80 when the stream cannot say (a
        pseudo-terminal nobody sized reports 0)."""
        try:
            return os.get_terminal_size(self._stream.fileno()).columns or 80
        except (AttributeError, OSError, ValueError):
            return 80


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
