"""Progress listeners — the terminal bar and the run-log lines — driven with updates and a clock the test sets (no
waiting); and the heartbeat of a step between its batches."""

import io
import threading

from graphrag_pipeline.lib.core.progress import EveryFewSeconds, ProgressUpdate, StepProgress, TerminalProgressBar


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def drive(bar: TerminalProgressBar, clock: Clock, *steps: tuple[float, ProgressUpdate]) -> None:
    for now, update in steps:
        clock.now = now
        bar(update)


def embed(done: int, elapsed: float, total: int = 400) -> ProgressUpdate:
    return ProgressUpdate("embeddings", "embed chunks", done, total, elapsed)


def test_the_bar_redraws_one_line_at_most_ten_times_a_second_and_ends_it_when_the_step_finishes():
    terminal, clock = FakeTerminal(), Clock()
    bar = TerminalProgressBar(terminal, clock=clock)
    drive(bar, clock,
          (0.00, embed(0, 0.0)),
          (0.05, embed(100, 2.0)),  # 50 ms after the last redraw: skipped
          (0.20, embed(200, 4.0)),
          (0.21, embed(400, 8.0)))  # the final update is drawn however soon it comes
    assert terminal.getvalue() == (
        "\rembeddings: embed chunks [------------------------] 0/400 0.0/s ETA ?"
        "\rembeddings: embed chunks [############------------] 200/400 50.0/s ETA 4s"
        "\rembeddings: embed chunks [########################] 400/400 50.0/s done in 8s\n"
    )


def test_a_shorter_redraw_blanks_what_the_longer_line_left():
    terminal, clock = FakeTerminal(), Clock()
    bar = TerminalProgressBar(terminal, clock=clock)
    drive(bar, clock, (0.0, embed(1, 1.0, total=100)), (1.0, embed(90, 9.0, total=100)))
    first, second = terminal.getvalue().split("\r")[1:]
    assert first.endswith(" 1/100 1.0/s ETA 1m39s")
    assert second == "embeddings: embed chunks [#####################---] 90/100 10.0/s ETA 1s "
    assert len(second) == len(first)


def test_each_step_gets_its_own_line_and_close_ends_one_left_open():
    terminal, clock = FakeTerminal(), Clock()
    bar = TerminalProgressBar(terminal, clock=clock)
    drive(bar, clock,
          (0.0, ProgressUpdate("raw_documents", "read sources", 1, 3, 1.0)),  # stops short of its total
          (0.01, ProgressUpdate("chunks", "chunk documents", 0, 0, 0.0)),  # nothing to do: no line at all
          (0.02, ProgressUpdate("graph", "write elements", 5, 10, 1.0)))
    bar.close()
    bar.close()  # nothing open any more: no empty line
    lines = terminal.getvalue().split("\n")
    assert lines[0].startswith("\rraw_documents: read sources [") and lines[0].endswith("1/3 1.0/s ETA 2s")
    assert lines[1].startswith("\rgraph: write elements [") and lines[1].endswith("5/10 5.0/s ETA 1s")
    assert lines[2:] == [""] and "chunk documents" not in terminal.getvalue()


def test_a_narrow_terminal_shrinks_the_bar_before_the_figures_are_cut():
    bar = TerminalProgressBar(FakeTerminal())
    update = ProgressUpdate("community_summaries", "summarize communities", 30, 120, 3.0)
    figures = "30/120 10.0/s ETA 9s"
    wide, narrow, no_bar, tiny = (bar.render(update, columns) for columns in (120, 83, 70, 20))
    assert wide == f"community_summaries: summarize communities [######------------------] {figures}"
    assert len(narrow) == 82 and narrow.endswith(f"[####------------] {figures}")
    assert no_bar == f"community_summaries: summarize communities {figures}"
    assert tiny == "community_summaries"  # cut, never wrapped: "\r" could not redraw a wrapped line


def test_nothing_is_drawn_when_the_stream_is_not_a_terminal():
    captured, clock = io.StringIO(), Clock()
    bar = TerminalProgressBar(captured, clock=clock)
    drive(bar, clock, (0.0, embed(0, 0.0)), (1.0, embed(200, 4.0)), (2.0, embed(400, 8.0)))
    bar.close()
    assert not bar.enabled and captured.getvalue() == ""


def test_run_log_gets_a_steps_first_and_last_line_and_one_per_interval_between():
    lines: list[str] = []
    clock = Clock()
    log = EveryFewSeconds(lines.append, seconds=10, clock=clock)
    drive(log, clock, (0, embed(0, 0)), (4, embed(100, 4)), (11, embed(250, 11)), (15, embed(300, 15)),
          (16, embed(400, 16)))
    assert lines == [
        "embeddings: embed chunks 0/400 (0 %), 0.0/s, 0s elapsed",
        "embeddings: embed chunks 250/400 (62 %), 22.7/s, 7s left, 11s elapsed",
        "embeddings: embed chunks 400/400 (100 %), 25.0/s, 16s elapsed",
    ]


def test_run_log_says_nothing_for_a_step_with_nothing_to_do():
    lines: list[str] = []
    StepProgress("graph", "write elements", 0, [EveryFewSeconds(lines.append)])
    assert lines == []


def test_a_step_working_inside_one_batch_still_tells_its_listeners_and_stops_when_it_ends():
    """A round of 512 texts embedded for 76 s without a line: between batches a heartbeat tells the listeners, so
    the run log's line every 10 s comes whatever the batch size; a finished or dropped step beats no more."""
    heard: list[ProgressUpdate] = []
    beats = threading.Semaphore(0)

    def listener(update: ProgressUpdate) -> None:
        heard.append(update)
        beats.release()

    step = StepProgress("embeddings", "embed chunks", 512, [listener], heartbeat_seconds=0.01)
    for _ in range(4):  # the first update, then three while nothing advanced
        assert beats.acquire(timeout=60)
    assert [u.done for u in heard[:4]] == [0, 0, 0, 0]
    assert heard[3].elapsed_seconds > heard[1].elapsed_seconds  # later beats, later figures
    step.advance(512)
    finished_at = len(heard)
    dropped = StepProgress("graph", "write", 10, [listener], heartbeat_seconds=0.01)
    assert beats.acquire(timeout=60)
    del dropped  # a stage that raised lets go of its counter
    threads = [t for t in threading.enumerate() if t.name in ("progress-embeddings", "progress-graph")]
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    assert all(u.stage == "graph" for u in heard[finished_at:])  # the finished step said nothing after its last
