"""A model server that answers no chunk fails the extraction stage with a clear reason (instead of a successful run
with an empty graph); one that goes away midway leaves quarantined chunks for the next run, as before."""

from __future__ import annotations

import socket

import pytest

from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.extract.llm import ModelUnreachable
from graphrag_pipeline.lib.llm.clients import LLMError
from graphrag_pipeline.lib.stages import chunk_documents, embed_chunks, extract_elements, ingest_documents
from graphrag_pipeline_tests.conftest import folder_settings
from graphrag_pipeline_tests.fake_llm_server import OLLAMA_CHAT, Reply
from graphrag_pipeline_tests.unit.query.test_retrieval_mechanisms import HashedEmbedder

DOCUMENTS = {
    "payments.md": "# Payments\n\npayments-api depends on ledger-db for balances.\n",
    "checkout.md": "# Checkout\n\ncheckout-service calls payments-api to charge cards.\n",
    "ledger.md": "# Ledger\n\nledger-db stores balances for payments-api.\n",
}
ANSWER = '{"entities": [{"name": "payments-api", "type": "Service", "description": ""}], "relationships": []}'


def refused_url() -> str:
    """A local port nothing listens on: connections to it are refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def workspace(tmp_path, base_url: str, extractor: str = "llm") -> Workspace:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, text in DOCUMENTS.items():
        (corpus / name).write_text(text)
    settings = folder_settings(
        tmp_path / "index", corpus, extraction={"extractor": extractor},
        llm={"base_url": base_url, "max_retries": 1, "backoff_seconds": 0.01, "max_backoff_seconds": 0.02,
             "timeout_seconds": 2.0},
    )
    ws = Workspace(settings, embedder=HashedEmbedder())
    shards = range(settings.shard_count)
    ingest_documents(ws, shards)
    chunk_documents(ws, shards)
    embed_chunks(ws, shards)
    return ws


def test_a_model_server_that_refuses_every_chunk_fails_the_stage_and_says_why(tmp_path):
    url = refused_url()
    with workspace(tmp_path, url) as ws:
        with pytest.raises(ModelUnreachable) as failure:
            extract_elements(ws, range(ws.settings.shard_count))
        message = str(failure.value)
        assert f"answered none of the {len(DOCUMENTS)} chunks" in message
        assert url in message and "ConnectError" in message and "llm.base_url" in message
        assert isinstance(failure.value, LLMError)
        # Nothing stored as extracted, so the next run (server back) extracts every chunk.
        chunk_ids = [c.chunk_id for c in ws.state.chunks()]
        assert ws.state.extractions(chunk_ids, ws.extractor_key) == {}


def test_a_model_server_answering_5xx_to_every_chunk_fails_the_stage(tmp_path, llm_server):
    llm_server.script(OLLAMA_CHAT, *[Reply(status=503, body='{"error": "overloaded"}')] * 2 * len(DOCUMENTS))
    with workspace(tmp_path, llm_server.base_url) as ws:
        with pytest.raises(ModelUnreachable, match="HTTP 503"):
            extract_elements(ws, range(ws.settings.shard_count))


def test_a_model_server_that_goes_away_midway_leaves_quarantined_chunks_and_the_run_goes_on(tmp_path, llm_server):
    llm_server.script(OLLAMA_CHAT, Reply(content=ANSWER),
                      *[Reply(status=503, body='{"error": "overloaded"}')] * 2 * len(DOCUMENTS))
    with workspace(tmp_path, llm_server.base_url) as ws:
        report = extract_elements(ws, range(ws.settings.shard_count))
        quarantined = ws.state.quarantined("extraction")
    assert report.counts["extracted"] == 1
    assert report.counts["quarantined"] == len(DOCUMENTS) - 1
    assert all(q.reason.startswith("model server unreachable: ") for q in quarantined)


def test_hybrid_extraction_keeps_going_on_its_spotters_while_the_model_is_unreachable(tmp_path):
    with workspace(tmp_path, refused_url(), extractor="hybrid") as ws:
        report = extract_elements(ws, range(ws.settings.shard_count))
    assert report.counts["extracted"] == len(DOCUMENTS)  # the spotters' entities: the graph is not empty
    assert report.counts["quarantined"] == len(DOCUMENTS)  # and the model's part is tried again next run
