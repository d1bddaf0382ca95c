import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from dagster import AssetKey, BackfillPolicy

from graphrag_pipeline.definitions import defs
from graphrag_pipeline.defs.partitions import shard_key
from graphrag_pipeline.defs.resources import GraphRAGResource

PER_DOCUMENT = ["raw_documents", "chunks", "embeddings", "extracted_elements"]
CORPUS_WIDE = ["element_summaries", "graph", "communities", "community_summaries"]
LINEAGE = PER_DOCUMENT + CORPUS_WIDE
SHARD_KEYS = [shard_key(i) for i in range(64)]
REPO = Path(__file__).resolve().parents[2]
SPECS = {spec.key.to_user_string(): spec for spec in defs.resolve_all_asset_specs()}


def test_exactly_the_eight_pipeline_assets():
    assert set(defs.resolve_all_asset_keys()) == {AssetKey(name) for name in LINEAGE}


def test_lineage_is_the_pipeline_chain():
    graph = defs.resolve_asset_graph()
    parents = {key.to_user_string(): {p.to_user_string() for p in graph.get(key).parent_keys}
               for key in graph.get_all_asset_keys()}
    assert parents == {
        "raw_documents": set(),
        "chunks": {"raw_documents"},
        "embeddings": {"chunks"},
        # Extraction reads the chunks; depending on embeddings too orders it after them in a run.
        "extracted_elements": {"chunks", "embeddings"},
        "element_summaries": {"extracted_elements"},
        "graph": {"element_summaries"},
        "communities": {"graph"},
        "community_summaries": {"communities"},
    }
    order = [key.to_user_string() for level in graph.toposorted_asset_keys_by_level for key in level]
    assert order == LINEAGE


def test_per_document_assets_are_sharded_and_backfilled_in_one_run():
    for name in PER_DOCUMENT:
        assets_def = defs.resolve_assets_def(name)
        assert assets_def.partitions_def is not None, name
        assert assets_def.partitions_def.get_partition_keys() == SHARD_KEYS
        assert assets_def.backfill_policy == BackfillPolicy.single_run()
        assert SPECS[name].automation_condition is None


def test_shards_per_run_splits_a_backfill_into_runs_of_that_many_shards(tmp_path):
    config = tmp_path / "graphrag.yaml"
    config.write_text("runs: {shards_per_run: 8}\n")
    code = ("import json; from graphrag_pipeline.definitions import defs; "
            f"print(json.dumps({{n: repr(defs.resolve_assets_def(n).backfill_policy) for n in {LINEAGE!r}}}))")
    env = {**os.environ, "GRAPHRAG_CONFIG": str(config), "PYTHONPATH": str(REPO)}
    policies = json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                         check=True).stdout)
    assert {policies[name] for name in PER_DOCUMENT} == {repr(BackfillPolicy.multi_run(8))}
    assert {policies[name] for name in CORPUS_WIDE} == {repr(BackfillPolicy.single_run())}


def test_corpus_wide_assets_share_one_pool_and_each_per_document_stage_has_its_own():
    graph = defs.resolve_asset_graph()
    pools = {name: graph.get(AssetKey(name)).pools for name in LINEAGE}
    assert {name: pools[name] for name in CORPUS_WIDE} == {name: {"graphrag_corpus_wide"} for name in CORPUS_WIDE}
    assert [pools[name] for name in PER_DOCUMENT] == [{f"graphrag_{name}"} for name in PER_DOCUMENT]


def test_corpus_wide_assets_are_unpartitioned_and_follow_shard_runs():
    for name in CORPUS_WIDE:
        assets_def = defs.resolve_assets_def(name)
        assert assets_def.partitions_def is None, name
        assert SPECS[name].automation_condition.get_label() == "after shard runs"


def test_automation_sensor_targets_the_corpus_wide_assets_and_runs_on_a_fresh_instance():
    from dagster import DefaultSensorStatus

    sensor = defs.resolve_sensor_def("graphrag_automation_sensor")
    assert sensor.default_status == DefaultSensorStatus.RUNNING
    assert sensor.asset_selection.resolve(defs.resolve_asset_graph()) == {AssetKey(n) for n in CORPUS_WIDE}
    for kind in ("folder", "confluence", "catalog", "eval_set"):
        assert defs.resolve_sensor_def(f"{kind}_source_sensor").default_status == DefaultSensorStatus.RUNNING


def test_every_stage_that_writes_a_store_has_checks():
    checks = {(key.asset_key.to_user_string(), key.name) for key in defs.resolve_asset_graph().asset_check_keys}
    assert {asset for asset, _ in checks} == {"embeddings", "extracted_elements", "graph", "communities",
                                              "community_summaries"}
    assert len(checks) == 8


def test_jobs_sensor_and_schedule():
    refresh = defs.resolve_job_def("refresh_shards")
    assert refresh.partitions_def.get_partition_keys() == SHARD_KEYS
    assert {key.to_user_string() for key in refresh.asset_layer.selected_asset_keys} == set(PER_DOCUMENT)
    build = defs.resolve_job_def("build_index")
    assert {key.to_user_string() for key in build.asset_layer.selected_asset_keys} == set(LINEAGE)

    for kind in ("folder", "confluence", "catalog", "eval_set"):  # one sensor per source kind
        sensor = defs.resolve_sensor_def(f"{kind}_source_sensor")
        assert sensor.job_name == "refresh_shards"
        assert sensor.required_resource_keys == {"graphrag"}

    schedule = defs.resolve_schedule_def("daily_refresh")
    assert schedule.cron_schedule == "0 3 * * *"
    assert schedule.job_name == "refresh_shards"
    assert schedule.required_resource_keys == {"graphrag"}

    corpus = defs.resolve_job_def("refresh_corpus")
    assert {key.to_user_string() for key in corpus.asset_layer.selected_asset_keys} == set(CORPUS_WIDE)
    assert defs.resolve_schedule_def("daily_corpus_refresh").job_name == "refresh_corpus"


def test_every_asset_asks_for_the_one_graphrag_resource():
    assert isinstance(defs.resources["graphrag"], GraphRAGResource)
    # Stores come from the configuration through the backend factory, so swapping backends is configuration.
    for name in LINEAGE:
        assert defs.resolve_assets_def(name).required_resource_keys - {"io_manager"} == {"graphrag"}


def test_a_resource_that_disagrees_with_the_definitions_is_refused(tmp_path):
    from graphrag_pipeline.definitions import definitions_with

    config = tmp_path / "graphrag.yaml"
    config.write_text("shard_count: 4\n")
    with pytest.raises(ValueError, match="4 shards.*disagrees with the one the definitions were loaded with"):
        definitions_with(GraphRAGResource(config_path=str(config)))


def _dg(*args: str) -> subprocess.CompletedProcess:
    """The `dg` CLI of this environment, on this checkout's project (its [tool.dg] section)."""
    env = {**os.environ, "VIRTUAL_ENV": sys.prefix}  # dg otherwise warns that no virtual environment is active
    return subprocess.run([str(Path(sys.executable).parent / "dg"), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # a dg process loading the project
def test_dg_check_defs_passes():
    result = _dg("check", "defs")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "All definitions loaded successfully" in result.stdout + result.stderr


@pytest.mark.slow  # a dg process loading the project
def test_dg_list_defs_lists_the_project():
    result = _dg("list", "defs", "--json")
    assert result.returncode == 0, result.stderr
    listed = json.loads(result.stdout)
    assert {a["asset_key"] for a in listed["assets"]} == set(LINEAGE)
    assert len(listed["asset_checks"]) == 8
    assert {s["name"] for s in listed["sensors"]} >= {"folder_source_sensor", "graphrag_automation_sensor"}
