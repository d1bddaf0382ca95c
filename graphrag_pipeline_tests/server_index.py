"""An index on servers for the production-tier tests: a small corpus with one restricted document, and the
environment variables that put its state in PostgreSQL and its graph on a Bolt server."""

from __future__ import annotations

import shutil
from pathlib import Path

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
