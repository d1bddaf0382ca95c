import itertools
import json
import random
from collections import defaultdict
from dataclasses import replace

import pytest

from graphrag_pipeline.lib.algorithms.communities import (
    community_content_hash,
    community_id,
    detect_communities,
    incident_edges_hash,
    leaves_around,
    source_titles_of,
    summarize_community_extractively,
    update_communities,
    update_communities_around,
)
from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core.config import load_settings
from graphrag_pipeline.lib.core.models import Community, Entity, Relationship
from graphrag_pipeline.lib.stages import stage
from graphrag_pipeline.lib.stages.communities import community_from_payload
from graphrag_pipeline.lib.stores.state.sql import COMMUNITY_PAYLOADS


def clique(prefix: str, size: int, weight: float = 1.0) -> list[tuple[str, str, float]]:
    return [(f"{prefix}{i}", f"{prefix}{j}", weight) for i, j in itertools.combinations(range(size), 2)]


TWO_CLIQUES = clique("a", 5) + clique("b", 5) + [("a0", "b0", 0.1)]


def ring_of_triangles(count: int) -> list[tuple[str, str, float]]:
    """Modularity's resolution limit merges neighbouring triangles at level 0, so big clusters get split below."""
    edges: list[tuple[str, str, float]] = []
    for index in range(count):
        edges += clique(f"t{index:02d}_", 3)
        edges.append((f"t{index:02d}_0", f"t{(index + 1) % count:02d}_1", 1.0))
    return edges


def member_sets(communities: list[Community], level: int) -> set[frozenset[str]]:
    return {frozenset(c.entity_ids) for c in communities if c.level == level}


def test_two_cliques_joined_by_a_weak_edge_are_two_communities():
    communities = detect_communities(TWO_CLIQUES, max_cluster_size=10, seed=42)

    leaves = [c for c in communities if not c.child_ids]
    assert {frozenset(c.entity_ids) for c in leaves} == {
        frozenset(f"a{i}" for i in range(5)),
        frozenset(f"b{i}" for i in range(5)),
    }
    for community in communities:
        assert community.community_id == community_id(community.level, community.entity_ids)
        assert list(community.entity_ids) == sorted(community.entity_ids)


def islands(count: int) -> list[tuple[str, str, float]]:
    """Separate cliques of four: one top-level community each, so a change inside one touches only it."""
    return [edge for index in range(count) for edge in clique(f"i{index:02d}_", 4)]


def test_an_incremental_run_over_unchanged_edges_keeps_every_community():
    edges = ring_of_triangles(30) + islands(5)
    full = detect_communities(edges, max_cluster_size=4, seed=42)
    update = update_communities(full, list(reversed(edges)), max_cluster_size=4, seed=42)
    assert update.communities == full
    assert update.kept == len(full) and update.reclustered_entities == 0


def test_a_change_inside_one_community_re_forms_that_community_alone():
    edges = islands(20)
    full = detect_communities(edges, max_cluster_size=10, seed=42)
    changed = [*edges[:-1], (edges[-1][0], edges[-1][1], 3.0)]  # one edge of the last island re-weighted
    update = update_communities(full, changed, max_cluster_size=10, seed=42)
    touched = {f"i19_{i}" for i in range(4)}
    assert update.kept == 19 and update.reclustered_entities == 4
    # Clustered again into the same members: the same id, and the hash of the edges as they are now.
    [island] = [c for c in update.communities if set(c.entity_ids) == touched]
    [was] = [c for c in full if set(c.entity_ids) == touched]
    assert island.community_id == was.community_id and island.edges_hash != was.edges_hash
    kept = [c for c in full if not set(c.entity_ids) & touched]
    assert all(c in update.communities for c in kept)  # same ids, so the same stored summaries
    assert update_communities(full, changed, max_cluster_size=10, seed=42) == update  # deterministic
    assert update_communities(update.communities, changed, max_cluster_size=10, seed=42).kept == len(full)


def test_a_community_split_by_a_change_is_re_formed_and_the_others_stay():
    path = [("p0", "p1", 1.0), ("p1", "p2", 1.0), ("p2", "p3", 1.0)]
    edges = islands(10) + path
    full = detect_communities(edges, max_cluster_size=10, seed=42)
    assert frozenset({"p0", "p1", "p2", "p3"}) in member_sets(full, 0)
    cut = [edge for edge in edges if edge != ("p1", "p2", 1.0)]  # the path falls in two
    update = update_communities(full, cut, max_cluster_size=10, seed=42)
    before = {c.community_id for c in full}
    re_formed = {frozenset(c.entity_ids) for c in update.communities if c.community_id not in before}
    assert re_formed == {frozenset({"p0", "p1"}), frozenset({"p2", "p3"})}
    assert update.kept == 10 and update.reclustered_entities == 4


def test_a_change_deep_in_the_hierarchy_keeps_the_other_leaves_and_a_consistent_hierarchy():
    edges = ring_of_triangles(30)
    full = detect_communities(edges, max_cluster_size=4, seed=42)
    assert max(c.level for c in full) >= 1
    changed = [(a, b, 5.0) if (a, b) == ("t07_0", "t07_1") else (a, b, w) for a, b, w in edges]
    update = update_communities(full, changed, max_cluster_size=4, seed=42)
    by_id = {c.community_id: c for c in update.communities}
    leaves_before = [c for c in full if not c.child_ids]
    touched = [c for c in leaves_before if {"t07_0", "t07_1"} & set(c.entity_ids)]
    assert update.reclustered_entities == len({e for c in touched for e in c.entity_ids})
    assert all(c.community_id in by_id for c in leaves_before if c not in touched)  # the same ids: summaries reused
    assert update.kept >= len(leaves_before) - len(touched)
    for community in update.communities:  # links both ways, members nested, every entity in one top community
        if community.parent_id is not None:
            parent = by_id[community.parent_id]
            assert community.community_id in parent.child_ids and set(community.entity_ids) <= set(parent.entity_ids)
        assert all(by_id[child].parent_id == community.community_id for child in community.child_ids)
    tops = [set(c.entity_ids) for c in update.communities if c.level == 0]
    assert sum(len(t) for t in tops) == len(set().union(*tops)) == len({e for a, b, _ in edges for e in (a, b)})
    # Every leaf, kept or re-formed, carries the hash of its edges now, and only leaves carry one.
    adjacency = defaultdict(dict)
    for a, b, w in changed:
        adjacency[a][b] = adjacency[b][a] = w
    for community in update.communities:
        expected = "" if community.child_ids else incident_edges_hash(community.entity_ids, adjacency)
        assert community.edges_hash == expected
    assert update_communities(update.communities, changed, max_cluster_size=4, seed=42).kept == len(update.communities)


def test_new_entities_form_communities_of_their_own_and_removed_ones_leave():
    edges = islands(6)
    full = detect_communities(edges, max_cluster_size=10, seed=42)
    grown = [edge for edge in edges if not edge[0].startswith("i05_")] + clique("new", 4)
    update = update_communities(full, grown, max_cluster_size=10, seed=42)
    assert update.kept == 5 and update.reclustered_entities == 4
    assert frozenset(f"new{i}" for i in range(4)) in member_sets(update.communities, 0)
    assert not any(c.entity_ids[0].startswith("i05_") for c in update.communities)
    full_again = detect_communities(grown, max_cluster_size=10, seed=42)
    assert member_sets(update.communities, 0) == member_sets(full_again, 0)  # the full re-clustering agrees here


@pytest.mark.parametrize("seed", range(8))
def test_an_update_from_the_edges_around_the_touched_entities_equals_one_over_the_whole_graph(seed):
    rng = random.Random(seed)
    before = ring_of_triangles(20) + islands(6) + clique("k", 7)
    previous = detect_communities(before, max_cluster_size=4, seed=42)
    weights = {(a, b): w for a, b, w in before}
    for pair in rng.sample(sorted(weights), 3):  # gone
        del weights[pair]
    for pair in rng.sample(sorted(weights), 2):  # re-weighted
        weights[pair] += 2.0
    nodes = sorted({end for pair in weights for end in pair})
    for index in range(3):  # new, between entities old and new
        weights[(rng.choice(nodes), f"new{index}")] = 1.0
        weights[(f"new{index}", f"new{(index + 1) % 3}")] = 1.0
    after = [(a, b, w) for (a, b), w in weights.items()]
    old = {(a, b): w for a, b, w in before}
    touched = {end for pair in old.keys() | weights.keys() if old.get(pair) != weights.get(pair) for end in pair}

    whole = update_communities(previous, after, max_cluster_size=4, seed=42)
    _, around = leaves_around(previous, touched)
    edges_around = [(a, b, w) for a, b, w in after if a in around or b in around]
    partial = update_communities_around(previous, touched, edges_around, max_cluster_size=4, seed=42)

    assert partial == whole
    assert whole.kept > 0 and len(edges_around) < len(after) / 2  # most of the graph was neither read nor re-formed


def test_a_partition_without_edge_hashes_is_re_clustered_whole():
    edges = islands(3)
    stored = [replace(c, edges_hash="") for c in detect_communities(edges, seed=42)]
    update = update_communities(stored, edges, seed=42)
    assert update.kept == 0 and update.reclustered_entities == 12
    assert update.communities == detect_communities(edges, seed=42)


def test_large_clusters_are_split_into_linked_child_levels():
    communities = detect_communities(ring_of_triangles(30), max_cluster_size=4, seed=42)
    by_id = {c.community_id: c for c in communities}

    assert max(c.level for c in communities) >= 1
    assert all(c.parent_id is None for c in communities if c.level == 0)
    for community in communities:
        if community.parent_id is not None:
            parent = by_id[community.parent_id]
            assert parent.level == community.level - 1
            assert community.community_id in parent.child_ids
            assert set(community.entity_ids) <= set(parent.entity_ids)
        if community.child_ids:
            children = [by_id[child] for child in community.child_ids]
            assert all(child.parent_id == community.community_id for child in children)
            assert sorted(e for child in children for e in child.entity_ids) == list(community.entity_ids)
            assert len(community.entity_ids) > 4
    # Each level partitions the nodes it covers: no entity is in two communities of one level.
    for level in {c.level for c in communities}:
        members = [e for c in communities if c.level == level for e in c.entity_ids]
        assert len(members) == len(set(members))
    assert {e for c in communities if c.level == 0 for e in c.entity_ids} == {
        f"t{i:02d}_{j}" for i in range(30) for j in range(3)
    }


def test_same_seed_gives_identical_output_and_edge_order_does_not_matter():
    edges = ring_of_triangles(30)
    first = detect_communities(edges, max_cluster_size=4, seed=7)
    assert detect_communities(edges, max_cluster_size=4, seed=7) == first

    shuffled = [(target, source, weight) for source, target, weight in reversed(edges)]
    assert detect_communities(shuffled, max_cluster_size=4, seed=7) == first


def test_ids_change_only_for_communities_whose_membership_changes():
    before = {frozenset(c.entity_ids): c.community_id for c in detect_communities(TWO_CLIQUES, seed=42)}
    grown = TWO_CLIQUES + [("b5", f"b{i}", 1.0) for i in range(5)]
    after = {frozenset(c.entity_ids): c.community_id for c in detect_communities(grown, seed=42)}

    a_members = frozenset(f"a{i}" for i in range(5))
    assert after[a_members] == before[a_members]
    old_b = before[frozenset(f"b{i}" for i in range(5))]
    new_b = after[frozenset(f"b{i}" for i in range(6))]
    assert new_b != old_b
    assert old_b not in after.values()


def test_duplicates_are_summed_and_self_loops_and_zero_weights_ignored():
    clean = detect_communities(TWO_CLIQUES, seed=42)
    # The a-clique edges split in two halves, one reversed, plus self-loops and a zero-weight edge to a new node.
    halved = [(s, t, w / 2) for s, t, w in TWO_CLIQUES] + [(t, s, w / 2) for s, t, w in TWO_CLIQUES]
    noisy = halved + [("a1", "a1", 5.0), ("b2", "b2", 1.0), ("a3", "lonely", 0.0)]

    assert detect_communities(noisy, seed=42) == clean
    assert all("lonely" not in c.entity_ids for c in clean)


def test_empty_and_degenerate_input_gives_no_communities():
    assert detect_communities([]) == []
    assert detect_communities([("a", "a", 1.0), ("a", "b", 0.0)]) == []


@pytest.mark.parametrize(
    "edge",
    [("a", "b", -1.0), ("a", "b", float("nan")), ("a", "b", float("inf")), ("", "b", 1.0), ("a", "b")],
)
def test_bad_edges_raise(edge):
    with pytest.raises(ValueError):
        detect_communities([("x", "y", 1.0), edge])


def test_non_positive_seed_raises():
    with pytest.raises(ValueError, match="seed"):
        detect_communities([("a", "b", 1.0)], seed=0)


def entity(name: str, type_: str, mentions: int, description: str, docs: tuple[str, ...]) -> Entity:
    return Entity(
        entity_id=f"ent-{name}",
        name=name,
        canonical=name,
        type=type_,
        description=description,
        mention_count=mentions,
        chunk_ids=tuple(f"chunk-{name}-{i}" for i in range(mentions)),
        doc_ids=docs,
    )


def relationship(source: str, target: str, type_: str, weight: float, description: str) -> Relationship:
    return Relationship(
        relationship_id=f"rel-{source}-{type_}-{target}",
        source_id=f"ent-{source}",
        target_id=f"ent-{target}",
        type=type_,
        description=description,
        weight=weight,
        chunk_ids=(),
        doc_ids=(),
    )


ENTITIES = {
    e.entity_id: e
    for e in [
        entity("payments-api", "service", 9, "The payments API charges cards.", ("doc-1", "doc-2")),
        entity("checkout-service", "service", 5, "Checkout orchestrates orders.", ("doc-2",)),
        entity("team-payments", "team", 3, "Team Payments is on call for payments.", ("doc-3",)),
        entity("postgres", "database", 1, "", ("doc-1",)),
        entity("frontend", "service", 4, "Outside the community.", ("doc-9",)),
    ]
}
RELATIONSHIPS = [
    relationship("checkout-service", "payments-api", "DEPENDS_ON", 6.0, "Checkout calls the payments API to charge."),
    relationship("team-payments", "payments-api", "OWNS", 3.0, "Team Payments owns the payments API."),
    relationship("payments-api", "postgres", "USES", 2.0, "Payments stores charges in Postgres. It retries twice."),
    # Same sentence as above with different case: must not be repeated.
    relationship("team-payments", "checkout-service", "OWNS", 1.5, "team payments owns the payments api"),
    relationship("payments-api", "team-payments", "ALERTS", 1.0, ""),
    relationship("frontend", "checkout-service", "CALLS", 50.0, "Frontend calls checkout."),
]
COMMUNITY = Community(
    community_id=community_id(1, ["ent-payments-api", "ent-checkout-service", "ent-team-payments", "ent-postgres"]),
    level=1,
    parent_id=None,
    entity_ids=tuple(sorted(["ent-payments-api", "ent-checkout-service", "ent-team-payments", "ent-postgres"])),
)


def summarize(**overrides):
    arguments = {"top_entities": 3, "max_sentences": 10} | overrides
    return summarize_community_extractively(COMMUNITY, ENTITIES, RELATIONSHIPS, **arguments)


def test_extractive_summary_opens_with_members_by_type_then_relationship_kinds_then_strongest_fact():
    summary = summarize()
    lines = summary.summary.splitlines()

    # checkout-service is mentioned more than team-payments but most of its weight (the frontend call) leaves the
    # community, so it ranks last; it still makes the title, as a member of the leading type.
    assert summary.title == "Services: payments-api and checkout-service"
    assert summary.top_entities == ("payments-api", "team-payments", "postgres")
    assert lines[0] == "Services: payments-api; Teams: team-payments; Databases: postgres."
    assert lines[1] == "Relationships: team owns service (2), service alerts team (1), service depends on service (1)."
    assert lines[2] == "Checkout calls the payments API to charge."
    assert lines[-1] == "Sources: 3 documents."
    assert "Frontend" not in summary.summary  # relationship leaves the community
    assert summary.summary.casefold().count("team payments owns the payments api") == 1
    assert "It retries twice." in lines  # descriptions are split into sentences
    assert "payments-api alerts team-payments." in lines  # described from its type when it has no description
    assert (summary.community_id, summary.level) == (COMMUNITY.community_id, 1)


def test_extractive_summary_respects_limits():
    summary = summarize(top_entities=1, max_sentences=2, max_chunk_ids=4)
    lines = summary.summary.splitlines()

    assert summary.top_entities == ("payments-api",)
    assert lines[0] == "Services: payments-api."
    assert lines[2:] == [
        "Checkout calls the payments API to charge.",
        "Team Payments owns the payments API.",
        "Sources: 3 documents.",
    ]
    # Capped chunks come from the highest-ranked entity first.
    assert summary.chunk_ids == tuple(f"chunk-payments-api-{i}" for i in range(4))


def test_extractive_summary_chunk_ids_are_the_members_chunks_in_rank_order():
    summary = summarize()
    members = [ENTITIES[e] for e in COMMUNITY.entity_ids]
    assert sorted(summary.chunk_ids) == sorted({c for e in members for c in e.chunk_ids})
    assert summary.chunk_ids[0] == "chunk-payments-api-0"
    assert summary.chunk_ids[-1].startswith("chunk-checkout-service-")  # the member that mostly belongs elsewhere


def test_extractive_summary_is_deterministic_and_ignores_relationship_order():
    assert summarize_community_extractively(
        COMMUNITY, ENTITIES, list(reversed(RELATIONSHIPS)), top_entities=3, max_sentences=10
    ) == summarize()


def test_entity_descriptions_top_up_when_there_are_no_relationships():
    summary = summarize_community_extractively(COMMUNITY, ENTITIES, [], top_entities=2, max_sentences=5)
    assert summary.title == "Services: payments-api and checkout-service"  # by mention count alone
    assert summary.summary.splitlines()[:3] == [
        "Services: payments-api, checkout-service.",  # no relationship line: there are none
        "The payments API charges cards.",
        "Checkout orchestrates orders.",
    ]


def test_well_connected_entity_outranks_a_slightly_more_mentioned_one():
    entities = dict(ENTITIES)
    entities["ent-postgres"] = replace(ENTITIES["ent-postgres"], mention_count=6)
    hub = [relationship("postgres", other, "USES", 10.0, "") for other in ("payments-api", "checkout-service")]
    summary = summarize_community_extractively(COMMUNITY, entities, hub, top_entities=4, max_sentences=3)
    assert summary.top_entities[0] == "postgres"


def community_of(*entities: Entity) -> tuple[Community, dict[str, Entity]]:
    members = sorted(e.entity_id for e in entities)
    return Community(community_id(2, members), 2, None, tuple(members)), {e.entity_id: e for e in entities}


def shop_with(hub: Entity) -> tuple[Community, dict[str, Entity], list[Relationship]]:
    """Three services calling each other, and a hub that every one of them mentions and links to."""
    services = [entity(name, "Service", 2, "", ("doc-shop",)) for name in ("cart", "checkout", "payment")]
    calls = [relationship("checkout", other, "DEPENDS_ON", 1.0, "") for other in ("cart", "payment")]
    spokes = [relationship(s.name, hub.name, "RELATED_TO", 2.0, "") for s in services]
    community, entities = community_of(hub, *services)
    return community, entities, calls + spokes


def title_of(community, entities, relationships, generic_types=()) -> str:
    return summarize_community_extractively(
        community, entities, relationships, top_entities=5, max_sentences=3, generic_types=generic_types
    ).title


def test_a_generic_hub_with_the_most_mentions_and_links_does_not_lead_the_title():
    hub = entity("observability", "CONCEPT", 40, "", ("doc-shop",))
    community, entities, relationships = shop_with(hub)

    assert title_of(community, entities, relationships, {"CONCEPT"}) == "Services: checkout, cart and payment"
    # The same community without the type preference: the hub's weight makes its type the strongest.
    assert title_of(community, entities, relationships).startswith("Concepts: observability")


def test_a_typed_hub_that_mostly_belongs_elsewhere_does_not_lead_the_title():
    hub = entity("kubernetes", "TECHNOLOGY", 40, "", ("doc-shop", "doc-ops"))
    community, entities, relationships = shop_with(hub)
    elsewhere = [relationship("kubernetes", f"node-{i}", "RELATED_TO", 5.0, "") for i in range(6)]

    assert title_of(community, entities, relationships + elsewhere) == "Services: checkout, cart and payment"
    # Kept inside the community the hub is its centre, and its type leads, with the services close enough to follow.
    assert title_of(community, entities, relationships) == "Technologies: kubernetes; Services: checkout and cart"


def test_a_second_type_with_half_the_strength_of_the_first_joins_the_title():
    community, entities = community_of(
        entity("cart", "Service", 2, "", ("doc-1",)),
        entity("checkout", "Service", 2, "", ("doc-1",)),
        entity("CartDown", "Alert", 3, "", ("doc-1",)),
        entity("runbooks", "Doc", 1, "", ("doc-1",)),
    )
    relationships = [
        relationship("checkout", "cart", "DEPENDS_ON", 1.0, ""),
        relationship("CartDown", "cart", "RELATED_TO", 1.0, ""),
        relationship("CartDown", "runbooks", "DOCUMENTED_IN", 0.1, ""),
    ]
    # Ranked cart, CartDown, checkout: each leading type's best member is named, then the next by rank.
    assert title_of(community, entities, relationships) == "Services: cart and checkout; Alerts: CartDown"

    rarely_mentioned = entities | {"ent-CartDown": replace(entities["ent-CartDown"], mention_count=1)}
    assert title_of(community, rarely_mentioned, relationships) == "Services: cart and checkout"


def test_a_generic_type_leads_only_a_community_without_specific_types():
    people = [entity(name, "PERSON", 2, "", ("doc-1",)) for name in ("ada", "grace")]
    community, entities = community_of(*people, entity("compilers", "CONCEPT", 1, "", ("doc-1",)))
    relationships = [relationship("ada", other, "RELATED_TO", 1.0, "") for other in ("grace", "compilers")]
    assert title_of(community, entities, relationships, {"CONCEPT", "PERSON"}) == "Persons: ada and grace"

    retyped = dict(entities) | {"ent-compilers": replace(entities["ent-compilers"], type="TECHNOLOGY")}
    assert title_of(community, retyped, relationships, {"CONCEPT", "PERSON"}) == "Technologies: compilers"


def test_relationship_kinds_between_specific_types_come_first():
    hub = entity("observability", "CONCEPT", 40, "", ("doc-shop",))
    community, entities, relationships = shop_with(hub)
    summary = summarize_community_extractively(
        community, entities, relationships, top_entities=5, max_sentences=3, generic_types={"CONCEPT"}
    )
    assert summary.summary.splitlines()[1] == (
        "Relationships: Service depends on Service (2), Service related to CONCEPT (3)."
    )


def test_chunks_where_members_meet_are_cited_first():
    hub = entity("kubernetes", "TECHNOLOGY", 40, "", ("doc-shop",))
    community, entities, relationships = shop_with(hub)
    for member in ("ent-cart", "ent-payment"):
        entities[member] = replace(entities[member], chunk_ids=(*entities[member].chunk_ids, "shared"))
    summary = summarize_community_extractively(community, entities, relationships, top_entities=4, max_sentences=3)
    assert summary.chunk_ids[0] == "shared"
    assert summary.chunk_ids[1:3] == ("chunk-kubernetes-0", "chunk-kubernetes-1")  # then by rank


def test_content_hash_follows_membership_and_what_the_summary_reads():
    baseline = community_content_hash(COMMUNITY, ENTITIES)

    assert summarize().content_hash == baseline
    outsider_edited = ENTITIES | {"ent-frontend": replace(ENTITIES["ent-frontend"], description="unrelated")}
    assert community_content_hash(COMMUNITY, outsider_edited) == baseline
    smaller = replace(COMMUNITY, entity_ids=COMMUNITY.entity_ids[:-1])
    smaller = replace(smaller, community_id=community_id(1, smaller.entity_ids))
    assert community_content_hash(smaller, ENTITIES) != baseline

    for change in ({"description": "Postgres 16 primary."}, {"type": "Service"}):
        edited = ENTITIES | {"ent-postgres": replace(ENTITIES["ent-postgres"], **change)}
        changed = summarize_community_extractively(COMMUNITY, edited, RELATIONSHIPS, top_entities=3, max_sentences=10)
        assert changed.content_hash != baseline


def test_missing_members_raise():
    partial = {k: v for k, v in ENTITIES.items() if k != "ent-postgres"}
    with pytest.raises(ValueError, match="ent-postgres"):
        community_content_hash(COMMUNITY, partial)
    with pytest.raises(ValueError, match="ent-postgres"):
        summarize_community_extractively(COMMUNITY, partial, RELATIONSHIPS, top_entities=3, max_sentences=3)


def test_invalid_limits_raise():
    with pytest.raises(ValueError):
        summarize(max_sentences=0)
    with pytest.raises(ValueError):
        summarize(top_entities=0)


def test_a_summary_names_the_documents_most_members_come_from():
    titles = {"doc-1": "Payments runbook", "doc-2": "Checkout README", "doc-3": "Team Payments"}
    # doc-1 and doc-2 are each mentioned by two members, doc-3 by one: by count, then by title.
    assert source_titles_of(COMMUNITY, ENTITIES, titles) == ("Checkout README", "Payments runbook", "Team Payments")
    assert source_titles_of(COMMUNITY, ENTITIES, titles, limit=1) == ("Checkout README",)
    assert source_titles_of(COMMUNITY, ENTITIES, {}) == ()  # untitled documents are not named
    sources = source_titles_of(COMMUNITY, ENTITIES, titles, limit=2)
    summary = summarize(source_titles=sources)
    assert summary.summary.splitlines()[1] == "From: Checkout README; Payments runbook."
    assert "From:" not in summarize().summary
    assert summary.content_hash != summarize().content_hash  # other sources, another summary to store


def group_catalog(extra: str = "") -> str:
    """Eight groups of four services, each group owned by its own team and depending only on itself: one top-level
    community a group."""
    services = []
    for group in range(8):
        names = [f"svc{group}{member}" for member in "abcd"]
        services += [f"  - {{name: {name}, owners: [team{group}], depends_on: [{', '.join(n for n in names if n != name)}]}}"
                     for name in names]
    return "services:\n" + "\n".join(services) + extra + "\n"


def stage_report(reports, name):
    return next(report for report in reports if report.stage == name)


def partition_and_edges(settings) -> tuple[list[Community], list[tuple[str, str, float]]]:
    with Workspace(settings) as workspace:
        stored = [community_from_payload(p) for p in workspace.state.payloads(COMMUNITY_PAYLOADS).values()]
        return sorted(stored, key=lambda c: (c.level, c.community_id)), workspace.graph_store.weighted_edges()


@pytest.mark.slow  # builds an index twice
def test_an_edit_inside_one_group_re_clusters_and_re_summarizes_that_group_alone(tmp_path):
    from graphrag_pipeline.lib.stages.communities import FULL_RUN_MARK
    from graphrag_pipeline_tests.conftest import build

    catalog = tmp_path / "catalog"
    catalog.mkdir()
    (catalog / "services.yaml").write_text(group_catalog())
    settings = load_settings(index_dir=str(tmp_path / "index"), shard_count=4,
                             sources=[{"name": "cat", "kind": "catalog", "path": str(catalog)}])
    first = build(settings)
    assert stage_report(first, "communities").counts["kept"] == 0  # the first run is a full one
    assert "full re-clustering" in stage_report(first, "communities").notes[0]
    first_partition, all_edges = partition_and_edges(settings)

    # One more dependency inside group 3 (svc3a on a new store): only that group's community changes.
    (catalog / "services.yaml").write_text(group_catalog().replace(
        "{name: svc3a, owners: [team3], depends_on: [", "{name: svc3a, owners: [team3], depends_on: [store3, "))
    second = build(settings)
    communities = stage_report(second, "communities").counts
    summaries = stage_report(second, "community_summaries").counts
    # The group's four services, its team and the new store: one community re-formed, one summary written.
    assert communities["kept"] == 7 and communities["reclustered_entities"] == 6
    assert communities["re_formed"] == 1 and summaries["summarized"] == 1 and summaries["reused"] == 7
    # Only the edges around what the graph sync touched were read, and the partition is the one an update over
    # every edge gives.
    second_partition, all_edges = partition_and_edges(settings)
    assert 0 < communities["edges_read"] < len(all_edges) / 2
    expected = update_communities(first_partition, all_edges, seed=settings.communities.seed,
                                  max_cluster_size=settings.communities.max_cluster_size).communities
    assert second_partition == expected
    # A partition written by anything but the stage (here the first one, put back) is not what the record of touched
    # entities is about: every edge is read, and the update is the same.
    with Workspace(settings) as workspace:
        workspace.state.write_payloads(COMMUNITY_PAYLOADS, {c.community_id: ("", json.dumps(c.to_dict()))
                                                            for c in first_partition}, replace_all=True)
        again = stage("communities").execute(workspace)
    assert again.counts["edges_read"] == len(all_edges)
    assert partition_and_edges(settings)[0] == expected

    # Switched off, the next run re-clusters everything, as from scratch; the mark says when it ran.
    third = build(settings.with_overrides(communities={"incremental": False}))
    assert stage_report(third, "communities").counts["kept"] == 0
    workspace = Workspace(settings)
    try:
        edges = workspace.graph_store.weighted_edges()
        stored = [community_from_payload(p) for p in workspace.state.payloads(COMMUNITY_PAYLOADS).values()]
        assert json.loads(workspace.state.stage_mark(FULL_RUN_MARK))["reclustered"] == 0
    finally:
        workspace.close()
    assert sorted(stored, key=lambda c: (c.level, c.community_id)) == detect_communities(
        edges, max_cluster_size=settings.communities.max_cluster_size, seed=settings.communities.seed)


def test_a_full_re_clustering_is_due_when_old_drifted_switched_off_or_without_a_start():
    from graphrag_pipeline.lib.stages.communities import DAY_SECONDS, why_full

    config = load_settings().communities
    start = detect_communities(islands(4), seed=42)
    recent = {"at": 1_000_000.0, "reclustered": 0}
    assert why_full(config, start, recent, 16, now=1_000_000.0 + DAY_SECONDS) == ""
    assert "older than 7 days" in why_full(config, start, recent, 16, now=1_000_000.0 + 8 * DAY_SECONDS)
    assert "25%" in why_full(config, start, {**recent, "reclustered": 5}, 16, now=1_000_000.0)
    assert why_full(config, [], recent, 16, now=1_000_000.0) == "no partition to start from"
    assert why_full(config, start, None, 16, now=1_000_000.0) == "no partition to start from"
    assert why_full(config.model_copy(update={"incremental": False}), start, recent, 16, now=1_000_000.0)
