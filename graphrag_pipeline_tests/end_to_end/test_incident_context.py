"""``index.context``: the incident context of a service, on a catalog with a three-level dependency chain, owners with
contacts, runbook links into the corpus and one restricted runbook and one restricted dependency.

    web → orders → billing → ledger-db          (each owned by a team; billing's and orders' runbooks linked)
    billing → fraud-check                       (stated only by a restricted catalog: group sre)

Pinned: the exact subgraph in both directions with hops and paths; owners with the contacts their catalog entries
give (never a credential); runbooks resolved to the corpus documents the links name; a question picks the direction
it asks for; caps cut nearest-last and say what they cut; a restricted runbook or dependency is absent for a caller
without the group and present with it; the CLI answers as the function does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graphrag_pipeline.lib.core.config import load_settings
from graphrag_pipeline_tests.cli_process import run_cli
from graphrag_pipeline_tests.unit.query.test_retrieval_mechanisms import (
    build_and_open_index,
    content_words,
    open_engine,
)

pytestmark = pytest.mark.slow  # the offline extractor loads spaCy

CATALOG = """\
apiVersion: backstage.io/v1alpha1
kind: Component
metadata: {name: web}
spec: {type: service, owner: group:team-web, dependsOn: [component:orders]}
---
apiVersion: backstage.io/v1alpha1
kind: Component
metadata:
  name: orders
  links: [{url: "https://git.example.com/ops/blob/main/sre/orders-recovery.md", title: Orders recovery, type: runbook}]
spec: {type: service, owner: group:team-orders, dependsOn: [component:billing]}
---
apiVersion: backstage.io/v1alpha1
kind: Component
metadata:
  name: billing
  links: [{url: "https://git.example.com/ops/blob/main/runbooks/billing/outage.md", title: Billing outage,
           type: runbook}]
spec: {type: service, owner: group:team-billing, system: shop, dependsOn: [resource:ledger-db]}
---
apiVersion: backstage.io/v1alpha1
kind: Resource
metadata: {name: ledger-db}
spec: {type: database, owner: group:team-data}
---
apiVersion: backstage.io/v1alpha1
kind: Group
metadata:
  name: team-billing
  annotations: {slack.com/channel: "#billing-oncall", pagerduty.com/integration-key: do-not-show-3f9a}
spec: {type: team, profile: {email: billing@example.com}}
---
apiVersion: backstage.io/v1alpha1
kind: Group
metadata: {name: team-orders, annotations: {slack.com/channel: "#orders-oncall"}}
spec: {type: team}
"""
RESTRICTED_CATALOG = """\
apiVersion: backstage.io/v1alpha1
kind: Component
metadata: {name: fraud-check}
spec: {type: service, dependencyOf: [component:billing]}
"""
DOCS = {
    "runbooks/billing/outage.md": "# Billing outage\n\nWhen invoices stop, restart the billing workers.\n",
    "guides/web.md": "# Web\n\nThe web front end renders the shop.\n",
    "guides/notes.md": "# Notes\n\nGeneral notes about lunch menus.\n",
}
RESTRICTED_DOCS = {"orders-recovery.md": "# Orders recovery\n\nReplay the order queue from the last offset.\n"}
WORDS = set().union(*(content_words(t) for t in [CATALOG, RESTRICTED_CATALOG, *DOCS.values(),
                                                 *RESTRICTED_DOCS.values()]))


def write_sources(root: Path) -> list[dict]:
    folders = {"docs": DOCS, "sre": RESTRICTED_DOCS}
    for folder, files in folders.items():
        for name, text in files.items():
            (root / folder / name).parent.mkdir(parents=True, exist_ok=True)
            (root / folder / name).write_text(text, encoding="utf-8")
    for folder, text in (("catalog", CATALOG), ("catalog-sre", RESTRICTED_CATALOG)):
        (root / folder).mkdir()
        (root / folder / "catalog-info.yaml").write_text(text, encoding="utf-8")
    return [
        {"name": "docs", "kind": "folder", "path": str(root / "docs")},
        {"name": "sre", "kind": "folder", "path": str(root / "sre"), "access_groups": ["sre"]},
        {"name": "cat", "kind": "catalog", "path": str(root / "catalog")},
        {"name": "cat-sre", "kind": "catalog", "path": str(root / "catalog-sre"), "access_groups": ["sre"]},
    ]


@pytest.fixture(scope="module")
def settings(tmp_path_factory):
    root = tmp_path_factory.mktemp("context")
    return load_settings(index_dir=str(root / "index"), shard_count=4, sources=write_sources(root))


@pytest.fixture(scope="module")
def engine(settings):
    with build_and_open_index(settings, WORDS) as opened:
        yield opened


def by_name(services) -> dict:
    return {service.name: service for service in services}


def test_a_service_named_gets_its_dependents_and_dependencies_with_hops_paths_owners_and_runbooks(engine):
    context = engine.context("billing", groups=("sre",))
    assert [s.name for s in context.subjects] == ["billing"]
    dependents = by_name(context.dependents)
    assert {name: (s.hops, s.path) for name, s in dependents.items()} == {
        "orders": (1, ["billing", "orders"]), "web": (2, ["billing", "orders", "web"])}
    assert [(s.name, s.hops) for s in context.dependencies] == [("fraud-check", 1), ("ledger-db", 1)]
    [billing] = context.subjects
    assert billing.system == "shop" and dependents["orders"].system == ""  # as each one's catalog entry says
    [owner] = billing.owners
    assert owner.name == "team-billing"
    assert owner.contacts == {"profile.email": "billing@example.com", "slack.com/channel": "#billing-oncall"}
    assert "do-not-show-3f9a" not in json.dumps(context.to_dict())  # an integration key is a credential
    assert [(d.doc_id, d.via) for d in billing.documents if d.via != "about"] == [
        ("docs:runbooks/billing/outage.md", "HAS_RUNBOOK")]
    assert [d.doc_id for d in dependents["orders"].documents] == ["sre:orders-recovery.md"]
    assert [o.name for o in dependents["web"].owners] == ["team-web"]
    assert by_name(context.dependencies)["ledger-db"].owners[0].name == "team-data"
    assert {(f.source, f.type, f.target) for f in context.facts} == {
        ("orders", "DEPENDS_ON", "billing"), ("web", "DEPENDS_ON", "orders"),
        ("billing", "DEPENDS_ON", "ledger-db"), ("billing", "DEPENDS_ON", "fraud-check"),
        ("billing", "OWNED_BY", "team-billing"), ("orders", "OWNED_BY", "team-orders"),
        ("web", "OWNED_BY", "team-web"), ("ledger-db", "OWNED_BY", "team-data"),
        ("billing", "HAS_RUNBOOK", "https://git.example.com/ops/blob/main/runbooks/billing/outage.md"),
        ("orders", "HAS_RUNBOOK", "https://git.example.com/ops/blob/main/sre/orders-recovery.md"),
    }
    for fact in context.facts:
        assert fact.doc_ids, fact  # every fact cites a document that states it
    markdown = context.to_markdown()
    assert "**orders** (1 hop: billing → orders)" in markdown and "#billing-oncall" in markdown
    assert "**billing** [shop]" in markdown


def test_the_facts_cite_the_catalog_pages_that_state_them(engine):
    facts = {(f.source, f.type, f.target): f.doc_ids for f in engine.context("billing", groups=("sre",)).facts}
    assert facts[("orders", "DEPENDS_ON", "billing")] == ["cat:component:default/orders"]


def test_a_caller_without_the_group_gets_no_restricted_runbook_and_no_restricted_dependency(engine):
    public = engine.context("billing")
    text = json.dumps(public.to_dict())
    assert "fraud-check" not in text and "sre:orders-recovery.md" not in text
    assert [s.name for s in public.dependencies] == ["ledger-db"]
    orders = by_name(public.dependents)["orders"]
    assert orders.documents == []
    # The link itself is in a public catalog entry: its URL is public, the page it names is not.
    assert orders.runbooks == ["https://git.example.com/ops/blob/main/sre/orders-recovery.md"]


def test_a_question_gets_the_direction_it_asks_for(engine):
    dependents = engine.context("Billing is paging: which services depend on it, who owns them?")
    assert [s.name for s in dependents.subjects] == ["billing"]
    assert {s.name for s in dependents.dependents} == {"orders", "web"} and dependents.dependencies == []
    dependencies = engine.context("What does billing depend on?")
    assert [s.name for s in dependencies.dependencies] == ["ledger-db"] and dependencies.dependents == []


def test_caps_keep_the_nearest_and_count_what_they_cut(settings):
    capped = settings.with_overrides(retrieval={"context": {"max_services": 1, "documents_per_service": 0}})
    with open_engine(capped, WORDS) as engine:
        context = engine.context("billing", groups=("sre",), max_hops=2)
    assert [s.name for s in context.dependents] == ["orders"]
    assert context.truncated["dependents"] == 1 and context.truncated["documents"] >= 1
    assert ("web", "DEPENDS_ON", "orders") not in {(f.source, f.type, f.target) for f in context.facts}
    assert all(s.documents == [] for s in context.services())


def test_max_hops_bounds_the_blast_radius(engine):
    assert [s.name for s in engine.context("billing", max_hops=1).dependents] == ["orders"]
    assert engine.context("billing", max_hops=0).dependents == []
    with pytest.raises(ValueError, match="max_hops"):
        engine.context("billing", max_hops=4)
    with pytest.raises(ValueError, match="subject is empty"):
        engine.context("  ")


def test_an_unknown_subject_is_an_empty_context(engine):
    context = engine.context("zebra-service-that-is-not-there")
    assert context.subjects == [] and context.facts == []
    assert "No service found" in context.to_markdown()


def test_a_chained_question_asks_who_owns_the_services_the_first_step_reached(engine):
    response = engine.query("Billing is paging: which services depend on it, and who owns them?", top_k=3)
    steps = {(f.source, f.type, f.target): f.step for f in response.relationships if f.followed}
    assert steps == {("orders", "DEPENDS_ON", "billing"): 1, ("orders", "OWNED_BY", "team-orders"): 2}
    unasked = {(f.source, f.type, f.target): f.step for f in response.relationships if not f.followed}
    assert all(step == 0 for step in unasked.values())
    # Each fact says which system its ends' catalog entries name (billing's: shop; orders names none).
    [asked] = [f for f in response.relationships if f.type == "DEPENDS_ON" and f.followed]
    assert (asked.source_system, asked.target_system) == ("", "shop")


def test_the_cli_prints_what_the_function_returns(engine, settings, tmp_path):
    config = tmp_path / "graphrag.yaml"
    config.write_text(json.dumps({"index_dir": settings.index_dir, "shard_count": 4,
                                  "sources": [s.model_dump(mode="json") for s in settings.sources]}))
    completed = run_cli("context", "billing", "--group", "sre", "--json", cwd=tmp_path, config=config)
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout) == json.loads(json.dumps(engine.context("billing", groups=("sre",)).to_dict()))


def test_the_incidents_that_affected_a_service_are_in_its_context_with_their_postmortems(tmp_path):
    """A postmortem's extraction states "INC-7 affected billing" (an LLM or a shipped extraction types it AFFECTED);
    the incident joins billing's context, citing the postmortem, and a dependent's context keeps it on billing."""
    from graphrag_pipeline.evaluation import eval_settings
    from graphrag_pipeline_tests.conftest import build

    set_dir = tmp_path / "set"
    (set_dir / "catalog").mkdir(parents=True)
    (set_dir / "catalog" / "catalog-info.yaml").write_text(CATALOG, encoding="utf-8")
    postmortem = {"id": "pm-7", "title": "Postmortem INC-7",
                  "text": "INC-7: the invoice queue stalled for two hours. INC-7 affected billing and delayed orders."}
    (set_dir / "corpus.jsonl").write_text(json.dumps(postmortem) + "\n", encoding="utf-8")
    (set_dir / "questions.jsonl").write_text(json.dumps(
        {"id": "q", "question": "billing?", "answer": None, "gold_ids": ["pm-7"]}) + "\n", encoding="utf-8")
    (set_dir / "extraction.jsonl").write_text(json.dumps(
        {"id": "pm-7", "entities": ["INC-7", "billing"], "triples": [["INC-7", "affected", "billing"]]}) + "\n",
        encoding="utf-8")
    settings = eval_settings(set_dir, tmp_path / "index", use_extraction=True, base=load_settings())
    build(settings)
    from graphrag_pipeline.query import open_index

    with open_index(settings=settings) as index:
        context = index.context("billing")
        [billing] = context.subjects
        assert [(i.name, i.doc_ids) for i in billing.incidents] == [("INC-7", ["set:pm-7"])]
        assert ("INC-7", "AFFECTED", "billing") in {(f.source, f.type, f.target) for f in context.facts}
        assert "incidents: INC-7" in context.to_markdown()
        assert [s.name for s in index.context("orders").dependencies] == ["billing", "ledger-db"]
