"""The `graphrag-pipeline` console script, run as a user runs it: a subprocess reading its settings from
$GRAPHRAG_CONFIG or --config. Query variants that only differ in flags call `cli.main` in-process, so the
embedding model loads once for them instead of once per subprocess."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from graphrag_pipeline import cli

from .conftest import FIXTURES

QUESTION = "Where was the founder of Acme Robotics born?"
SCRIPT = Path(sys.executable).with_name("graphrag-pipeline")
RESULT_KEYS = {"chunk_id", "text", "source", "entity_path", "vector_score", "graph_score", "combined_score",
               "hops_from_query", "citations"}


def run_cli(*args: str, cwd: Path, config: Path | None = None) -> subprocess.CompletedProcess:
    """The installed console script, with $GRAPHRAG_CONFIG set to `config` (or unset) and no ./graphrag.yaml."""
    env = {k: v for k, v in os.environ.items() if k != "GRAPHRAG_CONFIG"}
    if config is not None:
        env["GRAPHRAG_CONFIG"] = str(config)
    return subprocess.run([str(SCRIPT), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def write_config(path: Path, index_dir: Path | str, corpus: Path) -> Path:
    path.write_text(yaml.safe_dump({
        "index_dir": str(index_dir),
        "shard_count": 4,
        "sources": [{"name": "t", "kind": "folder", "path": str(corpus)}],
    }))
    return path


def run_main(capsys, *args: str) -> dict:
    assert cli.main(list(args)) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def config(multihop_settings, tmp_path_factory) -> Path:
    return write_config(tmp_path_factory.mktemp("cli") / "graphrag.yaml", multihop_settings.index_dir,
                        FIXTURES / "multihop")


# --- query -----------------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_query_json_from_the_config_in_the_environment(config, tmp_path):
    completed = run_cli("query", QUESTION, "--json", cwd=tmp_path, config=config)
    assert completed.returncode == 0, completed.stderr
    response = json.loads(completed.stdout)
    assert response["question"] == QUESTION and response["mode"] == "hybrid"
    assert response["fell_back_to_vector"] is False
    assert response["results"] and all(RESULT_KEYS <= set(result) for result in response["results"])
    assert {r["doc_id"] for r in response["results"]} >= {"t:acme-robotics.md", "t:mirela-vantongeren.md"}
    for result in response["results"]:
        assert result["citations"][0]["doc_id"] == result["doc_id"]
        assert isinstance(result["entity_path"], list) and result["hops_from_query"] >= 0
    assert any(e["name"] == "Acme Robotics" for e in response["entities_mentioned"])
    assert all({"source", "type", "target"} <= set(r) for r in response["relationships"])


@pytest.mark.slow
def test_query_without_json_prints_a_readable_answer_with_titles(config, tmp_path):
    completed = run_cli("--config", str(config), "query", QUESTION, "--top-k", "3", cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    assert lines[0] == f"Q: {QUESTION}  [hybrid]"
    assert lines[1].startswith("entities: Acme Robotics (ORGANIZATION)")
    titles = {f"t:{path.name}": path.read_text().splitlines()[0].removeprefix("# ")
              for path in (FIXTURES / "multihop").glob("*.md")}
    ranked = [line for line in lines if re.match(r" \d\. ", line)]
    assert [line[:4] for line in ranked] == [" 1. ", " 2. ", " 3. "]
    for line in ranked:
        doc_id = re.search(r"\[(t:[^\]]+)\]$", line).group(1)
        assert line.endswith(f"{titles[doc_id]} [{doc_id}]")
    assert "[t:acme-robotics.md]" in ranked[0]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["vector", "graph", "hybrid", "global"])
def test_every_mode_answers_and_top_k_limits_the_results(config, capsys, mode):
    response = run_main(capsys, "--config", str(config), "query", QUESTION, "--mode", mode, "--top-k", "2", "--json")
    assert response["mode"] == mode
    assert 1 <= len(response["results"]) <= 2
    if mode == "global":
        assert all(r["source"]["kind"] == "community" for r in response["results"])
    else:
        assert all(r["doc_id"].startswith("t:") for r in response["results"])
    if mode == "vector":
        assert all(r["graph_score"] == 0 and r["entity_path"] == [] for r in response["results"])


@pytest.mark.slow
def test_max_hops_bounds_the_traversal(config, capsys):
    zero = run_main(capsys, "--config", str(config), "query", QUESTION, "--max-hops", "0", "--json")
    two = run_main(capsys, "--config", str(config), "query", QUESTION, "--max-hops", "2", "--json")
    # No relationship is followed at 0 hops: an entity is at most one passage away from the question (named in the
    # passage of a question entity), never further.
    assert zero["results"] and all(r["hops_from_query"] <= 1 for r in zero["results"])
    assert all(len(r["entity_path"]) <= 2 for r in zero["results"])
    assert max(r["hops_from_query"] for r in two["results"]) >= max(r["hops_from_query"] for r in zero["results"])
    assert cli.main(["--config", str(config), "query", QUESTION, "--max-hops", "7"]) == 2
    assert "max_hops must be between 0 and 3" in capsys.readouterr().err


# --- graph -----------------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_graph_stats(config, tmp_path):
    completed = run_cli("graph", "stats", "--json", cwd=tmp_path, config=config)
    assert completed.returncode == 0, completed.stderr
    stats = json.loads(completed.stdout)
    assert stats["entities"] > 0 and stats["relationships"] > 0 and stats["chunks_with_mentions"] > 0
    assert stats["top_entity_types"] and sum(stats["top_entity_types"].values()) == stats["entities"]
    assert "PERSON" in stats["top_entity_types"]


@pytest.mark.slow
def test_graph_entities_are_ordered_and_paginated(config, tmp_path):
    def page(offset: int) -> list[dict]:
        completed = run_cli("graph", "entities", "--json", "--limit", "3", "--offset", str(offset),
                            "--order-by", "mention_count", cwd=tmp_path, config=config)
        assert completed.returncode == 0, completed.stderr
        return json.loads(completed.stdout)["entities"]

    first, second = page(0), page(3)
    assert len(first) == 3 and len(second) == 3
    counts = [e["mention_count"] for e in first + second]
    assert counts == sorted(counts, reverse=True)
    assert first[0]["name"] == "Mirela Vantongeren"  # the only entity mentioned in two documents
    assert not {e["id"] for e in first} & {e["id"] for e in second}


@pytest.mark.slow
def test_graph_relationships_name_both_ends(config, tmp_path):
    completed = run_cli("graph", "relationships", "--json", cwd=tmp_path, config=config)
    assert completed.returncode == 0, completed.stderr
    relationships = json.loads(completed.stdout)["relationships"]
    assert relationships
    assert all(r["subject"] and r["predicate"] and r["object"] for r in relationships)
    assert not any(r["subject"].startswith("ent-") or r["object"].startswith("ent-") for r in relationships)
    assert any({r["subject"], r["object"]} == {"Acme Robotics", "Mirela Vantongeren"} for r in relationships)


@pytest.mark.slow
def test_index_dir_flag_overrides_the_configured_index(multihop_settings, tmp_path):
    config = write_config(tmp_path / "graphrag.yaml", tmp_path / "not-built", FIXTURES / "multihop")
    completed = run_cli("--index-dir", multihop_settings.index_dir, "graph", "stats", "--json", cwd=tmp_path,
                        config=config)
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout)["entities"] > 0


# --- errors ----------------------------------------------------------------------------------------------------------

def test_a_missing_index_exits_2_and_says_so(tmp_path):
    missing = tmp_path / "nothing-here"
    completed = run_cli("--index-dir", str(missing), "query", QUESTION, "--json", cwd=tmp_path)
    assert completed.returncode == 2
    assert completed.stdout == ""
    assert f"no index at {missing}" in completed.stderr and "materialize" in completed.stderr
    assert not missing.exists()


def test_an_invalid_mode_is_an_argparse_error(tmp_path):
    completed = run_cli("--index-dir", str(tmp_path), "query", QUESTION, "--mode", "telepathy", cwd=tmp_path)
    assert completed.returncode == 2
    assert "invalid choice: 'telepathy'" in completed.stderr and "usage:" in completed.stderr


@pytest.mark.slow
def test_a_bad_page_exits_2_with_the_reason(config, tmp_path):
    completed = run_cli("graph", "entities", "--offset", "-1", cwd=tmp_path, config=config)
    assert completed.returncode == 2
    assert "offset must be >= 0" in completed.stderr


# --- build -----------------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_build_indexes_a_small_corpus_into_the_given_index_dir(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("acme-robotics.md", "mirela-vantongeren.md", "zentrix-labs.md"):
        shutil.copy(FIXTURES / "multihop" / name, corpus / name)
    config = write_config(tmp_path / "graphrag.yaml", tmp_path / "configured-index", corpus)
    index_dir = tmp_path / "flag-index"

    completed = run_cli("--index-dir", str(index_dir), "build", "--json", cwd=tmp_path, config=config)
    assert completed.returncode == 0, completed.stderr
    reports = json.loads(completed.stdout)
    assert [r["stage"] for r in reports] == ["raw_documents", "chunks", "embeddings", "extracted_elements",
                                             "element_summaries", "graph", "communities", "community_summaries"]
    stages = {r["stage"]: r for r in reports}
    assert stages["raw_documents"]["documents"] == 3 and stages["raw_documents"]["quarantined"] == 0
    assert stages["chunks"]["chunks_written"] >= 3
    assert stages["graph"]["entities"] > 0
    assert (index_dir / "state.sqlite").is_file() and not (tmp_path / "configured-index").exists()

    stats = run_cli("--index-dir", str(index_dir), "graph", "stats", "--json", cwd=tmp_path, config=config)
    assert json.loads(stats.stdout)["entities"] == stages["graph"]["entities"]
