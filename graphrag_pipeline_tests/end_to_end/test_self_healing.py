"""Self-healing rebuilds: a build after a store was deleted re-derives it (vectors from the embedding cache, the graph
from the merged elements) and equals the index before the damage; a damaged SQLite file stops a build with an error
naming the file and the fix, and `graphrag-pipeline repair` then a build restore the index; two processes cannot
build one index at once."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.stages import build_everything
from graphrag_pipeline.lib.stores.sqlite_files import DamagedStoreError
from graphrag_pipeline.lib.stores.state.sql import IndexBusyError
from graphrag_pipeline.lib.stores.state.sqlite import SQLiteStateStore
from graphrag_pipeline_tests.conftest import FIXTURES, folder_settings, offline_embedder
from graphrag_pipeline_tests.index_snapshot import assert_same_index, index_snapshot

pytestmark = pytest.mark.slow


def build(settings, embedder) -> dict:
    with Workspace(settings, embedder=embedder) as ws:
        return {report.stage: report.counts for report in build_everything(ws)}


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    root = tmp_path_factory.mktemp("healing")
    shutil.copytree(FIXTURES / "multihop", root / "corpus")
    settings = folder_settings(root / "index", root / "corpus", communities={"min_size": 2})
    embedder = offline_embedder()
    build(settings, embedder)
    return {"root": root, "settings": settings, "embedder": embedder, "snapshot": index_snapshot(settings)}


@pytest.fixture
def damaged(original, tmp_path):
    """A copy of the built index (vector shards are sparse: copied as such) to damage."""
    subprocess.run(["cp", "-a", "--sparse=always", original["settings"].index_dir, str(tmp_path / "index")], check=True)
    return original["settings"].with_overrides(index_dir=str(tmp_path / "index"))


def cli(settings, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    config = Path(settings.index_dir).parent / "graphrag.yaml"
    config.write_text(json.dumps({"index_dir": settings.index_dir, "shard_count": settings.shard_count,
                                  "communities": {"min_size": 2},
                                  "sources": [{"name": "t", "kind": "folder", "path": settings.sources[0].path}]}))
    return subprocess.run([sys.executable, "-m", "graphrag_pipeline.cli", "--config", str(config), *args],
                          capture_output=True, text=True, timeout=600, env=env)


def test_a_build_after_the_vectors_folder_was_deleted_restores_every_vector(original, damaged):
    shutil.rmtree(Path(damaged.index_dir) / "vectors")
    counts = build(damaged, original["embedder"])
    chunks, entities = len(original["snapshot"]["chunks"]), len(original["snapshot"]["entities"])
    assert counts["embeddings"]["chunks_lost_points_restored"] == chunks
    assert counts["embeddings"]["embedded"] == 0 and counts["embeddings"]["embedding_cache_hits"] == chunks
    assert counts["graph"]["entities_lost_points_restored"] == entities
    assert counts["graph"]["embedded"] == entities  # names are not cached: each keyed only the point that was lost
    assert counts["community_summaries"]["communities_lost_points_restored"] > 0
    assert_same_index(index_snapshot(damaged), original["snapshot"])


def test_a_build_after_the_graph_file_was_deleted_writes_the_graph_again(original, damaged):
    (Path(damaged.index_dir) / "graph.sqlite").unlink()
    counts = build(damaged, original["embedder"])
    assert counts["graph"]["entity_store_differences"] == len(original["snapshot"]["entities"])
    assert counts["graph"]["relationship_store_differences"] == len(original["snapshot"]["relationships"])
    assert counts["graph"]["entities_written"] == len(original["snapshot"]["entities"])
    assert_same_index(index_snapshot(damaged), original["snapshot"])


def test_a_half_truncated_state_file_is_named_with_its_fix_and_repair_then_build_restores_the_index(
        original, damaged):
    state = Path(damaged.index_dir) / "state.sqlite"
    os.truncate(state, state.stat().st_size // 2)
    failed = cli(damaged, "build", "--json")
    assert failed.returncode == 2, failed.stderr[-3000:]
    assert "Traceback" not in failed.stderr
    assert str(state) in failed.stderr and "is damaged" in failed.stderr
    assert "graphrag-pipeline repair" in failed.stderr

    repaired = cli(damaged, "repair")
    assert repaired.returncode == 0, repaired.stderr[-3000:]
    assert f"{state}: damaged" in repaired.stdout and f"{Path(damaged.index_dir) / 'graph.sqlite'}: ok" in repaired.stdout
    assert not state.exists() and list(state.parent.glob("state.sqlite.damaged-*"))
    build(damaged, original["embedder"])
    assert_same_index(index_snapshot(damaged), original["snapshot"])


def test_an_emptied_state_file_is_damage_named_in_one_line_and_repair_sets_it_aside(original, damaged):
    """A 0-byte state.sqlite is a valid empty database to SQLite: the query printed a traceback ("no such table")."""
    state = Path(damaged.index_dir) / "state.sqlite"
    for companion in state.parent.glob("state.sqlite-*"):
        companion.unlink()
    state.write_bytes(b"")
    failed = cli(damaged, "query", "which runbook applies?", "--json")
    assert failed.returncode == 2 and "Traceback" not in failed.stderr, failed.stderr[-3000:]
    assert failed.stderr.count("\n") == 1 and "holds no index tables" in failed.stderr
    assert "graphrag-pipeline repair" in failed.stderr
    repaired = cli(damaged, "repair")
    assert f"{state}: damaged (it holds no tables)" in repaired.stdout
    build(damaged, original["embedder"])
    assert_same_index(index_snapshot(damaged), original["snapshot"])


def test_a_damaged_graph_file_is_named_with_its_fix(original, damaged):
    graph = Path(damaged.index_dir) / "graph.sqlite"
    with open(graph, "r+b") as handle:  # the header survives, every page after it is overwritten
        handle.seek(100)
        handle.write(b"\xff" * (graph.stat().st_size - 100))
    with pytest.raises(DamagedStoreError, match="graph.sqlite is damaged .*graphrag-pipeline repair"):
        build(damaged, original["embedder"])


def test_two_processes_cannot_build_one_index_at_once(original, damaged):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from graphrag_pipeline.lib.stores.state.sqlite import SQLiteStateStore; "
         f"store = SQLiteStateStore({str(Path(damaged.index_dir) / 'state.sqlite')!r}); print('holding', flush=True); "
         "sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        second = cli(damaged, "build", "--json")
        assert second.returncode == 2, second.stderr[-3000:]
        assert "another build is writing the index" in second.stderr and f"pid {holder.pid}" in second.stderr
        with pytest.raises(IndexBusyError):
            SQLiteStateStore(Path(damaged.index_dir) / "state.sqlite")
    finally:
        holder.send_signal(signal.SIGKILL)  # as a killed build: the operating system releases its lock
        holder.wait()
    SQLiteStateStore(Path(damaged.index_dir) / "state.sqlite").close()


def test_the_index_comparison_sees_a_stale_relationship_weight_and_a_stale_vector_payload(original, damaged):
    """What an id-only comparison missed: the same ids with a stale weight, or a point with an outdated payload."""
    with Workspace(damaged) as ws:
        relationship = next(iter(ws.graph_store.get_relationships(ws.graph_store.all_relationship_ids()).values()))
        ws.graph_store.upsert_relationships([dataclasses.replace(relationship, weight=relationship.weight + 1)])
    with pytest.raises(AssertionError, match="relationships differ: .*weight"):
        assert_same_index(index_snapshot(damaged), original["snapshot"])

    stale = copy.deepcopy(original["snapshot"])
    point_id, (payload, vector) = next(iter(stale["vectors"]["chunks"].items()))
    stale["vectors"]["chunks"][point_id] = ({**payload, "title": "an old title"}, vector)
    with pytest.raises(AssertionError, match="payload"):
        assert_same_index(stale, original["snapshot"])


def test_two_whole_builds_cannot_run_at_once_on_postgresql_either(tmp_path, postgres_server):
    """On SQLite the second writer fails on the build lock; a PostgreSQL state has no local file to lock, so a whole
    build holds an advisory lock, and a second one (from any host) fails at once naming it."""
    import psycopg2

    from graphrag_pipeline.lib.stores.state.postgres import WHOLE_BUILD_LOCK, advisory_key
    from graphrag_pipeline_tests.cli_process import CLI, cli_env
    from graphrag_pipeline_tests.postgres import throwaway_database

    with throwaway_database(postgres_server) as database:
        url = (f"postgresql://{postgres_server.user}:{postgres_server.password}@{postgres_server.host}:"
               f"{postgres_server.port}/{database}")
        config = tmp_path / "graphrag.yaml"
        config.write_text(json.dumps({"index_dir": str(tmp_path / "index"), "shard_count": 4,
                                      "sources": [{"name": "t", "kind": "folder", "path": str(FIXTURES / "multihop")}]}))
        holder = psycopg2.connect(url)
        try:
            holder.autocommit = True
            with holder.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_lock(%s)", (advisory_key(WHOLE_BUILD_LOCK),))
            second = subprocess.run([*CLI, "--config", str(config), "build", "--json"], capture_output=True, text=True,
                                    env={**cli_env(), "STATE_BACKEND": "postgres", "DATABASE_URL": url}, timeout=600)
            assert second.returncode == 2, second.stderr[-3000:]
            assert "another build is writing the index" in second.stderr and WHOLE_BUILD_LOCK in second.stderr
        finally:
            holder.close()
