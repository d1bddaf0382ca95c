"""The whole asset chain with extractor=llm, summarizer=llm and an HTTP embedder, materialized by Dagster against a
real local server speaking the Ollama protocol (``fake_llm_server``): typed graph from the scripted output, faults
retried or quarantined, zero calls on a second run of unchanged content, and the spend in every asset's metadata."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
import yaml
from dagster import DagsterInstance

from graphrag_pipeline.definitions import definitions_with
from graphrag_pipeline.defs.partitions import SHARD_COUNT, shard_key
from graphrag_pipeline.defs.resources import GraphRAGResource
from graphrag_pipeline.lib.core.config import load_settings
from graphrag_pipeline.lib.stores.embedded_graph import EmbeddedGraphStore
from graphrag_pipeline.lib.stores.state.sql import COMMUNITY_SUMMARY_PAYLOADS
from graphrag_pipeline.lib.stores.state.sqlite import SQLiteStateStore
from graphrag_pipeline.query import open_index
from graphrag_pipeline_tests.end_to_end.test_dagster_chain import metadata, range_tags
from graphrag_pipeline_tests.fake_llm_server import (
    OLLAMA_CHAT,
    FakeLLMServer,
    Reply,
    prompt_of,
)

pytestmark = pytest.mark.slow

DOCUMENTS = {
    "payments.md": "# Payments API\n\npayments-api depends on ledger-db for balances. payments-api is owned by "
                   "team-payments. The on-call engineer pages team-payments when payments-api fails.\n",
    "checkout.md": "# Checkout\n\ncheckout-service calls payments-api to charge cards. checkout-service is owned by "
                   "team-storefront.\n",
    "ledger.md": "# Ledger\n\nledger-db stores balances for payments-api. ledger-db is owned by team-payments.\n",
    "broken.md": "# Broken\n\nThis passage makes the model answer garbage: MALFORMED.\n",
}
# The "model": entity types and relationships it reports when it sees these names in a passage.
TYPES = {"payments-api": "Service", "checkout-service": "Service", "ledger-db": "Service",
         "team-payments": "Team", "team-storefront": "Team"}
FACTS = [
    ("payments-api", "DEPENDS_ON", "ledger-db"),
    ("payments-api", "OWNED_BY", "team-payments"),
    ("checkout-service", "DEPENDS_ON", "payments-api"),
    ("checkout-service", "OWNED_BY", "team-storefront"),
    ("ledger-db", "OWNED_BY", "team-payments"),
    ("team-payments", "pages on failure of", "payments-api"),  # not an ontology type: RELATED_TO + predicate
]


def scripted_model(request: dict) -> str:
    prompt = prompt_of(request)
    if prompt.startswith("You write a report on one community"):
        hint = re.search(r"Working title: (.*)", prompt).group(1)
        return json.dumps({"title": f"Report on {hint}", "summary": f"{hint} work together.",
                           "findings": [{"summary": "Ownership is clear", "explanation": "Every service has a team."}],
                           "rating": 7, "rating_explanation": "Payments matter."})
    if prompt.startswith("Below are descriptions of"):
        name = re.search(r'descriptions of "(.*?)"', prompt).group(1)
        return f"LLM summary of {name}."
    passage = prompt.rsplit('Passage:\n"""', 1)[-1]
    if "MALFORMED" in passage or "could not be used" in prompt:
        return '{"entities": [{"name": "oops"'  # cut off, and the repair attempt is no better
    entities = [{"name": n, "type": t, "description": f"{n} appears in: {passage.strip()[:60]}"}
                for n, t in TYPES.items() if n in passage]
    relationships = [{"source": s, "target": t, "type": p, "description": f"{s} {p} {t}", "strength": 8}
                     for s, p, t in FACTS if s in passage and t in passage]
    return json.dumps({"entities": entities, "relationships": relationships})


@pytest.fixture(scope="module")
def server():
    server = FakeLLMServer().start()
    server.chat_responder = scripted_model
    yield server
    server.stop()


def write_project(root: Path, server: FakeLLMServer, **llm: object) -> Path:
    corpus = root / "corpus"
    corpus.mkdir()
    for name, text in DOCUMENTS.items():
        (corpus / name).write_text(text)
    config = root / "graphrag.yaml"
    config.write_text(yaml.safe_dump({
        "index_dir": str(root / "index"),
        "shard_count": SHARD_COUNT,
        "sources": [{"name": "t", "kind": "folder", "path": str(corpus)}],
        "extraction": {"extractor": "llm"},
        "summaries": {"summarizer": "llm", "llm_min_descriptions": 2, "report_levels": [0, 1, 2, 3]},
        "communities": {"min_size": 2},
        "embedder": {"provider": "ollama", "model": "nomic-embed-text"},
        "llm": {"provider": "ollama", "base_url": server.base_url, "model": "qwen2.5:7b", "timeout_seconds": 1.0,
                "max_retries": 3, "backoff_seconds": 0.01, "max_backoff_seconds": 0.05, "concurrency": 1,
                "prices": {"qwen2.5:7b": {"prompt_per_million": 0.5, "completion_per_million": 1.5}}, **llm},
    }))
    return config


@pytest.fixture(scope="module")
def project(tmp_path_factory, server) -> Path:
    return write_project(tmp_path_factory.mktemp("llm_pipeline"), server)


def materialize(config: Path, expect_success: bool = True):
    defs = definitions_with(GraphRAGResource(config_path=str(config)))
    result = defs.resolve_job_def("build_index").execute_in_process(
        instance=DagsterInstance.ephemeral(), tags=range_tags(shard_key(0), shard_key(SHARD_COUNT - 1)),
        raise_on_error=False,
    )
    assert result.success is expect_success
    return result


@pytest.fixture(scope="module")
def first_run(project, server):
    # Faults on the first chat requests: 429 with Retry-After, then a 500, then an answer slower than the timeout.
    server.script(OLLAMA_CHAT, Reply(status=429, headers={"Retry-After": "0"}, body='{"error": "busy"}'),
                  Reply(status=500, body='{"error": "boom"}'), Reply(delay=1.5, content="{}"))
    return metadata(materialize(project))


@pytest.fixture(scope="module")
def second_run(project, server, first_run):
    before = len(server.requests)
    result = metadata(materialize(project))
    return result, len(server.requests) - before


def test_graph_holds_the_typed_entities_and_relationships_the_model_reported(project, first_run):
    settings = load_settings(project)
    with EmbeddedGraphStore(Path(settings.index_dir) / "graph.sqlite", read_only=True) as graph:
        entities = {e.name: e for e in graph.list_entities(offset=0, limit=100, order_by="name")}
        assert {name: entities[name].type for name in TYPES} == TYPES
        relationships = graph.get_relationships(graph.all_relationship_ids()).values()
    names = {e.entity_id: e.name for e in entities.values()}
    facts = {(names[r.source_id], r.type, names[r.target_id]): r for r in relationships}
    for source, kind, target in FACTS[:5]:
        assert (source, kind, target) in facts
    # RELATED_TO has no direction, so the merge stores it one way round whatever the model said.
    [fallback] = [r for (s, kind, t), r in facts.items()
                  if kind == "RELATED_TO" and {s, t} == {"team-payments", "payments-api"}]
    assert fallback.predicates == ("pages on failure of",)


def test_faults_were_retried_and_bad_output_quarantined_without_losing_the_run(project, first_run):
    extraction = first_run["extracted_elements"]
    assert extraction["llm_retries"] >= 3  # the 429, the 500 and the timeout
    settings = load_settings(project)
    with SQLiteStateStore(Path(settings.index_dir) / "state.sqlite", read_only=True) as state:
        quarantined = state.quarantined("extraction")
        broken_chunks = {c.chunk_id for c in state.chunks() if "MALFORMED" in c.text}
        good_chunks = {c.chunk_id for c in state.chunks()} - broken_chunks
    assert {q.item_id for q in quarantined} == broken_chunks
    assert all("unusable model output" in q.reason and '"oops"' in q.raw for q in quarantined)
    assert extraction["quarantined"] == len(broken_chunks)
    assert extraction["extracted"] == len(good_chunks)


def test_metadata_shows_calls_cache_hits_tokens_and_cost_per_asset(first_run):
    for asset in ("embeddings", "extracted_elements", "element_summaries", "graph", "community_summaries"):
        for key in ("llm_calls", "llm_cache_hits", "llm_prompt_tokens", "llm_completion_tokens", "llm_cost_usd"):
            assert key in first_run[asset], (asset, key)
    extraction = first_run["extracted_elements"]
    assert extraction["llm_calls"] >= len(DOCUMENTS) and extraction["llm_prompt_tokens"] > 0
    assert extraction["llm_cost_usd"] == pytest.approx(
        (extraction["llm_prompt_tokens"] * 0.5 + extraction["llm_completion_tokens"] * 1.5) / 1e6
    )
    assert first_run["embeddings"]["llm_calls"] >= 1  # the HTTP embedder's calls count too
    assert first_run["element_summaries"]["llm_summarized"] > 0
    assert first_run["community_summaries"]["llm_reports"] > 0
    assert "llm_calls" not in first_run["raw_documents"]  # no model behind ingestion


def test_summaries_and_community_reports_come_from_the_model(project, first_run):
    settings = load_settings(project)
    with SQLiteStateStore(Path(settings.index_dir) / "state.sqlite", read_only=True) as state:
        descriptions = [p["description"] for p in state.element_payloads("entity").values()]
        reports = list(state.payloads(COMMUNITY_SUMMARY_PAYLOADS).values())
    assert any(d.startswith("LLM summary of payments-api") for d in descriptions)
    assert reports and all(r["title"].startswith("Report on ") and r["rating"] == 7 for r in reports)
    with open_index(project) as index:
        response = index.query("Which payments communities matter?", mode="global", top_k=3)
    assert response.results and response.results[0].text.splitlines()[-1].startswith("- Ownership is clear")


def test_a_second_run_of_unchanged_content_makes_no_http_call(first_run, second_run):
    meta, requests = second_run
    assert requests == 0
    assert meta["extracted_elements"]["llm_calls"] == 0
    assert meta["extracted_elements"]["llm_cache_hits"] > 0  # the quarantined chunk is re-read from the cache
    assert meta["community_summaries"]["reused"] == first_run["community_summaries"]["communities"]
    assert meta["embeddings"]["llm_calls"] == 0


def test_a_budget_cap_stops_the_run_cleanly_before_it_overspends(tmp_path, server):
    # Each call may cost up to 2048 completion tokens at $1.5/M (~$0.003): the cap allows about one call.
    budget = 0.004
    config = write_project(tmp_path, server, budget_usd=budget)
    before = server.count(OLLAMA_CHAT)
    result = materialize(config, expect_success=False)

    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failure.step_key == "extracted_elements"
    assert "LLM budget reached" in failure.step_failure_data.error.message
    spent = failure.step_failure_data.user_failure_data.metadata
    assert spent["llm_cost_usd"].value <= budget
    chat_calls = server.count(OLLAMA_CHAT) - before
    assert 0 < chat_calls < len(DOCUMENTS) and spent["llm_calls"].value == chat_calls
    assert result.is_node_success("embeddings")  # what came before the cap is kept
    # The run's ledger (shared by all its steps, whatever process runs them) holds the same spend.
    with sqlite3.connect(tmp_path / "index" / "llm_runs.sqlite") as ledger:
        [(run_spent,)] = ledger.execute(
            "SELECT spent_usd FROM run_spend WHERE run_id = ?", (result.run_id,)
        ).fetchall()
    assert run_spent == pytest.approx(spent["llm_cost_usd"].value, abs=1e-6) and run_spent <= budget


def test_a_model_server_that_answers_no_chunk_fails_the_run_instead_of_building_an_empty_graph(tmp_path):
    server = FakeLLMServer().start()
    try:
        # Every chat call of every chunk (4 attempts each) fails with 503; the embedder answers as usual.
        server.script(OLLAMA_CHAT, *[Reply(status=503, body='{"error": "model not loaded"}')] * 5 * len(DOCUMENTS))
        result = materialize(write_project(tmp_path, server), expect_success=False)
    finally:
        server.stop()
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failure.step_key == "extracted_elements"
    message = failure.step_failure_data.error.to_string()  # with its cause, the stage's exception
    assert f"answered none of the {len(DOCUMENTS)} chunks" in message and "HTTP 503" in message
    assert result.is_node_success("embeddings")  # what came before is kept
    assert not (tmp_path / "index" / "graph.sqlite").exists()  # no empty graph published as a success


def test_hybrid_keeps_spotter_entities_while_the_model_is_down_and_adds_the_models_once_it_is_back(tmp_path):
    from graphrag_pipeline.lib.compose.workspace import Workspace
    from graphrag_pipeline.lib.stages import extract_elements, summarize_elements
    from graphrag_pipeline_tests.conftest import folder_settings

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "payments.md").write_text(DOCUMENTS["payments.md"])
    server = FakeLLMServer().start()
    try:
        server.chat_responder = scripted_model
        settings = folder_settings(
            tmp_path / "index", corpus,
            extraction={"extractor": "hybrid"},
            llm={"base_url": server.base_url, "max_retries": 0, "timeout_seconds": 2.0},
        )
        server.script(OLLAMA_CHAT, Reply(status=503, body='{"error": "down"}'))  # no retries configured
        with Workspace(settings) as ws:
            from graphrag_pipeline.lib.stages import chunk_documents, ingest_documents

            shards = range(settings.shard_count)
            ingest_documents(ws, shards)
            chunk_documents(ws, shards)
            down = extract_elements(ws, shards)
            summarize_elements(ws)
            types_while_down = {p["name"]: p["type"] for p in ws.state.element_payloads("entity").values()}
            predicates_while_down = predicates(ws)
            assert down.counts["quarantined"] == 1 and ws.state.quarantined("extraction")

            back = extract_elements(ws, shards)  # the server answers now
            summarize_elements(ws)
            predicates_after = predicates(ws)
            assert back.counts["extracted"] == 1 and not ws.state.quarantined("extraction")
    finally:
        server.stop()
    assert types_while_down["payments-api"] == "Service"  # the spotters' pattern, without the model
    assert types_while_down["team-payments"] == "Team"
    # The model's own relationship (a predicate outside the ontology) arrived with the retry.
    assert "pages on failure of" in predicates_after - predicates_while_down


def predicates(ws) -> set[str]:
    return {p for r in ws.state.element_payloads("relationship").values() for p in r["predicates"]}


def test_a_community_report_the_model_failed_is_asked_for_again_on_the_next_run(tmp_path):
    """A failed report leaves the extractive summary, stored without the inputs that would let the next run keep it
    unread: that run reads its members again, finds the model's report missing and asks for it."""
    from graphrag_pipeline.lib.compose.workspace import Workspace
    from graphrag_pipeline.lib.stages import build_everything, summarize_communities
    from graphrag_pipeline_tests.conftest import folder_settings

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, text in DOCUMENTS.items():
        if name != "broken.md":
            (corpus / name).write_text(text)
    reports_answered = False

    def model(request: dict) -> str:
        if prompt_of(request).startswith("You write a report on one community") and not reports_answered:
            return "no report today"
        return scripted_model(request)

    server = FakeLLMServer().start()
    try:
        server.chat_responder = model
        settings = folder_settings(
            tmp_path / "index", corpus, extraction={"extractor": "llm"},
            summaries={"summarizer": "llm", "report_levels": [0, 1, 2, 3]}, communities={"min_size": 2},
            # Uncached: a cached unusable answer would be the answer again.
            llm={"base_url": server.base_url, "max_retries": 0, "timeout_seconds": 2.0, "cache": False},
        )
        with Workspace(settings) as ws:
            failed = {r.stage: r for r in build_everything(ws)}["community_summaries"].counts
            reports_answered = True
            asked_again = summarize_communities(ws).counts
            titles = [s["title"] for s in ws.state.payloads(COMMUNITY_SUMMARY_PAYLOADS).values()]
            settled = summarize_communities(ws).counts
    finally:
        server.stop()
    assert failed["llm_report_failures"] >= 1 and failed["llm_reports"] == 0
    assert asked_again["llm_reports"] == failed["llm_report_failures"] and asked_again["llm_report_failures"] == 0
    assert titles and all(title.startswith("Report on ") for title in titles)
    assert (settled["inputs_changed"], settled["summarized"]) == (0, 0)
