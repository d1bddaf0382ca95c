"""Issue 16, the sources' part: nothing is read from outside a source's folder, access fails closed, and size limits
quarantine instead of exhausting the machine. Every test builds real files (links, FIFOs, broken front matter) in a
temporary folder and reads them through the real readers and stages."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from graphrag_pipeline.evaluation import eval_settings
from graphrag_pipeline.lib.algorithms.chunking import TOKENIZE_WINDOW, ChunkLimitExceeded, WordTokenizer, chunk_document
from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core.config import (
    CatalogSource,
    ConfluenceSource,
    EvalSetSource,
    FolderSource,
    load_settings,
)
from graphrag_pipeline.lib.core.ids import content_hash
from graphrag_pipeline.lib.core.models import Document
from graphrag_pipeline.lib.sources.registry import read_source, scan_hashes
from graphrag_pipeline.lib.stages import all_shards, chunk_documents, ingest_documents
from graphrag_pipeline_tests.confluence_server import ConfluenceServer
from graphrag_pipeline_tests.unit.query.test_retrieval_mechanisms import HashedEmbedder

SECRET = "root:x:0:0:the host's password file"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def documents(scan) -> dict[str, Document]:
    return {document.doc_id: document for document in scan.documents}


def reasons(scan) -> dict[str, str]:
    return {record.item_id: record.reason for record in scan.quarantined}


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder next to the source's: what a link out of the source reaches (``/etc`` in the issue)."""
    write(tmp_path / "outside" / "passwd.md", SECRET)
    write(tmp_path / "outside" / "more" / "shadow.md", SECRET)
    write(tmp_path / "outside" / "catalog.yaml", "services:\n  - name: host-secrets\n    description: " + SECRET)
    return tmp_path / "outside"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    write(tmp_path / "docs" / "runbook.md", "# Runbook\n\nRestart payments-api.\n")
    return tmp_path / "docs"


def test_links_out_of_a_folder_are_refused_with_the_link_and_its_target_and_the_scan_agrees(root, outside):
    (root / "passwd.md").symlink_to(outside / "passwd.md")
    (root / "etc").symlink_to(outside, target_is_directory=True)
    for follow in ({}, {"follow_symlinks": True}):  # following links never leaves the folder
        source = FolderSource(name="docs", path=str(root), **follow)

        scan = read_source(source)

        assert set(documents(scan)) == {"docs:runbook.md"}
        assert not any(SECRET in document.text for document in scan.documents)
        why = reasons(scan)
        assert why["docs:passwd.md"].startswith("symbolic link out of the source folder: passwd.md points to "
                                                f"{(outside / 'passwd.md').resolve()}")
        assert why["docs:etc"].startswith(f"symbolic link out of the source folder: etc points to {outside.resolve()}")
        assert scan.withdrawn == {"docs:passwd.md", "docs:etc"}
        assert scan_hashes(source) == scan.hashes  # the sensor's cheap scan sees what the read sees


def test_links_inside_a_folder_are_read_only_with_follow_symlinks_and_loops_are_cut(root):
    write(root / "shared" / "escalation.md", "# Escalation\n\nPage the on-call.\n")
    (root / "latest.md").symlink_to(root / "runbook.md")
    (root / "alias").symlink_to(root / "shared", target_is_directory=True)
    (root / "shared" / "back").symlink_to(root, target_is_directory=True)  # a loop

    default = read_source(FolderSource(name="docs", path=str(root)))
    assert set(documents(default)) == {"docs:runbook.md", "docs:shared/escalation.md"}
    assert reasons(default)["docs:latest.md"].startswith("symbolic link not followed: latest.md points to ")
    assert "follow_symlinks: true" in reasons(default)["docs:alias"]

    source = FolderSource(name="docs", path=str(root), follow_symlinks=True)
    followed = read_source(source)
    assert set(documents(followed)) == {"docs:runbook.md", "docs:latest.md", "docs:shared/escalation.md",
                                        "docs:alias/escalation.md"}
    assert documents(followed)["docs:latest.md"].text == documents(followed)["docs:runbook.md"].text
    loop_reasons = {item: reason for item, reason in reasons(followed).items() if "loop" in reason}
    assert set(loop_reasons) == {"docs:shared/back", "docs:alias/back"}
    assert scan_hashes(source) == followed.hashes


def test_a_pipe_named_like_a_document_is_refused_instead_of_blocking_the_read(root):
    os.mkfifo(root / "stream.md")

    scan = read_source(FolderSource(name="docs", path=str(root)))

    assert set(documents(scan)) == {"docs:runbook.md"}
    assert reasons(scan)["docs:stream.md"].startswith("not a regular file: stream.md")


def test_catalog_files_linked_from_outside_are_refused(tmp_path, outside):
    write(tmp_path / "catalog" / "services.yaml", "services:\n  - name: checkout\n    depends_on: [cart]\n")
    (tmp_path / "catalog" / "host.yaml").symlink_to(outside / "catalog.yaml")
    source = CatalogSource(name="cat", path=str(tmp_path / "catalog"))

    scan = read_source(source)

    assert not any("host-secrets" in doc_id or SECRET in d.text for doc_id, d in documents(scan).items())
    assert any(doc_id.endswith("/checkout") for doc_id in documents(scan))
    assert reasons(scan)["cat:host.yaml"].startswith("symbolic link out of the source folder: host.yaml points to ")
    assert scan_hashes(source) == scan.hashes


def test_an_eval_set_whose_corpus_links_outside_holds_no_passages(tmp_path, outside):
    write(outside / "corpus.jsonl", json.dumps({"id": "p1", "title": "Host", "text": SECRET}) + "\n")
    (tmp_path / "set").mkdir()
    (tmp_path / "set" / "corpus.jsonl").symlink_to(outside / "corpus.jsonl")

    scan = read_source(EvalSetSource(name="bench", path=str(tmp_path / "set")))

    assert scan.documents == ()
    assert reasons(scan)["bench:corpus.jsonl"].startswith("symbolic link out of the source folder: corpus.jsonl ")


def test_a_file_that_became_a_link_out_is_withdrawn_from_the_index(tmp_path, root, outside):
    # An index built before links were checked holds the host file; the next read must take it out, not keep the
    # "last good version" as it does for a file that merely failed to read.
    write(root / "notes.md", "# Notes\n\nharmless\n")
    settings = load_settings(index_dir=str(tmp_path / "index"), shard_count=4,
                             sources=[{"name": "docs", "kind": "folder", "path": str(root)}])
    with Workspace(settings) as ws:
        ingest_documents(ws, all_shards(ws))
        assert set(ws.state.document_hashes(source="docs")) == {"docs:runbook.md", "docs:notes.md"}
        (root / "notes.md").unlink()
        (root / "notes.md").symlink_to(outside / "passwd.md")

        report = ingest_documents(ws, all_shards(ws))

        assert set(ws.state.document_hashes(source="docs")) == {"docs:runbook.md"}
        assert report.counts["deleted"] == 1
        assert [q.item_id for q in ws.state.quarantined("sources")] == ["docs:notes.md"]


# ---------------------------------------------------------------------------------------------- access fails closed


def test_broken_front_matter_that_may_restrict_a_file_keeps_it_out_of_the_index(root):
    write(root / "launch.md", "---\naccess_groups: [secret-team\n---\n# Launch\n\nThe launch code is 0000.\n")

    scan = read_source(FolderSource(name="docs", path=str(root)))

    assert "docs:launch.md" not in documents(scan)
    assert reasons(scan)["docs:launch.md"].startswith("invalid YAML front matter, not indexed")
    assert "docs:launch.md" in scan.withdrawn


ALIAS_BOMB = "---\na: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + n)}: &{chr(98 + n)} [{', '.join([f'*{chr(97 + n)}'] * 9)}]\n" for n in range(8)) + "---\n# Bomb\n\nbody\n"


@pytest.mark.parametrize("name", ["launch.md", "launch.txt"])
@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("---\naccess_groups: [secret-team]\n# Launch\n\nThe launch code is 0000.\n", "is never closed"),
        ("---\nAccess_Groups: [secret-team]\n---\n# Launch\n\nThe launch code is 0000.\n",
         "'Access_Groups' is not spelled access_groups"),
        ("---\naccess_groups: [secret-team]\naccess_groups: []\n---\n# Launch\n\nThe launch code is 0000.\n",
         "duplicate key 'access_groups'"),
        (ALIAS_BOMB, "YAML aliases (*a) are not accepted"),
    ],
)
def test_front_matter_is_read_strictly_in_any_text_format(root, name: str, text: str, reason: str):
    """Each of these was indexed as public: an unclosed block, another spelling of the key, a duplicate key whose
    last value wins, and a 500-byte alias bomb that expanded into tens of megabytes of metadata."""
    write(root / name, text)
    started = time.perf_counter()
    scan = read_source(FolderSource(name="docs", path=str(root), extensions=(".md", ".txt")))
    assert time.perf_counter() - started < 60  # a bound on a runaway, not a speed measurement
    assert f"docs:{name}" not in documents(scan)
    assert reason in reasons(scan)[f"docs:{name}"]
    assert f"docs:{name}" in scan.withdrawn


@pytest.mark.parametrize("name", ["launch.md", "launch.txt"])
def test_blank_lines_before_the_front_matter_do_not_hide_it(root, name: str):
    write(root / name, "\n\n---\naccess_groups: [secret-team]\n---\n# Launch\n\nThe launch code is 0000.\n")
    scan = read_source(FolderSource(name="docs", path=str(root), extensions=(".md", ".txt")))
    document = documents(scan)[f"docs:{name}"]
    assert document.metadata["access_groups"] == ["secret-team"] and "access_groups" not in document.text


def test_a_catalog_entry_with_a_yaml_alias_is_quarantined(tmp_path):
    catalog = write(tmp_path / "catalog" / "catalog-info.yaml", (
        "apiVersion: backstage.io/v1alpha1\nkind: Component\nmetadata: {name: bomb, description: &a [x, x, x]}\n"
        "spec: {type: service, lifecycle: [*a, *a, *a]}\n---\n"
        "apiVersion: backstage.io/v1alpha1\nkind: Component\nmetadata: {name: fine}\n"))
    scan = read_source(CatalogSource(name="cat", path=str(catalog.parent)))
    assert [d.doc_id for d in scan.documents] == ["cat:component:default/fine"]
    assert any("YAML aliases (*a) are not accepted" in reason for reason in reasons(scan).values())


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("42", "is a int (42), not a list"),
        ("secret-team", "is a str ('secret-team'), not a list"),
        ("{team: secret}", "is a dict"),
        ("", "is a NoneType"),
        ("[[secret-team]]", "holds [['secret-team']]"),
        ("['']", "holds ['']"),
        ("[secret, 7]", "holds [7]"),
        ("[yes]", "holds [True]"),
    ],
)
def test_a_malformed_access_groups_value_quarantines_the_file(root, value: str, problem: str):
    write(root / "restricted.md", f"---\naccess_groups: {value}\n---\n# Restricted\n\ntext\n")

    scan = read_source(FolderSource(name="docs", path=str(root), access_groups=("sre",)))

    assert "docs:restricted.md" not in documents(scan)
    assert reasons(scan)["docs:restricted.md"].startswith("invalid access_groups: front matter access_groups")
    assert problem in reasons(scan)["docs:restricted.md"]


def test_a_file_can_narrow_its_folders_groups_but_never_widen_them(root):
    write(root / "open.md", "---\naccess_groups: []\n---\nopen to all?\n")
    write(root / "narrow.md", "---\naccess_groups: [sre, payments-oncall]\n---\nnarrower\n")
    write(root / "elsewhere.md", "---\naccess_groups: [marketing]\n---\nother group\n")
    restricted = FolderSource(name="docs", path=str(root), access_groups=("sre", "dba"))
    public = FolderSource(name="pub", path=str(root))

    in_restricted, in_public = read_source(restricted), read_source(public)

    groups = {doc_id: d.metadata.get("access_groups") for doc_id, d in documents(in_restricted).items()}
    assert groups == {"docs:open.md": ["dba", "sre"], "docs:narrow.md": ["sre"], "docs:runbook.md": ["dba", "sre"]}
    assert "share no group with the folder's ['dba', 'sre']" in reasons(in_restricted)["docs:elsewhere.md"]
    groups = {doc_id: d.metadata.get("access_groups") for doc_id, d in documents(in_public).items()}
    assert groups == {"pub:open.md": None, "pub:narrow.md": ["payments-oncall", "sre"],
                      "pub:elsewhere.md": ["marketing"], "pub:runbook.md": None}


def test_a_file_whose_access_groups_break_is_withdrawn_and_its_groups_reach_the_state(tmp_path, root):
    settings = load_settings(index_dir=str(tmp_path / "index"), shard_count=4,
                             sources=[{"name": "docs", "kind": "folder", "path": str(root), "access_groups": ["sre"]}])
    write(root / "db.md", "---\naccess_groups: [sre]\n---\nledger-db failover\n")
    write(root / "wide.md", "---\naccess_groups: []\n---\nstill sre only\n")
    with Workspace(settings) as ws:
        ingest_documents(ws, all_shards(ws))
        assert ws.state.restricted_documents() == {doc: frozenset({"sre"})
                                                   for doc in ("docs:db.md", "docs:wide.md", "docs:runbook.md")}
        write(root / "db.md", "---\naccess_groups: 42\n---\nledger-db failover, with the root password\n")

        ingest_documents(ws, all_shards(ws))

        assert set(ws.state.document_hashes(source="docs")) == {"docs:wide.md", "docs:runbook.md"}
        assert "invalid access_groups" in {q.item_id: q.reason for q in ws.state.quarantined()}["docs:db.md"]


def test_configured_group_names_must_be_exact_non_empty_names():
    for groups in ([""], ["  "], [" sre"]):
        with pytest.raises(ValidationError, match="access_groups may not contain empty names"):
            FolderSource(name="docs", path="/srv/docs", access_groups=groups)
    with pytest.raises(ValidationError):
        FolderSource(name="docs", path="/srv/docs", access_groups=[42])


# ----------------------------------------------------------------------------------------------------------- limits


def test_a_file_over_max_document_bytes_is_quarantined_unread_and_the_read_goes_on(root):
    write(root / "dump.txt", "log line\n" * 2000)
    source = FolderSource(name="docs", path=str(root), max_document_bytes=1000)

    scan = read_source(source)

    assert set(documents(scan)) == {"docs:runbook.md"}
    assert reasons(scan)["docs:dump.txt"] == ("over max_document_bytes: 18000 bytes, more than the source's limit "
                                              "(1000); not read: split the file or raise the limit")
    assert scan.hashes["docs:dump.txt"] == content_hash("log line\n" * 2000)  # a later edit is still seen
    assert scan_hashes(source) == scan.hashes


def test_every_source_kind_is_held_to_max_document_bytes_at_ingest(tmp_path):
    corpus = tmp_path / "set" / "corpus.jsonl"
    write(corpus, "\n".join(json.dumps(record) for record in (
        {"id": "small", "title": "Small", "text": "short passage"},
        {"id": "big", "title": "Big", "text": "x " * 600},
        {"id": "umlauts", "title": "Wide", "text": "ü" * 600},  # 600 characters, 1,200 bytes
    )) + "\n")
    settings = load_settings(index_dir=str(tmp_path / "index"), shard_count=4, sources=[
        {"name": "bench", "kind": "eval_set", "path": str(corpus.parent), "max_document_bytes": 1000}])
    with Workspace(settings) as ws:
        report = ingest_documents(ws, all_shards(ws))

        assert set(ws.state.document_hashes()) == {"bench:small"}
        assert report.counts["quarantined"] == 2
        why = {q.item_id: q.reason for q in ws.state.quarantined()}
        assert why["bench:big"].startswith("over max_document_bytes: 1200 bytes of text")
        assert why["bench:umlauts"].startswith("over max_document_bytes: 1200 bytes of text")


def test_a_document_over_max_chunks_is_quarantined_without_chunks_and_the_run_goes_on(tmp_path, root):
    write(root / "long.md", "# Long\n\n" + " ".join(f"word{i}" for i in range(400)) + "\n")
    settings = load_settings(index_dir=str(tmp_path / "index"), shard_count=4,
                             sources=[{"name": "docs", "kind": "folder", "path": str(root)}],
                             chunking={"size": 32, "overlap": 4, "max_chunks_per_document": 5})
    with Workspace(settings, embedder=HashedEmbedder()) as ws:
        ingest_documents(ws, all_shards(ws))

        report = chunk_documents(ws, all_shards(ws))

        assert {chunk.doc_id for chunk in ws.state.chunks()} == {"docs:runbook.md"}
        assert report.counts["quarantined"] == 1
        reason = {q.item_id: q.reason for q in ws.state.quarantined("chunks")}["docs:long.md"]
        assert reason.startswith("over max_chunks_per_document: ") and reason.endswith("; not indexed")
        assert chunk_documents(ws, all_shards(ws)).counts["documents_rechunked"] == 0  # not retried every run

    raised = settings.with_overrides(chunking={"size": 32, "overlap": 4, "max_chunks_per_document": 50})
    with Workspace(raised, embedder=HashedEmbedder()) as ws:
        chunk_documents(ws, all_shards(ws))
        assert {chunk.doc_id for chunk in ws.state.chunks()} == {"docs:runbook.md", "docs:long.md"}
        assert ws.state.quarantined("chunks") == []


def test_max_chunks_is_refused_before_any_chunk_is_built():
    document = Document("t:a", "t", "", "a", " ".join(["word"] * 1000), "h")
    with pytest.raises(ChunkLimitExceeded, match="over max_chunks_per_document: 1000 tokens need more than 3 chunks"):
        chunk_document(document, size=100, overlap=10, max_chunks_per_document=3)
    assert len(chunk_document(document, size=100, overlap=10, max_chunks_per_document=20)) > 3


class RecordingTokenizer(WordTokenizer):
    """The word tokenizer, remembering how much text each call was given."""

    def __init__(self) -> None:
        self.lengths: list[int] = []

    def encode_offsets(self, text: str) -> list[tuple[int, int]]:
        self.lengths.append(len(text))
        return super().encode_offsets(text)


@pytest.mark.parametrize("line", ["words", "one word"])
def test_a_5mb_single_line_is_tokenized_in_bounded_windows_into_bounded_chunks(line: str):
    # "words": a 5 MB line of words (the 1.3 GB case); "one word": 5 MB without a space (a base64 blob),
    # which the tokenizer calls a single token.
    text = ("lorem ipsum dolor sit amet " * 200_000) if line == "words" else "A" * 5_000_000
    document = Document("t:line", "t", "", "line", text, "h")
    tokenizer = RecordingTokenizer()

    started = time.perf_counter()
    chunks = chunk_document(document, size=256, overlap=32, tokenizer=tokenizer)
    print(f"\n5 MB single line ({line}): {len(chunks)} chunks in {time.perf_counter() - started:.2f} s")

    assert max(tokenizer.lengths) <= TOKENIZE_WINDOW
    assert sum(tokenizer.lengths) == len(text)
    assert all(chunk.token_count <= 256 and len(chunk.text) <= 256 * 100 for chunk in chunks)
    assert chunks[0].start_char == 0 and chunks[-1].end_char == len(text.rstrip())
    assert all(text[chunk.start_char:chunk.end_char] == chunk.text for chunk in chunks[:50])


# ------------------------------------------------------------------------------------------------------- Confluence


def test_a_data_center_restriction_the_server_left_out_quarantines_instead_of_opening(monkeypatch):
    # The Data Center answer carries a page's read restriction inline; one that lacks a principal block (the server
    # did not expand it) said nothing about who may read the page, and must not read as "unrestricted".
    monkeypatch.delenv("CONFLUENCE_USER", raising=False)
    with ConfluenceServer(context="/confluence", flavor="datacenter", token="pat-123") as server:
        monkeypatch.setenv("CONFLUENCE_TOKEN", server.token)
        secret = server.add_page("ENG", "Secret", "<p>The launch code is 0000.</p>", groups=("legal",))
        unexpanded = server.add_page("ENG", "Unexpanded", "<p>Board minutes.</p>", groups=("board",))
        server.add_page("ENG", "Fine", "<p>Public notes.</p>")
        server.corrupt(secret, restrictions={"read": {"restrictions": {"group": None}}})
        server.corrupt(unexpanded, restrictions={"read": {"restrictions": None}})
        source = ConfluenceSource(name="wiki", base_url=server.base_url, spaces=("ENG",), flavor="datacenter")

        scan = read_source(source)

    assert [d.title for d in scan.documents] == ["Fine"]
    why = reasons(scan)
    for page in (secret, unexpanded):
        assert "read restriction lacks restrictions.read.restrictions.user or .group" in why[f"wiki:{page}"]


def test_the_eval_command_refuses_a_catalog_folder_linked_from_outside_its_set(tmp_path, outside):
    set_dir = tmp_path / "set"
    write(set_dir / "corpus.jsonl", json.dumps({"id": "p1", "title": "T", "text": "text"}) + "\n")
    (set_dir / "catalog").symlink_to(outside, target_is_directory=True)

    with pytest.raises(ValueError, match="symbolic link out of the source folder: catalog points to "):
        eval_settings(set_dir, tmp_path / "index", use_extraction=False)
