"""Export an index as Parquet tables and import such an export into the configured backends.

An export is an operator's backup and migration path, and a way to read an index with pandas. It holds every
document's text, restricted ones included (their groups in ``documents.access_groups``): it is not an access path
for callers, so it applies no group filter and the CLI asks for ``--all`` to say so.

Import writes the state tables and then runs every stage after ingest: the chunks, extractions, embeddings (the
``embeddings`` table is the embedding cache), merged elements and community summaries are found already made, so
nothing is embedded or extracted again, and the graph and vector stores configured (embedded, Neo4j/Bolt, Qdrant)
are filled by the same code a build uses.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core.errors import GraphRAGError
from graphrag_pipeline.lib.core.ids import content_hash
from graphrag_pipeline.lib.core.models import Chunk, Document
from graphrag_pipeline.lib.stages import STAGES, StageReport
from graphrag_pipeline.lib.stages.embeddings import chunk_embedding_text
from graphrag_pipeline.lib.stages.vectors import built_from, text_key
from graphrag_pipeline.lib.stores.protocols import ENTITIES
from graphrag_pipeline.lib.stores.state.protocol import StateStore
from graphrag_pipeline.lib.stores.state.sql import (
    COMMUNITY_PAYLOADS,
    COMMUNITY_SUMMARY_PAYLOADS,
    access_groups_of,
    extraction_from_json,
    unpack_payload,
)

EXPORT_FORMAT_VERSION = 1
MANIFEST = "manifest.json"
TABLES = ("documents", "chunks", "mentions", "entities", "relationships", "communities", "community_summaries",
          "embeddings")


class ExportMismatchError(GraphRAGError, ValueError):
    """The export was made with another embedder than the configuration's: its vectors would not be comparable."""

    kind = "invalid"


def export_tables(state: StateStore, embedder_model: str, dimension: int,
                  stored_vectors: dict[str, np.ndarray] | None = None) -> dict[str, pa.Table]:
    """Every table of the index, read from the state store (the system of record of the derived stores).
    ``dimension``: the embedder's, the fixed size of the vector columns; ``stored_vectors``: text hash -> vector of
    texts the cache does not keep (entity names), exported with it so an import embeds nothing again."""
    documents = state.documents()
    chunked_keys = dict(state.query("SELECT doc_id, chunked_key FROM documents"))
    shards = dict(state.query("SELECT doc_id, shard FROM documents"))
    chunks = state.chunks()
    titles = {d.doc_id: d.title for d in documents}
    cache = dict(state.query("SELECT text_hash, vector FROM embedding_cache WHERE model = ?", [embedder_model]))
    summary_hashes = state.payload_hashes(COMMUNITY_SUMMARY_PAYLOADS)
    for text_hash, stored in (stored_vectors or {}).items():
        cache.setdefault(text_hash, np.asarray(stored, dtype=np.float32).tobytes())

    def vector(text_hash: str) -> list[float] | None:
        blob = cache.get(text_hash)
        return None if blob is None else np.frombuffer(blob, dtype=np.float32).tolist()

    chunk_rows = [
        {"chunk_id": c.chunk_id, "doc_id": c.doc_id, "shard": shards[c.doc_id], "position": c.position,
         "text": c.text, "token_count": c.token_count, "start_char": c.start_char, "end_char": c.end_char,
         "headings": list(c.headings),
         "vector": vector(content_hash(chunk_embedding_text(titles.get(c.doc_id, ""), c)))}
        for c in chunks
    ]
    mention_rows = []
    for chunk_id, key, payload in state.query(
        "SELECT chunk_id, extractor_key, payload FROM extractions ORDER BY chunk_id, extractor_key"
    ):
        payload = unpack_payload(payload)
        extraction = extraction_from_json(chunk_id, payload)
        mention_rows.append({"chunk_id": chunk_id, "extractor_key": key, "payload": payload,
                             "entity_names": [e.name for e in extraction.entities]})
    entity_rows = _element_rows(state, "entity", ("name", "type", "description", "doc_ids", "title"))
    tables = {
        "documents": [
            {"doc_id": d.doc_id, "shard": shards[d.doc_id], "source": d.source, "uri": d.uri, "title": d.title,
             "text": d.text, "content_hash": d.content_hash, "metadata": json.dumps(d.metadata, default=str),
             "access_groups": sorted(set(access_groups_of(d))), "chunked_key": chunked_keys[d.doc_id],
             "last_modified": d.last_modified()}
            for d in documents
        ],
        "chunks": chunk_rows,
        "mentions": mention_rows,
        "entities": entity_rows,
        "relationships": _element_rows(state, "relationship", ("source_id", "target_id", "type", "description",
                                                               "weight", "doc_ids")),
        "communities": [
            _with_fields({"community_id": cid, "level": community["level"], "payload": json.dumps(community)},
                         ("parent_id", "entity_ids", "child_ids"))
            for cid, community in state.payloads(COMMUNITY_PAYLOADS).items()
        ],
        "community_summaries": [
            _with_fields({"community_id": cid, "content_hash": summary_hashes[cid], "payload": json.dumps(summary)},
                         ("level", "title", "summary", "rating", "chunk_ids", "written_from"))
            for cid, summary in state.payloads(COMMUNITY_SUMMARY_PAYLOADS).items()
        ],
        "embeddings": [
            {"text_hash": h, "vector": np.frombuffer(blob, dtype=np.float32).tolist()} for h, blob in sorted(cache.items())
        ],
    }
    schemas = _schemas(dimension)
    return {name: pa.Table.from_pylist(rows, schema=schemas[name]) for name, rows in tables.items()}


def _with_fields(row: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    """The row with the named fields of its JSON payload as columns of their own, for readers (pandas, duckdb)."""
    data = json.loads(row["payload"])
    return {**row, **{name: data.get(name) for name in fields}}


def _typed(column: str, value: Any) -> Any:
    """A payload field as its column holds it: weights as floats, document ids as a list of strings, a title that is
    empty (most entities have none) as null, the rest as strings."""
    if value is None:
        return None
    if column == "weight":
        return float(value)
    if column == "doc_ids":
        return [str(v) for v in value]
    return (str(value) or None) if column == "title" else str(value)


def _element_rows(state: StateStore, kind: str, columns: tuple[str, ...]) -> list[dict[str, Any]]:
    """Merged elements: the stored payload whole (what import writes back) and its main fields as typed columns for
    readers (pandas, duckdb); a relationship also names its ends (``source``, ``target``) beside their ids, which
    join ``entities.element_id``."""
    rows = []
    payloads, digests = state.element_payloads(kind), state.element_hashes(kind)
    for element_id in sorted(payloads.keys() & digests.keys()):  # two reads: a build may write between them
        data = payloads[element_id]
        # The JSON the merge wrote (its keys sorted, `element_payload`), which its content hash is of.
        payload = orjson.dumps(data, option=orjson.OPT_SORT_KEYS).decode()
        row: dict[str, Any] = {"element_id": element_id, "content_hash": digests[element_id], "payload": payload}
        row.update((column, _typed(column, data.get(column))) for column in columns)
        rows.append(row)
    if kind == "relationship":
        names = {eid: data.get("name") for eid, data in state.element_payloads("entity").items()}
        for row in rows:
            row["source"], row["target"] = names.get(row["source_id"]), names.get(row["target_id"])
    return rows


def _schemas(dimension: int) -> dict[str, pa.Schema]:
    """The export's tables. Vectors are fixed-size lists of the embedder's dimension (an array column to readers);
    a payload column keeps what import writes back whole, beside its fields as typed columns."""
    vector = pa.list_(pa.float32(), dimension)
    strings = pa.list_(pa.string())
    return {
        "documents": pa.schema([("doc_id", pa.string()), ("shard", pa.int64()), ("source", pa.string()),
                                ("uri", pa.string()), ("title", pa.string()), ("text", pa.string()),
                                ("content_hash", pa.string()), ("metadata", pa.string()),
                                ("access_groups", strings), ("chunked_key", pa.string()),
                                # the source's own time of the document's last change (None: the source gives none)
                                ("last_modified", pa.timestamp("ms", tz="UTC"))]),
        "chunks": pa.schema([("chunk_id", pa.string()), ("doc_id", pa.string()), ("shard", pa.int64()),
                             ("position", pa.int64()), ("text", pa.string()), ("token_count", pa.int64()),
                             ("start_char", pa.int64()), ("end_char", pa.int64()), ("headings", strings),
                             ("vector", vector)]),
        "mentions": pa.schema([("chunk_id", pa.string()), ("extractor_key", pa.string()), ("payload", pa.string()),
                               ("entity_names", strings)]),
        "entities": pa.schema([("element_id", pa.string()), ("content_hash", pa.string()), ("payload", pa.string()),
                               ("name", pa.string()), ("type", pa.string()), ("description", pa.string()),
                               ("doc_ids", strings), ("title", pa.string())]),
        "relationships": pa.schema([("element_id", pa.string()), ("content_hash", pa.string()),
                                    ("payload", pa.string()), ("source_id", pa.string()), ("target_id", pa.string()),
                                    ("source", pa.string()), ("target", pa.string()), ("type", pa.string()),
                                    ("description", pa.string()), ("weight", pa.float64()), ("doc_ids", strings)]),
        "communities": pa.schema([("community_id", pa.string()), ("level", pa.int64()), ("payload", pa.string()),
                                  ("parent_id", pa.string()), ("entity_ids", strings), ("child_ids", strings)]),
        "community_summaries": pa.schema([("community_id", pa.string()), ("content_hash", pa.string()),
                                          ("payload", pa.string()), ("level", pa.int64()), ("title", pa.string()),
                                          ("summary", pa.string()), ("rating", pa.float64()),
                                          ("chunk_ids", strings), ("written_from", strings)]),
        "embeddings": pa.schema([("text_hash", pa.string()), ("vector", vector)]),
    }


def write_export(directory: str | Path, tables: dict[str, pa.Table], manifest: dict[str, Any]) -> dict[str, Any]:
    """Write the tables and the manifest (written last: a folder without one is an unfinished export)."""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    for name, table in tables.items():
        pq.write_table(table, target / f"{name}.parquet")
    manifest = {**manifest, "format_version": EXPORT_FORMAT_VERSION,
                "counts": {name: table.num_rows for name, table in tables.items()},
                "exported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (target / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return manifest


def read_export(directory: str | Path) -> tuple[dict[str, Any], dict[str, pa.Table]]:
    source = Path(directory)
    manifest_path = source / MANIFEST
    if not manifest_path.is_file():
        raise FileNotFoundError(f"{manifest_path} not found: {source} is not a finished graphrag-pipeline export")
    manifest = json.loads(manifest_path.read_text())
    if manifest.get("format_version") != EXPORT_FORMAT_VERSION:
        raise ValueError(f"{source}: export format {manifest.get('format_version')!r}, this version reads "
                         f"{EXPORT_FORMAT_VERSION}")
    missing = [name for name in TABLES if not (source / f"{name}.parquet").is_file()]
    if missing:
        raise FileNotFoundError(f"{source}: tables missing from the export: {', '.join(missing)}")
    return manifest, {name: pq.read_table(source / f"{name}.parquet") for name in TABLES}


def check_compatible(manifest: dict[str, Any], embedder_model: str, embedding_dimension: int) -> None:
    """Refuse an export whose vectors another embedder made: they would be compared with this model's queries."""
    if manifest["embedder"]["model"] != embedder_model or manifest["embedder"]["dimension"] != embedding_dimension:
        raise ExportMismatchError(
            f"the export's vectors were made by {manifest['embedder']['model']} "
            f"(dimension {manifest['embedder']['dimension']}), the configuration embeds with {embedder_model} "
            f"(dimension {embedding_dimension}): configure the export's embedder, or build the index anew"
        )


def load_state(state: StateStore, tables: dict[str, pa.Table], embedder_model: str) -> None:
    """Write an export's rows into a state store (upserts: importing twice leaves the same state)."""
    documents = tables["documents"].to_pylist()
    docs = [Document(r["doc_id"], r["source"], r["uri"], r["title"], r["text"], r["content_hash"],
                     json.loads(r["metadata"])) for r in documents]
    exported_groups = {r["doc_id"]: sorted(r["access_groups"]) for r in documents}
    for doc in docs:
        if sorted(set(access_groups_of(doc))) != exported_groups[doc.doc_id]:
            raise ValueError(f"document {doc.doc_id}: its metadata's access groups differ from the export's "
                             "access_groups column; the export was edited or damaged")
    state.upsert_documents(docs, {r["doc_id"]: r["shard"] for r in documents})
    chunks_by_doc: dict[str, list[Chunk]] = {}
    for r in tables["chunks"].to_pylist():
        chunks_by_doc.setdefault(r["doc_id"], []).append(
            Chunk(r["chunk_id"], r["doc_id"], r["position"], r["text"], r["token_count"], r["start_char"],
                  r["end_char"], tuple(r["headings"])))
    chunked_by_key: dict[str, list[tuple[Document, int, list[Chunk]]]] = {}
    for doc, row in zip(docs, documents):
        if row["chunked_key"] is not None:
            chunked_by_key.setdefault(row["chunked_key"].split(":", 1)[1], []).append(
                (doc, row["shard"], chunks_by_doc.get(doc.doc_id, [])))
    for chunking_key, chunked in chunked_by_key.items():
        state.replace_chunks(chunked, chunking_key)
    state.cache_embeddings(embedder_model, {
        r["text_hash"]: np.asarray(r["vector"], dtype=np.float32) for r in tables["embeddings"].to_pylist()})
    by_key: dict[str, list] = {}
    for r in tables["mentions"].to_pylist():
        by_key.setdefault(r["extractor_key"], []).append(extraction_from_json(r["chunk_id"], r["payload"]))
    for key, extractions in by_key.items():
        state.store_extractions(key, extractions)
    for kind, table in (("entity", "entities"), ("relationship", "relationships")):
        state.replace_elements(kind, {r["element_id"]: (r["content_hash"], r["payload"])
                                      for r in tables[table].to_pylist()}, [])
    state.write_payloads(COMMUNITY_PAYLOADS, {r["community_id"]: ("", r["payload"])
                                              for r in tables["communities"].to_pylist()}, replace_all=True)
    state.write_payloads(COMMUNITY_SUMMARY_PAYLOADS, {r["community_id"]: (r["content_hash"], r["payload"])
                                                      for r in tables["community_summaries"].to_pylist()})


def entity_name_vectors(ws: Workspace) -> dict[str, np.ndarray]:
    """Text hash of each entity's name -> the vector its point holds, for the points booked as built from that name
    with this model (the graph stage does not cache names: each keys one point)."""
    if ENTITIES not in ws.vector_store.collections():
        return {}
    names = {eid: payload["name"] for eid, payload in ws.state.element_payloads("entity").items()}
    booked = ws.state.indexed_points(ENTITIES)
    current = [eid for eid, name in names.items() if built_from(booked.get(eid), text_key(ws.embedder.name, name))]
    return {content_hash(names[eid]): vector for eid, vector in ws.vector_store.vectors(ENTITIES, current).items()}


def export_index(ws: Workspace, directory: str | Path) -> dict[str, Any]:
    """Write the workspace's index to ``directory`` as Parquet tables and a manifest; returns the manifest."""
    tables = export_tables(ws.state, ws.embedder.name, ws.embedding_dimension, entity_name_vectors(ws))
    manifest = {"embedder": {"model": ws.embedder.name, "dimension": ws.embedding_dimension},
                "extractor_key": ws.extractor_key, "shard_count": ws.settings.shard_count,
                "backends": {"graph": ws.settings.backends.graph, "vector": ws.settings.backends.vector},
                "contains_restricted_text": bool(ws.state.restricted_documents())}
    return write_export(directory, tables, manifest)


def import_index(ws: Workspace, directory: str | Path) -> list[StageReport]:
    """Load an export into the workspace's backends: the state tables, then every stage after ingest, which finds
    its work already done in them and fills the configured graph and vector stores."""
    manifest, tables = read_export(directory)
    check_compatible(manifest, ws.embedder.name, ws.embedder.dimension)
    if manifest["shard_count"] != ws.settings.shard_count:
        raise ValueError(f"the export has {manifest['shard_count']} shards, the configuration "
                         f"{ws.settings.shard_count}: configure shard_count: {manifest['shard_count']} to import it")
    load_state(ws.state, tables, ws.embedder.name)
    shards = list(range(ws.settings.shard_count))
    return [s.execute(ws, shards) for s in STAGES if s.name != "raw_documents"]
