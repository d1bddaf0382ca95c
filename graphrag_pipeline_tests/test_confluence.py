"""The Confluence source against a real local HTTP server speaking the REST API subset (no mocks)."""

from __future__ import annotations

import datetime as dt

import pytest
from pydantic import ValidationError

from graphrag_pipeline.lib.confluence import (
    NO_COMMON_PRINCIPAL,
    ConfluenceClient,
    ConfluenceError,
    read_confluence,
    scan_confluence_hashes,
    storage_to_text,
)
from graphrag_pipeline.lib.config import SourceConfig
from graphrag_pipeline.lib.sources import STAGE, read_source, scan_hashes
from graphrag_pipeline_tests.confluence_server import T0, ConfluenceServer, confluence_server  # noqa: F401

HANDBOOK_BODY = (
    "<h1>Onboarding</h1><p>Welcome to the <strong>payments</strong> team.</p>"
    '<ac:structured-macro ac:name="code"><ac:parameter ac:name="language">bash</ac:parameter>'
    "<ac:plain-text-body><![CDATA[make deploy && echo <done>]]></ac:plain-text-body></ac:structured-macro>"
    "<ul><li>Laptop</li><li>Badge</li></ul>"
)


def wiki(server: ConfluenceServer, spaces: tuple[str, ...] = ("ENG", "OPS"), **overrides) -> SourceConfig:
    return SourceConfig(name="wiki", kind="confluence", base_url=server.base_url, spaces=spaces, **overrides)


@pytest.fixture
def cloud_env(monkeypatch, confluence_server):  # noqa: F811 (the fixture is imported by name)
    monkeypatch.setenv("CONFLUENCE_USER", confluence_server.user)
    monkeypatch.setenv("CONFLUENCE_TOKEN", confluence_server.token)
    return confluence_server


def by_title(scan) -> dict:
    return {document.title: document for document in scan.documents}


def test_pages_of_two_spaces_are_read_across_pagination(cloud_env):
    server = cloud_env
    root = server.add_page("ENG", "Handbook", "<p>The handbook.</p>")
    child = server.add_page("ENG", "Onboarding", HANDBOOK_BODY, parent=root, labels=("onboarding", "hr"))
    for index in range(5):
        server.add_page("ENG", f"Note {index}", f"<p>Note number {index}.</p>")
    server.add_page("OPS", "Runbook", "<p>Restart the pod.</p>", labels=("ops",))
    server.add_page("OPS", "Alerts", "<p>Paging rules.</p>")
    server.edit_page(child, body=HANDBOOK_BODY, when=T0 + dt.timedelta(days=3, hours=4))

    scan = read_source(wiki(server, page_limit=50))

    assert not scan.quarantined
    assert len(scan.documents) == 9
    documents = by_title(scan)
    onboarding = documents["Onboarding"]
    assert onboarding.doc_id == f"wiki:{child}"
    assert onboarding.source == "wiki"
    assert onboarding.uri == f"{server.base_url}/spaces/ENG/pages/{child}/Onboarding"
    assert onboarding.text.startswith("# Onboarding\n\nWelcome to the payments team.")
    assert "make deploy && echo <done>" in onboarding.text  # the code macro's CDATA survives, its parameter does not
    assert "bash" not in onboarding.text
    assert "- Laptop\n- Badge" in onboarding.text
    assert onboarding.metadata == {
        "space_key": "ENG",
        "page_id": child,
        "version": 2,
        "last_modified": "2024-01-04T04:00:00+00:00",
        "labels": ["hr", "onboarding"],
        "ancestors": ["Handbook"],
        "ancestor_ids": [root],
        "access_groups": [],
        "access_restrictions": [],
    }
    assert documents["Runbook"].metadata["space_key"] == "OPS"
    assert documents["Runbook"].metadata["labels"] == ["ops"]
    assert documents["Handbook"].metadata["ancestors"] == []

    # The server caps pages at 3 results: ENG's 7 pages take 3 requests, following _links.next.
    listings = [r for r in server.requests if r.path == "/rest/api/content"]
    eng = [r for r in listings if r.params["spaceKey"] == "ENG"]
    assert [r.params.get("start") for r in eng] == ["0", "3", "6"]
    assert all(r.auth_scheme == "basic" and r.status == 200 for r in server.requests)
    assert all("body.storage" in r.expand and "restrictions.read.restrictions.group" in r.expand for r in listings)
    # The cheap scan agrees with the read's hashes, so a sensor cursor and the seen-sources baseline compare directly.
    assert scan_hashes(wiki(server)) == scan.hashes
    assert set(scan.hashes) == {document.doc_id for document in scan.documents}


def test_pagination_by_start_and_size_without_next_links(cloud_env):
    server = cloud_env
    server.omit_next_links = True
    for index in range(6):
        server.add_page("ENG", f"Page {index}")

    scan = read_confluence(wiki(server, spaces=("ENG",)))

    assert sorted(d.title for d in scan.documents) == [f"Page {index}" for index in range(6)]
    assert [r.params["start"] for r in server.requests] == ["0", "3", "6"]  # the last, empty page ends it


def test_restrictions_become_access_groups(cloud_env):
    server = cloud_env
    server.add_page("ENG", "Public")
    server.add_page("ENG", "Secret", groups=("eng", "admins"), users=("557058:abc",))
    parent = server.add_page("ENG", "Team space", groups=("eng",))
    server.add_page("ENG", "Inherited", parent=parent)
    server.add_page("ENG", "Narrowed", parent=parent, groups=("eng", "sales"))
    server.add_page("ENG", "Disjoint", parent=parent, groups=("sales",))

    documents = by_title(read_confluence(wiki(server, spaces=("ENG",), access_groups=("staff",))))

    assert documents["Public"].metadata["access_groups"] == ["staff"]  # no restriction: the configured default
    assert documents["Secret"].metadata["access_groups"] == ["admins", "eng", "user:557058:abc"]
    assert documents["Team space"].metadata["access_groups"] == ["eng"]
    assert documents["Inherited"].metadata["access_groups"] == ["eng"]  # from the ancestor
    assert documents["Inherited"].metadata["access_restrictions"] == [["eng"]]
    assert documents["Narrowed"].metadata["access_groups"] == ["eng"]  # must pass the parent's restriction too
    assert documents["Narrowed"].metadata["access_restrictions"] == [["eng"], ["eng", "sales"]]
    assert documents["Disjoint"].metadata["access_groups"] == [NO_COMMON_PRINCIPAL]

    default = by_title(read_confluence(wiki(server, spaces=("ENG",))))
    assert default["Public"].metadata["access_groups"] == []  # empty: readable by everyone


def test_edits_and_restriction_changes_change_the_content_hash(cloud_env):
    server = cloud_env
    edited = server.add_page("ENG", "Edited")
    restricted = server.add_page("ENG", "Restricted")
    parent = server.add_page("ENG", "Parent")
    child = server.add_page("ENG", "Child", parent=parent)
    labelled = server.add_page("ENG", "Labelled")
    same = server.add_page("ENG", "Same")
    source = wiki(server, spaces=("ENG",))
    before = {d.doc_id: d.content_hash for d in read_confluence(source).documents}
    scan_before = scan_confluence_hashes(source)

    server.edit_page(edited, body="<p>New text.</p>")
    server.set_restrictions(restricted, groups=("legal",))
    server.set_restrictions(parent, groups=("eng",))
    server.set_labels(labelled, ("new-label",))
    after = {d.doc_id: d.content_hash for d in read_confluence(source).documents}
    scan_after = scan_confluence_hashes(source)

    changed = {doc_id for doc_id in before if before[doc_id] != after[doc_id]}
    assert changed == {f"wiki:{page}" for page in (edited, restricted, parent, child, labelled)}
    assert after[f"wiki:{same}"] == before[f"wiki:{same}"]
    # The cheap scan follows versions: the edit shows, restriction and label changes (no new version) wait for a read.
    assert {d for d in scan_before if scan_before[d] != scan_after[d]} == {f"wiki:{edited}"}


def test_scan_hashes_sees_deletions_without_fetching_bodies(cloud_env):
    server = cloud_env
    pages = [server.add_page("ENG", f"Page {index}") for index in range(5)]
    server.add_page("OPS", "Other")
    source = wiki(server)
    before = scan_hashes(source)

    server.clear_log()
    server.delete_page(pages[1])
    server.edit_page(pages[2], body="<p>changed</p>")
    after = scan_hashes(source)

    assert set(before) - set(after) == {f"wiki:{pages[1]}"}
    assert {d for d in after if after[d] != before[d]} == {f"wiki:{pages[2]}"}
    assert server.requests and all(r.expand == {"version"} for r in server.requests)
    assert after == read_confluence(source).hashes


def test_incremental_read_fetches_only_pages_modified_since(cloud_env):
    server = cloud_env
    since = T0 + dt.timedelta(days=10)
    old = server.add_page("ENG", "Old", when=since - dt.timedelta(days=5))
    recent = server.add_page("ENG", "Just before", when=since - dt.timedelta(hours=6))
    fresh = [server.add_page("ENG", f"Fresh {i}", when=since + dt.timedelta(hours=i + 1)) for i in range(3)]
    edited = server.add_page("ENG", "Edited", when=since - dt.timedelta(days=30))
    server.edit_page(edited, body="<p>edited</p>", when=since + dt.timedelta(minutes=5))
    server.add_page("OPS", "Ops old", when=since - dt.timedelta(days=2))
    source = wiki(server)
    server.clear_log()

    scan = read_confluence(source, since=since)

    assert {d.doc_id for d in scan.documents} == {f"wiki:{page}" for page in [*fresh, edited]}
    # hashes still list every current page: absent from documents means unchanged, not deleted
    assert scan.hashes == scan_confluence_hashes(source)
    searches = [r for r in server.requests if r.path == "/rest/api/content/search"]
    cql_from = (since - dt.timedelta(days=1)).strftime("%Y/%m/%d %H:%M")
    assert searches[0].params["cql"] == f'space="ENG" and type=page and lastmodified >= "{cql_from}"'
    assert "body.storage" in searches[0].expand
    served = {page for r in searches for page in r.result_ids}
    assert old not in served and edited in served  # the server filtered by CQL ...
    assert recent in served  # ... from a day earlier (time zones); the exact cut is the client's
    assert len([r for r in searches if "cursor" in r.params]) >= 1  # Cloud-style cursor pagination was followed

    with ConfluenceClient.from_source(source) as client:
        titles = [page["title"] for page in client.pages_modified_since("OPS", since - dt.timedelta(days=3))]
    assert titles == ["Ops old"]


def test_incremental_read_asks_for_ancestor_restrictions_left_out_of_the_answer(cloud_env):
    server = cloud_env
    server.expand_ancestor_restrictions = False
    since = T0 + dt.timedelta(days=10)
    parent = server.add_page("ENG", "Team", groups=("eng",), when=since - dt.timedelta(days=20))
    server.add_page("ENG", "Child", parent=parent, when=since + dt.timedelta(hours=1))

    scan = read_confluence(wiki(server, spaces=("ENG",)), since=since)

    assert [d.metadata["access_groups"] for d in scan.documents] == [["eng"]]
    assert any(r.path == f"/rest/api/content/{parent}" for r in server.requests)


def test_data_center_bearer_token(monkeypatch):
    monkeypatch.delenv("CONFLUENCE_USER", raising=False)
    monkeypatch.setenv("DC_PAT", "pat-123")
    with ConfluenceServer(context="/confluence", flavor="datacenter", token="pat-123") as server:
        page = server.add_page("DOC", "Install", "<p>Run the installer.</p>", users=("jdoe",))
        source = wiki(server, spaces=("DOC",), flavor="datacenter", token_env="DC_PAT")
        scan = read_source(source)
        assert [d.uri for d in scan.documents] == [f"{server.base_url}/pages/viewpage.action?pageId={page}"]
        assert scan.documents[0].metadata["access_groups"] == ["user:jdoe"]
        assert {r.auth_scheme for r in server.requests} == {"bearer"}


def test_wrong_token_is_a_clear_error(cloud_env, monkeypatch):
    server = cloud_env
    server.add_page("ENG", "Page")
    monkeypatch.setenv("CONFLUENCE_TOKEN", "not-the-token")
    with pytest.raises(ConfluenceError, match=r"'ENG'.*authentication failed \(HTTP 401") as caught:
        read_confluence(wiki(server))
    assert "CONFLUENCE_TOKEN" in str(caught.value) and "not-the-token" not in str(caught.value)
    assert caught.value.status == 401

    monkeypatch.delenv("CONFLUENCE_USER")  # a Cloud token sent as Bearer: the error says what is missing
    with pytest.raises(ConfluenceError, match=r"Cloud API tokens need the account email in \$CONFLUENCE_USER"):
        scan_hashes(wiki(server))


def test_missing_token_variable_is_a_clear_error(confluence_server, monkeypatch):  # noqa: F811
    monkeypatch.delenv("CONFLUENCE_TOKEN", raising=False)
    monkeypatch.delenv("WIKI_TOKEN", raising=False)
    with pytest.raises(ConfluenceError, match="environment variable CONFLUENCE_TOKEN is not set"):
        read_source(wiki(confluence_server))
    with pytest.raises(ConfluenceError, match="environment variable WIKI_TOKEN is not set"):
        scan_hashes(wiki(confluence_server, token_env="WIKI_TOKEN"))
    assert confluence_server.requests == []


def test_rate_limits_and_server_errors_are_retried(cloud_env):
    server = cloud_env
    server.add_page("ENG", "Page")
    source = wiki(server, spaces=("ENG",))
    server.fail_next(429, times=2, retry_after="0")
    waits: list[float] = []
    with ConfluenceClient.from_source(source, sleep=waits.append) as client:
        scan = read_confluence(source, client=client)
    assert [d.title for d in scan.documents] == ["Page"]
    assert [r.status for r in server.requests][:3] == [429, 429, 200]
    assert waits == [0.0, 0.0]  # Retry-After honoured

    server.fail_next(503, times=3, retry_after=None)
    with ConfluenceClient.from_source(source, sleep=waits.append) as client:
        with pytest.raises(ConfluenceError, match=r"space 'ENG'.*failed after 3 attempts: HTTP 503"):
            read_confluence(source, client=client)


def test_other_http_errors_name_the_space(cloud_env):
    server = cloud_env
    server.add_page("ENG", "Page")
    server.fail_next(403, retry_after=None)
    with pytest.raises(ConfluenceError, match=r"space 'ENG': permission denied \(HTTP 403"):
        read_confluence(wiki(server))
    server.fail_next(400, retry_after=None)
    with pytest.raises(ConfluenceError, match=r"space 'ENG': GET .* was rejected with HTTP 400"):
        read_confluence(wiki(server))


def test_missing_space_is_an_error_and_an_empty_space_is_not(cloud_env):
    server = cloud_env
    server.add_page("ENG", "Page")
    server.add_space("EMPTY")
    assert [d.title for d in read_confluence(wiki(server, spaces=("ENG", "EMPTY"))).documents] == ["Page"]
    with pytest.raises(ConfluenceError, match=r"space 'NOPE': the space does not exist"):
        scan_hashes(wiki(server, spaces=("ENG", "NOPE")))


def test_malformed_page_is_quarantined_and_the_others_are_read(cloud_env):
    server = cloud_env
    good = server.add_page("ENG", "Good")
    bad = server.add_page("ENG", "Bad")
    undated = server.add_page("ENG", "Undated")
    server.add_page("ENG", "Also good")
    server.corrupt(bad, body={"storage": {"value": 42}})
    server.corrupt(undated, version={"when": "yesterday"})

    scan = read_confluence(wiki(server, spaces=("ENG",)))

    assert sorted(d.title for d in scan.documents) == ["Also good", "Good"]
    problems = {q.item_id: q for q in scan.quarantined}
    assert set(problems) == {f"wiki:{bad}", f"wiki:{undated}"}
    assert problems[f"wiki:{bad}"].stage == STAGE
    assert "body.storage.value" in problems[f"wiki:{bad}"].reason
    assert '"title": "Bad"' in problems[f"wiki:{bad}"].raw
    assert "version.when" in problems[f"wiki:{undated}"].reason
    # quarantined pages stay in the hashes: a page that fails to parse is not a deleted page
    assert f"wiki:{bad}" in scan.hashes and f"wiki:{good}" in scan.hashes


def test_storage_format_to_text():
    text = storage_to_text(
        '<p>See <ac:link><ri:page ri:content-title="Other"/><ac:plain-text-link-body><![CDATA[the other page]]>'
        '</ac:plain-text-link-body></ac:link>.</p><ac:structured-macro ac:name="info"><ac:parameter ac:name="title">'
        "Note</ac:parameter><ac:rich-text-body><p>Careful &amp; slow.</p></ac:rich-text-body></ac:structured-macro>"
    )
    assert text == "See the other page.\n\nCareful & slow."


def test_confluence_source_config_is_validated():
    ok = SourceConfig(name="w", kind="confluence", base_url="https://x.atlassian.net/wiki/", spaces=("ENG",))
    assert ok.base_url == "https://x.atlassian.net/wiki"
    assert (ok.flavor, ok.token_env, ok.user_env, ok.access_groups, ok.page_limit) == (
        "cloud", "CONFLUENCE_TOKEN", "CONFLUENCE_USER", (), 50
    )
    with pytest.raises(ValidationError, match="needs base_url"):
        SourceConfig(name="w", kind="confluence", spaces=("ENG",))
    with pytest.raises(ValidationError, match="at least one space"):
        SourceConfig(name="w", kind="confluence", base_url="https://x.atlassian.net/wiki")
    with pytest.raises(ValidationError, match="invalid space key"):
        SourceConfig(name="w", kind="confluence", base_url="https://x.atlassian.net/wiki", spaces=('EN"G',))
    with pytest.raises(ValidationError, match="flavor"):
        SourceConfig(name="w", kind="confluence", base_url="https://c.example.com", spaces=("A",), flavor="server")
    with pytest.raises(ValidationError, match="path is required"):
        SourceConfig(name="docs", kind="folder")
    with pytest.raises(ValidationError, match="confluence sources only"):
        SourceConfig(name="docs", kind="folder", path="/tmp", spaces=("ENG",))
