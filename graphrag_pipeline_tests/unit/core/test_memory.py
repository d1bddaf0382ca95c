import gc
import threading
import weakref
from types import SimpleNamespace

import pytest

from graphrag_pipeline.lib.core.config import load_settings
from graphrag_pipeline.lib.core.memory import cycle_collector_paused
from graphrag_pipeline.lib.stages import Stage, StageReport


@pytest.fixture(autouse=True)
def collector_on():
    gc.enable()
    yield
    gc.enable()


def test_the_collector_is_off_inside_the_block_and_back_on_after_it_even_after_an_error() -> None:
    with cycle_collector_paused():
        assert not gc.isenabled()
        with cycle_collector_paused():  # nested: the outer block turns it back on
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), cycle_collector_paused():
        raise RuntimeError("a stage failed")
    assert gc.isenabled()


def test_a_block_entered_with_the_collector_off_leaves_it_off() -> None:
    gc.disable()
    with cycle_collector_paused():
        pass
    assert not gc.isenabled()


def test_cycles_made_during_a_pause_are_collected_after_it() -> None:
    class Node:
        pass

    with cycle_collector_paused():
        node = Node()
        node.itself = node
        gone = threading.Event()
        weakref.finalize(node, gone.set)
        del node
        assert not gone.is_set()  # reference counting alone cannot free a cycle
    gc.collect()
    assert gone.is_set()


@pytest.mark.parametrize("per_document", [True, False])
@pytest.mark.parametrize("remote", [False, True])
def test_a_stage_runs_with_the_collector_paused_unless_a_model_is_remote(per_document: bool, remote: bool) -> None:
    seen = []

    def run(ws, *shards):
        seen.append(gc.isenabled())
        return StageReport("probe")

    class Exclusive:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    settings = load_settings()
    if remote:  # an LLM over HTTP: its client's per-call reference cycles are collected as the stage goes
        settings = settings.with_overrides(summaries={"summarizer": "llm"})
    ws = SimpleNamespace(settings=settings, state=SimpleNamespace(exclusive=lambda name: Exclusive()))
    Stage("probe", run, per_document, ()).execute(ws, [0])
    assert seen == [remote] and gc.isenabled()
