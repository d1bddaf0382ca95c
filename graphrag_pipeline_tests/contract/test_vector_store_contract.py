"""The VectorStore contract, run against every implementation, plus the Edge store's publish/reader behaviour.

To run the contract against another implementation, add its factory to ``VECTOR_STORE_FACTORIES``.
"""

from __future__ import annotations

import fcntl
import filecmp
import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from qdrant_edge import Distance, EdgeConfig, EdgeShard, EdgeVectorParams, VectorStorageDatatype

import graphrag_pipeline
from graphrag_pipeline.lib.core.models import VectorPoint
from graphrag_pipeline.lib.stores import edge_vectors
from graphrag_pipeline.lib.stores.edge_vectors import (
    CollectionNotFoundError,
    EdgeVectorReader,
    EdgeVectorStore,
    _copy_sparse,
)
from graphrag_pipeline.lib.stores.protocols import SCORE_TOLERANCE, VectorStore
from graphrag_pipeline.lib.stores.qdrant_vectors import QdrantVectorStore
from graphrag_pipeline.lib.stores.vector_points import VECTOR_NAME


def qdrant_server_store(tmp_path: Path) -> QdrantVectorStore:
    """A real Qdrant server (QDRANT_URL, optional QDRANT_API_KEY); a fresh collection prefix per test."""
    return QdrantVectorStore(
        os.environ["QDRANT_URL"],
        os.environ.get("QDRANT_API_KEY") or None,
        prefix=f"graphrag_contract_{uuid.uuid4().hex[:12]}_",
        keyword_fields=("kind",),
    )


VECTOR_STORE_FACTORIES: dict[str, Callable[[Path], VectorStore]] = {
    "edge": lambda tmp_path: EdgeVectorStore(tmp_path / "vectors", keyword_fields=("doc_ids", "kind")),
    # qdrant-client's local mode, what CI runs: in memory, and on disk (it commits every point to SQLite: slow).
    "qdrant-local": lambda tmp_path: QdrantVectorStore(location=":memory:", keyword_fields=("kind",)),
    "qdrant-local-disk": lambda tmp_path: QdrantVectorStore(path=str(tmp_path / "qdrant"), keyword_fields=("kind",)),
    "qdrant-server": qdrant_server_store,
}

# Marks per backend: the server variant needs QDRANT_URL and is skipped (with this reason) without it.
VECTOR_STORE_MARKS: dict[str, list[pytest.MarkDecorator]] = {
    "qdrant-local-disk": [pytest.mark.slow],
    "qdrant-server": [
        pytest.mark.server,
        pytest.mark.skipif(not os.environ.get("QDRANT_URL"), reason="QDRANT_URL is not set (no Qdrant server)"),
    ],
}

# Clean-up after each test for backends whose data outlives the test's tmp_path.
VECTOR_STORE_TEARDOWN: dict[str, Callable[[VectorStore], None]] = {
    "qdrant-server": lambda store: store.drop_collections(),  # type: ignore[attr-defined]
}

DIM = 4


@pytest.fixture(
    params=[pytest.param(name, marks=VECTOR_STORE_MARKS.get(name, [])) for name in sorted(VECTOR_STORE_FACTORIES)]
)
def vector_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorStore]:
    store = VECTOR_STORE_FACTORIES[request.param](tmp_path)
    try:
        yield store
    finally:
        teardown = VECTOR_STORE_TEARDOWN.get(request.param)
        if teardown is not None:
            teardown(store)
        store.close()


def point(point_id: str, vector: list[float], doc_ids: list[str], **payload: object) -> VectorPoint:
    return VectorPoint(point_id=point_id, vector=tuple(vector), payload={"doc_ids": doc_ids, **payload})


def corpus() -> list[VectorPoint]:
    return [
        point("chunk-a", [1.0, 0.0, 0.0, 0.0], ["doc-1"], kind="chunk", text="alpha"),
        point("chunk-b", [0.8, 0.6, 0.0, 0.0], ["doc-1"], kind="chunk", text="beta"),
        point("chunk-c", [0.0, 1.0, 0.0, 0.0], ["doc-2"], kind="chunk", text="gamma"),
        point("ent-x", [0.0, 0.0, 1.0, 0.0], ["doc-1", "doc-2"], kind="entity", text="shared"),
        point("ent-y", [0.0, 0.0, 0.6, 0.8], ["doc-3"], kind="entity", text="other"),
    ]


# -- contract ------------------------------------------------------------------------------------------------------


def test_search_returns_nearest_first_with_cosine_scores(vector_store: VectorStore) -> None:
    vector_store.ensure_collection("chunks", DIM)
    vector_store.upsert("chunks", corpus())

    query = np.array([4.0, 1.0, 0.0, 0.0])  # not unit length: cosine must not care
    unit = query / np.linalg.norm(query)

    hits = vector_store.search("chunks", query, limit=3)

    assert [hit.point_id for hit in hits] == ["chunk-a", "chunk-b", "chunk-c"]
    assert [hit.score for hit in hits] == pytest.approx([unit[0], 0.8 * unit[0] + 0.6 * unit[1], unit[1]], abs=SCORE_TOLERANCE)
    assert hits[0].payload == {"doc_ids": ["doc-1"], "kind": "chunk", "text": "alpha"}
    # Without payloads: the same ids and scores, and nothing else.
    bare = vector_store.search("chunks", query, limit=3, with_payload=False)
    assert [(hit.point_id, hit.score) for hit in bare] == [(hit.point_id, hit.score) for hit in hits]
    assert [hit.payload for hit in bare] == [{}, {}, {}]


def test_numpy_vectors_are_accepted_for_points_and_queries(vector_store: VectorStore) -> None:
    vector_store.ensure_collection("chunks", DIM)
    vector_store.upsert("chunks", [VectorPoint("p", np.array([0.0, 3.0, 4.0, 0.0], dtype=np.float64), {"doc_ids": []})])

    hits = vector_store.search("chunks", np.array([0.0, 0.0, 1.0, 0.0], dtype=np.float32), limit=1)

    assert hits[0].point_id == "p"
    assert hits[0].score == pytest.approx(0.8, abs=SCORE_TOLERANCE)


def test_upserting_the_same_ids_again_replaces_instead_of_duplicating(vector_store: VectorStore) -> None:
    vector_store.ensure_collection("chunks", DIM)
    vector_store.upsert("chunks", corpus())
    vector_store.upsert("chunks", [point("chunk-a", [0.0, 1.0, 0.0, 0.0], ["doc-9"], kind="chunk", text="new")])
    vector_store.upsert("chunks", corpus()[1:])

    assert vector_store.count("chunks") == 5
    hits = vector_store.search("chunks", [0.0, 1.0, 0.0, 0.0], limit=2)
    assert {hit.point_id for hit in hits} == {"chunk-a", "chunk-c"}
    updated = next(hit for hit in hits if hit.point_id == "chunk-a")
    assert updated.payload == {"doc_ids": ["doc-9"], "kind": "chunk", "text": "new"}
    assert updated.score == pytest.approx(1.0, abs=SCORE_TOLERANCE)


def test_upserting_the_same_points_twice_leaves_identical_counts_and_results(vector_store: VectorStore) -> None:
    """Idempotency: a re-run of a materialization writes the same content-derived ids and changes nothing."""
    vector_store.ensure_collection("chunks", DIM)
    vector_store.upsert("chunks", corpus())
    first_ids, first_count = vector_store.point_ids("chunks"), vector_store.count("chunks")
    first_hits = vector_store.search("chunks", [1.0, 0.5, 0.2, 0.1], limit=5)

    vector_store.ensure_collection("chunks", DIM)
    vector_store.upsert("chunks", corpus())
    vector_store.publish()

    assert first_count == vector_store.count("chunks") == 5
    assert first_ids == vector_store.point_ids("chunks") == {item.point_id for item in corpus()}
    second_hits = vector_store.search("chunks", [1.0, 0.5, 0.2, 0.1], limit=5)
    assert [(hit.point_id, hit.payload) for hit in second_hits] == [(hit.point_id, hit.payload) for hit in first_hits]
    assert [hit.score for hit in second_hits] == pytest.approx([hit.score for hit in first_hits], abs=1e-6)


def test_delete_removes_only_the_given_points(vector_store: VectorStore) -> None:
    vector_store.ensure_collection("chunks", DIM)
    vector_store.upsert("chunks", corpus())

    vector_store.delete("chunks", ["chunk-a", "ent-y", "never-existed"])

    assert vector_store.point_ids("chunks") == {"chunk-b", "chunk-c", "ent-x"}
    assert vector_store.search("chunks", [1.0, 0.0, 0.0, 0.0], limit=1)[0].point_id == "chunk-b"


def test_delete_by_document_removes_every_point_listing_the_document(vector_store: VectorStore) -> None:
    """A point is removed when doc_id is anywhere in its doc_ids, even if other documents are listed too."""
    vector_store.ensure_collection("chunks", DIM)
    vector_store.upsert("chunks", corpus())

    vector_store.delete_by_document("chunks", "doc-2")

    assert vector_store.point_ids("chunks") == {"chunk-a", "chunk-b", "ent-y"}
    vector_store.delete_by_document("chunks", "doc-unknown")
    assert vector_store.count("chunks") == 3


def test_must_match_filters_on_keyword_equality_and_list_membership(vector_store: VectorStore) -> None:
    vector_store.ensure_collection("chunks", DIM)
    vector_store.upsert("chunks", corpus())
    query = [1.0, 0.0, 0.0, 0.0]

    entities = vector_store.search("chunks", query, limit=10, must_match={"kind": "entity"})
    of_doc_2 = vector_store.search("chunks", query, limit=10, must_match={"doc_ids": "doc-2"})
    both = vector_store.search("chunks", query, limit=10, must_match={"kind": "chunk", "doc_ids": "doc-2"})
    none = vector_store.search("chunks", query, limit=10, must_match={"kind": "community"})

    assert {hit.point_id for hit in entities} == {"ent-x", "ent-y"}
    assert {hit.point_id for hit in of_doc_2} == {"chunk-c", "ent-x"}
    assert [hit.point_id for hit in both] == ["chunk-c"]
    assert none == []


def test_limit_caps_the_number_of_hits(vector_store: VectorStore) -> None:
    vector_store.ensure_collection("chunks", DIM)
    vector_store.upsert("chunks", corpus())

    assert len(vector_store.search("chunks", [1.0, 1.0, 1.0, 1.0], limit=2)) == 2
    assert len(vector_store.search("chunks", [1.0, 1.0, 1.0, 1.0], limit=50)) == 5


def test_new_collection_is_empty_and_ensure_collection_is_idempotent(vector_store: VectorStore) -> None:
    vector_store.ensure_collection("chunks", DIM)
    assert vector_store.count("chunks") == 0
    assert vector_store.point_ids("chunks") == set()
    assert vector_store.search("chunks", [1.0, 0.0, 0.0, 0.0], limit=5) == []

    vector_store.upsert("chunks", corpus())
    vector_store.ensure_collection("chunks", DIM)

    assert vector_store.count("chunks") == 5


def test_collections_are_independent(vector_store: VectorStore) -> None:
    assert "entities" not in vector_store.collections()
    vector_store.ensure_collection("chunks", DIM)
    vector_store.ensure_collection("entities", 2)
    vector_store.upsert("chunks", corpus())
    vector_store.upsert("entities", [point("chunk-a", [0.0, 1.0], ["doc-1"])])
    assert {"chunks", "entities"} <= set(vector_store.collections())

    vector_store.delete_by_document("entities", "doc-1")

    assert vector_store.count("entities") == 0
    assert vector_store.count("chunks") == 5
    assert "chunk-a" in vector_store.point_ids("chunks")


def test_point_ids_lists_every_point_past_one_scroll_page(vector_store: VectorStore) -> None:
    rng = np.random.default_rng(7)
    ids = [f"chunk-{i}" for i in range(2_345)]  # more than one upsert batch and one scroll page
    vector_store.ensure_collection("chunks", DIM)
    vector_store.upsert("chunks", [VectorPoint(i, rng.random(DIM) + 0.01, {"doc_ids": ["d"]}) for i in ids])

    assert vector_store.point_ids("chunks") == set(ids)
    assert vector_store.count("chunks") == len(ids)


def test_vectors_returns_the_stored_vector_of_each_existing_point_past_one_batch(vector_store: VectorStore) -> None:
    rng = np.random.default_rng(11)
    stored = {f"chunk-{i}": rng.random(DIM).astype(np.float32) + 0.01 for i in range(1_234)}
    vector_store.ensure_collection("chunks", DIM)
    vector_store.upsert("chunks", [VectorPoint(i, v, {"doc_ids": ["d"]}) for i, v in stored.items()])
    asked = [*stored, "chunk-missing"]

    found = vector_store.vectors("chunks", asked)

    assert set(found) == set(stored)
    for point_id, vector in stored.items():  # cosine collections keep the unit vector
        np.testing.assert_allclose(found[point_id], vector / np.linalg.norm(vector), atol=SCORE_TOLERANCE)
    assert vector_store.vectors("chunks", []) == {}


def test_bad_vectors_are_rejected_with_a_clear_error(vector_store: VectorStore) -> None:
    vector_store.ensure_collection("chunks", DIM)

    with pytest.raises(ValueError, match="dimension"):
        vector_store.upsert("chunks", [point("short", [1.0, 0.0], ["doc-1"])])
    with pytest.raises(ValueError, match="NaN"):
        vector_store.upsert("chunks", [point("nan", [1.0, float("nan"), 0.0, 0.0], ["doc-1"])])
    with pytest.raises(ValueError, match="dimension"):
        vector_store.search("chunks", [1.0, 0.0, 0.0], limit=1)
    with pytest.raises(ValueError, match="dimension"):
        vector_store.ensure_collection("chunks", DIM + 1)
    # A batch is checked as a whole; the error still names the one bad point, and nothing of the batch is written.
    good = [point(f"good-{i}", [1.0, float(i), 0.0, 0.0], ["doc-1"]) for i in range(3)]
    for bad, message in ((point("short", [1.0, 0.0], ["doc-1"]), "expected a vector of dimension"),
                         (point("inf", [1.0, float("inf"), 0.0, 0.0], ["doc-1"]), "vector contains NaN or infinity"),
                         (point("zero", [0.0] * DIM, ["doc-1"]), "the zero vector")):
        with pytest.raises(ValueError, match=f"point '{bad.point_id}': {message}"):
            vector_store.upsert("chunks", [*good[:2], bad, good[2]])
    assert vector_store.count("chunks") == 0


def test_unknown_collection_raises_key_error(vector_store: VectorStore) -> None:
    with pytest.raises(KeyError):
        vector_store.count("missing")
    with pytest.raises(KeyError):
        vector_store.upsert("missing", corpus())


def test_writes_in_a_session_are_read_back_inside_and_after_it(vector_store: VectorStore) -> None:
    vector_store.ensure_collection("chunks", DIM)
    with vector_store.session("chunks"):
        vector_store.upsert("chunks", corpus()[:3])
        vector_store.delete("chunks", ["chunk-b"])
        assert vector_store.point_ids("chunks") == {"chunk-a", "chunk-c"}
        vector_store.upsert("chunks", corpus()[3:])
    assert vector_store.point_ids("chunks") == {"chunk-a", "chunk-c", "ent-x", "ent-y"}
    assert vector_store.search("chunks", [0.0, 0.0, 1.0, 0.0], limit=1)[0].point_id == "ent-x"
    with pytest.raises(KeyError):
        with vector_store.session("missing"):
            pass


# -- Edge store: sessions, processes, publishing, readers ----------------------------------------------------------


def edge_store(tmp_path: Path) -> EdgeVectorStore:
    store = EdgeVectorStore(tmp_path / "vectors")
    store.ensure_collection("chunks", DIM)
    return store


def run_in_subprocess(script: str, *args: str) -> dict:
    """Runs a script in a fresh interpreter (a real second process, as a Dagster step or an agent would be)."""
    project_root = Path(graphrag_pipeline.__file__).resolve().parent.parent
    python_path = os.pathsep.join(filter(None, [str(project_root), os.environ.get("PYTHONPATH")]))
    completed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": python_path},
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_reserved_payload_key_is_rejected(tmp_path: Path) -> None:
    store = edge_store(tmp_path)
    with pytest.raises(ValueError, match="reserved"):
        store.upsert("chunks", [VectorPoint("p", (1.0, 0.0, 0.0, 0.0), {"_id": "other"})])


def test_session_batches_operations_and_persists_them(tmp_path: Path) -> None:
    store = edge_store(tmp_path)
    with store.session("chunks"):
        for item in corpus():
            store.upsert("chunks", [item])
        store.delete("chunks", ["chunk-c"])
        assert store.count("chunks") == 4
        with pytest.raises(RuntimeError, match="already open"):
            with store.session("chunks"):
                pass

    assert EdgeVectorStore(tmp_path / "vectors").point_ids("chunks") == {"chunk-a", "chunk-b", "ent-x", "ent-y"}


def test_writers_in_other_processes_take_turns_on_the_same_collection(tmp_path: Path) -> None:
    store = edge_store(tmp_path)
    store.upsert("chunks", corpus())
    writer = """
        import sys, json
        from graphrag_pipeline.lib.core.models import VectorPoint
        from graphrag_pipeline.lib.stores.edge_vectors import EdgeVectorStore
        store = EdgeVectorStore(sys.argv[1])
        for i in range(20):
            store.upsert("chunks", [VectorPoint(f"{sys.argv[2]}-{i}", (1.0, i + 1.0, 0.0, 0.0), {"doc_ids": []})])
        print(json.dumps({"count": store.count("chunks")}))
    """
    root = str(tmp_path / "vectors")
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda tag: run_in_subprocess(writer, root, tag), ["p1", "p2"]))

    assert all(result["count"] >= 25 for result in results)
    assert store.count("chunks") == 45


def test_reader_sees_the_published_version_while_the_writer_goes_on(tmp_path: Path) -> None:
    store = edge_store(tmp_path)
    store.upsert("chunks", corpus())
    version = store.publish()

    with EdgeVectorReader(tmp_path / "vectors", scratch_dir=tmp_path) as reader:
        store.upsert("chunks", [point("chunk-late", [1.0, 0.0, 0.0, 0.0], ["doc-4"])])
        store.delete_by_document("chunks", "doc-1")

        assert reader.version == version
        assert reader.collections() == ["chunks"]
        assert reader.count("chunks") == 5
        assert reader.point_ids("chunks") == {hit.point_id for hit in corpus()}
        hits = reader.search("chunks", [1.0, 0.0, 0.0, 0.0], limit=2, must_match={"doc_ids": "doc-1"})
        assert [hit.point_id for hit in hits] == ["chunk-a", "chunk-b"]
        assert hits[0].payload == {"doc_ids": ["doc-1"], "kind": "chunk", "text": "alpha"}
        bare = reader.search("chunks", [1.0, 0.0, 0.0, 0.0], limit=2, must_match={"doc_ids": "doc-1"}, with_payload=False)
        assert [(hit.point_id, hit.payload) for hit in bare] == [("chunk-a", {}), ("chunk-b", {})]
        with pytest.raises(CollectionNotFoundError):
            reader.count("entities")
        assert not hasattr(reader, "upsert")

    assert store.point_ids("chunks") == {"chunk-c", "ent-y", "chunk-late"}
    next_version = store.publish()
    with EdgeVectorReader(tmp_path / "vectors") as reader:
        assert reader.version == next_version != version
        assert reader.point_ids("chunks") == {"chunk-c", "ent-y", "chunk-late"}


def test_reader_copy_is_removed_on_close_and_closed_reader_refuses_queries(tmp_path: Path) -> None:
    store = edge_store(tmp_path)
    store.publish()
    scratch = tmp_path / "scratch"
    scratch.mkdir()

    reader = EdgeVectorReader(tmp_path / "vectors", scratch_dir=scratch)
    assert any(scratch.iterdir())
    reader.close()

    assert not any(scratch.iterdir())
    with pytest.raises(RuntimeError, match="closed"):
        reader.count("chunks")


def test_reader_without_a_published_version_fails_clearly(tmp_path: Path) -> None:
    edge_store(tmp_path)
    with pytest.raises(FileNotFoundError, match="published"):
        EdgeVectorReader(tmp_path / "vectors", scratch_dir=tmp_path)
    assert [entry.name for entry in tmp_path.iterdir()] == ["vectors"]  # its scratch copy is gone too


def published_versions(root: Path) -> list[str]:
    return sorted(entry.name for entry in (root / "published").iterdir() if entry.name.startswith("v"))


def test_publish_keeps_only_the_current_version(tmp_path: Path) -> None:
    store = edge_store(tmp_path)
    versions = [store.publish(optimize=False) for _ in range(3)]

    published = tmp_path / "vectors" / "published"
    assert versions == ["v000001", "v000002", "v000003"]
    assert published_versions(tmp_path / "vectors") == ["v000003"]
    assert (published / "CURRENT").read_text().strip() == "v000003"


def test_previous_version_is_kept_exactly_while_a_reader_may_be_copying_it(tmp_path: Path) -> None:
    """A reader copies under a shared read.lock; the publisher must not switch or delete until it is released."""
    store = edge_store(tmp_path)
    store.upsert("chunks", corpus())
    root = tmp_path / "vectors"
    store.publish(optimize=False)

    lock_fd = os.open(root / "published" / "read.lock", os.O_RDWR)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_SH)  # what a reader holds while copying v000001
        with ThreadPoolExecutor(max_workers=1) as pool:
            publishing = pool.submit(store.publish, False)
            # The new version is renamed into place before the publisher waits for the exclusive lock.
            deadline = time.monotonic() + 60
            while published_versions(root) != ["v000001", "v000002"] and time.monotonic() < deadline:
                time.sleep(0.01)
            assert published_versions(root) == ["v000001", "v000002"]
            assert (root / "published" / "CURRENT").read_text().strip() == "v000001"
            assert not publishing.done()
            fcntl.flock(lock_fd, fcntl.LOCK_UN)  # the reader has finished copying
            assert publishing.result(timeout=60) == "v000002"
    finally:
        os.close(lock_fd)

    assert published_versions(root) == ["v000002"]
    with EdgeVectorReader(root, scratch_dir=tmp_path) as reader:
        assert reader.version == "v000002"
        assert reader.count("chunks") == 5


def allocated_and_apparent_bytes(directory: Path) -> tuple[int, int]:
    stats = [path.stat() for path in directory.rglob("*") if path.is_file()]
    return sum(stat.st_blocks * 512 for stat in stats), sum(stat.st_size for stat in stats)


def same_files(left: Path, right: Path) -> bool:
    left_files = sorted(path.relative_to(left) for path in left.rglob("*") if path.is_file())
    right_files = sorted(path.relative_to(right) for path in right.rglob("*") if path.is_file())
    return left_files == right_files and all(filecmp.cmp(left / f, right / f, shallow=False) for f in left_files)


def test_published_version_and_reader_copy_keep_the_shard_files_sparse(tmp_path: Path) -> None:
    """Edge preallocates tens of MB per file; copies must not turn those holes into allocated blocks."""
    store = edge_store(tmp_path)
    store.upsert("chunks", corpus()[:3])
    version = store.publish()
    published = tmp_path / "vectors" / "published" / version
    working = tmp_path / "vectors" / "collections" / "chunks" / "shard"
    assert not working.exists()  # stored once at rest: the version is the only copy
    # The next operation but a count copies the working shard back from it.
    assert store.point_ids("chunks") == {"chunk-a", "chunk-b", "chunk-c"}
    # The copy leaves out the version's count of its points, which a write would make wrong.
    assert (published / "chunks" / "point-count").read_text() == "3" and not (working / "point-count").exists()
    (published / "chunks" / "point-count").rename(tmp_path / "point-count")
    assert same_files(working, published / "chunks")
    (tmp_path / "point-count").rename(published / "chunks" / "point-count")

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with EdgeVectorReader(tmp_path / "vectors", scratch_dir=scratch) as reader:
        assert reader.count("chunks") == 3
        copies = {"published": published, "reader": next(scratch.iterdir())}
        for name, directory in copies.items():
            allocated, apparent = allocated_and_apparent_bytes(directory)
            assert apparent > 50 * 2**20, name  # Edge's preallocation: otherwise this test proves nothing
            assert allocated * 20 < apparent, (name, allocated, apparent)


def test_a_collection_unwritten_since_the_publish_is_counted_from_its_version_without_being_copied_back(
        tmp_path: Path) -> None:
    store = edge_store(tmp_path)
    store.upsert("chunks", corpus()[:3])
    store.publish()
    working = tmp_path / "vectors" / "collections" / "chunks" / "shard"

    assert store.count("chunks") == 3
    assert not working.exists()  # counted from the version's file: nothing copied back, nothing loaded

    store.upsert("chunks", corpus()[3:5])  # a working shard again: counted by loading it, as it changes
    assert store.count("chunks") == 5
    store.delete("chunks", ["chunk-a"])
    assert store.count("chunks") == 4
    version = store.publish()
    assert store.count("chunks") == 4 and not working.exists()

    store.ensure_collection("entities", DIM)
    store.upsert("entities", corpus()[:1])
    store.publish()  # chunks unwritten since the last version: linked into the new one, their count with them
    assert store.count("chunks") == 4 and not working.exists()
    assert store.count("entities") == 1

    # A version published before the counts were kept has none: the collection is copied back and loaded.
    (tmp_path / "vectors" / "published" / _current(tmp_path) / "chunks" / "point-count").unlink()
    assert store.count("chunks") == 4 and working.exists()
    assert version != _current(tmp_path)


def _current(tmp_path: Path) -> str:
    return (tmp_path / "vectors" / "published" / "CURRENT").read_text().strip()


def test_sparse_copy_is_identical_and_skips_holes_and_written_zero_blocks(tmp_path: Path) -> None:
    mib = 2**20
    source = tmp_path / "source.bin"
    with open(source, "wb") as handle:
        handle.write(b"a" * mib)
        handle.write(bytes(4 * mib))  # zeros written out, so allocated in the source
        handle.write(b"b" * 100)
        handle.truncate(16 * mib)  # a trailing hole
    source.chmod(0o640)
    target = tmp_path / "target.bin"

    _copy_sparse(str(source), str(target))

    assert filecmp.cmp(source, target, shallow=False)
    assert target.stat().st_size == 16 * mib
    assert target.stat().st_blocks * 512 < 2 * mib < source.stat().st_blocks * 512
    assert target.stat().st_mode == source.stat().st_mode


def test_readers_in_two_processes_open_the_same_version_at_once(tmp_path: Path) -> None:
    store = edge_store(tmp_path)
    store.upsert("chunks", corpus())
    store.publish()
    other_reader = """
        import sys, json
        from graphrag_pipeline.lib.stores.edge_vectors import EdgeVectorReader
        with EdgeVectorReader(sys.argv[1]) as reader:
            hits = reader.search("chunks", [0.0, 0.0, 1.0, 0.0], limit=1)
            print(json.dumps({"count": reader.count("chunks"), "top": hits[0].point_id}))
    """

    with EdgeVectorReader(tmp_path / "vectors", scratch_dir=tmp_path) as reader:
        result = run_in_subprocess(other_reader, str(tmp_path / "vectors"))
        store.upsert("chunks", [point("chunk-late", [0.0, 0.0, 1.0, 0.0], ["doc-4"])])  # the writer is not blocked
        assert reader.count("chunks") == 5

    assert result == {"count": 5, "top": "ent-x"}


def test_reader_answers_concurrent_searches_from_many_threads(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((500, DIM)).astype(np.float32)
    store = edge_store(tmp_path)
    store.upsert("chunks", [VectorPoint(f"p{i}", v, {"doc_ids": [f"d{i % 5}"]}) for i, v in enumerate(vectors)])
    store.publish()

    with EdgeVectorReader(tmp_path / "vectors", scratch_dir=tmp_path) as reader:

        def top_hit(i: int) -> str:
            return reader.search("chunks", vectors[i], limit=1, must_match={"doc_ids": f"d{i % 5}"})[0].point_id

        with ThreadPoolExecutor(max_workers=8) as pool:
            tops = list(pool.map(top_hit, range(len(vectors))))

    assert tops == [f"p{i}" for i in range(len(vectors))]


def test_each_collection_is_stored_once_at_rest_and_writes_after_a_publish_keep_every_point(tmp_path: Path) -> None:
    store = edge_store(tmp_path)
    points = corpus()
    store.upsert("chunks", points[:3])
    store.ensure_collection("entities", DIM)
    store.upsert("entities", points[3:4])
    store.publish()
    collections = tmp_path / "vectors" / "collections"
    assert sorted(p.name for p in collections.glob("*/shard")) == []
    assert store.collections() == ["chunks", "entities"] and store.dimension("entities") == DIM

    first = tmp_path / "vectors" / "published" / published_versions(tmp_path / "vectors")[0]
    entities_file, chunks_file = ((first / name / "edge_config.json").stat().st_ino for name in ("entities", "chunks"))
    store.upsert("chunks", points[4:5])  # restores the chunks shard only, then writes on top of it
    assert sorted(p.parent.name for p in collections.glob("*/shard")) == ["chunks"]
    assert store.point_ids("chunks") == {p.point_id for p in [*points[:3], points[4]]}
    assert store.count("entities") == 1  # a read restores the entities shard too, but writes nothing
    version = store.publish()
    published = tmp_path / "vectors" / "published" / version
    assert (published / "entities" / "edge_config.json").stat().st_ino == entities_file  # linked, not copied again
    assert (published / "chunks" / "edge_config.json").stat().st_ino != chunks_file  # written: a new copy
    assert sorted(p.name for p in collections.glob("*/shard")) == []
    with EdgeVectorReader(tmp_path / "vectors", scratch_dir=tmp_path) as reader:
        assert reader.version == version
        assert reader.point_ids("chunks") == {p.point_id for p in [*points[:3], points[4]]}
        assert reader.point_ids("entities") == {points[3].point_id}  # carried over unchanged, by hard links
    assert published_versions(tmp_path / "vectors") == [version]


def test_new_shards_have_no_write_ahead_log_and_a_writer_killed_after_upsert_loses_nothing(tmp_path: Path) -> None:
    store = edge_store(tmp_path)
    shard_dir = tmp_path / "vectors" / "collections" / "chunks" / "shard"
    assert not (shard_dir / "wal").exists()
    assert json.loads((shard_dir / "edge_config.json").read_text())["vectors"][VECTOR_NAME]["datatype"] == "float16"
    killed_writer = """
        import json, os, sys
        from graphrag_pipeline.lib.core.models import VectorPoint
        from graphrag_pipeline.lib.stores.edge_vectors import EdgeVectorStore
        store = EdgeVectorStore(sys.argv[1])
        store.upsert("chunks", [VectorPoint(f"k-{i}", (1.0, i + 1.0, 0.0, 0.0), {"doc_ids": []}) for i in range(50)])
        store.delete("chunks", ["k-7"])
        print(json.dumps({"written": 50}), flush=True)
        os._exit(0)  # killed: nothing closes the store or the shard
    """
    assert run_in_subprocess(killed_writer, str(tmp_path / "vectors")) == {"written": 50}

    assert store.point_ids("chunks") == {f"k-{i}" for i in range(50)} - {"k-7"}
    store.publish()
    with EdgeVectorReader(tmp_path / "vectors", scratch_dir=tmp_path) as reader:
        assert not list((tmp_path / "vectors" / "published").glob("*/chunks/wal"))
        assert reader.point_ids("chunks") == {f"k-{i}" for i in range(50)} - {"k-7"}
        last = np.array([1.0, 50.0, 0.0, 0.0])
        np.testing.assert_allclose(reader.vectors("chunks", ["k-49"])["k-49"], last / np.linalg.norm(last),
                                   atol=SCORE_TOLERANCE)


def test_ensure_collection_opens_no_shard_whose_own_file_lists_its_indexed_fields(tmp_path: Path, monkeypatch) -> None:
    store = edge_store(tmp_path)
    store.upsert("chunks", corpus())
    store.publish()  # the working shard is retired: the collection is in the published version alone
    loads = []

    class CountingShard:
        create = staticmethod(EdgeShard.create)

        @staticmethod
        def load(*args):
            loads.append(args)
            return EdgeShard.load(*args)

    monkeypatch.setattr(edge_vectors, "EdgeShard", CountingShard)
    again = EdgeVectorStore(tmp_path / "vectors")
    again.ensure_collection("chunks", DIM)
    assert loads == []
    with pytest.raises(ValueError, match="dimension"):
        again.ensure_collection("chunks", DIM + 1)

    wider = EdgeVectorStore(tmp_path / "vectors", keyword_fields=("doc_ids", "kind"))
    wider.ensure_collection("chunks", DIM)  # a field the file does not list: the shard is opened and indexed
    wider.ensure_collection("chunks", DIM)
    assert len(loads) == 1
    assert [h.point_id for h in wider.search("chunks", [0.0, 0.0, 1.0, 0.0], 5, must_match={"kind": "entity"})] == [
        "ent-x", "ent-y"]


def test_a_writer_killed_inside_a_session_leaves_each_point_as_it_was_or_as_written(tmp_path: Path) -> None:
    """A session's writes are durable once it has ended (a stage books them after it): killed inside it, a writer
    may have kept any part of them, but the collection opens, holds no point the writer did not write or find there,
    and takes writes again."""
    store = edge_store(tmp_path)
    before = {f"old-{i}" for i in range(10)}
    store.upsert("chunks", [VectorPoint(pid, (1.0, i + 1.0, 0.0, 0.0), {"doc_ids": []})
                            for i, pid in enumerate(sorted(before))])
    killed_writer = """
        import json, os, sys
        from graphrag_pipeline.lib.core.models import VectorPoint
        from graphrag_pipeline.lib.stores.edge_vectors import EdgeVectorStore
        store = EdgeVectorStore(sys.argv[1])
        with store.session("chunks"):
            for batch in range(5):
                store.upsert("chunks", [VectorPoint(f"k-{batch}-{i}", (1.0, i + 1.0, batch, 0.0), {"doc_ids": []})
                                        for i in range(10)])
            store.delete("chunks", ["old-0"])
            print(json.dumps({"written": 50}), flush=True)
            os._exit(0)  # killed inside the session: nothing ends it, nothing closes the shard
    """
    assert run_in_subprocess(killed_writer, str(tmp_path / "vectors")) == {"written": 50}

    written = {f"k-{b}-{i}" for b in range(5) for i in range(10)}
    reopened = EdgeVectorStore(tmp_path / "vectors")
    assert before - {"old-0"} <= reopened.point_ids("chunks") <= before | written
    reopened.upsert("chunks", [VectorPoint("k-0-0", (0.0, 0.0, 0.0, 1.0), {"doc_ids": []})])
    assert "k-0-0" in reopened.point_ids("chunks")
    assert reopened.search("chunks", [0.0, 0.0, 0.0, 1.0], limit=1)[0].point_id == "k-0-0"


@pytest.mark.parametrize("created_by", ["this version", "an earlier version"])
def test_a_publish_after_deletes_leaves_no_deleted_payload_in_the_published_files(tmp_path: Path, created_by: str) -> None:
    """A deleted point's payload stays in its segment's files until the segment is rebuilt; the publish after a
    delete rebuilds it (an earlier version's shard, created without the vacuum settings, is given them)."""
    if created_by == "an earlier version":
        float16 = EdgeVectorParams(size=DIM, distance=Distance.Cosine, datatype=VectorStorageDatatype.Float16)
        shard_dir = tmp_path / "vectors" / "collections" / "chunks" / "shard"
        EdgeShard.create(str(shard_dir), EdgeConfig(vectors={VECTOR_NAME: float16}, wal_enabled=False)).close()
    store = edge_store(tmp_path)
    store.upsert("chunks", [VectorPoint(f"k-{i}", (1.0, i + 1.0, 0.0, 0.0), {"doc_ids": [f"doc-{i:04d}-marker"]})
                            for i in range(300)])
    store.publish()
    store.delete_by_document("chunks", "doc-0007-marker")
    store.delete("chunks", ["k-8"])
    store.publish()

    published = b"".join(path.read_bytes() for path in (tmp_path / "vectors" / "published").rglob("*")
                         if path.is_file())
    assert b"doc-0007-marker" not in published and b"doc-0008-marker" not in published
    assert b"doc-0009-marker" in published
    with EdgeVectorReader(tmp_path / "vectors", scratch_dir=tmp_path) as reader:
        assert reader.point_ids("chunks") == {f"k-{i}" for i in range(300)} - {"k-7", "k-8"}
        kept = reader.search("chunks", (1.0, 10.0, 0.0, 0.0), limit=5, must_match={"doc_ids": "doc-0009-marker"})
        assert [(hit.point_id, hit.payload) for hit in kept] == [("k-9", {"doc_ids": ["doc-0009-marker"]})]


def test_a_float32_shard_with_a_write_ahead_log_from_an_earlier_version_is_still_written_and_published(
    tmp_path: Path,
) -> None:
    shard_dir = tmp_path / "vectors" / "collections" / "chunks" / "shard"
    with_wal = EdgeConfig(vectors={VECTOR_NAME: EdgeVectorParams(size=DIM, distance=Distance.Cosine)})
    EdgeShard.create(str(shard_dir), with_wal).close()
    assert (shard_dir / "wal").is_dir()
    store = edge_store(tmp_path)
    points = corpus()
    store.upsert("chunks", points)
    store.delete("chunks", [points[0].point_id])
    store.publish()
    store.upsert("chunks", [points[0]])  # restored from the published copy, WAL and all, then written again

    assert store.point_ids("chunks") == {p.point_id for p in points}
    ent_y = store.vectors("chunks", ["ent-y"])["ent-y"]  # (0, 0, 0.6, 0.8): float16 would round 0.6 by 1e-4
    np.testing.assert_array_equal(ent_y, np.array([0.0, 0.0, 0.6, 0.8], dtype=np.float32))
