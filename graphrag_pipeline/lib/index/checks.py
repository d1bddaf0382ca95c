"""Integrity checks of a built index: what the stores hold against what the state says they should hold.

Each check reads the stores as queries see them (the published vector version, the graph store) and returns a
`CheckOutcome` whose description says what is wrong in words an operator can act on. Dagster runs them as asset checks
with the assets they guard; they are plain functions so the tests (and any script) can run them without Dagster.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable

from graphrag_pipeline.lib.core.models import Entity, Relationship
from graphrag_pipeline.lib.stores.protocols import CHUNKS, COMMUNITIES, ENTITIES, GraphStore, VectorStore
from graphrag_pipeline.lib.stores.state.protocol import StateStore
from graphrag_pipeline.lib.stores.state.sql import COMMUNITY_PAYLOADS, COMMUNITY_SUMMARY_PAYLOADS

EXAMPLES = 5  # ids named in a failing check's description (the counts are complete)


@dataclass(frozen=True)
class CheckOutcome:
    passed: bool
    description: str
    metadata: dict[str, Any] = field(default_factory=dict)


def vectors_match(collection: str, expected: set[str], published: VectorStore, what: str) -> CheckOutcome:
    """The published `collection` holds a vector for exactly the `expected` ids."""
    actual = published.point_ids(collection) if collection in published.collections() else set()
    missing, extra = expected - actual, actual - expected
    metadata = {"expected": len(expected), "published": len(actual), "missing": len(missing), "extra": len(extra)}
    if not missing and not extra:
        return CheckOutcome(True, f"all {len(expected):,} {what} have a vector in the published `{collection}` "
                                  f"collection, and it holds nothing else", metadata)
    problems = []
    if missing:
        problems.append(f"{len(missing):,} of {len(expected):,} {what} have no vector in the published "
                        f"`{collection}` collection (e.g. {_examples(missing)})")
    if extra:
        problems.append(f"{len(extra):,} vectors in `{collection}` belong to no current item (e.g. {_examples(extra)})")
    fix = "; re-materialize the asset (or rebuild the index) to re-embed and publish"
    return CheckOutcome(False, "; ".join(problems) + fix, metadata)


def chunk_vectors(state: StateStore, published: VectorStore) -> CheckOutcome:
    return vectors_match(CHUNKS, set(state.chunk_ids()), published, "chunks")


def entity_vectors(state: StateStore, published: VectorStore) -> CheckOutcome:
    return vectors_match(ENTITIES, set(state.element_hashes("entity")), published, "entities")


def community_vectors(state: StateStore, published: VectorStore) -> CheckOutcome:
    return vectors_match(COMMUNITIES, set(state.payload_hashes(COMMUNITY_SUMMARY_PAYLOADS)), published, "community summaries")


@dataclass(frozen=True)
class GraphContents:
    """Every entity and relationship of the graph store, read once for the checks that look at all of them."""

    entities: dict[str, Entity]
    relationships: dict[str, Relationship]
    unreadable: frozenset[str] = frozenset()  # relationships the store lists but cannot read whole (see read)

    @classmethod
    def read(cls, graph: GraphStore) -> "GraphContents":
        """The store's records. A relationship the store lists and does not return points at an entity it no longer
        holds: the embedded store reads a relationship's ends through the entities they name."""
        listed = graph.all_relationship_ids()
        relationships = graph.get_relationships(listed)
        return cls(graph.get_entities(graph.all_entity_ids()), relationships, frozenset(listed - relationships.keys()))


def graph_matches_elements(state: StateStore, contents: GraphContents) -> CheckOutcome:
    """The graph store holds exactly the merged entities and relationships the state has."""
    problems = []
    metadata: dict[str, Any] = {}
    for kind, expected, actual in (
        ("entities", set(state.element_hashes("entity")), set(contents.entities)),
        ("relationships", set(state.element_hashes("relationship")), set(contents.relationships)),
    ):
        missing, extra = expected - actual, actual - expected
        metadata.update({f"{kind}_expected": len(expected), f"{kind}_missing": len(missing),
                         f"{kind}_extra": len(extra)})
        if missing:
            problems.append(f"{len(missing):,} of {len(expected):,} {kind} are not in the graph store "
                            f"(e.g. {_examples(missing)})")
        if extra:
            problems.append(f"{len(extra):,} {kind} in the graph store are not in the index (e.g. {_examples(extra)})")
    if problems:
        return CheckOutcome(False, "; ".join(problems), metadata)
    return CheckOutcome(True, "the graph store holds exactly the index's entities and relationships", metadata)


def relationships_have_entities(contents: GraphContents) -> CheckOutcome:
    """No relationship points at an entity the graph does not hold."""
    relationships = contents.relationships
    dangling = sorted(contents.unreadable | {r.relationship_id for r in relationships.values()
                                             if r.source_id not in contents.entities
                                             or r.target_id not in contents.entities})
    listed = len(relationships) + len(contents.unreadable)
    metadata = {"relationships": listed, "dangling": len(dangling)}
    if dangling:
        return CheckOutcome(False, f"{len(dangling):,} of {listed:,} relationships point at a missing "
                                   f"entity (e.g. {_examples(dangling)})", metadata)
    return CheckOutcome(True, f"all {len(relationships):,} relationships connect two existing entities", metadata)


def elements_have_provenance(contents: GraphContents) -> CheckOutcome:
    """Every entity and relationship names the documents (and an entity the chunks) it was read from: without
    provenance a delete cannot remove it and access control cannot decide who may see it."""
    entities, relationships = contents.entities, contents.relationships
    orphans = sorted(eid for eid, e in entities.items() if not e.doc_ids or not e.chunk_ids)
    orphans += sorted(rid for rid, r in relationships.items() if not r.doc_ids)
    metadata = {"entities": len(entities), "relationships": len(relationships), "without_provenance": len(orphans)}
    if orphans:
        return CheckOutcome(False, f"{len(orphans):,} entities or relationships have no provenance (no document or "
                                   f"chunk ids; e.g. {_examples(orphans)})", metadata)
    return CheckOutcome(True, f"all {len(entities):,} entities and {len(relationships):,} relationships name their "
                              f"documents", metadata)


def communities_cover_graph(state: StateStore, graph: GraphStore) -> CheckOutcome:
    """Every entity that has a relationship belongs to a community on level 0, the coarsest level, which partitions
    every connected entity (finer levels split only the communities that were too large; isolated entities have no
    community by design)."""
    connected = {node for a, b, _ in graph.weighted_edges() for node in (a, b)}
    communities = state.payloads(COMMUNITY_PAYLOADS).values()
    covered = {eid for c in communities if c["level"] == 0 for eid in c["entity_ids"]}
    uncovered = connected - covered
    metadata = {"connected_entities": len(connected), "covered": len(connected & covered),
                "uncovered": len(uncovered), "communities": len(communities)}
    if uncovered:
        return CheckOutcome(False, f"{len(uncovered):,} of {len(connected):,} connected entities belong to no "
                                   f"community on level 0 (e.g. {_examples(uncovered)}); re-materialize "
                                   f"`communities`", metadata)
    return CheckOutcome(True, f"all {len(connected):,} connected entities belong to a community", metadata)


def quarantine_share(state: StateStore, max_share: float) -> CheckOutcome:
    """Per stage, the share of its current items in quarantine stays below `max_share`; the description lists the
    reasons. Records of items that are gone (a bad file since deleted, a failed chunk of an edited document) are kept
    for the record but no longer count."""
    sources, chunks = set(state.seen_source_hashes()), set(state.chunk_ids())
    # Reading quarantines items of a source (which the source may have dropped since); extraction quarantines chunks,
    # or whole documents when their records come from a catalog or an eval set's extraction file.
    extracted = chunks | {doc_id for doc_id, in state.query("SELECT doc_id FROM documents")}
    by_stage: dict[str, list] = defaultdict(list)
    for record in state.quarantined():
        if record.item_id in (extracted if record.stage == "extraction" else sources):
            by_stage[record.stage].append(record)
    metadata: dict[str, Any] = {"quarantined": sum(map(len, by_stage.values())), "max_share": max_share}
    failing, lines = [], []
    for stage, stage_records in sorted(by_stage.items()):
        total = max(len(chunks) if stage == "extraction" else len(sources), len(stage_records))
        share = len(stage_records) / total
        metadata[f"{stage}_share"] = round(share, 4)
        reasons = Counter(_reason_kind(r.reason) for r in stage_records)
        listed = ", ".join(f"{reason} ×{n}" for reason, n in reasons.most_common(5))
        lines.append(f"{stage}: {len(stage_records):,} of {total:,} items ({share:.1%}): {listed}")
        if share > max_share:
            failing.append(stage)
    if failing:
        return CheckOutcome(False, f"quarantine above {max_share:.0%} in {', '.join(failing)} — "
                                   + "; ".join(lines), metadata)
    summary = "; ".join(lines) if lines else "nothing in quarantine"
    return CheckOutcome(True, f"quarantine within {max_share:.0%}: {summary}", metadata)


def _reason_kind(reason: str) -> str:
    """A reason without the item it names ('cannot read /a/b.md: …' → 'cannot read'), so reasons group."""
    head = reason.split(":", 1)[0]
    return " ".join(word for word in head.split() if "/" not in word and "\\" not in word)[:80] or reason[:80]


def _examples(ids: Iterable[str]) -> str:
    return ", ".join(sorted(ids)[:EXAMPLES])
