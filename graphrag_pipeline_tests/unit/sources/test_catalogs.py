"""Catalog sources: a service-catalog YAML and Backstage entities become typed nodes and exact edges."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from graphrag_pipeline.evaluation import eval_settings
from graphrag_pipeline.lib.algorithms.merge import merge_extractions, resolve_catalog_names
from graphrag_pipeline.lib.core.config import CatalogSource, load_settings
from graphrag_pipeline.lib.core.models import Chunk, ChunkExtraction, EntityMention, RelationMention
from graphrag_pipeline.lib.extract.offline import precomputed_extractions
from graphrag_pipeline.lib.sources.catalog import (
    CatalogError,
    EntityRef,
    catalog_extractions,
    catalog_names,
    catalog_titles,
    extract_with_catalogs,
    parse_catalog_text,
    parse_entity_ref,
)
from graphrag_pipeline.lib.sources.registry import read_source, scan_hashes
from graphrag_pipeline_tests.conftest import FIXTURES, SAMPLE_CATALOG, build

CATALOGS = FIXTURES / "catalogs"
BOUTIQUE = CATALOGS / "online-boutique" / "catalog-info.yaml"
OTEL = CATALOGS / "otel-demo" / "service-catalog.yaml"
ONTOLOGY = load_settings().ontology


def catalog(path: Path, name: str = "cat") -> CatalogSource:
    return CatalogSource(name=name, path=str(path))


def one_chunk_per_document(scan) -> list[Chunk]:
    return [Chunk(f"{d.doc_id}#0", d.doc_id, 0, d.text, len(d.text.split()), 0, len(d.text)) for d in scan.documents]


def edges(record: dict) -> set[tuple[str, str, str, str]]:
    """(subject, relationship type, object, predicate) of a catalog extraction record."""
    typed = record["catalog"]["relation_types"]
    return {(s, t, o, p) for (s, p, o), t in zip(record["triples"], typed)}


# --------------------------------------------------------------------------------------------------------- references


def test_entity_refs_take_the_fields_default_kind_and_the_referring_namespace() -> None:
    assert parse_entity_ref("component:default/ledger-db", default_kind="group") == EntityRef(
        "component", "default", "ledger-db")
    assert parse_entity_ref("group:team-payments", default_kind="user") == EntityRef(
        "group", "default", "team-payments")
    assert parse_entity_ref("ledger-db", default_kind="component", default_namespace="payments") == EntityRef(
        "component", "payments", "ledger-db")
    assert parse_entity_ref("Resource:Prod/Orders-DB", default_kind="component") == EntityRef(
        "resource", "prod", "Orders-DB")
    # The node is named as text names it; another namespace stays apart.
    assert EntityRef("component", "default", "ledger-db").display == "ledger-db"
    assert EntityRef("component", "prod", "ledger-db").display == "prod/ledger-db"
    for bad in ("", "  ", "a:b:c", "a/b/c", "kind:", "has space", 5, None):
        with pytest.raises(CatalogError):
            parse_entity_ref(bad, default_kind="component")


def test_backstage_refs_resolve_in_the_entitys_namespace_across_yaml_documents() -> None:
    text = """\
apiVersion: backstage.io/v1alpha1
kind: Component
metadata: {name: payments-api, namespace: payments}
spec:
  type: service
  owner: team-payments
  dependsOn: [resource:ledger-db, component:default/fraud-check]
  consumesApis: [ledger]
  providesApis: [payments]
  system: checkout
--- # a second document in the same file
apiVersion: backstage.io/v1alpha1
kind: Location
metadata: {name: everything}
spec: {targets: [./other.yaml]}
...
---
apiVersion: backstage.io/v1alpha1
kind: Group
metadata: {name: team-payments, namespace: payments}
spec: {type: team, parent: group:default/engineering, children: [], members: [jdoe]}
"""
    parsed = parse_catalog_text(text, "catalog-info.yaml")
    assert parsed.problems == [] and parsed.skipped == 1  # the Location describes the catalog, not the system
    component, group = parsed.entries
    assert component.ref == EntityRef("component", "payments", "payments-api")
    assert {(f.relation, f.source.ref, f.target.ref) for f in component.facts} == {
        ("owned_by", "component:payments/payments-api", "group:payments/team-payments"),
        ("depends_on", "component:payments/payments-api", "resource:payments/ledger-db"),
        ("depends_on", "component:payments/payments-api", "component:default/fraud-check"),
        ("consumes_api", "component:payments/payments-api", "api:payments/ledger"),
        ("provides_api", "component:payments/payments-api", "api:payments/payments"),
        ("part_of_system", "component:payments/payments-api", "system:payments/checkout"),
    }
    # Reverse fields: the member is the subject of "member of".
    assert {(f.relation, f.source.ref, f.target.ref) for f in group.facts} == {
        ("sub_team_of", "group:payments/team-payments", "group:default/engineering"),
        ("member_of", "user:payments/jdoe", "group:payments/team-payments"),
    }
    record = component.record()
    assert record["catalog"]["types"] == {
        "payments/payments-api": "Service", "payments/team-payments": "Team", "payments/ledger-db": "Service",
        "fraud-check": "Service", "payments/ledger": "TECHNOLOGY", "payments/payments": "TECHNOLOGY",
        "payments/checkout": "CONCEPT",
    }
    assert ("payments/payments-api", "DEPENDS_ON", "payments/ledger", "consumes API") in edges(record)
    assert ("payments/payments-api", "RELATED_TO", "payments/payments", "provides API") in edges(record)


# ------------------------------------------------------------------------------------------------------ the fixtures


def _addr_dependencies(manifest: Path) -> set[str]:
    """Services a Kubernetes manifest's containers reach through *_ADDR variables ("cartservice:7070")."""
    found = set()
    for document in yaml.safe_load_all(manifest.read_text(encoding="utf-8")):
        if not document or document.get("kind") != "Deployment":
            continue
        for container in document["spec"]["template"]["spec"]["containers"]:
            found |= {env["value"].split(":")[0] for env in container.get("env", []) if env["name"].endswith("_ADDR")}
    return found - {"shoppingassistantservice"}  # optional component, left out (see the fixture README)


def test_backstage_fixture_gives_typed_entities_and_the_manifests_dependencies() -> None:
    scan = read_source(catalog(BOUTIQUE, "ob"))
    assert scan.quarantined == ()
    documents = {d.doc_id: d for d in scan.documents}
    assert len(documents) == 17
    frontend = documents["ob:component:default/frontend"]
    assert frontend.title == "frontend" and frontend.metadata["catalog"] is True
    assert frontend.metadata["entity_type"] == "Service" and frontend.uri.endswith("#component:default/frontend")
    assert "frontend depends on cartservice." in frontend.text
    assert "frontend is owned by team-storefront." in frontend.text
    types = {d.title: d.metadata["entity_type"] for d in scan.documents}
    assert types["redis-cart"] == "Service" and types["cart-grpc"] == "TECHNOLOGY"
    assert types["team-cart"] == "Team" and types["online-boutique"] == "CONCEPT"

    manifests = CATALOGS / "online-boutique" / "kubernetes-manifests"
    for service in ("frontend", "checkoutservice", "recommendationservice", "cartservice"):
        record = scan.extractions[f"ob:component:default/{service}"]
        depends = {o for s, t, o, p in edges(record) if t == "DEPENDS_ON" and p == "depends on"}
        assert depends == _addr_dependencies(manifests / f"{service}.yaml"), service

    frontend_edges = edges(scan.extractions["ob:component:default/frontend"])
    assert ("frontend", "OWNED_BY", "team-storefront", "owned by") in frontend_edges
    assert ("frontend", "DEPENDS_ON", "cart-grpc", "consumes API") in frontend_edges
    cart = scan.extractions["ob:component:default/cartservice"]
    runbook = "https://runbooks.prometheus-operator.dev/runbooks/kubernetes/kubepodcrashlooping/"
    assert ("cartservice", "HAS_RUNBOOK", runbook, "has runbook") in edges(cart)
    assert cart["catalog"]["types"][runbook] == "Runbook"
    system = cart["triples"].index(["cartservice", "part of system", "online-boutique"])
    assert cart["catalog"]["weights"][system] == 0.5
    # A link that is no runbook stays in the text only.
    assert "Link: Source code https://github.com/GoogleCloudPlatform/microservices-demo/tree/main/src/frontend." in (
        frontend.text)
    assert not any("github.com" in name for name in scan.extractions["ob:component:default/frontend"]["entities"])
    # An owner's page lists what it owns; the edges stay with the owned entities.
    team_cart = documents["ob:group:default/team-cart"]
    assert "team-cart owns cart-grpc.\nteam-cart owns cartservice.\nteam-cart owns redis-cart." in team_cart.text
    assert scan.extractions[team_cart.doc_id]["triples"] == []


def test_service_catalog_fixture_is_the_compose_files_dependencies() -> None:
    compose = yaml.safe_load((CATALOGS / "otel-demo" / "compose.yaml").read_text(encoding="utf-8"))["services"]
    listed = yaml.safe_load(OTEL.read_text(encoding="utf-8"))["services"]
    assert sorted(s["name"] for s in listed) == sorted(compose)
    for service in listed:
        assert service.get("depends_on", []) == list(compose[service["name"]].get("depends_on") or {}), service

    scan = read_source(catalog(OTEL, "otel"))
    assert scan.quarantined == ()
    documents = {d.doc_id: d for d in scan.documents}
    assert len(documents) == 20 + 5  # every service, two teams defined and three only named as owners
    assert documents["otel:team:default/team-platform"].metadata["catalog_origin"] == "service-catalog"
    referenced = documents["otel:team:default/team-cart"]
    assert referenced.metadata["catalog_origin"] == "referenced"
    assert referenced.text == ("team-cart is a team referenced in the catalog but not defined in it.\n\n"
                               "team-cart owns cart.\nteam-cart owns valkey-cart.")
    checkout = scan.extractions["otel:service:default/checkout"]
    assert {o for s, t, o, p in edges(checkout) if t == "DEPENDS_ON"} == set(compose["checkout"]["depends_on"])
    assert ("checkout", "OWNED_BY", "team-checkout", "owned by") in edges(checkout)
    assert documents["otel:service:default/checkout"].metadata["tier"] == 1
    cart = documents["otel:service:default/cart"]
    assert "cart has runbook https://opentelemetry.io/docs/demo/services/cart/ (Cart service)." in cart.text


def test_a_folder_reads_every_catalog_and_passes_over_other_yaml(tmp_path: Path) -> None:
    scan = read_source(catalog(CATALOGS))
    assert scan.quarantined == ()  # compose.yaml and the Kubernetes manifests are skipped, not quarantined
    ids = {d.doc_id for d in scan.documents}
    assert "cat:component:default/frontend" in ids and "cat:service:default/frontend" in ids  # one node, two pages
    # A team the service catalog names is defined by the Backstage Group of that name: no page of its own.
    assert "cat:group:default/team-cart" in ids and "cat:team:default/team-cart" not in ids
    assert {d.metadata["path"] for d in scan.documents if "path" in d.metadata} == {
        "online-boutique/catalog-info.yaml", "otel-demo/service-catalog.yaml"}

    # Named directly, a file that is no catalog is a problem worth reporting.
    compose = read_source(catalog(CATALOGS / "otel-demo" / "compose.yaml"))
    assert compose.documents == ()
    (problem,) = compose.quarantined
    assert problem.item_id == "cat:compose.yaml#1" and "docker compose" in problem.reason


BROKEN_BACKSTAGE = """\
apiVersion: backstage.io/v1alpha1
kind: Component
metadata: {name: good-service}
spec: {owner: team-a, dependsOn: [component:ledger-db]}
---
apiVersion: backstage.io/v1alpha1
kind: Component
metadata:
  name: broken-syntax
spec:
  owner: [team-a
---
apiVersion: backstage.io/v1alpha1
kind: Component
metadata: {name: bad-ref}
spec: {owner: team-a, dependsOn: [5]}
---
apiVersion: backstage.io/v1alpha1
kind: Widget
metadata: {name: odd}
---
apiVersion: backstage.io/v1alpha1
kind: Component
metadata: {description: no name}
---
apiVersion: backstage.io/v1alpha1
kind: Component
metadata: {name: ledger-db}
spec: {owner: team-b}
"""

BROKEN_SERVICES = """\
services:
  - name: ledger-db
    owner: team-c
  - owner: team-c
  - name: shaky
    depends_on: {ledger-db: {condition: service_started}}
  - name: fine
    owners: team-c
    runbooks: https://runbooks.example.com/fine
  - name: fine
    owner: team-d
"""


def test_bad_entries_are_quarantined_with_the_reason_and_the_rest_goes_on(tmp_path: Path) -> None:
    (tmp_path / "a-catalog-info.yaml").write_text(BROKEN_BACKSTAGE, encoding="utf-8")
    (tmp_path / "b-services.yml").write_text(BROKEN_SERVICES, encoding="utf-8")
    (tmp_path / "c-broken.yaml").write_text("services:\n  - name: gone\n    owner: [team-d\n", encoding="utf-8")
    (tmp_path / "d-latin1.yaml").write_bytes("services:\n  - name: caf\xe9\n".encode("latin-1"))
    scan = read_source(catalog(tmp_path))
    reasons = {q.item_id: q.reason for q in scan.quarantined}
    assert set(reasons) == {
        "cat:component:default/broken-syntax",  # its name is still readable: the last good version is kept
        "cat:component:default/bad-ref",
        "cat:widget:default/odd",
        "cat:a-catalog-info.yaml#5",  # no name, no doc id: the position in the file
        "cat:service:default/fine@b-services.yml",  # defined twice: the first definition is used
        "cat:b-services.yml#services[2]",
        "cat:service:default/shaky",
        "cat:service:default/gone",  # a file that is not valid YAML still names its entries
        "cat:d-latin1.yaml",
    }
    assert "invalid YAML" in reasons["cat:component:default/broken-syntax"]
    assert "document 2 (line 5)" in reasons["cat:component:default/broken-syntax"]
    assert "spec.dependsOn" in reasons["cat:component:default/bad-ref"]
    assert "unsupported kind 'Widget'" in reasons["cat:widget:default/odd"]
    assert "needs a name" in reasons["cat:b-services.yml#services[2]"]
    assert "depends_on must be a list" in reasons["cat:service:default/shaky"]
    assert "not valid UTF-8" in reasons["cat:d-latin1.yaml"]
    # Every quarantined item has a hash, so fixing it is a change the sensor sees.
    assert set(reasons) <= set(scan.hashes)

    documents = {d.doc_id: d for d in scan.documents}
    assert set(documents) == {
        "cat:component:default/good-service",
        "cat:component:default/ledger-db",
        "cat:service:default/ledger-db",  # another page of the same node, from the other format
        "cat:service:default/fine",
        "cat:group:default/team-a", "cat:group:default/team-b", "cat:team:default/team-c",  # owners, referenced only
    }
    assert edges(scan.extractions["cat:service:default/fine"]) == {
        ("fine", "OWNED_BY", "team-c", "owned by"),
        ("fine", "HAS_RUNBOOK", "https://runbooks.example.com/fine", "has runbook"),
    }
    # team-a owns bad-ref and broken-syntax too, but only what could be read is listed.
    assert documents["cat:group:default/team-a"].text.endswith("team-a owns good-service.")


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new), encoding="utf-8")


def test_content_hashes_are_per_entity_stable_and_follow_its_entry(tmp_path: Path) -> None:
    path = tmp_path / "catalog-info.yaml"
    shutil.copy(BOUTIQUE, path)
    source = catalog(path)
    before = read_source(source).hashes
    assert read_source(source).hashes == before == scan_hashes(source)
    assert {d.doc_id: d.content_hash for d in read_source(source).documents} == before

    # Comments, list order and the YAML spelling of the same facts change nothing.
    _edit(path, "  dependsOn: [resource:redis-cart]", "  # Redis\n  dependsOn:\n    - resource:default/redis-cart")
    _edit(path, "    - component:productcatalogservice\n    - component:currencyservice\n",
          "    - component:currencyservice\n    - component:productcatalogservice\n")
    assert read_source(source).hashes == before

    # One entry's new dependency re-ingests that entry only.
    _edit(path, "  dependsOn: [component:productcatalogservice]", "  dependsOn: [component:productcatalogservice, "
          "component:currencyservice]")
    after = read_source(source).hashes
    assert {d for d in before if after.get(d) != before[d]} == {"cat:component:default/recommendationservice"}

    # A new owner changes the entry and the two owners' pages (what each owns), nothing else.
    _edit(path, "  name: adservice\n  description: Provides text ads based on given context words.\n  tags: [java]\n"
          "spec:\n  type: service\n  lifecycle: production\n  owner: team-storefront",
          "  name: adservice\n  description: Provides text ads based on given context words.\n  tags: [java]\n"
          "spec:\n  type: service\n  lifecycle: production\n  owner: team-catalog")
    moved = read_source(source).hashes
    assert {d for d in after if moved.get(d) != after[d]} == {
        "cat:component:default/adservice", "cat:group:default/team-storefront", "cat:group:default/team-catalog"}


# --------------------------------------------------------------------------------------------------------- extraction


def test_catalog_records_are_read_by_the_stock_precomputed_extractor_too() -> None:
    scan = read_source(catalog(BOUTIQUE, "ob"))
    chunks = one_chunk_per_document(scan)
    result = precomputed_extractions(chunks, scan.extractions, ONTOLOGY)
    assert result.quarantined == []
    found = {(r.source, r.type, r.target) for e in result.extractions for r in e.relations}
    assert ("frontend", "DEPENDS_ON", "cartservice") in found and ("cartservice", "OWNED_BY", "team-cart") in found
    # Untyped there (every name CONCEPT, "consumes API" a RELATED_TO): the typed path is extract_with_catalogs.
    assert ("frontend", "RELATED_TO", "cart-grpc") in found


def test_catalog_chunks_get_exact_typed_mentions_and_other_chunks_the_configured_extractor() -> None:
    scan = read_source(catalog(BOUTIQUE, "ob"))
    chunks = one_chunk_per_document(scan)
    text_chunk = Chunk("runbook#0", "notes:cart.md", 0, "cartservice calls redis-cart.", 4, 0, 28)
    batch = [chunks[0], text_chunk, *chunks[1:]]
    records = {**scan.extractions, "notes:cart.md": {"entities": ["x"], "triples": []}}  # an eval-set record
    seen: list[list[str]] = []

    def configured(others):
        seen.append([c.chunk_id for c in others])
        return [ChunkExtraction(c.chunk_id, (EntityMention("cartservice", "Service", spotter="pattern"),), ())
                for c in others], []

    results, quarantined = extract_with_catalogs(batch, records, ONTOLOGY, configured)
    assert quarantined == [] and seen == [["runbook#0"]]
    assert [r.chunk_id for r in results] == [c.chunk_id for c in batch]
    by_doc = {c.doc_id: r for c, r in zip(batch, results)}
    frontend = by_doc["ob:component:default/frontend"]
    assert frontend.entities[0].name == "frontend" and frontend.entities[0].spotter == "catalog"
    types = {m.name: m.type for m in frontend.entities}
    assert types["frontend"] == "Service" and types["team-storefront"] == "Team" and types["cart-grpc"] == "TECHNOLOGY"
    assert types["online-boutique"] == "CONCEPT"
    relations = {(r.source, r.type, r.target, r.predicate, r.weight) for r in frontend.relations}
    assert ("frontend", "DEPENDS_ON", "cart-grpc", "consumes API", 1.0) in relations
    assert ("frontend", "RELATED_TO", "online-boutique", "part of system", 0.5) in relations
    assert len(frontend.relations) == 7 + 1 + 1 + 1  # dependencies, owner, API, system: nothing co-occurs
    assert {r.description for r in frontend.relations} >= {"frontend depends on cartservice."}

    # Without catalog records everything goes to the configured extractor, untouched.
    seen.clear()
    extract_with_catalogs([text_chunk], {}, ONTOLOGY, configured)
    assert seen == [["runbook#0"]]


def test_facts_attach_to_the_chunk_that_states_them() -> None:
    scan = read_source(catalog(BOUTIQUE, "ob"))
    document = next(d for d in scan.documents if d.doc_id == "ob:component:default/checkoutservice")
    cut = document.text.index("checkoutservice depends on paymentservice.")
    chunks = [Chunk("c0", document.doc_id, 0, document.text[:cut], 0, 0, cut),
              Chunk("c1", document.doc_id, 1, document.text[cut:], 0, cut, len(document.text))]
    (first, second), quarantined = catalog_extractions(chunks, scan.extractions, ONTOLOGY)
    assert quarantined == []
    assert {m.name for m in first.entities} >= {"checkoutservice", "team-checkout"}
    assert "checkoutservice" in {m.name for m in second.entities}  # the subject is in every chunk of its page
    assert ("checkoutservice", "paymentservice") in {(r.source, r.target) for r in second.relations}
    assert ("checkoutservice", "team-checkout") in {(r.source, r.target) for r in first.relations}

    broken = {document.doc_id: {**scan.extractions[document.doc_id], "catalog": {"version": 99}}}
    results, quarantined = catalog_extractions(chunks, broken, ONTOLOGY)
    assert [q.item_id for q in quarantined] == [document.doc_id] and all(not r.entities for r in results)


def test_a_catalog_service_and_the_same_name_in_text_are_one_node() -> None:
    scan = read_source(catalog(BOUTIQUE, "ob"))
    chunks = one_chunk_per_document(scan)
    extracted, _ = catalog_extractions(chunks, scan.extractions, ONTOLOGY)
    text = ChunkExtraction(
        "notes#0",
        (EntityMention("cartservice", "Service", "The cart", "notes#0", "pattern"),
         EntityMention("redis-cart", "CONCEPT", "Redis", "notes#0", "title")),
        (RelationMention("cartservice", "redis-cart", "RELATED_TO", "co-occurs", "…", 0.5, "notes#0"),),
    )
    entities, relationships = merge_extractions(
        [*((c.doc_id, e) for c, e in zip(chunks, extracted)), ("notes:cart.md", text)], ONTOLOGY)
    by_name = {e.canonical: e for e in entities}
    assert by_name["cartservice"].type == "Service" and "notes:cart.md" in by_name["cartservice"].doc_ids
    assert by_name["redis-cart"].type == "Service"  # the catalog's type beats the text's default type
    assert sum(e.canonical == "cartservice" for e in entities) == 1


def test_a_catalog_title_becomes_its_entitys_title_and_nothing_else_gets_one() -> None:
    """Neo4j users match a service by the name people call it ("Checkout Service"): the catalog's title is a property
    of the entity, not only one of its aliases; a team with no title has none."""
    scan = read_source(catalog(SAMPLE_CATALOG))
    records = list(scan.extractions.values())
    chunks = one_chunk_per_document(scan)
    extracted, _ = catalog_extractions(chunks, scan.extractions, ONTOLOGY)
    entities, _ = merge_extractions(((c.doc_id, e) for c, e in zip(chunks, extracted)), ONTOLOGY,
                                    catalog=resolve_catalog_names(catalog_names(records), catalog_titles(records)))
    by_name = {e.canonical: e for e in entities}
    assert by_name["checkout"].title == "Checkout Service" and "Checkout Service" in by_name["checkout"].aliases
    assert by_name["team-orders"].title == ""
    assert {e.canonical for e in entities if e.title} == {key for key in catalog_titles(records)}


# ----------------------------------------------------------------------------------------------------- configuration


def test_catalog_sources_need_a_path_and_eval_sets_pick_up_a_catalog_folder(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="path is required"):
        CatalogSource(name="c")
    with pytest.raises(FileNotFoundError):
        read_source(catalog(tmp_path / "missing"))
    set_dir = tmp_path / "set"
    set_dir.mkdir()
    assert [s.kind for s in eval_settings(set_dir, tmp_path / "i", False).sources] == ["eval_set"]
    (set_dir / "catalog").mkdir()
    sources = eval_settings(set_dir, tmp_path / "i", False).sources
    assert [(s.name, s.kind) for s in sources] == [("set", "eval_set"), ("set-catalog", "catalog")]


# ------------------------------------------------------------------------------------------------------- end to end


QUESTION = "Which services does frontend depend on and which team owns them?"


@pytest.fixture(scope="module")
def boutique_index(tmp_path_factory):
    settings = load_settings(
        index_dir=str(tmp_path_factory.mktemp("catalog") / "index"),
        sources=[{"name": "ob", "kind": "catalog", "path": str(BOUTIQUE)}],
        shard_count=4,
    )
    build(settings)
    from graphrag_pipeline.query import open_index

    with open_index(settings=settings) as index:
        yield index


def _owners() -> dict[str, str]:
    entities = [d for d in yaml.safe_load_all(BOUTIQUE.read_text(encoding="utf-8")) if d["kind"] != "Group"]
    return {d["metadata"]["name"]: d["spec"]["owner"].split("/")[-1].split(":")[-1] for d in entities}


def test_the_catalog_alone_answers_which_services_frontend_depends_on_and_who_owns_them(boutique_index) -> None:
    dependencies = _addr_dependencies(CATALOGS / "online-boutique" / "kubernetes-manifests" / "frontend.yaml")
    owners = _owners()
    response = boutique_index.query(QUESTION)
    (linked,) = response.entities_mentioned
    assert (linked.name, linked.type) == ("frontend", "Service")

    relationships = {(r.source, r.type, r.target): r for r in response.relationships}
    for dependency in dependencies:
        edge = relationships[("frontend", "DEPENDS_ON", dependency)]
        assert edge.predicates == ["depends on"] and edge.weight == 1.0
        assert edge.doc_ids == ["ob:component:default/frontend"]
    assert ("frontend", "OWNED_BY", "team-storefront") in relationships
    # Every dependency's own page is among the results and names its owner (catalog facts, not co-occurrence).
    pages = {r.doc_id: r for r in response.results}
    for dependency in dependencies:
        page = pages[f"ob:component:default/{dependency}"]
        assert f"{dependency} is owned by {owners[dependency]}." in page.text
        assert page.entity_path == ["frontend", dependency]
    assert not any("co-occurs" in r.predicates or "mentions" in r.predicates for r in response.relationships)


def test_the_dependencies_owner_edges_are_in_the_response(boutique_index) -> None:
    dependencies = _addr_dependencies(CATALOGS / "online-boutique" / "kubernetes-manifests" / "frontend.yaml")
    owners = _owners()
    relationships = {(r.source, r.type, r.target) for r in boutique_index.query(QUESTION).relationships}
    assert {(d, "OWNED_BY", owners[d]) for d in dependencies} <= relationships


def test_catalog_graph_has_only_catalog_edges_and_typed_nodes(boutique_index) -> None:
    graph = boutique_index.graph
    stats = graph.stats()
    assert stats.entity_types == {"CONCEPT": 1, "Runbook": 1, "Service": 11, "TECHNOLOGY": 1, "Team": 4}
    expected = sum(len(r["triples"]) for r in read_source(catalog(BOUTIQUE, "ob")).extractions.values())
    assert stats.relationship_count == expected  # one edge per catalog fact, none invented
    assert set(stats.relationship_types) == {"DEPENDS_ON", "OWNED_BY", "HAS_RUNBOOK", "RELATED_TO"}
