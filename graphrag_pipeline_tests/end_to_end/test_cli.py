"""The `graphrag-pipeline` command, run as a user runs it: a subprocess (of this checkout, see `cli_process`) reading
its settings from $GRAPHRAG_CONFIG or --config. Query variants that only differ in flags call `cli.main` in-process, so the
embedding model loads once for them instead of once per subprocess."""

import json
import os
import pty
import re
import shutil
import socket
import subprocess
import threading
from pathlib import Path

import pytest
import yaml

from graphrag_pipeline import cli
from graphrag_pipeline_tests.cli_process import CLI, cli_env, run_cli
from graphrag_pipeline_tests.conftest import FIXTURES

QUESTION = "Where was the founder of Acme Robotics born?"
RESULT_KEYS = {"chunk_id", "text", "doc_id", "source", "entity_path", "combined_score", "hops_from_query", "scores",
               "citations"}


def run_module(*args: str, cwd: Path, stderr_on_a_terminal: bool) -> tuple[int, str, str]:
    """`python -m graphrag_pipeline.cli` from this checkout with stderr captured (not a terminal) or on a
    pseudo-terminal, as a person at a shell has it; returns the exit status, stdout and what stderr received."""
    command, env = [*CLI, *args], cli_env()
    if not stderr_on_a_terminal:
        completed = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
        return completed.returncode, completed.stdout, completed.stderr
    leader, follower = pty.openpty()
    received: list[bytes] = []

    def drain() -> None:  # keeps the terminal's small buffer from filling while the child draws
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: the child, the last holder of the follower end, has exited
                return
            if not data:
                return
            received.append(data)

    reader = threading.Thread(target=drain)
    reader.start()
    try:
        with subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=follower) as process:
            os.close(follower)
            stdout, _ = process.communicate(timeout=900)
        reader.join(timeout=60)
    finally:
        os.close(leader)
    # The terminal turns "\n" into "\r\n" on output; undo that so the text reads as the CLI wrote it.
    return process.returncode, stdout.decode(), b"".join(received).decode().replace("\r\n", "\n")


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
    # Exactly these keys, nothing else lost; each signal's score is in `scores`.
    assert response["results"] and all(set(result) == RESULT_KEYS for result in response["results"])
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
    facts = lines[lines.index("relationships:") + 1:]
    assert facts and all(re.fullmatch(r"  \S.* -\[[A-Z_]+\]-> \S.*", line) for line in facts)
    assert any({"Acme Robotics", "Mirela Vantongeren"} == set(re.split(r" -\[[A-Z_]+\]-> ", line.strip()))
               for line in facts)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["vector", "keyword", "graph", "hybrid", "global"])
def test_every_mode_answers_and_top_k_limits_the_results(config, capsys, mode):
    response = run_main(capsys, "--config", str(config), "query", QUESTION, "--mode", mode, "--top-k", "2", "--json")
    assert response["mode"] == mode
    assert 1 <= len(response["results"]) <= 2
    if mode == "global":
        assert all(r["source"]["kind"] == "community" for r in response["results"])
    else:
        assert all(r["doc_id"].startswith("t:") for r in response["results"])
    if mode == "vector":
        assert all(r["scores"]["graph"] == 0 and r["entity_path"] == [] for r in response["results"])


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
    assert all(r["source"] and r["type"] and r["target"] for r in relationships)
    assert not any(r["source"].startswith("ent-") or r["target"].startswith("ent-") for r in relationships)
    assert any({r["source"], r["target"]} == {"Acme Robotics", "Mirela Vantongeren"} for r in relationships)
    # the shape of a query's facts: one vocabulary in the CLI, HTTP and MCP
    assert set(relationships[0]) >= {"source", "type", "target", "predicates", "weight"}


@pytest.mark.slow
def test_graph_tables_without_json_align_their_columns(config, capsys):
    assert cli.main(["--config", str(config), "graph", "stats"]) == 0
    stats_text = capsys.readouterr().out
    stats = run_main(capsys, "--config", str(config), "graph", "stats", "--json")
    totals, types, relationship_types = (block.splitlines() for block in stats_text.split("\n\n"))
    assert totals[1:] == [f"{'entities':<20}  {stats['entities']:>5}", f"{'relationships':<20}  "
                          f"{stats['relationships']:>5}", f"chunks with mentions  {stats['chunks_with_mentions']:>5}"]
    assert [line.split() for line in types] == [["entity", "type", "count"]] + [
        [name, str(count)] for name, count in stats["top_entity_types"].items()]
    assert len(relationship_types) == len(stats["relationship_types"]) + 1

    assert cli.main(["--config", str(config), "graph", "entities", "--limit", "4"]) == 0
    header, *rows, more = capsys.readouterr().out.splitlines()
    entities = run_main(capsys, "--config", str(config), "graph", "entities", "--limit", "4", "--json")["entities"]
    assert header.split() == ["name", "type", "mention", "count", "documents", "description"]
    assert more == "(next page: --offset 4)"
    type_at, count_ends = header.index("type"), header.index("mention count") + len("mention count")
    for row, entity in zip(rows, entities, strict=True):
        assert row.startswith(entity["name"]) and row[type_at:].startswith(entity["type"] + " ")
        assert row[:count_ends].endswith(f" {entity['mention_count']}")  # counts right-aligned under their header

    assert cli.main(["--config", str(config), "graph", "relationships", "--limit", "1000"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()  # a short page: no next-page hint
    relationships = run_main(capsys, "--config", str(config), "graph", "relationships", "--limit", "1000",
                             "--json")["relationships"]
    assert header.split() == ["source", "type", "target", "weight", "documents"]
    predicate_at, object_at = header.index("type"), header.index("target")
    for row, relationship in zip(rows, relationships, strict=True):
        assert row.startswith(relationship["source"])
        assert row[predicate_at:].startswith(relationship["type"] + " ")
        assert row[object_at:].startswith(relationship["target"] + " ")

    assert cli.main(["--config", str(config), "graph", "entities", "--offset", "900"]) == 0
    assert capsys.readouterr().out == "no entities at offset 900\n"


@pytest.mark.slow
def test_a_reader_that_stops_early_ends_the_command_quietly(config, tmp_path):
    # The pipe's reading end is closed before the CLI starts, so its first write meets a closed pipe, as `| head -3`
    # does to a longer output, without depending on when a reader would go away.
    # Buffered stdout, as a user's shell has it (PYTHONUNBUFFERED would make the first print fail instead): the
    # whole output then meets the closed pipe only when Python flushes it.
    env = {k: v for k, v in cli_env(config).items() if k != "PYTHONUNBUFFERED"}
    reader, writer = os.pipe()
    os.close(reader)
    try:
        completed = subprocess.run([*CLI, "graph", "entities", "--limit", "500"], cwd=tmp_path, env=env,
                                   stdout=writer, stderr=subprocess.PIPE, text=True, timeout=600)
    finally:
        os.close(writer)
    assert completed.returncode == 141  # 128 + SIGPIPE, like any tool a closed pipe stops
    assert completed.stderr == ""


@pytest.mark.slow
@pytest.mark.parametrize("flag_at", [0, 3], ids=["before the subcommand", "after the subcommand"])
def test_index_dir_flag_overrides_the_configured_index(multihop_settings, tmp_path, flag_at):
    config = write_config(tmp_path / "graphrag.yaml", tmp_path / "not-built", FIXTURES / "multihop")
    args = ["graph", "stats", "--json"]
    args[flag_at:flag_at] = ["--index-dir", str(multihop_settings.index_dir)]
    completed = run_cli(*args, cwd=tmp_path, config=config)
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout)["entities"] > 0


# --- errors ----------------------------------------------------------------------------------------------------------

def test_cli_subprocesses_run_the_checkout_under_test(tmp_path, monkeypatch):
    # Another checkout of the package, importable first: what the venv's console script would run had the venv been
    # installed from there.
    other = tmp_path / "other-checkout" / "graphrag_pipeline"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("")
    (other / "cli.py").write_text("import sys\nprint('the other checkout')\nsys.exit(3)\n")
    monkeypatch.setenv("PYTHONPATH", str(other.parent))
    completed = run_cli("--help", cwd=tmp_path)
    assert completed.returncode == 0, completed.stdout
    assert completed.stdout.startswith("usage: graphrag-pipeline")


def test_a_missing_index_exits_2_and_says_so(tmp_path):
    missing = tmp_path / "nothing-here"
    completed = run_cli("--index-dir", str(missing), "query", QUESTION, "--json", cwd=tmp_path)
    assert completed.returncode == 2
    assert completed.stdout == ""
    assert f"no index at {missing}" in completed.stderr and "materialize" in completed.stderr
    assert not missing.exists()


@pytest.mark.parametrize("args, used", [
    (["--index-dir", "{a}", "query", QUESTION, "--index-dir", "{b}"], "{b}"),  # both places: the later one wins
    (["query", QUESTION, "--index-dir", "{b}", "--json"], "{b}"),
    (["--index-dir", "{a}", "graph", "stats"], "{a}"),  # not repeated after the subcommand: the earlier one stands
    (["graph", "entities", "--config", "{config}"], "{configured}"),
])
def test_config_and_index_dir_are_read_before_and_after_the_subcommand(tmp_path, capsys, monkeypatch, args, used):
    # Every index named here is missing on purpose: the error says which directory the command looked in.
    monkeypatch.delenv("GRAPHRAG_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    places = {"a": tmp_path / "a", "b": tmp_path / "b", "configured": tmp_path / "configured",
              "config": write_config(tmp_path / "graphrag.yaml", tmp_path / "configured", tmp_path / "corpus")}
    assert cli.main([arg.format(**places) for arg in args]) == 2
    assert f"no index at {used.format(**places)}" in capsys.readouterr().err


def test_eval_refuses_index_dir_because_it_builds_its_own_index(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--index-dir", str(tmp_path), "eval", str(tmp_path)])
    assert exit_.value.code == 2
    assert "eval builds its own index: use --work-dir to keep it, not --index-dir" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["eval", str(tmp_path), "--index-dir", str(tmp_path)])
    assert "unrecognized arguments: --index-dir" in capsys.readouterr().err


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

    completed = run_cli("build", "--index-dir", str(index_dir), "--json", cwd=tmp_path, config=config)
    assert completed.returncode == 0, completed.stderr
    assert "\r" not in completed.stderr  # no progress bar: --json, and stderr is not a terminal
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


def test_a_build_whose_model_server_answers_nothing_exits_2_with_the_reason_and_no_traceback(tmp_path):
    with socket.socket() as probe:  # a local port nothing listens on: refused at once
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    config = small_corpus(tmp_path)
    settings = yaml.safe_load(config.read_text())
    config.write_text(yaml.safe_dump({
        **settings, "extraction": {"extractor": "llm"},
        "llm": {"base_url": url, "max_retries": 1, "backoff_seconds": 0.01, "max_backoff_seconds": 0.02},
    }))
    completed = run_cli("build", "--json", cwd=tmp_path, config=config)
    assert completed.returncode == 2
    assert "Traceback" not in completed.stderr
    last_line = completed.stderr.strip().splitlines()[-1]  # after the client's retry warnings
    assert last_line.startswith("graphrag-pipeline: ") and url in last_line and "llm.base_url" in last_line


def small_corpus(tmp_path: Path) -> Path:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("acme-robotics.md", "zentrix-labs.md"):
        shutil.copy(FIXTURES / "multihop" / name, corpus / name)
    return write_config(tmp_path / "graphrag.yaml", tmp_path / "index", corpus)


@pytest.mark.slow
@pytest.mark.parametrize("stderr_on_a_terminal, json_flag, bar", [
    (True, False, True),
    (True, True, False),  # a script reads the output: no bar even at a terminal
    (False, False, False),  # a log or a pipe gets no carriage returns
])
def test_build_draws_a_progress_bar_only_at_a_terminal_without_json(tmp_path, stderr_on_a_terminal, json_flag, bar):
    config = small_corpus(tmp_path)
    status, stdout, stderr = run_module("--config", str(config), "build", *(["--json"] if json_flag else []),
                                        cwd=tmp_path, stderr_on_a_terminal=stderr_on_a_terminal)
    assert status == 0, stderr
    assert stdout.startswith("[" if json_flag else "raw_documents ")
    if not bar:
        assert "\r" not in stderr and "[---" not in stderr
        return
    # One line per step that had work, each ended once its last item is done; the redraws before it on that line.
    finished = [line.rsplit("\r", 1)[-1] for line in stderr.split("\n") if line.startswith("\r")]
    assert finished and all(re.search(r"\[#+\] (\d+)/\1 [\d,.]+/s done in \d+s$", line) for line in finished)
    steps = [line.split(" [")[0] for line in finished]
    assert steps[0] == "raw_documents: read sources" and "embeddings: embed chunks" in steps
    assert "embeddings: embed chunks [------------------------] 0/" in stderr  # its first draw, before any item


@pytest.mark.slow
def test_eval_draws_the_build_progress_at_a_terminal(tmp_path):
    set_dir = tmp_path / "tiny-set"
    shutil.copytree(FIXTURES / "eval_set", set_dir)
    (set_dir / "questions.jsonl").write_text(json.dumps(
        {"id": "q1", "question": "Which psychologist developed person-centered therapy?",
         "gold_ids": ["musique-0001"], "type": "1hop"}) + "\n")
    status, stdout, stderr = run_module("eval", str(set_dir), cwd=tmp_path, stderr_on_a_terminal=True)
    assert status == 0, stderr
    assert "recall@5" in stdout
    assert re.search(r"\rembeddings: embed chunks \[#+\] (\d+)/\1 .* done in \d+s\n", stderr)
