"""Hierarchical Leiden communities over the entity graph, and deterministic extractive community summaries.

Level 0 is the coarsest partition (one Leiden run over the whole graph). A community with more than
``max_cluster_size`` members is re-clustered on its own subgraph, and the pieces become its children one level
deeper, so higher levels are finer. A community that is small enough, or cannot be split, has no children: the
leaves of the hierarchy can sit at different levels.

Community ids hash the level and the sorted member ids rather than Leiden's cluster numbers, which are arbitrary
per run: an unchanged community keeps its id across rebuilds, so its stored summary can be reused.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from graphrag_pipeline.lib.core.ids import content_hash, short_id
from graphrag_pipeline.lib.core.models import Community, CommunitySummary, Entity, Relationship

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_WHITESPACE = re.compile(r"\s+")
SOURCE_TITLES = 3  # document titles a summary names as its sources
TITLE_NAMES = 3  # member names in a community title: enough to recognise the subsystem, few enough to read
SECOND_TYPE_SHARE = 0.5  # a second type leads the title when it has at least this share of the first's strength
RELATIONSHIP_KINDS = 3  # (source type, relationship, target type) kinds named at the top of a summary
# Part of every community's content hash: bump it when the summary rule changes, so stored summaries are redone.
SUMMARY_RULE_VERSION = 4  # 3: the titles of the documents the members come from; 4: stored with written_from


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
    order. Each leaf community carries the hash of its members' edges (``edges_hash``), which
    ``update_communities`` compares to tell the communities a later change did not touch.
    """
    _check_parameters(max_cluster_size, seed)
    graph = _undirected_edge_list(edges)
    return _with_edge_hashes(_leiden(graph, max_cluster_size, seed), _adjacency(graph))


@dataclass(frozen=True)
class CommunityUpdate:
    communities: list[Community]
    kept: int  # communities carried over with all their members (the same id, so their summaries are reused)
    reclustered_entities: int  # entities clustered again: the members of the changed leaves and the new ones


def update_communities(
    previous: Sequence[Community],
    edges: Sequence[tuple[str, str, float]],
    *,
    max_cluster_size: int = 10,
    seed: int = 42,
) -> CommunityUpdate:
    """The partition ``previous`` brought level with ``edges``, re-forming only what changed.

    A leaf community (one without children) none of whose members gained, lost or re-weighted an edge (its
    ``edges_hash`` still holds) is kept; each community above keeps the members of its kept leaves, so it keeps its
    id when all of them were kept and shrinks otherwise. The members of the changed leaves and the entities in no
    community are clustered again as ``detect_communities`` clusters a graph, over the edges among themselves, and
    their communities join the hierarchy at its top; an edge from one of them to a kept leaf's member is left out of
    that run (it is unchanged, or the leaf would not have been kept). The result depends only on ``previous``, the
    set of edges and the seed: a re-sync equals a from-scratch build given the same starting partition, and
    ``detect_communities`` over all edges is the full re-clustering that resets it.
    """
    _check_parameters(max_cluster_size, seed)
    graph = _undirected_edge_list(edges)
    return _update(previous, graph, None, max_cluster_size, seed)


def leaves_around(previous: Sequence[Community], touched: Collection[str]) -> tuple[list[Community], set[str]]:
    """The leaves of ``previous`` with a member among ``touched``, and those entities with every member of those
    leaves: whose edges ``update_communities_around`` reads."""
    touched = set(touched)
    leaves = [c for c in previous if not c.child_ids and not touched.isdisjoint(c.entity_ids)]
    return leaves, touched.union(*(c.entity_ids for c in leaves))


def update_communities_around(
    previous: Sequence[Community],
    touched: Collection[str],
    edges_around: Sequence[tuple[str, str, float]],
    *,
    max_cluster_size: int = 10,
    seed: int = 42,
) -> CommunityUpdate:
    """What ``update_communities`` gives over the whole graph, from the edges around a few entities only.

    ``touched`` must hold every entity that gained, lost or re-weighted an edge since ``previous`` was formed (so
    every other leaf keeps its ``edges_hash`` and is kept without reading its edges), and ``edges_around`` every edge
    with an end among ``leaves_around(previous, touched)[1]``: whatever is clustered again is among those, with all
    of its edges. A re-sync that touched a few entities reads a few thousand edges instead of the whole graph."""
    _check_parameters(max_cluster_size, seed)
    leaves, _ = leaves_around(previous, touched)
    graph = _undirected_edge_list(edges_around)
    return _update(previous, graph, {c.community_id for c in leaves}, max_cluster_size, seed)


def _update(
    previous: Sequence[Community],
    graph: list[tuple[str, str, float]],
    checked: Collection[str] | None,
    max_cluster_size: int,
    seed: int,
) -> CommunityUpdate:
    """``update_communities`` over ``graph`` (``_undirected_edge_list``), comparing the edges hash of the leaves in
    ``checked`` only (None: of every leaf); the others are kept."""
    adjacency = _adjacency(graph)
    kept_members: dict[str, frozenset[str]] = {}  # previous community -> the members it keeps
    for community in sorted(previous, key=lambda c: -c.level):  # leaves first, their ancestors after them
        if not community.child_ids:
            unchanged = ((checked is not None and community.community_id not in checked)
                         or community.edges_hash == incident_edges_hash(community.entity_ids, adjacency))
            kept_members[community.community_id] = frozenset(community.entity_ids if unchanged else ())
        else:
            kept_members[community.community_id] = frozenset().union(
                *(kept_members.get(child, frozenset()) for child in community.child_ids))
    new_ids = {c.community_id: community_id(c.level, kept_members[c.community_id])
               for c in previous if kept_members[c.community_id]}
    # A leaf is kept whole or not at all, so a kept one keeps the edges hash it was just checked against.
    rebuilt = [
        Community(new_ids[c.community_id], c.level, new_ids.get(c.parent_id) if c.parent_id else None,
                  tuple(sorted(kept_members[c.community_id])),
                  tuple(sorted(new_ids[child] for child in c.child_ids if child in new_ids)), c.edges_hash)
        for c in previous if c.community_id in new_ids
    ]
    placed = {entity_id for community in rebuilt for entity_id in community.entity_ids}
    region = [(a, b, w) for a, b, w in graph if a not in placed and b not in placed]
    combined = {community.community_id: community
                for community in [*rebuilt, *_with_edge_hashes(_leiden(region, max_cluster_size, seed), adjacency)]}
    ordered = sorted(combined.values(), key=lambda community: (community.level, community.community_id))
    return CommunityUpdate(ordered, kept=sum(old == new for old, new in new_ids.items()),
                           reclustered_entities=len(set(adjacency) - placed))


def incident_edges_hash(members: Collection[str], adjacency: Mapping[str, Mapping[str, float]]) -> str:
    """Hash of every edge touching ``members`` (the other end and the weight): it changes exactly when a member gains,
    loses or re-weights an edge, or leaves the graph."""
    parts: list[str] = []
    for member in sorted(members):
        neighbours = adjacency.get(member)
        parts.append(member)
        # Nine significant digits: a weight summed from parallel edges in another order differs in its last bits.
        parts.extend(["\x00"] if neighbours is None else (f"{n}\x1e{w:.9g}" for n, w in sorted(neighbours.items())))
    return content_hash(*parts)


def _check_parameters(max_cluster_size: int, seed: int) -> None:
    if max_cluster_size < 1:
        raise ValueError(f"max_cluster_size must be at least 1, got {max_cluster_size}")
    if seed < 1:
        # graspologic-native seeds an unsigned 64-bit PRNG and rejects 0 and negatives.
        raise ValueError(f"seed must be a positive integer, got {seed}")


def _adjacency(graph: Sequence[tuple[str, str, float]]) -> dict[str, dict[str, float]]:
    adjacency: dict[str, dict[str, float]] = defaultdict(dict)
    for source, target, weight in graph:
        adjacency[source][target] = weight
        adjacency[target][source] = weight
    return adjacency


def _with_edge_hashes(communities: list[Community], adjacency: Mapping[str, Mapping[str, float]]) -> list[Community]:
    return [replace(c, edges_hash=incident_edges_hash(c.entity_ids, adjacency)) if not c.child_ids else c
            for c in communities]


def _leiden(graph: list[tuple[str, str, float]], max_cluster_size: int, seed: int) -> list[Community]:
    """Hierarchical Leiden over an undirected edge list (``_undirected_edge_list``), linked parent to child."""
    if not graph:
        return []

    # graspologic's own Leiden engine, called as graspologic.partition.hierarchical_leiden calls it with its defaults
    # (same clusters for the same edges and seed): graspologic itself imports matplotlib, numba and sklearn, seconds
    # per process, and matplotlib writes a font cache into $HOME, a local file the production tier must not write.
    from graspologic_native import hierarchical_leiden

    clusters = hierarchical_leiden(edges=graph, starting_communities=None, resolution=1.0, randomness=0.001,
                                   iterations=1, use_modularity=True, max_cluster_size=max_cluster_size, seed=seed)

    # One row per (node, level); a cluster is identified by (level, cluster number) and its parent_cluster is a
    # cluster number one level up.
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
                raise RuntimeError(f"Leiden returned cluster {key} whose parent {parent} has no members")
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


def community_content_hash(
    community: Community, entities: Mapping[str, Entity], source_titles: Sequence[str] = ()
) -> str:
    """Hash of a community's membership, what its summary reads of each member (type, description, the chunks and
    documents it stores and counts) and the titles it names as its sources: an unchanged hash means a reusable
    summary, and a retyped member retitles its communities."""
    missing = [entity for entity in community.entity_ids if entity not in entities]
    if missing:
        raise ValueError(f"community {community.community_id} members are not in the entity map: {missing[:10]}")
    parts: list[str] = [str(SUMMARY_RULE_VERSION), community.community_id, *source_titles]
    for entity_id in sorted(community.entity_ids):
        member = entities[entity_id]
        parts += (entity_id, member.type, member.description, *member.chunk_ids, "|", *member.doc_ids, "|")
    return content_hash(*parts)


def summarize_community_extractively(
    community: Community,
    entities: Mapping[str, Entity],
    relationships: Sequence[Relationship],
    *,
    top_entities: int,
    max_sentences: int,
    max_chunk_ids: int = 50,
    generic_types: Collection[str] = (),
    source_titles: Sequence[str] = (),
) -> CommunitySummary:
    """A model-free community report built from the members' own words, titled by its dominant typed entities.

    ``relationships`` should hold at least every relationship touching a member (the whole graph is fine): those
    with both ends inside make the community's structure, those leaving it tell how much a member belongs elsewhere.

    Each member's *belonging* is the share of its weighted degree that stays inside the community (1 when it has no
    relationships). Its *standing* is its centrality (mention count and weighted degree inside the community, each
    scaled to [0, 1] by the community's largest and added) times its belonging, so a hub that most communities
    touch ranks below the members that are this community's own. A type's strength is its members' summed standing.

    Title rule: the leading types are the strongest type outside ``generic_types`` (the default type and types
    guessed by a statistical model) plus the second strongest when it has at least half that strength; a generic
    type leads only in a community with no other type. The title names the leading types, then up to
    ``TITLE_NAMES`` of their members by standing (each leading type's best member first), grouped by type:
    "Services: cart and checkout; Alerts: KubeletDown". Ties break by name, so the title is deterministic.

    The summary opens with what the community is: the top members grouped by type (leading types first), the
    documents it comes from (``source_titles``, see ``source_titles_of``: a runbook's or a service's README title
    says which part of the system a community is, as no member's name does), then the kinds of typed
    relationships inside it; then the distinct sentences of the strongest relationships inside,
    topped up with the top members' descriptions when relationships say too little, then how many documents back it.
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
    # Sorted so that degree sums, and so near-ties, do not depend on the caller's relationship order.
    touching = sorted(
        (r for r in relationships if r.source_id in members or r.target_id in members),
        key=lambda relationship: relationship.relationship_id,
    )
    internal = [r for r in touching if r.source_id in members and r.target_id in members]
    standing = _standing(members, internal, touching)
    ranked = sorted(members.values(), key=lambda entity: (-standing[entity.entity_id], entity.name, entity.entity_id))
    strengths = _type_strengths(ranked, standing)
    leading = _leading_types(strengths, generic_types)
    top = ranked[:top_entities]

    # Lazily: the summary keeps the first few distinct sentences, and a large community's relationships say far more.
    sentences = itertools.chain(_relationship_sentences(internal, members),
                                (sentence for entity in top for sentence in _sentences(entity.description)))
    doc_ids = {doc for entity in members.values() for doc in entity.doc_ids}
    lines = [
        _members_by_type(top, [*leading, *(t for t in strengths if t not in leading)]),
        *([f"From: {'; '.join(source_titles)}."] if source_titles else []),
        *_relationship_kinds(internal, members, generic_types),
        *_distinct(sentences, max_sentences),
        f"Sources: {len(doc_ids)} document{'s' if len(doc_ids) != 1 else ''}.",
    ]

    return CommunitySummary(
        community_id=community.community_id,
        level=community.level,
        title=_title(ranked, leading),
        summary="\n".join(lines),
        top_entities=tuple(entity.name for entity in top),
        content_hash=community_content_hash(community, members, source_titles),
        chunk_ids=_representative_chunks(ranked, max_chunk_ids),
    )


def source_titles_of(
    community: Community, entities: Mapping[str, Entity], titles: Mapping[str, str], limit: int = SOURCE_TITLES
) -> tuple[str, ...]:
    """The titles of the documents most of the community's members come from (by how many members each document
    mentions, ties by title), distinct, at most ``limit``."""
    members_of: Counter[str] = Counter(doc for eid in community.entity_ids for doc in set(entities[eid].doc_ids))
    ranked = sorted(members_of.items(), key=lambda kv: (-kv[1], titles.get(kv[0], ""), kv[0]))
    chosen: list[str] = []
    for doc_id, _ in ranked:
        title = titles.get(doc_id, "").strip()
        if title and title not in chosen:
            chosen.append(title)
            if len(chosen) == limit:
                break
    return tuple(chosen)


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


def _standing(
    members: Mapping[str, Entity], internal: Sequence[Relationship], touching: Sequence[Relationship]
) -> dict[str, float]:
    inside = _weighted_degrees(internal)
    overall = _weighted_degrees(touching)
    top_mentions = max(entity.mention_count for entity in members.values()) or 1
    top_degree = max(inside.values(), default=0.0) or 1.0

    def standing(entity_id: str) -> float:
        centrality = members[entity_id].mention_count / top_mentions + inside[entity_id] / top_degree
        belonging = inside[entity_id] / overall[entity_id] if overall[entity_id] else 1.0
        return centrality * belonging

    return {entity_id: standing(entity_id) for entity_id in members}


def _weighted_degrees(relationships: Sequence[Relationship]) -> dict[str, float]:
    degree: dict[str, float] = defaultdict(float)
    for relationship in relationships:
        if relationship.source_id != relationship.target_id:  # a self-loop connects a member to nothing
            degree[relationship.source_id] += relationship.weight
            degree[relationship.target_id] += relationship.weight
    return degree


def _type_strengths(ranked: Sequence[Entity], standing: Mapping[str, float]) -> dict[str, float]:
    """Each member type's summed standing, strongest first (ties by type name)."""
    strength: dict[str, float] = defaultdict(float)
    for entity in ranked:
        strength[entity.type] += standing[entity.entity_id]
    return dict(sorted(strength.items(), key=lambda item: (-item[1], item[0])))


def _leading_types(strengths: Mapping[str, float], generic_types: Collection[str]) -> list[str]:
    specific = [entity_type for entity_type in strengths if entity_type not in generic_types]
    if not specific:
        return list(strengths)[:1]
    first, *others = specific
    # A second type leads too when it is a real part of the subsystem (alerts beside the services they watch).
    if others and strengths[others[0]] >= SECOND_TYPE_SHARE * strengths[first]:
        return [first, others[0]]
    return [first]


def _title(ranked: Sequence[Entity], leading: Sequence[str]) -> str:
    candidates = [entity for entity in ranked if entity.type in leading]
    # Each leading type's best member first, so every type the title names has a name after it.
    best_of_each = [next(entity for entity in candidates if entity.type == entity_type) for entity_type in leading]
    others = [entity for entity in candidates if entity not in best_of_each]
    named = {entity.entity_id for entity in best_of_each + others[: TITLE_NAMES - len(best_of_each)]}
    return "; ".join(
        f"{_type_label(entity_type)}: "
        + _joined([e.name for e in candidates if e.entity_id in named and e.type == entity_type])
        for entity_type in leading
    )


def _members_by_type(top: Sequence[Entity], type_order: Sequence[str]) -> str:
    groups = [[entity.name for entity in top if entity.type == entity_type] for entity_type in type_order]
    return "; ".join(
        f"{_type_label(entity_type)}: {', '.join(names)}" for entity_type, names in zip(type_order, groups) if names
    ) + "."


def _relationship_kinds(
    internal: Sequence[Relationship], members: Mapping[str, Entity], generic_types: Collection[str]
) -> list[str]:
    """One line naming the (source type, relationship, target type) kinds inside, or none: those between specific
    types first, since they say what the subsystem is, then the most frequent."""
    counts: dict[tuple[str, str, str], int] = defaultdict(int)
    for relationship in internal:
        if relationship.source_id != relationship.target_id:
            source, target = members[relationship.source_id], members[relationship.target_id]
            counts[source.type, _verb(relationship.type), target.type] += 1

    def order(item: tuple[tuple[str, str, str], int]) -> tuple[int, int, tuple[str, str, str]]:
        (source, _, target), count = item
        return -((source not in generic_types) + (target not in generic_types)), -count, item[0]

    kinds = sorted(counts.items(), key=order)[:RELATIONSHIP_KINDS]
    if not kinds:
        return []
    return ["Relationships: " + ", ".join(f"{source} {verb} {target} ({n})" for (source, verb, target), n in kinds)
            + "."]


def _type_label(entity_type: str) -> str:
    """An ontology type as a plural heading: Service -> Services, TECHNOLOGY -> Technologies."""
    words = entity_type.replace("_", " ").lower()
    if words.endswith("y") and words[-2:-1] not in ("a", "e", "i", "o", "u"):
        plural = words[:-1] + "ies"
    elif words.endswith(("s", "x", "z", "ch", "sh")):
        plural = words + "es"
    else:
        plural = words + "s"
    return plural[:1].upper() + plural[1:]


def _joined(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _verb(relationship_type: str) -> str:
    return relationship_type.lower().replace("_", " ")


def _relationship_sentences(internal: Sequence[Relationship], members: Mapping[str, Entity]) -> Iterator[str]:
    """The sentences of the relationships inside, the heaviest first (one made of its ends and type for a
    relationship without a description)."""
    for relationship in sorted(internal, key=lambda relationship: (-relationship.weight, relationship.relationship_id)):
        described = _sentences(relationship.description)
        if not described:
            source, target = members[relationship.source_id].name, members[relationship.target_id].name
            described = (f"{source} {_verb(relationship.type)} {target}.",)
        yield from described


@functools.lru_cache(maxsize=1 << 16)  # a description is split again in every community of every level it is in
def _sentences(text: str) -> tuple[str, ...]:
    return tuple(sentence for sentence in _SENTENCE_END.split(_WHITESPACE.sub(" ", text).strip()) if sentence)


def _distinct(sentences: Iterable[str], limit: int) -> list[str]:
    """The first ``limit`` sentences that differ from every earlier one but in case and final punctuation."""
    seen: set[str] = set()
    kept: list[str] = []
    for sentence in sentences:
        key = sentence.casefold().rstrip(".!? ")
        if key not in seen:
            seen.add(key)
            kept.append(sentence)
            if len(kept) == limit:
                break
    return kept


def _representative_chunks(ranked: Sequence[Entity], limit: int) -> tuple[str, ...]:
    """The members' chunks, those mentioning the most members first (there the community's members meet), then by
    the rank of their best member: whoever cites only the first few (global mode does) cites the community itself
    rather than the other documents of a hub it shares with many communities."""
    members_in: dict[str, int] = defaultdict(int)
    best_rank: dict[str, int] = {}
    for rank, entity in enumerate(ranked):
        for chunk in set(entity.chunk_ids):
            members_in[chunk] += 1
            best_rank.setdefault(chunk, rank)
    return tuple(sorted(members_in, key=lambda chunk: (-members_in[chunk], best_rank[chunk], chunk))[:limit])
