"""Source readers: folders of md/txt/html files and eval sets, with bad input quarantined rather than lost."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from graphrag_pipeline.lib.core.config import EvalSetSource, FolderSource
from graphrag_pipeline.lib.core.ids import content_hash, stable_shard
from graphrag_pipeline.lib.sources.eval_set import read_eval_set
from graphrag_pipeline.lib.sources.folder import read_folder, scan_folder_hashes
from graphrag_pipeline.lib.sources.html_text import html_to_text
from graphrag_pipeline.lib.sources.paths import has_suffix
from graphrag_pipeline.lib.sources.reader import ReadContext
from graphrag_pipeline.lib.sources.registry import read_source, scan_hashes

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def folder(path: Path, name: str = "docs") -> FolderSource:
    return FolderSource(name=name, path=str(path))


def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def by_id(scan) -> dict:
    return {document.doc_id: document for document in scan.documents}


def test_markdown_front_matter_becomes_metadata_and_title(tmp_path: Path) -> None:
    raw = "---\ntitle: Payments Outage\ntags: [payments, p1]\ndate: 2024-03-01\n---\n\n# Heading Title\n\nBody text.\n"
    write(tmp_path / "incidents" / "outage.md", raw)

    scan = read_folder(folder(tmp_path))

    document = by_id(scan)["docs:incidents/outage.md"]
    assert document.title == "Payments Outage"
    assert document.text == "# Heading Title\n\nBody text.\n"
    assert document.metadata["tags"] == ["payments", "p1"]
    assert document.metadata["date"] == "2024-03-01"  # YAML dates made JSON-safe
    assert document.metadata["path"] == "incidents/outage.md"
    assert document.metadata["extension"] == ".md"
    assert document.metadata["modified"].endswith("+00:00")
    assert document.content_hash == content_hash(raw)
    assert document.source == "docs"
    assert document.uri.startswith("file://") and document.uri.endswith("incidents/outage.md")
    assert scan.quarantined == ()


def test_markdown_title_falls_back_to_first_h1_outside_code_then_to_stem(tmp_path: Path) -> None:
    write(tmp_path / "a.md", "Intro line\n\n```bash\n# not a title\n```\n\n## Sub\n\n# Real Title #\n")
    write(tmp_path / "b.md", "no headings here\n")
    write(tmp_path / "c.txt", "# looks like markdown but this is text\n")

    documents = by_id(read_folder(folder(tmp_path)))

    assert documents["docs:a.md"].title == "Real Title"
    assert documents["docs:b.md"].title == "b"
    assert documents["docs:c.txt"].title == "c"
    assert documents["docs:c.txt"].text == "# looks like markdown but this is text\n"


def test_a_heading_of_markup_gives_the_title_a_reader_sees(tmp_path: Path) -> None:
    """The OpenTelemetry demo's README was titled `<img src="…" alt="OTel logo" width="45"> OpenTelemetry Demo`."""
    write(tmp_path / "otel.md", '# <img src="https://x.test/logo.png" alt="OTel logo" width="45"> OpenTelemetry Demo\n')
    write(tmp_path / "link.md", "# [Checkout](../checkout.md) `payments-api` **runbook**\n")
    write(tmp_path / "anchor.md", '# <a name="top"></a>\n\ntext\n\n# Second Heading\n')

    documents = by_id(read_folder(folder(tmp_path)))

    assert documents["docs:otel.md"].title == "OpenTelemetry Demo"
    assert documents["docs:link.md"].title == "Checkout payments-api runbook"
    assert documents["docs:anchor.md"].title == "Second Heading"  # a heading of markup alone names nothing


def test_invalid_front_matter_quarantines_the_document_and_withdraws_it(tmp_path: Path) -> None:
    # The block may say who can read the file, so nothing of the file is indexed until it is fixed.
    write(tmp_path / "broken.md", "---\ntitle: [unclosed\n---\n# Still Indexed\n\ntext\n")
    write(tmp_path / "list.md", "---\n- just\n- a list\n---\nbody\n")
    write(tmp_path / "fine.md", "---\ntitle: Fine\n---\nbody\n")

    scan = read_folder(folder(tmp_path))

    assert set(by_id(scan)) == {"docs:fine.md"}
    reasons = {record.item_id: record.reason for record in scan.quarantined}
    assert "invalid YAML front matter, not indexed" in reasons["docs:broken.md"]
    assert "not a mapping; not indexed" in reasons["docs:list.md"]
    assert all(record.stage == "sources" for record in scan.quarantined)
    assert scan.withdrawn == {"docs:broken.md", "docs:list.md"}
    assert set(scan.hashes) == {"docs:broken.md", "docs:list.md", "docs:fine.md"}  # a fix is seen as a change


def test_html_is_reduced_to_text_with_markdown_headings_and_no_scripts(tmp_path: Path) -> None:
    html = """<!DOCTYPE html><html><head><title>Checkout  Service</title>
    <style>body { color: red }</style><script>var secret = "tracking";</script></head>
    <body><!-- build 42 --><h1>Overview</h1><p>The checkout service
      calls the <b>payment</b> service.</p>
    <h2>Dependencies</h2><ul><li>cart</li><li>currency</li></ul>
    <pre>kubectl get pods\n  -n shop</pre><noscript>enable js</noscript></body></html>"""
    write(tmp_path / "site" / "checkout.html", html)

    document = by_id(read_folder(folder(tmp_path)))["docs:site/checkout.html"]

    assert document.title == "Checkout Service"
    assert document.text == (
        "# Overview\n\nThe checkout service calls the payment service.\n\n## Dependencies\n\n"
        "- cart\n- currency\n\nkubectl get pods\n  -n shop"
    )
    for leaked in ("secret", "color", "enable js", "build 42", "DOCTYPE"):
        assert leaked not in document.text
    assert document.content_hash == content_hash(html)


def test_html_title_falls_back_to_first_h1() -> None:
    title, text = html_to_text("<body><p>before</p><h1>First  <i>Heading</i></h1><h1>Second</h1></body>")
    assert title == "First Heading"
    assert text == "before\n\n# First Heading\n\n# Second"


def test_undecodable_file_is_quarantined_and_the_scan_continues(tmp_path: Path) -> None:
    write(tmp_path / "a.txt", "fine before")
    write(tmp_path / "b.txt", b"caf\xe9 in latin-1\n")
    write(tmp_path / "c.txt", "fine after")

    scan = read_folder(folder(tmp_path))

    assert [document.doc_id for document in scan.documents] == ["docs:a.txt", "docs:c.txt"]
    [record] = scan.quarantined
    assert record.item_id == "docs:b.txt"
    assert "not valid UTF-8" in record.reason and "byte 3" in record.reason
    assert set(scan.hashes) == {"docs:a.txt", "docs:b.txt", "docs:c.txt"}  # a fix to b.txt is still noticed


def test_bom_and_crlf_are_normalized_in_the_text_but_not_in_the_hash(tmp_path: Path) -> None:
    raw = "\ufeff---\r\ntitle: Windows\r\n---\r\nline one\r\nline two\r\n"
    write(tmp_path / "win.md", raw.encode("utf-8"))

    document = by_id(read_folder(folder(tmp_path)))["docs:win.md"]

    assert document.title == "Windows"
    assert document.text == "line one\nline two\n"
    assert document.content_hash == content_hash(raw)


def test_hidden_entries_and_other_extensions_are_skipped_in_sorted_order(tmp_path: Path) -> None:
    for name in ("z.md", "a/b.txt", "a/c.HTML", "image.png", ".hidden.md", ".git/config.md", "a/.cache/x.md"):
        write(tmp_path / name, "<p>x</p>" if name.lower().endswith(".html") else "x")

    scan = read_folder(folder(tmp_path))

    assert [document.doc_id for document in scan.documents] == ["docs:a/b.txt", "docs:a/c.HTML", "docs:z.md"]
    only_md = FolderSource(name="docs", path=str(tmp_path), extensions=("md",))
    assert [document.doc_id for document in read_folder(only_md).documents] == ["docs:z.md"]



def test_a_folder_named_relatively_or_with_a_trailing_slash_gives_the_same_doc_ids_paths_and_times(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("z.md", "a/b.txt", "a/deeper/c.md"):
        write(tmp_path / "docs" / name, "x")
    os.utime(tmp_path / "docs" / "z.md", (1_700_000_000, 1_700_000_000))
    monkeypatch.chdir(tmp_path / "docs")

    scans = [read_folder(folder(Path(path))) for path in (tmp_path / "docs", f"{tmp_path}/docs/", ".", "./", "../docs")]

    expected = ["docs:a/b.txt", "docs:a/deeper/c.md", "docs:z.md"]
    for scan in scans:
        assert [document.doc_id for document in scan.documents] == expected
        assert [document.metadata["path"] for document in scan.documents] == ["a/b.txt", "a/deeper/c.md", "z.md"]
        assert by_id(scan)["docs:z.md"].metadata["modified"] == "2023-11-14T22:13:20+00:00"
        assert scan.hashes == scans[0].hashes

@pytest.mark.parametrize("name", ["a.md", "A.MD", "a", "a.", "a..", "a.md.", "x.tar.gz", "a .md", "é.Md", ".", ".."])
def test_a_name_has_an_extension_as_pathlib_reads_it(name: str) -> None:
    for suffixes in ({".md"}, {"."}, {".gz", ".txt"}, {""}):
        assert has_suffix(name, suffixes) == (Path(name).suffix.lower() in suffixes)


def test_a_read_for_some_shards_parses_only_their_new_and_changed_files_and_hashes_every_file(tmp_path: Path) -> None:
    names = [f"doc-{i}.md" for i in range(12)]
    for name in names:
        write(tmp_path / name, f"# {name}\n\nfirst version\n")
    full = read_folder(folder(tmp_path))
    shard_of = {f"docs:{name}": stable_shard(f"docs:{name}", 4) for name in names}
    shard = shard_of["docs:doc-0.md"]
    in_shard = sorted(doc_id for doc_id, s in shard_of.items() if s == shard)
    assert len(in_shard) >= 2  # doc-0 and at least one other, or the test says nothing about unchanged files
    write(tmp_path / "doc-0.md", "# doc-0.md\n\nsecond version\n")
    known = {doc_id: full.hashes[doc_id] for doc_id in in_shard}

    class NoMarks:
        def source_marks(self, source, shards):
            return {}

        def record_source_marks(self, source, marks):
            raise AssertionError("a folder keeps no marks")

    context = ReadContext(shards=frozenset({shard}), marks=NoMarks(), shard_count=4, known=known)
    scan = read_folder(folder(tmp_path), context)

    assert [document.doc_id for document in scan.documents] == ["docs:doc-0.md"]  # the one edited file
    assert scan.documents[0].text == "# doc-0.md\n\nsecond version\n"
    assert scan.hashes == {**full.hashes, "docs:doc-0.md": scan.documents[0].content_hash}
    assert scan.hashes["docs:doc-0.md"] != full.hashes["docs:doc-0.md"]
    # Without the index's hashes every file of the shard is new to the read, and only those are parsed.
    fresh = read_folder(folder(tmp_path), ReadContext(shards=frozenset({shard}), marks=NoMarks(), shard_count=4))
    assert [document.doc_id for document in fresh.documents] == in_shard


def test_editing_keeps_the_doc_id_and_changes_the_hash_while_touching_changes_nothing(tmp_path: Path) -> None:
    path = write(tmp_path / "runbook.md", "# Title\n\nversion one\n")
    before = by_id(read_folder(folder(tmp_path)))["docs:runbook.md"]

    os.utime(path, (1_000_000_000, 1_000_000_000))
    touched = by_id(read_folder(folder(tmp_path)))["docs:runbook.md"]
    path.write_text("# Title\n\nversion two\n", encoding="utf-8")
    edited = by_id(read_folder(folder(tmp_path)))["docs:runbook.md"]

    assert touched.metadata["modified"] != before.metadata["modified"]
    assert touched.content_hash == before.content_hash
    assert edited.content_hash != before.content_hash


def test_cheap_hash_scan_agrees_with_the_documents(tmp_path: Path) -> None:
    write(tmp_path / "a.md", "---\ntitle: A\n---\nbody é\n")
    write(tmp_path / "b.html", "<h1>B</h1>")
    write(tmp_path / "c.txt", b"\xff\xfe")

    scan = read_folder(folder(tmp_path))
    hashes = scan_folder_hashes(folder(tmp_path))

    assert hashes == scan.hashes
    assert scan_hashes(folder(tmp_path)) == hashes
    assert all(hashes[document.doc_id] == document.content_hash for document in scan.documents)
    assert set(hashes) == {"docs:a.md", "docs:b.html", "docs:c.txt"}


def test_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_folder(folder(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        scan_folder_hashes(folder(tmp_path / "nope"))


def test_realistic_runbooks_folder() -> None:
    scan = read_source(folder(FIXTURES / "runbooks", name="runbooks"))

    documents = by_id(scan)
    assert sorted(documents) == ["runbooks:KubePodCrashLooping.md", "runbooks:NodeRAIDDegraded.md"]
    raid = documents["runbooks:NodeRAIDDegraded.md"]
    assert raid.title == "Node RAID Degraded"
    assert raid.metadata["weight"] == 20
    assert raid.text.startswith("# NodeRAIDDegraded\n\n## Meaning")
    assert scan.quarantined == ()


def eval_source(path: Path) -> EvalSetSource:
    return EvalSetSource(name="musique", path=str(path))


def test_eval_set_reads_passages_and_extractions_and_quarantines_the_broken_line() -> None:
    scan = read_source(eval_source(FIXTURES / "eval_set"))

    assert [document.doc_id for document in scan.documents] == [
        "musique:musique-0000",
        "musique:musique-0001",
        "musique:musique-0002",
    ]
    first = scan.documents[0]
    assert first.title == "Journal of Mathematical Physics"
    assert first.text.startswith("The Journal of Mathematical Physics is a peer-reviewed journal")
    assert first.metadata == {"source_id": "musique-0000"}
    assert first.source == "musique"
    [record] = scan.quarantined
    assert record.item_id == "musique:corpus.jsonl:3"
    assert "line 3" in record.reason and "invalid JSON" in record.reason
    assert "broken-0001" in record.raw
    assert set(scan.extractions) == {document.doc_id for document in scan.documents}
    extraction = scan.extractions["musique:musique-0000"]
    assert "Jan Philip Solovej" in extraction["entities"]
    assert ["Journal of Mathematical Physics", "published by", "American Institute of Physics"] in extraction["triples"]
    assert scan_hashes(eval_source(FIXTURES / "eval_set")) == {d.doc_id: d.content_hash for d in scan.documents}


def write_jsonl(path: Path, rows: list) -> None:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows), "utf-8")


def test_eval_set_validates_fields_ids_and_triples(tmp_path: Path) -> None:
    write_jsonl(
        tmp_path / "corpus.jsonl",
        [
            {"id": "p1", "title": "One", "text": "first"},
            {"id": "p2", "text": "no title"},
            {"id": "p1", "title": "Again", "text": "duplicate"},
            ["not", "an", "object"],
            "",
            {"id": 7, "title": "Seven", "text": "integer ids are fine"},
        ],
    )
    write_jsonl(
        tmp_path / "extraction.jsonl",
        [
            {"id": "p1", "entities": ["One"], "triples": [["One", "is", "first"]]},
            {"id": "ghost", "entities": [], "triples": []},
            {"id": 7, "entities": ["Seven"], "triples": [["Seven", "too short"]]},
        ],
    )

    scan = read_eval_set(eval_source(tmp_path))

    assert [document.doc_id for document in scan.documents] == ["musique:p1", "musique:7"]
    assert scan.documents[1].metadata["source_id"] == "7"
    assert scan.extractions == {"musique:p1": {"entities": ["One"], "triples": [["One", "is", "first"]]}}
    reasons = {record.item_id: record.reason for record in scan.quarantined}
    assert "missing field(s): title" in reasons["musique:corpus.jsonl:2"]
    assert "duplicate id 'p1' (first on line 1)" in reasons["musique:corpus.jsonl:3"]
    assert "expected a JSON object" in reasons["musique:corpus.jsonl:4"]
    assert "unknown passage id 'ghost'" in reasons["musique:extraction.jsonl:2"]
    assert "triples[0]" in reasons["musique:extraction.jsonl:3"]
    assert len(scan.quarantined) == 5


def test_eval_set_hash_follows_title_text_and_extraction(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "corpus.jsonl", [{"id": "p1", "title": "One", "text": "first"}])
    plain = read_eval_set(eval_source(tmp_path)).documents[0].content_hash
    write_jsonl(tmp_path / "extraction.jsonl", [{"id": "p1", "entities": ["One"], "triples": []}])
    with_extraction = read_eval_set(eval_source(tmp_path)).documents[0].content_hash
    write_jsonl(tmp_path / "corpus.jsonl", [{"id": "p1", "title": "Uno", "text": "first"}])
    retitled = read_eval_set(eval_source(tmp_path)).documents[0].content_hash

    assert len({plain, with_extraction, retitled}) == 3


def test_eval_set_without_corpus_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="corpus.jsonl"):
        read_eval_set(eval_source(tmp_path))


def test_generic_file_names_take_their_folder_as_title(tmp_path):
    (tmp_path / "payment").mkdir()
    (tmp_path / "payment" / "README.md").write_text("This service processes card payments.\n")
    (tmp_path / "notes.txt").write_text("plain notes\n")
    titles = {d.doc_id: d.title for d in read_folder(folder(tmp_path)).documents}
    assert titles == {"docs:payment/README.md": "payment README", "docs:notes.txt": "notes"}


def test_a_git_checkout_reports_the_revision_it_was_read_at(tmp_path):
    import subprocess

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "runbook.md").write_text("# Runbook\n\nRestart it.\n")
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "first"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()

    scan = read_source(FolderSource(name="rb", path=str(tmp_path / "docs")))

    assert scan.revision == head and len(head) == 40
