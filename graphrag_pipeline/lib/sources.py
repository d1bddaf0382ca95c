"""Reading configured sources into ``Document`` records.

Four kinds of source:

* ``folder``: files under a directory. Markdown (``.md``, ``.markdown``) has its YAML front matter moved into
  ``metadata`` (the reader's own keys ``path``, ``extension`` and ``modified`` take precedence); HTML (``.html``,
  ``.htm``) is reduced to text with headings kept as ``#`` lines so the recursive chunker still sees the
  structure; every other configured extension is read as plain text. Files must be UTF-8 (a BOM is fine).
* ``eval_set``: a benchmark folder with ``corpus.jsonl`` passages and, optionally, ``extraction.jsonl`` with
  precomputed entities and triples per passage.
* ``confluence``: pages of Confluence spaces over the Cloud or Data Center REST API (``lib.confluence``). There,
  ``scan_hashes`` and ``SourceScan.hashes`` hold version markers (from the page's version number, listed without
  bodies) rather than the documents' content hashes; both agree, so sensors compare them directly. Incremental reads
  (only pages modified since a time) are ``lib.confluence.read_confluence(source, since=...)``.
* ``catalog``: a service-catalog YAML or Backstage ``catalog-info.yaml`` file (or a folder of them): one document per
  catalog entity, with its typed nodes and edges as an exact extraction record (``lib.catalogs``).

Readers never crash on one bad input: a file that is not UTF-8, a front matter block that is not valid YAML or a
malformed JSON line becomes a ``Quarantined`` record with the reason, and the scan goes on.

Identity and change detection: a document's id is its source name plus its path (folders) or passage id (eval
sets), so an edited file keeps its id. Its ``content_hash`` covers everything that feeds later stages; for files it
is ``content_hash(raw file text)``, which equals the cheap byte hash from ``scan_folder_hashes`` so a sensor cursor
and the indexed documents can be compared directly. The modification time is metadata only: touching a file does
not make it "changed".
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from bs4 import BeautifulSoup, NavigableString, Tag
from bs4.element import PreformattedString

from graphrag_pipeline.lib.config import SourceConfig
from graphrag_pipeline.lib.ids import content_hash
from graphrag_pipeline.lib.models import Document, Quarantined

STAGE = "sources"
MARKDOWN_SUFFIXES = frozenset({".md", ".markdown"})
HTML_SUFFIXES = frozenset({".html", ".htm"})
CORPUS_FILE = "corpus.jsonl"
EXTRACTION_FILE = "extraction.jsonl"
_RAW_EXCERPT = 2000  # enough of a bad line to diagnose it without copying huge payloads into the quarantine


@dataclass(frozen=True, slots=True)
class SourceScan:
    """Everything one source yielded.

    ``hashes`` maps every file or passage seen (including quarantined, unreadable ones) to its content hash, so a
    caller can store it as the baseline the next change scan is compared against.
    """

    documents: tuple[Document, ...]
    quarantined: tuple[Quarantined, ...]
    hashes: dict[str, str] = field(default_factory=dict)
    extractions: dict[str, dict[str, Any]] = field(default_factory=dict)  # doc_id -> {"entities", "triples"}
    revision: str | None = None  # the git commit a folder was read at, when it is a git checkout


def read_source(source: SourceConfig) -> SourceScan:
    if source.kind == "folder":
        return read_folder(source)
    if source.kind == "eval_set":
        return read_eval_set(source)
    if source.kind == "confluence":
        from graphrag_pipeline.lib.confluence import read_confluence  # imports this module; httpx only when used

        return read_confluence(source)
    if source.kind == "catalog":
        from graphrag_pipeline.lib.catalogs import read_catalog  # imports this module

        return read_catalog(source)
    raise ValueError(f"source {source.name!r}: unknown kind {source.kind!r}")


def scan_hashes(source: SourceConfig) -> dict[str, str]:
    """doc_id -> change hash for any source kind, equal to ``read_source(source).hashes`` (the documents'
    ``content_hash`` for folders and eval sets; version markers, fetched without bodies, for Confluence)."""
    if source.kind == "folder":
        return scan_folder_hashes(source)
    if source.kind == "confluence":
        from graphrag_pipeline.lib.confluence import scan_confluence_hashes

        return scan_confluence_hashes(source)
    if source.kind == "catalog":
        from graphrag_pipeline.lib.catalogs import scan_catalog_hashes

        return scan_catalog_hashes(source)
    return read_source(source).hashes


# --------------------------------------------------------------------------------------------------------- folders


def scan_folder_hashes(source: SourceConfig) -> dict[str, str]:
    """Cheap change scan for sensors: doc_id -> hash of the raw bytes, without decoding or parsing anything."""
    root = _folder_root(source)
    hashes: dict[str, str] = {}
    for path in _source_files(source, root):
        try:
            hashes[_doc_id(source, root, path)] = _with_access(source, _bytes_hash(path.read_bytes()))
        except OSError as error:
            hashes[_doc_id(source, root, path)] = _unreadable_marker(error)
    return hashes


def read_folder(source: SourceConfig) -> SourceScan:
    root = _folder_root(source)
    documents: list[Document] = []
    quarantined: list[Quarantined] = []
    hashes: dict[str, str] = {}
    for path in _source_files(source, root):
        doc_id = _doc_id(source, root, path)
        try:
            data = path.read_bytes()
            modified = path.stat().st_mtime
        except OSError as error:
            hashes[doc_id] = _unreadable_marker(error)
            quarantined.append(Quarantined(STAGE, doc_id, f"cannot read {path}: {error}"))
            continue
        hashes[doc_id] = _with_access(source, _bytes_hash(data))
        try:
            raw_text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            # Guessing another encoding would index mojibake without anyone noticing; the user should convert it.
            reason = f"not valid UTF-8 ({error.reason} at byte {error.start}); convert the file to UTF-8"
            quarantined.append(Quarantined(STAGE, doc_id, reason))
            continue
        document, problems = _parse_file(source, root, path, doc_id, raw_text, modified)
        documents.append(document)
        quarantined.extend(problems)
    return SourceScan(documents=tuple(documents), quarantined=tuple(quarantined), hashes=hashes,
                      revision=git_revision(root))


def git_revision(folder: Path) -> str | None:
    """The commit checked out in the git work tree holding ``folder`` (read from .git, no git binary needed), or None.
    Changes are still found by content hash; the revision says which commit a run's documents came from."""
    for directory in (folder, *folder.parents):
        git = directory / ".git"
        if git.is_file():  # a worktree or submodule: "gitdir: <path>"
            git = (directory / git.read_text().split(":", 1)[1].strip()).resolve()
        if not git.is_dir():
            continue
        try:
            head = (git / "HEAD").read_text().strip()
            if not head.startswith("ref: "):
                return head  # detached HEAD
            ref = head[5:]
            if (git / ref).is_file():
                return (git / ref).read_text().strip()
            packed = git / "packed-refs"
            for line in packed.read_text().splitlines() if packed.is_file() else ():
                if line.endswith(f" {ref}"):
                    return line.split(" ", 1)[0]
        except OSError:
            return None
        return None
    return None


def _folder_root(source: SourceConfig) -> Path:
    root = Path(source.path)
    if not root.is_dir():
        raise FileNotFoundError(f"source {source.name!r}: folder {root} does not exist")
    return root


def _source_files(source: SourceConfig, root: Path) -> list[Path]:
    """Files with a configured extension, hidden files and folders skipped, in a deterministic order."""
    suffixes = {ext.lower() if ext.startswith(".") else f".{ext.lower()}" for ext in source.extensions}
    found: list[Path] = []
    for directory, dirnames, filenames in os.walk(root):
        dirnames[:] = [name for name in dirnames if not name.startswith(".")]
        for name in filenames:
            path = Path(directory, name)
            if not name.startswith(".") and path.suffix.lower() in suffixes:
                found.append(path)
    return sorted(found, key=lambda path: path.relative_to(root).as_posix())


def _doc_id(source: SourceConfig, root: Path, path: Path) -> str:
    return f"{source.name}:{path.relative_to(root).as_posix()}"


def _unreadable_marker(error: OSError) -> str:
    # Stands in for the hash so that the file becoming readable again shows up as a change.
    return f"unreadable:{error.errno}"


def _bytes_hash(data: bytes) -> str:
    # Same construction as ids.content_hash over the decoded text, so both hashes agree for every UTF-8 file.
    return hashlib.sha256(data + b"\x1f").hexdigest()


def _with_access(source: SourceConfig, digest: str) -> str:
    """A folder's configured access groups are part of each file's identity: granting or revoking them re-ingests
    the files (and the cheap sensor scan sees the same change)."""
    return content_hash(digest, *sorted(source.access_groups)) if source.access_groups else digest


def _parse_file(
    source: SourceConfig, root: Path, path: Path, doc_id: str, raw_text: str, modified: float
) -> tuple[Document, list[Quarantined]]:
    text = raw_text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    suffix = path.suffix.lower()
    problems: list[Quarantined] = []
    front_matter: dict[str, Any] = {}
    if suffix in MARKDOWN_SUFFIXES:
        text, front_matter, problem = _split_front_matter(text, doc_id)
        if problem is not None:
            problems.append(problem)
        title = _text_title(front_matter.get("title")) or _first_markdown_h1(text) or _file_title(path)
    elif suffix in HTML_SUFFIXES:
        html_title, text = html_to_text(text)
        title = html_title or _file_title(path)
    else:
        title = _file_title(path)
    metadata = {
        # Front matter may restrict one file further; otherwise the folder's configured groups apply.
        **({"access_groups": list(source.access_groups)} if source.access_groups else {}),
        **_json_safe(front_matter),
        "path": path.relative_to(root).as_posix(),
        "extension": suffix,
        "modified": dt.datetime.fromtimestamp(modified, tz=dt.timezone.utc).isoformat(timespec="seconds"),
    }
    document = Document(
        doc_id=doc_id,
        source=source.name,
        uri=path.resolve().as_uri(),
        title=title,
        text=text,
        content_hash=_with_access(source, content_hash(raw_text)),
        metadata=metadata,
    )
    return document, problems


_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?)^(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.DOTALL | re.MULTILINE)


def _split_front_matter(text: str, doc_id: str) -> tuple[str, dict[str, Any], Quarantined | None]:
    """(body, front matter, problem). Invalid front matter stays in the body so the document is still indexed."""
    match = _FRONT_MATTER.match(text)
    if match is None:
        return text, {}, None
    block = match.group(1)
    try:
        data = yaml.safe_load(block)
    except yaml.YAMLError as error:
        reason = f"invalid YAML front matter, indexed with the front matter left in the text: {error}"
        return text, {}, Quarantined(STAGE, doc_id, reason, raw=block[:_RAW_EXCERPT])
    if data is None:
        data = {}
    if not isinstance(data, dict):
        reason = f"front matter is a {type(data).__name__}, not a mapping; indexed with it left in the text"
        return text, {}, Quarantined(STAGE, doc_id, reason, raw=block[:_RAW_EXCERPT])
    return text[match.end() :].lstrip("\n"), {str(key): value for key, value in data.items()}, None


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_H1 = re.compile(r"^ {0,3}#[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$")


def _first_markdown_h1(text: str) -> str | None:
    fence: str | None = None
    for line in text.split("\n"):
        opening = _FENCE.match(line)
        if opening is not None:
            marker = opening.group(1)
            if fence is None:
                fence = marker
            elif marker[0] == fence[0] and len(marker) >= len(fence):
                fence = None
            continue
        if fence is None and (heading := _H1.match(line)):
            return heading.group(1).strip()
    return None


_GENERIC_STEMS = frozenset({"readme", "index", "_index", "overview", "main"})


def _file_title(path: Path) -> str:
    """Title from the file name; "README" or "index" says nothing, so those take their folder's name too."""
    if path.stem.casefold() in _GENERIC_STEMS:
        return f"{path.parent.name} {path.stem}"
    return path.stem


def _text_title(value: Any) -> str:
    return str(value).strip() if value is not None else ""


def _json_safe(value: Any) -> Any:
    """YAML gives dates, sets and arbitrary keys; payload stores and the Dagster metadata want plain JSON."""
    if isinstance(value, dict):
        return {str(key): _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_json_safe(item) for item in value]
    if isinstance(value, (dt.date, dt.datetime, dt.time)):
        return value.isoformat()
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


# ------------------------------------------------------------------------------------------------------------ html

_DROPPED_TAGS = frozenset({"script", "style", "noscript", "template", "head", "svg", "iframe", "object"})
_HEADING_TAGS = {f"h{level}": level for level in range(1, 7)}
_BLOCK_TAGS = frozenset(
    {
        "address", "article", "aside", "blockquote", "body", "dd", "details", "div", "dl", "dt", "fieldset",
        "figcaption", "figure", "footer", "form", "header", "hr", "html", "main", "nav", "ol", "p", "section",
        "summary", "table", "tbody", "thead", "tfoot", "tr", "ul",
    }
)  # fmt: skip
_SPACES = re.compile(r"[ \t\n\r\f\v]+")


def html_to_text(html: str) -> tuple[str, str]:
    """(title, text): readable text with one block per paragraph and headings as markdown ``#`` lines."""
    soup = BeautifulSoup(html, "html.parser")
    title = ""
    if soup.title is not None:
        title = _collapse(soup.title.get_text(" "))
    if not title and (h1 := soup.find("h1")) is not None:
        title = _collapse(h1.get_text(" "))
    writer = _BlockWriter()
    writer.walk(soup)
    return title, writer.text()


def _collapse(text: str) -> str:
    return _SPACES.sub(" ", text).strip()


class _BlockWriter:
    """Flattens an HTML tree into blank-line separated blocks, which the chunker treats as paragraphs."""

    def __init__(self) -> None:
        self._blocks: list[str] = []
        self._line: list[str] = []
        self._lines: list[str] = []

    def walk(self, node: Tag) -> None:
        for child in node.children:
            if isinstance(child, PreformattedString):  # comments, doctype, CDATA, processing instructions
                continue
            if isinstance(child, NavigableString):
                self._line.append(str(child))
            elif isinstance(child, Tag):
                self._tag(child)

    def _tag(self, tag: Tag) -> None:
        name = tag.name.lower()
        if name in _DROPPED_TAGS:
            return
        if name == "br":
            self._end_line()
        elif name in _HEADING_TAGS:
            self._end_block()
            heading = _collapse(tag.get_text(" "))
            if heading:
                self._blocks.append(f"{'#' * _HEADING_TAGS[name]} {heading}")
        elif name == "pre":
            self._end_block()
            code = tag.get_text().strip("\n")
            if code.strip():
                self._blocks.append(code)
        elif name == "li":
            # Items are lines of one block, so a whole list stays one paragraph for the chunker.
            self._end_line()
            self._line.append("- ")
            self.walk(tag)
            self._end_line()
        elif name in _BLOCK_TAGS:
            self._end_block()
            self.walk(tag)
            self._end_block()
        elif name in {"td", "th"}:
            self.walk(tag)
            self._line.append(" ")
        else:
            self.walk(tag)

    def _end_line(self) -> None:
        line = _collapse("".join(self._line))
        self._line = []
        if line and line != "-":
            self._lines.append(line)

    def _end_block(self) -> None:
        self._end_line()
        if self._lines:
            self._blocks.append("\n".join(self._lines))
        self._lines = []

    def text(self) -> str:
        self._end_block()
        return "\n\n".join(self._blocks)


# ------------------------------------------------------------------------------------------------------- eval sets


def read_eval_set(source: SourceConfig) -> SourceScan:
    """Passages from ``corpus.jsonl`` (``{"id", "title", "text"}`` per line) and optional ``extraction.jsonl``.

    A passage's content hash covers its title, text and precomputed extraction: a change to any of them has to
    reach the graph.
    """
    root = Path(source.path)
    corpus_path = root / CORPUS_FILE
    if not corpus_path.is_file():
        raise FileNotFoundError(f"source {source.name!r}: {corpus_path} does not exist")
    quarantined: list[Quarantined] = []
    passages: dict[str, tuple[str, str, str]] = {}  # doc_id -> (source id, title, text)
    first_line: dict[str, int] = {}
    for line_no, record in _jsonl_records(source, corpus_path, quarantined):
        problem = _corpus_record_problem(record)
        if problem is None:
            doc_id = f"{source.name}:{record['id']}"
            if doc_id in first_line:
                problem = f"duplicate id {record['id']!r} (first on line {first_line[doc_id]})"
        if problem is not None:
            quarantined.append(_line_quarantine(source, corpus_path, line_no, problem, record))
            continue
        first_line[doc_id] = line_no
        passages[doc_id] = (str(record["id"]), record["title"], record["text"])

    extractions: dict[str, dict[str, Any]] = {}
    extraction_path = root / EXTRACTION_FILE
    if extraction_path.is_file():
        for line_no, record in _jsonl_records(source, extraction_path, quarantined):
            problem = _extraction_record_problem(record)
            if problem is None:
                doc_id = f"{source.name}:{record['id']}"
                if doc_id not in passages:
                    problem = f"extraction for unknown passage id {record['id']!r}"
                elif doc_id in extractions:
                    problem = f"duplicate extraction for passage id {record['id']!r}"
            if problem is not None:
                quarantined.append(_line_quarantine(source, extraction_path, line_no, problem, record))
                continue
            extractions[doc_id] = {
                "entities": list(record["entities"]),
                "triples": [list(triple) for triple in record["triples"]],
            }

    corpus_uri = corpus_path.resolve().as_uri()
    documents: list[Document] = []
    for doc_id, (source_id, title, text) in passages.items():
        extraction = extractions.get(doc_id)
        extraction_key = json.dumps(extraction, sort_keys=True) if extraction is not None else ""
        documents.append(
            Document(
                doc_id=doc_id,
                source=source.name,
                uri=f"{corpus_uri}#{source_id}",
                title=title,
                text=text,
                content_hash=content_hash(title, text, extraction_key),
                metadata={"source_id": source_id},
            )
        )
    return SourceScan(
        documents=tuple(documents),
        quarantined=tuple(quarantined),
        hashes={document.doc_id: document.content_hash for document in documents},
        extractions=extractions,
    )


def _jsonl_records(source: SourceConfig, path: Path, quarantined: list[Quarantined]) -> list[tuple[int, Any]]:
    """(line number, parsed value) for every non-blank line; undecodable lines are quarantined here."""
    records: list[tuple[int, Any]] = []
    with path.open("rb") as handle:
        for line_no, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError as error:
                problem = f"not valid UTF-8 ({error.reason} at byte {error.start})"
                quarantined.append(_line_quarantine(source, path, line_no, problem, None))
                continue
            if not line:
                continue
            try:
                records.append((line_no, json.loads(line)))
            except json.JSONDecodeError as error:
                problem = f"invalid JSON: {error.msg} at column {error.colno}"
                quarantined.append(_line_quarantine(source, path, line_no, problem, line))
    return records


def _corpus_record_problem(record: Any) -> str | None:
    if not isinstance(record, dict):
        return f"expected a JSON object, got {type(record).__name__}"
    missing = [key for key in ("id", "title", "text") if key not in record]
    if missing:
        return f"missing field(s): {', '.join(missing)}"
    if not _valid_id(record["id"]):
        return "field 'id' must be a non-empty string or an integer"
    for key in ("title", "text"):
        if not isinstance(record[key], str):
            return f"field {key!r} must be a string, got {type(record[key]).__name__}"
    return None


def _extraction_record_problem(record: Any) -> str | None:
    if not isinstance(record, dict):
        return f"expected a JSON object, got {type(record).__name__}"
    missing = [key for key in ("id", "entities", "triples") if key not in record]
    if missing:
        return f"missing field(s): {', '.join(missing)}"
    if not _valid_id(record["id"]):
        return "field 'id' must be a non-empty string or an integer"
    entities, triples = record["entities"], record["triples"]
    if not isinstance(entities, list) or not all(isinstance(name, str) for name in entities):
        return "field 'entities' must be a list of strings"
    if not isinstance(triples, list):
        return "field 'triples' must be a list"
    for index, triple in enumerate(triples):
        if not (isinstance(triple, list) and len(triple) == 3 and all(isinstance(part, str) for part in triple)):
            return f"triples[{index}] must be a [subject, predicate, object] list of strings"
    return None


def _valid_id(value: Any) -> bool:
    return (isinstance(value, str) and value.strip() != "") or (isinstance(value, int) and not isinstance(value, bool))


def _line_quarantine(source: SourceConfig, path: Path, line_no: int, problem: str, record: Any) -> Quarantined:
    if record is None:
        raw = ""
    elif isinstance(record, str):
        raw = record
    else:
        raw = json.dumps(record, ensure_ascii=False)
    return Quarantined(
        stage=STAGE,
        item_id=f"{source.name}:{path.name}:{line_no}",
        reason=f"{path.name} line {line_no}: {problem}",
        raw=raw[:_RAW_EXCERPT],
    )
