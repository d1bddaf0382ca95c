"""Retrieval on a service domain: runbook-style documents plus a Backstage catalog, on a small invented corpus.

Pinned here: a catalog entity's title, aliases and spelling variants are one node that text and questions link to;
a question's relationship intent is followed in its direction to the documents about what it reaches (catalog pages
are facts, in the response's relationships); ordinary words are weak links; results are distinct documents with
their best passages; the keyword signal rescues exact identifiers. The index is built by the real stages with the
packaged offline extractor and the deterministic bag-of-words embedder of ``test_retrieval_mechanisms``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core.ids import entity_id, stable_shard
from graphrag_pipeline.lib.stages import build_everything
from graphrag_pipeline.query import explore
from graphrag_pipeline.query.linking import GENERIC_NAME_CONFIDENCE
from graphrag_pipeline.query.retrievers import CATALOG_PAGE_FACTOR
from graphrag_pipeline_tests.conftest import folder_settings
from graphrag_pipeline_tests.unit.query.test_retrieval_mechanisms import (
    HashedEmbedder,
    build_and_open_index,
    content_words,
)

pytestmark = pytest.mark.slow  # the offline extractor loads spaCy

CATALOG = """\
apiVersion: backstage.io/v1alpha1
kind: Component
metadata: {name: ledger, title: Ledger Service, aliases: [ldgr]}
spec: {type: service, owner: group:team-coins, dependsOn: [component:vaultstore, component:ratelimiter]}
---
apiVersion: backstage.io/v1alpha1
kind: Component
metadata: {name: vaultstore, title: Vault Store}
spec: {type: service, owner: group:team-coins}
---
apiVersion: backstage.io/v1alpha1
kind: Component
metadata: {name: ratelimiter, title: Rate Limiter}
spec: {type: service, owner: group:team-coins}
---
apiVersion: backstage.io/v1alpha1
kind: Component
metadata: {name: storefront, title: Storefront Web}
spec: {type: service, owner: group:package, dependsOn: [component:ledger]}
---
apiVersion: backstage.io/v1alpha1
kind: Group
metadata: {name: package}
spec: {type: team}
"""

HANDBOOK_TOPICS = ["tariffs", "refunds", "audits", "rollovers", "ledgers", "escrow", "invoices", "payouts"]
DOCS = {
    "ledger.md": "# Ledger Service\n\nLedger Service records every coin transfer and settles balances nightly.\n",
    "vaultstore.md": "# Vault Store\n\nVault Store keeps encrypted balance snapshots on disk.\n",
    "ratelimiter.md": "# Rate Limiter\n\nRate Limiter throttles bursts of transfer requests per customer.\n",
    "storefront.md": "# Storefront Web\n\nStorefront Web renders the shop pages and the basket.\n",
    "depends-essay.md": "# Dependency essay\n\nWhich services depend on which is documented in many places; a degraded "
                        "service is one that services depend on.\n",
    "package-upload.md": "# Package uploads\n\nA package upload job completes when the package is stored.\n",
    # Keyword rescue: the identifier is in one long page; short pages share the question's other words.
    "quota-errors.md": "# Quota errors\n\n" + " ".join(
        f"Clerks reconcile {topic} weekly and archive {topic} receipts." for topic in HANDBOOK_TOPICS
    ) + " The error ERR_QUOTA_TOKEN_7731 means the quota token expired during settlement.\n",
    "quota-tokens.md": "# Quota tokens\n\nQuota tokens expire during settlement.\n",
    "settlement.md": "# Settlement\n\nSettlement of quota tokens happens at night.\n",
    # Document results: one long handbook of many passages.
    "handbook.md": "# Treasury handbook\n\n" + "\n\n".join(
        f"## {topic.title()}\n\n" + " ".join(
            f"Treasury desk step {n} for {topic}: count, sign and file the {topic} sheet." for n in range(40)
        )
        for topic in HANDBOOK_TOPICS
    ) + "\n",
}
DEPS_QUESTION = "Ledger Service is degraded. Which services does it depend on, and where are they documented?"
DEPENDENTS_QUESTION = "Ledger Service is down. Which services that depend on it are affected?"
KEYWORD_QUESTION = "What does ERR_QUOTA_TOKEN_7731 mean for quota tokens during settlement?"
HANDBOOK_QUESTION = "Which treasury desk steps count, sign and file the sheets?"
GENERIC_QUESTION = "Alert Package Upload is firing: the package upload job did not complete"
QUESTIONS = [DEPS_QUESTION, DEPENDENTS_QUESTION, KEYWORD_QUESTION, HANDBOOK_QUESTION, GENERIC_QUESTION]
VOCABULARY = set().union(*(content_words(text) for text in [*DOCS.values(), CATALOG, *QUESTIONS]))


def doc(name: str) -> str:
    return f"t:{name}"


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    root: Path = tmp_path_factory.mktemp("domain")
    corpus, catalog = root / "corpus", root / "catalog"
    corpus.mkdir()
    catalog.mkdir()
    for name, text in DOCS.items():
        (corpus / name).write_text(text, encoding="utf-8")
    (catalog / "catalog-info.yaml").write_text(CATALOG, encoding="utf-8")
    settings = folder_settings(root / "index", corpus).with_overrides(sources=[
        {"name": "t", "kind": "folder", "path": str(corpus)},
        {"name": "cat", "kind": "catalog", "path": str(catalog)},
    ])
    with build_and_open_index(settings, VOCABULARY) as opened:
        yield opened


def is_catalog_page(doc_id: str) -> bool:
    return doc_id.startswith("cat:")


# --- catalog-aware entity resolution --------------------------------------------------------------------------------


def test_a_catalog_title_is_the_catalog_node_not_a_second_entity(engine):
    ledger = engine.graph.get_entities([entity_id("ledger")])[entity_id("ledger")]
    assert ledger.name == "ledger" and ledger.type == "Service"  # the catalog's name and type, not the title's
    assert {"Ledger Service", "ldgr"} <= set(ledger.aliases)
    assert doc("ledger.md") in ledger.doc_ids  # the README's title mentions are the catalog node's
    assert not engine.graph.get_entities([entity_id("ledger service")])  # no second node for the title


@pytest.mark.parametrize("words, confidence", [
    ("Ledger Service", GENERIC_NAME_CONFIDENCE),  # two ordinary words, however capitalized: a weak link
    ("LEDGER SERVICE", GENERIC_NAME_CONFIDENCE),
    ("ldgr", 1.0),
    ("ledger-service", 1.0),  # a name's shape
])
def test_a_question_naming_a_title_alias_or_variant_links_the_catalog_entity(engine, words, confidence):
    response = engine.query(f"Is {words} healthy today?")
    linked = {e.id: e for e in response.entities_mentioned}
    assert entity_id("ledger") in linked
    assert linked[entity_id("ledger")].confidence == confidence
    assert linked[entity_id("ledger")].linked_by == f"name:{words}"


# --- intent: typed, directed traversal ------------------------------------------------------------------------------


def test_what_a_service_depends_on_ranks_the_documents_about_its_dependencies_first(engine):
    response = engine.query(DEPS_QUESTION, top_k=5)
    assert set(response.doc_ids[:2]) == {doc("vaultstore.md"), doc("ratelimiter.md")}
    assert not any(is_catalog_page(d) for d in response.doc_ids[:2])
    followed = [f for f in response.relationships if f.followed]
    assert {(f.source, f.type, f.target) for f in followed} == {
        ("ledger", "DEPENDS_ON", "vaultstore"), ("ledger", "DEPENDS_ON", "ratelimiter")
    }
    assert response.relationships[: len(followed)] == followed  # the asked-for facts lead
    assert all(f.doc_ids and all(is_catalog_page(d) for d in f.doc_ids) for f in followed)


def test_the_facts_a_question_asked_for_are_all_shown_however_few_results_it_asks_for(engine):
    response = engine.query(DEPS_QUESTION, top_k=1)
    assert len(response.results) == 1
    assert {(f.source, f.type, f.target) for f in response.relationships if f.followed} == {
        ("ledger", "DEPENDS_ON", "vaultstore"), ("ledger", "DEPENDS_ON", "ratelimiter")}


def test_what_depends_on_a_service_follows_the_same_edges_the_other_way(engine):
    response = engine.query(DEPENDENTS_QUESTION, top_k=5)
    assert response.doc_ids[0] == doc("storefront.md")
    assert doc("vaultstore.md") not in response.doc_ids[:2]  # a dependency is not a dependent
    followed = {(f.source, f.type, f.target) for f in response.relationships if f.followed}
    assert followed == {("storefront", "DEPENDS_ON", "ledger")}
    top = response.results[0]
    assert top.scores["relation"] == 1.0 and top.entity_path[-1] == "storefront"


def test_without_a_relationship_phrase_nothing_is_followed(engine):
    response = engine.query("Ledger Service records coin transfers", top_k=5)
    assert not any(f.followed for f in response.relationships)
    assert all(r.scores["relation"] == 0 for r in response.results)
    assert response.doc_ids[0] == doc("ledger.md")


# --- link confidence ------------------------------------------------------------------------------------------------


def test_an_ordinary_word_is_a_weak_link_and_bounds_what_the_graph_gives(engine):
    retrieval = engine.retrieve(GENERIC_QUESTION)
    package = entity_id("package")
    assert retrieval.linked[package] == ("name:Package", GENERIC_NAME_CONFIDENCE)
    # Every chunk the walk scored from the weak link scores at most what that link seeded.
    from_package = [c for c, e in retrieval.best_entity.items()
                    if retrieval.reached[e].path[0] == package and c in retrieval.graph_scores]
    assert from_package
    assert all(retrieval.graph_scores[c] <= GENERIC_NAME_CONFIDENCE + 1e-9 for c in from_package)


# --- document results -----------------------------------------------------------------------------------------------


def test_results_are_distinct_documents_with_their_best_passages(engine):
    chunks = engine.query(HANDBOOK_QUESTION, top_k=5, results="chunks")
    assert len(chunks.results) == 5 and [r.doc_id for r in chunks.results].count(doc("handbook.md")) >= 2
    documents = engine.query(HANDBOOK_QUESTION, top_k=5)
    doc_ids = [r.doc_id for r in documents.results]
    assert len(doc_ids) == len(set(doc_ids)) and doc_ids[0] == doc("handbook.md")
    handbook = documents.results[0]
    cited = [c.chunk_id for c in handbook.citations]
    assert cited[0] == handbook.chunk_id and len(cited) >= 2 and len(set(cited)) == len(cited)
    assert all(c.doc_id == doc("handbook.md") for c in handbook.citations)
    # Its passages are the handbook's best ones, best first: the chunk-level ranking's handbook passages.
    assert cited == [r.chunk_id for r in chunks.results if r.doc_id == doc("handbook.md")][: len(cited)]


# --- keyword signal -------------------------------------------------------------------------------------------------


def test_an_exact_identifier_is_rescued_by_the_keyword_signal(engine):
    vector = engine.query(KEYWORD_QUESTION, mode="vector", top_k=5)
    assert vector.doc_ids[0] != doc("quota-errors.md")  # the short pages look more similar
    assert engine.query(KEYWORD_QUESTION, mode="keyword", top_k=5).doc_ids[0] == doc("quota-errors.md")
    hybrid = engine.query(KEYWORD_QUESTION, top_k=5)
    assert hybrid.doc_ids[0] == doc("quota-errors.md")
    assert hybrid.results[0].scores["identifier"] == 1.0  # the question's one identifier, found in one page only
    assert all(r.scores["identifier"] == 0 for r in hybrid.results[1:])


# --- catalog names in text ------------------------------------------------------------------------------------------


def test_catalog_names_in_text_are_spotted_and_a_catalog_change_reaches_chunks_extracted_before_it(tmp_path):
    """A text mentions "Coin Minter" before the catalog defines it. The catalog entry is added later and only the
    catalog's shard runs again: the corpus-wide merge extracts the older chunk again with the catalog's names."""
    corpus, catalog = tmp_path / "corpus", tmp_path / "catalog"
    corpus.mkdir()
    catalog.mkdir()
    (corpus / "minting.md").write_text("# Minting\n\nEvery night the Coin Minter stamps fresh coins.\n", "utf-8")
    (catalog / "catalog-info.yaml").write_text(CATALOG, encoding="utf-8")
    settings = folder_settings(tmp_path / "index", corpus).with_overrides(sources=[
        {"name": "t", "kind": "folder", "path": str(corpus)},
        {"name": "cat", "kind": "catalog", "path": str(catalog)},
    ])
    minter = entity_id("coinminter")
    catalog_shard = stable_shard("cat:component:default/coinminter", settings.shard_count)
    assert stable_shard(doc("minting.md"), settings.shard_count) != catalog_shard
    with Workspace(settings, embedder=HashedEmbedder(VOCABULARY)) as workspace:
        build_everything(workspace)
        chunk_ids = [c.chunk_id for c in workspace.state.chunks() if c.doc_id == doc("minting.md")]
        assert minter not in workspace.graph_store.all_entity_ids()

    (catalog / "catalog-info.yaml").write_text(
        CATALOG + "---\napiVersion: backstage.io/v1alpha1\nkind: Component\n"
                  "metadata: {name: coinminter, title: Coin Minter}\nspec: {type: service}\n", encoding="utf-8")
    with Workspace(settings, embedder=HashedEmbedder(VOCABULARY)) as workspace:
        reports = {r.stage: r for r in build_everything(workspace, shards=[catalog_shard])}
        assert reports["element_summaries"].counts["re_extracted_chunks"] >= len(chunk_ids) > 0
        mentioned = workspace.graph_store.entities_of_chunks(chunk_ids)
        assert any(minter in entity_ids for entity_ids in mentioned.values())
        coin_minter = workspace.graph_store.get_entities([minter])[minter]
        assert coin_minter.type == "Service" and doc("minting.md") in coin_minter.doc_ids
        # Every chunk has one extraction under the current key again; the older ones were pruned.
        assert workspace.state.stale_extraction_chunks(workspace.extractor_key, workspace.extractor_family) == []
        keys = {key for (key,) in workspace.state.query("SELECT DISTINCT extractor_key FROM extractions")}
        assert keys == {workspace.extractor_key}


# --- a names-only catalog: documents about what a relationship reached, by path and title --------------------------

NAMES_ONLY_CATALOG = """\
apiVersion: backstage.io/v1alpha1
kind: Component
metadata: {name: checkout}
spec: {type: service, dependsOn: [component:vault, component:ledger]}
---
apiVersion: backstage.io/v1alpha1
kind: Component
metadata:
  name: vault
  links: [{url: "https://git.example.com/ops/blob/main/incidents/sealed.md", title: Runbook}]
spec: {type: service}
---
apiVersion: backstage.io/v1alpha1
kind: Component
metadata: {name: ledger}
spec: {type: service}
"""
NAMES_ONLY_DOCS = {
    "vault/README.md": "# Vault Service\n\nKeeps the signing keys sealed until an operator unseals them.\n",
    "ledger/README.md": "# Ledger Service\n\nRecords every transfer between accounts.\n",
    "notes/history.md": "# Platform history\n\nThe checkout flow chose vault and ledger years ago.\n",
    "incidents/sealed.md": "# Sealed storage\n\nUnseal with three operator shares, then restart the signer.\n",
    "vault/shares.md": "---\naccess_groups: [vault-ops]\n---\n# Share holders\n\nThe three operator shares are kept "
                       "by the night shift.\n",
}
NAMES_ONLY_QUESTION = "Checkout is failing. Which services does it depend on, and where are they documented?"


def test_a_names_only_catalog_reaches_the_readme_titled_x_service_in_the_x_folder(tmp_path):
    """The catalog says ``checkout`` depends on ``vault`` and ``ledger``; their READMEs are titled "Vault Service" and
    "Ledger Service" and live in folders of those names. The dependency question ranks them first (relation 1.0),
    the catalog's own pages below (half), a page that merely names them nowhere in the relation signal."""
    corpus, catalog = tmp_path / "corpus", tmp_path / "catalog"
    for name, text in NAMES_ONLY_DOCS.items():
        (corpus / name).parent.mkdir(parents=True, exist_ok=True)
        (corpus / name).write_text(text, encoding="utf-8")
    catalog.mkdir()
    (catalog / "catalog-info.yaml").write_text(NAMES_ONLY_CATALOG, encoding="utf-8")
    settings = folder_settings(tmp_path / "index", corpus).with_overrides(sources=[
        {"name": "t", "kind": "folder", "path": str(corpus)},
        {"name": "cat", "kind": "catalog", "path": str(catalog)},
    ])
    vocabulary = set().union(*(content_words(t) for t in [*NAMES_ONLY_DOCS.values(), NAMES_ONLY_QUESTION]))
    with build_and_open_index(settings, vocabulary) as engine:
        response = engine.query(NAMES_ONLY_QUESTION, top_k=7)
        relation = {r.doc_id: r.scores["relation"] for r in response.results}
        about = {doc("vault/README.md"), doc("ledger/README.md"), doc("incidents/sealed.md")}
        assert set(response.doc_ids[:3]) == about
        assert all(relation[d] == 1.0 for d in about)
        assert relation["cat:component:default/vault"] == CATALOG_PAGE_FACTOR  # its facts are in relationships
        assert relation.get(doc("notes/history.md"), 0.0) == 0.0
        followed = {(f.source, f.type, f.target) for f in response.relationships if f.followed}
        assert followed == {("checkout", "DEPENDS_ON", "vault"), ("checkout", "DEPENDS_ON", "ledger")}

        # Exploring vault lists the same documents about it, those the caller may read, most strongly first.
        public = explore.entity_neighbourhood(engine, entity_id("vault"))["documents"]
        assert {d["doc_id"] for d in public if d["about"] == 1.0} == {
            doc("vault/README.md"), doc("incidents/sealed.md"), "cat:component:default/vault"}
        assert doc("vault/shares.md") not in {d["doc_id"] for d in public}
        entitled = explore.entity_neighbourhood(engine, entity_id("vault"), groups=["vault-ops"])["documents"]
        shares = next(d for d in entitled if d["doc_id"] == doc("vault/shares.md"))
        assert shares["title"] == "Share holders" and 0 < shares["about"] < 1  # a folder of two documents
        assert [d["about"] for d in entitled] == sorted((d["about"] for d in entitled), reverse=True)
