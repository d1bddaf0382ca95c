from graphrag_pipeline.lib.core.ids import stable_shard
from graphrag_pipeline.lib.index.changes import changed_shards, shard_fingerprints


def test_only_the_shard_of_an_edited_document_changes():
    docs = {f"src:doc-{i}.md": f"hash-{i}" for i in range(200)}
    before = shard_fingerprints(docs, 16)
    edited = dict(docs, **{"src:doc-7.md": "new-hash"})
    after = shard_fingerprints(edited, 16)
    assert changed_shards(after, before) == [stable_shard("src:doc-7.md", 16)]
    assert changed_shards(before, before) == []


def test_deleting_every_document_of_a_shard_is_a_change():
    docs = {"src:a.md": "1", "src:b.md": "2"}
    before = shard_fingerprints(docs, 64)
    after = shard_fingerprints({"src:a.md": "1"}, 64)
    assert changed_shards(after, before) == [stable_shard("src:b.md", 64)]


def test_fingerprints_do_not_depend_on_scan_order():
    docs = {f"s:{i}": str(i) for i in range(50)}
    assert shard_fingerprints(docs, 8) == shard_fingerprints(dict(reversed(list(docs.items()))), 8)
