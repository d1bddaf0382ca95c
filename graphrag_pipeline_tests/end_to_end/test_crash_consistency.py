"""Crash consistency: a build killed at any point and run again equals a from-scratch build of the same corpus.

The kill points are every stage boundary and every crash point the stages pass inside their graph and vector writes
(`lib/core/faults.py`), discovered by recording one build. For each, an index built from the base corpus is copied, the
corpus changes (a public document edited, one deleted, a restricted document added that names public entities and
states facts only it knows), the build is stopped at the point and run again — once on the same corpus, once after the restricted
document was deleted meanwhile — and the result is compared record by record with a fresh build of that corpus.
One more test ends a real process with `os._exit` at a point (as `kill -9` does) through the CLI.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core import faults
from graphrag_pipeline.lib.stages import STAGES
from graphrag_pipeline_tests.cli_process import CLI, cli_env
from graphrag_pipeline_tests.conftest import FIXTURES, folder_settings, offline_embedder
from graphrag_pipeline_tests.index_snapshot import assert_same_index, index_snapshot

pytestmark = pytest.mark.slow

RESTRICTED = """---
access_groups: [board]
---
# Project Nightjar

Zentrix Labs will acquire Boltworks in May. Paul Okafor leads Project Nightjar with Kenji Tanabe.
Project Nightjar depends on the Obsidian Relay.
"""
CORPUS_TIME = 1_700_000_000
EDIT = "\nZentrix Labs also builds underwater drones for the Lagos port authority.\n"


class InjectedCrash(BaseException):
    """Not an Exception: nothing in a stage may catch it, as nothing catches a kill."""


def make_corpus(root: Path, *, changed: bool = True, restricted: bool = False) -> Path:
    """The changed corpus, always at ``root/corpus`` with the same file times: a document's metadata holds its
    path and modification time, so every index compared here is built from the same folder."""
    corpus = root / "corpus"
    shutil.rmtree(corpus, ignore_errors=True)
    shutil.copytree(FIXTURES / "multihop", corpus)
    if changed:
        with open(corpus / "zentrix-labs.md", "a", encoding="utf-8") as handle:
            handle.write(EDIT)
        (corpus / "founders-survey.md").unlink()  # so the graph and vector deletes have crash points too
    if restricted:
        (corpus / "nightjar.md").write_text(RESTRICTED, encoding="utf-8")
    for path in corpus.iterdir():
        os.utime(path, (CORPUS_TIME, CORPUS_TIME))
    return corpus


def settings_for(index_dir: Path, corpus: Path):
    return folder_settings(index_dir, corpus, communities={"min_size": 2})


def copy_index(source: Path, target: Path) -> None:
    """Vector shards are sparse files of hundreds of MB apparent size: copy their holes as holes."""
    subprocess.run(["cp", "-a", "--sparse=always", str(source), str(target)], check=True)


def run_build(settings, embedder, stop_at: str | None = None, seen: list[str] | None = None) -> None:
    """All stages in order; with ``stop_at``, the build ends there as if killed (``InjectedCrash``)."""

    def passed(point: str) -> None:
        if seen is not None:
            seen.append(point)
        if point == stop_at:
            raise InjectedCrash(point)

    with faults.watching(passed), Workspace(settings, embedder=embedder) as ws:
        shards = list(range(settings.shard_count))
        for stage in STAGES:
            passed(f"before {stage.name}")
            stage.run(ws, shards) if stage.per_document else stage.run(ws)


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    root = tmp_path_factory.mktemp("crash")
    embedder = offline_embedder()
    # The base index has seen the changed corpora before: their texts come from its embedding cache, so each of the
    # many builds below embeds nothing and the harness stays fast.
    for changed, restricted in ((True, True), (True, False), (False, False)):
        run_build(settings_for(root / "base", make_corpus(root, changed=changed, restricted=restricted)), embedder)
    expected = {}
    for name, restricted in (("with-restricted", True), ("restricted-deleted", False)):
        settings = settings_for(root / f"fresh-{name}", make_corpus(root, restricted=restricted))
        run_build(settings, embedder)
        expected[name] = index_snapshot(settings)
        shutil.rmtree(settings.index_dir)
    return {"root": root, "base": root / "base", "embedder": embedder, "expected": expected}


def crashed_copy(harness, stop_at: str | None, seen: list[str] | None = None):
    """The base index, copied, then the changed corpus built until ``stop_at``; returns its settings."""
    index_dir = harness["root"] / "crashed"
    shutil.rmtree(index_dir, ignore_errors=True)
    copy_index(harness["base"], index_dir)
    settings = settings_for(index_dir, make_corpus(harness["root"], restricted=True))
    try:
        run_build(settings, harness["embedder"], stop_at, seen)
    except InjectedCrash:
        pass
    return settings


def test_a_build_killed_at_any_point_and_run_again_equals_a_fresh_build(harness, capsys):
    seen: list[str] = []
    crashed_copy(harness, None, seen)
    points = list(dict.fromkeys(seen))
    assert {"graph:intent-recorded", "graph:entities-deleted", "graph:entities-written",
            "graph:relationships-written", "graph:mentions-set"} <= set(points), points
    assert {p.rsplit(":", 1)[0] for p in points if p.count(":") == 2} >= {
        "embeddings:chunks", "graph:entities", "community_summaries:communities"}, points
    failures = []
    for point in points:
        for deleted in (False, True):
            settings = crashed_copy(harness, point)
            if deleted:
                (Path(settings.sources[0].path) / "nightjar.md").unlink()
            try:
                run_build(settings, harness["embedder"])
                assert_same_index(index_snapshot(settings),
                                  harness["expected"]["restricted-deleted" if deleted else "with-restricted"])
            except Exception as error:
                failures.append(f"{point} (restricted document deleted: {deleted}): {str(error)[:400]}")
    with capsys.disabled():  # in CI's log, not only on failure
        print(f"\nkill points covered: {len(points)} ({2 * len(points)} crashed builds run again): "
              f"{', '.join(points)}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("point", ["graph:entities-written", "graph:entities:upserted"])
def test_a_process_killed_after_the_graph_writes_converges_after_a_delete(harness, tmp_path, point):
    """The finding as reported: kill -9 in the graph stage after its writes but before its bookkeeping, then a
    restricted document deleted; every later build failed and the document's entities stayed in the graph. Also
    killed inside the entity points' session, whose writes no flush has made durable yet."""
    index_dir = tmp_path / "index"
    copy_index(harness["base"], index_dir)
    corpus = make_corpus(harness["root"], restricted=True)
    config = tmp_path / "graphrag.yaml"
    config.write_text(json.dumps({"index_dir": str(index_dir), "shard_count": 4, "communities": {"min_size": 2},
                                  "sources": [{"name": "t", "kind": "folder", "path": str(corpus)}]}))
    command = [*CLI, "--config", str(config), "build", "--json"]
    killed = subprocess.run(command, capture_output=True, text=True, timeout=600,
                            env={**cli_env(), faults.CRASH_ENV: point})
    assert killed.returncode == faults.KILLED_EXIT_CODE, killed.stderr[-2000:]
    (corpus / "nightjar.md").unlink()
    rerun = subprocess.run(command, capture_output=True, text=True, timeout=600, env=cli_env())
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert_same_index(index_snapshot(settings_for(index_dir, corpus)), harness["expected"]["restricted-deleted"])


RESTRICTED_ONLY = ("Nightjar", "Obsidian")  # words no public document has (the people and Boltworks are public)


def test_a_deleted_restricted_document_is_hidden_from_the_public_at_every_kill_point(harness):
    """The index holds the restricted page; it is deleted and the build killed at each point: whatever the later
    stages have not yet removed, a public caller sees none of it, in any mode, in exploration or in a context."""
    from graphrag_pipeline.query import explore, open_index

    seen: list[str] = []
    built = crashed_copy(harness, None, seen)  # the changed corpus with the restricted page, built in full
    with_restricted = harness["root"] / "built-with-restricted"
    shutil.rmtree(with_restricted, ignore_errors=True)
    copy_index(Path(built.index_dir), with_restricted)
    questions = ("Who leads Project Nightjar?", "What does Project Nightjar depend on?")  # echoed, never compared
    leaks = []
    for point in dict.fromkeys(seen):
        index_dir = harness["root"] / "crashed"
        shutil.rmtree(index_dir, ignore_errors=True)
        copy_index(with_restricted, index_dir)
        corpus = make_corpus(harness["root"], restricted=False)
        settings = settings_for(index_dir, corpus)
        try:
            run_build(settings, harness["embedder"], point)
        except InjectedCrash:
            pass
        with open_index(settings=settings, embedder=harness["embedder"]) as index:
            shown = [json.dumps(index.query(q, mode=mode, results="chunks", top_k=20).to_dict()["results"])
                     + json.dumps(index.query(q, mode=mode).to_dict()["relationships"])
                     for q in questions for mode in ("hybrid", "graph", "vector", "keyword", "global")]
            shown.append(json.dumps(explore.list_entities(index, limit=1000)))
            shown.append(json.dumps(explore.list_relationships(index, limit=1000)))
            context = index.context("Project Nightjar").to_dict()
            context.pop("subject")  # the caller's own words
            shown.append(json.dumps(context))
        found = sorted({word for word in RESTRICTED_ONLY for text in shown if word in text})
        if found:
            leaks.append(f"{point}: {found}")
    assert not leaks, "\n".join(leaks)
