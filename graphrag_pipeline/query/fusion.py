"""Rank fusion: pure arithmetic, unit-tested on its own."""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np


def normalize_by_max(scores: Mapping[str, float]) -> dict[str, float]:
    """Scale non-negative scores into [0, 1] by the largest one (0 stays 0; an all-zero map stays all zero)."""
    top = max(scores.values(), default=0.0)
    if top <= 0:
        return {key: 0.0 for key in scores}
    return {key: max(0.0, value) / top for key, value in scores.items()}


def weighted_fusion(
    signals: Mapping[str, Mapping[str, float]],
    weights: Mapping[str, float],
) -> dict[str, float]:
    """combined(item) = Σ_signal weight·score, with a missing score counting as 0.

    Signals must already be on comparable scales (cosine similarity in [0, 1], max-normalized graph activation).
    """
    unknown = set(signals) - set(weights)
    if unknown:
        raise ValueError(f"no weight for signals {sorted(unknown)}")
    items = {item for scores in signals.values() for item in scores}
    return {
        item: sum(weights[name] * scores.get(item, 0.0) for name, scores in signals.items())
        for item in items
    }


def reciprocal_rank_fusion(
    rankings: Mapping[str, Sequence[str]],
    k: int = 60,
    weights: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """RRF (Cormack et al. 2009): score(item) = Σ_ranking w / (k + rank), rank starting at 1."""
    if k <= 0:
        raise ValueError("rrf k must be positive")
    fused: dict[str, float] = {}
    for name, ranking in rankings.items():
        weight = 1.0 if weights is None else weights.get(name, 1.0)
        for rank, item in enumerate(ranking, start=1):
            fused[item] = fused.get(item, 0.0) + weight / (k + rank)
    return fused


def cap_at_origin(
    fused: Mapping[str, float], without_graph: Mapping[str, float], reached_from: Mapping[str, str],
) -> dict[str, float]:
    """A candidate the graph reached from another candidate ranks no higher than that one, unless its other signals
    alone put it higher: its graph evidence is the other candidate's similarity passed on, so the hop that led to it
    comes first. ``reached_from``: candidate -> the candidate its graph score came through; ``without_graph``: each
    candidate's fused score with the graph signal left out."""
    capped = dict(fused)
    for item, origin in reached_from.items():
        if item in fused and origin in fused and origin != item:
            ceiling = max(without_graph.get(item, 0.0), math.nextafter(fused[origin], -math.inf))
            capped[item] = min(fused[item], ceiling)
    return capped


def rank(scores: Mapping[str, float]) -> list[str]:
    """Items by descending score; ties broken by id so rankings are deterministic."""
    return [item for item, _ in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))]


def top_ranked(scores: Mapping[str, float], count: int) -> list[str]:
    """``rank(scores)[:count]`` without ordering the rest: a walk at 100k chunks scores thousands of them, and the
    pool takes a hundred. Only the items at or above the count-th best score (ties included) are sorted."""
    if count <= 0:
        return []
    if len(scores) <= count:
        return rank(scores)
    values = np.fromiter(scores.values(), dtype=np.float64, count=len(scores))
    threshold = np.partition(values, len(values) - count)[len(values) - count]
    items = list(scores)
    return rank({items[i]: scores[items[i]] for i in np.flatnonzero(values >= threshold)})[:count]
