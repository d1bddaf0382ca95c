"""Daily sync over real runbooks (20 Prometheus runbooks from data/): one edited document is one sensor request, the
embedder and extractor see only its changed chunks, and the index equals a from-scratch build of the new corpus; a
deleted document leaves nothing derived only from it anywhere (graph, vectors, summaries)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import yaml
from dagster import build_sensor_context

from graphrag_pipeline.defs.automation.sensors import sensor_of
from graphrag_pipeline.defs.resources import GraphRAGResource
from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core import faults
from graphrag_pipeline.lib.core.config import EmbedderConfig, PipelineSettings, load_settings
from graphrag_pipeline.lib.core.ids import stable_shard
from graphrag_pipeline.lib.core.models import EntityMention
from graphrag_pipeline.lib.embed.embedders import bundled_model_path
from graphrag_pipeline.lib.embed.onnx_encoder import OnnxEmbedder
from graphrag_pipeline.lib.extract.offline import OfflineExtractor
from graphrag_pipeline.lib.stages import (
    STAGES,
    build_everything,
    stage,
    summarize_communities,
    summarize_elements,
    sync_graph,
    vectors,
)
from graphrag_pipeline.lib.stages.communities import FULL_RUN_MARK
from graphrag_pipeline.lib.stages.report import StageReport
from graphrag_pipeline.lib.stages.vectors import GLOBAL_SHARD, sync_points
from graphrag_pipeline.lib.stores.protocols import CHUNKS, COMMUNITIES, ENTITIES
from graphrag_pipeline.lib.stores.state.sql import COMMUNITY_PAYLOADS, COMMUNITY_SUMMARY_PAYLOADS, payload_json
from graphrag_pipeline_tests.conftest import SAMPLE_CORPUS, folder_settings
from graphrag_pipeline_tests.conftest import build as build_with
from graphrag_pipeline_tests.index_snapshot import assert_same_index, index_snapshot

pytestmark = pytest.mark.slow

RUNBOOKS = sorted((SAMPLE_CORPUS / "prometheus-runbooks" / "kubernetes").glob("Kube*.md"))[:20]
EDITED = RUNBOOKS[3].name
DELETED = RUNBOOKS[7].name
SHARDS = 8


class CountingEmbedder(OnnxEmbedder):
    """The real offline model on the build's default runtime, counting what it is asked to embed."""

    def __init__(self) -> None:
        super().__init__(str(bundled_model_path()), EmbedderConfig())
        self.texts: list[str] = []

    def embed(self, texts):
        self.texts.extend(texts)
        return super().embed(texts)


def make_project(root: Path, names: list[str]) -> Path:
    corpus = root / "corpus"
    corpus.mkdir(parents=True)
    for path in RUNBOOKS:
        if path.name in names:
            shutil.copy(path, corpus / path.name)
    config = root / "graphrag.yaml"
    config.write_text(yaml.safe_dump({
        "index_dir": "index", "shard_count": SHARDS,
        # The sensor is evaluated twice in a row here: scan on every tick.
        "sources": [{"name": "rb", "kind": "folder", "path": "corpus", "poll_interval_seconds": 0}],
    }))
    return config


def build(config: Path, embedder: OnnxEmbedder | None = None, index_dir: Path | None = None) -> list:
    overrides = {"index_dir": str(index_dir)} if index_dir else {}
    with Workspace(load_settings(config, **overrides), embedder=embedder) as ws:
        return build_everything(ws)


def starting_partition(config: Path) -> tuple[dict[str, tuple[str, str]], str | None]:
    """The communities an incremental run starts from, and the mark of the last full re-clustering."""
    with Workspace(load_settings(config)) as ws:
        payloads = ws.state.payloads(COMMUNITY_PAYLOADS)
        return ({cid: ("", json.dumps(p)) for cid, p in payloads.items()},
                ws.state.stage_mark(FULL_RUN_MARK))


def build_from_scratch(config: Path, index_dir: Path, partition: tuple[dict[str, tuple[str, str]], str | None]):
    """A from-scratch build given the same starting partition (what an incremental re-sync is to equal): the whole
    build, then its communities brought level from ``partition`` instead of clustered anew."""
    build(config, index_dir=index_dir)
    with Workspace(load_settings(config, index_dir=str(index_dir))) as ws:
        communities, mark = partition
        ws.state.write_payloads(COMMUNITY_PAYLOADS, communities, replace_all=True)
        ws.state.record_stage_mark(FULL_RUN_MARK, mark)
        for name in ("communities", "community_summaries"):
            stage(name).execute(ws)


def snapshot(config: Path, index_dir: Path | None = None) -> dict[str, object]:
    """Everything the index derived from the corpus, record by record (`index_snapshot`)."""
    return index_snapshot(load_settings(config, **({"index_dir": str(index_dir)} if index_dir else {})))


@pytest.fixture(scope="module")
def synced(tmp_path_factory):
    root = tmp_path_factory.mktemp("sync")
    config = make_project(root / "live", [p.name for p in RUNBOOKS])
    build(config)
    resources = {"graphrag": GraphRAGResource(config_path=str(config))}
    with build_sensor_context(resources=resources) as context:
        sensor_of("folder")(context)
        cursor = context.cursor

    before_edit = starting_partition(config)
    edited = config.parent / "corpus" / EDITED
    edited.write_text(edited.read_text() + "\n## Escalation\n\nEscalate to team-platform-oncall after 30 minutes.\n")
    with build_sensor_context(cursor=cursor, resources=resources) as context:
        requests = sensor_of("folder")(context)
        cursor = context.cursor
    embedder = CountingEmbedder()
    extracted_before = OfflineExtractor.extract
    calls: list[int] = []

    def counting_extract(self, chunks, titles=None):
        calls.append(len(chunks))
        return extracted_before(self, chunks, titles)

    OfflineExtractor.extract = counting_extract
    try:
        edit_reports = {r.stage: r for r in build(config, embedder)}
    finally:
        OfflineExtractor.extract = extracted_before
    after_edit = snapshot(config)
    # From-scratch builds read the same folder (documents are identified by path and keep their file times).
    build_from_scratch(config, root / "fresh-edit", before_edit)
    fresh_edit = snapshot(config, root / "fresh-edit")

    before_delete = starting_partition(config)
    (config.parent / "corpus" / DELETED).unlink()
    with build_sensor_context(cursor=cursor, resources=resources) as context:
        delete_requests = sensor_of("folder")(context)
    build(config)
    after_delete = snapshot(config)
    build_from_scratch(config, root / "fresh-delete", before_delete)
    return {
        "config": config, "requests": requests, "delete_requests": delete_requests, "embedder": embedder,
        "extract_calls": calls, "edit_reports": edit_reports, "after_edit": after_edit, "after_delete": after_delete,
        "fresh_edit": fresh_edit, "fresh_delete": snapshot(config, root / "fresh-delete"),
    }


def test_one_edited_document_is_one_request_for_its_shard(synced):
    [request] = synced["requests"]
    assert request.partition_key == f"shard-{stable_shard(f'rb:{EDITED}', SHARDS):03d}"
    [delete_request] = synced["delete_requests"]
    assert delete_request.partition_key == f"shard-{stable_shard(f'rb:{DELETED}', SHARDS):03d}"


def test_the_embedder_and_extractor_see_only_the_changed_chunks(synced):
    reports = synced["edit_reports"]
    rechunked = reports["chunks"].counts["documents_rechunked"]
    assert rechunked == 1
    changed_chunks = reports["embeddings"].counts["embedded"]
    assert 1 <= changed_chunks < reports["embeddings"].counts["chunks"] / 5
    assert sum(synced["extract_calls"]) == reports["extracted_elements"].counts["extracted"] == changed_chunks
    chunk_texts = [t for t in synced["embedder"].texts if "team-platform-oncall" in t]
    assert chunk_texts  # the new text was embedded
    # Chunk texts plus the entity names and community summaries that changed with them, nothing unchanged.
    assert len(synced["embedder"].texts) < reports["embeddings"].counts["chunks"]


def test_an_incremental_sync_equals_a_from_scratch_build_given_the_same_starting_partition(synced):
    assert_same_index(synced["after_edit"], synced["fresh_edit"])
    assert_same_index(synced["after_delete"], synced["fresh_delete"])
    # The edit and the delete kept some communities whole and re-formed others.
    communities = synced["edit_reports"]["communities"].counts
    assert communities["kept"] > 0 and communities["re_formed"] > 0


def test_the_merge_and_the_graph_sync_read_only_what_the_edit_touched(synced):
    reports = synced["edit_reports"]
    chunks = reports["embeddings"].counts["chunks"]
    merge = reports["element_summaries"].counts
    assert merge["full_merge"] == 0
    assert 0 < merge["merged_chunks"] < chunks / 2
    assert 0 < merge["entity_changed"] + merge["relationship_changed"]
    graph = reports["graph"].counts
    assert graph["whole_sync"] == 0
    assert 0 < graph["chunk_mentions_written"] < chunks / 2


def test_the_summaries_read_the_members_only_of_communities_whose_inputs_changed(synced):
    summaries = synced["edit_reports"]["community_summaries"].counts
    assert summaries["summarized"] <= summaries["inputs_changed"] < summaries["communities"] / 2


def test_a_deleted_document_leaves_nothing_derived_only_from_it(synced):
    before, after = synced["after_edit"], synced["after_delete"]
    doc_id = f"rb:{DELETED}"
    only_from_it = {eid for eid, entity in before["entities"].items() if entity["doc_ids"] == (doc_id,)}
    assert only_from_it, "the deleted runbook had entities of its own"
    assert not only_from_it & set(after["entities"]) and not only_from_it & set(after["vectors"][ENTITIES])
    assert all(doc_id not in entity["doc_ids"] for entity in after["entities"].values())
    assert all(doc_id not in relationship["doc_ids"] for relationship in after["relationships"].values())
    gone_chunks = set(before["chunks"]) - set(after["chunks"])
    mentioned = {chunk_id for chunk_ids in after["mentions"].values() for chunk_id in chunk_ids}
    assert gone_chunks and not gone_chunks & set(after["vectors"][CHUNKS]) and not gone_chunks & mentioned
    names = {before["entities"][eid]["name"] for eid in only_from_it}
    for summary in after["summaries"].values():
        assert not any(name in summary["title"] or f"{name} (" in summary["summary"] for name in names), summary["title"]
    assert set(after["vectors"][COMMUNITIES]) == set(after["summaries"])


def test_the_ingest_report_says_what_changed_since_the_last_build(synced):
    notes = synced["edit_reports"]["raw_documents"].notes
    assert notes == [f"changed rb:{EDITED}"]


def test_a_point_whose_payload_alone_changed_keeps_its_vector_and_uncached_texts_stay_out_of_the_cache(tmp_path):
    (tmp_path / "corpus").mkdir()
    embedder = CountingEmbedder()
    with Workspace(folder_settings(tmp_path / "index", tmp_path / "corpus"), embedder=embedder) as ws:
        def sync(wanted: dict[str, tuple[str, dict]]) -> dict[str, int]:
            report = StageReport("test")
            sync_points(ws, ENTITIES, {pid: (GLOBAL_SHARD, text, payload) for pid, (text, payload) in wanted.items()},
                        None, report, cache_new_texts=False)
            return report.counts

        first = sync({"e1": ("payments-api", {"doc_ids": ["a"]}), "e2": ("checkout", {"doc_ids": ["a"]})})
        stored = ws.vector_store.vectors(ENTITIES, ["e1"])["e1"]
        embedder.texts.clear()
        second = sync({"e1": ("payments-api", {"doc_ids": ["a", "b"]}), "e2": ("checkout-service", {"doc_ids": ["a"]})})

        assert (first["embedded"], first["vectors_kept"]) == (2, 0)
        assert (second["embedded"], second["vectors_kept"], second["entities_upserted"]) == (1, 1, 2)
        assert embedder.texts == ["checkout-service"]
        assert ws.vector_store.vectors(ENTITIES, ["e1"])["e1"].tolist() == stored.tolist()
        assert ws.vector_store.search(ENTITIES, stored, 1)[0].payload["doc_ids"] == ["a", "b"]
        assert ws.state.query("SELECT COUNT(*) FROM embedding_cache") == [(0,)]


def test_new_points_of_a_corpus_wide_collection_written_by_a_killed_run_are_found_and_deleted(tmp_path):
    """A first build writes a corpus-wide collection's new points without booking them first; a kill after the write
    leaves more points than bookkeeping, which the next run finds by count: it ends with exactly what it wants."""

    class Killed(BaseException):
        pass

    def kill_after_upsert(point: str) -> None:
        if point == f"test:{ENTITIES}:upserted":
            raise Killed(point)

    (tmp_path / "corpus").mkdir()
    with Workspace(folder_settings(tmp_path / "index", tmp_path / "corpus"), embedder=CountingEmbedder()) as ws:
        first = {"e1": (GLOBAL_SHARD, "payments-api", {"type": "Service"}),
                 "e2": (GLOBAL_SHARD, "checkout", {"type": "Service"})}
        with faults.watching(kill_after_upsert), pytest.raises(Killed):
            sync_points(ws, ENTITIES, first, None, StageReport("test"), cache_new_texts=False)
        assert ws.vector_store.count(ENTITIES) == 2 and ws.state.indexed_point_count(ENTITIES) == 0

        # The next run no longer wants e2: the killed run's copy of it must not survive.
        report = StageReport("test")
        sync_points(ws, ENTITIES, {"e1": first["e1"]}, None, report, cache_new_texts=False)
        assert report.counts[f"{ENTITIES}_unbooked_points_deleted"] == 2
        assert ws.vector_store.point_ids(ENTITIES) == {"e1"} and set(ws.state.indexed_points(ENTITIES)) == {"e1"}


def test_texts_are_embedded_in_rounds_of_about_one_length(tmp_path, monkeypatch):
    """Each round sent to the embedder is a run of the length order, not of the id order (a round that mixed
    one-word names with long passages would pad every batch to its longest text), and holds EMBEDDING_BATCH distinct
    texts however many points share them."""
    monkeypatch.setattr(vectors, "EMBEDDING_BATCH", 3)
    (tmp_path / "corpus").mkdir()
    embedder = CountingEmbedder()
    rounds: list[list[str]] = []
    monkeypatch.setattr(embedder, "embed",
                        lambda texts: rounds.append(list(texts)) or OnnxEmbedder.embed(embedder, texts))
    texts = ["pod", "crash looping pods", "node", "a disk filling up on a node", "etcd", "cpu throttling high",
             "kubelet"]
    with Workspace(folder_settings(tmp_path / "index", tmp_path / "corpus"), embedder=embedder) as ws:
        # Ids in the reverse of the length order, so the id order and the length order disagree everywhere; every
        # text keys three points, as copies of one passage would.
        wanted = {f"e{len(texts) - rank}.{copy}": (GLOBAL_SHARD, text, {"doc_ids": ["a"]})
                  for rank, text in enumerate(sorted(texts, key=len)) for copy in range(3)}
        report = StageReport("test")
        sync_points(ws, ENTITIES, wanted, None, report, cache_new_texts=False)
        assert report.counts["entities_upserted"] == 21 and ws.vector_store.count(ENTITIES) == 21

    by_length = sorted(texts, key=lambda text: (len(text), text))
    assert rounds == [by_length[0:3], by_length[3:6], by_length[6:7]]


def built_from_three_runbooks(tmp_path: Path) -> PipelineSettings:
    """A small index of three runbooks in ``tmp_path`` (corpus/, index/), built; its settings."""
    (tmp_path / "corpus").mkdir()
    for path in RUNBOOKS[:3]:
        shutil.copy(path, tmp_path / "corpus" / path.name)
    settings = folder_settings(tmp_path / "index", tmp_path / "corpus")
    build_with(settings)
    return settings


def test_the_merge_starts_over_when_what_it_was_merged_from_is_unknown(tmp_path):
    """An extraction replaced in place (a quarantined chunk extracted again) leaves no trace of what it said, and
    new aliases change what every mention merges into: both make the next merge read the whole corpus."""
    settings = built_from_three_runbooks(tmp_path)
    with Workspace(settings) as ws:
        unchanged = summarize_elements(ws).counts
        assert (unchanged["full_merge"], unchanged["merged_chunks"]) == (0, 0)
        chunk_id = ws.state.chunks()[0].chunk_id
        extraction = ws.state.extractions([chunk_id], ws.extractor_key)[chunk_id]
        mention = EntityMention("Zebra Gateway", "SERVICE", "", chunk_id, "test")
        ws.state.store_extractions(ws.extractor_key, [dataclasses.replace(
            extraction, entities=(*extraction.entities, mention))])
        replaced = summarize_elements(ws).counts
        assert (replaced["full_merge"], replaced["entity_changed"]) == (1, 1)
        assert "Zebra Gateway" in {e["name"] for e in ws.state.element_payloads("entity").values()}
    aliased = folder_settings(tmp_path / "index", tmp_path / "corpus",
                              extraction={"aliases": {"Zebra Gateway": "Kubernetes"}})
    with Workspace(aliased) as ws:
        assert summarize_elements(ws).counts["full_merge"] == 1
        assert "Zebra Gateway" not in {e["name"] for e in ws.state.element_payloads("entity").values()}
        assert summarize_elements(ws).counts["full_merge"] == 0


def test_a_graph_sync_stopped_half_way_makes_the_next_one_whole(tmp_path):
    """Stopped after the graph writes and before the entity points: the store agrees with the bookkeeping, so only
    the stage's mark tells the next sync that the points are behind."""
    settings = built_from_three_runbooks(tmp_path)
    edited = tmp_path / "corpus" / RUNBOOKS[0].name
    edited.write_text(edited.read_text() + "\n## Escalation\n\nPage the payments-gateway owners.\n")

    class Stopped(Exception):
        pass

    def stop_before_the_points(point: str) -> None:
        if point == "graph:mentions-written":
            raise Stopped(point)

    with Workspace(settings) as ws:
        for earlier in STAGES[:5]:
            earlier.execute(ws, range(settings.shard_count))
        with faults.watching(stop_before_the_points), pytest.raises(Stopped):
            sync_graph(ws)
        again = sync_graph(ws).counts
        assert (again["whole_sync"], again["entities_written"]) == (1, 0)
        assert again["entities_upserted"] >= 1  # the new entities' points, which the stopped sync did not write
        assert sync_graph(ws).counts["whole_sync"] == 0


def test_a_retitled_document_rewrites_the_summaries_naming_it_as_reading_every_member_would(tmp_path):
    """A document's title changes no entity, but the summaries naming it among their sources change: the run that
    reads only the members of communities whose inputs changed writes what a run reading every member writes."""
    settings = built_from_three_runbooks(tmp_path)
    with Workspace(settings) as ws:
        before = ws.state.payloads(COMMUNITY_SUMMARY_PAYLOADS)
        documents = ws.state.documents()
        naming = {d.doc_id: {cid for cid, s in before.items() if d.title and d.title in _sources_line(s)}
                  for d in documents}
        document = max(documents, key=lambda d: len(naming[d.doc_id]))
        assert naming[document.doc_id]
        ws.state.upsert_documents([dataclasses.replace(document, title="Renamed runbook")],
                                  {document.doc_id: stable_shard(document.doc_id, settings.shard_count)})
        retitled = summarize_communities(ws).counts
        after = ws.state.payloads(COMMUNITY_SUMMARY_PAYLOADS)

        assert retitled["summarized"] == len(naming[document.doc_id])
        assert retitled["inputs_changed"] == sum(document.doc_id in s["written_from"] for s in before.values())
        for cid in naming[document.doc_id]:
            assert "Renamed runbook" in _sources_line(after[cid]) and document.title not in _sources_line(after[cid])
        assert all(after[cid] == s for cid, s in before.items() if document.doc_id not in s["written_from"])

        # Forgotten inputs: every member is read again, and nothing is rewritten but the inputs themselves.
        hashes = ws.state.payload_hashes(COMMUNITY_SUMMARY_PAYLOADS)
        ws.state.write_payloads(COMMUNITY_SUMMARY_PAYLOADS, {
            cid: (hashes[cid], payload_json({k: v for k, v in s.items() if k != "inputs"})) for cid, s in after.items()})
        everything = summarize_communities(ws).counts
        assert (everything["summarized"], everything["inputs_changed"]) == (0, everything["communities"])
        assert ws.state.payloads(COMMUNITY_SUMMARY_PAYLOADS) == after
        assert summarize_communities(ws).counts["inputs_changed"] == 0


def test_new_limits_for_extractive_summaries_rewrite_every_summary_once(tmp_path):
    settings = built_from_three_runbooks(tmp_path)
    with Workspace(settings) as ws:
        before = ws.state.payloads(COMMUNITY_SUMMARY_PAYLOADS)
    shorter = settings.with_overrides(communities={"summary_sentences": 1})
    with Workspace(shorter) as ws:
        rewritten = summarize_communities(ws).counts
        after = ws.state.payloads(COMMUNITY_SUMMARY_PAYLOADS)
        again = summarize_communities(ws).counts
    assert rewritten["summarized"] == rewritten["communities"] == len(before) > 0
    assert sum(len(s["summary"]) for s in after.values()) < sum(len(s["summary"]) for s in before.values())
    assert (again["inputs_changed"], again["summarized"]) == (0, 0)


def _sources_line(summary: dict) -> str:
    return next((line for line in summary["summary"].splitlines() if line.startswith("From: ")), "")
