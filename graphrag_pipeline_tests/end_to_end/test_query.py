import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from graphrag_pipeline.query import MODES, RETRIEVERS, IndexNotFoundError, QueryParameters, open_index
from graphrag_pipeline.query.signals import SIGNALS
from graphrag_pipeline_tests.conftest import build, folder_settings

pytestmark = pytest.mark.slow

QUESTION = "Where was the founder of Acme Robotics born?"
BRIDGE_DOC = "t:mirela-vantongeren.md"


@pytest.fixture(scope="module")
def engine(multihop_settings):
    with open_index(settings=multihop_settings) as index:
        yield index


def test_hybrid_finds_the_second_hop_that_vector_search_misses(engine):
    vector = engine.query(QUESTION, mode="vector", top_k=3)
    hybrid = engine.query(QUESTION, mode="hybrid", top_k=3)
    assert BRIDGE_DOC not in vector.doc_ids
    assert BRIDGE_DOC in hybrid.doc_ids
    assert not hybrid.fell_back_to_vector
    bridge = next(r for r in hybrid.results if r.doc_id == BRIDGE_DOC)
    assert bridge.scores["graph"] > 0
    assert bridge.entity_path[0] == "Acme Robotics" and bridge.entity_path[-1] == "Mirela Vantongeren"
    assert bridge.hops_from_query == 1
    assert bridge.citations[0].doc_id == BRIDGE_DOC and bridge.source["title"] == "Mirela Vantongeren"
    assert any(e.name == "Acme Robotics" for e in hybrid.entities_mentioned)
    assert any({r.source, r.target} == {"Acme Robotics", "Mirela Vantongeren"} for r in hybrid.relationships)


def test_result_fields_and_scores_are_consistent(engine):
    response = engine.query(QUESTION, top_k=5)
    assert response.mode == "hybrid" and 0 < len(response.results) <= 5
    combined = [r.combined_score for r in response.results]
    assert combined == sorted(combined, reverse=True)
    weights = engine.settings.retrieval
    for result in response.results:
        expected = (weights.vector_weight * result.scores["vector"] + weights.graph_weight * result.scores["graph"]
                    + weights.keyword_weight * result.scores["keyword"] + weights.relation_weight * result.scores["relation"])
        assert result.combined_score == pytest.approx(expected, abs=1e-5)
        assert result.text and result.chunk_id and result.source["uri"]
    json.dumps(response.to_dict())  # serializable for agents


def test_graph_mode_ranks_by_graph_score_and_rrf_is_available(engine):
    graph = engine.query(QUESTION, mode="graph", top_k=4)
    assert [r.combined_score for r in graph.results] == [r.scores["graph"] for r in graph.results]
    rrf = engine.query(QUESTION, fusion="rrf", top_k=6)
    vector = engine.query(QUESTION, mode="vector", top_k=6)
    assert [r.combined_score for r in rrf.results] == sorted((r.combined_score for r in rrf.results), reverse=True)
    assert all(r.combined_score < 2 / 60 for r in rrf.results)  # reciprocal-rank scores, not similarities
    assert rrf.doc_ids.index(BRIDGE_DOC) < vector.doc_ids.index(BRIDGE_DOC)


def test_max_hops_zero_cannot_cross_to_the_bridge_entity(engine):
    zero = engine.retrieve(QUESTION, max_hops=0)
    two = engine.retrieve(QUESTION, max_hops=2)
    assert all(hit.hops == 0 for hit in zero.reached.values())
    assert max(hit.hops for hit in two.reached.values()) >= 1
    with pytest.raises(ValueError):
        engine.query(QUESTION, max_hops=7)
    with pytest.raises(ValueError):
        engine.query("   ")
    with pytest.raises(ValueError):
        engine.query(QUESTION, mode="telepathy")


def test_unknown_or_out_of_range_parameters_are_refused_with_what_is_allowed(engine):
    for bad, message in [
        ({"mode": "telepathy"}, "mode must be one of vector, keyword, graph, hybrid, global; not 'telepathy'"),
        ({"fusion": "max"}, "fusion must be one of weighted, rrf; not 'max'"),
        ({"top_k": 0}, "top_k must be a whole number of at least 1, not 0"),
        ({"max_hops": -1}, "max_hops must be between 0 and 3, not -1"),
        ({"results": "pages"}, "results must be one of documents, chunks; not 'pages'"),
    ]:
        with pytest.raises(ValueError) as refused:
            engine.query(QUESTION, **bad)
        assert str(refused.value) == message
        if "results" not in bad:  # how results are grouped is the response's business, not the retrieval's
            with pytest.raises(ValueError):
                engine.retrieve(QUESTION, **bad)
    assert QueryParameters(mode="global", top_k=1, max_hops=0, fusion="rrf").mode == "global"


def test_every_mode_has_one_retriever_and_answers_through_the_shared_path(engine):
    assert set(RETRIEVERS) == set(MODES) == {"vector", "keyword", "graph", "hybrid", "global"}
    for mode in MODES:
        response = engine.query(QUESTION, mode=mode, top_k=3)
        assert response.mode == mode and 1 <= len(response.results) <= 3
        # The question is embedded and the answer assembled once, the same way, whatever ranked the candidates.
        assert list(response.timings_ms)[0] == "embed" and list(response.timings_ms)[-1] == "respond"
        assert engine.retrieve(QUESTION, mode=mode, top_k=3).mode == mode


def test_the_response_json_keeps_the_shape_agents_and_the_cli_read(engine):
    """The keys and value types `to_dict()` had while linked entities and facts were plain dicts."""
    entity_keys = {"id": str, "name": str, "type": str, "linked_by": str, "confidence": float}
    fact_keys = {"source": str, "type": str, "target": str, "predicates": list, "weight": float, "doc_ids": list,
                 "followed": bool, "step": int, "source_system": str, "target_system": str}
    result_keys = {"chunk_id": str, "text": str, "doc_id": str, "source": dict, "entity_path": list,
                   "combined_score": float, "hops_from_query": int, "scores": dict, "citations": list}
    for mode in MODES:
        payload = json.loads(json.dumps(engine.query(QUESTION, mode=mode, top_k=5).to_dict()))
        assert set(payload) == {"question", "mode", "results", "entities_mentioned", "relationships",
                                "fell_back_to_vector", "timings_ms", "index_updating"}
        assert payload["question"] == QUESTION and payload["mode"] == mode and payload["fell_back_to_vector"] is False
        for result in payload["results"]:
            assert {key: type(value) for key, value in result.items()} == result_keys
            assert all(set(c) == {"doc_id", "chunk_id", "title", "uri"} for c in result["citations"])
            # One score per signal of the registry, in its order.
            assert list(result["scores"]) == [signal.name for signal in SIGNALS]
            assert all(isinstance(score, float) for score in result["scores"].values())
        for entity in payload["entities_mentioned"]:
            assert {key: type(value) for key, value in entity.items()} == entity_keys
        for fact in payload["relationships"]:
            assert {key: type(value) for key, value in fact.items()} == fact_keys
            assert all(isinstance(p, str) for p in fact["predicates"]) and fact["doc_ids"]

    hybrid = engine.query(QUESTION, top_k=5)
    payload = hybrid.to_dict()
    acme = next(e for e in payload["entities_mentioned"] if e["name"] == "Acme Robotics")
    assert list(acme) == list(entity_keys)  # field order too: the CLI's --json prints them in this order
    assert acme["linked_by"] == "name:Acme Robotics" and acme["confidence"] == 1.0 and acme["type"] == "ORGANIZATION"
    founded = next(f for f in payload["relationships"]
                   if {f["source"], f["target"]} == {"Acme Robotics", "Mirela Vantongeren"})
    assert list(founded) == list(fact_keys)
    assert founded["doc_ids"] == ["t:acme-robotics.md"]  # the one passage naming both


def test_global_mode_answers_from_community_summaries(engine):
    response = engine.query("Which robotics companies and founders are described?", mode="global", top_k=3)
    assert response.results, "community summaries should be indexed"
    for result in response.results:
        assert result.source["kind"] == "community" and result.text
        assert result.citations and all(c.doc_id.startswith("t:") for c in result.citations)


def test_one_engine_answers_concurrent_questions_like_sequential_ones(engine):
    questions = [QUESTION, "Who founded Zentrix Labs?", "Where was Sofia Marquez born?", "What does Boltworks make?"] * 3
    sequential = [engine.query(q).doc_ids for q in questions]
    with ThreadPoolExecutor(max_workers=6) as pool:
        concurrent = list(pool.map(lambda q: engine.query(q).doc_ids, questions))
    assert concurrent == sequential


def test_no_entity_anywhere_falls_back_to_vector_search(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("the quick brown fox jumps over the lazy dog near the river bank.")
    (corpus / "b.txt").write_text("a slow green turtle walks under the tall tree in the quiet garden.")
    settings = folder_settings(tmp_path / "index", corpus, extraction={"title_entity_type": None})
    build(settings)
    with open_index(settings=settings) as index:
        response = index.query("which animal jumps over the dog?", top_k=2)
    assert response.fell_back_to_vector
    assert response.doc_ids[0] == "t:a.txt"
    assert all(r.scores["graph"] == 0 and r.entity_path == [] for r in response.results)


def test_opening_a_missing_index_says_what_to_do(tmp_path):
    with pytest.raises(IndexNotFoundError, match="materialize"):
        open_index(index_dir=tmp_path / "nothing-here")


def test_importing_the_query_module_loads_no_dagster_and_no_model():
    code = ("import sys, graphrag_pipeline.query; "
            "print(sorted(m for m in ('dagster', 'torch', 'spacy', 'sentence_transformers') if m in sys.modules))")
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert output.strip() == "[]"
