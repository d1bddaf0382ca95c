"""Restricted text, part by part (fast unit tests; `test_access_control.py` runs every channel on a built index): a
merged description and a relationship's wordings keep which documents state each part, a reader sees only the parts
some readable document states, and run metadata names only documents the index holds without access groups."""

from __future__ import annotations

import dataclasses
import json

from graphrag_pipeline.defs.reporting import public_report
from graphrag_pipeline.lib.algorithms.merge import (
    element_payload,
    entity_from_payload,
    merge_extractions,
    relationship_from_payload,
)
from graphrag_pipeline.lib.core.models import Chunk, Document
from graphrag_pipeline.lib.stages.report import StageReport
from graphrag_pipeline.lib.stores.state.sqlite import SQLiteStateStore
from graphrag_pipeline.query.access import ReaderAccess
from graphrag_pipeline_tests.unit.algorithms.test_merge import ONTOLOGY, extraction

PUBLIC_SENTENCE = "prometheus scrapes payments-api."
SECRET_SENTENCE = "prometheus guards the launch code ZEBRA-7."
RESTRICTED = {"secret.md": frozenset({"launch-team"})}


def merged():
    return merge_extractions(
        [
            ("public.md", extraction("c1", [("Prometheus", "Service", PUBLIC_SENTENCE)],
                                     [("Prometheus", "payments-api", "RELATED_TO", "scrapes", PUBLIC_SENTENCE, 1.0)])),
            ("secret.md", extraction("c2", [("Prometheus", "Service", SECRET_SENTENCE),
                                            ("Prometheus", "Service", PUBLIC_SENTENCE)],
                                     [("Prometheus", "payments-api", "RELATED_TO", "arms", SECRET_SENTENCE, 1.0)])),
        ],
        ONTOLOGY,
    )


def test_each_description_part_and_wording_keeps_every_document_that_states_it():
    entities, relationships = merged()
    prometheus = next(e for e in entities if e.name == "Prometheus")
    assert prometheus.description_parts == ((PUBLIC_SENTENCE, ("public.md", "secret.md")),
                                            (SECRET_SENTENCE, ("secret.md",)))
    assert prometheus.description == f"{PUBLIC_SENTENCE}\n{SECRET_SENTENCE}"
    (scrapes,) = relationships
    assert dict(zip(scrapes.predicates, scrapes.predicate_doc_ids)) == {"arms": ("secret.md",),
                                                                       "scrapes": ("public.md",)}
    # The provenance survives the index's payloads, which the query module reads it from.
    assert entity_from_payload(json.loads(element_payload(prometheus)[1])) == prometheus
    assert relationship_from_payload(json.loads(element_payload(scrapes)[1])) == scrapes


def test_a_reader_sees_the_parts_and_wordings_a_readable_document_states():
    entities, relationships = merged()
    prometheus = next(e for e in entities if e.name == "Prometheus")
    (scrapes,) = relationships
    public, entitled = ReaderAccess(RESTRICTED, []), ReaderAccess(RESTRICTED, ["launch-team"])
    assert public.description(prometheus) == PUBLIC_SENTENCE
    assert public.predicates(scrapes) == ["scrapes"]
    assert entitled.description(prometheus) == prometheus.description
    assert entitled.predicates(scrapes) == ["arms", "scrapes"]


def test_text_written_from_every_part_or_of_unknown_provenance_is_shown_only_to_who_reads_every_document():
    entities, _ = merged()
    prometheus = next(e for e in entities if e.name == "Prometheus")
    by_model = dataclasses.replace(prometheus, description="Prometheus guards ZEBRA-7 and scrapes payments-api.")
    public, entitled = ReaderAccess(RESTRICTED, []), ReaderAccess(RESTRICTED, ["launch-team"])
    assert public.description(by_model) == PUBLIC_SENTENCE  # the readable parts, not the model's mix
    assert entitled.description(by_model) == by_model.description
    from_graph = dataclasses.replace(prometheus, description_parts=())  # graph stores keep the merged text only
    assert public.description(from_graph) == ""
    assert entitled.description(from_graph) == prometheus.description


def test_run_metadata_names_only_documents_the_index_holds_without_groups(tmp_path):
    state = SQLiteStateStore(tmp_path / "state.sqlite")
    documents = [
        Document("t:public.md", "t", "public.md", "Public", "x", "h1"),
        Document("t:secret.md", "t", "secret.md", "Secret plan", "y", "h2", {"access_groups": ["launch-team"]}),
    ]
    state.upsert_documents(documents, {"t:public.md": 0, "t:secret.md": 0})
    state.replace_chunks(
        [(doc, 0, [Chunk(f"chunk-{doc.doc_id}", doc.doc_id, 0, doc.text, 1, 0, 1)]) for doc in documents], "key")
    report = StageReport(
        "raw_documents",
        counts={"new": 3},
        sample=[{"doc_id": "t:public.md", "title": "Public"}, {"doc_id": "t:secret.md", "title": "Secret plan"},
                {"chunk_id": "chunk-t:public.md"}, {"chunk_id": "chunk-t:secret.md"}, {"level": 0}],
        notes=["new t:public.md", "new t:secret.md", "deleted t:gone.md", "quarantined t:bad.md: cannot parse",
               "t read at git revision abc123"],
    )
    shown = public_report(report, state, ["t"])
    state.close()
    assert shown.sample == [{"doc_id": "t:public.md", "title": "Public"}, {"chunk_id": "chunk-t:public.md"},
                            {"level": 0}]
    assert shown.notes == ["new t:public.md", "t read at git revision abc123",
                           "5 sample rows or notes about restricted, deleted or quarantined documents withheld"]
    assert shown.counts == report.counts
