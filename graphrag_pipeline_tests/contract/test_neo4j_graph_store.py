"""What the Neo4j-protocol store does beyond the GraphStore contract: labels and relationship types from the
ontology only, batched idempotent writes, delete-by-document, and traversals identical to the embedded store's.

Runs against the session's ArcadeDB Bolt server, and against a real Neo4j when ``NEO4J_URI`` is set.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from graphrag_pipeline.lib.core.config import Ontology
from graphrag_pipeline.lib.core.models import Entity, Relationship
from graphrag_pipeline.lib.stores.embedded_graph import EmbeddedGraphStore
from graphrag_pipeline.lib.stores.neo4j_graph import Neo4jGraphStore, checked_identifier, scoped_subqueries
from graphrag_pipeline.lib.stores.protocols import Subgraph
from graphrag_pipeline.query.traversal import spread_activation, walk
from graphrag_pipeline_tests.contract import bolt_server
from graphrag_pipeline_tests.contract.test_graph_store_contract import entity, rel

ONTOLOGY = Ontology.model_validate(
    {
        "entity_types": [{"name": "PERSON"}, {"name": "Service"}, {"name": "CONCEPT"}],
        "relationship_types": [{"name": "DEPENDS_ON"}, {"name": "RELATED_TO"}],
        "default_entity_type": "CONCEPT",
        "fallback_relationship_type": "RELATED_TO",
    }
)

BACKENDS = {
    "arcadedb": bolt_server.arcadedb_graph_store,
    "real": bolt_server.real_neo4j_graph_store,
}

pytestmark = pytest.mark.server


@pytest.fixture(
    params=[
        pytest.param("arcadedb", marks=pytest.mark.slow),
        pytest.param("real"),
    ]
)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def open_store(backend: str) -> Iterator[Any]:
    opened: list[Neo4jGraphStore] = []

    def factory(**options: Any) -> Neo4jGraphStore:
        store = BACKENDS[backend](**options)
        opened.append(store)
        return store

    yield factory
    for store in opened:
        store.close()


def cypher(store: Neo4jGraphStore, query: str, **parameters: Any) -> list[dict[str, Any]]:
    return store._query(query, **parameters)  # noqa: SLF001 - inspecting what the store wrote


def raw_counts(store: Neo4jGraphStore) -> tuple[int, int]:
    nodes = cypher(store, "MATCH (n) WHERE n:Entity OR n:Chunk RETURN count(n) AS n")[0]["n"]
    edges = cypher(store, "MATCH (n)-[r]->() WHERE n:Entity OR n:Chunk RETURN count(r) AS n")[0]["n"]
    return nodes, edges


def entity_labels(store: Neo4jGraphStore) -> dict[str, list[str]]:
    records = cypher(store, "MATCH (e:Entity) RETURN e.entity_id AS id, labels(e) AS labels")
    return {record["id"]: sorted(record["labels"]) for record in records}


def test_labels_and_types_come_only_from_the_ontology(open_store) -> None:
    store = open_store(ontology=ONTOLOGY)
    hostile = "PERSON`) DETACH DELETE n //"
    store.upsert_entities(
        [entity("ada", type_="PERSON"), entity("api", type_="Service"), entity("odd", type_=hostile),
         entity("org", type_="ORGANIZATION")]
    )
    store.upsert_relationships(
        [rel("api", "ada", type_="DEPENDS_ON"), rel("ada", "org", type_="KNOWS"), rel("odd", "api", type_=hostile)]
    )

    labels = entity_labels(store)
    # one label style, whatever the ontology's spelling: spaCy's PERSON is :Person beside the catalog's :Service
    assert labels == {"ada": ["Entity", "Person"], "api": ["Entity", "Service"], "odd": ["Entity"], "org": ["Entity"]}
    types = {
        r["id"]: r["neo_type"]
        for r in cypher(store, "MATCH (:Entity)-[r]->(:Entity) RETURN r.relationship_id AS id, type(r) AS neo_type")
    }
    assert types == {
        "api-DEPENDS_ON-ada": "DEPENDS_ON",
        "ada-KNOWS-org": "RELATED_TO",  # not in the ontology: the fallback type, the own type kept as a property
        f"odd-{hostile}-api": "RELATED_TO",
    }
    # Reads give back the stored types unchanged.
    assert store.get_entities(["odd"])["odd"].type == hostile
    assert store.get_relationships(["ada-KNOWS-org"])["ada-KNOWS-org"].type == "KNOWS"
    assert store.stats().relationship_types == {"DEPENDS_ON": 1, "KNOWS": 1, hostile: 1}
    hits = spread_activation(store, {"ada": 1.0}, 1, relationship_types=["KNOWS"])
    assert {hit.entity_id for hit in hits} == {"ada", "org"}
    with pytest.raises(ValueError):
        checked_identifier(hostile)


def test_an_earlier_versions_labels_move_to_the_one_style_when_the_store_opens(open_store, backend: str) -> None:
    if backend != "arcadedb":
        pytest.skip("reopens the ArcadeDB database the store was given")
    store = open_store(ontology=ONTOLOGY)
    store.upsert_entities([entity("ada", type_="PERSON")])
    # as an earlier version wrote it (auto-commit: ArcadeDB re-creates a relabelled vertex outside transactions)
    store._run_auto_commit("MATCH (e:Entity {entity_id: 'ada'}) REMOVE e:Person SET e:PERSON")  # noqa: SLF001
    assert entity_labels(store) == {"ada": ["Entity", "PERSON"]}
    server = bolt_server.arcadedb_bolt_server()
    reopened = Neo4jGraphStore(server.uri, server.user, server.password, store.database, ontology=ONTOLOGY)
    try:
        assert entity_labels(reopened) == {"ada": ["Entity", "Person"]}
    finally:
        reopened.close()


def test_the_bolt_server_also_runs_in_a_process_of_its_own() -> None:
    # The benchmarks' server (no JVM in the client's process): a store on it writes and reads, and the server's
    # process stops by itself when the block ends (a child that had to be killed ends with a negative status).
    with bolt_server.arcadedb_bolt_server_process() as server:
        store = Neo4jGraphStore(server.uri, server.user, server.password, server.create_database(), ontology=ONTOLOGY)
        try:
            store.upsert_entities([entity("ada", type_="PERSON")])
            assert set(store.get_entities(["ada", "bob"])) == {"ada"}
        finally:
            store.close()
    assert server.exit_status == 0


def test_type_change_moves_the_label(open_store) -> None:
    store = open_store(ontology=ONTOLOGY)
    store.upsert_entities([entity("a", type_="PERSON"), entity("b", type_="Service")])
    store.upsert_relationships([rel("a", "b")])
    store.set_chunk_mentions({"c1": ["a"]})

    store.upsert_entities([entity("a", type_="Service"), entity("b", type_="UNKNOWN")])

    labels = entity_labels(store)
    assert labels == {"a": ["Entity", "Service"], "b": ["Entity"]}
    assert store.get_entities(["a"])["a"] == entity("a", type_="Service")
    assert store.all_relationship_ids() == {"a-RELATED_TO-b"} and store.entities_of_chunks(["c1"]) == {"c1": ["a"]}


def test_schema_is_created_idempotently(open_store, backend: str) -> None:
    store = open_store()
    names = {r["name"] for r in cypher(store, "SHOW CONSTRAINTS")}
    assert {"entity_id_unique", "chunk_id_unique"} <= names
    again = Neo4jGraphStore(store.uri, *_credentials(store, backend), store.database)  # opening again is harmless
    again.close()
    assert {r["name"] for r in cypher(store, "SHOW CONSTRAINTS")} == names


def _credentials(store: Neo4jGraphStore, backend: str) -> tuple[str, str]:
    if backend == "arcadedb":
        return bolt_server.ROOT_USER, bolt_server.ROOT_PASSWORD
    settings = bolt_server.real_neo4j_settings()
    assert settings is not None
    return settings["user"], settings["password"]


def test_writing_the_same_batches_twice_leaves_identical_counts(open_store) -> None:
    store = open_store(batch_size=3)  # many small batches
    entities = [entity(f"e{i:02d}", type_=("PERSON", "CONCEPT", "Service")[i % 3]) for i in range(20)]
    relationships = [rel(f"e{i:02d}", f"e{(i * 7 + 3) % 20:02d}", weight=1.0 + i) for i in range(20)]
    relationships += [rel("e00", "e01", type_="DEPENDS_ON"), rel("e05", "e05", 2.0)]
    mentions = {f"c{i}": [f"e{j:02d}" for j in range(i, 20, 5)] for i in range(8)}

    def write() -> tuple[Any, ...]:
        store.upsert_entities(entities)
        store.upsert_relationships(relationships)
        store.set_chunk_mentions(mentions)
        return store.stats(), raw_counts(store), store.all_relationship_ids(), store.weighted_edges()

    first = write()
    assert first[0].entity_count == 20
    assert first[0].relationship_count == len({r.relationship_id for r in relationships})
    assert first[0].chunk_count == 8
    assert write() == first
    assert store.get_entities([e.entity_id for e in entities]) == {e.entity_id: e for e in entities}


def test_delete_by_document(open_store) -> None:
    store = open_store()

    def provenance(item: Any, doc_ids: tuple[str, ...]) -> Any:
        return type(item)(**{**item.to_dict(), "doc_ids": doc_ids})

    store.upsert_entities(
        [provenance(entity("only1"), ("d1",)), provenance(entity("both"), ("d1", "d2")),
         provenance(entity("only2"), ("d2",))]
    )
    store.upsert_relationships(
        [provenance(rel("both", "only2"), ("d1",)), provenance(rel("only2", "both", type_="DEPENDS_ON"), ("d1", "d2")),
         provenance(rel("only1", "both"), ("d2",))]
    )
    store.set_chunk_mentions({"c1": ["only1"], "c2": ["only1", "both"]})

    counts = store.delete_by_document("d1")

    assert counts == {"entities_updated": 1, "entities_deleted": 1, "relationships_updated": 1,
                      "relationships_deleted": 1}
    assert store.all_entity_ids() == {"both", "only2"}
    # only1's relationship went with it although d2 still named it; the d1-only relationship is gone.
    assert store.all_relationship_ids() == {"only2-DEPENDS_ON-both"}
    assert store.get_relationships(["only2-DEPENDS_ON-both"])["only2-DEPENDS_ON-both"].doc_ids == ("d2",)
    assert store.get_entities(["both"])["both"].doc_ids == ("d2",)
    assert store.entities_of_chunks(["c1", "c2"]) == {"c2": ["both"]}
    assert store.stats().chunk_count == 1
    assert store.delete_by_document("d1") == dict.fromkeys(counts, 0)


def random_graph(seed: int) -> tuple[list[Entity], list[Relationship]]:
    """Hubs, parallel relationships of several types, self-loops and weight ties: every tie-break gets exercised."""
    rng = random.Random(seed)
    ids = [f"n{i:03d}" for i in range(60)]
    relationships = []
    for i in range(260):
        source = ids[0] if i % 4 == 0 else rng.choice(ids)  # n000 is a hub
        target = source if i % 37 == 0 else rng.choice(ids)
        rtype = rng.choice(["RELATED_TO", "DEPENDS_ON", "OWNED_BY"])
        relationships.append(
            Relationship(
                relationship_id=f"r{i:04d}",
                source_id=source,
                target_id=target,
                type=rtype,
                description="",
                weight=float(rng.choice([1, 1, 2, 3.5, 0.25, rng.random() + 0.01])),
                chunk_ids=(),
                doc_ids=("d",),
            )
        )
    return [entity(eid) for eid in ids], relationships


CHUNKS_UP_TO = 3


@pytest.mark.parametrize("scoped", [True, False], ids=["call-scope-clause", "importing-with"])
def test_traversal_equals_the_embedded_store(open_store, tmp_path: Path, scoped: bool) -> None:
    entities, relationships = random_graph(11)
    # Chunk j mentions two entities: from none to a dozen chunks an entity, so some are read ahead and some not.
    mentions = {f"k{j:03d}": [entities[j % 60].entity_id, entities[(j * 7) % 53].entity_id] for j in range(100)}
    chunk_counts = {e.entity_id: sum(e.entity_id in ids for ids in mentions.values()) for e in entities}
    entities = [dataclasses.replace(e, mention_count=chunk_counts[e.entity_id]) for e in entities]
    store = open_store(batch_size=50)
    store.scoped_subqueries = scoped  # both forms of the walk statement's subqueries, whichever the server reports
    embedded = EmbeddedGraphStore(tmp_path / "graph.sqlite")
    try:
        for target in (store, embedded):
            target.upsert_entities(entities)
            target.upsert_relationships(relationships)
            target.set_chunk_mentions(mentions)
        rng = random.Random(5)
        cases = [({"n000": 1.0}, 2, 50, None, 0.0), ({"n000": 1.0}, 3, 2, None, 0.0),
                 ({"n001": 1.0, "n000": 0.3}, 3, 4, None, 0.0), ({"n001": 1.0, "n000": 0.3}, 3, 50, None, 0.02)]
        for _ in range(16):
            seeds = {eid: rng.choice([1.0, 0.5, 0.05]) for eid in rng.sample([e.entity_id for e in entities], 3)}
            types = rng.choice([None, ["DEPENDS_ON"], ["OWNED_BY", "RELATED_TO"]])
            cases.append((seeds, rng.choice([1, 2, 3]), rng.choice([1, 3, 10, 50]), types, rng.choice([0.0, 0.01])))
        statements = count_statements(store)
        for seeds, hops, fanout, types, min_score in cases:
            expected = spread_activation(embedded, seeds, hops, fanout=fanout, relationship_types=types,
                                         min_score=min_score)
            assert len(expected) > 1
            statements.clear()
            walked = walk(store, seeds, hops, fanout=fanout, relationship_types=types, min_score=min_score,
                          chunks_up_to=CHUNKS_UP_TO)
            assert [(h.entity_id, h.hops, h.path, h.via_relationships) for h in walked.hits] == (
                [(h.entity_id, h.hops, h.path, h.via_relationships) for h in expected])
            assert [h.score for h in walked.hits] == pytest.approx([h.score for h in expected], rel=1e-12)
            listed = embedded.chunks_of_entities(list(walked.chunks_read))
            assert walked.chunks_read == {eid: listed.get(eid, []) for eid in walked.chunks_read}
            assert all(chunk_counts[eid] <= CHUNKS_UP_TO for eid in walked.chunks_read)
            # The server reads every neighbourhood the walk expands, and the chunks of every entity it reaches that
            # few chunks mention, in one statement; only a list that runs out before ``fanout`` neighbours (few
            # allowed edges and parallel ones) is read again, in full.
            if fanout == 50:
                assert len(statements) == 1, statements
                assert {h.entity_id for h in walked.hits if chunk_counts[h.entity_id] <= CHUNKS_UP_TO} <= set(
                    walked.chunks_read)
        every_id = [e.entity_id for e in entities] + ["ghost"]
        for types, limit in [(None, None), (None, 3), (["DEPENDS_ON"], None), (["OWNED_BY", "RELATED_TO"], 2)]:
            expected_hoods = embedded.neighbourhoods(every_id, types, limit)
            assert len(expected_hoods) == len(entities)
            assert store.neighbourhoods(every_id, types, limit) == expected_hoods
        around = [e.entity_id for e in entities[5:57]] + ["ghost"]  # two batches: edges read by both
        for edges, expected_edges in ((store.weighted_edges(), embedded.weighted_edges()),
                                      (store.weighted_edges(around), embedded.weighted_edges(around))):
            assert [edge[:2] for edge in edges] == [edge[:2] for edge in expected_edges]
            assert [edge[2] for edge in edges] == pytest.approx([edge[2] for edge in expected_edges])
        assert 0 < len(expected_edges) < len(embedded.weighted_edges())
        assert store.relationships_between([e.entity_id for e in entities[:30]], limit=500) == (
            embedded.relationships_between([e.entity_id for e in entities[:30]], limit=500)
        )
        assert store.list_relationships(offset=5, limit=40) == embedded.list_relationships(offset=5, limit=40)
    finally:
        embedded.close()


@pytest.mark.parametrize(("agent", "scoped"), [
    ("Neo4j/5.22.0", False), ("Neo4j/5.23.0", True), ("Neo4j/5.26.12", True), ("Neo4j/2025.10.1", True),
    ("Neo4j/4.4.40", False), ("Neo4j/5.26.0 compatible (ArcadeDB 26.10.2)", True), ("SomeBoltServer/1.0", True),
    ("Neo4j/v5.11.0 compatible graph database server - Memgraph", False),
])
def test_the_walk_statement_imports_into_subqueries_as_the_server_takes_it(agent: str, scoped: bool) -> None:
    assert scoped_subqueries(agent) is scoped


def test_an_answer_that_names_no_entity_reads_nothing(open_store) -> None:
    store = open_store()
    store.upsert_entities([entity("a")])
    store.set_chunk_mentions({"k1": ["a"]})
    statements = count_statements(store)

    assert store.answer_subgraph([], ["k1"], []) == store.answer_subgraph([], [], ["a"]) == Subgraph({}, [])
    assert statements == []
    assert set(store.answer_subgraph([], ["k1"], ["a"]).entities) == {"a"} and len(statements) == 1


def count_statements(store: Neo4jGraphStore) -> list[str]:
    """The statements the store runs from now on (its first lines), for as long as the store is open."""
    statements: list[str] = []
    run = store._query  # noqa: SLF001 - every read goes through it

    def counted(cypher_text: str, **parameters: Any) -> list[dict[str, Any]]:
        statements.append(cypher_text.strip().splitlines()[0])
        return run(cypher_text, **parameters)

    store._query = counted  # type: ignore[method-assign]
    return statements


def copy_graph(source: Any, target: Neo4jGraphStore) -> None:
    """Every entity, relationship and chunk mention of ``source`` written to ``target``."""
    entity_ids = sorted(source.all_entity_ids())
    target.upsert_entities(list(source.get_entities(entity_ids).values()))
    target.upsert_relationships(list(source.get_relationships(sorted(source.all_relationship_ids())).values()))
    mentions: dict[str, list[str]] = {}
    for entity_id, chunk_ids in source.chunks_of_entities(entity_ids).items():
        for chunk_id in chunk_ids:
            mentions.setdefault(chunk_id, []).append(entity_id)
    target.set_chunk_mentions(mentions)


@contextlib.contextmanager
def both_backends(open_store, settings: Any, monkeypatch) -> Iterator[tuple[Any, Any, Neo4jGraphStore]]:
    """A built index opened as it is (embedded graph), the same index answering from the Bolt store its graph was
    copied into, and that store."""
    monkeypatch.setenv("GRAPH_BACKEND", "embedded")  # the reference engine reads the index's own graph
    from graphrag_pipeline.lib.compose.backends import open_graph_store
    from graphrag_pipeline.query import open_index
    from graphrag_pipeline.query.engine import QueryEngine

    store = open_store(ontology=settings.ontology)
    embedded = open_graph_store(settings, read_only=True)
    assert isinstance(embedded, EmbeddedGraphStore)
    try:
        copy_graph(embedded, store)
        assert store.stats() == embedded.stats()
    finally:
        embedded.close()
    with open_index(settings=settings) as reference:
        yield reference, QueryEngine(settings, state=reference.state, graph_store=store,
                                     vector_store=reference.vectors, embedder=reference.embedder), store


MULTIHOP_QUESTIONS = [
    "Where was the founder of Acme Robotics born?",
    "Who founded Zentrix Labs?",
    "Where was Sofia Marquez born?",
    "What does Boltworks make?",
    "Which robotics companies and founders are described?",
]

SAMPLE_QUESTIONS = [
    "Prometheus cannot send alerts to Alertmanager: which runbook applies?",
    "Which services does the checkoutservice call?",
    "What does the frontend depend on in Online Boutique?",
    "etcd has no leader: what should I do?",
    "Which runbook covers KubePodCrashLooping?",
    "Who owns the payment service?",
    "How is flagd used in the OpenTelemetry demo?",
    "Node filesystem is filling up",
    "Alert on payment: which services depend on it, and who owns them?",
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("index", "questions"),
    [("multihop_settings", MULTIHOP_QUESTIONS), ("sample_settings", SAMPLE_QUESTIONS)],
    ids=["multihop-corpus", "sample-corpus"],
)
def test_query_module_returns_the_same_results_on_both_backends(
    open_store, index: str, questions: list[str], request: pytest.FixtureRequest, monkeypatch
) -> None:
    """A built index answered with its embedded graph and with the same graph written to the Bolt store."""
    with both_backends(open_store, request.getfixturevalue(index), monkeypatch) as (reference, bolt, store):
        compared = followed = 0
        bolt.query(questions[0])  # lookups built on the first question: once per open index
        statements = count_statements(store)
        for question in questions:
            for mode in ("hybrid", "graph"):
                expected = reference.query(question, mode=mode, top_k=8)
                statements.clear()
                actual = bolt.query(question, mode=mode, top_k=8)
                # The entry passages' entities, the walk with the asked relationships, the answer's subgraph.
                assert len(statements) <= 3, (question, statements)
                followed += any(r.scores["relation"] > 0 for r in actual.results)
                assert [r.chunk_id for r in actual.results] == [r.chunk_id for r in expected.results], question
                assert [r.entity_path for r in actual.results] == [r.entity_path for r in expected.results]
                assert [r.combined_score for r in actual.results] == [r.combined_score for r in expected.results]
                compared += any(r.scores["graph"] > 0 for r in expected.results)
        assert compared >= len(questions)  # the graph really contributed to the answers
        assert followed or index != "sample_settings"  # and, on the sample, the relationships questions asked for



@pytest.mark.slow
def test_the_incident_context_is_the_same_on_both_backends_in_two_statements(
    open_store, sample_settings, monkeypatch
) -> None:
    """The context of the sample's services, with the sample's graph in the Bolt store: what the embedded index gives,
    read in two statements (its relationships, then their entities) for a service named, where it took nine."""
    with both_backends(open_store, sample_settings, monkeypatch) as (reference, bolt, store):
        bolt.context("payment")  # the name index is built on the first call: once per open index
        statements = count_statements(store)
        walked = 0
        for subject, max_hops in (("payment", None), ("checkout", None), ("frontend", 1), ("cart", 3),
                                  ("Alert on payment: which services depend on it, and who owns them?", None)):
            expected = reference.context(subject, max_hops=max_hops).to_dict()
            statements.clear()
            actual = bolt.context(subject, max_hops=max_hops).to_dict()
            assert actual == expected, subject
            walked += bool(expected["dependents"] or expected["dependencies"])
            # A question reads more: which of its links has dependency edges (``Hidden.has_relationships``).
            assert len(statements) <= (2 if subject.isalpha() else 4), (subject, statements)
        assert walked >= 4

def test_the_lexical_graph_leads_from_entities_to_text_and_goes_with_its_chunks(open_store) -> None:
    """Neo4j users know (:Document)<-[:PART_OF]-(:Chunk {text})-[:MENTIONS]->(:Entity) from neo4j-graphrag; chunk
    nodes carried only an id, so nothing led from the graph to text."""
    from graphrag_pipeline.lib.core.models import ChunkText

    store = open_store(ontology=ONTOLOGY)
    store.upsert_entities([entity("ada", type_="PERSON"), entity("api", type_="Service")])
    store.set_chunk_mentions({"c1": ["ada", "api"], "c2": ["api"], "c3": ["ada"]})
    chunks = [ChunkText("c1", "d1", 0, "Ada runs the API.", "Runbook", "file:///d1.md", ("sre",)),
              ChunkText("c2", "d1", 1, "The API restarts.", "Runbook", "file:///d1.md", ("sre",)),
              ChunkText("c3", "d2", 0, "Ada is on call.", "Rota", "file:///d2.md"),
              ChunkText("c9", "d9", 0, "No mentions here.", "Nothing", "file:///d9.md")]
    store.describe_chunks(chunks)
    store.describe_chunks(chunks)  # idempotent
    rows = cypher(store, "MATCH (d:Document)<-[:PART_OF]-(c:Chunk)-[:MENTIONS]->(e:Entity {entity_id: 'api'}) "
                         "RETURN d.doc_id AS doc, d.title AS title, d.uri AS uri, d.access_groups AS groups, "
                         "c.text AS text, c.position AS position ORDER BY position")
    assert rows == [
        {"doc": "d1", "title": "Runbook", "uri": "file:///d1.md", "groups": ["sre"], "text": "Ada runs the API.",
         "position": 0},
        {"doc": "d1", "title": "Runbook", "uri": "file:///d1.md", "groups": ["sre"], "text": "The API restarts.",
         "position": 1},
    ]
    documents = lambda: sorted(r["doc"] for r in cypher(store, "MATCH (d:Document) RETURN d.doc_id AS doc"))
    assert documents() == ["d1", "d2"]  # a chunk without mentions is not written
    store.delete_chunks(["c3"])
    assert documents() == ["d1"]  # a document goes with its last chunk
    store.set_chunk_mentions({"c2": []})
    store.delete_entities(["ada"])  # c1 keeps its mention of api
    assert documents() == ["d1"]
    assert [r["n"] for r in cypher(store, "MATCH (c:Chunk) RETURN count(c) AS n")] == [1]
    store.delete_entities(["api"])
    assert documents() == [] and cypher(store, "MATCH (c:Chunk) RETURN count(c) AS n")[0]["n"] == 0
