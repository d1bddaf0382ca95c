"""Contract of the state store (lib/stores/state_protocol.py): every implementation passes the same tests.

Implementations so far: SQLite (lib/state.py). A PostgreSQL one joins `STATE_IMPLEMENTATIONS` when it exists.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from graphrag_pipeline.lib.models import Chunk, Document, Quarantined
from graphrag_pipeline.lib.state import SCHEMA_VERSION, SchemaVersionError, StateStore
from graphrag_pipeline.lib.stores.state_protocol import StateStoreProtocol

OpenState = Callable[[], StateStoreProtocol]  # opens the same index again each call


def _sqlite(tmp_path: Path) -> OpenState:
    return lambda: StateStore(tmp_path / "state.sqlite")


STATE_IMPLEMENTATIONS = {"sqlite": _sqlite}


@pytest.fixture(params=sorted(STATE_IMPLEMENTATIONS))
def open_state(request: pytest.FixtureRequest, tmp_path: Path) -> OpenState:
    return STATE_IMPLEMENTATIONS[request.param](tmp_path)


@pytest.fixture
def state(open_state: OpenState) -> Iterator[StateStoreProtocol]:
    store = open_state()
    yield store
    store.close()


def _document(doc_id: str, text: str, groups: list[str] | None = None) -> Document:
    metadata = {"access_groups": groups} if groups else {}
    return Document(doc_id, "docs", f"file:///{doc_id}", f"Title of {doc_id}", text, f"hash-{text}", metadata)


def _chunks(doc: Document, count: int) -> list[Chunk]:
    return [Chunk(f"{doc.doc_id}#{i}", doc.doc_id, i, f"{doc.text} part {i}", 3, i * 10, i * 10 + 9, ("H",))
            for i in range(count)]


def test_implements_the_protocol(state: StateStoreProtocol) -> None:
    assert isinstance(state, StateStoreProtocol)


def test_schema_version_recorded_once_across_reopens(open_state: OpenState) -> None:
    first = open_state()
    assert first.schema_version() == SCHEMA_VERSION
    first.close()
    second = open_state()
    assert second.query("SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]
    second.close()


def test_index_of_a_newer_schema_is_refused(open_state: OpenState) -> None:
    store = open_state()
    store.cache_embeddings("m", {"h": np.ones(2, dtype=np.float32)})  # some content, to see it is left alone
    with store.transaction() as conn:
        conn.execute("INSERT INTO schema_version VALUES (?, 0)", (SCHEMA_VERSION + 1,))
    store.close()
    with pytest.raises(SchemaVersionError, match=f"version {SCHEMA_VERSION + 1}, newer"):
        open_state()
    reopened_for_reading = StateStore(store.path, read_only=True)
    assert reopened_for_reading.query("SELECT COUNT(*) FROM embedding_cache") == [(1,)]
    reopened_for_reading.close()


def test_documents_round_trip_with_access_groups(state: StateStoreProtocol) -> None:
    public, restricted = _document("a", "alpha"), _document("b", "beta", ["ops", "sre"])
    state.upsert_documents([public, restricted], {"a": 0, "b": 1})
    assert state.document_hashes() == {"a": "hash-alpha", "b": "hash-beta"}
    assert state.document_hashes(shards=[1]) == {"b": "hash-beta"}
    assert state.documents(doc_ids=["b"]) == [restricted]
    assert state.restricted_documents() == {"b": frozenset({"ops", "sre"})}
    assert state.document_titles(["a"]) == {"a": "Title of a"}
    assert state.document_count() == 2

    state.upsert_documents([_document("b", "beta")], {"b": 1})  # the source dropped the restriction
    assert state.restricted_documents() == {}


def test_chunks_replace_and_changed_content_rechunks(state: StateStoreProtocol) -> None:
    doc = _document("a", "alpha")
    state.upsert_documents([doc], {"a": 3})
    assert state.documents_to_chunk([3], "k1") == [doc]
    state.replace_chunks(doc, 3, _chunks(doc, 3), "k1")
    assert state.documents_to_chunk([3], "k1") == []
    assert state.documents_to_chunk([3], "k2") == [doc]  # another chunking config chunks it again
    assert state.chunks(shards=[3]) == _chunks(doc, 3)
    assert state.chunks(chunk_ids=["a#1"]) == [_chunks(doc, 3)[1]]

    state.replace_chunks(doc, 3, _chunks(doc, 1), "k1")
    assert state.chunk_ids() == ["a#0"]
    changed = _document("a", "alpha v2")
    state.upsert_documents([changed], {"a": 3})
    assert state.documents_to_chunk([3], "k1") == [changed]

    state.delete_documents(["a"])
    assert (state.document_count(), state.chunk_count()) == (0, 0)


def test_chunk_and_document_join_used_by_the_query_module(state: StateStoreProtocol) -> None:
    doc = _document("a", "alpha")
    state.upsert_documents([doc], {"a": 0})
    state.replace_chunks(doc, 0, _chunks(doc, 2), "k")
    rows = state.query(
        "SELECT c.chunk_id, d.title, c.text FROM chunks c JOIN documents d ON d.doc_id = c.doc_id ORDER BY c.position"
    )
    assert rows == [("a#0", "Title of a", "alpha part 0"), ("a#1", "Title of a", "alpha part 1")]


def test_embedding_cache(state: StateStoreProtocol) -> None:
    vector = np.array([0.6, 0.8, 0.0], dtype=np.float32)
    assert state.cached_embedding_dimension("model") is None
    state.cache_embeddings("model", {"h1": vector})
    found = state.cached_embeddings("model", ["h1", "h2", "h1"])
    assert list(found) == ["h1"] and np.array_equal(found["h1"], vector)
    assert state.cached_embeddings("other-model", ["h1"]) == {}
    assert state.cached_embedding_dimension("model") == 3


def test_elements_and_sync_bookkeeping(state: StateStoreProtocol) -> None:
    state.replace_elements("entity", {"e1": ("h1", '{"name": "one"}'), "e2": ("h2", '{"name": "two"}')}, [])
    state.replace_elements("entity", {"e2": ("h2b", '{"name": "two b"}')}, ["e1"])
    assert state.element_hashes("entity") == {"e2": "h2b"}
    assert state.element_payloads("entity", ["e2", "missing"]) == {"e2": {"name": "two b"}}
    assert state.element_hashes("relationship") == {}
    state.record_synced("entity", {"e2": "h2b"}, [])
    assert state.element_hashes("entity", table="synced") == {"e2": "h2b"}
    with pytest.raises(ValueError):
        state.element_hashes("entity", table="documents; DROP TABLE chunks")


def test_indexed_points_bookkeeping(state: StateStoreProtocol) -> None:
    state.record_indexed_points("chunks", {"p1": (0, "h1"), "p2": (1, "h2")}, [])
    state.record_indexed_points("chunks", {}, ["p1"])
    assert state.indexed_points("chunks") == {"p2": "h2"}
    assert state.indexed_point_shards("chunks") == {"p2": 1}
    assert (state.indexed_point_count("chunks"), state.indexed_point_count("entities")) == (1, 0)


def test_quarantine_keeps_the_reason_until_cleared(state: StateStoreProtocol) -> None:
    state.quarantine([Quarantined("chunk", "a", "too large", "raw"), Quarantined("extract", "c1", "bad JSON")])
    assert state.quarantined("chunk") == [Quarantined("chunk", "a", "too large", "raw")]
    state.clear_quarantine("chunk", ["a"])
    assert [q.item_id for q in state.quarantined()] == ["c1"]
