"""The ingest stage reads a Confluence source incrementally, on Cloud (v2) and Data Center (v1) alike: after a full
read, only pages modified since are fetched in full, unchanged pages stay, deleted ones go, and restrictions arrive as
access groups."""

from __future__ import annotations

import datetime as dt

import pytest

from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core.config import load_settings
from graphrag_pipeline.lib.stages import all_shards, ingest_documents
from graphrag_pipeline.lib.stores.state.sql import WITHDRAWN_GROUP
from graphrag_pipeline_tests.confluence_server import T0, ConfluenceServer


def sync(settings) -> dict[str, int]:
    with Workspace(settings) as ws:
        return ingest_documents(ws, all_shards(ws)).counts


@pytest.fixture(params=["cloud", "datacenter"])
def server(request, monkeypatch):
    with ConfluenceServer(flavor=request.param) as server:
        if server.flavor == "cloud":
            monkeypatch.setenv("CONFLUENCE_USER", server.user)
        else:
            monkeypatch.delenv("CONFLUENCE_USER", raising=False)  # a personal access token, sent as Bearer
        monkeypatch.setenv("CONFLUENCE_TOKEN", server.token)
        yield server


def test_incremental_sync_of_a_confluence_space(tmp_path, server):
    server.add_space("OPS")
    # Older than the newest page by more than the one-day margin an incremental query starts with.
    alerts = server.add_page("OPS", "Alert rules", "<p>Page team-payments.</p>", when=T0 - dt.timedelta(days=60))
    runbook = server.add_page("OPS", "Payments runbook", "<p>Restart payments-api.</p>", when=T0 - dt.timedelta(days=30))
    retired = server.add_page("OPS", "Old dashboard", "<p>Gone soon.</p>", when=T0 - dt.timedelta(days=30))
    settings = load_settings(
        index_dir=str(tmp_path / "index"), shard_count=4,
        sources=[{"name": "wiki", "kind": "confluence", "base_url": server.base_url, "spaces": ["OPS"],
                  "flavor": server.flavor}],
    )

    first = sync(settings)
    assert first["new"] == 3 and first["wiki.incremental"] == 0

    server.edit_page(runbook, body="<p>Restart payments-api, then check ledger-db.</p>")
    server.set_restrictions(alerts, groups=("payments-oncall",))  # no new version: seen by the next full read
    server.delete_page(retired)
    server.clear_log()
    second = sync(settings)

    assert second["wiki.incremental"] == 1
    assert (second["changed"], second["deleted"], second["unchanged"]) == (1, 1, 0)
    fetched_in_full = {page for request in server.requests if "body.storage" in request.expand
                       for page in request.result_ids}
    assert fetched_in_full == {runbook}  # the unchanged page was listed, not fetched
    if server.flavor == "cloud":  # v1 only for the CQL search and the restriction of the page read in full
        assert {r.path for r in server.requests if r.api == "v1"} == {
            "/rest/api/content/search", f"/rest/api/content/{runbook}/restriction/byOperation/read"}
        assert {r.api for r in server.requests if "body.storage" in r.expand} == {"v2"}
    else:
        assert {r.api for r in server.requests} == {"v1"}
    with Workspace(settings) as ws:
        texts = {d.title: d.text for d in ws.state.documents()}
        assert "ledger-db" in texts["Payments runbook"] and "Alert rules" in texts and "Old dashboard" not in texts
        # No page is restricted; the deleted one is withdrawn until the later stages have removed what it supplied.
        assert ws.state.restricted_documents() == {f"wiki:{retired}": frozenset({WITHDRAWN_GROUP})}

        # A day later the full read picks up the restriction.
        ws.state.record_source_marks("wiki", {
            shard: (through, "2000-01-01T00:00:00+00:00")
            for shard, (through, _) in ws.state.source_marks("wiki", all_shards(ws)).items()
        })
    third = sync(settings)
    assert third["wiki.incremental"] == 0 and third["changed"] == 1
    with Workspace(settings) as ws:
        assert ws.state.restricted_documents() == {f"wiki:{alerts}": frozenset({"payments-oncall"}),
                                                   f"wiki:{retired}": frozenset({WITHDRAWN_GROUP})}
