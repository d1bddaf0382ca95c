import random

import pytest

from graphrag_pipeline.query.fusion import (
    cap_at_origin,
    normalize_by_max,
    rank,
    reciprocal_rank_fusion,
    top_ranked,
    weighted_fusion,
)


def test_weighted_fusion_blends_signals_and_counts_missing_as_zero():
    fused = weighted_fusion(
        {"vector": {"a": 0.9, "b": 0.5}, "graph": {"b": 1.0, "c": 0.5}},
        {"vector": 0.6, "graph": 0.4},
    )
    assert fused == pytest.approx({"a": 0.54, "b": 0.7, "c": 0.2})
    assert rank(fused) == ["b", "a", "c"]


def test_weighted_fusion_rejects_a_signal_without_weight():
    with pytest.raises(ValueError, match="keyword"):
        weighted_fusion({"keyword": {"a": 1.0}}, {"vector": 1.0})


def test_reciprocal_rank_fusion_arithmetic():
    fused = reciprocal_rank_fusion({"vector": ["a", "b"], "graph": ["b", "c"]}, k=60)
    assert fused["a"] == pytest.approx(1 / 61)
    assert fused["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert fused["c"] == pytest.approx(1 / 62)
    assert rank(fused) == ["b", "a", "c"]


def test_reciprocal_rank_fusion_weights_and_k_validation():
    fused = reciprocal_rank_fusion({"vector": ["a"], "graph": ["b"]}, k=10, weights={"vector": 2.0, "graph": 1.0})
    assert fused["a"] == pytest.approx(2 / 11) and fused["b"] == pytest.approx(1 / 11)
    with pytest.raises(ValueError):
        reciprocal_rank_fusion({"vector": ["a"]}, k=0)


def test_normalize_by_max_and_deterministic_ties():
    assert normalize_by_max({"a": 2.0, "b": 1.0, "c": 0.0}) == {"a": 1.0, "b": 0.5, "c": 0.0}
    assert normalize_by_max({"a": 0.0}) == {"a": 0.0}
    assert rank({"b": 1.0, "a": 1.0, "c": 2.0}) == ["c", "a", "b"]


def test_a_candidate_reached_from_another_ranks_right_below_it_unless_its_other_signals_put_it_higher():
    fused = {"origin": 0.5, "next_hop": 0.7, "strong": 0.8, "unrelated": 0.45, "other": 0.6}
    without_graph = {"origin": 0.5, "next_hop": 0.3, "strong": 0.65, "unrelated": 0.45, "other": 0.6}
    capped = cap_at_origin(fused, without_graph, {"next_hop": "origin", "strong": "origin", "gone": "origin"})
    assert rank(capped) == ["strong", "other", "origin", "next_hop", "unrelated"]
    assert capped["next_hop"] < capped["origin"] and capped["next_hop"] == pytest.approx(0.5)
    assert capped["strong"] == 0.65  # its similarity alone is above the origin: the graph lifts it no further
    assert {k: v for k, v in capped.items() if k not in ("next_hop", "strong")} == {
        k: v for k, v in fused.items() if k not in ("next_hop", "strong")}
    assert "gone" not in capped
    # a graph score that does not lift a candidate above its origin is left alone
    assert cap_at_origin({"a": 0.5, "b": 0.4}, {"a": 0.5, "b": 0.1}, {"b": "a"}) == {"a": 0.5, "b": 0.4}


@pytest.mark.parametrize("size", [0, 1, 7, 100, 101, 3000])
@pytest.mark.parametrize("distinct_scores", [True, False])
def test_top_ranked_is_the_head_of_the_full_ranking_ties_included(size, distinct_scores):
    generator = random.Random(size)
    scores = {f"chunk-{generator.getrandbits(64):016x}":
              generator.random() if distinct_scores else generator.randint(0, 3) / 4 for _ in range(size)}
    for count in (0, 1, 5, 100, 200):
        assert top_ranked(scores, count) == rank(scores)[:count]
