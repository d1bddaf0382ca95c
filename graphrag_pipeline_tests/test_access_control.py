"""Access control, end to end: documents carry access groups from their source (here: front matter), and the query
module never returns text, entity paths, relationships or summaries derived only from documents the caller may not
read — while a caller holding the group gets them."""

from __future__ import annotations

import pytest

from graphrag_pipeline.query import open_index
from graphrag_pipeline.query.access import ReaderAccess

from .conftest import build, folder_settings

pytestmark = pytest.mark.slow

RESTRICTED = """---
access_groups: [payments-oncall]
---
# Vault Gateway incident

The vault-gateway outage on 3 March was caused by an expired signing key held by Krzysztof Obrembski.
vault-gateway depends on hsm-proxy for every card token.
"""
PUBLIC = {
    "checkout.md": "# Checkout\n\ncheckout-service calls payments-api to charge cards.\n",
    "payments.md": "# Payments API\n\npayments-api is owned by team-payments and depends on ledger-db.\n",
}
QUESTION = "Who held the expired signing key behind the vault-gateway outage?"


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    root = tmp_path_factory.mktemp("access")
    corpus = root / "corpus"
    corpus.mkdir()
    (corpus / "vault-incident.md").write_text(RESTRICTED)
    for name, text in PUBLIC.items():
        (corpus / name).write_text(text)
    settings = folder_settings(root / "index", corpus, communities={"min_size": 2})
    build(settings)
    with open_index(settings=settings) as engine:
        yield engine


def restricted_names() -> set[str]:
    return {"vault-gateway", "hsm-proxy", "Krzysztof Obrembski"}


def test_a_caller_without_the_group_gets_nothing_derived_from_the_restricted_document(index):
    for mode in ("hybrid", "vector", "graph"):
        response = index.query(QUESTION, mode=mode, top_k=10)
        assert all(r.doc_id != "t:vault-incident.md" for r in response.results), mode
        assert all("vault" not in r.text.lower() for r in response.results)
        named = {n for r in response.results for n in r.entity_path}
        named |= {e.name for e in response.entities_mentioned}
        named |= {name for fact in response.relationships for name in (fact.source, fact.target)}
        assert not named & restricted_names(), mode
        assert all("t:vault-incident.md" not in fact.doc_ids for fact in response.relationships)
    for result in index.query("vault-gateway hsm-proxy signing key", mode="global", top_k=10).results:
        assert not set(result.entity_path) & restricted_names()
        assert "vault" not in result.text.lower()


def test_a_caller_with_the_group_gets_it(index):
    response = index.query(QUESTION, top_k=3, groups=["payments-oncall", "sre"])
    assert response.results[0].doc_id == "t:vault-incident.md"
    assert "Krzysztof Obrembski" in response.results[0].text
    assert {e.name for e in response.entities_mentioned} & restricted_names()
    # Public documents stay readable to everyone, with or without groups.
    assert index.query("Who owns payments-api?", top_k=3).results[0].doc_id == "t:payments.md"


def test_groups_must_be_a_collection(index):
    with pytest.raises(TypeError):
        index.query(QUESTION, groups="payments-oncall")


def test_reader_access_rules():
    access = ReaderAccess({"secret": frozenset({"a"}), "mixed": frozenset({"a", "b"})}, ["b"])
    assert access.can_read("public") and access.can_read("mixed") and not access.can_read("secret")
    assert access.can_read_any(["secret", "public"]) and not access.can_read_any(["secret"])
    assert access.can_read_all(["public", "mixed"]) and not access.can_read_all(["public", "secret"])


def test_a_folders_configured_groups_restrict_its_files_and_changing_them_reingests(tmp_path):
    from graphrag_pipeline.lib.config import FolderSource
    from graphrag_pipeline.lib.sources.registry import read_source, scan_hashes

    (tmp_path / "runbook.md").write_text("# Runbook\n\nRestart vault-gateway.\n")
    (tmp_path / "own.md").write_text("---\naccess_groups: [security]\n---\n# Keys\n\nRotate the HSM keys.\n")
    open_folder = FolderSource(name="rb", path=str(tmp_path))
    closed_folder = FolderSource(name="rb", path=str(tmp_path), access_groups=("sre",))

    closed = {d.title: d for d in read_source(closed_folder).documents}
    assert closed["Runbook"].metadata["access_groups"] == ["sre"]
    assert closed["Keys"].metadata["access_groups"] == ["security"]  # the file's own front matter wins
    opened = {d.title: d for d in read_source(open_folder).documents}
    assert "access_groups" not in opened["Runbook"].metadata
    assert opened["Runbook"].content_hash != closed["Runbook"].content_hash
    for source in (open_folder, closed_folder):  # the sensor's cheap scan agrees with the read
        assert scan_hashes(source) == {d.doc_id: d.content_hash for d in read_source(source).documents}
