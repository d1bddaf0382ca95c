"""Session fixtures of the contract suites: the ArcadeDB Bolt server, started once and stopped at the end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from graphrag_pipeline_tests.contract import bolt_server


@pytest.fixture(scope="session", autouse=True)
def _stop_arcadedb_bolt_server_at_exit() -> Iterator[None]:
    """Stops the shared server if any test started it (starting is lazy: runs without Bolt tests start nothing)."""
    yield
    bolt_server.stop_arcadedb_bolt_server()


@pytest.fixture(scope="session")
def arcadedb_bolt_server() -> bolt_server.ArcadeBoltServer:
    """The session's ArcadeDB server with the Bolt plugin (fails, never skips, when it cannot start)."""
    return bolt_server.arcadedb_bolt_server()
