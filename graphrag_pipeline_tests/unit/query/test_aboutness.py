"""Which entities a document is about (query/aboutness.py), on documents and names the test writes: titles without
their generic head words, path segments as strong as they are rare, catalog links by the end of their path."""

from __future__ import annotations

import pytest

from graphrag_pipeline.query.aboutness import (
    Aboutness,
    catalog_short_names,
    link_segments,
    path_segments,
    title_subjects,
)

HEAD_WORDS = frozenset({"service", "runbook", "runbooks", "readme", "docs", "overview", "index"})


@pytest.mark.parametrize("title, expected", [
    ("Vault Service", {"vault service", "vault"}),
    ("Runbook: vault", {"runbook: vault", "vault"}),
    ("Service Overview", {"service overview"}),  # nothing is left of a title of head words but the title itself
    ("KubePodCrashLooping", {"kube pod crash looping"}),
])
def test_a_title_means_itself_and_what_is_left_without_its_generic_head_words(title, expected):
    assert title_subjects(title, HEAD_WORDS) == expected


def test_path_segments_drop_the_source_extensions_and_generic_names():
    assert path_segments("ops:vault/README.md", HEAD_WORDS) == ["vault"]
    assert path_segments("ops:docs/runbooks/vault_sealed.md", HEAD_WORDS) == ["vault sealed"]
    assert path_segments("ops:docs/sop/observatorium.md#thanos-down", HEAD_WORDS) == ["sop", "observatorium",
                                                                                       "thanos-down"]
    assert link_segments("https://git.example.com/org/ops/blob/main/vault/README.md", HEAD_WORDS)[-1] == "vault"


def test_a_title_x_service_in_x_readme_is_about_x_and_a_mention_elsewhere_is_not():
    """The finding: a catalog's ``vault`` and a README titled "Vault Service" were never matched, so the documents of
    the services a dependency question reached never ranked."""
    about = Aboutness(
        [("ops:vault/README.md", "Vault Service"), ("ops:payments/README.md", "Payments"),
         ("ops:notes.md", "Why we chose vault")],
        {"vault": {"e-vault"}, "payments": {"e-payments"}},
        HEAD_WORDS,
    )
    assert about.documents_about("e-vault") == {"ops:vault/README.md": 1.0}
    assert about.documents_about("e-payments") == {"ops:payments/README.md": 1.0}
    assert about.strength("ops:notes.md", "e-vault") == 0.0


def test_a_path_segment_is_as_strong_as_it_is_rare_among_the_documents():
    documents = [(f"ops:kubernetes/alert-{n}.md", f"Alert {n}") for n in range(10)] + [("ops:etcd/backup.md", "Backup")]
    about = Aboutness(documents, {"kubernetes": {"e-k8s"}, "etcd": {"e-etcd"}}, HEAD_WORDS)
    assert about.strength("ops:etcd/backup.md", "e-etcd") == 1.0  # one document's folder
    assert about.strength("ops:kubernetes/alert-3.md", "e-k8s") == pytest.approx(0.5)  # a folder of ten: 1/(1+1)


def test_a_catalog_link_makes_the_linked_document_about_the_runbook_and_the_service():
    documents = [("ops:incidents/vault-sealed.md", "Sealed storage"), ("wiki:other/vault-sealed.md", "Old page"),
                 ("ops:db/failover.md", "Failover")]
    links = [("https://git.example.com/org/ops/blob/main/incidents/vault-sealed.md", {"e-vault", "e-runbook"}),
             ("https://git.example.com/org/ops/blob/main/failover.md", {"e-db"})]
    about = Aboutness(documents, {}, HEAD_WORDS, links)
    assert about.documents_about("e-vault") == {"ops:incidents/vault-sealed.md": 1.0}  # the path's end, not the name
    assert about.documents_about("e-runbook") == {"ops:incidents/vault-sealed.md": 1.0}
    assert about.documents_about("e-db") == {}  # the link ends in main/failover, the document in db/failover


def test_a_link_to_where_a_runbook_is_published_names_the_corpus_copy_by_the_end_of_its_path():
    documents = [("ops-runbooks/kubernetes/PodCrashLooping.md", "Pod crash looping"),
                 ("ops-runbooks/node/PodCrashLooping.md", "Pod crash looping on nodes")]
    links = [("https://runbooks.example.dev/runbooks/kubernetes/podcrashlooping/", {"e-pods"})]
    about = Aboutness(documents, {}, HEAD_WORDS, links)
    assert about.documents_about("e-pods") == {"ops-runbooks/kubernetes/PodCrashLooping.md": 1.0}


def test_a_runbook_the_catalog_links_to_many_services_is_about_each_of_them_in_part():
    documents = [("ops:kubernetes/PodCrashLooping.md", "Pod crash looping"), ("ops:ledger/restore.md", "Restore")]
    shared = [("https://git.example.com/ops/kubernetes/PodCrashLooping.md", {f"e-{n}"}) for n in range(10)]
    own = [("https://git.example.com/ops/ledger/restore.md", {"e-0"})]
    about = Aboutness(documents, {}, HEAD_WORDS, shared + own)
    assert about.strength("ops:ledger/restore.md", "e-0") == 1.0
    assert about.strength("ops:kubernetes/PodCrashLooping.md", "e-3") == pytest.approx(0.5)  # ten links: 1/(1+1)


def test_a_catalogs_shared_name_words_are_set_aside_to_read_how_its_docs_name_a_component():
    """Every workload is ``argocd-…`` and half are ``…-server``: the docs call them "Repo Server" and "Dex"."""
    names = ["argocd-repo-server", "argocd-dex-server", "argocd-server", "argocd-commit-server", "argocd-redis",
             "argocd-application-controller"]
    short, shared = catalog_short_names(names)
    assert shared == {"argocd", "server"}
    assert short["argocd-repo-server"] == "repo" and short["argocd-dex-server"] == "dex"
    assert short["argocd-application-controller"] == "applicationcontroller"
    assert "argocd-server" not in short  # nothing of its own is left
    documents = [("docs:architecture.md#repo-server", "Repo Server"), ("docs:architecture.md#dex", "Dex"),
                 ("docs:components/ApplicationController.md", "Controllers"), ("docs:faq.md", "Server FAQ")]
    about = Aboutness(documents, {}, HEAD_WORDS, catalogs=[{name: {f"e-{name}"} for name in names}])
    assert about.documents_about("e-argocd-repo-server") == {"docs:architecture.md#repo-server": 1.0}
    assert set(about.documents_about("e-argocd-dex-server")) == {"docs:architecture.md#dex"}
    assert set(about.documents_about("e-argocd-application-controller")) == {
        "docs:components/ApplicationController.md"}
    assert about.documents_about("e-argocd-server") == {}


def test_a_catalog_without_shared_words_gets_no_short_names():
    assert catalog_short_names(["checkout", "cart", "ledger-db", "accounts-db", "frontend"]) == ({}, frozenset())


def test_a_title_that_holds_a_catalog_name_among_other_words_is_about_it_less_surely():
    catalog = {"ledger-db": {"e-api"}, "payments-api": {"e-pay"}, "payments-api-gateway": {"e-gw"}, "alert": {"e-al"}}
    documents = [("runbooks/LedgerDBDown.md", "LedgerDBDown"), ("runbooks/gw.md", "Payments API Gateway Down"),
                 ("runbooks/noise.md", "Alert fatigue"), ("runbooks/ledger-db.md", "ledger-db")]
    about = Aboutness(documents, {"ledger-db": {"e-api"}}, HEAD_WORDS, catalogs=[catalog])
    assert about.documents_about("e-api") == {"runbooks/LedgerDBDown.md": 0.5, "runbooks/ledger-db.md": 1.0}
    assert about.documents_about("e-gw") == {"runbooks/gw.md": 0.5}
    assert about.documents_about("e-pay") == {}  # inside the longer name the title holds
    assert about.documents_about("e-al") == {}  # one word is in too many titles


def test_a_workload_whose_name_holds_a_documents_title_is_an_instance_of_what_it_describes():
    """The finding on a Thanos deployment: ``observatorium-thanos-store-shard-0`` is a Store, documented as "Store" in
    ``components/store.md``; the longest title its name holds decides ("Query Frontend", not also "Query"), the words
    the catalog's names share decide nothing, and a catalog's own pages are not documents it is an instance of."""
    names = ["observatorium-thanos-store-shard-0", "observatorium-thanos-query-frontend", "observatorium-thanos-query",
             "observatorium-api", "observatorium-thanos-metric-federation-rule", "memcached", "observatorium-api-cache-memcached"]
    catalog = {name: {f"e-{name}"} for name in names}
    documents = [("docs:components/store.md", "Store"), ("docs:components/query.md", "Querier/Query"),
                 ("docs:components/query-frontend.md", "Query Frontend"), ("docs:observatorium.md", "Observatorium"),
                 ("docs:guides/rule.md", "Rule"), ("docs:components/rule.md", "Rule (aka Ruler)"),
                 ("catalog:resource/memcached", "memcached")]
    about = Aboutness(documents, {}, HEAD_WORDS, catalogs=[catalog], catalog_pages=["catalog:resource/memcached"])
    assert about.documents_about("e-observatorium-thanos-store-shard-0") == {"docs:components/store.md": 0.5}
    assert set(about.documents_about("e-observatorium-thanos-query-frontend")) == {"docs:components/query-frontend.md"}
    # two documents are titled "Rule": each is about the ruler less surely than one would be
    rule = about.documents_about("e-observatorium-thanos-metric-federation-rule")
    assert set(rule) == {"docs:guides/rule.md", "docs:components/rule.md"} and max(rule.values()) < 0.5
    assert about.documents_about("e-observatorium-api") == {}  # "observatorium" is the catalog's shared word
    assert about.documents_about("e-observatorium-api-cache-memcached") == {}  # memcached's page is the catalog's
