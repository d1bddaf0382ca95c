"""The Confluence source against a real local HTTP server speaking the REST APIs (no mocks): Cloud over v2, with v1
only for CQL and read restrictions; Data Center over v1."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from pydantic import ValidationError

from graphrag_pipeline.lib.core.config import ConfigError, ConfluenceSource, FolderSource, load_settings
from graphrag_pipeline.lib.sources.confluence import (
    NO_COMMON_PRINCIPAL,
    ConfluenceClient,
    ConfluenceError,
    read_confluence,
    scan_confluence_hashes,
    storage_to_text,
)
from graphrag_pipeline.lib.sources.reader import STAGE
from graphrag_pipeline.lib.sources.registry import read_source, scan_hashes
from graphrag_pipeline_tests.confluence_server import T0, ConfluenceServer, confluence_server  # noqa: F401

HANDBOOK_BODY = (
    "<h1>Onboarding</h1><p>Welcome to the <strong>payments</strong> team.</p>"
    '<ac:structured-macro ac:name="code"><ac:parameter ac:name="language">bash</ac:parameter>'
    "<ac:plain-text-body><![CDATA[make deploy && echo <done>]]></ac:plain-text-body></ac:structured-macro>"
    "<ul><li>Laptop</li><li>Badge</li></ul>"
)
RESTRICTION = re.compile(r"/rest/api/content/(\d+)/restriction/byOperation/read")


def wiki(server: ConfluenceServer, spaces: tuple[str, ...] = ("ENG", "OPS"), **overrides) -> ConfluenceSource:
    settings = {"flavor": server.flavor, **overrides}
    return ConfluenceSource(name="wiki", base_url=server.base_url, spaces=spaces, **settings)


@pytest.fixture
def cloud_env(monkeypatch, confluence_server):  # noqa: F811 (the fixture is imported by name)
    monkeypatch.setenv("CONFLUENCE_USER", confluence_server.user)
    monkeypatch.setenv("CONFLUENCE_TOKEN", confluence_server.token)
    return confluence_server


@pytest.fixture
def datacenter_env(monkeypatch):
    monkeypatch.delenv("CONFLUENCE_USER", raising=False)  # a personal access token, sent as Bearer
    with ConfluenceServer(context="/confluence", flavor="datacenter", token="pat-123") as server:
        monkeypatch.setenv("CONFLUENCE_TOKEN", server.token)
        yield server


@pytest.fixture(params=["cloud", "datacenter"])
def wiki_env(request):
    return request.getfixturevalue(f"{request.param}_env")


def by_title(scan) -> dict:
    return {document.title: document for document in scan.documents}


def bodies_fetched(server: ConfluenceServer) -> set[str]:
    return {page for r in server.requests if "body.storage" in r.expand for page in r.result_ids}


def test_pages_of_two_spaces_are_read_across_pagination(wiki_env):
    server = wiki_env
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
    assert onboarding.uri == (
        f"{server.base_url}/spaces/ENG/pages/{child}/Onboarding" if server.flavor == "cloud"
        else f"{server.base_url}/pages/viewpage.action?pageId={child}"
    )
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
    assert {(r.auth_scheme, r.status) for r in server.requests} == {
        ("basic" if server.flavor == "cloud" else "bearer", 200)
    }
    # The cheap scan agrees with the read's hashes, so a sensor cursor and the seen-sources baseline compare directly.
    assert scan_hashes(wiki(server)) == scan.hashes
    assert set(scan.hashes) == {document.doc_id for document in scan.documents}


def test_cloud_reads_pages_labels_and_ancestors_over_v2_and_only_restrictions_over_v1(cloud_env):
    server = cloud_env
    root = server.add_page("ENG", "Handbook")
    child = server.add_page("ENG", "Onboarding", parent=root, labels=("a", "b", "c", "d"))
    notes = [server.add_page("ENG", f"Note {index}") for index in range(5)]
    runbook = server.add_page("OPS", "Runbook")
    pages = {root, child, *notes, runbook}

    scan = read_confluence(wiki(server))

    assert by_title(scan)["Onboarding"].metadata["labels"] == ["a", "b", "c", "d"]  # two pages of labels
    assert all(r.status == 200 for r in server.requests)
    assert [r.params["keys"] for r in server.requests if r.path == "/api/v2/spaces"] == ["ENG", "OPS"]
    # The server caps pages at 3 results: ENG's 7 pages take 3 requests, following the cursor in _links.next.
    eng = [r for r in server.requests if r.path == f"/api/v2/spaces/{server.space_ids['ENG']}/pages"]
    assert ["cursor" in r.params for r in eng] == [False, True, True]
    assert all(r.params["body-format"] == "storage" and r.params["status"] == "current" for r in eng)
    assert bodies_fetched(server) == pages
    assert len([r for r in server.requests if r.path == f"/api/v2/pages/{child}/labels"]) == 2
    assert {r.path for r in server.requests if r.path.endswith("/ancestors")} == {
        f"/api/v2/pages/{page}/ancestors" for page in pages
    }
    v1 = [r for r in server.requests if r.api == "v1"]
    assert {RESTRICTION.fullmatch(r.path).group(1) for r in v1} == pages  # v1 only for restrictions, once a page
    assert len(v1) == len(pages)
    assert all(r.expand == {"restrictions.user", "restrictions.group"} for r in v1)
    assert {r.api for r in server.requests} == {"v1", "v2"}


def test_data_center_reads_everything_over_v1(datacenter_env):
    server = datacenter_env
    parent = server.add_page("DOC", "Guides", groups=("staff",))
    page = server.add_page("DOC", "Install", "<p>Run the installer.</p>", parent=parent, users=("jdoe",))
    for index in range(5):
        server.add_page("DOC", f"Note {index}")

    scan = read_source(wiki(server, spaces=("DOC",)))

    install = by_title(scan)["Install"]
    assert install.uri == f"{server.base_url}/pages/viewpage.action?pageId={page}"
    assert install.metadata["access_restrictions"] == [["staff"], ["user:jdoe"]]
    assert {(r.api, r.auth_scheme) for r in server.requests} == {("v1", "bearer")}
    listings = [r for r in server.requests if r.path == "/rest/api/content"]
    assert [r.params["start"] for r in listings] == ["0", "3", "6"]
    assert all("body.storage" in r.expand and "ancestors.restrictions.read.restrictions.group" in r.expand
               for r in listings)
    assert {r.path for r in server.requests} == {"/rest/api/content"}  # labels, ancestors, restrictions expanded


def test_v2_pagination_follows_the_link_header_without_next_links(cloud_env):
    server = cloud_env
    server.omit_next_links = True
    for index in range(7):
        server.add_page("ENG", f"Page {index}")

    scan = read_confluence(wiki(server, spaces=("ENG",)))

    assert sorted(d.title for d in scan.documents) == [f"Page {index}" for index in range(7)]
    listings = [r for r in server.requests if r.path.endswith("/pages")]
    assert ["cursor" in r.params for r in listings] == [False, True, True]
    assert len({r.params.get("cursor") for r in listings}) == 3  # each cursor taken from the previous Link header


def test_v1_pagination_by_start_and_size_without_next_links(datacenter_env):
    server = datacenter_env
    server.omit_next_links = True
    for index in range(6):
        server.add_page("ENG", f"Page {index}")

    scan = read_confluence(wiki(server, spaces=("ENG",)))

    assert sorted(d.title for d in scan.documents) == [f"Page {index}" for index in range(6)]
    assert [r.params["start"] for r in server.requests] == ["0", "3", "6"]  # the last, empty page ends it


def test_restrictions_become_access_groups(wiki_env):
    server = wiki_env
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


def test_cloud_folders_give_their_title_and_restriction_to_the_pages_inside(cloud_env):
    server = cloud_env
    folder = server.add_folder("ENG", "Team folder", groups=("eng",))
    guide = server.add_page("ENG", "Guide", parent=folder)
    step = server.add_page("ENG", "Step", parent=guide, groups=("eng", "ops"))

    documents = by_title(read_confluence(wiki(server, spaces=("ENG",))))

    assert sorted(documents) == ["Guide", "Step"]  # a folder is not a page
    assert documents["Step"].metadata["ancestors"] == ["Team folder", "Guide"]
    assert documents["Step"].metadata["ancestor_ids"] == [folder, guide]
    assert documents["Step"].metadata["access_restrictions"] == [["eng"], ["eng", "ops"]]
    assert documents["Guide"].metadata["access_groups"] == ["eng"]
    asked = [r.path for r in server.requests]
    assert asked.count(f"/api/v2/folders/{folder}") == 1  # the listing has no folder titles; asked once per read
    assert asked.count(f"/rest/api/content/{folder}/restriction/byOperation/read") == 1
    assert f"/rest/api/content/{step}/restriction/byOperation/read" in asked


def test_cloud_ancestors_beyond_the_limit_are_asked_from_the_highest_one(cloud_env):
    server = cloud_env
    top = server.add_page("ENG", "Top", groups=("eng",))
    upper = server.add_page("ENG", "Upper", parent=top)
    lower = server.add_page("ENG", "Lower", parent=upper)
    leaf = server.add_page("ENG", "Leaf", parent=lower)

    documents = by_title(read_confluence(wiki(server, spaces=("ENG",), page_limit=2)))

    assert documents["Leaf"].metadata["ancestor_ids"] == [top, upper, lower]
    assert documents["Leaf"].metadata["ancestors"] == ["Top", "Upper", "Lower"]
    assert documents["Leaf"].metadata["access_groups"] == ["eng"]  # the restriction sits above the first answer
    # An answer as long as the limit (2) goes on from its highest ancestor: Lower's [Top, Upper] asks Top's (none),
    # Leaf's [Upper, Lower] asks Upper's ([Top]).
    asked = [r.path for r in server.requests if r.path.endswith("/ancestors")]
    assert asked == [f"/api/v2/pages/{page}/ancestors" for page in (top, upper, lower, top, leaf, upper)]
    assert all(r.params["limit"] == "2" for r in server.requests if r.path.endswith("/ancestors"))


def test_edits_and_restriction_changes_change_the_content_hash(wiki_env):
    server = wiki_env
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


def test_scan_hashes_sees_deletions_without_fetching_bodies(wiki_env):
    server = wiki_env
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
    assert server.requests and bodies_fetched(server) == set()
    if server.flavor == "cloud":  # the space ids, then the space listings: ids and versions, nothing per page
        assert {r.path for r in server.requests} == {"/api/v2/spaces", *(
            f"/api/v2/spaces/{server.space_ids[key]}/pages" for key in ("ENG", "OPS"))}
    else:
        assert {r.path for r in server.requests} == {"/rest/api/content"}
        assert all(r.expand == {"version"} for r in server.requests)
    assert after == read_confluence(source).hashes


def test_cloud_page_deleted_during_the_read_is_gone_and_the_rest_is_read(cloud_env):
    server = cloud_env
    kept = server.add_page("ENG", "Kept")
    deleted = server.add_page("ENG", "Deleted mid-read")
    server.delete_after_next_listing(deleted)  # listed, then 404 for its labels, ancestors and restrictions

    scan = read_confluence(wiki(server, spaces=("ENG",)))

    assert {d.doc_id for d in scan.documents} == {f"wiki:{kept}"}
    assert set(scan.hashes) == {f"wiki:{kept}"}  # so the index deletes it too, as the next listing would
    assert not scan.quarantined
    assert any(r.status == 404 and deleted in r.path for r in server.requests)


def test_cloud_pages_below_content_whose_restriction_is_unreadable_are_quarantined(cloud_env):
    server = cloud_env
    folder = server.add_folder("ENG", "Team space", groups=("sre",))
    inside = server.add_page("ENG", "Inside the folder", parent=folder)
    outside = server.add_page("ENG", "Outside")
    server.answer_404(rf"/rest/api/content/{folder}/restriction/byOperation/read")

    scan = read_confluence(wiki(server, spaces=("ENG",)))

    assert {d.doc_id for d in scan.documents} == {f"wiki:{outside}"}  # never indexed as readable by everyone
    assert [(q.item_id, "404" in q.reason) for q in scan.quarantined] == [(f"wiki:{inside}", True)]


def test_incremental_read_fetches_only_pages_modified_since(wiki_env):
    server = wiki_env
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
    served = {page for r in searches for page in r.result_ids}
    assert old not in served and edited in served  # the server filtered by CQL ...
    assert recent in served  # ... from a day earlier (time zones); the exact cut is the client's
    assert len([r for r in searches if "cursor" in r.params]) >= 1  # Cloud-style cursor pagination was followed
    if server.flavor == "cloud":
        # CQL only finds the pages (versions, no bodies); their bodies come from v2, by id, after the exact cut.
        assert all(r.expand == {"version"} for r in searches)
        by_id = [r for r in server.requests if r.path == "/api/v2/pages"]
        assert sorted(by_id[0].params["id"].split(",")) == sorted([*fresh, edited])
        assert ["cursor" in r.params for r in by_id] == [False, True]  # 4 pages, 3 an answer
        assert bodies_fetched(server) == {*fresh, edited}
        assert {r.path for r in server.requests if r.api == "v1"} - {"/rest/api/content/search"} == {
            f"/rest/api/content/{page}/restriction/byOperation/read" for page in [*fresh, edited]
        }
    else:
        assert all("body.storage" in r.expand for r in searches)

    with ConfluenceClient.from_source(source) as client:
        titles = [page["title"] for page in client.pages_modified_since("OPS", since - dt.timedelta(days=3))]
    assert titles == ["Ops old"]


def test_incremental_read_asks_for_the_restrictions_of_unmodified_ancestors(wiki_env):
    server = wiki_env
    server.expand_ancestor_restrictions = False  # Data Center: a server ignoring the nested expansion
    since = T0 + dt.timedelta(days=10)
    parent = server.add_page("ENG", "Team", groups=("eng",), when=since - dt.timedelta(days=20))
    server.add_page("ENG", "Child", parent=parent, when=since + dt.timedelta(hours=1))

    scan = read_confluence(wiki(server, spaces=("ENG",)), since=since)

    assert [d.metadata["access_groups"] for d in scan.documents] == [["eng"]]
    assert [d.metadata["ancestors"] for d in scan.documents] == [["Team"]]  # the title from the cheap listing
    asked = f"/rest/api/content/{parent}" + ("/restriction/byOperation/read" if server.flavor == "cloud" else "")
    assert any(r.path == asked for r in server.requests)


def test_cloud_documents_over_v2_equal_those_read_over_v1(cloud_env):
    """Moving a Cloud source from v1 to v2 keeps every id, URL, metadata field and hash: nothing re-ingests."""
    server = cloud_env
    server.v1_content_endpoints = True  # a Cloud site from before Atlassian removed them
    root = server.add_page("ENG", "Handbook", HANDBOOK_BODY, labels=("hr",), groups=("staff",))
    child = server.add_page("ENG", "Onboarding", parent=root, labels=("b", "a"), users=("557058:abc",))
    server.add_page("ENG", "Deeper", parent=child, groups=("staff", "eng"))
    server.add_page("OPS", "Runbook", when=T0 + dt.timedelta(days=2))

    def documents(scan) -> list:
        return sorted((d.doc_id, d.uri, d.title, d.text, d.metadata, d.content_hash) for d in scan.documents)

    over_v1 = read_confluence(wiki(server, flavor="datacenter"))
    assert {r.api for r in server.requests} == {"v1"} and len(over_v1.documents) == 4
    server.clear_log()
    over_v2 = read_confluence(wiki(server))
    assert not any(r.path in ("/rest/api/content", "/rest/api/space/ENG") for r in server.requests)

    assert documents(over_v2) == documents(over_v1)
    assert over_v2.hashes == over_v1.hashes
    assert scan_hashes(wiki(server)) == scan_hashes(wiki(server, flavor="datacenter"))


def test_cloud_fixture_refuses_v1_content_listing(cloud_env):
    """A regression to v1 listing on Cloud fails, as it would against Atlassian."""
    server = cloud_env
    server.add_page("ENG", "Page")
    with pytest.raises(ConfluenceError, match=r"space 'ENG': GET .*/rest/api/content was rejected with HTTP 410"):
        read_confluence(wiki(server, flavor="datacenter"))


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


def test_rate_limits_and_server_errors_are_retried(wiki_env):
    server = wiki_env
    server.add_page("ENG", "Page")
    source = wiki(server, spaces=("ENG",))
    server.fail_next(429, times=2, retry_after="0")
    waits: list[float] = []
    with ConfluenceClient.from_source(source, sleep=waits.append) as client:
        scan = read_confluence(source, client=client)
    assert [d.title for d in scan.documents] == ["Page"]
    assert [r.status for r in server.requests][:3] == [429, 429, 200]
    assert len({r.path for r in server.requests[:3]}) == 1  # the same request, retried
    assert waits == [0.0, 0.0]  # Retry-After honoured

    server.fail_next(503, times=3, retry_after=None)
    with ConfluenceClient.from_source(source, sleep=waits.append) as client:
        with pytest.raises(ConfluenceError, match=r"space 'ENG'.*failed after 3 attempts: HTTP 503"):
            read_confluence(source, client=client)


def test_cloud_per_page_requests_are_retried_too(cloud_env):
    server = cloud_env
    page = server.add_page("ENG", "Page", labels=("kept",), groups=("eng",))
    waits: list[float] = []
    with ConfluenceClient.from_source(wiki(server, spaces=("ENG",)), sleep=waits.append) as client:
        server.fail_next(502, retry_after=None)
        labels = client.page_labels(page, "ENG")  # v2
        server.fail_next(429)
        restriction = client.read_restriction(page, "ENG")  # v1
    assert [label["name"] for label in labels] == ["kept"]
    assert restriction["restrictions"]["group"]["results"] == [{"type": "group", "name": "eng"}]
    assert [(r.api, r.status) for r in server.requests] == [("v2", 502), ("v2", 200), ("v1", 429), ("v1", 200)]
    assert len(waits) == 2


def test_other_http_errors_name_the_space(cloud_env):
    server = cloud_env
    server.add_page("ENG", "Page")
    server.fail_next(403, retry_after=None)
    with pytest.raises(ConfluenceError, match=r"space 'ENG': permission denied \(HTTP 403"):
        read_confluence(wiki(server))
    server.fail_next(400, retry_after=None)
    with pytest.raises(ConfluenceError, match=r"space 'ENG': GET .* was rejected with HTTP 400"):
        read_confluence(wiki(server))


def test_missing_space_is_an_error_and_an_empty_space_is_not(wiki_env):
    server = wiki_env
    server.add_page("ENG", "Page")
    server.add_space("EMPTY")
    assert [d.title for d in read_confluence(wiki(server, spaces=("ENG", "EMPTY"))).documents] == ["Page"]
    with pytest.raises(ConfluenceError, match=r"space 'NOPE': the space does not exist"):
        scan_hashes(wiki(server, spaces=("ENG", "NOPE")))
    with pytest.raises(ConfluenceError, match=r"space 'NOPE': the space does not exist"):
        read_confluence(wiki(server, spaces=("NOPE",)))


def test_malformed_page_is_quarantined_and_the_others_are_read(wiki_env):
    server = wiki_env
    modified = "createdAt" if server.flavor == "cloud" else "when"  # v2 and v1 name the version's time apart
    good = server.add_page("ENG", "Good")
    bad = server.add_page("ENG", "Bad")
    undated = server.add_page("ENG", "Undated")
    server.add_page("ENG", "Also good")
    server.corrupt(bad, body={"storage": {"value": 42}})
    server.corrupt(undated, version={modified: "yesterday"})

    scan = read_confluence(wiki(server, spaces=("ENG",)))

    assert sorted(d.title for d in scan.documents) == ["Also good", "Good"]
    problems = {q.item_id: q for q in scan.quarantined}
    assert set(problems) == {f"wiki:{bad}", f"wiki:{undated}"}
    assert problems[f"wiki:{bad}"].stage == STAGE
    assert "body.storage.value" in problems[f"wiki:{bad}"].reason
    assert '"title": "Bad"' in problems[f"wiki:{bad}"].raw
    assert f"version.{modified}" in problems[f"wiki:{undated}"].reason
    # quarantined pages stay in the hashes: a page that fails to parse is not a deleted page
    assert f"wiki:{bad}" in scan.hashes and f"wiki:{good}" in scan.hashes


def test_cloud_restriction_answer_without_principals_quarantines_instead_of_opening(cloud_env):
    server = cloud_env
    parent = server.add_page("ENG", "Parent", groups=("eng",))
    child = server.add_page("ENG", "Child", parent=parent)
    alone = server.add_page("ENG", "Alone", groups=("legal",))
    server.add_page("ENG", "Fine")
    server.corrupt_restriction(parent, restrictions={"group": None})  # an answer that left the groups out
    server.corrupt_restriction(alone, restrictions={"user": {"results": "garbled"}})

    scan = read_confluence(wiki(server, spaces=("ENG",)))

    assert [d.title for d in scan.documents] == ["Fine"]
    reasons = {q.item_id: q.reason for q in scan.quarantined}
    assert "lacks restrictions.user or restrictions.group" in reasons[f"wiki:{parent}"]
    assert f"the read restrictions of its ancestor {parent} cannot be read" in reasons[f"wiki:{child}"]
    assert "restrictions.read.restrictions.user.results is not a list" in reasons[f"wiki:{alone}"]


def test_storage_format_to_text():
    text = storage_to_text(
        '<p>See <ac:link><ri:page ri:content-title="Other"/><ac:plain-text-link-body><![CDATA[the other page]]>'
        '</ac:plain-text-link-body></ac:link>.</p><ac:structured-macro ac:name="info"><ac:parameter ac:name="title">'
        "Note</ac:parameter><ac:rich-text-body><p>Careful &amp; slow.</p></ac:rich-text-body></ac:structured-macro>"
    )
    assert text == "See the other page.\n\nCareful & slow."


def test_confluence_source_config_is_validated():
    ok = ConfluenceSource(name="w", base_url="https://x.atlassian.net/wiki/", spaces=("ENG",))
    assert ok.base_url == "https://x.atlassian.net/wiki"
    assert (ok.flavor, ok.token_env, ok.user_env, ok.access_groups, ok.page_limit) == (
        "cloud", "CONFLUENCE_TOKEN", "CONFLUENCE_USER", (), 50
    )
    with pytest.raises(ValidationError, match="needs base_url"):
        ConfluenceSource(name="w", spaces=("ENG",))
    with pytest.raises(ValidationError, match="at least one space"):
        ConfluenceSource(name="w", base_url="https://x.atlassian.net/wiki")
    with pytest.raises(ValidationError, match="invalid space key"):
        ConfluenceSource(name="w", base_url="https://x.atlassian.net/wiki", spaces=('EN"G',))
    with pytest.raises(ValidationError, match="flavor"):
        ConfluenceSource(name="w", base_url="https://c.example.com", spaces=("A",), flavor="server")
    with pytest.raises(ValidationError, match="path is required"):
        FolderSource(name="docs")
    # Each kind's fields belong to it alone: Confluence's on a folder are rejected as they are written in a config.
    with pytest.raises(ConfigError, match=r"sources\[0\]\.spaces: unknown key"):
        load_settings(sources=[{"name": "docs", "kind": "folder", "path": "/tmp", "spaces": ["ENG"]}])
