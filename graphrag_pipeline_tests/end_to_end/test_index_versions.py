"""An open index across rebuilds: each question answered from one published version, the newest when it starts; and
an index whose first build has not published it yet refused with a clear error."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from graphrag_pipeline import cli
from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core.config import PipelineSettings
from graphrag_pipeline.lib.stages import STAGES, all_shards, build_everything
from graphrag_pipeline.lib.stores.state.sqlite import build_lock
from graphrag_pipeline.query import IndexNotFoundError, IndexNotPublishedError, open_index
from graphrag_pipeline_tests.conftest import folder_settings
from graphrag_pipeline_tests.unit.query.test_retrieval_mechanisms import NO_NER, HashedEmbedder, content_words

QUESTION = "etcd has no leader: which runbook applies?"
BEFORE = {
    "etcd.md": "# etcd has no leader\n\nWhen etcd has no leader, check the network between the etcd members.\n",
    "disk.md": "# Disk full\n\nWhen the disk of a node is full, delete old logs and extend the volume.\n",
    "alerts.md": "# Alertmanager unreachable\n\nPrometheus cannot send alerts to Alertmanager: check its service.\n",
}
AFTER = {  # the etcd runbook rewritten about certificates, and a new one about the lost leader
    **BEFORE,
    "etcd.md": "# Certificates\n\nRenew the expiring certificates of the ingress before they lapse.\n",
    "quorum.md": "# etcd leader lost\n\netcd has no leader after a network split: restore the quorum of the etcd "
                 "members, then check which member leads.\n",
}
VOCABULARY = set().union(*map(content_words, [*BEFORE.values(), *AFTER.values(), QUESTION]))


class HoldingEmbedder(HashedEmbedder):
    """Holds a question that contains "hold" inside the engine until released, so a rebuild can land meanwhile."""

    def __init__(self) -> None:
        super().__init__(VOCABULARY)
        self.holding = threading.Event()
        self.release = threading.Event()

    def embed(self, texts):
        if any("hold" in text for text in texts):
            self.holding.set()
            assert self.release.wait(120), "the test never released the held question"
        return super().embed(texts)


def write_corpus(corpus: Path, files: dict[str, str]) -> None:
    corpus.mkdir(exist_ok=True)
    for stale in set(p.name for p in corpus.iterdir()) - set(files):
        (corpus / stale).unlink()
    for name, text in files.items():
        (corpus / name).write_text(text, encoding="utf-8")


def build(settings: PipelineSettings, stages: int = len(STAGES)) -> None:
    """The first `stages` stages (all by default) with the bag-of-words embedder, as one build would run them."""
    with Workspace(settings, embedder=HashedEmbedder(VOCABULARY)) as workspace:
        if stages == len(STAGES):
            build_everything(workspace)
            return
        for stage in STAGES[:stages]:
            stage.run(workspace, list(all_shards(workspace))) if stage.per_document else stage.run(workspace)


@pytest.fixture
def settings(tmp_path) -> PipelineSettings:
    write_corpus(tmp_path / "corpus", BEFORE)
    return folder_settings(tmp_path / "index", tmp_path / "corpus",
                           extraction={"dictionary": {"Service": ["etcd", "Alertmanager", "Prometheus"]},
                                       "ner_labels": NO_NER})


def answer(index, question: str = QUESTION) -> dict:
    response = index.query(question, top_k=3).to_dict()
    response.pop("timings_ms")
    return response


def test_an_open_index_answers_from_the_version_published_after_a_rebuild(settings):
    build(settings)
    with open_index(settings=settings, embedder=HashedEmbedder(VOCABULARY)) as index:
        before = answer(index)
        first_version = index.version
        write_corpus(Path(settings.sources[0].path), AFTER)
        build(settings)

        after = answer(index)  # the same handle, kept across the rebuild
        version_after = index.version
    with open_index(settings=settings, embedder=HashedEmbedder(VOCABULARY)) as fresh:
        reopened, version_reopened = answer(fresh), fresh.version
    assert before["results"][0]["doc_id"] == "t:etcd.md"
    assert after == reopened  # scores, passages, paths and facts of the new version, nothing of the old one
    assert after["results"][0]["doc_id"] == "t:quorum.md"
    assert version_after == version_reopened != first_version


@pytest.mark.parametrize("stages", [1, len(STAGES) - 1])  # sources read; everything but the last stage
def test_answers_say_when_the_index_has_not_finished_taking_in_source_changes(settings, stages):
    """Answers while a build writes (or after it stopped early) silently missed the edited documents: now they say
    so, until a build has finished taking the changes in."""
    build(settings)
    with open_index(settings=settings, embedder=HashedEmbedder(VOCABULARY)) as index:
        assert not index.query(QUESTION).index_updating and not index.context("etcd").index_updating
        write_corpus(Path(settings.sources[0].path), AFTER)
        build(settings, stages=stages)
        assert index.query(QUESTION).index_updating and index.context("etcd").index_updating
        assert "taking in source changes" in index.context("etcd").to_markdown()
        build(settings)
        assert not index.query(QUESTION).index_updating
        build(settings)  # a build that finds no change
        assert not index.query(QUESTION).index_updating


def test_a_question_in_flight_keeps_its_version_while_the_next_one_moves_on(settings):
    build(settings)
    embedder = HoldingEmbedder()
    with open_index(settings=settings, embedder=embedder) as index, ThreadPoolExecutor(1) as pool:
        first_version, first_vectors = index.version, index.vectors
        held = pool.submit(index.query, f"hold on: {QUESTION}", top_k=3)
        try:
            assert embedder.holding.wait(60)
            write_corpus(Path(settings.sources[0].path), AFTER)
            build(settings)

            assert answer(index)["results"][0]["doc_id"] == "t:quorum.md"  # this question opened the new version
            assert index.version != first_version
            assert first_vectors.count("chunks") == len(BEFORE)  # still open: the held question answers from it
        finally:
            embedder.release.set()
        assert held.result().results  # answered without error, from the version it started with
        with pytest.raises(RuntimeError, match="closed"):
            first_vectors.count("chunks")  # closed once its last question ended


@pytest.mark.parametrize("stages", [1, 3, len(STAGES) - 1],
                         ids=["documents read", "chunks embedded", "all but the community summaries"])
def test_an_index_whose_first_build_has_not_published_is_refused_with_a_clear_error(settings, stages, tmp_path,
                                                                                     capsys, monkeypatch):
    build(settings, stages)
    with pytest.raises(IndexNotPublishedError, match="no published version") as refused:
        open_index(settings=settings, embedder=HashedEmbedder(VOCABULARY))
    assert isinstance(refused.value, IndexNotFoundError)  # callers that handle a missing index handle this too

    monkeypatch.delenv("GRAPHRAG_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["--index-dir", settings.index_dir, "query", QUESTION, "--mode", "global"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("graphrag-pipeline: the index at ") and "`graphrag-pipeline build`" in error
    assert "no build is running, so the last one stopped before the end" in error and "Traceback" not in error
    with build_lock(Path(settings.index_dir)):  # while a build holds the index, that is what the error says
        with pytest.raises(IndexNotPublishedError, match=rf"its first build is running \(pid {os.getpid()} since"):
            open_index(settings=settings, embedder=HashedEmbedder(VOCABULARY))


def test_a_build_of_a_missing_folder_fails_before_it_creates_an_index(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("GRAPHRAG_CONFIG", raising=False)
    config = tmp_path / "graphrag.yaml"
    config.write_text("index_dir: index\nsources:\n  - {name: docs, kind: folder, path: ./missing}\n")
    assert cli.main(["build", "--config", str(config)]) == 2
    assert f"source 'docs': {tmp_path / 'missing'} does not exist" in capsys.readouterr().err
    assert not (tmp_path / "index").exists()  # nothing a question would take for a build that is running


@pytest.mark.slow  # three rebuilds while four threads ask
def test_questions_from_many_threads_during_rebuilds_never_fail_and_end_on_the_last_version(settings):
    build(settings)
    stop, failures, answered = threading.Event(), [], []

    def ask(index) -> None:
        while not stop.is_set():
            try:
                index.query(QUESTION, top_k=3)
                answered.append(index.version)
            except Exception as error:  # noqa: BLE001 (every failure is the finding)
                failures.append(repr(error))

    with open_index(settings=settings, embedder=HashedEmbedder(VOCABULARY)) as index:
        with ThreadPoolExecutor(4) as pool:
            askers = [pool.submit(ask, index) for _ in range(4)]
            for files in (AFTER, BEFORE, AFTER):
                write_corpus(Path(settings.sources[0].path), files)
                build(settings)
            stop.set()
            for asker in askers:
                asker.result()
        last = answer(index)
        versions_seen = set(answered)
    with open_index(settings=settings, embedder=HashedEmbedder(VOCABULARY)) as fresh:
        assert last == answer(fresh)
    assert failures == []
    assert len(versions_seen) > 1  # the askers moved through the rebuilds' versions


class CountingEmbedder(HashedEmbedder):
    def __init__(self) -> None:
        super().__init__(VOCABULARY)
        self.embedded: list[str] = []

    def embed(self, texts):
        self.embedded.extend(texts)
        return super().embed(texts)


def test_a_repeated_question_is_not_embedded_again_across_versions_and_the_cache_is_bounded(settings):
    build(settings)
    embedder = CountingEmbedder()
    with open_index(settings=settings.with_overrides(retrieval={"question_cache_size": 2}), embedder=embedder) as index:
        first = answer(index)
        write_corpus(Path(settings.sources[0].path), AFTER)
        build(settings)
        index.query(QUESTION, mode="vector")  # a new version, the same question: its vector is kept
        assert embedder.embedded == [QUESTION]
        for other in ("disk full?", "alertmanager unreachable?", QUESTION):  # the oldest goes beyond two
            index.query(other, mode="vector")
        assert embedder.embedded == [QUESTION, "disk full?", "alertmanager unreachable?", QUESTION]
    assert first["results"]  # answered from the cached vector as from a fresh one (the versions' own tests)
    with open_index(settings=settings.with_overrides(retrieval={"question_cache_size": 0}),
                    embedder=(uncached := CountingEmbedder())) as index:
        index.query(QUESTION, mode="vector")
        index.query(QUESTION, mode="vector")
    assert uncached.embedded == [QUESTION, QUESTION]
