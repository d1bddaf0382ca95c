"""Sources are plug-ins: a kind is a reader plus one registry line. The ingest stage, the change scans and the sensors'
poll intervals go through the registry and name no kind."""

from __future__ import annotations

from typing import Literal, get_args

import pytest

from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core.config import BaseSource, FolderSource, SourceConfig, load_settings
from graphrag_pipeline.lib.core.ids import content_hash
from graphrag_pipeline.lib.core.models import Document
from graphrag_pipeline.lib.index.changes import source_hashes
from graphrag_pipeline.lib.sources import registry
from graphrag_pipeline.lib.sources.reader import ReadContext, SourceScan
from graphrag_pipeline.lib.stages import all_shards, ingest_documents


class NotesSource(BaseSource):
    """A toy kind: short notes written into the configuration itself."""

    kind: Literal["notes"] = "notes"
    notes: dict[str, str]  # note id -> text


class NotesReader:
    default_poll_seconds = 5

    def __init__(self) -> None:
        self.contexts: list[ReadContext | None] = []

    def scan(self, source: NotesSource) -> dict[str, str]:
        return {f"{source.name}:{note_id}": content_hash(text) for note_id, text in source.notes.items()}

    def read(self, source: NotesSource, context: ReadContext | None) -> SourceScan:
        self.contexts.append(context)
        documents = tuple(
            Document(doc_id=f"{source.name}:{note_id}", source=source.name, uri=f"notes://{source.name}/{note_id}",
                     title=note_id, text=text, content_hash=content_hash(text))
            for note_id, text in source.notes.items()
        )
        return SourceScan(documents=documents, quarantined=(), hashes=self.scan(source),
                          counts={"notes": len(documents)})


def configurable_kinds() -> set[str]:
    """The kinds ``SourceConfig`` (a discriminated union of one model per kind) accepts."""
    union = get_args(SourceConfig)[0]
    return {get_args(get_args(member)[0].model_fields["kind"].annotation)[0] for member in get_args(union)}


def test_a_new_kind_is_ingested_through_its_reader_and_one_registry_line(tmp_path, monkeypatch):
    reader = NotesReader()
    monkeypatch.setitem(registry.READERS, "notes", reader)  # the registry line
    notes = NotesSource(name="ops", notes={"db": "ledger-db runs on postgres.", "api": "payments-api calls ledger-db."})
    # The toy kind is not in the shipped configuration schema (lib.config.SourceConfig), so the settings take the
    # already validated source as it is.
    base = load_settings(index_dir=str(tmp_path / "index"), shard_count=4)
    settings = base.model_copy(update={"sources": (notes,)})

    with Workspace(settings) as ws:
        first = ingest_documents(ws, all_shards(ws))
        stored = ws.state.document_hashes(source="ops")
    assert (first.counts["new"], first.counts["ops.notes"]) == (2, 2)
    expected = {f"ops:{note_id}": content_hash(text) for note_id, text in notes.notes.items()}
    assert stored == expected == source_hashes(settings)  # the sensors' change scan goes through the registry too
    assert [context.shards for context in reader.contexts] == [frozenset(range(4))]

    edited = notes.model_copy(update={"notes": {"db": "ledger-db runs on postgres 16."}})
    with Workspace(settings.model_copy(update={"sources": (edited,)})) as ws:
        second = ingest_documents(ws, all_shards(ws))
        assert ws.state.document_hashes(source="ops") == {"ops:db": content_hash("ledger-db runs on postgres 16.")}
    assert (second.counts["changed"], second.counts["deleted"], second.counts["new"]) == (1, 1, 0)

    assert registry.poll_seconds(notes) == 5
    assert registry.poll_seconds(notes.model_copy(update={"poll_interval_seconds": 0})) == 0


def test_every_configurable_kind_has_a_reader_with_its_default_poll_interval():
    assert set(registry.READERS) == configurable_kinds()
    defaults = {kind: reader.default_poll_seconds for kind, reader in registry.READERS.items()}
    assert defaults == {"folder": 60, "catalog": 60, "confluence": 300, "eval_set": 3600}  # as the README says
    folder = FolderSource(name="docs", path="/srv/docs")
    assert registry.poll_seconds(folder) == 60
    assert registry.poll_seconds(folder.model_copy(update={"poll_interval_seconds": 0})) == 0


def test_a_kind_without_a_reader_is_named_in_the_error():
    with pytest.raises(ValueError, match="source 'ops': no reader for kind 'notes'"):
        registry.read_source(NotesSource(name="ops", notes={}))


def test_every_registered_kind_has_its_source_sensor():
    from graphrag_pipeline.defs.automation.sensors import SOURCE_SENSORS

    sensors = {definition.name for definition in SOURCE_SENSORS}
    assert sensors == {f"{kind}_source_sensor" for kind in registry.READERS}
