"""Neo4j-protocol servers for the graph contract suite.

* ArcadeDB (PyPI ``arcadedb-embedded``) with its Bolt plugin: started once per test process, on free ports, in a
  temporary root directory; each store gets a fresh database. The server runs inside the process's JVM, which can
  start only once, hence a process-wide instance (``arcadedb_bolt_server()``), stopped by the session fixture in
  ``conftest.py``. If it cannot start, every test that needs it fails with the startup error (never skips).
* The same server in a child process of its own (``arcadedb_bolt_server_process()``), as a client meets a server:
  the benchmarks' figures for servers. In-process, a collection of the JVM makes JPype run a full collection of
  Python's objects in the client's process too: 0.10-0.14 s, every few walk statements on the sample corpus.
* A real Neo4j when ``NEO4J_URI`` is set (with ``NEO4J_USER``, ``NEO4J_PASSWORD``, optional ``NEO4J_DATABASE``):
  the suite deletes every ``:Entity``, ``:Chunk`` and ``:Document`` node of that database before each test, so point
  it at a disposable database.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from graphrag_pipeline.lib.stores.neo4j_graph import Neo4jGraphStore

BOLT_PLUGIN = "Bolt:com.arcadedb.bolt.BoltProtocolPlugin"
ROOT_USER = "root"
ROOT_PASSWORD = "contract-suite-password"  # a throwaway server on localhost, alive for one test session


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class ArcadeBoltServer:
    """A running ArcadeDB server with the Bolt plugin, on localhost."""

    root: str
    http_port: int
    bolt_port: int
    server: Any
    user: str = ROOT_USER
    password: str = ROOT_PASSWORD
    _names: itertools.count = field(default_factory=itertools.count)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def uri(self) -> str:
        return f"bolt://127.0.0.1:{self.bolt_port}"

    def create_database(self, prefix: str = "graph") -> str:
        """A new, empty database; its name."""
        with self._lock:
            name = f"{prefix}{next(self._names)}"
            self.server.create_database(name)
        return name

    def drop_database(self, name: str) -> None:
        """Drop a database through the server's HTTP API (databases taken from the embedded server cannot be
        dropped in-process)."""
        _server_command(self.http_port, self.user, self.password, f"drop database {name}")

    def stop(self) -> None:
        try:
            self.server.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def _server_command(http_port: int, user: str, password: str, command: str) -> None:
    """Run a server command (``create database x``, ``drop database x``) through the server's HTTP API."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{http_port}/api/v1/server",
        data=json.dumps({"command": command}).encode(),
        headers={
            "Content-Type": "application/json",
            "Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode(),
        },
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        response.read()


_server: ArcadeBoltServer | None = None
_startup_error: BaseException | None = None
_server_lock = threading.Lock()


def _start() -> ArcadeBoltServer:
    from arcadedb_embedded.server import ArcadeDBServer

    root = tempfile.mkdtemp(prefix="arcadedb-bolt-")
    http_port, bolt_port = free_port(), free_port()
    while bolt_port == http_port:
        bolt_port = free_port()
    server = ArcadeDBServer(
        root_path=root,
        root_password=ROOT_PASSWORD,
        config={"http_port": http_port, "bolt_port": bolt_port, "server_plugins": BOLT_PLUGIN},
    )
    try:
        server.start()
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return ArcadeBoltServer(root=root, http_port=http_port, bolt_port=bolt_port, server=server)


def arcadedb_bolt_server() -> ArcadeBoltServer:
    """The process-wide ArcadeDB Bolt server, started on first use (a failed start is re-raised on every call)."""
    global _server, _startup_error
    with _server_lock:
        if _server is None:
            if _startup_error is not None:
                raise RuntimeError("the ArcadeDB Bolt server failed to start earlier") from _startup_error
            try:
                _server = _start()
            except BaseException as error:
                _startup_error = error
                raise
        return _server


def stop_arcadedb_bolt_server() -> None:
    global _server
    with _server_lock:
        if _server is not None:
            server, _server = _server, None
            server.stop()


@dataclass
class ChildBoltServer:
    """An ArcadeDB Bolt server that ``arcadedb_bolt_server_process`` runs in a child process."""

    http_port: int
    bolt_port: int
    user: str
    password: str
    exit_status: int | None = None  # the child's, once the block has ended (0: it stopped as asked)
    _names: itertools.count = field(default_factory=itertools.count)

    @property
    def uri(self) -> str:
        return f"bolt://127.0.0.1:{self.bolt_port}"

    def create_database(self, prefix: str = "graph") -> str:
        """A new, empty database; its name."""
        name = f"{prefix}{next(self._names)}"
        _server_command(self.http_port, self.user, self.password, f"create database {name}")
        return name


@contextmanager
def arcadedb_bolt_server_process(startup_seconds: float = 180.0) -> Iterator[ChildBoltServer]:
    """An ArcadeDB Bolt server in a child process (this module run as a program), stopped on leaving the block: the
    child stops when its standard input closes, so it also goes when this process dies (unless a process forked
    from this one holds the pipe). Its output goes to a log in its temporary folder, which a failed start quotes;
    the server's files are in that folder too, which goes with the block even when the child had to be killed."""
    with tempfile.TemporaryDirectory(prefix="arcadedb-child-") as folder:
        connection, log_path = Path(folder) / "connection.json", Path(folder) / "server.log"
        with log_path.open("wb") as log:
            child = subprocess.Popen([sys.executable, "-m", __name__, str(connection)], stdin=subprocess.PIPE,
                                     stdout=log, stderr=subprocess.STDOUT)
        server: ChildBoltServer | None = None
        try:
            deadline = time.monotonic() + startup_seconds
            while not connection.exists():
                if child.poll() is not None:
                    raise RuntimeError(f"the ArcadeDB Bolt server's process ended with status {child.returncode} "
                                       f"before it started: {log_path.read_text(errors='replace')[-2000:]}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the ArcadeDB Bolt server did not start in {startup_seconds:.0f} s: "
                                       f"{log_path.read_text(errors='replace')[-2000:]}")
                time.sleep(0.1)
            server = ChildBoltServer(**json.loads(connection.read_text()))
            yield server
        finally:
            child.stdin.close()
            try:
                child.wait(timeout=60)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            if server is not None:
                server.exit_status = child.returncode


def _serve_until_stdin_closes(connection: Path) -> None:
    """``arcadedb_bolt_server_process``'s child: start the server, write how to reach it to ``connection`` (whole,
    by a rename), and stop it once standard input closes. The server's root goes beside ``connection``, in the
    parent's temporary folder, which the parent removes whatever becomes of this process."""
    tempfile.tempdir = str(connection.parent)
    server = arcadedb_bolt_server()
    try:
        written = connection.with_suffix(".partial")
        written.write_text(json.dumps({"http_port": server.http_port, "bolt_port": server.bolt_port,
                                       "user": server.user, "password": server.password}))
        written.rename(connection)
        sys.stdin.buffer.read()
    finally:
        stop_arcadedb_bolt_server()


class _DisposableGraphStore(Neo4jGraphStore):
    """A store on its own ArcadeDB database, dropped when the store is closed."""

    bolt_server: ArcadeBoltServer

    def close(self) -> None:
        super().close()
        try:
            self.bolt_server.drop_database(self.database or "")
        except OSError:
            pass  # the database lives in the server's temporary root, removed when the server stops


def arcadedb_graph_store(**options: Any) -> Neo4jGraphStore:
    """A ``Neo4jGraphStore`` on a fresh database of the shared ArcadeDB Bolt server."""
    server = arcadedb_bolt_server()
    store = _DisposableGraphStore(server.uri, server.user, server.password, server.create_database(), **options)
    store.bolt_server = server
    return store


def real_neo4j_settings() -> dict[str, Any] | None:
    """Connection settings of a real Neo4j from ``NEO4J_URI``/``NEO4J_USER``/``NEO4J_PASSWORD``/``NEO4J_DATABASE``,
    or None when ``NEO4J_URI`` is not set."""
    uri = os.environ.get("NEO4J_URI")
    if not uri:
        return None
    return {
        "uri": uri,
        "user": os.environ.get("NEO4J_USER", "neo4j"),
        "password": os.environ.get("NEO4J_PASSWORD", ""),
        "database": os.environ.get("NEO4J_DATABASE") or None,
    }


def real_neo4j_graph_store(**options: Any) -> Neo4jGraphStore:
    """A ``Neo4jGraphStore`` on the real Neo4j named by the environment, emptied of this store's nodes first.
    Skips the calling test when ``NEO4J_URI`` is not set."""
    settings = real_neo4j_settings()
    if settings is None:
        import pytest

        pytest.skip("NEO4J_URI is not set: the real-Neo4j variant runs only against a configured server")
    store = Neo4jGraphStore(settings["uri"], settings["user"], settings["password"], settings["database"], **options)
    clear_graph(store)
    return store


def clear_graph(store: Neo4jGraphStore) -> None:
    """Delete every node this store writes (``:Entity``, ``:Chunk`` and ``:Document``), with their relationships."""
    while True:
        deleted = store._write(  # noqa: SLF001 - test helper on the store's own transaction plumbing
            lambda tx: tx.run(
                "MATCH (n) WHERE n:Entity OR n:Chunk OR n:Document WITH n LIMIT 10000 DETACH DELETE n "
                "RETURN count(*) AS n"
            ).single()["n"]
        )
        if not deleted:
            return


if __name__ == "__main__":
    # os._exit: the JVM's threads may keep alive a process that returns from here.
    try:
        _serve_until_stdin_closes(Path(sys.argv[1]))
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    os._exit(0)
