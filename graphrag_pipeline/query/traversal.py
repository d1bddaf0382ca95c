"""Spreading activation over any ``GraphStore``: the scoring lives here, the stores only list neighbourhoods.

The store is told the walk's plan first and answers with the neighbourhoods it will expand, as far as it reads
ahead (a server, all of them in one round trip); each hop asks once for the frontier's missing ones. Every backend
returns the same hits because they all run this one loop.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphrag_pipeline.lib.core.models import Relationship
from graphrag_pipeline.lib.stores.protocols import (
    AskedRelationships, GraphStore, Neighbourhood, TraversalHit, WalkPlan,
)

# entity id -> (score, hops, path of entity ids, relationship ids along the path)
_Reach = tuple[float, int, tuple[str, ...], tuple[str, ...]]


def hub_damping(degrees: np.ndarray) -> np.ndarray:
    """``1 + log10(degree)``: the divisor on activation spreading *from* an entity. Ordinary entities (a few
    relationships) pass on nearly everything; a hub with a thousand relationships passes a quarter, so generic
    entities ("country", "Kubernetes") do not flood the neighbourhood of every question."""
    return 1.0 + np.log10(np.maximum(degrees, 1))


def _check_arguments(seeds: dict[str, float], max_hops: int, decay: float, fanout: int, min_score: float) -> None:
    if not (math.isfinite(min_score) and min_score >= 0):
        raise ValueError(f"min_score must be finite and >= 0, got {min_score!r}")
    if max_hops < 0:
        raise ValueError(f"max_hops must be >= 0, got {max_hops}")
    if not 0 < decay <= 1:
        raise ValueError(f"decay must be in (0, 1], got {decay}")
    if fanout < 1:
        raise ValueError(f"fanout must be >= 1, got {fanout}")
    for seed, activation in seeds.items():
        if not (math.isfinite(activation) and activation >= 0):
            raise ValueError(f"seed {seed} has activation {activation!r}; activations must be finite and >= 0")


def _by_score(reached: dict[str, _Reach], entity_ids: Iterable[str]) -> list[tuple[str, _Reach]]:
    """The frontier in expansion order: strongest first, ties by entity id (which path wins a tie depends on it)."""
    frontier = [(entity_id, reached[entity_id]) for entity_id in entity_ids]
    return sorted(frontier, key=lambda item: (-item[1][0], item[0]))


@dataclass(frozen=True)
class Walk:
    """What a walk reached, and what its store read ahead for scoring the chunks of what it reached."""

    hits: list[TraversalHit]  # as ``spread_activation`` returns them
    # The chunks of entities the walk may reach, as far as the store read them ahead (``ReadAhead.chunks_of``).
    chunks_read: dict[str, list[str]]
    asked: dict[str, Relationship]  # ``ReadAhead.asked``: the relationships of ``walk``'s ``asked``


def spread_activation(graph: GraphStore, seeds: dict[str, float], max_hops: int, **options: Any) -> list[TraversalHit]:
    """The hits of a ``walk`` with those ``options`` (its keyword arguments)."""
    return walk(graph, seeds, max_hops, **options).hits


def walk(
    graph: GraphStore,
    seeds: dict[str, float],
    max_hops: int,
    decay: float = 0.5,
    fanout: int = 50,
    relationship_types: Sequence[str] | None = None,
    min_score: float = 0.0,
    hidden: frozenset[str] = frozenset(),
    chunks_up_to: int = 0,
    asked: AskedRelationships | None = None,
) -> Walk:
    """Spread activation from ``seeds`` over relationships (in both directions) for at most ``max_hops`` hops.

    Scoring (the query module relies on it):

    * A seed that exists in the graph starts with ``hops=0``, ``score`` = its activation, ``path=(seed,)``; a
      weakly seeded entity that a strong seed reaches with more activation takes that path's score, hops and
      path instead (an entity's score is the best of its own seed and every path). Unknown seed ids are ignored.
    * Reaching neighbour ``n`` from entity ``u`` over a relationship of weight ``w`` gives
      ``score(u) * decay * (w / max_w(u)) / (1 + log10(degree(u)))``: ``max_w(u)`` is the heaviest weight among
      ``u``'s relationships and ``degree(u)`` counts all relationships touching ``u`` (any type, self-loops
      excluded). Decay is the per-hop factor; the relative weight favours ``u``'s strongest ties, so an entity
      whose facts were merged from many documents (large raw weights) does not spread more than a rare one; the
      logarithm stops hubs from spreading (an entity with 1,000 relationships passes on a quarter of what a leaf
      does). Every factor is <= 1, so scores never grow along a path.
    * Each entity keeps its best score over all paths of at most ``max_hops`` hops, with that path's hop count,
      entity ids (seed first) and relationship ids. An entity improved at hop h is re-expanded from there.
    * Expanding ``u`` considers its relationships heaviest first (ties by neighbour id, then relationship id),
      skips entities already on ``u``'s path and types outside ``relationship_types`` (``None``: all types),
      and stops after ``fanout`` distinct neighbours.
    * A neighbour reached with less than ``min_score`` is not recorded or expanded (it still counts towards
      ``fanout``), so the result is exactly the unbounded one without the non-seed hits below ``min_score``.
    * Hits are sorted by score desc, then hops, then entity id — deterministic for the same graph.

    ``hidden``: entity and relationship ids the walk may not use (what only documents the caller may not read
    supply), as if they were not in the graph; the degrees that damp hubs still count them.

    Neighbourhoods list only each entity's heaviest ``2·fanout + max_hops + 1`` allowed relationships. The walk
    starts with ``graph.neighbourhoods_ahead`` (the seeds' neighbourhoods and those the store reads ahead); each
    hop then makes one ``graph.neighbourhoods`` call for the frontier entities still missing, if any. An entity
    whose expansion runs out of listed relationships before reaching ``fanout`` neighbours (parallel relationships,
    neighbours already on the path) is fetched again in full. A write between two reads shows from the next read
    on.

    ``chunks_up_to``: the caller scores next the chunks of the entities reached that at most this many chunks
    mention; the store may read those ahead with the neighbourhoods (``WalkPlan.chunks_up_to``).

    ``asked``: relationships the caller follows next (a question's asked relationships), which the store reads with
    the walk's first read (``Walk.asked``).
    """
    _check_arguments(seeds, max_hops, decay, fanout, min_score)
    types = None if relationship_types is None else sorted(set(relationship_types))
    limit = 2 * fanout + max_hops + 1

    # The seeds' neighbourhoods tell which seeds exist and are the first hop's expansions (with no hop to take,
    # existence is all that is needed).
    plan = WalkPlan(None if types is None else tuple(types), max_hops, decay, min_score, limit if max_hops else 0,
                    chunks_up_to, asked)
    read_ahead = graph.neighbourhoods_ahead(seeds, plan)
    neighbourhoods = read_ahead.neighbourhoods
    best: dict[str, _Reach] = {
        seed: (float(activation), 0, (seed,), ()) for seed, activation in seeds.items()
        if seed in neighbourhoods and seed not in hidden
    }
    frontier = _by_score(best, best)
    for hop in range(1, max_hops + 1):
        # Every factor of a hop is at most 1, so an entity whose score times the decay is under min_score passes on
        # nothing that would be kept: it is not expanded, and its neighbourhood is not read.
        expanding = [(entity_id, reach) for entity_id, reach in frontier
                     if reach[0] > 0 and reach[0] * decay >= min_score]
        if not expanding:
            break
        missing = [entity_id for entity_id, _ in expanding if entity_id not in neighbourhoods]
        if missing:
            neighbourhoods.update(graph.neighbourhoods(missing, types, limit))
        # An entity deleted by a write since it was reached has no neighbourhood left to spread over.
        expanding = [(entity_id, reach) for entity_id, reach in expanding if entity_id in neighbourhoods]
        degrees = np.array([neighbourhoods[entity_id].degree for entity_id, _ in expanding], dtype=np.int64)
        # Activation leaving an entity is multiplied by this, so the per-candidate work is two multiplications.
        damping_factors = (1.0 / hub_damping(degrees)).tolist()
        improved: set[str] = set()
        for (entity_id, (score, _, path, via)), damping_factor in zip(expanding, damping_factors):
            neighbourhood: Neighbourhood | None = neighbourhoods[entity_id]
            spread = score * decay * damping_factor
            while neighbourhood is not None:
                taken = _expand(neighbourhood, spread, hop, path, via, fanout, min_score, best, improved, hidden)
                if taken >= fanout or neighbourhood.complete:
                    break
                # Ran out of listed relationships: list them all and redo this entity (re-scoring the same
                # candidates changes nothing, so the result is exact); None if a write has deleted it meanwhile.
                neighbourhood = graph.neighbourhoods([entity_id], types).get(entity_id)
        frontier = _by_score(best, improved)

    ranked = sorted(best.items(), key=lambda item: (-item[1][0], item[1][1], item[0]))
    return Walk([TraversalHit(entity_id, hops, score, path, via) for entity_id, (score, hops, path, via) in ranked],
                read_ahead.chunks_of, read_ahead.asked)


def _expand(
    neighbourhood: Neighbourhood,
    spread: float,
    hop: int,
    path: tuple[str, ...],
    via: tuple[str, ...],
    fanout: int,
    min_score: float,
    best: dict[str, _Reach],
    improved: set[str],
    hidden: frozenset[str] = frozenset(),
) -> int:
    """Pass ``spread`` over the listed relationships to at most ``fanout`` distinct neighbours off ``path``,
    recording improvements in ``best`` and ``improved``; returns how many distinct neighbours were taken, or
    ``fanout`` once no further relationship can reach ``min_score`` (so the caller lists no more of them)."""
    heaviest = neighbourhood.heaviest
    taken: set[str] = set()
    for neighbour, relationship_id, weight in neighbourhood.edges:
        if len(taken) >= fanout:
            break
        if neighbour in taken or neighbour in path or neighbour in hidden or relationship_id in hidden:
            continue
        taken.add(neighbour)
        candidate = spread * (weight / heaviest)
        if candidate < min_score:
            # Relationships are listed heaviest first, so none after this one reaches min_score either: stopping
            # here records what going on would (nine in ten relationships a question's walk looked at were past
            # this point).
            return fanout
        current = best.get(neighbour)
        if current is None or candidate > current[0]:
            best[neighbour] = (candidate, hop, path + (neighbour,), via + (relationship_id,))
            improved.add(neighbour)
    return len(taken)
