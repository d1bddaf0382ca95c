"""Hierarchical Leiden communities over the entity graph, and deterministic extractive community summaries.

Level 0 is the coarsest partition (one Leiden run over the whole graph). A community with more than
``max_cluster_size`` members is re-clustered on its own subgraph, and the pieces become its children one level
deeper, so higher levels are finer. A community that is small enough, or cannot be split, has no children: the
leaves of the hierarchy can sit at different levels.

Community ids hash the level and the sorted member ids rather than Leiden's cluster numbers, which are arbitrary
per run: an unchanged community keeps its id across rebuilds, so its stored summary can be reused.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence

from graphrag_pipeline.lib.ids import content_hash, short_id
from graphrag_pipeline.lib.models import Community, CommunitySummary, Entity, Relationship

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_WHITESPACE = re.compile(r"\s+")


def detect_communities(
    edges: Sequence[tuple[str, str, float]],
    *,
    max_cluster_size: int = 10,
    seed: int = 42,
) -> list[Community]:
    """Every level of a hierarchical Leiden clustering of an undirected weighted graph, linked parent to child.

    Edges are undirected: ``(a, b, w)`` and ``(b, a, w)`` are the same pair, and repeated pairs are merged by
    summing their weights. Self-loops are ignored (they do not affect which community a node joins), and so are
    zero-weight edges, which carry no connection strength; a node reachable only through those is isolated and, like
    every isolated node, belongs to no community. A negative or non-finite weight is a data error and raises.

    The result is sorted by (level, community_id) and depends only on the set of edges and the seed, not on edge
    order.
    """
    if max_cluster_size < 1:
        raise ValueError(f"max_cluster_size must be at least 1, got {max_cluster_size}")
    if seed < 1:
        # graspologic-native seeds an unsigned 64-bit PRNG and rejects 0 and negatives.
        raise ValueError(f"seed must be a positive integer, got {seed}")
    graph = _undirected_edge_list(edges)
    if not graph:
        return []

    # Imported here: graspologic pulls in numba, sklearn and friends, several seconds that most callers never need.
    from graspologic.partition import hierarchical_leiden

    clusters = hierarchical_leiden(graph, max_cluster_size=max_cluster_size, random_seed=seed)

    # graspologic reports one row per (node, level); a cluster is identified by (level, cluster number) and its
    # parent_cluster is a cluster number one level up.
    members: dict[tuple[int, int], list[str]] = defaultdict(list)
    parent_of: dict[tuple[int, int], tuple[int, int] | None] = {}
    for row in clusters:
        key = (row.level, row.cluster)
        members[key].append(row.node)
        parent_of[key] = None if row.parent_cluster is None else (row.level - 1, row.parent_cluster)

    ids = {key: community_id(key[0], nodes) for key, nodes in members.items()}
    children: dict[tuple[int, int], list[str]] = defaultdict(list)
    for key, parent in parent_of.items():
        if parent is not None:
            if parent not in ids:
                raise RuntimeError(f"graspologic returned cluster {key} whose parent {parent} has no members")
            children[parent].append(ids[key])

    communities = [
        Community(
            community_id=ids[key],
            level=key[0],
            parent_id=None if parent_of[key] is None else ids[parent_of[key]],
            entity_ids=tuple(sorted(nodes)),
            child_ids=tuple(sorted(children[key])),
        )
        for key, nodes in members.items()
    ]
    return sorted(communities, key=lambda community: (community.level, community.community_id))


def community_id(level: int, entity_ids: Sequence[str]) -> str:
    return short_id("comm", str(level), *sorted(entity_ids))


def community_content_hash(community: Community, entity_descriptions: Mapping[str, str]) -> str:
    """Hash of a community's membership and its members' descriptions: unchanged hash, reusable summary."""
    missing = [entity for entity in community.entity_ids if entity not in entity_descriptions]
    if missing:
        raise ValueError(f"community {community.community_id} members have no description entry: {missing[:10]}")
    parts: list[str] = [community.community_id]
    for entity in sorted(community.entity_ids):
        parts += (entity, entity_descriptions[entity])
    return content_hash(*parts)


def summarize_community_extractively(
    community: Community,
    entities: Mapping[str, Entity],
    relationships: Sequence[Relationship],
    *,
    top_entities: int,
    max_sentences: int,
    max_chunk_ids: int = 50,
) -> CommunitySummary:
    """A model-free community report built from the members' own words.

    Members are ranked by mention count and by weighted degree inside the community (each scaled to [0, 1] and
    added, so both a much-mentioned and a well-connected entity rise). The summary lists the top entities with
    their types, then the distinct sentences of the strongest relationships inside the community, topped up with
    the top entities' descriptions when relationships say too little, then how many documents back it.
    ``relationships`` may hold the whole graph: only those with both ends in the community are used.
    """
    if top_entities < 1 or max_sentences < 1 or max_chunk_ids < 0:
        raise ValueError(
            f"top_entities and max_sentences must be at least 1 and max_chunk_ids at least 0, got "
            f"{top_entities}, {max_sentences}, {max_chunk_ids}"
        )
    missing = [entity for entity in community.entity_ids if entity not in entities]
    if missing:
        raise ValueError(f"community {community.community_id} members are not in the entity map: {missing[:10]}")

    members = {entity_id: entities[entity_id] for entity_id in community.entity_ids}
    internal = [
        relationship
        for relationship in relationships
        if relationship.source_id in members and relationship.target_id in members
    ]
    ranked = _rank_members(members, internal)
    top = ranked[:top_entities]

    names = [entity.name for entity in ranked[:3]]
    title = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"

    sentences = _relationship_sentences(internal, members)
    for entity in top:
        sentences += _sentences(entity.description)
    doc_ids = {doc for entity in members.values() for doc in entity.doc_ids}
    lines = [
        "Entities: " + ", ".join(f"{entity.name} ({entity.type})" for entity in top) + ".",
        *_distinct(sentences)[:max_sentences],
        f"Sources: {len(doc_ids)} document{'s' if len(doc_ids) != 1 else ''}.",
    ]

    return CommunitySummary(
        community_id=community.community_id,
        level=community.level,
        title=title,
        summary="\n".join(lines),
        top_entities=tuple(entity.name for entity in top),
        content_hash=community_content_hash(
            community, {entity_id: entity.description for entity_id, entity in members.items()}
        ),
        chunk_ids=_representative_chunks(ranked, max_chunk_ids),
    )


def _undirected_edge_list(edges: Sequence[tuple[str, str, float]]) -> list[tuple[str, str, float]]:
    weights: dict[tuple[str, str], float] = defaultdict(float)
    for edge in edges:
        if len(edge) != 3:
            raise ValueError(f"edge must be (source, target, weight), got {edge!r}")
        source, target, weight = edge
        if not isinstance(source, str) or not isinstance(target, str) or not source or not target:
            raise ValueError(f"edge endpoints must be non-empty strings, got {edge!r}")
        weight = float(weight)
        if not math.isfinite(weight) or weight < 0:
            raise ValueError(f"edge weight must be finite and non-negative, got {edge!r}")
        if source != target and weight > 0:
            weights[min(source, target), max(source, target)] += weight
    # Sorted so that the seeded Leiden run sees the same input whatever order the caller's edges came in.
    return [(source, target, weight) for (source, target), weight in sorted(weights.items())]


def _rank_members(members: Mapping[str, Entity], internal: Sequence[Relationship]) -> list[Entity]:
    degree: dict[str, float] = defaultdict(float)
    for relationship in internal:
        if relationship.source_id != relationship.target_id:
            degree[relationship.source_id] += relationship.weight
            degree[relationship.target_id] += relationship.weight
    top_mentions = max(entity.mention_count for entity in members.values()) or 1
    top_degree = max(degree.values(), default=0.0) or 1.0

    def score(entity: Entity) -> float:
        return entity.mention_count / top_mentions + degree[entity.entity_id] / top_degree

    return sorted(members.values(), key=lambda entity: (-score(entity), entity.name, entity.entity_id))


def _relationship_sentences(internal: Sequence[Relationship], members: Mapping[str, Entity]) -> list[str]:
    sentences: list[str] = []
    for relationship in sorted(internal, key=lambda relationship: (-relationship.weight, relationship.relationship_id)):
        described = _sentences(relationship.description)
        if not described:
            verb = relationship.type.lower().replace("_", " ")
            source, target = members[relationship.source_id].name, members[relationship.target_id].name
            described = [f"{source} {verb} {target}."]
        sentences += described
    return sentences


def _sentences(text: str) -> list[str]:
    return [sentence for sentence in _SENTENCE_END.split(_WHITESPACE.sub(" ", text).strip()) if sentence]


def _distinct(sentences: Sequence[str]) -> list[str]:
    seen: set[str] = set()
    kept: list[str] = []
    for sentence in sentences:
        key = sentence.casefold().rstrip(".!? ")
        if key not in seen:
            seen.add(key)
            kept.append(sentence)
    return kept


def _representative_chunks(ranked: Sequence[Entity], limit: int) -> tuple[str, ...]:
    # Filled in rank order so that a capped list still cites the chunks behind the most central entities.
    chosen: dict[str, None] = {}
    for entity in ranked:
        for chunk in entity.chunk_ids:
            if len(chosen) == limit:
                return tuple(sorted(chosen))
            chosen.setdefault(chunk)
    return tuple(sorted(chosen))
