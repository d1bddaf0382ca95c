"""The GraphStore contract: every implementation must pass these tests.

To add an implementation, add one entry to ``GRAPH_STORE_FACTORIES``: a callable that takes an empty per-test
directory and returns a fresh, empty store. Traversal is the query side's ``spread_activation`` over the store's
``neighbourhoods``, tested on every store so that all of them prove identical traversal. Tests below the "embedded
only" line exercise the SQLite file itself.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from graphrag_pipeline.lib.core.ids import short_id
from graphrag_pipeline.lib.core.models import Entity, EntityNames, Relationship
from graphrag_pipeline.lib.stores.embedded_graph import SCHEMA_VERSION, EmbeddedGraphStore
from graphrag_pipeline.lib.stores.protocols import (
    AskedRelationships,
    GraphStore,
    Neighbourhood,
    ReadAhead,
    Subgraph,
    TraversalHit,
    WalkPlan,
    read_asked_relationships,
)
from graphrag_pipeline.query.traversal import spread_activation, walk
from graphrag_pipeline_tests.contract import bolt_server

GRAPH_STORE_FACTORIES: dict[str, Callable[[Path], GraphStore]] = {
    "embedded": lambda directory: EmbeddedGraphStore(directory / "graph.sqlite"),
    # Neo4jGraphStore on a fresh database of the session's ArcadeDB Bolt server (always runs; fails if it cannot)
    "neo4j-arcadedb": lambda directory: bolt_server.arcadedb_graph_store(),
    # Neo4jGraphStore on the real Neo4j named by NEO4J_URI (skipped with a reason when it is not set)
    "neo4j-real": lambda directory: bolt_server.real_neo4j_graph_store(),
}
GRAPH_STORE_MARKS = {
    "neo4j-arcadedb": [pytest.mark.server, pytest.mark.slow],
    "neo4j-real": [pytest.mark.server],
}


@pytest.fixture(
    params=[pytest.param(name, marks=GRAPH_STORE_MARKS.get(name, [])) for name in sorted(GRAPH_STORE_FACTORIES)]
)
def graph_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[GraphStore]:
    store = GRAPH_STORE_FACTORIES[request.param](tmp_path)
    yield store
    store.close()


def entity(entity_id: str, *, mentions: int = 1, type_: str = "CONCEPT", name: str | None = None) -> Entity:
    return Entity(
        entity_id=entity_id,
        name=name or entity_id.upper(),
        canonical=entity_id,
        type=type_,
        description=f"about {entity_id}",
        mention_count=mentions,
        chunk_ids=(f"chunk-{entity_id}",),
        doc_ids=("doc-1",),
    )


def rel(source: str, target: str, weight: float = 1.0, type_: str = "RELATED_TO") -> Relationship:
    return Relationship(
        relationship_id=f"{source}-{type_}-{target}",
        source_id=source,
        target_id=target,
        type=type_,
        description=f"{source} {type_} {target}",
        weight=weight,
        chunk_ids=("chunk-1",),
        doc_ids=("doc-1",),
    )


def build(store: GraphStore, relationships: list[Relationship], extra_entities: tuple[str, ...] = ()) -> None:
    ids = {r.source_id for r in relationships} | {r.target_id for r in relationships} | set(extra_entities)
    store.upsert_entities([entity(eid) for eid in sorted(ids)])
    store.upsert_relationships(relationships)


def expected_spread(parent: float, decay: float, weight: float, heaviest: float, degree: int) -> float:
    """The documented scoring: parent × decay × (w / heaviest weight of the source) / (1 + log10(source degree))."""
    return parent * decay * (weight / heaviest) / (1 + math.log10(degree))


def by_id(hits: list[TraversalHit]) -> dict[str, TraversalHit]:
    return {hit.entity_id: hit for hit in hits}


def test_implements_protocol(graph_store: GraphStore) -> None:
    assert isinstance(graph_store, GraphStore)


def test_empty_store(graph_store: GraphStore) -> None:
    assert spread_activation(graph_store, {"a": 1.0}, max_hops=2) == []
    assert graph_store.weighted_edges() == []
    assert graph_store.list_entities() == [] and graph_store.list_relationships() == []
    assert graph_store.get_entities(["a"]) == {} and graph_store.relationships_between(["a"]) == []


def test_round_trip_keeps_every_field(graph_store: GraphStore) -> None:
    ada = Entity(
        entity_id="ent-ada",
        name="Ada Lovelace",
        canonical="ada lovelace",
        type="PERSON",
        description="Wrote the first program. Ünïcode ok.",
        mention_count=7,
        chunk_ids=("c2", "c1"),
        doc_ids=("d1",),
        aliases=("Ada", "Countess of Lovelace"),
        title="Augusta Ada King",
    )
    babbage = entity("ent-babbage", type_="PERSON")
    worked = Relationship(
        relationship_id="rel-1",
        source_id="ent-ada",
        target_id="ent-babbage",
        type="RELATED_TO",
        description="worked with",
        weight=2.5,
        chunk_ids=("c1",),
        doc_ids=("d1", "d2"),
        predicates=("worked with", "corresponded with"),
    )
    graph_store.upsert_entities([ada, babbage])
    graph_store.upsert_relationships([worked])

    assert graph_store.get_entities(["ent-ada", "ent-babbage", "ent-missing"]) == {
        "ent-ada": ada,
        "ent-babbage": babbage,
    }
    assert graph_store.get_relationships(["rel-1", "rel-missing"]) == {"rel-1": worked}


def test_reupsert_is_idempotent_and_updates_win(graph_store: GraphStore) -> None:
    relationships = [rel("a", "b"), rel("b", "c")]
    build(graph_store, relationships)
    graph_store.set_chunk_mentions({"c1": ["a", "b"]})
    before = graph_store.stats()

    build(graph_store, relationships)
    graph_store.set_chunk_mentions({"c1": ["a", "b"]})
    assert graph_store.stats() == before

    renamed = Entity(**{**entity("a").to_dict(), "name": "Renamed", "mention_count": 9, "aliases": ("x",)})
    heavier = Relationship(**{**rel("a", "b").to_dict(), "weight": 4.0, "description": "new"})
    graph_store.upsert_entities([renamed])
    graph_store.upsert_relationships([heavier])
    assert graph_store.stats() == before
    assert graph_store.get_entities(["a"])["a"] == renamed
    assert graph_store.get_relationships([heavier.relationship_id])[heavier.relationship_id] == heavier


def test_documents_of_entities_are_the_stored_entities_doc_ids(graph_store: GraphStore) -> None:
    many = Entity(**{**entity("a").to_dict(), "doc_ids": ("docs:one", "docs:two", "docs:three")})
    graph_store.upsert_entities([many, entity("b"), Entity(**{**entity("c").to_dict(), "doc_ids": ()})])
    stored = graph_store.get_entities(["a", "b", "c"])

    assert graph_store.documents_of_entities(["a", "b", "c", "ghost"]) == {
        eid: e.doc_ids for eid, e in stored.items()}
    assert graph_store.documents_of_entities(["a"]) == {"a": ("docs:one", "docs:two", "docs:three")}
    assert graph_store.documents_of_entities([]) == {}


def test_relationship_with_unknown_endpoint_is_rejected(graph_store: GraphStore) -> None:
    graph_store.upsert_entities([entity("a")])
    with pytest.raises(ValueError, match="unknown entities"):
        graph_store.upsert_relationships([rel("a", "a2"), rel("a", "ghost")])
    assert graph_store.all_relationship_ids() == set()


def test_relationship_weight_must_be_positive(graph_store: GraphStore) -> None:
    graph_store.upsert_entities([entity("a"), entity("b")])
    for weight in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="weight"):
            graph_store.upsert_relationships([rel("a", "b", weight=weight)])


def test_mentions_of_unknown_entities_are_rejected(graph_store: GraphStore) -> None:
    graph_store.upsert_entities([entity("a")])
    with pytest.raises(ValueError, match="unknown entities"):
        graph_store.set_chunk_mentions({"c1": ["a", "ghost"]})
    assert graph_store.entities_of_chunks(["c1"]) == {}


def test_delete_entities_cascades(graph_store: GraphStore) -> None:
    build(graph_store, [rel("a", "b"), rel("b", "c"), rel("c", "a")])
    graph_store.set_chunk_mentions({"c1": ["a", "b"], "c2": ["b", "c"]})
    spread_activation(graph_store, {"a": 1.0}, max_hops=2)

    graph_store.delete_entities(["b"])

    assert graph_store.all_entity_ids() == {"a", "c"}
    assert graph_store.all_relationship_ids() == {"c-RELATED_TO-a"}
    assert graph_store.entities_of_chunks(["c1", "c2"]) == {"c1": ["a"], "c2": ["c"]}
    assert graph_store.chunks_of_entities(["b"]) == {}
    assert {hit.entity_id for hit in spread_activation(graph_store, {"a": 1.0}, max_hops=2)} == {"a", "c"}


def test_delete_relationships(graph_store: GraphStore) -> None:
    build(graph_store, [rel("a", "b"), rel("b", "c")])
    spread_activation(graph_store, {"a": 1.0}, max_hops=2)
    graph_store.delete_relationships(["a-RELATED_TO-b", "never-existed"])
    assert graph_store.all_relationship_ids() == {"b-RELATED_TO-c"}
    assert graph_store.all_entity_ids() == {"a", "b", "c"}
    assert [hit.entity_id for hit in spread_activation(graph_store, {"a": 1.0}, max_hops=2)] == ["a"]


def test_chunk_mentions_replace_and_delete(graph_store: GraphStore) -> None:
    graph_store.upsert_entities([entity(eid) for eid in ("a", "b", "c")])
    graph_store.set_chunk_mentions({"c1": ["b", "a"], "c2": ["a"]})
    assert graph_store.entities_of_chunks(["c1", "c2", "c9"]) == {"c1": ["a", "b"], "c2": ["a"]}
    assert graph_store.chunks_of_entities(["a", "b", "c"]) == {"a": ["c1", "c2"], "b": ["c1"]}

    graph_store.set_chunk_mentions({"c1": ["c"]})
    assert graph_store.entities_of_chunks(["c1", "c2"]) == {"c1": ["c"], "c2": ["a"]}

    graph_store.set_chunk_mentions({"c2": []})
    assert graph_store.entities_of_chunks(["c1", "c2"]) == {"c1": ["c"]}

    graph_store.delete_chunks(["c1"])
    assert graph_store.entities_of_chunks(["c1", "c2"]) == {}
    assert graph_store.all_entity_ids() == {"a", "b", "c"}


def neighbourhood_graph(store: GraphStore) -> None:
    """``a``: a heaviest tie of another type, weight ties broken by neighbour id and by relationship id (a parallel
    pair to ``b``), an incoming relationship, a self-loop heavier than everything; ``alone`` has no relationships."""
    build(
        store,
        [
            rel("a", "b", 2.0),
            rel("a", "b", 2.0, type_="DEPENDS_ON"),
            rel("c", "a", 2.0),
            rel("a", "d", 5.0, type_="OWNED_BY"),
            rel("a", "e", 1.0),
            rel("a", "a", 9.0),
            rel("d", "e", 3.0),
        ],
        extra_entities=("alone",),
    )


A_EDGES = (
    ("d", "a-OWNED_BY-d", 5.0),
    ("b", "a-DEPENDS_ON-b", 2.0),
    ("b", "a-RELATED_TO-b", 2.0),
    ("c", "c-RELATED_TO-a", 2.0),
    ("e", "a-RELATED_TO-e", 1.0),
)


def test_neighbourhoods_order_ties_and_counts(graph_store: GraphStore) -> None:
    neighbourhood_graph(graph_store)

    hoods = graph_store.neighbourhoods(["a", "ghost", "e", "alone", "a"])

    assert hoods == {
        "a": Neighbourhood(degree=5, heaviest=5.0, edges=A_EDGES, complete=True),  # the self-loop counts nowhere
        "e": Neighbourhood(2, 3.0, (("d", "d-RELATED_TO-e", 3.0), ("a", "a-RELATED_TO-e", 1.0)), complete=True),
        "alone": Neighbourhood(0, 0.0, (), complete=True),
    }
    assert graph_store.neighbourhoods([]) == {} and graph_store.neighbourhoods(["ghost"]) == {}


def test_neighbourhoods_type_filter_lists_only_those_types(graph_store: GraphStore) -> None:
    neighbourhood_graph(graph_store)

    related = graph_store.neighbourhoods(["a", "alone"], relationship_types=["RELATED_TO", "NOT_A_TYPE"])

    # Degree and heaviest weight still count every relationship: spreading is scored against all of them.
    related_edges = tuple(edge for edge in A_EDGES if "RELATED_TO" in edge[1])
    assert related["a"] == Neighbourhood(5, 5.0, related_edges, complete=True)
    assert related["alone"] == Neighbourhood(0, 0.0, (), complete=True)
    for no_types in ([], ["NOT_A_TYPE"]):
        assert graph_store.neighbourhoods(["a"], relationship_types=no_types) == {
            "a": Neighbourhood(5, 5.0, (), complete=True)
        }


def test_relationships_of_are_the_relationships_the_neighbourhoods_list(graph_store: GraphStore) -> None:
    neighbourhood_graph(graph_store)

    for entity_ids in (["a"], ["a", "e", "ghost"], ["alone"], []):
        for types in (None, ["RELATED_TO"], ["DEPENDS_ON", "OWNED_BY", "NOT_A_TYPE"], []):
            listed = {rid for hood in graph_store.neighbourhoods(entity_ids, types).values() for _, rid, _ in hood.edges}
            assert graph_store.relationships_of(entity_ids, types) == graph_store.get_relationships(listed)
    # Both directions, every field, and no self-loop.
    assert set(graph_store.relationships_of(["a"])) == {rid for _, rid, _ in A_EDGES}
    assert graph_store.relationships_of(["a"], ["OWNED_BY"]) == graph_store.get_relationships(["a-OWNED_BY-d"])
    assert graph_store.relationships_of(["a"], ["OWNED_BY"])["a-OWNED_BY-d"].target_id == "d"
    # Without provenance: the same relationships and fields, but no chunk ids, document ids or predicates.
    for entity_ids, types in ((["a", "e"], None), (["a"], ["OWNED_BY", "DEPENDS_ON"])):
        whole = graph_store.relationships_of(entity_ids, types)
        assert any(r.chunk_ids and r.doc_ids for r in whole.values())
        assert graph_store.relationships_of(entity_ids, types, provenance=False) == {
            rid: dataclasses.replace(r, chunk_ids=(), doc_ids=(), predicates=()) for rid, r in whole.items()}


def test_neighbourhoods_limit_and_complete_flag(graph_store: GraphStore) -> None:
    neighbourhood_graph(graph_store)

    def listed(limit: int, types: list[str] | None = None) -> tuple[tuple[tuple[str, str, float], ...], bool]:
        hood = graph_store.neighbourhoods(["a"], relationship_types=types, limit=limit)["a"]
        assert (hood.degree, hood.heaviest) == (5, 5.0)
        return hood.edges, hood.complete

    assert listed(2) == (A_EDGES[:2], False)
    assert listed(4) == (A_EDGES[:4], False)
    assert listed(5) == (A_EDGES, True)
    assert listed(50) == (A_EDGES, True)
    assert listed(0) == ((), False)
    related_edges = tuple(edge for edge in A_EDGES if "RELATED_TO" in edge[1])
    assert listed(2, ["RELATED_TO"]) == (related_edges[:2], False)
    assert listed(3, ["RELATED_TO"]) == (related_edges, True)
    assert graph_store.neighbourhoods(["alone"], limit=0)["alone"].complete
    with pytest.raises(ValueError):
        graph_store.neighbourhoods(["a"], limit=-1)


def test_neighbourhoods_see_later_writes(graph_store: GraphStore) -> None:
    build(graph_store, [rel("a", "b")])
    assert graph_store.neighbourhoods(["a"])["a"].edges == (("b", "a-RELATED_TO-b", 1.0),)

    build(graph_store, [rel("c", "a", 3.0)])
    graph_store.delete_relationships(["a-RELATED_TO-b"])

    assert graph_store.neighbourhoods(["a"]) == {"a": Neighbourhood(1, 3.0, (("c", "c-RELATED_TO-a", 3.0),), True)}


class CountingGraph:
    """A store whose neighbourhood reads are recorded as (method, entity ids asked for, limit, ids answered)."""

    def __init__(self, store: GraphStore) -> None:
        self.store = store
        self.calls: list[tuple[str, list[str], int | None, set[str]]] = []

    def neighbourhoods_ahead(self, seeds: dict[str, float], plan: WalkPlan) -> ReadAhead:
        found = self.store.neighbourhoods_ahead(seeds, plan)
        self.calls.append(("ahead", list(seeds), plan.limit, set(found.neighbourhoods)))
        return found

    def neighbourhoods(
        self, entity_ids: Iterable[str], relationship_types: Sequence[str] | None = None, limit: int | None = None
    ) -> dict[str, Neighbourhood]:
        listed = list(entity_ids)
        found = self.store.neighbourhoods(listed, relationship_types, limit)
        self.calls.append(("hop", listed, limit, set(found)))
        return found


def test_traversal_reads_ahead_then_only_what_is_missing_once_per_hop(graph_store: GraphStore) -> None:
    build(graph_store, [rel("a", "b"), rel("b", "c"), rel("a", "x"), rel("c", "d")])
    counting = CountingGraph(graph_store)

    hits = spread_activation(counting, {"a": 1.0, "ghost": 1.0}, max_hops=3, fanout=5)  # type: ignore[arg-type]

    assert [hit.entity_id for hit in hits][:3] == ["a", "b", "x"] and by_id(hits)["d"].hops == 3
    assert counting.calls[0][:2] == ("ahead", ["a", "ghost"]) and {"a"} <= counting.calls[0][3]
    assert len(counting.calls) <= 3  # the plan, then at most one read per later hop
    read_before: set[str] = set()
    for _, asked, _, answered in counting.calls:
        assert not read_before & set(asked)  # nothing is read twice
        read_before |= answered
    assert read_before >= {"a", "b", "x", "c"}  # every entity expanded (d is reached at the last hop, not expanded)
    assert {limit for _, _, limit, _ in counting.calls} == {2 * 5 + 3 + 1}



def test_a_walk_reads_no_neighbourhood_of_what_passes_on_less_than_min_score(graph_store: GraphStore) -> None:
    # From s, a is reached with 0.5 / (1 + log10 2) = 0.38 and b, five times lighter, with 0.077: kept (over 0.05),
    # but half of it is under 0.05, so nothing b passes on could be kept. Its neighbourhood is never read; its
    # chunks still are, with the walk's first read, by a store that reads ahead.
    build(graph_store, [rel("s", "a", 5.0), rel("s", "b", 1.0), rel("a", "c", 5.0), rel("b", "d", 1.0),
                        rel("b", "e", 1.0)])
    graph_store.set_chunk_mentions({"k1": ["b"], "k2": ["a", "c"]})
    counting = CountingGraph(graph_store)

    walked = walk(counting, {"s": 1.0}, max_hops=2, min_score=0.05, chunks_up_to=5)  # type: ignore[arg-type]

    scores = {hit.entity_id: hit.score for hit in walked.hits}
    assert set(scores) == {"s", "a", "b", "c"} and scores["b"] == pytest.approx(expected_spread(1, 0.5, 1, 5, 2))
    assert scores["b"] >= 0.05 > scores["b"] * 0.5
    read = set().union(*(answered for _, _, _, answered in counting.calls))
    assert "a" in read and "b" not in read  # a is expanded (c is kept from it); b is not
    if walked.chunks_read:
        assert walked.chunks_read["b"] == ["k1"] and walked.chunks_read["c"] == ["k2"]

def test_the_chunks_a_walk_reads_ahead_are_those_of_entities_few_chunks_mention_as_chunks_of_entities_lists_them(
    graph_store: GraphStore,
) -> None:
    build(graph_store, [rel("a", "b", 2.0), rel("b", "c"), rel("a", "hub"), rel("c", "d"), rel("x", "y")])
    graph_store.upsert_entities([entity("hub", mentions=3)])
    graph_store.set_chunk_mentions({"k1": ["a", "b"], "k2": ["hub", "b"], "k3": ["hub"], "k4": ["c", "hub"],
                                    "k5": ["y"]})

    walked = walk(graph_store, {"a": 1.0}, max_hops=2, chunks_up_to=2)

    assert walked.hits == spread_activation(graph_store, {"a": 1.0}, max_hops=2)
    assert set(walked.chunks_read) <= {"a", "b", "c", "d"}  # no hub (3 chunks), nothing the walk cannot reach
    listed = graph_store.chunks_of_entities(list(walked.chunks_read))
    assert walked.chunks_read == {entity_id: listed.get(entity_id, []) for entity_id in walked.chunks_read}
    assert walk(graph_store, {"a": 1.0}, max_hops=2).chunks_read == {}  # not asked for


def test_a_walk_reads_the_asked_relationships_along_the_asked_steps_and_no_further(graph_store: GraphStore) -> None:
    # Who depends on payment, and who owns them: payment's dependents and owner are one step away along the asked
    # (type, direction) pairs; what it depends on (db) is no step, nor is RELATED_TO, nor an owner's owner at depth 2.
    build(graph_store, [
        rel("checkout", "payment", type_="DEPENDS_ON"), rel("frontend", "checkout", type_="DEPENDS_ON"),
        rel("checkout", "team-a", type_="OWNED_BY"), rel("payment", "team-p", type_="OWNED_BY"),
        rel("payment", "db", type_="DEPENDS_ON"), rel("db", "team-d", type_="OWNED_BY"),
        rel("team-a", "org", type_="OWNED_BY"), rel("checkout", "cart", 2.0), rel("payment", "payment", 9.0, "OWNED_BY"),
    ])
    steps = (("DEPENDS_ON", "incoming"), ("OWNED_BY", "outgoing"))
    first = {"checkout-DEPENDS_ON-payment", "payment-OWNED_BY-team-p", "payment-DEPENDS_ON-db"}
    second = first | {"frontend-DEPENDS_ON-checkout", "checkout-OWNED_BY-team-a"}
    expected = {1: first, 2: second, 3: second | {"team-a-OWNED_BY-org"}}
    plain = walk(graph_store, {"payment": 1.0}, max_hops=2, chunks_up_to=5)

    for depth, relationship_ids in expected.items():
        asked = AskedRelationships(("ghost", "payment"), steps, depth)
        assert read_asked_relationships(graph_store, asked) == graph_store.get_relationships(relationship_ids)
        for max_hops, chunks_up_to in ((2, 5), (2, 0), (0, 0)):
            walked = walk(graph_store, {"payment": 1.0}, max_hops=max_hops, chunks_up_to=chunks_up_to, asked=asked)
            assert walked.asked == graph_store.get_relationships(relationship_ids)
        assert walk(graph_store, {"payment": 1.0}, max_hops=2, chunks_up_to=5, asked=asked) == dataclasses.replace(
            plain, asked=walked.asked)  # asking changes nothing else the walk reads
    assert walk(graph_store, {"payment": 1.0}, max_hops=2).asked == {}
    assert walk(graph_store, {"payment": 1.0}, max_hops=2, asked=AskedRelationships(("ghost",), steps, 2)).asked == {}
    only_owners = AskedRelationships(("payment",), (("OWNED_BY", "outgoing"),), 2)
    assert set(walk(graph_store, {"payment": 1.0}, max_hops=1, asked=only_owners).asked) == {"payment-OWNED_BY-team-p"}



def test_asked_relationships_are_read_together_as_each_would_be_read_alone(graph_store: GraphStore) -> None:
    # The incident context of payment: its dependents' walk and its dependencies' walk, each reading the owners of
    # every service it may reach (``also``) without stepping along them.
    build(graph_store, [
        rel("checkout", "payment", type_="DEPENDS_ON"), rel("frontend", "checkout", type_="DEPENDS_ON"),
        rel("checkout", "team-a", type_="OWNED_BY"), rel("payment", "team-p", type_="OWNED_BY"),
        rel("payment", "db", type_="DEPENDS_ON"), rel("db", "team-d", type_="OWNED_BY"),
        rel("team-a", "org", type_="OWNED_BY"), rel("checkout", "cart", 2.0),
        rel("frontend", "team-f", type_="OWNED_BY"),
    ])
    owners = ("OWNED_BY",)
    dependents = AskedRelationships(("payment",), (("DEPENDS_ON", "incoming"),), 2, also=owners)
    dependencies = AskedRelationships(("ghost", "payment"), (("DEPENDS_ON", "outgoing"),), 2, also=owners)
    assert set(read_asked_relationships(graph_store, dependents)) == {
        "checkout-DEPENDS_ON-payment", "payment-OWNED_BY-team-p", "payment-DEPENDS_ON-db",  # payment's, one hop
        "frontend-DEPENDS_ON-checkout", "checkout-OWNED_BY-team-a"}  # checkout's; no step along an owner to org
    assert set(read_asked_relationships(graph_store, dependencies)) == {
        "checkout-DEPENDS_ON-payment", "payment-OWNED_BY-team-p", "payment-DEPENDS_ON-db", "db-OWNED_BY-team-d"}
    together = graph_store.asked_relationships([dependents, dependencies])
    assert together == {**read_asked_relationships(graph_store, dependents),
                        **read_asked_relationships(graph_store, dependencies)}
    assert together["checkout-OWNED_BY-team-a"].doc_ids  # with provenance, which the caller's access rule reads
    deeper = dataclasses.replace(dependents, depth=3)
    assert graph_store.asked_relationships([deeper]) == read_asked_relationships(graph_store, deeper)
    assert "frontend-OWNED_BY-team-f" in graph_store.asked_relationships([deeper])
    assert graph_store.asked_relationships([]) == {}
    assert graph_store.asked_relationships([AskedRelationships(("ghost",), dependents.steps, 2)]) == {}

def test_traversal_refetches_a_neighbourhood_whose_list_ran_out(graph_store: GraphStore) -> None:
    # Thirty heavy parallel relationships to one neighbour fill any limited list before the second neighbour.
    parallel = [rel("s", "x", 5.0, type_=f"PARALLEL_{i:02d}") for i in range(30)]
    build(graph_store, [*parallel, rel("s", "y", 1.0)])
    counting = CountingGraph(graph_store)

    hits = spread_activation(counting, {"s": 1.0}, max_hops=1, fanout=2)  # type: ignore[arg-type]

    assert [hit.entity_id for hit in hits] == ["s", "x", "y"]
    assert by_id(hits)["y"].score == pytest.approx(expected_spread(1.0, 0.5, 1.0, 5.0, degree=31))
    assert len(counting.calls) == 2 and counting.calls[1][:3] == ("hop", ["s"], None)  # the refetch lists all


def test_traversal_respects_max_hops_and_decays(graph_store: GraphStore) -> None:
    build(graph_store, [rel("a", "b"), rel("b", "c"), rel("c", "d")])

    hits = by_id(spread_activation(graph_store, {"a": 1.0}, max_hops=2, decay=0.5))

    assert set(hits) == {"a", "b", "c"}
    assert hits["a"] == TraversalHit("a", 0, 1.0, ("a",), ())
    assert hits["b"].hops == 1 and hits["c"].hops == 2
    assert hits["b"].score == pytest.approx(expected_spread(1.0, 0.5, 1.0, 1.0, degree=1))
    assert hits["c"].score == pytest.approx(expected_spread(hits["b"].score, 0.5, 1.0, 1.0, degree=2))
    assert hits["c"].score < hits["b"].score < hits["a"].score
    assert [hit.entity_id for hit in spread_activation(graph_store, {"a": 1.0}, max_hops=0)] == ["a"]


def test_traversal_keeps_best_path(graph_store: GraphStore) -> None:
    build(graph_store, [rel("s", "x", weight=0.1), rel("s", "y", weight=10.0), rel("y", "x", weight=10.0)])

    hits = by_id(spread_activation(graph_store, {"s": 1.0}, max_hops=2))

    via_y = expected_spread(expected_spread(1.0, 0.5, 10.0, 10.0, degree=2), 0.5, 10.0, 10.0, degree=2)
    assert via_y > expected_spread(1.0, 0.5, 0.1, 10.0, degree=2)
    assert hits["x"].hops == 2
    assert hits["x"].score == pytest.approx(via_y)
    assert hits["x"].path == ("s", "y", "x")
    assert hits["x"].via_relationships == ("s-RELATED_TO-y", "y-RELATED_TO-x")

    one_hop = by_id(spread_activation(graph_store, {"s": 1.0}, max_hops=1))
    assert one_hop["x"].path == ("s", "x") and one_hop["x"].hops == 1


def test_traversal_suppresses_hubs(graph_store: GraphStore) -> None:
    leaves = [rel("hub", f"leaf{i:02d}") for i in range(49)]
    build(graph_store, [rel("s", "hub"), rel("s", "loner"), rel("loner", "friend"), *leaves])

    hits = by_id(spread_activation(graph_store, {"s": 1.0}, max_hops=2))

    # Both are one relationship away from the seed; what a hub passes on is damped by its degree.
    assert hits["hub"].score == pytest.approx(hits["loner"].score)
    assert hits["leaf00"].score < hits["friend"].score
    assert hits["hub"].score == pytest.approx(expected_spread(1.0, 0.5, 1.0, 1.0, degree=2))
    assert hits["leaf00"].score == pytest.approx(expected_spread(hits["hub"].score, 0.5, 1.0, 1.0, degree=50))
    assert hits["friend"].score == pytest.approx(expected_spread(hits["loner"].score, 0.5, 1.0, 1.0, degree=2))


def test_traversal_fanout_takes_heaviest_neighbours(graph_store: GraphStore) -> None:
    build(graph_store, [rel("s", f"n{i}", weight=float(i)) for i in range(1, 11)])

    hits = spread_activation(graph_store, {"s": 1.0}, max_hops=1, fanout=3)

    assert [hit.entity_id for hit in hits] == ["s", "n10", "n9", "n8"]


def test_traversal_relationship_type_filter(graph_store: GraphStore) -> None:
    build(
        graph_store,
        [
            rel("svc", "db", type_="DEPENDS_ON"),
            rel("svc", "team", type_="OWNED_BY"),
            rel("db", "team2", type_="OWNED_BY"),
            rel("db", "cache", type_="DEPENDS_ON"),
        ],
    )

    hits = spread_activation(graph_store, {"svc": 1.0}, max_hops=2, relationship_types=["DEPENDS_ON"])

    assert {hit.entity_id for hit in hits} == {"svc", "db", "cache"}
    for no_types in ([], ["NOT_A_TYPE"]):
        only_seed = spread_activation(graph_store, {"svc": 1.0}, max_hops=2, relationship_types=no_types)
        assert [hit.entity_id for hit in only_seed] == ["svc"]


def test_traversal_is_undirected_and_deterministic(graph_store: GraphStore) -> None:
    build(graph_store, [rel(f"p{i}", "s") for i in (3, 1, 2)] + [rel("p1", "q"), rel("q", "p2"), rel("p3", "q")])

    first = spread_activation(graph_store, {"s": 1.0}, max_hops=2)

    assert [hit.entity_id for hit in first[:4]] == ["s", "p1", "p2", "p3"]  # equal scores: ties by id
    assert [hit.score for hit in first] == sorted((hit.score for hit in first), reverse=True)
    assert by_id(first)["q"].path == ("s", "p1", "q")
    assert all(spread_activation(graph_store, {"s": 1.0}, max_hops=2) == first for _ in range(3))


def test_traversal_seeds(graph_store: GraphStore) -> None:
    build(graph_store, [rel("a", "b"), rel("b", "c")], extra_entities=("alone",))

    hits = by_id(spread_activation(graph_store, {"a": 1.0, "c": 0.01, "alone": 0.5, "ghost": 1.0}, max_hops=2))

    assert set(hits) == {"a", "b", "c", "alone"}  # unknown seeds are ignored
    # A weak seed reached with more activation from a strong one takes the better path.
    assert hits["c"].hops == 2 and hits["c"].path == ("a", "b", "c") and hits["c"].score > 0.01
    assert hits["alone"].score == 0.5 and hits["alone"].hops == 0
    assert hits["b"].path == ("a", "b")

    strong = by_id(spread_activation(graph_store, {"a": 1.0, "c": 0.9}, max_hops=2))
    assert strong["c"] == TraversalHit("c", 0, 0.9, ("c",), ())  # a seed stronger than any path keeps its own


def test_traversal_min_score_drops_weak_reaches_exactly(graph_store: GraphStore) -> None:
    leaves = [rel("hub", f"leaf{i:02d}") for i in range(30)]
    build(graph_store, [rel("s", "hub"), rel("s", "loner"), rel("loner", "friend"), rel("x", "y"), *leaves])
    seeds = {"s": 1.0, "x": 0.01}
    unbounded = spread_activation(graph_store, seeds, max_hops=3, fanout=10)
    floor = by_id(unbounded)["friend"].score  # leaves (behind the hub) score less than the loner's friend

    bounded = spread_activation(graph_store, seeds, max_hops=3, fanout=10, min_score=floor)

    assert bounded == [hit for hit in unbounded if hit.score >= floor or hit.hops == 0]
    assert {"x", "friend"} <= {hit.entity_id for hit in bounded}  # a weak seed is still a hit
    assert not {hit.entity_id for hit in bounded} & {"y", "leaf00"}


@pytest.mark.parametrize(
    "kwargs",
    [{"max_hops": -1}, {"max_hops": 1, "decay": 0.0}, {"max_hops": 1, "decay": 1.5}, {"max_hops": 1, "fanout": 0},
     {"max_hops": 1, "min_score": -0.1}],
)
def test_traversal_rejects_bad_parameters(graph_store: GraphStore, kwargs: dict) -> None:
    build(graph_store, [rel("a", "b")])
    with pytest.raises(ValueError):
        spread_activation(graph_store, {"a": 1.0}, **kwargs)
    with pytest.raises(ValueError):
        spread_activation(graph_store, {"a": float("nan")}, max_hops=1)


def test_traversal_sees_later_writes(graph_store: GraphStore) -> None:
    build(graph_store, [rel("a", "b")])
    assert {hit.entity_id for hit in spread_activation(graph_store, {"a": 1.0}, max_hops=2)} == {"a", "b"}

    build(graph_store, [rel("b", "c", weight=3.0)])
    graph_store.upsert_relationships([rel("a", "b", weight=5.0)])

    hits = by_id(spread_activation(graph_store, {"a": 1.0}, max_hops=2))
    assert set(hits) == {"a", "b", "c"}
    assert hits["b"].score == pytest.approx(expected_spread(1.0, 0.5, 5.0, 5.0, degree=1))


def test_relationships_between(graph_store: GraphStore) -> None:
    build(graph_store, [rel("a", "b", 1.0), rel("b", "c", 3.0), rel("c", "a", 2.0), rel("c", "d", 9.0)])

    between = graph_store.relationships_between(["a", "b", "c"])
    assert [r.relationship_id for r in between] == ["b-RELATED_TO-c", "c-RELATED_TO-a", "a-RELATED_TO-b"]
    assert [r.relationship_id for r in graph_store.relationships_between(["a", "b", "c"], limit=1)] == [
        "b-RELATED_TO-c"
    ]
    assert graph_store.relationships_between(["a", "d"]) == []


def test_answer_subgraph_is_the_named_and_mentioned_entities_with_the_relationships_between_them(
    graph_store: GraphStore,
) -> None:
    build(graph_store, [rel("a", "b", 1.0), rel("b", "c", 3.0), rel("c", "a", 2.0), rel("c", "d", 9.0),
                        rel("d", "e", 4.0), rel("a", "e", 5.0)])
    graph_store.set_chunk_mentions({"c1": ["c", "d"], "c2": ["e"]})

    def without_chunk_ids(entity_ids: Iterable[str]) -> dict[str, Entity]:
        return {eid: dataclasses.replace(e, chunk_ids=()) for eid, e in graph_store.get_entities(entity_ids).items()}

    def expected(wanted: set[str], limit: int) -> Subgraph:
        return Subgraph(without_chunk_ids(wanted), graph_store.relationships_between(wanted, limit))

    # c1 mentions c and d; only c is among the reached, and e's chunk is not in the answer
    subgraph = graph_store.answer_subgraph(["a", "b"], ["c1", "unknown-chunk"], ["c", "e", "b"], limit=50)
    assert set(subgraph.entities) == {"a", "b", "c"}
    assert [r.relationship_id for r in subgraph.relationships] == ["b-RELATED_TO-c", "c-RELATED_TO-a",
                                                                   "a-RELATED_TO-b"]
    assert subgraph == expected({"a", "b", "c"}, 50)
    assert graph_store.answer_subgraph(["a", "b"], ["c1", "c2"], ["c", "d", "e"], limit=2) == expected(
        {"a", "b", "c", "d", "e"}, 2)
    assert graph_store.answer_subgraph(["a", "ghost"], [], ["c"], limit=50) == expected({"a"}, 50)
    assert graph_store.answer_subgraph(["a", "b"], ["c1"], [], limit=0) == Subgraph(without_chunk_ids(["a", "b"]), [])
    assert graph_store.answer_subgraph([], [], []) == Subgraph({}, [])
    with pytest.raises(ValueError):
        graph_store.answer_subgraph(["a"], [], [], limit=-1)


def test_stats(graph_store: GraphStore) -> None:
    assert graph_store.stats().entity_count == 0
    graph_store.upsert_entities([entity("a", type_="PERSON"), entity("b", type_="PERSON"), entity("c")])
    graph_store.upsert_relationships([rel("a", "b", type_="KNOWS"), rel("b", "c"), rel("a", "c")])
    graph_store.set_chunk_mentions({"c1": ["a"], "c2": ["a", "b"]})

    stats = graph_store.stats()

    assert (stats.entity_count, stats.relationship_count, stats.chunk_count) == (3, 3, 2)
    assert stats.entity_types == {"PERSON": 2, "CONCEPT": 1}
    assert stats.relationship_types == {"KNOWS": 1, "RELATED_TO": 2}


def test_listing_pages_and_orders(graph_store: GraphStore) -> None:
    graph_store.upsert_entities(
        [entity("e1", mentions=5, name="Delta"), entity("e2", mentions=9, name="Bravo"),
         entity("e3", mentions=5, name="Alpha"), entity("e4", mentions=1, name="Charlie")]
    )
    graph_store.upsert_relationships([rel("e1", "e2", 2.0), rel("e2", "e3", 7.0), rel("e1", "e3", 2.0)])

    by_mentions = [e.name for e in graph_store.list_entities(limit=10)]
    assert by_mentions == ["Bravo", "Alpha", "Delta", "Charlie"]
    assert [e.name for e in graph_store.list_entities(offset=1, limit=2)] == ["Alpha", "Delta"]
    assert [e.name for e in graph_store.list_entities(limit=10, order_by="name")] == [
        "Alpha", "Bravo", "Charlie", "Delta"
    ]
    assert graph_store.list_entities(offset=4) == []
    with pytest.raises(ValueError):
        graph_store.list_entities(order_by="degree")

    assert [r.relationship_id for r in graph_store.list_relationships()] == [
        "e2-RELATED_TO-e3", "e1-RELATED_TO-e2", "e1-RELATED_TO-e3"
    ]
    assert [r.relationship_id for r in graph_store.list_relationships(offset=2, limit=5)] == ["e1-RELATED_TO-e3"]
    assert graph_store.all_entity_ids() == {"e1", "e2", "e3", "e4"}
    assert graph_store.all_relationship_ids() == {"e1-RELATED_TO-e2", "e2-RELATED_TO-e3", "e1-RELATED_TO-e3"}


def test_entity_names_page_by_id_and_project_the_whole_entities(graph_store: GraphStore) -> None:
    entities = [entity(f"e{i:02d}", mentions=i, name=f"Name {i}") for i in range(12)]
    entities.append(Entity("e99", "Ledger Service", "ledger service", "Service", "", 3, ("c1",), ("d1",),
                           aliases=("ledger", "LedgerSvc")))
    graph_store.upsert_entities(entities)

    pages = [graph_store.list_entity_names(offset=offset, limit=5) for offset in (0, 5, 10, 15)]

    assert [len(page) for page in pages] == [5, 5, 3, 0]
    names = [n for page in pages for n in page]
    assert [n.entity_id for n in names] == sorted(e.entity_id for e in entities)
    assert names == [EntityNames(e.entity_id, e.name, e.canonical, e.aliases, e.mention_count)
                     for e in sorted(entities, key=lambda e: e.entity_id)]
    assert graph_store.list_entity_names(limit=0) == []


def test_weighted_edges_sum_parallel_relationships(graph_store: GraphStore) -> None:
    build(
        graph_store,
        [
            rel("a", "b", 1.0),
            rel("b", "a", 2.0, type_="DEPENDS_ON"),
            rel("a", "b", 0.5, type_="OWNED_BY"),
            rel("b", "c", 4.0),
            rel("c", "c", 9.0),
        ],
    )

    assert sorted(graph_store.weighted_edges()) == [("a", "b", 3.5), ("b", "c", 4.0)]
    # Around some entities: the edges with an end among them, each once however many of its ends are.
    assert graph_store.weighted_edges(around=["c"]) == [("b", "c", 4.0)]
    assert graph_store.weighted_edges(around=["b", "a", "c"]) == [("a", "b", 3.5), ("b", "c", 4.0)]
    assert graph_store.weighted_edges(around=["a", "unknown"]) == [("a", "b", 3.5)]
    assert graph_store.weighted_edges(around=[]) == []


def test_concurrent_traversals_and_reads(graph_store: GraphStore) -> None:
    build(graph_store, [rel(f"n{i}", f"n{i + 1}") for i in range(200)])
    expected = spread_activation(graph_store, {"n0": 1.0}, max_hops=3)
    errors: list[BaseException] = []
    results: list[list[TraversalHit]] = []

    def reader() -> None:
        try:
            for _ in range(20):
                results.append(spread_activation(graph_store, {"n0": 1.0}, max_hops=3))
                assert len(graph_store.get_entities([f"n{i}" for i in range(50)])) == 50
        except BaseException as error:  # surfaced to the main thread below
            errors.append(error)

    def writer() -> None:
        try:
            for i in range(20):
                graph_store.upsert_entities([entity(f"extra{i}")])
                graph_store.upsert_relationships([rel("n150", f"extra{i}")])
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=reader) for _ in range(4)] + [threading.Thread(target=writer)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert len(results) == 80 and all(result == expected for result in results)


# -- embedded only -------------------------------------------------------------------------------------------------


def test_embedded_reopen_keeps_data(tmp_path: Path) -> None:
    path = tmp_path / "graph.sqlite"
    with EmbeddedGraphStore(path) as store:
        build(store, [rel("a", "b")])
        store.set_chunk_mentions({"c1": ["a"]})
    with EmbeddedGraphStore(path) as store:
        assert store.all_relationship_ids() == {"a-RELATED_TO-b"}
        assert store.entities_of_chunks(["c1"]) == {"c1": ["a"]}


def test_embedded_read_only_sees_writer_and_refuses_writes(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "graph.sqlite"
    with EmbeddedGraphStore(path) as writer:
        build(writer, [rel("a", "b")])
        with EmbeddedGraphStore(path, read_only=True) as reader:
            assert {hit.entity_id for hit in spread_activation(reader, {"a": 1.0}, max_hops=2)} == {"a", "b"}

            build(writer, [rel("b", "c")])
            writer.delete_relationships(["a-RELATED_TO-b"])
            build(writer, [rel("a", "d")])

            assert {hit.entity_id for hit in spread_activation(reader, {"a": 1.0}, max_hops=2)} == {"a", "d"}
            assert reader.get_entities(["c"])["c"] == entity("c")
            with pytest.raises(PermissionError):
                reader.upsert_entities([entity("z")])
            with pytest.raises(PermissionError):
                reader.delete_entities(["a"])
    with EmbeddedGraphStore(path, read_only=True) as reopened:
        assert "z" not in reopened.all_entity_ids()


def test_embedded_reader_answers_chunks_of_entities_as_the_file_holds_them_after_each_commit(tmp_path: Path) -> None:
    """A reader keeps the mentions in memory: each answer is the writer's, sorted, whatever was committed since."""
    path = tmp_path / "graph.sqlite"
    with EmbeddedGraphStore(path) as writer, EmbeddedGraphStore(path, read_only=True) as reader:
        writer.upsert_entities([entity(eid) for eid in ("a", "b", "c")])
        writer.set_chunk_mentions({"c9": ["a"], "c10": ["a", "b"], "c2": ["a", "c"]})
        asked = ["a", "b", "c", "unknown", "a"]
        assert reader.chunks_of_entities(asked) == writer.chunks_of_entities(asked) == {
            "a": ["c10", "c2", "c9"], "b": ["c10"], "c": ["c2"]}
        for change in (lambda: writer.set_chunk_mentions({"c10": ["c"], "c3": ["b"]}),
                       lambda: writer.delete_chunks(["c2"]),
                       lambda: writer.delete_entities(["a"]),
                       lambda: writer.set_chunk_mentions({"c3": []})):
            change()
            assert reader.chunks_of_entities(asked) == writer.chunks_of_entities(asked)
        assert reader.chunks_of_entities(asked) == {"c": ["c10"]}


def test_embedded_read_only_needs_existing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        EmbeddedGraphStore(tmp_path / "missing.sqlite", read_only=True)


def _stored_descriptions(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return sorted(row[0] for row in conn.execute("SELECT description FROM relationship_descriptions"))


def test_embedded_stores_a_shared_description_once_while_a_relationship_names_it(tmp_path: Path) -> None:
    path = tmp_path / "graph.sqlite"
    sentence = "Alpha, Beta and Gamma met in Delta."
    with EmbeddedGraphStore(path) as store:
        build(store, [dataclasses.replace(rel(a, b), description=sentence) for a, b in (("a", "b"), ("a", "c"))])
        assert _stored_descriptions(path) == [sentence]
        assert {r.description for r in store.get_relationships(store.all_relationship_ids()).values()} == {sentence}

        store.delete_relationships(["a-RELATED_TO-b"])
        assert _stored_descriptions(path) == [sentence]  # a-c still names it
        store.upsert_relationships([dataclasses.replace(rel("a", "c"), description="Alpha wrote to Gamma.")])
        assert _stored_descriptions(path) == ["Alpha wrote to Gamma."]
        store.delete_entities(["c"])
        assert _stored_descriptions(path) == []


# Earlier versions' tables, every id as its text: what a file of version 3 held (version 2 had no titles, version 1
# kept each relationship's description in its row).
_VERSION_3_TABLES = """
CREATE TABLE entities (entity_id TEXT PRIMARY KEY, name TEXT NOT NULL, canonical TEXT NOT NULL, type TEXT NOT NULL,
    description TEXT NOT NULL, mention_count INTEGER NOT NULL, chunk_ids TEXT NOT NULL, doc_ids TEXT NOT NULL,
    aliases TEXT NOT NULL, title TEXT NOT NULL DEFAULT '');
CREATE TABLE relationships (relationship_id TEXT PRIMARY KEY, source_id TEXT NOT NULL, target_id TEXT NOT NULL,
    type TEXT NOT NULL, description_id BLOB NOT NULL, weight REAL NOT NULL, chunk_ids TEXT NOT NULL,
    doc_ids TEXT NOT NULL, predicates TEXT NOT NULL);
CREATE INDEX relationships_by_ends ON relationships (source_id, target_id);
CREATE INDEX relationships_by_target ON relationships (target_id);
CREATE TABLE relationship_descriptions (description_id BLOB PRIMARY KEY, description TEXT NOT NULL) WITHOUT ROWID;
CREATE INDEX relationships_by_description ON relationships (description_id);
CREATE TRIGGER relationship_deleted AFTER DELETE ON relationships BEGIN
    DELETE FROM relationship_descriptions WHERE description_id = OLD.description_id
        AND NOT EXISTS (SELECT 1 FROM relationships WHERE description_id = OLD.description_id);
END;
CREATE TABLE mentions (chunk_id TEXT NOT NULL, entity_id TEXT NOT NULL, PRIMARY KEY (chunk_id, entity_id)) WITHOUT ROWID;
CREATE INDEX mentions_by_entity ON mentions (entity_id, chunk_id);
"""


def _as_version(path: Path, version: int) -> None:
    """Rewrite the store at ``path`` in the layout of ``version`` (1 to 3), with what the store answers."""
    with EmbeddedGraphStore(path, read_only=True) as store:
        entities = list(store.get_entities(store.all_entity_ids()).values())
        relationships = list(store.get_relationships(store.all_relationship_ids()).values())
        mentions = store.chunks_of_entities(store.all_entity_ids())
    path.unlink()
    with sqlite3.connect(path) as conn:
        conn.executescript(_VERSION_3_TABLES)
        conn.executemany("INSERT INTO entities VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", [
            (e.entity_id, e.name, e.canonical, e.type, e.description, e.mention_count, json.dumps(e.chunk_ids),
             json.dumps(e.doc_ids), json.dumps(e.aliases), e.title) for e in entities])
        conn.executemany("INSERT OR IGNORE INTO relationship_descriptions VALUES (?, ?)",
                         [(_description_key(r.description), r.description) for r in relationships])
        conn.executemany("INSERT INTO relationships VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", [
            (r.relationship_id, r.source_id, r.target_id, r.type, _description_key(r.description), r.weight,
             json.dumps(r.chunk_ids), json.dumps(r.doc_ids), json.dumps(r.predicates)) for r in relationships])
        conn.executemany("INSERT INTO mentions VALUES (?, ?)",
                         [(chunk, entity) for entity, chunks in mentions.items() for chunk in chunks])
        if version <= 2:
            conn.execute("ALTER TABLE entities DROP COLUMN title")
        if version == 1:
            conn.executescript("""
                DROP TRIGGER relationship_deleted; DROP INDEX relationships_by_description;
                ALTER TABLE relationships ADD COLUMN description TEXT NOT NULL DEFAULT '';
                UPDATE relationships SET description = (SELECT description FROM relationship_descriptions d
                    WHERE d.description_id = relationships.description_id);
                ALTER TABLE relationships DROP COLUMN description_id;
                DROP TABLE relationship_descriptions;
            """)
        conn.execute(f"PRAGMA user_version = {version}")


def _description_key(description: str) -> bytes:
    return hashlib.blake2b(description.encode(), digest_size=16).digest()


def test_embedded_store_of_version_1_moves_its_descriptions_out_of_the_relationships(tmp_path: Path) -> None:
    path = tmp_path / "graph.sqlite"
    relationships = [rel("a", "b"), dataclasses.replace(rel("b", "c"), description="B and C, unlike A.")]
    with EmbeddedGraphStore(path) as store:
        build(store, relationships)
    _as_version(path, 1)
    by_id = {r.relationship_id: r for r in relationships}
    with EmbeddedGraphStore(path, read_only=True) as reader:  # a reader does not migrate: it reads version 1
        assert reader.get_relationships(by_id) == by_id
        with EmbeddedGraphStore(path) as store:  # the first writer migrates, under the reader's feet
            assert store.get_relationships(by_id) == by_id
            store.delete_relationships([relationships[0].relationship_id])
        assert reader.list_relationships() == reader.relationships_between(["b", "c"]) == [relationships[1]]
        assert reader.neighbourhoods(["c"])["c"].edges == (("b", "b-RELATED_TO-c", 1.0),)
    assert _stored_descriptions(path) == [relationships[1].description]


def test_embedded_store_of_version_2_gets_entity_titles(tmp_path: Path) -> None:
    path = tmp_path / "graph.sqlite"
    untitled = entity("a")
    with EmbeddedGraphStore(path) as store:
        build(store, [rel("a", "b")])
    _as_version(path, 2)
    with EmbeddedGraphStore(path, read_only=True) as reader:  # a reader does not migrate: no titles before version 3
        assert reader.get_entities(["a"]) == {"a": untitled}
        with EmbeddedGraphStore(path) as store:  # the first writer adds the column, under the reader's feet
            titled = dataclasses.replace(untitled, title="Service A")
            store.upsert_entities([titled])
            assert store.get_entities(["a"]) == {"a": titled}
        assert reader.get_entities(["a"]) == {"a": titled}


def test_embedded_store_of_a_newer_version_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "graph.sqlite"
    with EmbeddedGraphStore(path) as store:
        build(store, [rel("a", "b")])
    newer = SCHEMA_VERSION + 1
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {newer}")
    with pytest.raises(ValueError, match=f"schema version {newer}; this code reads {SCHEMA_VERSION}"):
        EmbeddedGraphStore(path)
    with pytest.raises(ValueError, match=f"schema version {SCHEMA_VERSION} \\(has {newer}\\)"):
        EmbeddedGraphStore(path, read_only=True)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == newer


# The pipeline's own ids (a prefix and 32 hex digits) are stored as their 16 bytes; the tests above use short text ids,
# which are stored as text. These build one graph under both kinds of ids and ask the same of each.
def _pipeline_ids(names: Iterable[str]) -> dict[str, str]:
    """Short text id -> the pipeline's id of the same thing; "legacy" ids stay text in both graphs."""
    kinds = {"c": "chunk", "r": "rel"}  # c1, r1; a single letter names an entity
    return {name: name if name.startswith("legacy") else short_id(kinds[name[0]] if len(name) > 1 else "ent", name)
            for name in names}


def _renamed(value: object, names: Mapping[str, str]) -> object:
    """``value`` with every id string in it renamed by ``names`` (records, neighbourhoods, collections)."""
    if isinstance(value, str):
        return names.get(value, value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{field.name: _renamed(getattr(value, field.name), names)
                                             for field in dataclasses.fields(value)})
    if isinstance(value, Mapping):
        return {_renamed(key, names): _renamed(item, names) for key, item in value.items()}
    if isinstance(value, (list, tuple, set)):
        return type(value)(_renamed(item, names) for item in value)
    return value


def _what_the_store_answers(store: EmbeddedGraphStore, ids: Mapping[str, str]) -> dict[str, object]:
    """The store's answers to every read, about the graph's things named by their short text ids (``ids`` gives the
    ids the store holds them under); the lists the store orders by id are checked for order, then sorted by name,
    since the two kinds of ids sort differently."""
    entities = [ids[name] for name in ("a", "b", "c", "d", "legacy-e")]
    chunks = [ids[name] for name in ("c1", "c2", "c3")]
    answers: dict[str, object] = {
        "entities": store.get_entities(entities),
        "relationships": store.get_relationships(store.all_relationship_ids()),
        "relationships_of_a": store.relationships_of([ids["a"]]),
        "depends_on_of_b": store.relationships_of([ids["b"]], ["DEPENDS_ON"]),
        "between": store.relationships_between(entities, limit=3),  # weights differ: the order is by weight
        "documents": store.documents_of_entities(entities),
        "entities_of_chunks": store.entities_of_chunks(chunks),
        "chunks_of_entities": store.chunks_of_entities(entities),
        "neighbourhoods": store.neighbourhoods(entities),
        "subgraph": store.answer_subgraph([ids["a"]], [ids["c2"]], entities),
        "entity_ids": store.all_entity_ids(),
        "relationship_ids": store.all_relationship_ids(),
        "edges": store.weighted_edges(),
        "names": store.list_entity_names(limit=10),
        "listed": store.list_relationships(limit=10),
    }
    for grouped in ("entities_of_chunks", "chunks_of_entities"):
        assert all(items == sorted(items) for items in answers[grouped].values())
    assert answers["edges"] == sorted(answers["edges"]) and all(a < b for a, b, _ in answers["edges"])
    answers["edges"] = {(a, b, weight) for a, b, weight in answers["edges"]}
    answers["names"] = sorted(answers["names"], key=lambda names: names.name)
    renamed = _renamed(answers, {stored: name for name, stored in ids.items()})
    renamed["edges"] = {(min(a, b), max(a, b), weight) for a, b, weight in renamed["edges"]}
    for grouped in ("entities_of_chunks", "chunks_of_entities"):
        renamed[grouped] = {key: sorted(items) for key, items in renamed[grouped].items()}
    return renamed


def _build_sample(store: EmbeddedGraphStore, ids: Mapping[str, str]) -> None:
    def pipeline_entity(name: str) -> Entity:
        return dataclasses.replace(entity(name), entity_id=ids[name], chunk_ids=(ids["c1"], ids["c2"]))

    def pipeline_rel(key: str, source: str, target: str, weight: float, type_: str = "RELATED_TO") -> Relationship:
        return dataclasses.replace(rel(source, target, weight, type_), relationship_id=ids[key], source_id=ids[source],
                                   target_id=ids[target], chunk_ids=(ids["c3"],))

    store.upsert_entities([pipeline_entity(name) for name in ("a", "b", "c", "d", "legacy-e")])
    store.upsert_relationships([pipeline_rel("r1", "a", "b", 3.0), pipeline_rel("r2", "b", "c", 2.0, "DEPENDS_ON"),
                                pipeline_rel("r3", "c", "d", 1.5), pipeline_rel("r4", "a", "legacy-e", 1.0),
                                pipeline_rel("r5", "d", "d", 0.5)])
    store.set_chunk_mentions({ids["c1"]: [ids["a"], ids["b"], ids["legacy-e"]], ids["c2"]: [ids["b"], ids["c"]],
                              ids["c3"]: [ids["d"]]})


def test_embedded_store_answers_the_same_under_the_pipelines_ids_stored_as_bytes(tmp_path: Path) -> None:
    names = ["a", "b", "c", "d", "legacy-e", "c1", "c2", "c3", "r1", "r2", "r3", "r4", "r5"]
    text_ids, pipeline_ids = {name: name for name in names}, _pipeline_ids(names)
    with EmbeddedGraphStore(tmp_path / "text.sqlite") as text_store, \
            EmbeddedGraphStore(tmp_path / "pipeline.sqlite") as pipeline_store:
        for store, ids in ((text_store, text_ids), (pipeline_store, pipeline_ids)):
            _build_sample(store, ids)
        for change in (lambda store, ids: None,
                       lambda store, ids: store.delete_relationships([ids["r2"]]),
                       lambda store, ids: store.delete_chunks([ids["c2"]]),
                       lambda store, ids: store.delete_entities([ids["d"]])):
            for store, ids in ((text_store, text_ids), (pipeline_store, pipeline_ids)):
                change(store, ids)
            with EmbeddedGraphStore(tmp_path / "pipeline.sqlite", read_only=True) as reader:
                assert (_what_the_store_answers(text_store, text_ids)
                        == _what_the_store_answers(pipeline_store, pipeline_ids)
                        == _what_the_store_answers(reader, pipeline_ids))
        listed = [names.entity_id for names in pipeline_store.list_entity_names()]
        assert listed == ["legacy-e", *sorted(set(listed) - {"legacy-e"})]  # ids stored as text first
    with sqlite3.connect(tmp_path / "pipeline.sqlite") as conn:
        stored = conn.execute("SELECT typeof(entity_id), length(entity_id) FROM entities UNION ALL "
                              "SELECT typeof(relationship_id), length(relationship_id) FROM relationships UNION ALL "
                              "SELECT typeof(chunk_id), length(chunk_id) FROM mentions").fetchall()
        provenance = conn.execute("SELECT typeof(chunk_ids), length(chunk_ids) FROM entities UNION "
                                  "SELECT typeof(chunk_ids), length(chunk_ids) FROM relationships").fetchall()
    assert sorted(set(stored)) == [("blob", 16), ("text", len("legacy-e"))]
    assert sorted(provenance) == [("blob", 16), ("blob", 32)]  # a relationship's one chunk, an entity's two


def test_embedded_store_of_version_4_gets_its_chunk_id_lists_as_bytes(tmp_path: Path) -> None:
    """Version 5 stores a list of the pipeline's chunk ids as their bytes; a list holding any other id stays JSON."""
    path = tmp_path / "graph.sqlite"
    ids = _pipeline_ids(["a", "b", "c", "d", "legacy-e", "c1", "c2", "c3", "r1", "r2", "r3", "r4", "r5"])
    with EmbeddedGraphStore(path) as store:
        _build_sample(store, ids)
        mixed = dataclasses.replace(entity("f"), chunk_ids=(ids["c1"], "legacy-chunk"))
        store.upsert_entities([mixed])
        expected = _what_the_store_answers(store, ids)
    with sqlite3.connect(path) as conn:  # back to version 4's layout: every list (of one or two ids) as a JSON array
        for table in ("entities", "relationships"):
            conn.execute(f"UPDATE {table} SET chunk_ids = (SELECT json_group_array('chunk-' || lower(hex("
                         "substr(chunk_ids, value * 16 + 1, 16)))) FROM json_each('[0,1]') WHERE value * 16 < "
                         "length(chunk_ids)) WHERE typeof(chunk_ids) = 'blob'")
        conn.execute("PRAGMA user_version = 4")
        assert conn.execute("SELECT COUNT(*) FROM entities WHERE typeof(chunk_ids) = 'blob'").fetchone() == (0,)
    with EmbeddedGraphStore(path, read_only=True) as reader:  # a reader does not migrate: it reads version 4
        assert _what_the_store_answers(reader, ids) == expected
        with EmbeddedGraphStore(path) as store:  # the first writer migrates, under the reader's feet
            assert _what_the_store_answers(store, ids) == expected
            assert store.get_entities(["f"]) == {"f": mixed}
        assert _what_the_store_answers(reader, ids) == expected
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT typeof(chunk_ids), COUNT(*) FROM entities GROUP BY 1 UNION ALL "
                            "SELECT typeof(chunk_ids), COUNT(*) FROM relationships GROUP BY 1").fetchall() == [
            ("blob", 5), ("text", 1), ("blob", 5)]


def test_embedded_store_of_version_3_gets_its_ids_stored_as_bytes_and_its_entities_keys(tmp_path: Path) -> None:
    path = tmp_path / "graph.sqlite"
    ids = _pipeline_ids(["a", "b", "c", "d", "legacy-e", "c1", "c2", "c3", "r1", "r2", "r3", "r4", "r5"])
    with EmbeddedGraphStore(path) as store:
        _build_sample(store, ids)
        expected = _what_the_store_answers(store, ids)
    _as_version(path, 3)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM entities WHERE typeof(entity_id) = 'blob'").fetchone() == (0,)
    with EmbeddedGraphStore(path, read_only=True) as reader:  # a reader does not migrate: it reads version 3
        assert _what_the_store_answers(reader, ids) == expected
        with EmbeddedGraphStore(path) as store:  # the first writer migrates, under the reader's feet
            assert _what_the_store_answers(store, ids) == expected
        assert _what_the_store_answers(reader, ids) == expected
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA freelist_count").fetchone() == (0,)  # the old tables' pages are not kept free
        assert conn.execute("SELECT COUNT(*) FROM entities WHERE typeof(entity_id) = 'blob'").fetchone() == (4,)
        assert conn.execute("SELECT DISTINCT typeof(source_key), typeof(target_key) FROM relationships").fetchall() == [
            ("integer", "integer")]
