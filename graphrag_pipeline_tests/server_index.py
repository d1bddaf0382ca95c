"""An index on servers for the production-tier tests: a small corpus with one restricted document, and the
environment variables that put its state in PostgreSQL and its graph on a Bolt server."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from graphrag_pipeline_tests.conftest import FIXTURES

LEDGER = ("---\naccess_groups: [payments-oncall]\n---\n# Payments ledger\n\n"
          "The payments ledger database ledger-db runs on host pg-ledger-01 in Frankfurt."
          " The checkout-service writes to ledger-db.\n")


def runbooks_with_a_restricted_page(corpus: Path) -> Path:
    """Two public runbooks and a page only the payments-oncall group may read, in ``corpus``."""
    corpus.mkdir(parents=True, exist_ok=True)
    for name in ("KubePodCrashLooping.md", "NodeRAIDDegraded.md"):
        shutil.copy(FIXTURES / "runbooks" / name, corpus / name)
    (corpus / "ledger.md").write_text(LEDGER)
    return corpus


def server_environment(postgres_server, database: str, bolt, graph_database: str) -> dict[str, str]:
    """What a deployment sets so the index's state is in ``database`` and its graph in ``graph_database``."""
    return {
        "STATE_BACKEND": "postgres",
        "DATABASE_URL": f"postgresql://{postgres_server.user}:{postgres_server.password}@{postgres_server.host}:"
                        f"{postgres_server.port}/{database}",
        "GRAPH_BACKEND": "neo4j",
        "NEO4J_URI": bolt.uri,
        "NEO4J_USER": bolt.user,
        "NEO4J_PASSWORD": bolt.password,
        "NEO4J_DATABASE": graph_database,
    }


def _without_timings(answers: list[dict]) -> list[dict]:
    """Whole responses as JSON gives them back (tuples as lists), minus what measures this run rather than the
    index."""
    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if "seconds" not in k and "timing" not in k and k != "version"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value
    return [strip(a) for a in json.loads(json.dumps(answers, default=str))]


def assert_same_answers(actual: list[dict], expected: list[dict], score_tolerance: float = 0.0) -> None:
    """The same responses (``QueryResponse.to_dict()``s), field by field; ``score_tolerance`` for stores that keep
    vectors in another precision (the embedded store in float16, Qdrant in float32: ``SCORE_TOLERANCE`` a cosine)."""
    def compare(a, b, where: str) -> None:
        if isinstance(a, float) and isinstance(b, float):
            assert a == pytest.approx(b, abs=score_tolerance), where
        elif isinstance(a, dict) and isinstance(b, dict):
            assert sorted(a) == sorted(b), where
            for key in a:
                compare(a[key], b[key], f"{where}.{key}")
        elif isinstance(a, list) and isinstance(b, list):
            assert len(a) == len(b), where
            for i, (x, y) in enumerate(zip(a, b)):
                compare(x, y, f"{where}[{i}]")
        else:
            assert a == b, where
    compare(_without_timings(actual), _without_timings(expected), "answers")
