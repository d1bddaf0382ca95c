"""Scale-out: concurrent Dagster runs on one production index end where one run over everything ends.

Two `dg launch --job build_index --partition-range …` processes start at once, each over half of the shards, on the
shipped production Dagster instance (deploy/dagster-postgres.yaml, with its one-run limit lifted as
deploy/SCALE_OUT.md does), against one index: state in PostgreSQL and the graph on ArcadeDB's Bolt server. Their
per-document steps run side by side; their corpus-wide steps take turns (`Stage.execute`). The index they leave must
equal, record by record, a single-run build of the same corpus into a fresh database and graph.

The vectors are the embedded Qdrant Edge store in a folder both processes share (its writers take turns through file
locks): qdrant-client's local mode admits one process at a time, and no Qdrant server can be had here. With a Qdrant
server (`QDRANT_URL`) the runs need no shared folder at all (test_production_tier.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from graphrag_pipeline.lib.core.config import ENVIRONMENT_OVERRIDES, load_settings
from graphrag_pipeline.lib.core.ids import stable_shard
from graphrag_pipeline_tests.cli_process import CHECKOUT
from graphrag_pipeline_tests.conftest import FIXTURES, build
from graphrag_pipeline_tests.index_snapshot import assert_same_index, index_snapshot
from graphrag_pipeline_tests.postgres import throwaway_database
from graphrag_pipeline_tests.server_index import runbooks_with_a_restricted_page, server_environment

pytestmark = [pytest.mark.slow, pytest.mark.server]

INSTANCE_YAML = CHECKOUT / "deploy" / "dagster-postgres.yaml"
SHARD_COUNT = 4
RANGES = ("shard-000...shard-001", "shard-002...shard-003")


def _corpus(root: Path) -> Path:
    corpus = runbooks_with_a_restricted_page(root / "corpus")
    for path in (FIXTURES / "multihop").glob("*.md"):
        shutil.copy(path, corpus / path.name)
    return corpus


def _snapshot(monkeypatch: pytest.MonkeyPatch, config: Path, environment: dict[str, str]):
    with monkeypatch.context() as scoped:
        for name, value in environment.items():
            scoped.setenv(name, value)
        return index_snapshot(load_settings(config))


def test_two_concurrent_shard_range_runs_end_equal_to_a_single_run_build(tmp_path, postgres_server, monkeypatch):
    from graphrag_pipeline_tests.contract.bolt_server import arcadedb_bolt_server

    for variable in ENVIRONMENT_OVERRIDES:
        monkeypatch.delenv(variable, raising=False)
    bolt = arcadedb_bolt_server()
    corpus = _corpus(tmp_path)
    configs = {}
    for name in ("reference", "concurrent"):
        configs[name] = tmp_path / f"{name}.yaml"
        configs[name].write_text(yaml.safe_dump({
            "index_dir": str(tmp_path / name / "index"), "shard_count": SHARD_COUNT,
            "sources": [{"name": "t", "kind": "folder", "path": str(corpus)}]}))

    with (throwaway_database(postgres_server) as reference_db, throwaway_database(postgres_server) as index_db,
          throwaway_database(postgres_server) as dagster_db):
        reference = server_environment(postgres_server, reference_db, bolt, bolt.create_database("reference"))
        with monkeypatch.context() as scoped:
            for name, value in reference.items():
                scoped.setenv(name, value)
            build(load_settings(configs["reference"]))

        home = tmp_path / "dagster_home"
        home.mkdir()
        instance = yaml.safe_load(INSTANCE_YAML.read_text())
        instance["concurrency"]["runs"]["max_concurrent_runs"] = 2  # deploy/SCALE_OUT.md: N runs at once
        (home / "dagster.yaml").write_text(yaml.safe_dump(instance))
        concurrent = server_environment(postgres_server, index_db, bolt, bolt.create_database("concurrent"))
        env = {**{k: v for k, v in os.environ.items() if k != "GRAPHRAG_CONFIG"}, **concurrent,
               "DAGSTER_HOME": str(home), "GRAPHRAG_CONFIG": str(configs["concurrent"]),
               "PYTHONPATH": str(CHECKOUT),
               "DAGSTER_PG_HOST": postgres_server.host, "DAGSTER_PG_PORT": str(postgres_server.port),
               "DAGSTER_PG_USER": postgres_server.user, "DAGSTER_PG_PASSWORD": postgres_server.password,
               "DAGSTER_PG_DB": dagster_db}
        # The instance's tables first, as a deployment's daemon and webserver make them before any run: two
        # launches on an empty Dagster database race to create them ("type asset_keys already exists").
        subprocess.run([str(Path(sys.executable).with_name("dagster")), "instance", "migrate"], cwd=CHECKOUT, env=env,
                       check=True, capture_output=True, timeout=300)
        dg = Path(sys.executable).with_name("dg")
        launches = [subprocess.Popen([str(dg), "launch", "--job", "build_index", "--partition-range", shards],
                                     cwd=CHECKOUT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
                    for shards in RANGES]
        outputs = [launch.communicate(timeout=900)[0] for launch in launches]
        for launch, output in zip(launches, outputs):
            assert launch.returncode == 0, output[-4000:]

        with monkeypatch.context() as scoped:
            for name, value in env.items():
                if name.startswith("DAGSTER_"):
                    scoped.setenv(name, value)
            with DagsterInstance.get() as dagster:
                runs = dagster.get_run_records(RunsFilter(job_name="build_index"))
        assert [r.dagster_run.status for r in runs] == [DagsterRunStatus.SUCCESS] * 2
        first, second = sorted(runs, key=lambda r: r.start_time)
        assert second.start_time < first.end_time  # the two runs were in progress at the same time

        expected = _snapshot(monkeypatch, configs["reference"], reference)
        # both runs had documents to index, and the corpus-wide stages had something to merge
        assert {stable_shard(doc_id, SHARD_COUNT) // 2 for doc_id in expected["documents"]} == {0, 1}
        assert len(expected["documents"]) == 9 and expected["relationships"] and expected["communities"]
        assert_same_index(_snapshot(monkeypatch, configs["concurrent"], concurrent), expected)
