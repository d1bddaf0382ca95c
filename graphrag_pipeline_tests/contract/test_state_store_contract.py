"""Contract of the state store (lib/stores/state/protocol.py): every implementation passes the same tests.

Implementations: SQLite (lib/stores/state/sqlite.py) and PostgreSQL (lib/stores/state/postgres.py, on the tests' server:
graphrag_pipeline_tests/postgres.py, a database per test).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import multiprocessing
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pytest

from graphrag_pipeline.lib.compose import backends
from graphrag_pipeline.lib.core.config import ENVIRONMENT_OVERRIDES, load_settings
from graphrag_pipeline.lib.algorithms.merge import element_payload, entity_from_payload
from graphrag_pipeline.lib.core.ids import content_hash, entity_id, short_hash
from graphrag_pipeline.lib.core.models import (
    Chunk,
    ChunkExtraction,
    Document,
    Entity,
    EntityMention,
    Quarantined,
)
from graphrag_pipeline.lib.stores.protocols import COMMUNITIES
from graphrag_pipeline.lib.stores.state.postgres import PostgresStateStore
from graphrag_pipeline.lib.stores.state.protocol import StateStore
from graphrag_pipeline.lib.stores.state.sql import (
    CAUGHT_UP_MARK,
    CHUNKS_REMOVED_MARK,
    COMMUNITY_PAYLOADS,
    COMMUNITY_SUMMARY_PAYLOADS,
    SCHEMA_VERSION,
    SOURCE_EXTRACTION_PAYLOADS,
    SOURCES_CHANGED_MARK,
    UNSYNCED,
    WITHDRAWN_GROUP,
    SchemaVersionError,
    extraction_to_json,
    _PAYLOAD_DICTIONARY_V4,
    pack_payload,
    payload_digest,
    payload_json,
    unpack_payload,
)
from graphrag_pipeline.lib.stores.state.sqlite import SQLiteStateStore
from graphrag_pipeline_tests.postgres import throwaway_database


class OpenState(Protocol):
    """Opens the same index again on each call."""

    def __call__(self, *, read_only: bool = False) -> StateStore: ...


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.server)])
def open_state(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenState]:
    if request.param == "sqlite":
        yield lambda read_only=False: SQLiteStateStore(tmp_path / "state.sqlite", read_only=read_only)
        return
    server = request.getfixturevalue("postgres_server")
    with throwaway_database(server) as database:
        url = f"postgresql://{server.user}:{server.password}@{server.host}:{server.port}/{database}"
        yield lambda read_only=False: PostgresStateStore(url, read_only=read_only)


@pytest.fixture
def state(open_state: OpenState) -> Iterator[StateStore]:
    store = open_state()
    yield store
    store.close()


def _document(doc_id: str, text: str, groups: list[str] | None = None) -> Document:
    metadata = {"access_groups": groups} if groups else {}
    return Document(doc_id, "docs", f"file:///{doc_id}", f"Title of {doc_id}", text, f"hash-{text}", metadata)


def _chunks(doc: Document, count: int) -> list[Chunk]:
    return [Chunk(f"{doc.doc_id}#{i}", doc.doc_id, i, f"{doc.text} part {i}", 3, i * 10, i * 10 + 9, ("H",))
            for i in range(count)]


EVERY_VERSION = [(version,) for version in range(1, SCHEMA_VERSION + 1)]  # a new index records each migration once


def test_implements_the_protocol(state: StateStore) -> None:
    assert isinstance(state, StateStore)


def test_schema_version_recorded_once_across_reopens(open_state: OpenState) -> None:
    first = open_state()
    assert first.schema_version() == SCHEMA_VERSION
    first.close()
    second = open_state()
    assert second.query("SELECT version FROM schema_version ORDER BY version") == EVERY_VERSION
    second.close()


def test_an_index_of_version_1_is_migrated_and_its_json_payloads_read_next_to_compressed_ones(
    open_state: OpenState,
) -> None:
    store = open_state()
    extraction = ChunkExtraction("c1", (EntityMention("Kiss and Tell", "work", "a film", "c1", "ner"),), ())
    v1_rows = {  # version 1 stored the JSON text itself
        "extractions": ("c1", "key", extraction_to_json(extraction)),
        "elements": ("entity", "e1", "h1", json.dumps({"name": "Kiss and Tell"})),
        "communities": ("k1", 0, json.dumps({"members": ["e1"]})),
        "community_summaries": ("k1", "h2", json.dumps({"summary": "Films."})),
        "source_extractions": ("d1", json.dumps({"entities": []})),
    }
    v1_only_tables = {  # folded into the payloads table by version 5
        "communities": "community_id TEXT PRIMARY KEY, level INTEGER NOT NULL, payload TEXT NOT NULL",
        "community_summaries": "community_id TEXT PRIMARY KEY, content_hash TEXT NOT NULL, payload TEXT NOT NULL",
        "source_extractions": "doc_id TEXT PRIMARY KEY, payload TEXT NOT NULL",
    }
    with store.transaction() as conn:
        conn.execute("DELETE FROM schema_version WHERE version > 1")
        for table, columns in v1_only_tables.items():
            conn.execute(f"CREATE TABLE {table} ({columns})")
        for table, row in v1_rows.items():
            if isinstance(store, PostgresStateStore) and table not in v1_only_tables:
                conn.execute(f"ALTER TABLE {table} ALTER COLUMN payload TYPE TEXT USING convert_from(payload, 'UTF8')")
            conn.execute(f"INSERT INTO {table} VALUES ({', '.join('?' * len(row))})", row)
    store.close()

    store = open_state()
    assert store.query("SELECT version FROM schema_version ORDER BY version") == EVERY_VERSION
    store.replace_elements("entity", {"e2": ("h3", json.dumps({"name": "Lake Kivu"}))}, [])
    assert store.element_payloads("entity") == {"e1": {"name": "Kiss and Tell"}, "e2": {"name": "Lake Kivu"}}
    assert store.extractions(["c1"], "key") == {"c1": extraction}
    assert store.payloads(COMMUNITY_PAYLOADS) == {"k1": {"members": ["e1"]}}
    assert store.payloads(COMMUNITY_SUMMARY_PAYLOADS, ["k1"]) == {"k1": {"summary": "Films."}}
    assert store.payload_hashes(COMMUNITY_SUMMARY_PAYLOADS) == {"k1": "h2"}
    assert store.payloads(SOURCE_EXTRACTION_PAYLOADS, ["d1"]) == {"d1": {"entities": []}}
    stored = store.query("SELECT payload FROM elements WHERE element_id = 'e2'")[0][0]
    assert json.loads(unpack_payload(stored)) == {"name": "Lake Kivu"} and len(bytes(stored)) > 0
    assert bytes(stored)[:1] not in (b"{", b"[")  # written compressed
    store.close()


def test_payloads_compressed_before_version_4_are_read_next_to_those_with_the_dictionary(
    state: StateStore,
) -> None:
    earlier = {"chunk_ids": ["chunk-1"], "description": "A film."}
    with state.transaction() as conn:  # version 3 compressed without a preset dictionary
        conn.execute("INSERT INTO elements VALUES (?, ?, ?, ?)",
                     ("entity", "e1", "h1", zlib.compress(json.dumps(earlier).encode())))
    state.replace_elements("entity", {"e2": ("h2", json.dumps({"chunk_ids": ["chunk-2"]}))}, [])
    assert state.element_payloads("entity") == {"e1": earlier, "e2": {"chunk_ids": ["chunk-2"]}}


def test_element_hashes_of_a_version_3_index_are_cut_to_what_version_4_computes(open_state: OpenState) -> None:
    """The graph stage compares the two tables: cut alike, an unchanged element is still synced."""
    store = open_state()
    full = content_hash("payload of e1")
    store.replace_elements("entity", {"e1": (full, json.dumps({"name": "Lake Kivu"}))}, [])
    store.record_synced("entity", {"e1": full, "e2": UNSYNCED}, [])
    with store.transaction() as conn:
        if isinstance(store, SQLiteStateStore):  # version 3 kept hashes as hex digits, which SQLite keeps as bytes now
            for table in ("elements", "synced"):
                conn.execute(f"UPDATE {table} SET content_hash = lower(hex(content_hash)) "
                             "WHERE typeof(content_hash) = 'blob'")
        conn.execute("DELETE FROM schema_version WHERE version >= 4")
    store.close()

    store = open_state()
    assert store.element_hashes("entity") == {"e1": short_hash("payload of e1")}
    assert store.element_hashes("entity", table="synced") == {"e1": short_hash("payload of e1"), "e2": UNSYNCED}
    store.close()


def test_a_payload_costs_little_more_than_its_values() -> None:
    """The preset dictionary holds the payloads' key names and id prefixes: a merged relationship, whose keys are
    most of its text, compresses to a fifth less than without it."""
    relationship = payload_json({
        "chunk_ids": ["chunk-3c5cf93bb5e3a7632122951b225a0662"], "description": "Madison led the opposition.",
        "description_parts": [["Madison led the opposition.", ["docs:madison"]]], "doc_ids": ["docs:madison"],
        "predicate_doc_ids": [["docs:madison"]], "predicates": ["led"],
        "relationship_id": "rel-000117148f7c9f1a330b59051856ef9b", "source_id": "ent-503f52bdafb07a638a238eea7ea13df3",
        "target_id": "ent-a5948fb98c5922cc83273cf7c1c1e9b1", "type": "RELATED_TO", "weight": 0.5,
    })
    assert unpack_payload(pack_payload(relationship)) == relationship
    assert len(pack_payload(relationship)) < 0.8 * len(zlib.compress(relationship.encode(), 9))


def test_a_payload_written_with_version_4s_dictionary_is_still_read() -> None:
    """Version 6 writes from another dictionary; what an index stored before keeps the one its stream names."""
    spaced = json.dumps({"relationship_id": "rel-0001", "source_id": "ent-a", "target_id": "ent-b", "weight": 0.5})
    compressor = zlib.compressobj(1, zdict=_PAYLOAD_DICTIONARY_V4)
    stored = compressor.compress(spaced.encode()) + compressor.flush()
    assert unpack_payload(stored) == spaced
    assert unpack_payload(pack_payload(spaced)) == spaced
    assert pack_payload(spaced) != stored  # a dictionary of its own


def test_bookkeeping_of_a_version_3_index_moves_into_key_only_tables(tmp_path: Path) -> None:
    """SQLite: version 4 rebuilds the bookkeeping tables WITHOUT ROWID, keeping their rows and the shard index."""
    store = SQLiteStateStore(tmp_path / "state.sqlite")
    store.record_indexed_points("chunks", {"c1": (3, "key-1"), "c2": (4, "key-2")}, [])
    store.record_synced("entity", {"e1": "h1"}, [])
    with store.transaction() as conn:  # back to version 3's layout: tables with rowids
        for table in ("indexed_points", "synced", "merged_extractions"):
            definition = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
            conn.execute(f"ALTER TABLE {table} RENAME TO {table}_v4")
            conn.execute(definition.replace(" WITHOUT ROWID", ""))
            conn.execute(f"INSERT INTO {table} SELECT * FROM {table}_v4")
            conn.execute(f"DROP TABLE {table}_v4")
        conn.execute("CREATE INDEX indexed_points_shard ON indexed_points(collection, shard)")
        conn.execute("DELETE FROM schema_version WHERE version >= 4")
    store.close()

    store = SQLiteStateStore(tmp_path / "state.sqlite")
    assert store.query("SELECT version FROM schema_version ORDER BY version") == EVERY_VERSION
    definitions = dict(store.query("SELECT name, sql FROM sqlite_master WHERE type = 'table'"))
    assert all(definitions[t].endswith("WITHOUT ROWID") for t in ("indexed_points", "synced", "merged_extractions"))
    assert store.query("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'indexed_points' "
                       "AND sql IS NOT NULL") == [("indexed_points_shard",)]
    assert store.indexed_point_shards("chunks") == {"c1": 3, "c2": 4}
    assert store.element_hashes("entity", table="synced") == {"e1": "h1"}
    store.close()


def test_elements_of_a_version_6_index_move_into_a_key_only_table_with_their_hashes_as_bytes(tmp_path: Path) -> None:
    """SQLite: version 7 rebuilds ``elements`` WITHOUT ROWID and keeps the elements' and the sync's hashes as their
    bytes; every hash reads back as the same text, and a mark that is no digest stays text."""
    entity_hash, relationship_hash = short_hash("e1"), short_hash("r1")
    store = SQLiteStateStore(tmp_path / "state.sqlite")
    store.replace_elements("entity", {"e1": (entity_hash, json.dumps({"name": "Lake Kivu"}))}, [])
    store.replace_elements("relationship", {"r1": (relationship_hash, json.dumps({"weight": 1.0}))}, [])
    store.record_synced("entity", {"e1": entity_hash, "e2": UNSYNCED}, [])
    with store.transaction() as conn:  # back to version 6's layout: elements with rowids, hashes as hex digits
        definition = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'elements'").fetchone()[0]
        conn.execute("ALTER TABLE elements RENAME TO elements_v7")
        conn.execute(definition.replace(" WITHOUT ROWID", ""))
        conn.execute("INSERT INTO elements SELECT kind, element_id, lower(hex(content_hash)), payload FROM elements_v7")
        conn.execute("DROP TABLE elements_v7")
        conn.execute("UPDATE synced SET content_hash = lower(hex(content_hash)) WHERE typeof(content_hash) = 'blob'")
        conn.execute("DELETE FROM schema_version WHERE version >= 7")
    assert store.query("SELECT DISTINCT typeof(content_hash) FROM elements") == [("text",)]
    store.close()

    store = SQLiteStateStore(tmp_path / "state.sqlite")
    assert store.query("SELECT version FROM schema_version ORDER BY version") == EVERY_VERSION
    definitions = dict(store.query("SELECT name, sql FROM sqlite_master WHERE type = 'table'"))
    assert definitions["elements"].endswith("WITHOUT ROWID")
    assert store.query("SELECT typeof(content_hash), length(content_hash) FROM elements UNION "
                       "SELECT typeof(content_hash), length(content_hash) FROM synced ORDER BY 1") == [
        ("blob", 16), ("text", len(UNSYNCED))]
    assert store.element_hashes("entity") == {"e1": entity_hash}
    assert store.element_hashes("relationship", element_ids=["r1", "r2"]) == {"r1": relationship_hash}
    assert store.element_hashes("entity", table="synced") == {"e1": entity_hash, "e2": UNSYNCED}
    assert store.element_payloads("entity") == {"e1": {"name": "Lake Kivu"}}
    store.close()


def _merged_entity(key: str, parts: list[tuple[str, tuple[str, ...]]], description: str | None = None) -> Entity:
    texts = "\n".join(text for text, _ in parts)
    return Entity(entity_id(key), key.title(), key, "Thing", texts if description is None else description, 1,
                  ("chunk-1",), tuple(sorted({d for _, docs in parts for d in docs})),
                  description_parts=tuple(parts))


def test_the_texts_elements_share_are_kept_once_and_go_with_the_last_element_naming_them(state: StateStore) -> None:
    """A sentence naming several entities describes each of them: the state keeps it once and reads every payload
    back as the merge wrote it (its content hash is of that JSON), a model's summary beside its parts too."""
    shared = ("Lake Kivu lies between Rwanda and the Congo.", ("doc-a", "doc-b"))
    rwanda = _merged_entity("rwanda", [shared, ("Rwanda is in East Africa.", ("doc-a",))])
    congo = _merged_entity("congo", [shared], description="A model's summary of the Congo.")
    kivu = _merged_entity("lake kivu", [shared])
    written = {e.entity_id: element_payload(e) for e in (rwanda, congo, kivu)}
    state.replace_elements("entity", written, [])

    def texts() -> set[str]:
        return {text for (text,) in state.query("SELECT text FROM element_texts")}

    assert texts() == {shared[0], "Rwanda is in East Africa."}
    assert state.element_payloads("entity") == {eid: json.loads(p) for eid, (_, p) in written.items()}
    assert {eid: entity_from_payload(p) for eid, p in state.element_payloads("entity").items()} == {
        e.entity_id: e for e in (rwanda, congo, kivu)}

    renamed = dataclasses.replace(rwanda, description_parts=(shared,), description=shared[0])
    state.replace_elements("entity", {rwanda.entity_id: element_payload(renamed)}, [kivu.entity_id])
    assert texts() == {shared[0]}
    state.record_merge({"entity": ({}, [rwanda.entity_id])}, {}, [], "m", every_extraction=False)
    assert texts() == {shared[0]}
    state.replace_elements("entity", {}, [congo.entity_id])
    assert texts() == set() and state.element_payloads("entity") == {}


def test_payloads_written_before_version_8_are_read_with_their_texts_and_rewritten_without(
        state: StateStore) -> None:
    """Version 8 leaves the stored payloads as they are: one that holds its texts reads as before, and rewriting an
    element that names a text it shares with such a payload counts only its own."""
    shared = ("Lake Kivu lies between Rwanda and the Congo.", ("doc-a",))
    rwanda, congo = _merged_entity("rwanda", [shared]), _merged_entity("congo", [shared])
    before_version_8 = element_payload(rwanda)
    with state.transaction() as conn:
        conn.execute("INSERT INTO elements VALUES (?, ?, ?, ?)",
                     ("entity", rwanda.entity_id, before_version_8[0], pack_payload(before_version_8[1])))
    state.replace_elements("entity", {congo.entity_id: element_payload(congo)}, [])
    assert state.element_payloads("entity") == {rwanda.entity_id: json.loads(before_version_8[1]),
                                                congo.entity_id: json.loads(element_payload(congo)[1])}
    assert state.query("SELECT refs FROM element_texts") == [(1,)]
    state.replace_elements("entity", {rwanda.entity_id: before_version_8}, [congo.entity_id])
    assert state.query("SELECT refs FROM element_texts") == [(1,)]
    assert state.element_payloads("entity") == {rwanda.entity_id: json.loads(before_version_8[1])}


def test_ids_and_point_keys_of_a_version_7_index_are_kept_as_their_bytes(tmp_path: Path) -> None:
    """SQLite: version 8 keeps the pipeline's ids in elements, synced and indexed_points as the 16 bytes after their
    kind's or collection's prefix (a chunk's for the sync's mentions), and point keys as their digests' bytes; any
    other id or key stays text, and each reads back as it was written."""
    kivu = _merged_entity("lake kivu", [("Lake Kivu lies in Rwanda.", ("doc-a",))])
    relationship = "rel-" + short_hash("r1")
    store = SQLiteStateStore(tmp_path / "state.sqlite")
    store.replace_elements("entity", {kivu.entity_id: element_payload(kivu), "e2": ("h2", '{"name": "two"}')}, [])
    store.replace_elements("relationship", {relationship: (short_hash("r"), '{"weight": 1.0}')}, [])
    store.record_synced("mentions", {"chunk-" + short_hash("c1"): short_hash("m")}, [])
    points = {"comm-" + short_hash("p1"): f"{short_hash('t')}:{short_hash('p')}", "p2": UNSYNCED}
    store.record_indexed_points(COMMUNITIES, {point: (-1, key) for point, key in points.items()}, [])
    written = {kind: (store.element_hashes(kind), store.element_payloads(kind)) for kind in ("entity", "relationship")}
    with store.transaction() as conn:  # back to version 7's layout: every id and key as its text
        for table in ("elements", "synced"):
            for kind, prefix in (("entity", "ent-"), ("relationship", "rel-"), ("mentions", "chunk-")):
                conn.execute(f"UPDATE {table} SET element_id = ? || lower(hex(element_id)) "
                             "WHERE kind = ? AND typeof(element_id) = 'blob'", (prefix, kind))
        conn.execute("UPDATE indexed_points SET point_id = 'comm-' || lower(hex(point_id)), point_key = "
                     "lower(substr(hex(point_key), 1, 32) || ':' || substr(hex(point_key), 33)) "
                     "WHERE typeof(point_id) = 'blob'")
        conn.execute("DELETE FROM schema_version WHERE version >= 8")
    assert store.query("SELECT DISTINCT typeof(element_id) FROM elements UNION SELECT typeof(element_id) FROM synced "
                       "UNION SELECT typeof(point_id) FROM indexed_points UNION "
                       "SELECT typeof(point_key) FROM indexed_points") == [("text",)]
    store.close()

    store = SQLiteStateStore(tmp_path / "state.sqlite")
    assert store.query("SELECT version FROM schema_version ORDER BY version") == EVERY_VERSION
    assert store.query("PRAGMA freelist_count") == [(0,)]  # the copied tables' old pages are not kept as free space
    assert store.query("SELECT kind, typeof(element_id), length(element_id) FROM elements UNION "
                       "SELECT kind, typeof(element_id), length(element_id) FROM synced ORDER BY 1, 2") == [
        ("entity", "blob", 16), ("entity", "text", 2), ("mentions", "blob", 16), ("relationship", "blob", 16)]
    assert {kind: (store.element_hashes(kind), store.element_payloads(kind))
            for kind in ("entity", "relationship")} == written
    assert store.element_hashes("mentions", table="synced") == {"chunk-" + short_hash("c1"): short_hash("m")}
    assert store.element_payloads("entity", [kivu.entity_id, "e2", "ent-missing"]) == written["entity"][1]
    assert store.query("SELECT typeof(point_id), length(point_id), typeof(point_key), length(point_key) "
                       "FROM indexed_points ORDER BY 1") == [("blob", 16, "blob", 32), ("text", 2, "text", len(UNSYNCED))]
    assert store.indexed_points(COMMUNITIES) == points
    assert store.indexed_point_shards(COMMUNITIES) == dict.fromkeys(points, -1)
    store.record_indexed_points(COMMUNITIES, {}, list(points))
    assert store.indexed_point_count(COMMUNITIES) == 0
    store.replace_elements("entity", {}, [kivu.entity_id])
    store.record_synced("mentions", {}, ["chunk-" + short_hash("c1")])
    assert store.element_hashes("entity") == {"e2": "h2"} and store.element_hashes("mentions", table="synced") == {}
    store.close()


def test_index_of_a_newer_schema_is_refused(open_state: OpenState) -> None:
    store = open_state()
    store.cache_embeddings("m", {"h": np.ones(2, dtype=np.float32)})  # some content, to see it is left alone
    with store.transaction() as conn:
        conn.execute("INSERT INTO schema_version VALUES (?, 0)", (SCHEMA_VERSION + 1,))
    store.close()
    with pytest.raises(SchemaVersionError, match=f"version {SCHEMA_VERSION + 1}, newer"):
        open_state()
    reopened_for_reading = open_state(read_only=True)
    assert reopened_for_reading.query("SELECT COUNT(*) FROM embedding_cache") == [(1,)]
    reopened_for_reading.close()


def test_documents_round_trip_with_access_groups(state: StateStore) -> None:
    public, restricted = _document("a", "alpha"), _document("b", "beta", ["ops", "sre"])
    state.upsert_documents([public, restricted], {"a": 0, "b": 1})
    assert state.document_hashes() == {"a": "hash-alpha", "b": "hash-beta"}
    assert state.document_hashes(shards=[1]) == {"b": "hash-beta"}
    assert state.documents(doc_ids=["b"]) == [restricted]
    assert state.documents(doc_ids=["b"], with_text=False) == [dataclasses.replace(restricted, text="")]
    assert state.documents(shards=[0], with_text=False) == [dataclasses.replace(public, text="")]
    assert state.restricted_documents() == {"b": frozenset({"ops", "sre"})}
    assert state.document_titles(["a"]) == {"a": "Title of a"}
    assert state.document_count() == 2

    state.upsert_documents([_document("b", "beta")], {"b": 1})  # the source dropped the restriction
    assert state.restricted_documents() == {}


def test_a_deleted_document_is_withdrawn_from_everyone_until_its_marks_are_forgotten(state: StateStore) -> None:
    state.upsert_documents([_document("a", "alpha"), _document("b", "beta", ["sre"])], {"a": 0, "b": 1})
    state.delete_documents(["a", "b"])
    # What was derived from them may still be in the index: readable by nobody, public or not.
    assert state.restricted_documents() == {"a": frozenset({WITHDRAWN_GROUP}), "b": frozenset({WITHDRAWN_GROUP})}
    assert state.withdrawn_documents() == {"a", "b"}
    state.upsert_documents([_document("b", "beta again")], {"b": 1})  # it came back, public now
    assert state.withdrawn_documents() == {"a"}
    assert state.forget_withdrawn(["a", "b"]) == 1
    assert state.restricted_documents() == {} and state.withdrawn_documents() == set()


def test_recorded_source_changes_leave_the_state_behind_its_sources_until_a_build_catches_up(
        state: StateStore) -> None:
    assert not state.behind_sources()  # a new index
    state.upsert_documents([_document("a", "alpha")], {"a": 0})
    assert state.behind_sources()
    state.record_stage_mark(CAUGHT_UP_MARK, state.stage_mark(SOURCES_CHANGED_MARK))
    assert not state.behind_sources()
    state.delete_documents(["a"])
    assert state.behind_sources()


def test_chunks_replace_and_changed_content_rechunks(state: StateStore) -> None:
    doc = _document("a", "alpha")
    state.upsert_documents([doc], {"a": 3})
    assert state.documents_to_chunk([3], "k1") == [doc]
    state.replace_chunks([(doc, 3, _chunks(doc, 3))], "k1")
    assert state.documents_to_chunk([3], "k1") == []
    assert state.documents_to_chunk([3], "k2") == [doc]  # another chunking config chunks it again
    assert state.chunks(shards=[3]) == _chunks(doc, 3)
    assert state.chunks(chunk_ids=["a#1"]) == [_chunks(doc, 3)[1]]

    state.replace_chunks([(doc, 3, _chunks(doc, 1))], "k1")
    assert state.chunk_ids() == ["a#0"]
    changed = _document("a", "alpha v2")
    state.upsert_documents([changed], {"a": 3})
    assert state.documents_to_chunk([3], "k1") == [changed]

    assert state.shard_holdings([3, 5]) == {3: {"documents": 1, "chunks": 1}, 5: {"documents": 0, "chunks": 0}}
    state.delete_documents(["a"])
    assert (state.document_count(), state.chunk_count()) == (0, 0)


def test_the_chunks_of_several_documents_are_replaced_in_one_transaction(state: StateStore) -> None:
    docs = [_document("a", "alpha"), _document("b", "beta")]
    state.upsert_documents(docs, {"a": 0, "b": 1})
    state.replace_chunks([(docs[0], 0, _chunks(docs[0], 2)), (docs[1], 1, _chunks(docs[1], 1))], "k")
    assert state.chunk_ids() == ["a#0", "a#1", "b#0"]
    assert state.documents_to_chunk([0, 1], "k") == []
    assert state.shard_holdings([0, 1]) == {0: {"documents": 1, "chunks": 2}, 1: {"documents": 1, "chunks": 1}}
    assert state.stage_mark(CHUNKS_REMOVED_MARK) is None  # new documents' chunks replaced none

    # A bad chunk of the second document: the first keeps its chunks and stays to be chunked.
    changed = _document("a", "alpha v2")
    state.upsert_documents([changed], {"a": 0})
    unwritable = dataclasses.replace(_chunks(docs[1], 1)[0], text=None)
    with pytest.raises(Exception, match="(?i)null"):
        state.replace_chunks([(changed, 0, _chunks(changed, 1)), (docs[1], 1, [unwritable])], "k")
    assert state.chunks(shards=[0]) == _chunks(docs[0], 2)
    assert state.documents_to_chunk([0, 1], "k") == [changed]
    assert state.stage_mark(CHUNKS_REMOVED_MARK) is None

    state.replace_chunks([(changed, 0, _chunks(changed, 1)), (docs[1], 1, [])], "k")
    assert state.chunk_ids() == ["a#0"]
    assert state.stage_mark(CHUNKS_REMOVED_MARK) == "1"  # what cuts the embedding cache back
    assert state.documents_to_chunk([0, 1], "k") == []


def test_chunk_and_document_join_used_by_the_query_module(state: StateStore) -> None:
    doc = _document("a", "alpha")
    state.upsert_documents([doc], {"a": 0})
    state.replace_chunks([(doc, 0, _chunks(doc, 2))], "k")
    rows = state.query(
        "SELECT c.chunk_id, d.title, c.text FROM chunks c JOIN documents d ON d.doc_id = c.doc_id ORDER BY c.position"
    )
    assert rows == [("a#0", "Title of a", "alpha part 0"), ("a#1", "Title of a", "alpha part 1")]


def test_embedding_cache(state: StateStore) -> None:
    vector = np.array([0.6, 0.8, 0.0], dtype=np.float32)
    assert state.cached_embedding_dimension("model") is None
    state.cache_embeddings("model", {"h1": vector})
    found = state.cached_embeddings("model", ["h1", "h2", "h1"])
    assert list(found) == ["h1"] and np.array_equal(found["h1"], vector)
    assert state.cached_embeddings("other-model", ["h1"]) == {}
    assert state.cached_embedding_dimension("model") == 3
    state.cache_embeddings("model", {"h2": vector, "h3": vector})
    state.cache_embeddings("old-model", {"h1": vector})
    assert state.forget_embeddings("model", {"h1", "h3", "h9"}) == 2  # h2, and every other model's
    assert list(state.cached_embeddings("model", ["h1", "h2", "h3"])) == ["h1", "h3"]
    assert state.cached_embeddings("old-model", ["h1"]) == {}


def test_elements_and_sync_bookkeeping(state: StateStore) -> None:
    state.replace_elements("entity", {"e1": ("h1", '{"name": "one"}'), "e2": ("h2", '{"name": "two"}')}, [])
    state.replace_elements("entity", {"e2": ("h2b", '{"name": "two b"}')}, ["e1"])
    assert state.element_hashes("entity") == {"e2": "h2b"}
    assert state.element_payloads("entity", ["e2", "missing"]) == {"e2": {"name": "two b"}}
    assert state.element_hashes("relationship") == {}
    state.record_synced("entity", {"e2": "h2b"}, [])
    assert state.element_hashes("entity", table="synced") == {"e2": "h2b"}
    with pytest.raises(ValueError):
        state.element_hashes("entity", table="documents; DROP TABLE chunks")


def test_indexed_points_bookkeeping(state: StateStore) -> None:
    state.record_indexed_points("chunks", {"p1": (0, "h1"), "p2": (1, "h2")}, [])
    state.record_indexed_points("chunks", {}, ["p1"])
    assert state.indexed_points("chunks") == {"p2": "h2"}
    assert state.indexed_point_shards("chunks") == {"p2": 1}
    assert (state.indexed_point_count("chunks"), state.indexed_point_count("entities")) == (1, 0)


def test_quarantine_keeps_the_reason_until_cleared(state: StateStore) -> None:
    state.quarantine([Quarantined("chunk", "a", "too large", "raw"), Quarantined("extract", "c1", "bad JSON")])
    assert state.quarantined("chunk") == [Quarantined("chunk", "a", "too large", "raw")]
    state.clear_quarantine("chunk", ["a"])
    assert [q.item_id for q in state.quarantined()] == ["c1"]


def _extraction(chunk_id: str, name: str) -> ChunkExtraction:
    return ChunkExtraction(chunk_id, (EntityMention(name, "service", "", chunk_id, "pattern"),), ())


def test_extractions_of_a_family_stand_in_until_replaced(state: StateStore) -> None:
    doc = _document("a", "alpha")
    state.upsert_documents([doc], {"a": 0})
    state.replace_chunks([(doc, 0, _chunks(doc, 2))], "k")
    state.store_extractions("rules+v1", [_extraction("a#0", "old0"), _extraction("a#1", "old1")])
    state.store_extractions("rules+v2", [_extraction("a#0", "new0")])
    assert state.extractions(["a#0", "a#1"], "rules+v2") == {"a#0": _extraction("a#0", "new0")}
    live = [(doc_id, chunk_id, e.entities[0].name) for doc_id, chunk_id, e in state.live_extractions("rules+v2", "rules")]
    assert live == [("a", "a#0", "new0"), ("a", "a#1", "old1")]
    assert state.stale_extraction_chunks("rules+v2", "rules") == ["a#1"]

    state.replace_chunks([(doc, 0, _chunks(doc, 1))], "k")  # a#1 is gone
    assert state.prune_extractions("rules+v2", "rules") == 2  # a#1's old one, a#0's replaced old one
    assert state.extractions(["a#0", "a#1"], "rules+v1") == {}


def test_what_the_elements_were_merged_from(state: StateStore) -> None:
    docs = [_document("b", "beta"), _document("a", "alpha")]
    state.upsert_documents(docs, {"a": 0, "b": 0})
    state.replace_chunks([(doc, 0, _chunks(doc, 2)) for doc in docs], "k")
    state.store_extractions("rules+v1", [_extraction(c, c) for c in ("a#0", "a#1", "b#0", "b#1")])
    state.store_extractions("rules+v2", [_extraction("b#1", "b#1 again")])
    live = state.live_extraction_hashes("rules+v2", "rules")
    assert {c: key for c, (key, _) in live.items()} == {"a#0": "rules+v1", "a#1": "rules+v1", "b#0": "rules+v1",
                                                         "b#1": "rules+v2"}
    # Some chunks, read in the order of the whole read (documents, then positions), whatever order they are asked in.
    some = [(d, c, e.entities[0].name) for d, c, e in state.live_extractions("rules+v2", "rules", ["b#1", "a#1", "b#0"])]
    assert some == [("a", "a#1", "a#1"), ("b", "b#0", "b#0"), ("b", "b#1", "b#1 again")]
    earlier = state.extraction_payloads({"b#1": "rules+v1", "a#0": "rules+v2"})  # a#0 has none under rules+v2
    assert list(earlier) == ["b#1"]
    digest, payload = earlier["b#1"]
    assert digest == payload_digest(payload) != live["b#1"][1]
    assert json.loads(unpack_payload(payload))["entities"][0][0] == "b#1"

    assert (state.stage_mark("element_summaries"), state.merged_extractions()) == (None, {})
    state.record_merge({"entity": ({"e1": ("h1", {"name": "one"}), "e2": ("h2", {})}, [])}, live, [], "m1",
                       every_extraction=True)
    assert state.merged_extractions() == live and state.stage_mark("element_summaries") == "m1"
    state.record_merge({"entity": ({"e3": ("h3", {})}, ["e1"]), "relationship": ({"r1": ("h4", {})}, [])},
                       {"a#0": ("rules+v2", "d0")}, ["b#0"], "m2", every_extraction=False)
    assert {c: v for c, v in state.merged_extractions().items() if c in ("a#0", "b#0")} == {"a#0": ("rules+v2", "d0")}
    assert state.element_hashes("entity", element_ids=["e1", "e2", "e3"]) == {"e2": "h2", "e3": "h3"}
    assert (state.element_count("entity"), state.element_count("relationship")) == (2, 1)
    state.record_merge({}, {}, [], "m3", every_extraction=True)
    assert state.merged_extractions() == {} and state.stage_mark("element_summaries") == "m3"
    # Elements written by anything but a merge (an import) were not merged from what the bookkeeping says.
    state.replace_elements("entity", {"e4": ("h5", "{}")}, [])
    assert state.stage_mark("element_summaries") is None


def test_source_bookkeeping(state: StateStore) -> None:
    state.record_source_marks("wiki", {0: ("2026-01-01", "2026-02-01"), 1: ("2026-01-02", "2026-02-01")})
    state.record_source_marks("wiki", {0: ("2026-03-01", "2026-03-01")})
    assert state.source_marks("wiki", [0, 2]) == {0: ("2026-03-01", "2026-03-01")}
    assert state.source_marks("wiki", []) == {}
    state.record_seen_sources([0], {"wiki:a": "h1", "wiki:b": "h2"}, {"wiki:a": 0, "wiki:b": 0}, "wiki")
    state.record_seen_sources([0], {"wiki:a": "h1b"}, {"wiki:a": 0}, "wiki")  # b no longer seen
    assert state.seen_source_hashes() == {"wiki:a": "h1b"}
    state.write_payloads(SOURCE_EXTRACTION_PAYLOADS, {"wiki:a": ("", json.dumps({"entities": ["x"]}))})
    assert state.payloads(SOURCE_EXTRACTION_PAYLOADS, ["wiki:a", "wiki:b"]) == {"wiki:a": {"entities": ["x"]}}
    state.delete_documents(["wiki:a"])  # a deleted document's shipped extraction goes with it
    assert state.payloads(SOURCE_EXTRACTION_PAYLOADS) == {}


def test_payload_namespaces_hold_one_document_per_item(state: StateStore) -> None:
    state.write_payloads(COMMUNITY_PAYLOADS, {"c1": ("", '{"members": ["e1"]}'), "c2": ("", '{"members": ["e2"]}')})
    state.write_payloads(COMMUNITY_PAYLOADS, {"c1": ("", '{"members": ["e1", "e3"]}')}, replace_all=True)
    assert state.payloads(COMMUNITY_PAYLOADS) == {"c1": {"members": ["e1", "e3"]}}
    assert state.payloads(COMMUNITY_PAYLOADS, []) == {}
    state.write_payloads(COMMUNITY_SUMMARY_PAYLOADS,
                         {"c1": ("h1", '{"summary": "one"}'), "c2": ("h2", '{"summary": "two"}')})
    state.write_payloads(COMMUNITY_SUMMARY_PAYLOADS, {}, ["c2"])
    assert state.payload_hashes(COMMUNITY_SUMMARY_PAYLOADS) == {"c1": "h1"}
    assert state.payloads(COMMUNITY_SUMMARY_PAYLOADS, ["c1"]) == {"c1": {"summary": "one"}}
    # Namespaces are apart: the same item id in two of them, and a replace_all in one leaves the other.
    assert state.payloads(COMMUNITY_PAYLOADS, ["c1"]) == {"c1": {"members": ["e1", "e3"]}}
    state.write_payloads("a-new-artifact", {"c1": ("h9", '{"claims": []}')}, replace_all=True)
    assert state.payloads(COMMUNITY_SUMMARY_PAYLOADS) == {"c1": {"summary": "one"}}
    assert state.payloads("a-new-artifact") == {"c1": {"claims": []}}
    many = {f"m{i:04d}": (f"h{i}", f'{{"summary": "{i}"}}') for i in range(2000)}  # more than one batch of ids
    state.write_payloads(COMMUNITY_SUMMARY_PAYLOADS, many)
    asked = [f"m{i:04d}" for i in range(0, 2000, 2)] + ["c1", "c2", "absent", "m0000"]
    assert state.payloads(COMMUNITY_SUMMARY_PAYLOADS, asked) == {
        "c1": {"summary": "one"}, **{f"m{i:04d}": {"summary": str(i)} for i in range(0, 2000, 2)}}
    assert state.payloads(COMMUNITY_SUMMARY_PAYLOADS, []) == {}
    assert list(state.payloads(COMMUNITY_SUMMARY_PAYLOADS)) == sorted(["c1", *many])  # by item id


def test_state_backend_postgres_selected_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                              postgres_server) -> None:
    for variable in ENVIRONMENT_OVERRIDES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.delenv(backends.DATABASE_URL, raising=False)
    monkeypatch.setenv("STATE_BACKEND", "Postgres")
    settings = load_settings(index_dir=str(tmp_path / "index"))
    with pytest.raises(ValueError, match=r"\$DATABASE_URL must be set"):
        backends.open_state(settings)
    with throwaway_database(postgres_server) as database:
        server = postgres_server
        monkeypatch.setenv(
            backends.DATABASE_URL, f"postgresql://{server.user}:{server.password}@{server.host}:{server.port}/{database}"
        )
        writer = backends.open_state(settings)
        writer.upsert_documents([_document("a", "alpha")], {"a": 0})
        writer.close()
        reader = backends.open_state(settings, read_only=True)
        assert isinstance(reader, PostgresStateStore) and reader.document_hashes() == {"a": "hash-alpha"}
        reader.close()
    assert backends.store_kinds(settings)["state"] == "postgres"
    assert list(tmp_path.iterdir()) == []  # no local file: no index folder, no lock


def test_an_index_exists_once_a_writer_has_opened_it(open_state: OpenState) -> None:
    reader = open_state(read_only=True)
    try:
        assert reader.exists() is False  # nothing built yet, and asking created nothing
    finally:
        reader.close()
    open_state().close()
    reader = open_state(read_only=True)
    try:
        assert reader.exists() is True
    finally:
        reader.close()


def test_corpus_wide_work_takes_turns_between_writers_of_one_postgres_index(postgres_server) -> None:
    """Two writers (as two Dagster runs on two hosts would hold) of one database: the second waits in `exclusive`
    until the first has left it, and another name is not held up."""
    import threading

    server = postgres_server
    with throwaway_database(server) as database:
        url = f"postgresql://{server.user}:{server.password}@{server.host}:{server.port}/{database}"
        first, second = PostgresStateStore(url), PostgresStateStore(url)
        events: list[str] = []
        inside = threading.Event()

        def second_run() -> None:
            with second.exclusive("corpus"):
                events.append("second entered")

        try:
            with first.exclusive("corpus"):
                waiting = threading.Thread(target=second_run)
                waiting.start()
                with second.exclusive("another lock"):
                    inside.set()
                waiting.join(timeout=1.0)  # it cannot finish while the lock is held
                events.append("first left")
            waiting.join(timeout=60)
        finally:
            first.close()
            second.close()
        assert inside.is_set() and events == ["first left", "second entered"]


def test_a_writer_opening_a_current_postgres_index_takes_no_table_lock(postgres_server) -> None:
    """Shard runs open their store while other runs are mid-transaction. Re-running the schema's DDL on an index
    that already has it would still lock each table (CREATE INDEX IF NOT EXISTS locks before it checks), which
    waits on those transactions and deadlocked two concurrent shard runs: a current index is opened without DDL.
    The other run here holds a write to every table; the opener gives up on any lock after a second."""
    import psycopg2

    server = postgres_server
    with throwaway_database(server) as database:
        url = f"postgresql://{server.user}:{server.password}@{server.host}:{server.port}/{database}"
        PostgresStateStore(url).close()
        other_run = psycopg2.connect(url)
        try:
            with other_run.cursor() as cursor:
                cursor.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
                tables = [row[0] for row in cursor.fetchall()]
                for table in tables:  # a lock mode every index build (SHARE) waits for
                    cursor.execute(f"LOCK TABLE {table} IN ROW EXCLUSIVE MODE")
            opener = PostgresStateStore(f"{url}?options=-c%20lock_timeout%3D1000")
            try:
                assert opener.schema_version() == SCHEMA_VERSION
            finally:
                opener.close()
        finally:
            other_run.rollback()
            other_run.close()
        assert len(tables) >= 10


def _open_when_all_are_ready(url: str, ready: Any) -> int:
    ready.wait()
    store = PostgresStateStore(url)
    try:
        return store.schema_version()
    finally:
        store.close()


def test_processes_opening_one_empty_postgres_database_at_once_all_get_one_schema(postgres_server) -> None:
    """Concurrent Dagster runs of a first build open the same empty database together: CREATE TABLE IF NOT EXISTS
    alone lets two sessions both create a table (a unique violation in pg_type), so schema and migrations are
    created under an advisory lock. Several rounds, as one round may not overlap."""
    context = multiprocessing.get_context("spawn")
    openers = 6
    with context.Manager() as manager:
        for _ in range(3):
            with throwaway_database(postgres_server) as database:
                url = (f"postgresql://{postgres_server.user}:{postgres_server.password}"
                       f"@{postgres_server.host}:{postgres_server.port}/{database}")
                ready = manager.Barrier(openers)
                with concurrent.futures.ProcessPoolExecutor(openers, mp_context=context) as pool:
                    versions = list(pool.map(_open_when_all_are_ready, [url] * openers, [ready] * openers))
                assert versions == [SCHEMA_VERSION] * openers
                store = PostgresStateStore(url, read_only=True)
                try:
                    assert store.query("SELECT version FROM schema_version ORDER BY version") == EVERY_VERSION
                finally:
                    store.close()


def test_a_read_only_store_takes_no_lock(tmp_path: Path) -> None:
    SQLiteStateStore(tmp_path / "state.sqlite").close()
    reader = SQLiteStateStore(tmp_path / "state.sqlite", read_only=True)
    try:
        with pytest.raises(RuntimeError, match="read-only"):
            with reader.exclusive("corpus"):
                pass
    finally:
        reader.close()
