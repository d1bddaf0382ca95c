"""The production tier touches no local file: state in PostgreSQL, graph over Bolt, vectors in Qdrant.

A build and a query each run as a process of their own (`python -m graphrag_pipeline.cli`) in an empty working
directory with an empty home, configured by environment variables only, as an agent on another host would be; both
folders must still be empty afterwards, and the answers must equal those of the embedded build of the same corpus.
Servers: the tests' PostgreSQL (`postgres.py`), ArcadeDB's Bolt server, and qdrant-client's local mode in a folder
outside the process's working directory (it stands for a Qdrant server, which is one `QDRANT_URL` away).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from graphrag_pipeline.lib.stores.protocols import SCORE_TOLERANCE
from graphrag_pipeline.query import open_index
from graphrag_pipeline_tests.cli_process import CHECKOUT, CLI
from graphrag_pipeline_tests.conftest import build, folder_settings
from graphrag_pipeline_tests.postgres import throwaway_database
from graphrag_pipeline_tests.server_index import (
    assert_same_answers,
    runbooks_with_a_restricted_page,
    server_environment,
)

pytestmark = [pytest.mark.slow, pytest.mark.server]

QUESTIONS = ("What to do when a pod is crash looping?", "Which disk array is degraded?",
             "Where is the payments ledger database?")
MODES = ("vector", "graph", "hybrid")
GROUPS = ((), ("payments-oncall",))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return runbooks_with_a_restricted_page(tmp_path_factory.mktemp("corpus"))


def _agent_environment(tmp_path: Path, postgres_server, database: str) -> dict[str, str]:
    """Only what a deployment sets: backends, addresses and secrets (no configuration file, no index directory)."""
    from graphrag_pipeline_tests.contract.bolt_server import arcadedb_bolt_server

    bolt = arcadedb_bolt_server()
    keep = ("PATH", "LANG", "LC_ALL", "TZ")
    env = {name: os.environ[name] for name in keep if name in os.environ}
    home = tmp_path / "home"
    home.mkdir()
    env.update({"HOME": str(home), "PYTHONPATH": str(CHECKOUT), "VECTOR_BACKEND": "qdrant",
                "QDRANT_PATH": str(tmp_path / "qdrant"),
                **server_environment(postgres_server, database, bolt, bolt.create_database("production"))})
    return env


def _run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    completed = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed


# What an agent on another host runs: the query module, configured by its environment alone.
AGENT = """
import json, sys
from graphrag_pipeline.lib.stores.protocols import SCORE_TOLERANCE
from graphrag_pipeline.query import open_index
questions, modes, groups = json.loads(sys.argv[1])
with open_index() as index:
    print(json.dumps([index.query(q, mode=m, groups=g).to_dict() for q in questions for m in modes for g in groups],
                     default=str))
"""


def test_build_and_query_on_servers_touch_no_local_file_and_answer_as_the_embedded_index(
        corpus, tmp_path, postgres_server):
    embedded = folder_settings(tmp_path / "embedded", corpus)
    build(embedded)
    with open_index(settings=embedded) as index:
        expected = [index.query(q, mode=m, groups=list(g)).to_dict() for q in QUESTIONS for m in MODES for g in GROUPS]

    with throwaway_database(postgres_server) as database:
        env = _agent_environment(tmp_path, postgres_server, database)
        # The sources are the build's only input on disk: a configuration file outside its working directory.
        config = tmp_path / "sources.yaml"
        config.write_text(yaml.safe_dump({"shard_count": embedded.shard_count,
                                          "sources": [{"name": "t", "kind": "folder", "path": str(corpus)}]}))
        builder = tmp_path / "builder"
        builder.mkdir()
        _run([*CLI, "build", "--json"], cwd=builder, env={**env, "GRAPHRAG_CONFIG": str(config)})

        agent = tmp_path / "agent"
        agent.mkdir()
        asked = json.dumps([QUESTIONS, MODES, [list(g) for g in GROUPS]])
        answers = json.loads(_run([CLI[0], "-c", AGENT, asked], cwd=agent, env=env).stdout)
        # qdrant-client computes cosines in float64 from float32 vectors, the embedded store from float16 ones
        assert_same_answers(answers, expected, score_tolerance=SCORE_TOLERANCE)
        cli_answer = _run([*CLI, "query", QUESTIONS[2], "--group", "payments-oncall", "--json"], cwd=agent, env=env)
        # the last question, hybrid, with the group
        assert_same_answers([json.loads(cli_answer.stdout)], expected[-1:], score_tolerance=SCORE_TOLERANCE)

        assert [p.name for p in builder.iterdir()] == [] and [p.name for p in agent.iterdir()] == []
        assert [str(p) for p in Path(env["HOME"]).rglob("*")] == []


def test_a_neo4j_user_asks_the_sample_catalog_with_the_official_driver(tmp_path, monkeypatch):
    """What a Neo4j user runs on the graph the pipeline wrote: the seeds' question in Cypher (the service, what it
    depends on, who owns it), and the lexical graph from an entity to the text that mentions it."""
    import neo4j

    from graphrag_pipeline.lib.core.config import load_settings
    from graphrag_pipeline_tests.contract.bolt_server import arcadedb_bolt_server

    bolt = arcadedb_bolt_server()
    database = bolt.create_database("seed")
    for name, value in {"GRAPH_BACKEND": "neo4j", "NEO4J_URI": bolt.uri, "NEO4J_USER": bolt.user,
                        "NEO4J_PASSWORD": bolt.password, "NEO4J_DATABASE": database}.items():
        monkeypatch.setenv(name, value)
    settings = load_settings(index_dir=str(tmp_path / "index"),
                             sources=[{"name": "catalog", "kind": "catalog", "path": str(CHECKOUT / "data" / "catalog")}])
    build(settings)
    with neo4j.GraphDatabase.driver(bolt.uri, auth=(bolt.user, bolt.password)) as driver, \
            driver.session(database=database) as session:
        record = session.run("MATCH (s:Service {name: $n}) OPTIONAL MATCH (s)-[:DEPENDS_ON]->(d:Service) "
                             "OPTIONAL MATCH (s)-[:OWNED_BY]->(t:Team) RETURN s, collect(d) AS deps, t",
                             n="checkout").single()
        assert record is not None and record["t"] is not None and record["t"]["name"] == "team-orders"
        assert "payment" in {d["name"] for d in record["deps"]}
        # The catalog's title is a property of its own, matched as Neo4j users match a name; absent where none.
        titled = session.run("MATCH (s:Service {title: $t}) RETURN s.name AS name", t="Checkout Service").data()
        assert titled == [{"name": "checkout"}]
        assert session.run("MATCH (t:Team {name: 'team-orders'}) RETURN t.title AS title").single()["title"] is None
        texts = session.run("MATCH (:Entity {name: $n})<-[:MENTIONS]-(c:Chunk)-[:PART_OF]->(d:Document) "
                            "RETURN c.text AS text, d.title AS title", n="checkout").data()
        assert texts and all(row["text"] and row["title"] for row in texts)
