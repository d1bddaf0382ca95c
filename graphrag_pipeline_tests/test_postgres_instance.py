"""The production Dagster instance (deploy/dagster-postgres.yaml) against the PostgreSQL on this machine.

A fresh database is created for the module, the shipped instance file is copied unchanged into a DAGSTER_HOME, its
connection values come from the DAGSTER_PG_* environment variables, and the shipped `build_index` job materializes
the eight assets on a three-document corpus. The run history is then read back twice: through the Dagster instance,
and straight from PostgreSQL with psycopg2, so a silent fallback to SQLite or in-memory storage cannot pass.

PostgreSQL must be reachable on 127.0.0.1:5432 (user postgres, trust auth; override with GRAPHRAG_TEST_PG_*).
If it is not, the tests fail: CI has it.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

import psycopg2
import pytest
import yaml
from dagster import (
    AssetKey,
    DagsterInstance,
    DagsterRunStatus,
    Definitions,
    ExecuteInProcessResult,
    RunsFilter,
    load_defs,
)

import graphrag_pipeline.defs
from graphrag_pipeline.defs.partitions import SHARD_COUNT, shard_key
from graphrag_pipeline.defs.resources import embedded_graphrag

from .conftest import FIXTURES

pytestmark = [pytest.mark.server, pytest.mark.slow]

INSTANCE_YAML = Path(__file__).resolve().parents[1] / "deploy" / "dagster-postgres.yaml"
ASSETS = ["raw_documents", "chunks", "embeddings", "extracted_elements",
          "element_summaries", "graph", "communities", "community_summaries"]
PER_DOCUMENT = ASSETS[:4]
ALL_SHARDS = [shard_key(i) for i in range(SHARD_COUNT)]
DOCUMENTS = ["acme-robotics.md", "mirela-vantongeren.md", "helix-automation.md"]

PG = {
    "host": os.environ.get("GRAPHRAG_TEST_PG_HOST", "127.0.0.1"),
    "port": os.environ.get("GRAPHRAG_TEST_PG_PORT", "5432"),
    "user": os.environ.get("GRAPHRAG_TEST_PG_USER", "postgres"),
    "password": os.environ.get("GRAPHRAG_TEST_PG_PASSWORD", ""),
}


def _connect(dbname: str):
    return psycopg2.connect(dbname=dbname, connect_timeout=10, **PG)


@dataclass(frozen=True)
class PostgresRun:
    db_name: str
    instance: DagsterInstance
    result: ExecuteInProcessResult


@pytest.fixture(scope="module")
def database():
    """A throw-away database in the local PostgreSQL, dropped afterwards (even if a test failed)."""
    try:
        admin = _connect("postgres")
    except psycopg2.OperationalError as error:
        pytest.fail(f"PostgreSQL is not reachable at {PG['host']}:{PG['port']} as {PG['user']}: {error}")
    admin.autocommit = True
    name = f"graphrag_test_{uuid.uuid4().hex[:12]}"
    with admin.cursor() as cursor:
        cursor.execute(f'CREATE DATABASE "{name}"')  # name is generated above, never user input
    try:
        yield name
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture(scope="module")
def postgres_run(tmp_path_factory, database):
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
        env.setenv("DAGSTER_PG_HOST", PG["host"])
        env.setenv("DAGSTER_PG_PORT", PG["port"])
        env.setenv("DAGSTER_PG_USER", PG["user"])
        env.setenv("DAGSTER_PG_PASSWORD", PG["password"])
        env.setenv("DAGSTER_PG_DB", database)
        instance = DagsterInstance.from_config(str(home))
        try:
            defs = Definitions.merge(
                load_defs(graphrag_pipeline.defs),
                Definitions(resources={"graphrag": embedded_graphrag(config_path=str(config))}),
            )
            result = defs.resolve_job_def("build_index").execute_in_process(
                instance=instance,
                tags={"dagster/asset_partition_range_start": ALL_SHARDS[0],
                      "dagster/asset_partition_range_end": ALL_SHARDS[-1]},
            )
            yield PostgresRun(db_name=database, instance=instance, result=result)
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
    # And the storage objects really are the PostgreSQL ones, pointed at the database named by DAGSTER_PG_DB.
    run_storage = postgres_run.instance.run_storage
    assert type(run_storage).__name__ == "PostgresRunStorage"
    assert type(postgres_run.instance.event_log_storage).__name__ == "PostgresEventLogStorage"
    assert type(postgres_run.instance.schedule_storage).__name__ == "PostgresScheduleStorage"
    assert run_storage.postgres_url.endswith(f"/{postgres_run.db_name}")


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
    with _connect(postgres_run.db_name) as connection, connection.cursor() as cursor:
        cursor.execute("SELECT run_id, pipeline_name, status FROM runs")
        assert cursor.fetchall() == [(postgres_run.result.run_id, "build_index", "SUCCESS")]
        cursor.execute(
            "SELECT asset_key, count(*) FROM event_logs"
            " WHERE dagster_event_type = 'ASSET_MATERIALIZATION' AND run_id = %s GROUP BY asset_key",
            (postgres_run.result.run_id,),
        )
        counts = {tuple(json.loads(key)): count for key, count in cursor.fetchall()}
    assert counts == {(asset,): SHARD_COUNT if asset in PER_DOCUMENT else 1 for asset in ASSETS}
